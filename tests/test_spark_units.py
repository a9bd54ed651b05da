"""The Spark data source's parts that need no JVM: option parsing and column mapping with
their errors, the identity scheme (publisher names, tags, the attach declaration's size), and
`publish_partition` -- what each executor task runs -- against a real router: a retried task
resends under the same identity and counts once, a progress marker skips a partition whose
rows the mesh has forgotten, a rejected row fails the task naming topic and subscriber.
Logging in (TLS and SASL PLAIN against a router with a password file and an ACL): the log-in
options' errors, the password kept out of reprs, errors and log lines, a refused log-in
failing at once."""

from __future__ import annotations

import logging
import pickle
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from proton import Data, symbol

from amqp_edge.client import RESUME_KEY, Login, Subscriber
from spark_connector.options import (
    KNOWN,
    MAX_ROWS_PER_LINK,
    OptionError,
    Secret,
    SinkOptions,
    parse_options,
    plan_columns,
)
from spark_connector.publish import (
    PartitionId,
    PublishError,
    marker_path,
    prune_markers,
    publish_partition,
    read_marker,
    row_messages,
    write_marker,
)
from tests.harness import RouterProcess, wait_for
from tests.harness import Subscriber as RawSubscriber
from tests.mesh_harness import start_clients, stop_clients

URL = "amqp://127.0.0.1:5672"


# ---------------------------------------------------------------------------- options


def test_options_parsed_case_insensitively_with_defaults() -> None:
    o = parse_options({"URL": "127.0.0.1:1,amqp://h2:2", "Topic": "a/b", "ttl": "1.5",
                       "properties": "region, amount", "checkpointLocation": "file:///c/k"})
    assert o.urls == ["amqp://127.0.0.1:1", "amqp://h2:2"]
    assert o.topic == "a/b" and o.ttl == 1.5 and o.properties == ("region", "amount")
    assert o.progress_dir == "/c/k/exactmesh-progress"
    assert o.window == 256 and o.rows_per_link == 2000 and o.timeout == 300.0
    assert parse_options({"url": URL, "progressDir": "none",
                          "checkpointLocation": "/c"}).progress_dir is None
    assert parse_options({"url": URL, "progressDir": "/p"}).progress_dir == "/p"


@pytest.mark.parametrize(("options", "says"), [
    ({}, "option url is required"),
    ({"url": "http://h:1"}, "scheme 'http' is not amqp"),
    ({"url": "amqp://h:1,"}, "no router URL given"),
    ({"url": URL, "topc": "a"}, "unknown option(s) topc"),
    ({"url": URL, "topic": "a/#"}, "option topic='a/#' is not a topic"),
    ({"url": URL, "ttl": "soon"}, "option ttl='soon' is not a number"),
    ({"url": URL, "ttl": "0"}, "must be at least"),
    ({"url": URL, "window": "1000"}, "between 1 and 256"),
    ({"url": URL, "rowsPerLink": "5000"}, "between 1 and 2500"),
    ({"url": URL, "id": "a b"}, "option id='a b'"),
    ({"url": URL, "checkpointLocation": "hdfs://nn/chk"}, "set option progressDir"),
])
def test_option_errors_say_what_to_do(options: dict, says: str) -> None:
    with pytest.raises(OptionError) as err:
        parse_options(options)
    assert says in str(err.value)


def test_columns_map_to_body_topic_and_properties() -> None:
    opts = parse_options({"url": URL, "properties": "region,key"})
    plan = plan_columns(["topic", "key", "value", "region"], opts)
    assert plan.body == 2 and plan.topic == 0
    assert plan.properties == (("key", 1), ("region", 3))
    assert plan_columns(["body"], parse_options({"url": URL, "topic": "t"})).body == 0
    with pytest.raises(OptionError, match="needs a column named value"):
        plan_columns(["payload"], parse_options({"url": URL, "topic": "t"}))
    with pytest.raises(OptionError, match="needs a topic"):
        plan_columns(["value"], parse_options({"url": URL}))
    with pytest.raises(OptionError, match="names column 'amount'"):
        plan_columns(["value"], parse_options({"url": URL, "topic": "t",
                                               "properties": "amount"}))


# ---------------------------------------------------------------------------- logging in

PASSWORD = "Spark wonder-land 7Q"
TLS_URL = "amqps://127.0.0.1:5671"


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA file, a client certificate and key, and files that are not what they say."""
    import trustme

    folder = tmp_path_factory.mktemp("pem")
    ca, other = trustme.CA(), trustme.CA()
    paths = {name: str(folder / name) for name in ("ca.pem", "client.crt", "client.key",
                                                     "other.key", "junk.pem", "pw", "empty")}
    ca.cert_pem.write_to_path(paths["ca.pem"])
    issued = ca.issue_cert("spark@example.com")
    issued.cert_chain_pems[0].write_to_path(paths["client.crt"])
    issued.private_key_pem.write_to_path(paths["client.key"])
    other.issue_cert("x@example.com").private_key_pem.write_to_path(paths["other.key"])
    Path(paths["junk.pem"]).write_text("not a certificate\n")
    Path(paths["pw"]).write_text(PASSWORD + "\r\nsecond line\n")
    Path(paths["empty"]).write_text("\n" + PASSWORD)
    paths["missing"] = str(folder / "missing.pem")
    return paths


def test_log_in_options_become_the_sdks_login(pem: dict[str, str]) -> None:
    o = parse_options({"url": TLS_URL, "User": "spark", "passwordFile": pem["pw"],
                       "tlsCA": pem["ca.pem"], "tlsCert": pem["client.crt"],
                       "tlsKey": pem["client.key"], "tlsVerifyName": "FALSE"})
    login = o.login()
    assert login is not None and login.password == PASSWORD  # the first line, spaces kept
    assert (login.user, login.ca, login.cert, login.key) == \
        ("spark", pem["ca.pem"], pem["client.crt"], pem["client.key"])
    assert login.verify_name is False and login.plain_in_clear is False
    clear = parse_options({"url": URL, "user": "spark", "password": PASSWORD,
                           "plainInClear": "true"}).login()
    assert clear is not None and clear.plain_in_clear and clear.ca is None
    # amqps:// without tlsCA: proton's default, the system's CAs and the name checked.
    system = parse_options({"url": TLS_URL, "user": "spark", "password": PASSWORD}).login()
    assert system is not None and system.ca is None and system.verify_name
    assert parse_options({"url": TLS_URL}).login() is None
    assert parse_options({"url": URL}).login() is None
    assert {"user", "password", "passwordfile", "tlsca", "tlscert", "tlskey", "plaininclear",
            "tlsverifyname"} <= set(KNOWN)


def test_the_password_is_in_no_repr_and_survives_pickling(pem: dict[str, str]) -> None:
    for options in ({"password": PASSWORD}, {"passwordFile": pem["pw"]}):
        o = parse_options({"url": TLS_URL, "user": "spark", **options})
        for text in (repr(o), str(o), repr(o.password), str(o.password), f"{o.password}",
                     repr(o.login()), str(o.__dict__)):
            assert PASSWORD not in text, text
        assert "spark" in repr(o) and "***" in repr(o.password)
        again = pickle.loads(pickle.dumps(o))  # as the writer goes to the executors
        assert again == o and again.login() == o.login()
        assert again.login().password == PASSWORD
    assert Secret("a") != Secret("b") and Secret("a") == Secret("a")


def test_log_in_option_errors_say_what_to_do(pem: dict[str, str]) -> None:
    tls = {"url": TLS_URL, "user": "spark", "password": PASSWORD}
    cases = [
        ({"url": TLS_URL, "password": PASSWORD}, "option password needs option user"),
        ({"url": TLS_URL, "passwordFile": pem["pw"]}, "option passwordFile needs option user"),
        ({**tls, "passwordFile": pem["pw"]}, "options password and passwordFile both"),
        ({"url": TLS_URL, "user": "spark"}, "option user='spark' needs a password"),
        ({"url": URL, "user": "spark", "password": PASSWORD},
         "the password goes only over TLS, and amqp://127.0.0.1:5672 is in clear"),
        ({"url": f"{TLS_URL},{URL}", "user": "spark", "password": PASSWORD},
         "write the router URLs as amqps://"),
        ({**tls, "plainInClear": "yes"}, "option plainInClear='yes' must be true or false"),
        ({"url": URL, "plainInClear": "true"}, "option plainInClear=true is about sending"),
        ({**tls, "tlsCert": pem["client.crt"]}, "options tlsCert and tlsKey go together"),
        ({**tls, "tlsKey": pem["client.key"]}, "options tlsCert and tlsKey go together"),
        ({**tls, "tlsVerifyName": "false"}, "option tlsVerifyName=false needs option tlsCA"),
        ({**tls, "tlsVerifyName": "no"}, "option tlsVerifyName='no' must be true or false"),
        ({"url": URL, "tlsCA": pem["ca.pem"]}, "amqp://127.0.0.1:5672 is not amqps://"),
        ({**tls, "tlsCA": pem["missing"]}, "option tlsCA: cannot read"),
        ({**tls, "tlsCA": pem["junk.pem"]}, "is not a PEM file of CA certificates"),
        ({**tls, "tlsCert": pem["client.crt"], "tlsKey": pem["other.key"]},
         "are not a PEM certificate chain and its unencrypted private key"),
        ({**tls, "tlsCert": pem["missing"], "tlsKey": pem["client.key"]},
         "option tlsCert: cannot read"),
        ({"url": TLS_URL, "user": "spark", "passwordFile": pem["missing"]},
         "option passwordFile: cannot read"),
        ({"url": TLS_URL, "user": "spark", "passwordFile": pem["empty"]},
         "the first line of"),
    ]
    for options, says in cases:
        with pytest.raises(OptionError) as err:
            parse_options(options)
        assert says in str(err.value), (options, str(err.value))
        assert PASSWORD not in str(err.value)
    with pytest.raises(OptionError) as err:
        parse_options({"url": TLS_URL, "pasword": PASSWORD})  # misspelt: named, not shown
    assert "unknown option(s) pasword" in str(err.value) and PASSWORD not in str(err.value)


# ---------------------------------------------------------------------------- identity


def test_identity_is_derived_from_query_batch_partition_chunk_and_topic() -> None:
    q = "0b7c6c5e-5a5f-4d0e-9a43-1f0b3f0a2c11"
    names = {PartitionId(q, b, p).publisher_name(c, t)
             for b in (0, 1) for p in (0, 1) for c in (0, 1) for t in ("a", "b")}
    assert len(names) == 16
    name = PartitionId(q, 7, 3).publisher_name(2, "orders/eu")
    assert name == PartitionId(q, 7, 3).publisher_name(2, "orders/eu")  # deterministic
    assert name.startswith(f"spark-{q}-7-3-2-") and len(name) <= 200


def test_rows_become_chunks_with_row_index_tags() -> None:
    opts = SinkOptions([URL], "t", rows_per_link=3)
    plan = plan_columns(["value", "topic"], opts)
    rows = [(f"r{i}", "x" if i % 2 else None) for i in range(7)]
    chunks = list(row_messages(rows, plan, opts, PartitionId("q", 0, 0)))
    assert [c.index for c in chunks] == [0, 1, 2]
    assert [c.rows for c in chunks] == [3, 3, 1]
    assert {t: [s for s, _ in m] for t, m in chunks[0].by_topic.items()} == \
        {"t": [1, 3], "x": [2]}
    assert [s for s, _ in chunks[2].by_topic["t"]] == [7]
    later = list(row_messages(rows, plan, opts, PartitionId("q", 0, 0), skip=4))
    assert [(c.index, c.rows, c.end) for c in later] == [(1, 2, 6), (2, 1, 7)]


def test_a_full_link_declaration_fits_one_attach_frame() -> None:
    """rowsPerLink's bound: the largest declaration (2,500 tags of 9 digits, rows near 10^9
    in a partition) and the link's names stay well under the router's 32 KiB frame."""
    tags = [str(999_000_000 + i).encode() for i in range(MAX_ROWS_PER_LINK)]
    data = Data()
    data.put_object({RESUME_KEY: {"unsettled": tags}})
    size = len(data.encode())
    name = PartitionId("0b7c6c5e-5a5f-4d0e-9a43-1f0b3f0a2c11", 10**7, 10**5) \
        .publisher_name(10**6, "x" * 200)
    assert size + 2 * len(name) + 2 * 200 + 512 < 32 * 1024, size


def test_markers_are_written_read_and_pruned(tmp_path: Path) -> None:
    pid = PartitionId("q1", 4, 1)
    assert read_marker(str(tmp_path), pid) is None
    write_marker(str(tmp_path), pid, {"rows": 3, "accepted": 3})
    assert read_marker(str(tmp_path), pid) == {"rows": 3, "accepted": 3}
    assert Path(marker_path(str(tmp_path), pid)).parent.name == "4"
    write_marker(str(tmp_path), PartitionId("q1", 5, 0), {"rows": 1})
    assert prune_markers(str(tmp_path), "q1", 5) == 1
    assert read_marker(str(tmp_path), pid) is None
    assert read_marker(str(tmp_path), PartitionId("q1", 5, 0)) == {"rows": 1}


# ---------------------------------------------------------------------------- publishing


def _rows(n: int, fail_after: int | None = None) -> Iterator[tuple[str, str]]:
    for i in range(n):
        if fail_after is not None and i == fail_after:
            raise RuntimeError("injected: the task dies here")
        yield (f"row-{i}", str(i % 7))


def _opts(router: RouterProcess, **kw: object) -> SinkOptions:
    return SinkOptions([f"amqp://{router.url}"], "spark/t", timeout=30.0, **kw)  # type: ignore[arg-type]


def test_a_retried_partition_counts_once_through_the_mesh_alone() -> None:
    """No progress markers: a task that died with two chunks accepted and two on the wire is
    run again; it sends every row again under the same identity, declared, and the mesh (its
    tombstones and the records it adopts) delivers each once."""
    with RouterProcess("A") as router:
        sub = RawSubscriber(f"amqp://{router.url}", "spark/#", name="raw", credit=600)
        client = start_clients(sub)
        try:
            opts = _opts(router, rows_per_link=100)
            plan = plan_columns(["value", "key"], opts)
            pid = PartitionId("q-mesh", 3, 0)
            with pytest.raises(RuntimeError, match="injected"):  # chunks 2, 3 on the wire
                publish_partition(_rows(500, fail_after=450), plan, opts, pid)
            wait_for(lambda: len(sub.received) >= 200, 20, "the first two chunks")
            result = publish_partition(_rows(500), plan, opts, pid)
            assert (result.rows, result.accepted, result.skipped_rows) == (500, 500, 0)
            wait_for(lambda: len(sub.received) >= 500, 20, "every row")
            assert sorted(sub.bodies()) == sorted(f"row-{i}" for i in range(500))
            # Two chunks are on the wire at once (two links): rows of chunk 0 and chunk 1 can
            # interleave at the subscriber, so row 7 is found by its body.
            row7 = next(r for r in sub.received if r.body == "row-7")
            assert row7.properties == {"key": "0"}
        finally:
            stop_clients(client)


def _truncated(n: int, stop: int) -> Iterator[tuple[str, str]]:
    """What Spark hands write() when an upstream operator of the task fails: the input
    just ends early."""
    for i, row in enumerate(_rows(n)):
        if i == stop:
            return
        yield row


def test_progress_markers_skip_accepted_rows_even_after_the_mesh_forgot(tmp_path: Path) -> None:
    """With markers, a retry reads the rows an earlier attempt had accepted without sending
    them: after an attempt that failed (marker after each chunk), after one whose input was
    cut short (it records what it did publish, not the partition as done), and after the
    router restarted, forgetting every record and tombstone."""
    plan = plan_columns(["value", "key"], SinkOptions([URL], "t"))
    failed, cut = PartitionId("q-mark", 3, 0), PartitionId("q-mark", 3, 1)
    router = RouterProcess("A")
    sub = RawSubscriber(f"amqp://{router.url}", "spark/#", name="raw", credit=1100)
    client = start_clients(sub)
    try:
        opts = _opts(router, rows_per_link=100, progress_dir=str(tmp_path))
        with pytest.raises(RuntimeError, match="injected"):
            publish_partition(_rows(500, fail_after=450), plan, opts, failed)
        # Chunks 0 and 1 were finished (accepted, marker written) before chunks 2 and 3 went
        # on the wire; those two were in flight when the input failed: they go again,
        # declared (the mesh adopts its records of them), with chunk 4.
        assert read_marker(opts.progress_dir, failed)["rows"] == 200
        again = publish_partition(_rows(500), plan, opts, failed)
        assert (again.rows, again.accepted, again.skipped_rows) == (500, 300, 200)
        assert read_marker(opts.progress_dir, failed)["rows"] == 500

        short = publish_partition(_truncated(500, 150), plan, opts, cut)
        assert (short.rows, short.accepted) == (150, 150)
        assert read_marker(opts.progress_dir, cut)["rows"] == 150
        full = publish_partition(_rows(500), plan, opts, cut)
        assert (full.accepted, full.skipped_rows) == (350, 150)
        wait_for(lambda: len(sub.received) >= 1000, 20, "both partitions")
        assert sorted(sub.bodies()) == sorted([f"row-{i}" for i in range(500)] * 2)
    finally:
        stop_clients(client)
        router.stop()
    router = RouterProcess("A")  # the mesh forgot everything; the markers answer
    sub = RawSubscriber(f"amqp://{router.url}", "spark/#", name="raw2", credit=300)
    client = start_clients(sub)
    try:
        opts = _opts(router, rows_per_link=100, progress_dir=str(tmp_path))
        replay = publish_partition(_rows(500), plan, opts, failed)
        assert (replay.rows, replay.accepted, replay.skipped_rows) == (500, 0, 500)
        other = publish_partition(_rows(5), plan, opts, PartitionId("q-mark", 4, 0))
        assert (other.accepted, other.skipped_rows) == (5, 0)
        wait_for(lambda: len(sub.received) >= 5, 20, "batch 4's rows")
        assert sub.bodies() == [f"row-{i}" for i in range(5)]
    finally:
        stop_clients(client)
        router.stop()


def test_topic_column_fans_out_and_a_rejected_row_fails_naming_topic_and_subscriber(
        tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        url = f"amqp://{router.url}"
        eu = Subscriber([url], "fan/eu", id="eu-billing", state_dir=str(tmp_path / "eu"))
        us = RawSubscriber(url, "fan/us", name="us-raw", credit=300)
        bad = RawSubscriber(url, "fan/bad", name="picky", policy=lambda m, d: "reject")
        client = start_clients(us, bad)
        got: list[str] = []

        def drain() -> None:  # the SDK subscriber accepts as the application would
            for msg in eu:
                got.append(msg.body)
                eu.accept(msg)

        try:
            eu.wait_attached(10)
            threading.Thread(target=drain, daemon=True).start()
            opts = SinkOptions([url], None, timeout=30.0, rows_per_link=50,
                               progress_dir=str(tmp_path / "progress"))
            plan = plan_columns(["value", "topic"], opts)
            rows = [(f"o{i}", "fan/eu" if i % 3 else "fan/us") for i in range(120)]
            result = publish_partition(rows, plan, opts, PartitionId("q-fan", 0, 1))
            assert result.accepted == 120 and result.links == 6
            wait_for(lambda: len(got) >= 80, 20, "fan/eu rows")
            assert sorted(got) == sorted(b for b, t in rows if t == "fan/eu")
            wait_for(lambda: len(us.received) >= 40, 20, "fan/us rows")
            assert sorted(us.bodies()) == sorted(b for b, t in rows if t == "fan/us")

            rows = [("fine", "fan/us"), ("nope", "fan/bad")]
            pid = PartitionId("q-fan", 1, 0)
            with pytest.raises(PublishError) as err:
                publish_partition(rows, plan, opts, pid)
            text = str(err.value)
            assert "topic 'fan/bad'" in text and "batch 1 partition 0" in text
            assert "failed subscribers:" in text and "picky" in text, text
            assert "exactmesh:delivery-failed" in text
            assert read_marker(opts.progress_dir, pid) is None  # not done: Spark retries it
        finally:
            eu.close()
            stop_clients(client)


def test_no_subscriber_under_a_reject_policy_fails_naming_the_topic() -> None:
    with RouterProcess("A", "--no-subscribers", "reject") as router:
        opts = SinkOptions([f"amqp://{router.url}"], "nobody/home", timeout=30.0)
        plan = plan_columns(["value"], opts)
        with pytest.raises(PublishError) as err:
            publish_partition([("a",), ("b",)], plan, opts, PartitionId("q", 2, 5))
        text = str(err.value)
        assert "2 row(s) of batch 2 partition 5" in text and "topic 'nobody/home'" in text
        assert "exactmesh:no-subscribers" in text and "failed subscribers" not in text


def test_unreachable_router_fails_the_task_within_the_timeout() -> None:
    with RouterProcess("A") as router:
        dead = f"amqp://{router.url}"
    opts = SinkOptions([dead], "t", timeout=1.0)
    plan = plan_columns(["value"], opts)
    with pytest.raises(PublishError, match="no exactmesh router reachable"):
        publish_partition([("x",)], plan, opts, PartitionId("q", 0, 0))


PASSWD = shutil.which("mosquitto_passwd")
needs_passwd = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                  "(Debian package mosquitto)")


@needs_passwd
def test_publishing_over_tls_with_a_log_in(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """A router with TLS, a password file and an ACL: the rows go in with the right password;
    a wrong one fails the partition once refused for LOGIN_REFUSED_GRACE (not after the
    timeout) naming the refusal; so does no log-in at all; a topic the ACL does not give the
    user fails naming the ACL's refusal. The password is in no error and no log line (ours,
    the SDK's, proton's)."""
    from tests.test_amqp_tls import Tls

    passwd, acl = tmp_path / "passwd", tmp_path / "acl"
    subprocess.run([PASSWD, "-c", "-b", str(passwd), "spark", PASSWORD], check=True)
    subprocess.run([PASSWD, "-b", str(passwd), "reader", "reader's"], check=True)
    acl.write_text("user spark\ntopic write spark/#\nuser reader\ntopic read spark/#\n")
    (tmp_path / "tls").mkdir()
    tls = Tls(tmp_path / "tls", extra=("--password-file", str(passwd), "--acl-file", str(acl)))
    caplog.set_level(logging.DEBUG)
    with tls.router as router:
        sub = Subscriber([tls.url], "spark/#", id="reader", state_dir=str(tmp_path / "sub"),
                         login=Login("reader", "reader's", ca=tls.trust, verify_name=False))
        got: list[str] = []

        def drain() -> None:
            for msg in sub:
                got.append(msg.body)
                sub.accept(msg)

        common = {"url": tls.url, "tlsCA": tls.trust, "tlsVerifyName": "false",
                  "timeout": "60", "rowsPerLink": "40"}
        try:
            sub.wait_attached(10)
            threading.Thread(target=drain, daemon=True).start()
            opts = parse_options({**common, "topic": "spark/t", "user": "spark",
                                  "password": PASSWORD})
            plan = plan_columns(["value", "key"], opts)
            result = publish_partition(_rows(100), plan, opts, PartitionId("q-tls", 0, 0))
            assert (result.rows, result.accepted, result.links) == (100, 100, 3)
            errors = []
            for label, extra, says in (
                    ("wrong", {"user": "spark", "password": "not-it-X9k2"},
                     "refused the log-in of user 'spark' (amqp:unauthorized-access"),
                    ("none", {}, "refused a client without a log-in"),
                    ("acl", {"topic": "elsewhere/t", "user": "spark", "password": PASSWORD},
                     "amqp:unauthorized-access")):
                o = parse_options({"topic": "spark/t", **common, **extra})
                started = time.monotonic()
                with pytest.raises(PublishError) as err:
                    publish_partition(_rows(100), plan, o, PartitionId("q-tls", 1, 0))
                assert time.monotonic() - started < 30, f"{label}: waited for the timeout"
                assert says in str(err.value), (label, str(err.value))
                errors.append(str(err.value))
            assert "for 5 s: a wrong user or password (check options user and passwordFile" \
                in errors[0] and "--max-connections-per-user" in errors[0]
            assert "set options user and passwordFile" in errors[1]
            assert "the ACL file's rules for user 'spark'" in errors[2]
            for text in (*errors, caplog.text, "".join(router.log)):
                assert PASSWORD not in text and "not-it-X9k2" not in text
            assert "local-idle-timeout" not in errors[0]  # the SDK's 1 s would hide it
            wait_for(lambda: len(got) >= 100, 20, "the 100 rows")
            assert sorted(got) == sorted(f"row-{i}" for i in range(100))  # no refused one
        finally:
            sub.close()


@needs_passwd
def test_a_refusal_that_ends_within_the_grace_period_does_not_fail_the_partition(
        tmp_path: Path) -> None:
    """A user over the router's --max-connections-per-user is refused as a wrong password is
    (SASL outcome auth): when the other connection goes within LOGIN_REFUSED_GRACE, the
    publisher's next try gets in and every row is accepted."""
    from proton.utils import BlockingConnection

    from tests.test_amqp_tls import Tls

    passwd = tmp_path / "passwd"
    subprocess.run([PASSWD, "-c", "-b", str(passwd), "spark", PASSWORD], check=True)
    (tmp_path / "tls").mkdir()
    tls = Tls(tmp_path / "tls", extra=("--password-file", str(passwd),
                                       "--max-connections-per-user", "1"))
    with tls.router as router:
        holder = BlockingConnection(tls.url, timeout=10, container_id="holder", user="spark",
                                    password=PASSWORD, allowed_mechs="PLAIN",
                                    ssl_domain=tls.domain())
        opts = parse_options({"url": tls.url, "tlsCA": tls.trust, "tlsVerifyName": "false",
                              "user": "spark", "password": PASSWORD, "topic": "spark/t",
                              "timeout": "60"})
        plan = plan_columns(["value", "key"], opts)
        outcome: list[object] = []

        def publish() -> None:
            try:
                outcome.append(publish_partition(_rows(40), plan, opts,
                                                 PartitionId("q-limit", 0, 0)))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        wait_for(lambda: router.logged("--max-connections-per-user"), 10,
                 "the publisher refused over the limit")
        holder.close()
        thread.join(30)
        assert outcome and not isinstance(outcome[0], BaseException), outcome
        assert outcome[0].accepted == 40  # type: ignore[attr-defined]


def test_tls_failures_name_the_last_error_and_unloadable_files_the_options(
        tmp_path: Path) -> None:
    """A router whose certificate the system's CAs do not trust (no tlsCA): the partition
    fails at the timeout naming the certificate check; TLS files that proton cannot load on
    the executor fail it naming the options."""
    from tests.test_amqp_tls import Tls

    tls = Tls(tmp_path)
    with tls.router:
        opts = parse_options({"url": tls.url, "topic": "t", "timeout": "1.5"})
        plan = plan_columns(["value"], opts)
        with pytest.raises(PublishError) as err:
            publish_partition([("x",)], plan, opts, PartitionId("q", 0, 0))
        assert "no exactmesh router reachable" in str(err.value)
        assert "certificate verify failed" in str(err.value), str(err.value)
        junk = tmp_path / "junk.pem"
        junk.write_text("not a certificate")
        gone = replace(parse_options({"url": tls.url, "topic": "t", "tlsCA": tls.trust}),
                       tls_ca=str(junk))  # as if the executor's copy were different
        with pytest.raises(PublishError, match="cannot load the TLS files on this executor"):
            publish_partition([("x",)], plan, gone, PartitionId("q", 0, 1))


def test_declaration_key_is_the_sdk_one() -> None:
    assert symbol("exactmesh:resume") == RESUME_KEY

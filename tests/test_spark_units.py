"""The Spark data source's parts that need no JVM: option parsing and column mapping with
their errors, the identity scheme (publisher names, tags, the attach declaration's size), and
`publish_partition` -- what each executor task runs -- against a real router: a retried task
resends under the same identity and counts once, a progress marker skips a partition whose
rows the mesh has forgotten, a rejected row fails the task naming topic and subscriber."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Data, symbol

from amqp_edge.client import RESUME_KEY, Subscriber
from spark_connector.options import (
    MAX_ROWS_PER_LINK,
    OptionError,
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
            assert sub.received[7].properties == {"key": "0"}
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


def test_declaration_key_is_the_sdk_one() -> None:
    assert symbol("exactmesh:resume") == RESUME_KEY

"""AMQP clients against a router with a password file (made by mosquitto_passwd) and an ACL
file (docs/security.md), with proton's own client: SASL PLAIN log-in (over TLS, or in clear
with --allow-plain-without-tls), the ACL's rules for the user at attach and per message on an
anonymous relay, anonymous clients refused or held to the anonymous rules. Each refusal is one
log line without the password, and the others' messages flow on."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from proton import ConnectionException, Delivery, Message
from proton.utils import BlockingConnection, LinkDetached, SendException

from tests.harness import RouterProcess, wait_for
from tests.test_amqp_tls import Tls
from tests.test_sdk import Consumer

PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                "(Debian package mosquitto)")
PASSWORD = "wonder land"
ACL = """\
# anonymous clients (before any user section)
topic readwrite public/#
user alice
topic readwrite alice/#
topic read news/#
user bob
topic write news/today
user carol
topic write secret/#
"""


def _files(tmp_path: Path) -> list[str]:
    pw, acl = tmp_path / "passwd", tmp_path / "acl"
    subprocess.run([PASSWD, "-c", "-b", str(pw), "alice", PASSWORD], check=True)
    subprocess.run([PASSWD, "-b", str(pw), "bob", "builder"], check=True)
    subprocess.run([PASSWD, "-b", str(pw), "carol", "carol's"], check=True)
    acl.write_text(ACL)
    return ["--password-file", str(pw), "--acl-file", str(acl)]


def _connect(url: str, user: str | None, password: str | None, **kw: Any) -> Any:
    if user is None:
        return BlockingConnection(url, timeout=10, container_id="anon", **kw)
    return BlockingConnection(url, timeout=10, container_id=f"c-{user}", user=user,
                              password=password, allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, **kw)


def _refused(url: str, user: str | None, password: str | None) -> None:
    with pytest.raises(ConnectionException):
        _connect(url, user, password).create_sender("public/x")


def test_users_log_in_with_sasl_plain_and_get_their_rules(tmp_path: Path) -> None:
    with RouterProcess("S", *_files(tmp_path), "--allow-plain-without-tls") as router:
        url = router.url
        for user, password in (("alice", "Tr0ub4dor-guess"), ("mallory", "x"), (None, None)):
            _refused(url, user, password)
        wait_for(lambda: sum("SASL log-in refused" in line for line in router.log) >= 3, 10,
                 "three refusals logged")
        assert not any("Tr0ub4dor" in line or PASSWORD in line for line in router.log)
        alice = _connect(url, "alice", PASSWORD)
        news = alice.create_receiver("news/#", name="news", credit=10)
        errors: list[BaseException] = []

        def bob_sends() -> None:
            try:
                bob = _connect(url, "bob", "builder")
                bob.create_sender("news/today").send(Message(body="headline"))
                with pytest.raises(LinkDetached, match="unauthorized-access"):
                    bob.create_sender("alice/inbox")
                bob.close()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=bob_sends, daemon=True)
        thread.start()
        assert news.receive(timeout=10).body == "headline"
        news.accept()
        alice.wait(lambda: not thread.is_alive(), timeout=10)
        assert not errors, errors
        alice.create_sender("alice/notes")
        for make in (lambda: alice.create_sender("news/today"),
                     lambda: alice.create_receiver("bob/#", name="nothing of hers")):
            with pytest.raises(LinkDetached, match="unauthorized-access"):
                make()
        anonymous_relay = alice.create_sender(None)
        with pytest.raises(SendException) as sent:  # not hers: rejected, the link goes on
            anonymous_relay.send(Message(address="public/x", body="not hers"))
        assert sent.value.state == Delivery.REJECTED
        anonymous_relay.send(Message(address="alice/notes", body="hers"))
        alice.close()


def test_a_wide_receiver_gets_only_what_its_user_may_read(tmp_path: Path) -> None:
    """alice's `#` receiver is granted; each message is checked at delivery (as mosquitto
    does): carol's 30 secret messages are accepted without reaching alice (more than her
    credit of 5, which each of them gives back), bob's news reaches her."""
    with RouterProcess("S", *_files(tmp_path), "--allow-plain-without-tls") as router:
        alice = _connect(router.url, "alice", PASSWORD)
        everything = alice.create_receiver("#", name="everything", credit=5)
        errors: list[BaseException] = []

        def others_send() -> None:
            try:
                carol = _connect(router.url, "carol", "carol's")
                secret = carol.create_sender("secret/x")
                for i in range(30):
                    secret.send(Message(body=f"secret {i}"))  # waits for "accepted"
                carol.close()
                bob = _connect(router.url, "bob", "builder")
                bob.create_sender("news/today").send(Message(body="headline"))
                bob.close()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=others_send, daemon=True)
        thread.start()
        # The secret messages went first: had any been sent to alice, it would come first.
        assert everything.receive(timeout=20).body == "headline"
        everything.accept()
        alice.wait(lambda: not thread.is_alive(), timeout=10)
        assert not errors, errors  # each of carol's 30 sends was accepted
        alice.close()


def test_plain_in_clear_is_not_offered_without_the_flag_but_is_over_tls(tmp_path: Path) -> None:
    with RouterProcess("S", *_files(tmp_path)) as router:
        _refused(router.url, "alice", PASSWORD)
        wait_for(lambda: any("PLAIN is offered only over TLS" in line
                             for line in router.log), 10, "why it was refused")
    (tmp_path / "t").mkdir()
    tls = Tls(tmp_path, extra=tuple(_files(tmp_path / "t")))
    with tls.router:
        conn = BlockingConnection(tls.url, timeout=10, container_id="tls-alice", user="alice",
                                  password=PASSWORD, allowed_mechs="PLAIN",
                                  ssl_domain=tls.domain())
        conn.create_sender("alice/notes")
        conn.close()


def test_anonymous_clients_get_the_anonymous_rules_when_allowed(tmp_path: Path) -> None:
    with RouterProcess("S", *_files(tmp_path), "--allow-anonymous") as router:
        conn = _connect(router.url, None, None)
        conn.create_sender("public/t")
        for make in (lambda: conn.create_sender("alice/inbox"),
                     lambda: conn.create_receiver("alice/#", name="alice's")):
            with pytest.raises(LinkDetached, match="unauthorized-access"):
                make()
        conn.close()


def test_the_sdk_logs_in_in_clear_and_over_tls(tmp_path: Path) -> None:
    """The SDK's `Login`: user and password (PLAIN), and TLS trusting a CA; what alice may
    publish and read flows exactly once, in order."""
    from amqp_edge.client import (
        LOGIN_REFUSED_GRACE,
        ClientError,
        Login,
        Publisher,
        Subscriber,
    )

    (tmp_path / "t").mkdir()
    tls = Tls(tmp_path, extra=tuple(_files(tmp_path / "t")))
    with tls.router:
        login = Login("alice", PASSWORD, ca=tls.trust, verify_name=False)
        sub = Subscriber([tls.url], "alice/#", id="notes", state_dir=str(tmp_path / "s"),
                         login=login)
        sub.wait_attached(10)
        consumer = Consumer(sub)  # accepts as it receives: the publisher waits for that
        with Publisher([tls.url], "alice/notes", id="pen", state_dir=str(tmp_path / "p"),
                       login=login) as pub:
            for i in range(100):
                pub.send(f"n{i}")
            pub.flush(timeout=20)
            assert pub.stats()["accepted"] == 100
        wait_for(lambda: len(consumer.got) == 100, 10, "the 100 messages")
        assert consumer.bodies() == [f"n{i}" for i in range(100)]  # (sent as text)
        consumer.stop()
    with RouterProcess("S", *_files(tmp_path), "--allow-plain-without-tls") as router:
        clear = Login("alice", PASSWORD, plain_in_clear=True)
        with Publisher([router.url], "alice/x", id="clear", state_dir=str(tmp_path / "c"),
                       login=clear) as pub:
            pub.send("in clear")
            pub.flush(timeout=10)
            assert pub.stats()["accepted"] == 1
        # A wrong password: the SDK sees the refusal (not its own idle timeout) and, refused
        # for LOGIN_REFUSED_GRACE, stops with an error that says so, long before its timeout.
        started = time.monotonic()
        wrong = Login("alice", "Tr0ub4dor-guess", plain_in_clear=True)
        pub = Publisher([router.url], "alice/x", id="wrong", state_dir=str(tmp_path / "w"),
                        login=wrong, connect_timeout=60)
        pub.send("never")
        with pytest.raises(ClientError, match="refused the log-in of user 'alice'") as err:
            pub.flush(timeout=30)
        assert time.monotonic() - started < LOGIN_REFUSED_GRACE + 5
        assert "Tr0ub4dor" not in str(err.value)
        pub.close()


def test_exactmesh_pub_and_sub_log_in_with_the_password_from_the_environment(
        tmp_path: Path) -> None:
    """`exactmesh pub/sub --user` take the password from EXACTMESH_PASSWORD, never from the
    command line (where `ps` shows it)."""
    import os

    from tests.harness import EXACTMESH

    with RouterProcess("S", *_files(tmp_path), "--allow-plain-without-tls",
                       "--log-level", "debug") as router:
        env = dict(os.environ, EXACTMESH_PASSWORD=PASSWORD)
        common = ["--url", router.url, "--user", "alice", "--plain-in-clear"]
        sub = subprocess.Popen([EXACTMESH, "sub", *common, "--id", "cli-sub", "--state-dir",
                                str(tmp_path / "sub"), "--topic", "alice/#", "--count", "3"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            wait_for(lambda: any("subscriber cli-sub/" in line and "attached" in line
                                 for line in router.log) or sub.poll() is not None, 10,
                     "the subscriber attached")
            pub = subprocess.run([EXACTMESH, "pub", *common, "--id", "cli-pub", "--state-dir",
                                  str(tmp_path / "pub"), "--topic", "alice/x", "--count", "3"],
                                 env=env, capture_output=True, text=True, timeout=60)
            assert pub.returncode == 0, pub.stderr
            out, err = sub.communicate(timeout=30)
            assert sub.returncode == 0, err
            assert len(out.strip().splitlines()) == 3
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait(5)
        bad = subprocess.run([EXACTMESH, "pub", *common, "--id", "cli-bad", "--state-dir",
                              str(tmp_path / "bad"), "--topic", "alice/x", "--count", "1",
                              "--timeout", "30"],
                             env=dict(env, EXACTMESH_PASSWORD="nope"), capture_output=True,
                             text=True, timeout=60)
        assert bad.returncode != 0 and "nope" not in bad.stderr
        assert "refused the log-in of user 'alice'" in bad.stderr, bad.stderr

"""AMQP clients against a router with a password or ACL file (docs/security.md). AMQP clients
cannot log in yet (SASL PLAIN is not built), so they are anonymous: refused unless the router
allows anonymous clients, and then held to the ACL file's rules for anonymous clients."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection, LinkDetached

from tests.harness import RouterProcess, wait_for

ACL = """\
# anonymous clients (before any user section)
topic readwrite public/#
topic read news/#
user alice
topic readwrite alice/#
"""


def _router(tmp_path: Path, *extra: str) -> RouterProcess:
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    return RouterProcess("S", "--acl-file", str(acl), *extra)


def test_without_allow_anonymous_an_amqp_client_is_refused_with_the_reason(
        tmp_path: Path) -> None:
    with _router(tmp_path) as router:
        with pytest.raises(ConnectionException) as err:
            conn = BlockingConnection(router.url, timeout=10, container_id="anon")
            conn.create_sender("public/x")
        assert "unauthorized-access" in str(err.value) or "SASL PLAIN" in str(err.value)
        wait_for(lambda: any("refused" in line and "SASL PLAIN is not built" in line
                             for line in router.log), 5, "the refusal's log line")


def test_anonymous_amqp_clients_get_the_anonymous_rules(tmp_path: Path) -> None:
    with _router(tmp_path, "--allow-anonymous") as router:
        conn = BlockingConnection(router.url, timeout=10, container_id="anon")
        rcv = conn.create_receiver("public/#", name="r", credit=10)
        sent: list[BaseException] = []

        def send() -> None:  # (a blocking send waits for the outcome: another connection)
            try:
                other = BlockingConnection(router.url, timeout=10, container_id="anon-2")
                other.create_sender("public/t").send(Message(body="hello"))
                other.close()
            except BaseException as exc:
                sent.append(exc)

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        assert rcv.receive(timeout=10).body == "hello"
        rcv.accept()
        conn.wait(lambda: not thread.is_alive(), timeout=10)  # (pumps out the acceptance)
        assert not sent
        for make in (lambda: conn.create_sender("alice/inbox"),
                     lambda: conn.create_receiver("#", name="everything"),
                     lambda: conn.create_receiver("alice/#", name="hers")):
            with pytest.raises(LinkDetached, match="unauthorized-access"):
                make()
        news = conn.create_receiver("news/#", name="news")  # read-only for anonymous clients
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            conn.create_sender("news/today")
        news.close()
        conn.close()

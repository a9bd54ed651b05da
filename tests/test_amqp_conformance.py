"""AMQP 1.0 features that common client code relies on (issue 16), with proton's own blocking
client:

- anonymous relay: a sender link whose target has no address; each message names its topic
  in its `to` property (AMQP 3.2.4, 3.5.4);
- dynamic receivers: a receiver asking for a node the router names (AMQP 3.5.3, `dynamic`),
  the usual way to get a reply address;
- both together in proton's `SyncRequestResponse`, on one router and across two."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from proton import Message, Timeout
from proton.utils import BlockingConnection, SendException, SyncRequestResponse

from tests.harness import RouterProcess, wait_for
from tests.mesh_harness import start_mesh


@pytest.fixture
def router() -> Any:
    with RouterProcess("A") as r:
        yield r


def connect(url: str, container: str) -> BlockingConnection:
    return BlockingConnection(f"amqp://{url}", timeout=10, container_id=container)


class Sending(threading.Thread):
    """Sends messages on a link of its own connection: a blocking send returns only once the
    message is accepted, by receivers this test reads in its own thread."""

    def __init__(self, url: str, address: str | None, messages: list[Message]) -> None:
        super().__init__(daemon=True)
        self.conn = connect(url, "sending")
        self.sender = self.conn.create_sender(address)
        self.messages = messages
        self.errors: list[BaseException | None] = []
        self.start()

    def run(self) -> None:
        try:
            for m in self.messages:
                try:
                    self.sender.send(m)
                    self.errors.append(None)
                except SendException as exc:
                    self.errors.append(exc)
        finally:
            self.conn.close()


def test_an_anonymous_sender_routes_each_message_by_its_to(router: Any) -> None:
    conn = connect(router.url, "anon")
    try:
        a = conn.create_receiver("anon/a", credit=10)
        b = conn.create_receiver("anon/#", credit=10)
        s = Sending(router.url, None, [Message(address="anon/a", body="to a"),
                                       Message(address="anon/b", body="to b")])
        assert a.receive(timeout=5).body == "to a"
        a.accept()
        for want in ("to a", "to b"):
            assert b.receive(timeout=5).body == want
            b.accept()
        conn.wait(lambda: not s.is_alive(), timeout=10)  # (sends our accepts meanwhile)
        assert s.errors == [None, None]
        assert s.sender.link.remote_target.address is None  # a null target, echoed
    finally:
        conn.close()


@pytest.mark.parametrize("to,why", [(None, "needs a `to` property"), ("anon/+", "wildcard")])
def test_an_anonymous_message_without_a_topic_is_rejected_and_the_link_goes_on(
        router: Any, to: str | None, why: str) -> None:
    """Rejected with amqp:invalid-field and a description that says what to do; the link and
    the connection stay usable (bad input loses nothing else)."""
    conn = connect(router.url, "anon-bad")
    try:
        r = conn.create_receiver("anon/ok", credit=10)
        s = Sending(router.url, None, [Message(address=to, body="lost?"),
                                       Message(address="anon/ok", body="fine")])
        assert r.receive(timeout=5).body == "fine"
        r.accept()
        conn.wait(lambda: not s.is_alive(), timeout=10)  # (sends our accepts meanwhile)
        assert s.errors[0] is not None and s.errors[1] is None, s.errors
        wait_for(lambda: any(why in line for line in router.log), 5, "the log line")
    finally:
        conn.close()


def test_dynamic_receivers_get_addresses_of_their_own(router: Any) -> None:
    """AMQP 3.5.3: the router answers the attach with the node's address. Each dynamic
    receiver gets its own, and a publisher reaches it there like any topic."""
    conn = connect(router.url, "dyn")
    try:
        one = conn.create_receiver(None, dynamic=True, credit=10)
        two = conn.create_receiver(None, dynamic=True, credit=10)
        a1, a2 = one.link.remote_source.address, two.link.remote_source.address
        assert a1 and a2 and a1 != a2 and a1.startswith("_dynamic/A/")
        assert one.link.remote_source.dynamic
        s = Sending(router.url, a1, [Message(body="for one")])
        assert one.receive(timeout=5).body == "for one"
        one.accept()
        conn.wait(lambda: not s.is_alive(), timeout=10)  # (sends our accepts meanwhile)
        assert s.errors == [None]
        with pytest.raises(Timeout):
            two.receive(timeout=0.5)  # nothing for the other one
    finally:
        conn.close()


class Responder(threading.Thread):
    """Answers each request on its reply-to address through an anonymous sender, as AMQP
    services do, with the request's correlation-id."""

    def __init__(self, url: str, address: str, count: int) -> None:
        super().__init__(daemon=True)
        self.conn = connect(url, "responder")
        self.receiver = self.conn.create_receiver(address, credit=10)
        self.sender = self.conn.create_sender(None)
        self.count = count
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.count):
                request = self.receiver.receive(timeout=20)
                self.receiver.accept()
                self.sender.send(Message(address=request.reply_to, body=f"echo {request.body}",
                                         correlation_id=request.correlation_id))
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.conn.close()


@pytest.mark.parametrize("where", ["one router", "two routers"])
def test_sync_request_response(where: str) -> None:
    """proton's SyncRequestResponse: an anonymous sender for the requests and a dynamic
    receiver for the replies; the responder answers on the reply-to address."""
    mesh = start_mesh("line", 2)
    try:
        mesh.wait_links_up(timeout=30.0)
        at = mesh["A"].url if where == "one router" else mesh["B"].url
        responder = Responder(mesh["A"].url, "svc/echo", 3)
        if where == "two routers":
            mesh["B"].wait_logged("router B: knows subscriber responder/")
        responder.start()
        conn = connect(at, "requester")
        try:
            client = SyncRequestResponse(conn)
            if where == "two routers":
                key = client.reply_to
                mesh["A"].wait_logged(f"@B (filter {key})")
            for i in range(3):
                reply = client.call(Message(address="svc/echo", body=f"ping {i}"))
                assert reply.body == f"echo ping {i}"
        finally:
            conn.close()
        responder.join(20)
        assert responder.error is None, responder.error
    finally:
        mesh.stop()

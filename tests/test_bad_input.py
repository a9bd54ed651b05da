"""Bad input from one client: the offender gets a precise AMQP error, everyone else carries on.

Every test keeps a healthy publisher -> subscriber pair going across the bad event (`Healthy`)
and checks that it got every message exactly once, in order, all `accepted`. Malformed peers
are driven over raw sockets (`RawPeer`): a client-side proton engine makes valid AMQP bytes,
which the test then sends as they are, truncated, or followed by garbage. Each case also
checks that the router logged one line naming the problem.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from proton import Condition, Connection, Endpoint, Message, Transport, symbol
from proton.handlers import MessagingHandler
from proton.reactor import LinkOption

from tests.harness import (
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    Tally,
    numbered,
    wait_for,
)

INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
DECODE_ERROR = "amqp:decode-error"
DELIVERY_FAILED = "exactmesh:delivery-failed"


@pytest.fixture
def router() -> Iterator[RouterProcess]:
    # A short reconnect-timeout: a vanished publisher's messages wait that long for a resend.
    with RouterProcess("A", "--reconnect-timeout", "2") as r:
        yield r


# ------------------------------------------------------------------ the healthy pair


class GatedPublisher(Publisher):
    """A `Publisher` that sends only the first `gate` of its messages until told more."""

    def __init__(self, url: str, address: str, messages: list[Message], **kw: Any) -> None:
        super().__init__(url, address, [], **kw)
        self.all = messages

    def open_gate(self, upto: int) -> None:  # run on the client thread
        self.messages = self.all[:upto]
        if self.sender is not None:
            self.pump()


class Healthy:
    """A publisher and a subscriber of their own topic, publishing before, during and after
    the bad event; `finish` checks that nothing was lost, duplicated or refused."""

    def __init__(self, url: str, n: int = 90) -> None:
        self.n = n
        self.sub = Subscriber(url, "healthy/#", "healthy-sub", container_id="healthy-sub")
        self.subc = ClientThread(self.sub)
        assert self.sub.opened.wait(10), "the healthy subscriber did not attach"
        assert self.sub.closed_condition is None
        self.pub = GatedPublisher(url, "healthy/x", numbered(n, "h"), window=10,
                                  name="healthy-pub")
        self.pubc = ClientThread(self.pub)
        self._release(n // 3)
        wait_for(lambda: len(self.pub.outcomes) == n // 3, 10, "the healthy pair's first third")

    def _release(self, upto: int) -> None:
        self.pubc.call(lambda: self.pub.open_gate(upto))

    def during(self) -> None:
        """Publish the second third without waiting: it is in flight during the bad event."""
        self._release(2 * self.n // 3)

    def finish(self) -> None:
        self._release(self.n)
        wait_for(lambda: len(self.pub.outcomes) == self.n, 15,
                 "outcomes for every healthy message")
        assert self.pub.states() == ["accepted"] * self.n
        assert self.pub.link_error is None
        wait_for(lambda: len(self.sub.received) >= self.n, 5, "every healthy message")
        Tally([m.body for m in self.pub.all], self.sub.bodies()).check_exactly_once_in_order()
        assert self.sub.closed_condition is None
        self.pubc.stop()
        self.subc.stop()


@pytest.fixture
def healthy(router: RouterProcess) -> Healthy:
    return Healthy(router.url)


def logged(router: RouterProcess, *needles: str, timeout: float = 5.0) -> str:
    """The one log line containing every needle (waiting for it to appear)."""

    def lines() -> list[str]:
        return [line for line in list(router.log) if all(n in line for n in needles)]

    try:
        wait_for(lines, timeout, f"a log line with {needles}")
    except AssertionError as err:
        raise AssertionError(f"{err}; the router logged:\n{''.join(router.log)}") from None
    time.sleep(0.1)  # a window in which no second line may appear
    found = lines()
    assert len(found) == 1, f"expected one log line with {needles}, got {found}"
    return found[0]


# ------------------------------------------------------------------ proton-client offenders


class Attacher(MessagingHandler):
    """Attaches one link and records how the router answered it."""

    def __init__(self, url: str, kind: str, address: str | None, name: str,
                 options: Any = None, dynamic: bool = False) -> None:
        super().__init__()
        self.url, self.kind, self.address, self.name = url, kind, address, name
        self.options, self.dynamic = options, dynamic
        self.condition: Condition | None = None
        self.link: Any = None
        self.conn: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False, handler=self)
        if self.kind == "sender":
            self.link = event.container.create_sender(
                self.conn, self.address, name=self.name, options=self.options)
        else:
            self.link = event.container.create_receiver(
                self.conn, self.address, name=self.name, options=self.options,
                dynamic=self.dynamic)

    def on_link_error(self, event: Any) -> None:
        self.condition = event.link.remote_condition

    def connection_open(self) -> bool:  # run on the client thread
        return bool(self.conn.state & Endpoint.REMOTE_ACTIVE) and not (
            self.conn.state & Endpoint.REMOTE_CLOSED)


class DynamicTarget(LinkOption):
    def apply(self, link: Any) -> None:
        link.target.dynamic = True


def refused(router: RouterProcess, healthy: Healthy, kind: str, address: str | None, name: str,
            **kw: Any) -> Condition:
    """Attach one link that the router must refuse; the connection must stay open."""
    offender = Attacher(router.url, kind, address, name, **kw)
    healthy.during()
    client = ClientThread(offender)
    cond = wait_for(lambda: offender.condition, 10, f"the router to refuse link {name}")
    assert client.call(offender.connection_open), "the router closed the whole connection"
    client.stop()
    return cond


@pytest.mark.parametrize("address", ["orders/+", "orders/#"])
def test_publish_address_with_wildcard_is_refused(router, healthy, address):
    # (A target with no address, or an empty one, which proton reports alike, is the
    # anonymous relay: tests/test_amqp_conformance.py.)
    cond = refused(router, healthy, "sender", address, "bad-pub")
    healthy.finish()
    assert cond.name == INVALID_FIELD
    assert f"publish address {address!r}" in cond.description
    assert "wildcard" in cond.description
    assert "publish to a concrete topic" in cond.description
    logged(router, "refused link 'bad-pub'", f"publish address {address!r}")


def test_invalid_subscription_filter_is_refused(router, healthy):
    cond = refused(router, healthy, "receiver", "a/#/b", "bad-sub")
    healthy.finish()
    assert cond.name == INVALID_FIELD
    assert "'a/#/b'" in cond.description and "'#'" in cond.description
    assert "must be the last level" in cond.description
    logged(router, "refused link 'bad-sub'", "'a/#/b'")


def test_a_dynamic_target_is_not_implemented(router, healthy):
    """A dynamic source (a receiver's reply address) is served: tests/test_amqp_conformance.py.
    A dynamic target (a node made for one sender) means nothing in a mesh of topics."""
    target = refused(router, healthy, "sender", None, "dyn-pub", options=DynamicTarget())
    healthy.finish()
    assert target.name == NOT_IMPLEMENTED
    assert "dynamic targets are not supported" in target.description
    logged(router, "refused link 'dyn-pub'", "dynamic targets")


def test_bogus_delivery_mode_link_property_is_refused(router, healthy):
    pub = Publisher(router.url, "modes/x", numbered(1), name="bogus-mode",
                    properties={"delivery-mode": "bogus"})
    healthy.during()
    client = ClientThread(pub)
    wait_for(lambda: pub.link_error, 10, "the router to refuse the link")
    client.stop()
    healthy.finish()
    assert pub.link_error.name == INVALID_FIELD
    assert "delivery-mode='bogus'" in pub.link_error.description
    assert "all, some" in pub.link_error.description
    assert pub.outcomes == {}
    logged(router, "refused link 'bogus-mode'", "delivery-mode='bogus'")


# ------------------------------------------------------------------ oversized message


class TwoSenders(MessagingHandler):
    """Two sender links on one connection: `big` sends one oversized message, `small` a
    numbered stream, released by the test."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.big: Any = None
        self.small: Any = None
        self.big_error: Condition | None = None
        self.small_error: Condition | None = None
        self.outcomes: dict[str, str] = {}
        self._bodies: dict[Any, str] = {}
        self.to_send: list[Message] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False, handler=self)
        self.big = event.container.create_sender(conn, "size/big", name="big")
        self.small = event.container.create_sender(conn, "size/small", name="small")

    def send(self, link: Any, messages: list[Message]) -> None:  # run on the client thread
        for m in messages:
            assert link.credit > 0, "no credit"
            self._bodies[link.send(m)] = m.body

    def on_sendable(self, event: Any) -> None:
        pass

    def on_accepted(self, event: Any) -> None:
        self.outcomes[self._bodies.pop(event.delivery)] = "accepted"

    def on_rejected(self, event: Any) -> None:
        self.outcomes[self._bodies.pop(event.delivery)] = "rejected"

    def on_link_error(self, event: Any) -> None:
        if event.link == self.big:
            self.big_error = event.link.remote_condition
        else:
            self.small_error = event.link.remote_condition


def test_oversized_message_closes_only_that_link():
    with RouterProcess("A", "--max-message-size", "1000") as router:
        healthy = Healthy(router.url)
        sub = Subscriber(router.url, "size/#", "size-sub")
        subc = ClientThread(sub)
        assert sub.opened.wait(10)
        h = TwoSenders(router.url)
        client = ClientThread(h)
        wait_for(lambda: client.call(lambda: h.big.credit and h.small.credit), 10,
                 "credit on both links")
        first = numbered(5, "before")
        client.call(lambda: h.send(h.small, first))
        wait_for(lambda: len(h.outcomes) == 5, 10, "outcomes of the first small messages")
        healthy.during()
        client.call(lambda: h.send(h.big, [Message(body=b"x" * 5000)]))
        cond = wait_for(lambda: h.big_error, 10, "the oversized link to be closed")
        # The other link of the same connection still works.
        after = numbered(5, "after")
        client.call(lambda: h.send(h.small, after))
        wait_for(lambda: len(h.outcomes) == 10, 10, "outcomes of the later small messages")
        healthy.finish()
        assert cond.name == SIZE_EXCEEDED
        assert "max-message-size of 1000 bytes" in cond.description
        assert h.small_error is None
        assert h.outcomes == {m.body: "accepted" for m in first + after}
        wait_for(lambda: len(sub.received) >= 10, 5, "the small messages")
        Tally([m.body for m in first + after], sub.bodies()).check_exactly_once_in_order()
        logged(router, "closing link", "/big@A", "max-message-size")
        client.stop()
        subc.stop()


# ------------------------------------------------------------------ malformed message bytes


class RawSender(MessagingHandler):
    """One sender link whose deliveries the test writes as raw bytes or as messages."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__()
        self.url, self.address = url, address
        self.sender: Any = None
        self.outcomes: dict[str, tuple[str, Condition | None]] = {}
        self.link_error: Condition | None = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False, handler=self)
        self.sender = event.container.create_sender(conn, self.address, name="raw-sender")

    def send_raw(self, tag: str, raw: bytes) -> None:  # run on the client thread
        assert self.sender.credit > 0, "no credit"
        self.sender.delivery(tag)
        self.sender.stream(raw)
        self.sender.advance()

    def send_message(self, tag: str, message: Message) -> None:
        assert self.sender.credit > 0, "no credit"
        self.sender.send(message, tag=tag)

    def _record(self, event: Any, state: str) -> None:
        tag = event.delivery.tag
        self.outcomes[tag] = (state, event.delivery.remote.condition)

    def on_accepted(self, event: Any) -> None:
        self._record(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        self._record(event, "rejected")

    def on_link_error(self, event: Any) -> None:
        self.link_error = event.link.remote_condition


# A header section (descriptor 0x70) whose list claims 16 bytes and 5 fields, then stops.
BROKEN_HEADER = b"\x00\x53\x70\xc0\x10\x05\x42"


def test_malformed_message_is_rejected_with_decode_error(router, healthy):
    sub = Subscriber(router.url, "raw/#", "raw-sub")
    subc = ClientThread(sub)
    assert sub.opened.wait(10)
    h = RawSender(router.url, "raw/x")
    client = ClientThread(h)
    wait_for(lambda: client.call(lambda: h.sender.credit), 10, "credit")
    healthy.during()
    client.call(lambda: h.send_raw("bad-1", BROKEN_HEADER))
    wait_for(lambda: "bad-1" in h.outcomes, 10, "the malformed delivery's outcome")
    client.call(lambda: h.send_message("good-1", Message(body="good")))
    wait_for(lambda: "good-1" in h.outcomes, 10, "the next delivery's outcome")
    healthy.finish()
    state, cond = h.outcomes["bad-1"]
    assert state == "rejected"
    assert cond is not None and cond.name == DECODE_ERROR
    assert "not well-formed AMQP" in cond.description
    assert h.outcomes["good-1"][0] == "accepted"
    assert h.link_error is None
    wait_for(lambda: sub.received, 5, "the good message")
    assert sub.bodies() == ["good"]
    logged(router, "not well-formed AMQP")
    client.stop()
    subc.stop()


# ------------------------------------------------------------------ raw-socket peers


class RawPeer:
    """A client-side proton engine over a plain socket, driven by the test's own thread, so
    that the test can send what proton wrote, a part of it, or bytes of its own."""

    def __init__(self, port: int, container: str = "raw-peer") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.transport = Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        self.conn.container = container
        self.transport.bind(self.conn)
        self.eof = False

    def output(self) -> bytes:
        """What proton has to send, taken off the transport (not sent)."""
        out = b""
        while True:
            n = self.transport.pending()
            if n <= 0:
                return out
            out += self.transport.peek(n)
            self.transport.pop(n)

    def _read(self, wait: float) -> None:
        ready, _, _ = select.select([self.sock], [], [], wait)
        if not ready:
            return
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            if self.transport.capacity() >= 0:
                self.transport.close_tail()
        elif self.transport.capacity() > 0:
            self.transport.push(data)

    def pump(self, until: Callable[[], Any], timeout: float = 5.0, what: str = "it") -> Any:
        """Exchange bytes with the router until `until()` is truthy."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.output()
            if out:
                self.sock.sendall(out)
            value = until()
            if value:
                return value
            if self.eof:
                raise AssertionError(f"the router closed the connection before {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            self._read(0.05)

    def wait_eof(self, timeout: float) -> float:
        """Read (into proton) until the router closes the socket; return how long it took."""
        start = time.monotonic()
        while not self.eof:
            if time.monotonic() - start > timeout:
                raise AssertionError(f"the router kept the connection open over {timeout}s")
            self._read(0.05)
        return time.monotonic() - start

    def open(self) -> None:
        self.conn.open()
        self.pump(lambda: self.conn.state & Endpoint.REMOTE_ACTIVE, what="the router's open")

    def attach(self, kind: str, address: str, name: str) -> Any:
        session = self.conn.session()
        session.open()
        if kind == "sender":
            link = session.sender(name)
            link.target.address = address
        else:
            link = session.receiver(name)
            link.source.address = address
        link.open()
        self.pump(lambda: link.state & Endpoint.REMOTE_ACTIVE, what=f"the attach of {name}")
        return link

    def close(self) -> None:
        self.sock.close()


def test_malformed_frame_closes_that_connection(router, healthy):
    peer = RawPeer(router.port, "garbler")
    peer.open()
    # A frame with a valid frame header (size 16, doff 2, AMQP, channel 0) whose body is
    # not an AMQP performative.
    healthy.during()
    peer.sock.sendall(b"\x00\x00\x00\x10\x02\x00\x00\x00" + b"\xde\xad\xbe\xef" * 2)
    took = peer.wait_eof(1.5)
    cond = peer.conn.remote_condition
    peer.close()
    healthy.finish()
    assert took < 1.0, f"the router took {took:.2f}s to close the connection"
    assert cond is not None and cond.name == DECODE_ERROR, f"closed with {cond}"
    assert "could not be decoded" in cond.description
    logged(router, DECODE_ERROR, "could not be decoded")


def test_garbage_instead_of_frames_closes_that_connection(router, healthy):
    peer = RawPeer(router.port, "garbler")
    peer.open()
    healthy.during()
    peer.sock.sendall(b"this is not an AMQP frame at all!")
    took = peer.wait_eof(1.5)
    cond = peer.conn.remote_condition
    peer.close()
    healthy.finish()
    assert took < 1.0, f"the router took {took:.2f}s to close the connection"
    assert cond is not None and cond.name == "amqp:connection:framing-error", f"closed with {cond}"
    logged(router, "amqp:connection:framing-error", "malformed frame")


@pytest.mark.parametrize(("header", "shown"), [
    (b"AMQP\x00\x02\x00\x00", r"'AMQP\x00\x02\x00\x00'"),
    (b"HTTP/1.1 200 OK\r\n\r\n", "'HTTP/1.1 200 OK"),
])
def test_unknown_protocol_gets_the_router_header_and_a_close(router, healthy, header, shown):
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as s:
        healthy.during()
        s.sendall(header)
        reply = b""
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            ready, _, _ = select.select([s], [], [], 0.05)
            if not ready:
                continue
            data = s.recv(4096)
            if not data:
                break
            reply += data
        else:
            raise AssertionError(f"the router kept the connection open; sent {reply!r}")
    healthy.finish()
    assert reply.startswith(b"AMQP\x00\x01\x00\x00"), reply
    assert b"amqp:connection:framing-error" in reply and b"Unknown protocol" in reply
    logged(router, "Unknown protocol detected", shown)


def test_client_vanishing_mid_frame(router, healthy):
    sub = Subscriber(router.url, "mid/#", "mid-sub")
    subc = ClientThread(sub)
    assert sub.opened.wait(10)
    peer = RawPeer(router.port, "half-framer")
    peer.open()
    link = peer.attach("sender", "mid/x", "half")
    peer.pump(lambda: link.credit, what="credit")
    link.delivery(b"t1")
    link.send(Message(body="never whole").encode())
    link.advance()
    frame = peer.output()
    assert len(frame) > 20
    healthy.during()
    peer.sock.sendall(frame[: len(frame) // 2])
    peer.close()
    logged(router, "closed its socket in the middle of a frame")
    assert router.proc.poll() is None, "the router died"
    # A later publisher on the same topic is served, and the half message never arrives.
    later = Publisher(router.url, "mid/x", numbered(5, "later"))
    laterc = ClientThread(later)
    wait_for(lambda: len(later.outcomes) == 5, 10, "the later publisher's outcomes")
    healthy.finish()
    assert later.states() == ["accepted"] * 5
    wait_for(lambda: len(sub.received) >= 5, 5, "the later messages")
    assert sub.bodies() == [m.body for m in later.messages]
    laterc.stop()
    subc.stop()


def test_publisher_vanishing_with_unsettled_messages(router, healthy):
    def hold_gone(m: Message, d: Any) -> str:
        return "hold" if str(m.body).startswith("gone") else "accept"

    sub = Subscriber(router.url, "van/#", "holder", policy=hold_gone)
    subc = ClientThread(sub)
    assert sub.opened.wait(10)
    peer = RawPeer(router.port, "vanisher")
    peer.open()
    link = peer.attach("sender", "van/x", "gone-pub")
    peer.pump(lambda: link.credit >= 3, what="credit")
    for i in range(3):
        link.delivery(f"g{i}".encode())
        link.send(Message(body=f"gone{i}").encode())
        link.advance()
    peer.pump(lambda: True)  # send them
    wait_for(lambda: len(sub.held) == 3, 10, "the subscriber to hold the three messages")
    healthy.during()
    peer.close()  # no detach, no close: the socket just goes
    # The router stops tracking them: it settles the copies the subscriber holds.
    wait_for(lambda: subc.call(lambda: all(d.settled for d in sub.held)), 10,
             "the router to settle the held copies")
    subc.call(lambda: sub.answer_held("accept"))  # a late answer must harm nothing
    later = Publisher(router.url, "van/x", numbered(5, "later"))
    laterc = ClientThread(later)
    wait_for(lambda: len(later.outcomes) == 5, 10, "the later publisher's outcomes")
    healthy.finish()
    assert later.states() == ["accepted"] * 5
    assert sub.bodies() == ["gone0", "gone1", "gone2"] + [m.body for m in later.messages]
    logged(router, "connection aborted")
    laterc.stop()
    subc.stop()


def test_subscriber_vanishing_fails_its_messages_naming_it(router, healthy):
    peer = RawPeer(router.port, "vanishing-app")
    peer.open()
    link = peer.attach("receiver", "fail/#", "v-sub")
    link.flow(10)
    pub = Publisher(router.url, "fail/x", numbered(2, "f"))
    pubc = ClientThread(pub)
    peer.pump(lambda: link.queued == 2, what="both messages to reach the subscriber")
    healthy.during()
    peer.close()  # holds both, never answers
    wait_for(lambda: len(pub.outcomes) == 2, 10, "the publisher's outcomes")
    healthy.finish()
    for out in pub.outcomes.values():
        assert out.state == "rejected"
        assert out.condition == DELIVERY_FAILED
        assert "vanishing-app/v-sub@A detached before accepting it" in out.description
        assert out.info[symbol("failed")] == ["vanishing-app/v-sub@A"]
    logged(router, "connection aborted")
    pubc.stop()

"""Back-pressure through the MQTT edge, over real sockets: a subscriber that stops reading
stops its publisher (the router stops reading it: `mqtt_edge/server.py` disarms the
connection), the router keeps serving everyone else meanwhile, and when the subscriber reads
again every message arrives, once and in order."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import pytest

from mqtt_edge.codec import Decoder, encode
from mqtt_edge.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
)
from tests.harness import RouterProcess, free_port

WINDOW = 32  # --publisher-window: the engine's records per publisher, and the held bound
PAYLOAD = 1000
CAP = 60_000  # publishes: far more than the router may hold; 60 MB never goes through
STALL_S = 1.0  # the publisher's socket taking nothing this long means the router stopped
NOTHING_S = 0.5  # a window in which something must NOT happen (not a synchronisation)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    p = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{p}", "--publisher-window", str(WINDOW)):
        yield p


class Raw:
    """An MQTT 3.1.1 client on a raw socket with a small receive buffer."""

    def __init__(self, port: int, client_id: str) -> None:
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        self.s.settimeout(10)
        self.s.connect(("127.0.0.1", port))
        self.decoder = Decoder(1 << 20, role="client", version=4)
        self.s.sendall(encode(Connect(client_id, protocol_level=4), 4))
        assert isinstance(self.next(), ConnAck)

    def next(self) -> object:
        packets = self.read(1)
        assert len(packets) == 1, packets
        return packets[0]

    def read(self, at_least: int, deadline_s: float = 10.0) -> list[object]:
        got: list[object] = []
        end = time.monotonic() + deadline_s
        while len(got) < at_least:
            assert time.monotonic() < end, f"only {len(got)} of {at_least} packets"
            data = self.s.recv(65536)
            assert data, "the router closed the connection"
            got += self.decoder.receive(data)
        return got


def _publish(seq: int) -> bytes:
    return encode(Publish("bp/t", seq.to_bytes(8, "big") + bytes(PAYLOAD - 8), 0), 4)


def test_a_stalled_subscriber_stops_its_publisher_and_nothing_is_lost(port: int) -> None:
    sub = Raw(port, "bp-sub")
    sub.s.sendall(encode(Subscribe(1, (Subscription("bp/#", 0),)), 4))
    assert isinstance(sub.next(), SubAck)
    # From here the subscriber reads nothing.

    pub = Raw(port, "bp-pub")
    pub.s.setblocking(False)
    size = len(_publish(0))
    pending, sent, seq = b"", 0, 0  # bytes not yet taken, whole publishes taken
    stalled = False
    while seq < CAP:
        if not pending:
            pending = b"".join(_publish(seq + i) for i in range(16))
            seq += 16
        _, writable, _ = select.select([], [pub.s], [], STALL_S)
        if not writable:
            stalled = True
            break
        n = pub.s.send(pending)
        pending = pending[n:]
        sent += n
    assert stalled, f"the router took all {CAP} publishes from a publisher whose only " \
        "subscriber reads nothing: no back-pressure"
    held = sent // size
    assert held < CAP // 4, f"{held} publishes went in before the publisher was stopped"

    # The router still serves everyone else while that publisher is stopped.
    other = Raw(port, "bp-other")
    other.s.sendall(encode(PingReq(), 4))
    assert isinstance(other.next(), PingResp)

    # The subscriber reads again: every message arrives, once and in order, and the
    # publisher gets going again.
    total = seq
    got: list[int] = []
    sub.s.setblocking(False)
    end = time.monotonic() + 60
    while len(got) < total:
        assert time.monotonic() < end, f"only {len(got)} of {total} messages arrived"
        readable, writable, _ = select.select([sub.s], [pub.s] if pending else [], [], 1.0)
        if writable:
            pending = pending[pub.s.send(pending):]
        if readable:
            data = sub.s.recv(65536)
            assert data, "the router closed the subscriber's connection"
            for p in sub.decoder.receive(data):
                assert isinstance(p, Publish)
                got.append(int.from_bytes(p.payload[:8], "big"))
    assert got == list(range(total))
    for c in (sub, pub, other):
        c.s.setblocking(True)
        c.s.sendall(encode(Disconnect(), 4))
        c.s.close()


def test_a_qos2_copy_counts_as_accepted_at_pubcomp_not_pubrec(port: int) -> None:
    """MQTT 5.0 section 4.3.3 lets a receiver hand a QoS 2 message to its application at
    PUBREL ("method B", as paho does), so until its PUBCOMP it may not have shown it: a
    PUBREL that died with the router would leave it unshown. The publisher's outcome waits
    for the PUBCOMP (test bed finding 5, docs/testbed.md)."""
    sub = Raw(port, "rel-sub")
    sub.s.sendall(encode(Subscribe(1, (Subscription("rel/#", 2),)), 4))
    assert isinstance(sub.next(), SubAck)
    pub = Raw(port, "rel-pub")
    pub.s.sendall(encode(Publish("rel/x", b"shown at PUBREL", 2, packet_id=7), 4))
    got = sub.next()
    assert isinstance(got, Publish) and got.qos == 2
    sub.s.sendall(encode(PubRec(got.packet_id), 4))
    assert sub.next() == PubRel(got.packet_id)  # sent at once
    pub.s.settimeout(NOTHING_S)  # no PUBREC for the publisher while the PUBCOMP is missing
    with pytest.raises(TimeoutError):
        pub.s.recv(1)
    pub.s.settimeout(10)
    sub.s.sendall(encode(PubComp(got.packet_id), 4))
    assert pub.next() == PubRec(7)

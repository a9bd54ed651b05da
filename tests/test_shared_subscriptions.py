"""Shared subscriptions (`$share/GROUP/FILTER`, MQTT 5 section 4.8.2) with real clients: the
group counts as one subscriber for the publisher, each message is processed by exactly one
member, across routers, and what a member had not acknowledged when it went away goes to
another member (docs/mqtt.md, "Shared subscriptions"). No sleeps: every wait is on a
condition with a deadline."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from typing import Any

import pytest
from proton import Timeout, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

from mqtt_edge.codec import Decoder, encode
from mqtt_edge.packets import (
    ConnAck,
    Connect,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
)
from tests.harness import RouterProcess, free_port, wait_for
from tests.mesh_harness import start_mesh
from tests.test_mqtt_edge import V5, V311, Mq

GROUP = "$share/workers/work/#"
MQTT_5 = 5


class Member:
    """A group member on a raw MQTT 5 socket, on its own thread, that acknowledges the first
    `ack_first` messages it gets and then goes away mid-stream: it stops acknowledging, reads
    on until `unacked` more have come, then ends its connection without DISCONNECT. It half-
    closes first and reads until the router closes, so every PUBACK it sent is read by the
    router before the connection ends: what it acknowledged is known exactly."""

    def __init__(self, port: int, client_id: str, ack_first: int, unacked: int = 3) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.dec = Decoder(role="client", version=MQTT_5)
        self.acked: list[bytes] = []
        self.unacked: list[bytes] = []
        self.ack_first, self.unacked_max = ack_first, unacked
        self._send(Connect(client_id, MQTT_5, True, 30, properties=Properties()))
        assert isinstance(self._next(), ConnAck)
        self._send(Subscribe(1, (Subscription(GROUP, 1, False, False, 0),), Properties()))
        assert isinstance(self._next(), SubAck)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _send(self, packet: Any) -> None:
        self.s.sendall(encode(packet, MQTT_5))

    def _next(self) -> Any:
        while True:
            got = self.dec.receive(self.s.recv(1) or b"")
            if got:
                return got[0]

    def _run(self) -> None:
        try:
            while len(self.unacked) < self.unacked_max:
                p = self._next()
                if not isinstance(p, Publish):
                    continue
                if len(self.acked) < self.ack_first:
                    self._send(PubAck(p.packet_id, 0, Properties()))
                    self.acked.append(p.payload)
                else:
                    self.unacked.append(p.payload)
            self.s.shutdown(socket.SHUT_WR)  # gone: no DISCONNECT, no more PUBACKs
            while self.s.recv(65536):
                pass  # until the router closes its side
        finally:
            self.s.close()
            self.done.set()


def _ids(payloads: list[bytes]) -> Counter[bytes]:
    return Counter(payloads)


@pytest.fixture
def mesh() -> Any:
    ports = {r: free_port() for r in "ABC"}
    m = start_mesh("line", 3, extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}"] for r in "ABC"})
    m.mqtt = ports  # type: ignore[attr-defined]
    try:
        m.wait_links_up(timeout=30.0)
        yield m
    finally:
        m.stop()


def _knows(mesh: Any, at: str, client_id: str, where: str) -> None:
    mesh[at].wait_logged(f"router {at}: knows subscriber {client_id}/mqtt/{GROUP}@{where}")


def test_group_across_three_routers_with_a_member_gone_mid_stream(mesh: Any) -> None:
    """The must-show: three members at A, B and C, the one at C goes away after acknowledging
    40 messages, with more received and not acknowledged. Every message is processed
    (acknowledged) by exactly one member, none is lost, and the publisher at A is told
    success once per message. A plain subscriber beside the group gets every message: the
    group is one subscriber among the others."""
    p = mesh.mqtt
    a = Mq(p["A"], "m-a", V5)
    a.subscribe(GROUP, 1)
    b = Mq(p["B"], "m-b", V5)
    b.subscribe(GROUP, 1)
    c = Member(p["C"], "m-c", ack_first=40)
    plain = Mq(p["B"], "plain", V5)
    plain.subscribe("work/#", 1)
    _knows(mesh, "A", "m-b", "B")
    _knows(mesh, "A", "m-c", "C")
    mesh["A"].wait_logged("router A: knows subscriber plain/mqtt/work/#@B")

    pub = Mq(p["A"], "pub", V5)
    n = 600
    owed = [b"job %d" % i for i in range(n)]
    mids = [pub.publish("work/x", body, 1) for body in owed]
    assert c.done.wait(60), "the member at C did not get its 43 messages"
    wait_for(lambda: len(pub.acks) == n, 60, "a PUBACK for every message")
    assert all(rc.value == 0 for rc, _ in pub.acks.values()), "a publish was not a success"
    assert sorted(pub.acks) == sorted(mids)

    wait_for(lambda: sum(_ids(a.payloads() + b.payloads() + c.acked).values()) >= n, 30,
             "every message processed by a member")
    processed = _ids(a.payloads() + b.payloads() + c.acked)
    assert set(processed) == set(owed), "a message no member processed"
    twice = [m for m, k in processed.items() if k > 1]
    assert not twice, f"processed by two members: {twice[:5]}"
    assert len(c.acked) == 40 and len(c.unacked) == 3
    assert set(c.unacked) <= set(a.payloads() + b.payloads()), "unacknowledged ones went on"
    assert a.payloads() and b.payloads(), "the group's messages were not spread"
    wait_for(lambda: len(plain.got) == n, 30, "the plain subscriber's copies")
    assert plain.payloads() == owed
    for m in (a, b, plain, pub):
        m.stop()


def test_mqtt_3_1_1_members_and_the_connack_says_available() -> None:
    """Shared subscriptions in 3.1.1 too (as mosquitto and EMQX accept them), and the MQTT 5
    CONNACK says Shared Subscription Available (MQTT 5 section 3.2.2.3.15). No retained
    message is sent to a shared subscription (section 4.8.2). MQTT-4.8.2-3: each copy goes
    at the member's granted QoS (1 here, published at 1 and 2)."""
    port = free_port()
    with RouterProcess("R1", "--mqtt", f"127.0.0.1:{port}") as _router:
        old = Mq(port, "retainer", V5)
        old.c.publish("work/kept", b"retained", qos=1, retain=True).wait_for_publish(10)
        v5 = Mq(port, "s5", V5)
        assert v5.connack_props.SharedSubscriptionAvailable == 1
        v5.subscribe(GROUP, 1)
        v3 = Mq(port, "s3", V311)
        v3.subscribe(GROUP, 1)
        pub = Mq(port, "pub3", V311)
        for i in range(40):
            pub.publish("work/y", b"%d" % i, 1 + i % 2)
        wait_for(lambda: len(pub.acks) == 40, 20, "the PUBACKs")
        wait_for(lambda: len(v5.got) + len(v3.got) == 40, 20, "the group's copies")
        together = v5.payloads() + v3.payloads()
        assert sorted(together) == sorted(b"%d" % i for i in range(40))
        assert b"retained" not in together
        assert {g[2] for g in v5.got + v3.got} == {1}
        for m in (old, v5, v3, pub):
            m.stop()


class _Group(LinkOption):
    """A receiver link property that joins a shared group (docs/amqp.md)."""

    def __init__(self, group: str) -> None:
        self.group = group

    def apply(self, link: Any) -> None:
        link.properties = {symbol("exactmesh:shared-group"): self.group}


def test_amqp_receivers_compete_with_an_mqtt_member() -> None:
    """AMQP receivers join the group MQTT clients use, by link property or by a `$share/`
    source address; a receiver that closes its link with messages unaccepted hands them to
    the others. Each message is accepted once, by one member."""
    port = free_port()
    with RouterProcess("R1", "--mqtt", f"127.0.0.1:{port}") as router:
        conn = BlockingConnection(router.url, timeout=10, container_id="amqp-members")
        r1 = conn.create_receiver("work/#", name="r1", credit=10, options=_Group("workers"))
        r2 = conn.create_receiver(GROUP, name="r2", credit=10)
        m = Mq(port, "mq-member", V5)
        m.subscribe(GROUP, 1)
        pub = Mq(port, "pub", V5)
        n = 90
        for i in range(n):
            pub.publish("work/z", b"%d" % i, 1)
        got: dict[str, list[bytes]] = {"r1": [], "r2": []}

        def drain(rcv: Any, name: str, keep: int | None = None) -> None:
            while True:
                try:
                    msg = rcv.receive(timeout=0.2)
                except Timeout:  # nothing more for now
                    return
                body = bytes(msg.body) if not isinstance(msg.body, str) else msg.body.encode()
                if keep is not None and len(got[name]) >= keep:
                    return  # left unaccepted: it goes to another member when r2 closes
                got[name].append(body)
                rcv.accept()

        drain(r2, "r2", keep=3)
        r2.close()
        deadline_left = 40
        while deadline_left and len(got["r1"]) + len(got["r2"]) + len(m.got) < n:
            drain(r1, "r1")
            deadline_left -= 1
        wait_for(lambda: len(pub.acks) == n, 20, "a PUBACK for every message")
        together = got["r1"] + got["r2"] + m.payloads()
        assert Counter(together) == Counter(b"%d" % i for i in range(n))
        assert all(rc.value == 0 for rc, _ in pub.acks.values())
        conn.close()
        for c in (m, pub):
            c.stop()

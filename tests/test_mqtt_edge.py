"""The MQTT edge with real clients: paho-mqtt (3.1.1 and 5.0) and proton (AMQP) against a
router process started with --mqtt. No sleeps to synchronize: every wait is on a condition
with a deadline."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from proton import Message

from mqtt_edge.codec import MQTT_5, Decoder, encode
from mqtt_edge.packets import Connect, Disconnect, Publish
from tests.harness import (
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    free_port,
    wait_for,
)

V5, V311 = mqtt.MQTTv5, mqtt.MQTTv311


class Mq:
    """A paho client on its own network thread, recording what it gets."""

    def __init__(self, port: int, client_id: str, version: int = V5, *, clean: bool = True,
                 expiry: int | None = None, keepalive: int = 30,
                 max_inflight: int | None = None) -> None:
        self.version = version
        kw: dict[str, Any] = {}
        if version == V311:
            kw["clean_session"] = clean
        self.c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                             protocol=version, client_id=client_id, **kw)
        if max_inflight is not None:  # paho does not read the server's Receive Maximum
            self.c.max_inflight_messages_set(max_inflight)
        self.got: list[tuple[str, bytes, int, Any]] = []
        self.acks: dict[int, Any] = {}
        self.connack: Any = None
        self.connack_props: Any = None
        self.session_present: bool | None = None
        self.disconnected: Any = None
        self.lock = threading.Lock()
        self.c.on_message = self._on_message
        self.c.on_publish = self._on_publish
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = self._on_disconnect
        ckw: dict[str, Any] = {}
        if version == V5:
            ckw["clean_start"] = clean
            if expiry is not None:
                props = PahoProperties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = expiry
                ckw["properties"] = props
        self._configure(self.c)
        self.c.connect("127.0.0.1", port, keepalive=keepalive, **ckw)
        self.c.loop_start()
        wait_for(lambda: self.connack is not None, 10, f"CONNACK for {client_id}")

    def _configure(self, c: Any) -> None:
        """Before connecting: a subclass sets TLS here (tests/test_mqtt_tls.py)."""

    def _on_connect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.session_present = flags.session_present
        self.connack_props = props
        self.connack = rc

    def _on_message(self, c: Any, u: Any, m: Any) -> None:
        with self.lock:
            self.got.append((m.topic, m.payload, m.qos, getattr(m, "properties", None)))

    def _on_publish(self, c: Any, u: Any, mid: int, rc: Any, props: Any) -> None:
        self.acks[mid] = (rc, props)

    def _on_disconnect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.disconnected = rc

    def subscribe(self, topic_filter: str, qos: int) -> None:
        done = threading.Event()
        self.c.on_subscribe = lambda *a: done.set()
        self.c.subscribe(topic_filter, qos)
        assert done.wait(10), f"no SUBACK for {topic_filter}"

    def publish(self, topic: str, payload: bytes, qos: int, **props: Any) -> int:
        p = None
        if props and self.version == V5:
            p = PahoProperties(PacketTypes.PUBLISH)
            for k, v in props.items():
                setattr(p, k, v)
        return self.c.publish(topic, payload, qos, properties=p).mid

    def payloads(self) -> list[bytes]:
        with self.lock:
            return [g[1] for g in self.got]

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


@pytest.fixture
def router() -> Any:
    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", "--reconnect-timeout", "2") as r:
        r.mqtt_port = port  # type: ignore[attr-defined]
        yield r


def _router_with(*extra: str) -> tuple[RouterProcess, int]:
    port = free_port()
    return RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", *extra), port


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_fanout_qos_0_1_2_with_wildcards_exactly_once_in_order(router: Any, version: int) -> None:
    """MQTT-3.8.4-8: a copy goes at the lower of the published QoS and the granted QoS;
    MQTT-4.6.0-5, MQTT-4.6.0-6: a non-shared subscription gets one publisher's messages in the
    order they were published."""
    port = router.mqtt_port
    subs = {q: Mq(port, f"sub{q}", version) for q in (0, 1, 2)}
    for q, s in subs.items():
        s.subscribe("fan/+/x" if q != 2 else "fan/#", q)
    pub = Mq(port, "pub", version)
    n = 500
    for i in range(n):
        pub.publish("fan/a/x", b"m%d" % i, 2)
    owed = [b"m%d" % i for i in range(n)]
    for q, s in subs.items():
        if q:
            wait_for(lambda s=s: len(s.got) >= n, 30, f"QoS {q} subscriber's {n} messages")
    wait_for(lambda: len(pub.acks) == n, 30, "every PUBCOMP")
    for q in (1, 2):
        assert subs[q].payloads() == owed, f"QoS {q}: not exactly once in order"
        assert {g[2] for g in subs[q].got} == {q}
    # QoS 0: at most once, in order (on loopback, all of them)
    got0 = subs[0].payloads()
    assert got0 == owed[: len(got0)] and len(set(got0)) == len(got0)
    # a QoS 0 and a QoS 1 publish reach the QoS 2 subscriber at that QoS
    pub.publish("fan/b/x", b"q0", 0)
    pub.publish("fan/b/x", b"q1", 1)
    wait_for(lambda: len(subs[2].got) == n + 2, 10, "the QoS 0 and 1 messages")
    assert [g[2] for g in subs[2].got[n:]] == [0, 1]
    for s in (*subs.values(), pub):
        s.stop()


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_mqtt_to_amqp_and_amqp_to_mqtt(router: Any, version: int) -> None:
    port = router.mqtt_port
    bodies: list[bytes] = []  # copied at once: proton's memoryview does not outlive the event
    amqp_sub = Subscriber(router.url, "mix/#", name="amqp-sub",
                          policy=lambda m, d: bodies.append(bytes(m.body)) or "accept")
    client = ClientThread(amqp_sub)
    try:
        assert amqp_sub.opened.wait(10)
        dev = Mq(port, "dev", version)
        dev.subscribe("mix/to-mqtt", 2)
        props = {"ContentType": "text/plain", "UserProperty": [("k", "v")],
                 "MessageExpiryInterval": 60} if version == V5 else {}
        mid = dev.publish("mix/from-mqtt", b"hello amqp", 2, **props)
        wait_for(lambda: amqp_sub.received, 10, "the AMQP subscriber's message")
        r = amqp_sub.received[0]
        assert bodies == [b"hello amqp"] and r.address == "mix/from-mqtt"
        wait_for(lambda: mid in dev.acks, 10, "PUBCOMP")
        if version == V5:
            assert r.properties == {"k": "v"}
        pub = Publisher(router.url, "mix/to-mqtt",
                        [Message(body=b"hello mqtt", properties={"a": "b"}, content_type="x/y")])
        client.call(lambda: pub.on_start(type("E", (), {"container": client.container})()))
        wait_for(lambda: dev.got, 10, "the MQTT subscriber's message")
        topic, payload, qos, p = dev.got[0]
        assert (topic, payload, qos) == ("mix/to-mqtt", b"hello mqtt", 2)
        if version == V5:
            assert p.ContentType == "x/y" and p.UserProperty == [("a", "b")]
        wait_for(lambda: pub.states() == ["accepted"], 10, "the AMQP publisher's outcome")
        dev.stop()
    finally:
        client.stop()


def test_qos2_pubrec_waits_for_the_amqp_subscribers_acceptance(router: Any) -> None:
    held = Subscriber(router.url, "hold/#", name="holder", policy=lambda m, d: "hold")
    client = ClientThread(held)
    try:
        assert held.opened.wait(10)
        dev = Mq(router.mqtt_port, "holdpub")
        mid = dev.publish("hold/x", b"wait for me", 2)
        wait_for(lambda: held.held, 10, "the held delivery")
        # The router must not PUBREC (hence paho never reports completion) while it is held.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            assert mid not in dev.acks, "completed before the subscriber accepted"
            time.sleep(0.01)
        assert client.call(lambda: held.answer_held("accept")) == 1
        wait_for(lambda: mid in dev.acks, 10, "PUBCOMP after the acceptance")
        dev.stop()
    finally:
        client.stop()


def test_negative_puback_for_no_matching_subscribers_and_rejection() -> None:
    r, port = _router_with("--no-subscribers", "reject")
    with r:
        dev = Mq(port, "lonely")
        mid = dev.publish("nobody/home", b"x", 1)
        wait_for(lambda: mid in dev.acks, 10, "PUBACK")
        rc, props = dev.acks[mid]
        assert rc.value == 0x10
        rejecter = Subscriber(r.url, "rej/#", name="rej", policy=lambda m, d: "reject")
        client = ClientThread(rejecter)
        try:
            assert rejecter.opened.wait(10)
            mid = dev.publish("rej/x", b"y", 1)
            wait_for(lambda: mid in dev.acks, 10, "PUBACK")
            rc, props = dev.acks[mid]
            assert rc.value == 0x80
            assert "rej" in props.ReasonString and "rejected" in props.ReasonString
        finally:
            client.stop()
        dev.stop()


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_session_persistence_and_expiry(router: Any, version: int) -> None:
    """MQTT-3.1.2-6, MQTT-3.2.2-3: clean start off without a session makes a new one (Session
    Present 0); MQTT-3.1.2-23: it outlives the connection; MQTT-3.1.2-5: the next clean-start-off
    CONNECT resumes it (Session Present 1) and gets what was published meanwhile."""
    port = router.mqtt_port
    dev = Mq(port, "sleepy", version, clean=False, expiry=60)
    dev.subscribe("sess/#", 2)
    assert not dev.session_present
    dev.stop()
    pub = Mq(port, "waker", version)
    mids = [pub.publish("sess/a", b"while away %d" % i, 2) for i in range(5)]
    dev2 = Mq(port, "sleepy", version, clean=False, expiry=60)
    assert dev2.session_present
    wait_for(lambda: len(dev2.got) == 5, 10, "the held messages")
    assert dev2.payloads() == [b"while away %d" % i for i in range(5)]
    wait_for(lambda: all(m in pub.acks for m in mids), 10, "PUBCOMPs")
    dev2.stop()
    pub.stop()


def test_qos0_is_not_held_for_an_offline_session_nor_stalls_its_publisher() -> None:
    """A server keeps only guaranteed messages for a client that is away (seed 001; MQTT
    3.1.1 section 3.1.2.4 and 5.0 section 3.1.2.4 oblige it to keep QoS 1 and 2 messages for a
    session only). QoS 0 messages to a topic that an offline persistent session subscribes to
    go on at full speed, well past the router's publisher window of 16, a present subscriber
    gets them all, and the session, back, gets none of them."""
    r, port = _router_with("--publisher-window", "16")
    with r:
        dev = Mq(port, "offline", V5, clean=False, expiry=60)
        dev.subscribe("q0/#", 1)
        dev.stop()
        live = Mq(port, "live", V5)
        live.subscribe("q0/#", 0)
        pub = Mq(port, "q0pub", V5)
        n = 200
        for i in range(n):
            pub.publish("q0/t", b"%d" % i, 0)
        wait_for(lambda: len(live.got) == n, 10, "every QoS 0 message at the present subscriber")
        assert live.payloads() == [b"%d" % i for i in range(n)]
        back = Mq(port, "offline", V5, clean=False, expiry=60)
        assert back.session_present
        pub.publish("q0/t", b"after", 1)
        wait_for(lambda: back.payloads() == [b"after"], 10, "only what came after, at QoS 1")
        for c in (back, live, pub):
            c.stop()


def test_session_expiry_fails_the_message_naming_the_client(router: Any) -> None:
    """MQTT-4.1.0-2: the session is discarded when its expiry interval passes; what waited for it
    fails, and the publisher is told so, naming the subscription."""
    port = router.mqtt_port
    dev = Mq(port, "gone", V5, clean=False, expiry=1)
    dev.subscribe("exp/#", 1)
    dev.stop()
    pub = Mq(port, "teller", V5)
    mid = pub.publish("exp/x", b"too late", 1)
    wait_for(lambda: mid in pub.acks, 10, "the failure after the session expired")
    rc, props = pub.acks[mid]
    assert rc.value == 0x80 and "gone/mqtt/exp/#@A" in props.ReasonString
    pub.stop()


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_session_takeover(router: Any, version: int) -> None:
    """MQTT-3.1.4-3: a CONNECT with a client id that is connected already closes the older
    connection (5.0: DISCONNECT 0x8E Session taken over) and the new one carries on."""
    port = router.mqtt_port
    first = Mq(port, "twin", version, clean=False, expiry=60)
    first.subscribe("take/#", 1)
    second = Mq(port, "twin", version, clean=False, expiry=60)
    assert second.session_present
    wait_for(lambda: first.disconnected is not None, 10, "the first connection closed")
    if version == V5:
        assert first.disconnected.value == 0x8E
    first.c.loop_stop()
    pub = Mq(port, "taker", version)
    pub.publish("take/x", b"to the new one", 1)
    wait_for(lambda: second.got, 10, "the message at the new connection")
    assert not first.got
    second.stop()
    pub.stop()


def _raw_connect(port: int, version: int, keep_alive: int = 0, client_id: str = "raw") -> Any:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(encode(Connect(client_id, version, True, keep_alive), version))
    dec = Decoder(role="client", version=version)
    got: list[Any] = []
    while not got:
        got += dec.receive(s.recv(4096))
    return s, dec


def _read_until_closed(s: socket.socket, dec: Decoder) -> list[Any]:
    got: list[Any] = []
    while True:
        data = s.recv(4096)
        if not data:
            return got
        got += dec.receive(data)


def test_keepalive_timeout_closes_with_reason(router: Any) -> None:
    """MQTT-3.1.2-22: a client silent for 1.5 times its Keep Alive is disconnected (0x8D)."""
    s, dec = _raw_connect(router.mqtt_port, MQTT_5, keep_alive=1)
    start = time.monotonic()
    got = _read_until_closed(s, dec)  # silent client: closed after 1.5 s
    took = time.monotonic() - start
    assert 1.2 < took < 4, took
    assert got and isinstance(got[-1], Disconnect) and got[-1].reason_code == 0x8D
    wait_for(lambda: any("Keep Alive timeout" in line or "keep-alive" in line
                         for line in router.log), 5, "the log line")


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_malformed_packet_is_a_protocol_error_and_others_carry_on(router: Any,
                                                                   version: int) -> None:
    """MQTT-2.1.3-1, MQTT-4.13.1-1: a packet whose reserved flags are wrong is malformed, and
    the connection that sent it is closed (5.0: DISCONNECT 0x81 with a reason string); the
    router's other clients carry on."""
    port = router.mqtt_port
    good = Mq(port, "good")
    good.subscribe("ok/#", 1)
    s, dec = _raw_connect(port, version, client_id="bad")
    s.sendall(b"\x60\x02\x00\x01")  # PUBREL whose reserved flags are 0000, not 0010
    got = _read_until_closed(s, dec)
    if version == 5:
        assert got and isinstance(got[-1], Disconnect) and got[-1].reason_code == 0x81
        assert got[-1].properties.reason_string
    else:
        assert got == []
    wait_for(lambda: any("'bad'" in line and "Malformed" in line for line in router.log), 5,
             "the log line naming the client")
    mid = good.publish("ok/x", b"still fine", 1)
    wait_for(lambda: good.got and mid in good.acks, 10, "the other client still working")
    good.stop()


def test_retain_is_accepted_in_5_and_311(router: Any) -> None:
    """RETAIN is supported (tests/test_mqtt_will_retain.py has the store): a retained PUBLISH
    reaches existing subscribers as a normal one, and 5.0 gets its PUBACK, not 0x9A."""
    port = router.mqtt_port
    sub = Mq(port, "rsub", V311)
    sub.subscribe("ret/#", 1)
    old = Mq(port, "r311", V311)
    mid = old.c.publish("ret/x", b"r", 1, retain=True).mid
    wait_for(lambda: mid in old.acks and sub.got, 10, "the retained-flag message")
    s, _ = _raw_connect(port, MQTT_5, client_id="r5")
    s.sendall(encode(Publish("ret/x", b"r5", 1, True, False, 1), MQTT_5))
    assert s.recv(4096)[:1] == b"\x40"  # PUBACK
    wait_for(lambda: len(sub.got) == 2, 10, "the 5.0 retained-flag message")
    s.close()
    old.stop()
    sub.stop()

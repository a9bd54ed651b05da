"""MQTT 5 rules that clients rely on (docs/conformance.md), each with real clients: paho, and
a raw socket with our own codec where a test needs a packet paho will not send or bytes it
hides (the size of an acknowledgement).

- No Local (MQTT-3.8.3-3), on one router and after the session moved to another router;
- Topic Aliases from clients (section 3.3.2.3.4, MQTT-3.3.2-7, MQTT-3.3.2-12);
- the client's Maximum Packet Size (MQTT-3.1.2-24, MQTT-3.1.2-25);
- a PUBREL for a packet id this router never PUBRECed (MQTT-4.3.3-11)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_edge.codec import Decoder, encode
from mqtt_edge.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
)
from tests.harness import ClientThread, RouterProcess, Subscriber, free_port, wait_for
from tests.mesh_harness import start_mesh
from tests.test_mqtt_edge import V5, Mq
from tests.test_status import get

MQTT_5 = 5


@pytest.fixture
def router() -> Any:
    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}") as r:
        r.mqtt_port = port  # type: ignore[attr-defined]
        yield r


class Raw:
    """An MQTT 5 client on a raw socket: sends our codec's packets, returns each packet it
    gets with its size in bytes."""

    def __init__(self, port: int, client_id: str, clean: bool = True,
                 **connect_props: Any) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.dec = Decoder(role="client", version=MQTT_5)
        props = Properties(**connect_props) if connect_props else Properties()
        self.send(Connect(client_id, MQTT_5, clean, 0, properties=props))
        self.connack, _ = self.next()
        assert isinstance(self.connack, ConnAck) and self.connack.reason_code == 0

    def send(self, packet: Any) -> None:
        self.s.sendall(encode(packet, MQTT_5))

    def next(self) -> tuple[Any, int]:
        """The next packet and its size; (None, 0) once the router closed the connection."""
        data = b""
        while True:
            chunk = self.s.recv(1)  # one byte at a time: one packet's bytes exactly
            if not chunk:
                return None, 0
            data += chunk
            got = self.dec.receive(chunk)
            if got:
                return got[0], len(data)

    def close(self) -> None:
        self.s.close()


def subscribe_no_local(m: Mq, topic_filter: str) -> None:
    done = threading.Event()
    m.c.on_subscribe = lambda *a: done.set()
    m.c.subscribe(topic_filter, options=SubscribeOptions(qos=1, noLocal=True))
    assert done.wait(10), f"no SUBACK for {topic_filter}"


# ------------------------------------------------------------------ No Local


def test_no_local_on_one_router_and_after_the_session_moved() -> None:
    """MQTT-3.8.3-3: with No Local, a client is not sent what it publishes itself; others
    subscribed to the topic are, and it still gets what others publish. The option is part of
    the subscription: it holds when the session is taken over at another router (it travels
    with the subscription's gossip) and the publisher is still answered success."""
    ports = {r: free_port() for r in "AB"}
    mesh = start_mesh("line", 2, extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}",
                                            "--log-level", "debug"] for r in "AB"})
    try:
        mesh.wait_links_up(timeout=30.0)
        me = Mq(ports["A"], "nl-me", V5, clean=False, expiry=600)
        subscribe_no_local(me, "nl/#")
        other = Mq(ports["A"], "nl-other", V5)
        other.subscribe("nl/#", 1)
        mids = [me.publish("nl/t", b"mine %d" % i, 1) for i in range(5)]
        wait_for(lambda: len(other.got) == 5, 10, "the others' copies")
        wait_for(lambda: all(m in me.acks for m in mids), 10, "the PUBACKs")
        assert all(rc.value == 0 for rc, _ in me.acks.values()), me.acks
        theirs = other.publish("nl/t", b"theirs", 1)
        wait_for(lambda: theirs in other.acks, 10, "the PUBACK for the other's message")
        wait_for(lambda: len(me.got) == 1, 10, "what another client published")
        assert me.payloads() == [b"theirs"], "a No Local subscriber got its own message"

        me.stop()  # the session moves to B: its subscription goes with its options
        mesh["B"].wait_logged("router B: knows subscriber nl-me/mqtt/nl/#@A")
        moved = Mq(ports["B"], "nl-me", V5, clean=False, expiry=600)
        assert moved.session_present
        mesh["A"].wait_logged("router A: knows subscriber nl-me/mqtt/nl/#@B")
        mids = [moved.publish("nl/t", b"moved %d" % i, 1) for i in range(5)]
        wait_for(lambda: all(m in moved.acks for m in mids), 10, "the PUBACKs at B")
        wait_for(lambda: len(other.got) == 11, 10, "the others' copies from B")
        assert moved.payloads() == [], "No Local lost when the session moved"
        moved.stop()
        other.stop()
    finally:
        mesh.stop()


@pytest.mark.parametrize("where", ["A", "B"], ids=["same router", "moved"])
def test_packet_ids_reused_by_a_new_client_process_are_new_messages(where: str) -> None:
    """Section 2.2.1: a packet id is free again once its PUBACK came, and a client process
    that restarts with its session starts again at 1. Those PUBLISHes (DUP=0) are new
    messages, also when the session moved to another router: they must not be taken for
    late copies of the forgotten ones with the same ids (each was once answered Success and
    never delivered, before `Record.fresh`)."""
    ports = {r: free_port() for r in "AB"}
    mesh = start_mesh("line", 2, extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}",
                                            "--log-level", "debug"] for r in "AB"})
    try:
        mesh.wait_links_up(timeout=30.0)
        other = Mq(ports["A"], "reuse-sub", V5)
        other.subscribe("reuse/#", 1)
        first = Mq(ports["A"], "reuser", V5, clean=False, expiry=600)
        first.subscribe("reuser/#", 1)  # something for the session to take along
        mids = [first.publish("reuse/t", b"a%d" % i, 1) for i in range(5)]
        wait_for(lambda: all(m in first.acks for m in mids), 10, "the first PUBACKs")
        first.stop()
        if where == "B":
            mesh["B"].wait_logged("router B: knows subscriber reuser/mqtt/reuser/#@A")
        again = Mq(ports[where], "reuser", V5, clean=False, expiry=600)
        mids2 = [again.publish("reuse/t", b"b%d" % i, 1) for i in range(5)]
        assert len(set(mids2) & set(mids)) >= 4, "paho did not use the same ids again"
        wait_for(lambda: all(m in again.acks for m in mids2), 10, "the second PUBACKs")
        wait_for(lambda: len(other.got) == 10, 10, "every message")
        assert other.payloads() == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]
        again.stop()
        other.stop()
    finally:
        mesh.stop()


def test_packet_ids_reused_by_a_new_client_process_reach_an_sdk_subscriber(
        tmp_path: Any) -> None:
    """The same, to the SDK's durable subscriber, whose duplicate filter answers a delivery id
    it has seen (24 h) without showing it again: the ids of the second process's messages
    must differ from the first's, though their packet ids are the same (`publish_tag`)."""
    from amqp_edge.client import Subscriber

    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", "--log-level", "debug") as r:
        sub = Subscriber(f"amqp://{r.url}", "re/#", id="sdk-sub", state_dir=str(tmp_path))
        got: list[bytes] = []

        def pump() -> None:
            for m in sub:
                got.append(m.body)
                sub.accept(m)
                if len(got) >= 6:
                    return

        threading.Thread(target=pump, daemon=True).start()
        wait_for(lambda: r.logged("sdk-sub"), 10, "the SDK subscriber's attach")
        for run in "ab":
            p = Mq(port, "reuser", V5)
            mids = [p.publish("re/t", b"%s%d" % (run.encode(), i), 1) for i in range(3)]
            wait_for(lambda p=p, mids=mids: all(m in p.acks for m in mids), 10, "PUBACKs")
            p.stop()
        wait_for(lambda: len(got) >= 6, 10, f"all six messages (got {got})")
        assert got == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]
        sub.close()


# ------------------------------------------------------------------ Topic Aliases


def test_paho_publishes_with_topic_aliases(router: Any) -> None:
    """Section 3.3.2.3.4 and MQTT-3.3.2-12: the server accepts every alias from 1 to the
    Topic Alias Maximum of its CONNACK. paho sends the topic once with the alias, then an
    empty topic with the alias; the subscriber sees the topic each time."""
    port = router.mqtt_port
    sub = Mq(port, "ta-sub", V5)
    sub.subscribe("ta/#", 1)
    pub = Mq(port, "ta-pub", V5)
    mids = [pub.publish("ta/a/long/topic/name", b"first", 1, TopicAlias=3)]
    mids += [pub.publish("", b"again %d" % i, 1, TopicAlias=3) for i in range(3)]
    mids.append(pub.publish("ta/other", b"re-aliased", 1, TopicAlias=3))
    mids.append(pub.publish("", b"last", 1, TopicAlias=3))
    wait_for(lambda: all(m in pub.acks for m in mids), 10, "every PUBACK")
    assert all(rc.value == 0 for rc, _ in pub.acks.values()), pub.acks
    wait_for(lambda: len(sub.got) == 6, 10, "every message")
    assert [(t, p) for t, p, _, _ in sub.got] == [
        ("ta/a/long/topic/name", b"first"), *[("ta/a/long/topic/name", b"again %d" % i)
                                              for i in range(3)],
        ("ta/other", b"re-aliased"), ("ta/other", b"last")]
    pub.stop()
    sub.stop()


def test_topic_alias_rules(router: Any) -> None:
    """The CONNACK names the Topic Alias Maximum; an alias above it closes the connection
    with 0x94 Topic Alias invalid; an alias with no topic set on this connection is a
    Protocol Error (0x82), also when another connection set it (MQTT-3.3.2-7)."""
    port = router.mqtt_port
    c = Raw(port, "ta-raw")
    most = c.connack.properties.topic_alias_maximum
    assert most and most >= 10
    c.send(Publish("ta/x", b"set", 1, packet_id=1, properties=Properties(topic_alias=most)))
    ack, _ = c.next()
    assert isinstance(ack, PubAck) and ack.packet_id == 1
    c.send(Publish("ta/x", b"too high", 1, packet_id=2,
                   properties=Properties(topic_alias=most + 1)))
    bye, _ = c.next()
    assert isinstance(bye, Disconnect) and bye.reason_code == 0x94
    c.close()
    c = Raw(port, "ta-raw")  # a new connection: the alias set above is not carried over
    c.send(Publish("", b"unknown", 1, packet_id=3, properties=Properties(topic_alias=most)))
    bye, _ = c.next()
    assert isinstance(bye, Disconnect) and bye.reason_code == 0x82
    assert "Topic Alias" in bye.properties.reason_string
    c.close()
    assert router.proc.poll() is None


# ------------------------------------------------------------------ Maximum Packet Size


def test_acknowledgements_fit_the_clients_maximum_packet_size(router: Any) -> None:
    """MQTT-3.1.2-24: nothing larger than the client's Maximum Packet Size is sent to it; a
    Reason String is left out rather than exceed it. Without a small maximum, a failure's
    Reason String names who failed (the full account is in the router's log too). The
    failure: the one subscriber's own maximum is too small for the message (next test)."""
    port = router.mqtt_port
    tiny = Raw(port, "mps-tiny", maximum_packet_size=32)
    tiny.send(Subscribe(1, (Subscription("mps/#", 1),)))
    assert isinstance(tiny.next()[0], SubAck)
    for client, most in (("mps-small", 64), ("mps-big", None)):
        c = Raw(port, client, **({"maximum_packet_size": most} if most else {}))
        c.send(Publish("mps/t", bytes(100), 1, packet_id=1))
        ack, size = c.next()
        assert isinstance(ack, PubAck) and ack.reason_code >= 0x80
        if most:
            assert size <= most, f"a {size}-byte PUBACK to a client whose maximum is {most}"
        else:
            why = ack.properties.reason_string
            assert why and "mps-tiny" in why, why
        c.close()
    for who, what in (("mps-big", "message pid 1"), ("mps-tiny", "Maximum Packet Size")):
        wait_for(lambda who=who, what=what: any(who in line and what in line
                                                for line in router.log),
                 5, f"the whole account in the log ({who})")
    tiny.close()


def test_a_publish_too_large_for_a_subscriber_is_not_sent_and_fails_by_name(
        router: Any) -> None:
    """MQTT-3.1.2-25: a PUBLISH larger than the subscriber's Maximum Packet Size is not sent
    to it. The spec then has the server behave as if it were sent; exactmesh fails that copy
    instead, naming the subscriber and the reason, because it was not delivered and exactly
    once would be a lie (docs/mqtt.md, deliberate deviation). Others still get it."""
    port = router.mqtt_port
    small = Raw(port, "mps-sub", maximum_packet_size=128)
    small.send(Subscribe(1, (Subscription("big/#", 1),)))
    suback, _ = small.next()
    assert isinstance(suback, SubAck)
    other = Mq(port, "mps-other", V5)
    other.subscribe("big/#", 1)
    pub = Mq(port, "mps-pub", V5)
    mid = pub.publish("big/t", bytes(500), 1)
    wait_for(lambda: mid in pub.acks, 10, "the PUBACK")
    rc, props = pub.acks[mid]
    assert rc.value >= 0x80, "a copy that was never sent counted as accepted"
    assert "failed for 1 of 2 subscriber(s): mps-sub" in props.ReasonString
    wait_for(lambda: len(other.got) == 1, 10, "the other subscriber's copy")
    small.s.settimeout(0.5)
    with pytest.raises(TimeoutError):
        small.next()  # nothing came: the 500-byte PUBLISH was not sent
    small.close()
    pub.stop()
    other.stop()


# ------------------------------------------------------------------ QoS 2


def test_a_pubrel_for_an_unknown_packet_id_completes_with_success(router: Any) -> None:
    """MQTT-4.3.3-11: a PUBREL is answered with a PUBCOMP of the same packet id. A client
    sends PUBREL only after a successful PUBREC, which here means the message was accepted
    (by another router, before a failover, or before a restart): success, not 0x92, which
    clients report as a failed publish (docs/mqtt.md)."""
    c = Raw(router.mqtt_port, "rel-raw")
    c.send(PubRel(77))
    comp, _ = c.next()
    assert isinstance(comp, PubComp) and comp.packet_id == 77 and comp.reason_code == 0
    c.close()


def test_a_qos2_publish_resent_after_a_failure_pubrec_is_answered_not_published_again(
        ) -> None:
    """MQTT-4.3.3-9 asks the receiver not to deliver a QoS 2 message onward twice. A failure
    PUBREC (reason code 0x80 or more) ends the exchange (5.0 section 4.3.3), but a client
    that lost it with its connection resends the PUBLISH with DUP=1 when it resumes its
    session: it gets the same PUBREC, and the subscriber does not get the message again.
    Found on the test bed (paho publisher, router paused under it): 208 copies shown twice.
    A PUBREL after the failure (paho sends one) is completed; a new PUBLISH with the packet
    id (DUP=0) is a new message."""
    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}") as r:
        rejecter = Subscriber(r.url, "fail2/#", name="rej", policy=lambda m, d: "reject")
        client = ClientThread(rejecter)
        try:
            assert rejecter.opened.wait(10)
            c = Raw(port, "fail2-raw", clean=False, session_expiry_interval=60)
            publish = Publish("fail2/x", b"once", 2, False, False, 9)
            c.send(publish)
            rec, _ = c.next()
            assert isinstance(rec, PubRec) and rec.reason_code == 0x80, rec
            wait_for(lambda: len(rejecter.received) == 1, 10, "the subscriber's copy")
            c.close()  # as if the PUBREC had been lost with the connection
            c = Raw(port, "fail2-raw", clean=False, session_expiry_interval=60)
            assert c.connack.session_present
            c.send(Publish("fail2/x", b"once", 2, False, True, 9))
            again, _ = c.next()
            assert isinstance(again, PubRec) and again.reason_code == 0x80, again
            # (a PUBREC for a second publication would come only after the rejection)
            assert len(rejecter.received) == 1, "the resend was published again"
            c.send(PubRel(9))
            comp, _ = c.next()
            assert isinstance(comp, PubComp) and comp.packet_id == 9, comp
            c.send(publish)  # DUP=0 after the exchange ended: a new message
            rec, _ = c.next()
            assert isinstance(rec, PubRec) and rec.reason_code == 0x80, rec
            wait_for(lambda: len(rejecter.received) == 2, 10, "the new message's copy")
            c.close()
        finally:
            client.stop()


# ------------------------------------------------------------------ Message Expiry


def _stats(http_port: int) -> dict[str, Any]:
    status, body = get(http_port, "/health")
    assert status == 200, body
    return body["stats"]


def test_message_expiry_while_a_relay_store_holds_the_message(tmp_path: Any) -> None:
    """MQTT-3.3.2-5: a message whose Message Expiry Interval passed before it could be sent
    to a subscriber's session is not sent; MQTT-3.3.2-6: the interval a subscriber gets is
    what is left of it. The publisher is not failed by the expiry: its PUBACK came when the
    relay store held the copy for the offline session (docs/relay.md). The dropped message is
    counted (`expired` in /health)."""
    mqtt_port, http_port = free_port(), free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{mqtt_port}", "--http",
                       f"127.0.0.1:{http_port}", "--relay-store", str(tmp_path / "relay")):
        sleeper = Mq(mqtt_port, "exp-sleeper", V5, clean=False, expiry=3600)
        sleeper.subscribe("exp/#", 1)
        sleeper.stop()
        pub = Mq(mqtt_port, "exp-pub", V5)
        short = pub.publish("exp/t", b"short", 1, MessageExpiryInterval=1)
        kept = pub.publish("exp/t", b"kept", 1, MessageExpiryInterval=600)
        wait_for(lambda: short in pub.acks and kept in pub.acks, 10, "both PUBACKs")
        assert [pub.acks[m][0].value for m in (short, kept)] == [0, 0], pub.acks
        wait_for(lambda: _stats(http_port)["expired"] >= 1, 10, "the short one to expire")
        back = Mq(mqtt_port, "exp-sleeper", V5, clean=False, expiry=3600)
        assert back.session_present
        wait_for(lambda: len(back.got) >= 1, 10, "the message that had not expired")
        # In publish order: had the expired one been sent, it would have come first.
        assert back.payloads() == [b"kept"]
        interval = back.got[0][3].MessageExpiryInterval
        assert 1 <= interval < 600, f"the interval sent is not the time left: {interval}"
        assert _stats(http_port)["early_failed"] == 1  # answered on the stored copy, then lost
        pub.stop()
        back.stop()


def test_failure_reasons_in_acknowledgements_are_short() -> None:
    """A PUBACK's Reason String stays short whatever failed (strict client parsers): the
    first subscriber and why, how many more, and the delivery id to look up."""
    from mqtt_edge.session import ACK_REASON_MAX, short_reason
    from router.core.actions import Rejected

    failed = [f"client-{i}/mqtt/{'deep/' * 40}#@router-{i}" for i in range(30)]
    info = {"succeeded": ["ok@A"], "failed": failed, "pending": [], "delivery_id": "d" * 32,
            "reasons": {who: "detached before accepting it" for who in failed}}
    text = short_reason(Rejected("exactmesh:delivery-failed", "x" * 5000, info))
    assert len(text) <= ACK_REASON_MAX
    assert text.startswith("failed for 30 of 31 subscriber(s): client-0/mqtt/deep/")
    assert text.endswith(f"(and 29 more); delivery {'d' * 32}: see the router's log")
    one = short_reason(Rejected("exactmesh:delivery-failed", "x", dict(
        info, failed=["s1@B"], reasons={"s1@B": "rejected it"})))
    assert one == f"failed for 1 of 2 subscriber(s): s1@B rejected it; delivery {'d' * 32}: " \
                  "see the router's log"

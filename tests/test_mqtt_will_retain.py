"""Will and retained messages at the MQTT edge (docs/mqtt.md, "Will and retained messages"),
with paho-mqtt (3.1.1 and 5.0) and raw sockets (a connection lost without DISCONNECT) against
one router process. No sleeps to synchronize: every wait is on a condition with a deadline."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_edge.codec import encode
from mqtt_edge.packets import Connect, Disconnect, Properties, Will
from mqtt_edge.retained import RetainedStore
from router.core.topics import matches as topic_matches  # the one matcher retained.py uses
from tests.harness import RouterProcess, free_port, wait_for

V5, V311 = mqtt.MQTTv5, mqtt.MQTTv311
LEVEL = {V5: 5, V311: 4}
BOTH = pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])


@pytest.fixture(scope="module")
def port() -> Any:
    p = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{p}", "--reconnect-timeout", "5"):
        yield p


class Mq:
    """A paho client on its own network thread, recording (topic, payload, qos, retain)."""

    def __init__(self, port: int, client_id: str, version: int = V5) -> None:
        self.version = version
        self.c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                             protocol=version, client_id=client_id)
        self.got: list[tuple[str, bytes, int, bool]] = []
        self.lock = threading.Lock()
        self.connack: Any = None
        self.c.on_message = self._on_message
        self.c.on_connect = lambda c, u, f, rc, p=None: setattr(self, "connack", (rc, p))
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        wait_for(lambda: self.connack is not None, 10, f"CONNACK for {client_id}")

    def _on_message(self, c: Any, u: Any, m: Any) -> None:
        with self.lock:
            self.got.append((m.topic, m.payload, m.qos, bool(m.retain)))

    def subscribe(self, topic_filter: str, qos: int, retain_handling: int = 0) -> None:
        done = threading.Event()
        self.c.on_subscribe = lambda *a: done.set()
        if self.version == V5:
            self.c.subscribe(topic_filter, options=SubscribeOptions(
                qos=qos, retainHandling=retain_handling))
        else:
            self.c.subscribe(topic_filter, qos)
        assert done.wait(10), f"no SUBACK for {topic_filter}"

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        info = self.c.publish(topic, payload, qos, retain=retain)
        info.wait_for_publish(10)

    def received(self) -> list[tuple[str, bytes, int, bool]]:
        with self.lock:
            return list(self.got)

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def raw_connect(port: int, connect: Connect) -> socket.socket:
    """A connection made with a raw socket (so that it can be dropped without DISCONNECT)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(encode(connect, connect.protocol_level))
    first = s.recv(4096)  # blocks (with the socket's timeout) until the CONNACK
    assert first[:1] == b"\x20", f"no CONNACK: {first!r}"
    return s


def absent(sub: Mq, pub: Mq, topic: str, unwanted: bytes) -> None:
    """Nothing `unwanted` reached `sub` on `topic`: a marker published after it arrives
    first (one publisher, one router: in order)."""
    pub.publish(topic, b"marker", 1)
    wait_for(lambda: any(g[1] == b"marker" for g in sub.received()), 10, "the marker")
    assert unwanted not in [g[1] for g in sub.received()]


# ---------------------------------------------------------------------------------- will


@BOTH
def test_will_published_when_the_connection_is_lost(port: int, version: int) -> None:
    """MQTT-3.1.2-7, MQTT-3.1.2-8: a connection that ends without DISCONNECT has its will
    published."""
    v = LEVEL[version]
    topic = f"will/lost/{v}"
    sub = Mq(port, f"wl-sub{v}", version)
    sub.subscribe(topic, 1)
    s = raw_connect(port, Connect(f"wl-dev{v}", v, will=Will(topic, b"gone", 1)))
    s.close()  # no DISCONNECT
    wait_for(lambda: sub.received(), 10, "the will message")
    assert sub.received() == [(topic, b"gone", 1, False)]
    sub.stop()


@BOTH
def test_will_not_published_on_a_clean_disconnect(port: int, version: int) -> None:
    """MQTT-3.1.2-10, MQTT-3.14.4-3: DISCONNECT 0x00 discards the will."""
    v = LEVEL[version]
    topic = f"will/clean/{v}"
    sub = Mq(port, f"wc-sub{v}", version)
    sub.subscribe(topic, 1)
    s = raw_connect(port, Connect(f"wc-dev{v}", v, will=Will(topic, b"gone", 1)))
    s.sendall(encode(Disconnect(0), v))
    s.close()
    pub = Mq(port, f"wc-pub{v}", version)
    absent(sub, pub, topic, b"gone")
    sub.stop()
    pub.stop()


def test_disconnect_with_will_message_publishes_it(port: int) -> None:
    topic = "will/0x04"
    sub = Mq(port, "w4-sub")
    sub.subscribe(topic, 2)
    s = raw_connect(port, Connect("w4-dev", 5, will=Will(topic, b"asked", 2)))
    s.sendall(encode(Disconnect(0x04), 5))
    wait_for(lambda: sub.received(), 10, "the will message")
    assert sub.received() == [(topic, b"asked", 2, False)]
    s.close()
    sub.stop()


def _delayed(client_id: str, topic: str, delay: int, expiry: int) -> Connect:
    return Connect(client_id, 5, clean_start=False,
                   properties=Properties(session_expiry_interval=expiry),
                   will=Will(topic, b"late", 1, properties=Properties(will_delay_interval=delay)))


def test_will_delay(port: int) -> None:
    """MQTT-3.1.2-8: the will is published once its Will Delay Interval has passed."""
    topic = "will/delay"
    sub = Mq(port, "wd-sub")
    sub.subscribe(topic, 1)
    s = raw_connect(port, _delayed("wd-dev", topic, 1, 60))
    lost = time.monotonic()
    s.close()
    wait_for(lambda: sub.received(), 10, "the delayed will")
    assert time.monotonic() - lost >= 0.9
    assert sub.received() == [(topic, b"late", 1, False)]
    sub.stop()


def test_will_delay_longer_than_the_session_goes_with_the_session(port: int) -> None:
    topic = "will/expiry"
    sub = Mq(port, "we-sub")
    sub.subscribe(topic, 1)
    s = raw_connect(port, _delayed("we-dev", topic, 3600, 1))
    lost = time.monotonic()
    s.close()
    wait_for(lambda: sub.received(), 10, "the will when the session ends")
    assert 0.9 <= time.monotonic() - lost < 5
    sub.stop()


def test_will_delay_cancelled_by_a_resume(port: int) -> None:
    topic = "will/resume"
    sub = Mq(port, "wr-sub")
    sub.subscribe(topic, 1)
    s = raw_connect(port, _delayed("wr-dev", topic, 2, 60))
    s.close()
    s2 = raw_connect(port, _delayed("wr-dev", topic, 2, 60))  # the session resumes
    pub = Mq(port, "wr-pub")
    deadline = time.monotonic() + 2.5  # past the will's delay
    while time.monotonic() < deadline:
        absent(sub, pub, topic, b"late")
    s2.sendall(encode(Disconnect(0), 5))
    s2.close()
    sub.stop()
    pub.stop()


def test_will_published_on_takeover_without_delay(port: int) -> None:
    topic = "will/takeover"
    sub = Mq(port, "wt-sub")
    sub.subscribe(topic, 1)
    s = raw_connect(port, Connect("wt-dev", 5, will=Will(topic, b"taken", 1)))
    s2 = raw_connect(port, Connect("wt-dev", 5))
    wait_for(lambda: sub.received(), 10, "the will of the taken-over connection")
    assert sub.received() == [(topic, b"taken", 1, False)]
    s.close()
    s2.close()
    sub.stop()


# ---------------------------------------------------------------------------------- retained


@BOTH
def test_retained_delivered_replaced_and_cleared(port: int, version: int) -> None:
    """MQTT-3.3.1-5: a RETAIN PUBLISH replaces the topic's retained message; MQTT-3.3.1-6,
    MQTT-3.3.1-7: an empty one removes it and is not kept; MQTT-3.3.1-9: a new subscription
    (Retain Handling 0) gets the retained message; MQTT-3.3.1-12: a live copy goes with RETAIN 0."""
    v = LEVEL[version]
    topic = f"ret/{v}/a"
    pub = Mq(port, f"rp{v}", version)
    pub.publish(topic, b"first", 1, retain=True)  # no subscriber: kept all the same
    late = Mq(port, f"rs1-{v}", version)
    late.subscribe(f"ret/{v}/+", 1)
    wait_for(lambda: late.received(), 10, "the retained message")
    assert late.received() == [(topic, b"first", 1, True)]
    # a live copy of a retained PUBLISH to an existing subscriber is a normal one (RETAIN 0)
    pub.publish(topic, b"second", 1, retain=True)
    wait_for(lambda: len(late.received()) == 2, 10, "the live copy")
    assert late.received()[1] == (topic, b"second", 1, False)
    later = Mq(port, f"rs2-{v}", version)
    later.subscribe(f"ret/{v}/#", 2)
    wait_for(lambda: later.received(), 10, "the replaced retained message")
    assert later.received() == [(topic, b"second", 1, True)]
    pub.publish(topic, b"", 1, retain=True)  # clears it
    last = Mq(port, f"rs3-{v}", version)
    last.subscribe(f"ret/{v}/a", 1)
    absent(last, pub, topic, b"second")
    assert [g[1] for g in last.received()] == [b"marker"]
    for c in (pub, late, later, last):
        c.stop()


def test_retain_handling(port: int) -> None:
    """MQTT-3.3.1-10: Retain Handling 1 sends retained messages only for a new subscription;
    MQTT-3.3.1-11: Retain Handling 2 sends none."""
    topic = "ret/rh/t"
    pub = Mq(port, "rh-pub")
    pub.publish(topic, b"kept", 0, retain=True)
    none = Mq(port, "rh-2")
    none.subscribe(topic, 1, retain_handling=2)
    absent(none, pub, topic, b"kept")
    once = Mq(port, "rh-1")
    once.subscribe(topic, 1, retain_handling=1)
    wait_for(lambda: once.received(), 10, "the retained message")
    once.subscribe(topic, 1, retain_handling=1)  # exists already: none this time
    absent(once, pub, topic, b"never")
    assert [g[1] for g in once.received()] == [b"kept", b"marker"]
    assert once.received()[0] == (topic, b"kept", 0, True)
    for c in (pub, none, once):
        c.stop()


def test_will_with_retain_is_stored(port: int) -> None:
    """MQTT-3.1.2-15: a will with Will Retain 1 is published as a retained message."""
    topic = "ret/will"
    live = Mq(port, "rw-live")
    live.subscribe(topic, 1)
    s = raw_connect(port, Connect("rw-dev", 5, will=Will(topic, b"rip", 1, retain=True)))
    s.close()
    wait_for(lambda: live.received(), 10, "the will")
    sub = Mq(port, "rw-sub")
    sub.subscribe(topic, 1)
    wait_for(lambda: sub.received(), 10, "the retained will")
    assert sub.received() == [(topic, b"rip", 1, True)]
    sub.stop()
    live.stop()


def test_retained_store_is_bounded() -> None:
    store = RetainedStore(max_count=3, max_bytes=40)
    for i in range(5):
        store.put(f"t/{i}", b"x", 0)
    assert [r.topic for r, _ in store.matching("#", 0.0)] == ["t/2", "t/3", "t/4"]
    store.put("big", b"y" * 30, 0)  # 33 bytes: 45 in all, the oldest go until <= 40
    assert [r.topic for r, _ in store.matching("#", 0.0)] == ["t/4", "big"]
    store.put("big", b"", 0)  # cleared: an empty entry stays (3 bytes) so nothing older returns
    assert [r.topic for r, _ in store.matching("#", 0.0)] == ["t/4"] and store.bytes == 7
    assert len(store) == 1 and store.get("big") is None
    assert topic_matches("a/+/c", "a/b/c") and topic_matches("a/#", "a")
    assert not topic_matches("#", "$SYS/x") and not topic_matches("a/+", "a/b/c")


def test_retained_entries_merge_newest_wins() -> None:
    """What routers share (mqtt_edge/retained.py): the newest stamp per topic wins on every
    router, a clearing included, whatever order the entries arrive in."""
    props = Properties(user_properties=(("k", "v"), ("k", "w")), message_expiry_interval=60,
                       content_type="text/plain")
    a, b, c = (RetainedStore(router=r) for r in "ABC")
    old = a.put("t/x", b"old", 1, props, now=0.0, wall=100.0)
    new = b.put("t/x", b"new", 2, now=0.0, wall=200.0)
    assert old is not None and new is not None
    # C hears the newer one first, then the older one late: the older one does not win.
    assert c.merge(new.wire(0.0), now=0.0) and not c.merge(old.wire(0.0), now=0.0)
    assert c.get("t/x").payload == b"new"  # type: ignore[union-attr]
    # Properties and the expiry interval left survive the trip.
    assert b.merge(old.wire(10.0), now=5.0) is False
    assert c.merge(a.put("t/y", b"y", 1, props, now=0.0, wall=300.0).wire(10.0), now=5.0)
    ((_entry, sent),) = c.matching("t/y", now=6.0)
    assert sent.user_properties == (("k", "v"), ("k", "w")) and sent.content_type == "text/plain"
    assert sent.message_expiry_interval == 49
    # A clearing newer than the value removes it everywhere it arrives, in any order.
    clear = b.put("t/x", b"", 0, now=0.0, wall=400.0)
    assert clear is not None and c.merge(clear.wire(0.0), now=0.0)
    assert c.get("t/x") is None and not c.merge(new.wire(0.0), now=0.0)
    # A router that becomes reachable gets a router's own entries, and those whose origin
    # cannot send them: itself (it may have restarted empty), or a router not reachable.
    assert [i[1] for i in b.for_router("C", {"A", "C"}, 0.0)] == ["t/x"]
    assert [i[1] for i in a.for_router("C", {"B", "C"}, 0.0)] == ["t/x", "t/y"]
    assert [i[1] for i in c.for_router("B", {"A", "B"}, 0.0)] == ["t/x"]  # B's, for B
    assert [i[1] for i in c.for_router("A", {"A"}, 0.0)] == ["t/y", "t/x"]  # B unreachable
    assert [i[1] for i in c.for_router("A", {"A", "B"}, 0.0)] == ["t/y"]
    # Stamps of one router only grow, even if its wall clock steps back.
    s1 = a.put("t/z", b"1", 0, wall=1000.0)
    s2 = a.put("t/z", b"2", 0, wall=999.0)
    assert s1 is not None and s2 is not None and s2.stamp > s1.stamp


def test_connack_says_retain_available(port: int) -> None:
    c = Mq(port, "ra")
    props = c.connack[1]
    assert getattr(props, "RetainAvailable", 1) == 1
    c.stop()

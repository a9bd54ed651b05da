"""A router with a relay store (`--relay-store DIR`, docs/relay.md) and real MQTT clients
(paho-mqtt, mosquitto_pub): a persistent session that is offline no longer holds its
publishers. Their QoS 1 and 2 publishes complete as soon as the copies are on disk, as they
would with an MQTT server that stores for offline sessions, and the session gets every
message once, in order, when it returns. Without the store the old rule stands (the
publisher waits: tests/test_mqtt_backpressure.py).

Every process is stopped by its PID; every wait is on a condition with a deadline."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RouterProcess, free_port, wait_for
from tests.test_mqtt_edge import V5, V311, Mq

MOSQUITTO_PUB = shutil.which("mosquitto_pub")
WINDOW = 16  # the router's publisher window: without the store, publishes stop after it


def relay_router(tmp_path: Path, *extra: str) -> tuple[RouterProcess, int]:
    port = free_port()
    return RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", "--publisher-window", str(WINDOW),
                         "--relay-store", str(tmp_path / "relay"), *extra), port


def offline_session(port: int, client_id: str, version: int, topic_filter: str,
                    qos: int) -> None:
    dev = Mq(port, client_id, version, clean=False, expiry=3600)
    dev.subscribe(topic_filter, qos)
    dev.stop()


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_publishes_to_an_offline_session_complete_at_once_and_reach_it_once(
        tmp_path: Path, version: int, qos: int) -> None:
    """MQTT-4.3.2-4 / MQTT-4.3.3-8 (the server's PUBACK / PUBREC): with a relay store they
    mean "every matched subscriber accepted it or has it durably stored", so a session that
    is away no longer holds them. 200 messages, 12 times the router's window."""
    r, port = relay_router(tmp_path)
    with r:
        offline_session(port, "sleeper", version, "relay/#", qos)
        # The router's Receive Maximum (5.0; its window for 3.1.1), which paho does not read
        # from the CONNACK by itself (MQTT-3.3.4-7: a client must not exceed it).
        pub = Mq(port, "pub", version, max_inflight=WINDOW)
        n = 200
        for i in range(n):
            pub.publish("relay/t", b"%d" % i, qos)
        wait_for(lambda: len(pub.acks) == n, 20,
                 f"every {'PUBACK' if qos == 1 else 'PUBCOMP'} while the session is away")
        assert all(rc.value == 0 for rc, _ in pub.acks.values()), pub.acks
        back = Mq(port, "sleeper", version, clean=False, expiry=3600)
        assert back.session_present
        wait_for(lambda: len(back.got) >= n, 20, "the stored messages")
        assert back.payloads() == [b"%d" % i for i in range(n)], "lost, duplicated or reordered"
        pub.stop()
        back.stop()
        assert r.proc.poll() is None


def test_the_acknowledgement_comes_within_a_second(tmp_path: Path) -> None:
    """The issue's bound, measured one message at a time: publish, wait for the PUBACK."""
    r, port = relay_router(tmp_path)
    with r:
        offline_session(port, "away", V5, "lat/#", 1)
        pub = Mq(port, "lat-pub", V5)
        took = []
        for i in range(50):
            t0 = time.monotonic()
            mid = pub.publish("lat/t", b"%d" % i, 1)
            wait_for(lambda mid=mid: mid in pub.acks, 5, f"PUBACK {i}")
            took.append(time.monotonic() - t0)
        took.sort()
        print(f"PUBACK to an offline session, p50 {took[25] * 1e3:.1f} ms, "
              f"max {took[-1] * 1e3:.1f} ms")
        assert took[-1] < 1.0
        pub.stop()


@pytest.mark.skipif(not MOSQUITTO_PUB, reason="mosquitto_pub not found (make test installs it)")
@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_pub_to_an_offline_session_finishes(tmp_path: Path, version: str) -> None:
    """mosquitto_pub -l at QoS 1 sends 100 lines and exits only once each is acknowledged."""
    r, port = relay_router(tmp_path)
    with r:
        offline_session(port, "dev-m", V5 if version == "mqttv5" else V311, "mq/#", 1)
        lines = "".join(f"line {i}\n" for i in range(100))
        p = subprocess.Popen([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-V", version,
                              "-i", "mpub", "-q", "1", "-t", "mq/t", "-l"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(lines, timeout=30)
        finally:
            if p.poll() is None:
                os.kill(p.pid, 9)
                p.wait(5)
        assert p.returncode == 0, out
        back = Mq(port, "dev-m", V5 if version == "mqttv5" else V311, clean=False, expiry=3600)
        wait_for(lambda: len(back.got) >= 100, 20, "the stored lines")
        assert back.payloads() == [f"line {i}".encode() for i in range(100)]
        back.stop()


def test_bodies_wait_on_disk_not_in_the_router(tmp_path: Path) -> None:
    """Messages of 10 KiB for an offline session: past a warm-up that fills the router's
    bounded caches, each waiting delivery costs the router far less memory than its body,
    which is in the store; they all arrive when the session returns."""
    r, port = relay_router(tmp_path)
    with r:
        offline_session(port, "big", V5, "big/#", 1)
        pub = Mq(port, "big-pub", V5, max_inflight=WINDOW)
        body = b"x" * 10240
        warm = [pub.publish("big/t", b"w%04d" % i + body, 1) for i in range(1000)]
        wait_for(lambda: all(m in pub.acks for m in warm), 30, "warm-up acknowledged")
        before = r.rss_kib()
        n = 3000
        mids = [pub.publish("big/t", b"%05d" % i + body, 1) for i in range(n)]
        wait_for(lambda: all(m in pub.acks for m in mids), 60, "every PUBACK")
        per = (r.rss_kib() - before) * 1024 / n
        print(f"router RSS per waiting delivery of 10 KiB: {per:.0f} bytes")
        assert per < 10240 / 3, f"{per:.0f} bytes per waiting delivery: bodies held in memory"
        back = Mq(port, "big", V5, clean=False, expiry=3600)
        wait_for(lambda: len(back.got) >= n + 1000, 60, "the stored messages")
        got = [p[:5] for p in back.payloads()[1000:]]
        assert got == [b"%05d" % i for i in range(n)]
        pub.stop()
        back.stop()



@pytest.mark.parametrize("qos", [1, 2])
def test_a_router_killed_while_the_session_was_away_still_delivers_what_it_stored(
        tmp_path: Path, qos: int) -> None:
    """PUBACK / PUBREC said "stored": SIGKILL the router right after, start it again on the
    same store, and the session is present and gets every message once, in order."""
    r, port = relay_router(tmp_path)
    try:
        offline_session(port, "survivor", V5, "crash/#", qos)
        pub = Mq(port, "crash-pub", V5, max_inflight=WINDOW)
        n = 150
        mids = [pub.publish("crash/t", b"%d" % i, qos) for i in range(n)]
        wait_for(lambda: all(m in pub.acks for m in mids), 20, "every acknowledgement")
        os.kill(r.proc.pid, signal.SIGKILL)  # at once: nothing is flushed on the way out
        r.proc.wait(10)
        pub.stop()
    finally:
        r.stop()
    again = RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", "--publisher-window",
                          str(WINDOW), "--relay-store", str(tmp_path / "relay"))
    with again:
        assert again.logged("1 persistent MQTT session(s) restored"), "".join(again.log)
        assert again.logged(f"{n} stored message copies restored"), "".join(again.log)
        back = Mq(port, "survivor", V5, clean=False, expiry=3600)
        assert back.session_present, "the session did not survive the restart"
        wait_for(lambda: len(back.got) >= n, 20, "the stored messages after the restart")
        assert back.payloads() == [b"%d" % i for i in range(n)]
        back.stop()
    # Acknowledged, they left the store: a further restart finds the session and nothing else.
    third = RouterProcess("A", "--mqtt", f"127.0.0.1:{port}", "--relay-store",
                          str(tmp_path / "relay"))
    with third:
        assert third.logged("1 persistent MQTT session(s) restored"), "".join(third.log)
        assert not third.logged("stored message copies restored"), "".join(third.log)


def test_a_client_publishing_to_itself_past_its_receive_maximum_does_not_wait_forever(
        tmp_path: Path) -> None:
    """The issue's deadlock, with paho's manual acknowledgements: a persistent session with
    Receive Maximum 2 subscribes to its own topic and publishes 6 QoS 1 messages before it
    acknowledges any it receives. Without a store the third PUBACK waits for the client's own
    acknowledgements, which wait for the PUBACKs. With one, once its window is full the
    copies in it and those after it are stored, every PUBACK comes, and then it gets all 6
    once, in order."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    r, port = relay_router(tmp_path)
    with r:
        got: list[Any] = []
        acked: set[int] = set()
        ready = threading.Event()
        c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                        protocol=mqtt.MQTTv5, client_id="loop")
        c.manual_ack_set(True)
        c.on_connect = lambda *a: ready.set()
        c.on_message = lambda cl, u, m: got.append(m)
        c.on_publish = lambda cl, u, mid, rc, p: acked.add(mid)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        props.ReceiveMaximum = 2
        c.connect("127.0.0.1", port, clean_start=False, properties=props)
        c.loop_start()
        try:
            assert ready.wait(10)
            subscribed = threading.Event()
            c.on_subscribe = lambda *a: subscribed.set()
            c.subscribe("self/#", 1)
            assert subscribed.wait(10)
            mids = [c.publish("self/t", b"%d" % i, 1).mid for i in range(6)]
            wait_for(lambda: all(m in acked for m in mids), 10,
                     "every PUBACK while the client holds back its own acknowledgements")
            assert len(got) == 2, "the router sent more than the client's Receive Maximum"
            done = 0
            deadline = time.monotonic() + 20
            while done < 6 and time.monotonic() < deadline:
                if done < len(got):
                    c.ack(got[done].mid, 1)
                    done += 1
                else:
                    wait_for(lambda n=done: len(got) > n, 10, f"message {done + 1}")
            assert [m.payload for m in got] == [b"%d" % i for i in range(6)]
        finally:
            c.disconnect()
            c.loop_stop()


def test_a_publisher_on_another_router_is_not_held_by_an_offline_session(
        tmp_path: Path) -> None:
    """A line A - B - C, each router with a relay store: a persistent session at C goes
    offline; a publisher at A sends 200 QoS 1 messages, 12 times its window. C stores each
    copy and tells A (mesh item "stored"), so A answers each PUBACK without waiting for the
    device; back at C, the device gets every message once, in order."""
    from tests.mesh_harness import start_mesh

    ports = {r: free_port() for r in "ABC"}
    mesh = start_mesh("line", 3, common=["--publisher-window", str(WINDOW)],
                      extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}", "--relay-store",
                                 str(tmp_path / r), "--log-level", "debug"] for r in "ABC"})
    try:
        mesh.wait_links_up(timeout=30.0)
        offline_session(ports["C"], "far", V5, "far/#", 1)
        mesh["A"].wait_logged("router A: knows subscriber far/mqtt/far/#@C")
        pub = Mq(ports["A"], "far-pub", V5, max_inflight=WINDOW)
        n = 200
        mids = [pub.publish("far/t", b"%d" % i, 1) for i in range(n)]
        wait_for(lambda: all(m in pub.acks for m in mids), 30,
                 "every PUBACK at A while the session at C is away")
        assert all(rc.value == 0 for rc, _ in pub.acks.values())
        back = Mq(ports["C"], "far", V5, clean=False, expiry=3600)
        assert back.session_present
        wait_for(lambda: len(back.got) >= n, 30, "the messages stored at C")
        assert back.payloads() == [b"%d" % i for i in range(n)]
        pub.stop()
        back.stop()
    finally:
        mesh.stop()

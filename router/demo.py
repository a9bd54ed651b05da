"""`exactmesh demo`: three routers in a line, publishers and subscribers spread over them, one
router killed with SIGKILL mid-stream and restarted, and a delivery report; then one router
with a relay store and an MQTT device that is offline (router/demo_relay.py).

It starts three real `exactmesh router` processes on free loopback ports (A - B - C) and
attaches durable subscribers with overlapping wildcard filters on every router, using the
client SDK (`amqp_edge/client.py`), each with a list of two routers to fail over to. Once
gossip has told every publishing router about every subscriber, SDK publishers on A and C
publish numbered messages. When a third of the stream has arrived, router C (a publisher's
and two subscribers' router) is killed with SIGKILL and started again a second later; its
clients resume at B. An MQTT 5 device (paho-mqtt, QoS 2, persistent session) subscribes at
router B to the same topics: one topic space for both protocols. The report checks every
message each subscriber was owed against what it processed (lost, duplicated, out of order)
and every publisher's outcomes, and says how long the failover took. It exits 1 if anything
is wrong.

`exactmesh demo --secure` runs the same with the routers secured as an operator would
(docs/security.md): clients over TLS logging in, per-topic rules, peers over mutual TLS; and
tries a log-in with a wrong password and publishes where the rules forbid it, which the report
shows refused (router/demo_secure.py).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from amqp_edge.client import ClientClosed, Publisher, Subscriber

from .core.topics import matches
from .demo_procs import Router, free_ports, wait
from .demo_secure import BILLING, SENSOR, SHOP, Secure

ROUTERS = ["A", "B", "C"]
FAILOVER = {"A": "B", "B": "A", "C": "B"}  # each client's second router
# (name, router, topic): publishers on both ends of the line
PUBLISHERS = [("paris", "A", "orders/eu/paris"), ("nyc", "A", "orders/us/nyc"),
              ("berlin", "C", "orders/eu/berlin")]
# (name, router, filter): subscribers everywhere
SUBSCRIBERS = [("all-a", "A", "orders/#"), ("eu-b", "B", "orders/eu/+"),
               ("paris-c", "C", "orders/+/paris"), ("all-c", "C", "orders/#"),
               ("pay-b", "B", "payments/#")]
# (name, router, filter): an MQTT device, QoS 2 (skipped when paho-mqtt is not installed)
DEVICE = ("sensor-b", "B", "orders/eu/#")
VICTIM = "C"
WINDOW = 100


@dataclass
class DemoSub:
    name: str
    router: str
    filter: str
    client: Subscriber
    ids: list[str] = field(default_factory=list)  # message ids processed, in order
    times: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.client.receive(timeout=0.1)
            except ClientClosed:
                return  # the demo is over
            if msg is not None:
                self.ids.append(str(msg.message_id))
                self.times.append(time.monotonic())
                self.client.accept(msg)


class DemoDevice:
    """An MQTT 5 device on paho-mqtt's network thread: QoS 2, clean start off (a persistent
    session: a warm subscriber in mesh terms). Its payloads are the publishers' bodies
    ("TOPIC #N"), turned back into message ids for the report. With `secure`, over TLS and
    logged in."""

    def __init__(self, name: str, router: str, topic_filter: str, port: int,
                 publisher_of: dict[str, str], secure: Secure | None = None) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.name, self.router, self.filter = name, router, topic_filter
        self.ids: list[str] = []
        self.times: list[float] = []
        self._publisher_of = publisher_of
        self._subscribed = threading.Event()
        self.acks: dict[int, int] = {}  # PUBACK reason code by message id
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                                  protocol=mqtt.MQTTv5, client_id=name)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_connect = lambda c, *a: c.subscribe(topic_filter, qos=2)
        self.client.on_publish = lambda c, u, mid, rc, p: self.acks.__setitem__(mid, rc.value)
        if secure is not None:
            secure.mqtt_login(self.client, SENSOR)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 60
        self.client.connect("127.0.0.1", port, keepalive=30, clean_start=False,
                            properties=props)
        self.client.loop_start()

    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    def try_publish(self, topic: str) -> str | None:
        """Publish at QoS 1 where the device may only read: how it was refused, or None."""
        mid = self.client.publish(topic, b"not mine to write", qos=1).mid
        deadline = time.monotonic() + 10
        while mid not in self.acks and time.monotonic() < deadline:
            time.sleep(0.01)
        return "PUBACK 0x87 (not authorized)" if self.acks.get(mid) == 0x87 else None

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        topic, _, n = msg.payload.decode().rpartition(" #")
        self.ids.append(f"{self._publisher_of.get(topic, '?')}:{n}")
        self.times.append(time.monotonic())

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _device(routers: dict[str, Router], secure: Secure | None) -> DemoDevice | None:
    try:
        import paho.mqtt.client  # noqa: F401
    except ImportError:
        print("(paho-mqtt is not installed: the demo runs without its MQTT device)")
        return None
    name, router, topic_filter = DEVICE
    return DemoDevice(name, router, topic_filter, routers[router].mqtt_port,
                      {topic: pub for pub, _, topic in PUBLISHERS}, secure)


@dataclass
class DemoPub:
    name: str
    router: str
    topic: str
    client: Publisher
    count: int
    sent_at: dict[int, float] = field(default_factory=dict)

    def run(self) -> None:
        for i in range(self.count):
            seq = self.client.send(f"{self.topic} #{i + 1}")
            self.sent_at[seq] = time.monotonic()

    def ids(self) -> list[str]:
        return [f"{self.name}:{i}" for i in range(1, self.count + 1)]


def report(pubs: list[DemoPub], subs: list[DemoSub], device: DemoDevice | None,
           routers: dict[str, Router], elapsed: float, killed_at: float,
           back_at: float, refusals: list[tuple[str, str | None]] | None = None) -> bool:
    where = {r.url: name for name, r in routers.items()}
    total = sum(p.count for p in pubs)
    print(f"\n{'publisher':<10}{'router':<10}{'topic':<18}{'sent':>6}{'accepted':>10}"
          f"{'failed':>8}{'resent':>8}")
    ok = True
    for p in pubs:
        st = p.client.stats()
        failed = len(p.client.failures())
        moved = f"{p.router}->{where.get(st['url'], '?')}" if where.get(st["url"]) != p.router \
            else p.router
        ok = ok and st["accepted_total"] == p.count and failed == 0
        print(f"{p.name:<10}{moved:<10}{p.topic:<18}{p.count:>6}{st['accepted_total']:>10}"
              f"{failed:>8}{st['resent']:>8}")
    print(f"\n{'subscriber':<11}{'router':<10}{'filter':<17}{'owed':>6}{'processed':>10}"
          f"{'dup':>5}{'lost':>6}{'in order':>10}{'suppressed':>12}")
    rows = [(s.name, s.router, where.get(s.client.stats()["url"], "?"), s.filter, s.ids,
             str(s.client.stats()["duplicates_suppressed"])) for s in subs]
    if device is not None:
        rows.append((device.name, device.router, f"{device.router} MQTT", device.filter,
                     device.ids, "-"))
    for name, router, now_at, flt, ids_seen, suppressed in rows:
        owed_by_pub = [p.ids() for p in pubs if matches(flt, p.topic)]
        owed = {i for ids in owed_by_pub for i in ids}
        seen = set(ids_seen)
        dupes = len(ids_seen) - len(seen)
        lost = len(owed - seen)
        in_order = all([i for i in ids_seen if i in set(ids)] == ids for ids in owed_by_pub)
        ok = ok and dupes == 0 and lost == 0 and in_order and seen <= owed
        moved = router if now_at == router else (now_at if "MQTT" in now_at
                                                 else f"{router}->{now_at}")
        print(f"{name:<11}{moved:<10}{flt:<17}{len(owed):>6}{len(ids_seen):>10}"
              f"{dupes:>5}{lost:>6}{'yes' if in_order else 'NO':>10}{suppressed:>12}")
    moved = [s for s in subs if s.router == VICTIM]
    after = [t for s in moved for t in s.times if t > killed_at]
    first = min(after) - killed_at if after else float("nan")
    last = max(t for s in [*subs, *([device] if device else [])] for t in s.times) - killed_at
    print(f"\nrouter {VICTIM} was killed with SIGKILL mid-stream and restarted "
          f"{back_at - killed_at:.1f} s later")
    print(f"its subscribers' first delivery after the kill (at router {FAILOVER[VICTIM]}): "
          f"{first * 1000:.0f} ms; last delivery of the run: {last:.2f} s after the kill; "
          f"{total} messages published in {elapsed:.2f} s")
    if refusals is not None:  # --secure
        print()
        for what, how in refusals:
            print(f"refused as expected: {what}: {how}" if how else f"NOT REFUSED: {what}")
        ok = ok and all(how for _, how in refusals)
    print("\nRESULT: " + ("every subscriber processed every message it was owed exactly once, "
                          "in publish order; every publisher was told accepted for all" if ok
                          else "FAILED: see the tables above"))
    if ok and refusals is not None:
        print("        and every forbidden action was refused")
    return ok


def diagnose(pubs: list[DemoPub], subs: list[DemoSub], routers: dict[str, Router]) -> None:
    """What a failed run leaves to look at: the clients' counters and the routers' notices."""
    print("\ndiagnostics:")
    for p in pubs:
        print(f"  publisher {p.name}: {p.client.stats()}")
    for s in subs:
        print(f"  subscriber {s.name}: {s.client.stats()}")
    for name, r in routers.items():
        notes = [line.rstrip() for line in r.lines if " DEBUG " not in line]
        print(f"  router {name} (last notices):")
        for line in notes[-15:]:
            print(f"    {line}")


def _refuse(secure: Secure, routers: dict[str, Router], device: DemoDevice | None,
            state_dir: str, out: list[tuple[str, str | None]]) -> None:
    """--secure: what the password file and the rules must refuse, tried at A and B (C is
    the router killed), into `out` as (what was tried, how it was refused or None)."""
    out.extend(secure.refusals(("B", routers["B"].url), ("A", routers["A"].url), state_dir))
    if device is not None:
        topic = PUBLISHERS[0][2]
        out.append((f"MQTT device {device.name} (user {SENSOR}) publishing to {topic} at "
                    f"{device.router}", device.try_publish(topic)))


def run_demo(messages: int = 2000, secure: bool = False) -> int:
    amqp = free_ports(3)
    mesh = free_ports(3)
    mqtt = free_ports(3)
    routers: dict[str, Router] = {}
    subs: list[DemoSub] = []
    pubs: list[DemoPub] = []
    device: DemoDevice | None = None
    refusals: list[tuple[str, str | None]] | None = None
    state = tempfile.TemporaryDirectory(prefix="exactmesh-demo-")
    try:
        sec = Secure(state.name) if secure else None
        for i, name in enumerate(ROUTERS):  # A - B - C: each connects to the previous one
            routers[name] = Router(name, amqp[i], mesh[i], mesh[i - 1] if i else None, mqtt[i],
                                   secure=sec)
        for r in routers.values():
            wait(r.ready, 15, f"router {r.name}")
        print("routers: " + " - ".join(f"{n} ({r.url})" for n, r in routers.items()))
        if sec is not None:
            print(f"secured: clients over TLS (amqps, mqtts) logging in (publishers as {SHOP}, "
                  f"subscribers as {BILLING}, the device as {SENSOR}), per-topic rules, "
                  "peers over mutual TLS")

        def urls(router: str) -> list[str]:
            return [routers[router].url, routers[FAILOVER[router]].url]

        for name, router, flt in SUBSCRIBERS:
            client = Subscriber(urls(router), flt, id=name, state_dir=f"{state.name}/{name}",
                                durable=True, timeout=60, login=sec.login(BILLING) if sec else None)
            subs.append(DemoSub(name, router, flt, client))
        device = _device(routers, sec)
        where_subs = [router for _, router, _ in SUBSCRIBERS]
        if device is not None:
            wait(device.subscribed, 15, "the MQTT device's SUBACK")
            where_subs.append(device.router)
        remote = {r: sum(1 for s in where_subs if s != r) for r in ROUTERS}
        for r in {router for _, router, _ in PUBLISHERS}:
            wait(lambda r=r: routers[r].knows() >= remote[r], 15, f"gossip to {r}")
        print("gossip converged: every publishing router knows every subscriber")
        for s in subs:
            threading.Thread(target=s.run, daemon=True).start()
        refusing = None
        if sec is not None:  # meanwhile, at the routers that are not killed
            refusals = []
            refusing = threading.Thread(target=_refuse, daemon=True, args=(
                sec, routers, device, f"{state.name}/refused", refusals))
            refusing.start()
        started = time.monotonic()
        for name, router, topic in PUBLISHERS:
            client = Publisher(urls(router), topic, id=name, state_dir=f"{state.name}/{name}",
                               window=WINDOW, login=sec.login(SHOP) if sec else None)
            pubs.append(DemoPub(name, router, topic, client, messages))
        feeders = [threading.Thread(target=p.run, daemon=True) for p in pubs]
        for f in feeders:
            f.start()
        everyone: list[Any] = [*subs, *([device] if device is not None else [])]
        expected = sum(1 for s in everyone for p in pubs if matches(s.filter, p.topic)) \
            * messages
        wait(lambda: sum(len(s.ids) for s in everyone) >= expected // 3, 60, "a third of it")
        killed_at = time.monotonic()
        routers[VICTIM].kill()
        print(f"router {VICTIM} killed with SIGKILL mid-stream "
              f"({sum(len(s.ids) for s in everyone)} of {expected} deliveries done)")
        wait(lambda: time.monotonic() - killed_at >= 1.0, 2, "a second")
        routers[VICTIM].start()
        wait(routers[VICTIM].ready, 15, f"router {VICTIM} to restart")
        back_at = time.monotonic()
        print(f"router {VICTIM} restarted")
        deadline = time.monotonic() + 45  # then report what is missing, if anything
        for f in feeders:
            f.join(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline and (
                sum(len(s.ids) for s in everyone) < expected
                or any(p.client.pending for p in pubs)):
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        if refusing is not None and refusals is not None:
            refusing.join(30)
            if refusing.is_alive():
                refusals.append(("the refusal checks: no answer within 30 s", None))
        ok = report(pubs, subs, device, routers, elapsed, killed_at, back_at, refusals)
        if not ok:
            diagnose(pubs, subs, routers)
        from .demo_relay import run_relay_demo  # (it imports this module's helpers)

        ok = run_relay_demo(state.name, messages, sec) and ok
    finally:
        for s in subs:
            s.stop.set()
        for client in [p.client for p in pubs] + [s.client for s in subs]:
            client.close()
        if device is not None:
            device.close()
        for r in routers.values():
            r.stop()
        state.cleanup()
    return 0 if ok else 1

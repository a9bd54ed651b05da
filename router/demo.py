"""`exactmesh demo`: three routers in a line, publishers and subscribers spread over them,
and a delivery report.

It starts three real `exactmesh router` processes on free loopback ports (A - B - C), attaches
subscribers with overlapping wildcard filters on every router using proton's own client,
waits until gossip has told every publishing router about every subscriber, publishes
numbered messages to three topics from routers A and C with a window of unacknowledged
messages, and then checks every message each subscriber was owed against what it received:
lost, duplicated, out of order. It exits 1 if anything is wrong.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from .topics import matches

ROUTERS = ["A", "B", "C"]
# (router, topic): publishers on both ends of the line
PUBLISHERS = [("A", "orders/eu/paris"), ("A", "orders/us/nyc"), ("C", "orders/eu/berlin")]
# (router, filter): subscribers everywhere
SUBSCRIBERS = [("A", "orders/#"), ("B", "orders/eu/+"), ("C", "orders/+/paris"),
               ("C", "orders/#"), ("B", "payments/#")]
WINDOW = 100
SECRET = "demo-secret"


@dataclass
class Sub:
    router: str
    filter: str
    received: list[str] = field(default_factory=list)


@dataclass
class Pub:
    router: str
    topic: str
    sender: Any = None
    sent: list[str] = field(default_factory=list)


class DemoClients(MessagingHandler):
    """All publishers and subscribers, in one proton container, one connection per router."""

    def __init__(self, urls: dict[str, str], messages: int, ready: threading.Event) -> None:
        super().__init__(auto_accept=True)
        self.urls = urls
        self.total = messages
        self.ready = ready  # set by the demo once gossip has converged
        self.subs = [Sub(r, f) for r, f in SUBSCRIBERS]
        self.pubs = [Pub(r, t) for r, t in PUBLISHERS]
        self.receivers: dict[Any, Sub] = {}
        self.sent_at: dict[Any, float] = {}
        self.latencies: list[float] = []
        self.outcomes: dict[str, int] = {}
        self.sent = 0
        self.attached = threading.Event()
        self.started = 0.0
        self.finished = 0.0
        self.conns: dict[str, Any] = {}

    def on_start(self, event: Any) -> None:
        self.container = event.container
        for router, url in self.urls.items():
            self.conns[router] = event.container.connect(url, reconnect=False)
        for i, sub in enumerate(self.subs):
            r = event.container.create_receiver(self.conns[sub.router], sub.filter,
                                                name=f"sub{i}")
            self.receivers[r] = sub

    def on_link_opened(self, event: Any) -> None:
        if event.receiver in self.receivers and all(
            r.state & r.REMOTE_ACTIVE for r in self.receivers
        ):
            self.attached.set()

    def start_publishing(self) -> None:
        """Called on the container thread once every router knows every subscriber."""
        self.started = time.monotonic()
        for p in self.pubs:
            p.sender = self.container.create_sender(self.conns[p.router], p.topic,
                                                    name=f"pub-{p.topic}")

    def on_sendable(self, event: Any) -> None:
        # Round-robin over the publishers, within one window in total.
        while self.sent < self.total and self.sent - self.done() < WINDOW:
            pub = self.pubs[self.sent % len(self.pubs)]
            if pub.sender is None or not pub.sender.credit:
                return
            body = f"{pub.topic}#{self.sent}"
            d = pub.sender.send(Message(body=body))
            pub.sent.append(body)
            self.sent_at[d] = time.monotonic()
            self.sent += 1

    def done(self) -> int:
        return sum(self.outcomes.values())

    def on_message(self, event: Any) -> None:
        self.receivers[event.receiver].received.append(event.message.body)

    def on_settled(self, event: Any) -> None:
        d = event.delivery
        state = "accepted" if d.remote_state == ACCEPTED else "rejected"
        self.outcomes[state] = self.outcomes.get(state, 0) + 1
        self.latencies.append(time.monotonic() - self.sent_at.pop(d))
        self.on_sendable(event)
        if self.done() == self.total and not self.finished:
            self.finished = time.monotonic()
            for conn in self.conns.values():
                conn.close()


ACCEPTED = 0x24  # the AMQP accepted outcome's state code (proton Delivery.ACCEPTED)


class Router:
    def __init__(self, name: str, amqp: int, mesh: int, connect: int | None) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "exactmesh")
        args = [exe, "router", "--id", name, "--amqp", f"127.0.0.1:{amqp}",
                "--listen", f"127.0.0.1:{mesh}", "--cluster-secret", SECRET,
                "--log-level", "debug"]
        if connect is not None:
            args += ["--connect", f"127.0.0.1:{connect}"]
        self.name = name
        self.url = f"127.0.0.1:{amqp}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def knows(self) -> int:
        return sum("knows subscriber" in line for line in self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.01)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(clients: DemoClients) -> bool:
    elapsed = (clients.finished or time.monotonic()) - clients.started
    lat = [x * 1000 for x in clients.latencies]
    accepted = clients.outcomes.get("accepted", 0)
    print(f"\npublishers: sent {clients.sent}, accepted {accepted}, rejected "
          f"{clients.outcomes.get('rejected', 0)} in {elapsed:.2f} s "
          f"({clients.done() / max(elapsed, 1e-9):,.0f} msg/s); latency send->accepted "
          f"p50 {_percentile(lat, 0.5):.2f} ms, p99 {_percentile(lat, 0.99):.2f} ms")
    for p in clients.pubs:
        print(f"  on router {p.router}: {p.topic:<18} sent {len(p.sent)}")
    print(f"\n{'subscriber':<12}{'router':<8}{'filter':<18}{'owed':>6}{'received':>10}"
          f"{'duplicates':>12}{'lost':>6}{'in order':>10}")
    ok = accepted == clients.sent == clients.total
    for i, s in enumerate(clients.subs):
        owed_by_pub = [[b for b in p.sent if matches(s.filter, p.topic)] for p in clients.pubs]
        owed = {b for lst in owed_by_pub for b in lst}
        seen = set(s.received)
        dupes = len(s.received) - len(seen)
        lost = len(owed - seen)
        in_order = all([b for b in s.received if b in set(lst)] == lst for lst in owed_by_pub)
        ok = ok and dupes == 0 and lost == 0 and in_order and seen <= owed
        print(f"{'sub' + str(i):<12}{s.router:<8}{s.filter:<18}{len(owed):>6}"
              f"{len(s.received):>10}{dupes:>12}{lost:>6}{'yes' if in_order else 'NO':>10}")
    print("\nRESULT: " + ("every subscriber got every message it was owed exactly once, in "
                          "publish order; every publisher was told accepted for all" if ok
                          else "FAILED: see the table above"))
    return ok


def run_demo(messages: int = 2000) -> int:
    amqp = _free_ports(3)
    mesh = _free_ports(3)
    routers: list[Router] = []
    try:
        for i, name in enumerate(ROUTERS):  # A - B - C: each connects to the previous one
            routers.append(Router(name, amqp[i], mesh[i], mesh[i - 1] if i else None))
        for r in routers:
            _wait(lambda r=r: any("ready" in line for line in r.lines), 15, f"router {r.name}")
        print("routers: " + " - ".join(f"{r.name} ({r.url})" for r in routers))
        ready = threading.Event()
        clients = DemoClients({r.name: r.url for r in routers}, messages, ready)
        runner = threading.Thread(target=Container(clients).run, daemon=True)
        runner.start()
        _wait(clients.attached.is_set, 15, "subscribers to attach")
        # Each publishing router must know every subscriber on the other routers.
        remote = {r.name: sum(1 for s, _ in SUBSCRIBERS if s != r.name) for r in routers}
        for r in routers:
            if any(p == r.name for p, _ in PUBLISHERS):
                _wait(lambda r=r: r.knows() >= remote[r.name], 15, f"gossip to {r.name}")
        print("gossip converged: every publishing router knows every subscriber")
        clients.container.schedule(0, _Call(clients.start_publishing))
        runner.join(120)
        ok = report(clients)
    finally:
        for r in routers:
            r.stop()
    return 0 if ok else 1


class _Call:
    """A container timer handler that runs one function on the container thread."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()

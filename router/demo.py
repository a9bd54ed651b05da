"""`exactmesh demo`: a local router, publishers and subscribers over AMQP, a delivery report.

It starts a real `exactmesh router` process on a free loopback port, attaches subscribers with
overlapping wildcard filters using proton's own client, publishes numbered messages to three
topics with a window of unacknowledged messages, and then checks, per subscriber, every message
it was owed against what it received: lost, duplicated, out of order. It exits 1 if anything
is wrong.
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

TOPICS = ["orders/eu/paris", "orders/us/nyc", "orders/eu/berlin"]
FILTERS = ["orders/#", "orders/eu/+", "orders/+/paris"]
WINDOW = 100


@dataclass
class SubStats:
    filter: str
    received: list[str] = field(default_factory=list)


class DemoClients(MessagingHandler):
    """One publisher and several subscribers in one proton container."""

    def __init__(self, url: str, messages: int, subscribers: int) -> None:
        super().__init__(auto_accept=True)
        self.url = url
        self.total = messages
        self.subs = [SubStats(FILTERS[i % len(FILTERS)]) for i in range(subscribers)]
        self.receivers: dict[Any, SubStats] = {}
        self.sent_at: dict[Any, float] = {}
        self.latencies: list[float] = []
        self.outcomes: dict[str, int] = {}
        self.sent = 0
        self.attached = 0
        self.senders: list[Any] = []
        self.started = 0.0
        self.finished = 0.0

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False)
        for i, stats in enumerate(self.subs):
            r = event.container.create_receiver(conn, stats.filter, name=f"sub{i}")
            self.receivers[r] = stats
        self.conn = conn

    def on_link_opened(self, event: Any) -> None:
        if event.receiver in self.receivers:
            self.attached += 1
            if self.attached == len(self.subs):  # publish only once everyone listens
                self.started = time.monotonic()
                self.senders = [event.container.create_sender(self.conn, t, name=f"pub-{t}")
                                for t in TOPICS]

    def on_sendable(self, event: Any) -> None:
        # Round-robin over the topics, one sender link each, within one window in total.
        while self.sent < self.total and self.sent - self.done() < WINDOW:
            sender = self.senders[self.sent % len(TOPICS)]
            if not sender.credit:
                return
            topic = TOPICS[self.sent % len(TOPICS)]
            d = sender.send(Message(body=f"{topic}#{self.sent}"))
            self.sent_at[d] = time.monotonic()
            self.sent += 1

    def done(self) -> int:
        return sum(self.outcomes.values())

    def on_message(self, event: Any) -> None:
        self.receivers[event.receiver].received.append(event.message.body)
        self._maybe_finish(event)

    def on_settled(self, event: Any) -> None:
        d = event.delivery
        state = {Delivery_ACCEPTED: "accepted"}.get(d.remote_state, "rejected")
        self.outcomes[state] = self.outcomes.get(state, 0) + 1
        self.latencies.append(time.monotonic() - self.sent_at.pop(d))
        self.on_sendable(event)
        self._maybe_finish(event)

    def _maybe_finish(self, event: Any) -> None:
        if self.done() == self.total and self.finished == 0.0:
            self.finished = time.monotonic()
            event.connection.close()


Delivery_ACCEPTED = 0x24  # proton Delivery.ACCEPTED, the AMQP accepted outcome's state code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_router(port: int) -> subprocess.Popen:
    exe = os.path.join(os.path.dirname(sys.executable), "exactmesh")
    proc = subprocess.Popen(
        [exe, "router", "--id", "demo", "--amqp", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 15
    assert proc.stderr is not None
    for line in proc.stderr:
        if "ready" in line:
            print(f"router: {line.strip()}")
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the demo router did not start; see the messages above")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(clients: DemoClients) -> bool:
    sent = [f"{TOPICS[i % len(TOPICS)]}#{i}" for i in range(clients.sent)]
    elapsed = (clients.finished or time.monotonic()) - clients.started
    lat = [x * 1000 for x in clients.latencies]
    print(f"\npublisher: sent {clients.sent}, accepted {clients.outcomes.get('accepted', 0)}, "
          f"rejected {clients.outcomes.get('rejected', 0)} in {elapsed:.2f} s "
          f"({clients.done() / elapsed:,.0f} msg/s); latency send->accepted "
          f"p50 {_percentile(lat, 0.5):.2f} ms, p99 {_percentile(lat, 0.99):.2f} ms")
    print(f"{'subscriber':<12}{'filter':<18}{'owed':>7}{'received':>10}{'duplicates':>12}"
          f"{'lost':>7}{'in order':>10}")
    ok = clients.outcomes.get("accepted", 0) == clients.sent == clients.total
    for i, s in enumerate(clients.subs):
        owed = [b for b in sent if matches(s.filter, b.split("#")[0])]
        seen = set(s.received)
        dupes = len(s.received) - len(seen)
        lost = len(set(owed) - seen)
        in_order = s.received == owed
        ok = ok and dupes == 0 and lost == 0 and in_order
        print(f"{'sub' + str(i):<12}{s.filter:<18}{len(owed):>7}{len(s.received):>10}"
              f"{dupes:>12}{lost:>7}{'yes' if in_order else 'NO':>10}")
    print("\nRESULT: " + ("every subscriber got every message it was owed exactly once, in "
                          "order; the publisher was told accepted for all" if ok else
                          "FAILED: see the table above"))
    return ok


def run_demo(messages: int = 2000, subscribers: int = 3) -> int:
    port = _free_port()
    router = _start_router(port)
    try:
        clients = DemoClients(f"127.0.0.1:{port}", messages, subscribers)
        runner = threading.Thread(target=Container(clients).run, daemon=True)
        runner.start()
        runner.join(120)
        ok = report(clients)
    finally:
        os.kill(router.pid, signal.SIGTERM)
        router.wait(10)
    return 0 if ok else 1

"""`exactmesh router --workers 2` (router/workers.py): two router processes on the same ports,
with the SDK's clients spread over them by the kernel.

Every subscriber gets every publisher's messages exactly once and in each publisher's order,
whichever worker either side landed on; a worker SIGKILLed mid-stream is started again by
the supervisor, and its clients resume, at either worker, losing and repeating nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amqp_edge.client import Publisher, Subscriber
from router.config import HostPort
from router.runtime.status import StatusError, fetch

from .harness import EXACTMESH, RouterProcess, _handed_out, free_port, wait_for
from .test_failover_process import Consumer

TOPIC = "workers/orders"
MAX_CLIENTS = 16  # bound on the clients opened to land some on each worker


def free_ports_in_a_row(n: int) -> int:
    """The first of n loopback ports in a row that nothing listens on (the workers' status
    endpoints are the --http port plus k), none handed out before."""
    for _ in range(100):
        base = free_port()
        socks = []
        try:
            for k in range(1, n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        if not any(base + k in _handed_out for k in range(1, n)):
            _handed_out.update(base + k for k in range(1, n))
            return base
    raise RuntimeError(f"no {n} free loopback ports in a row in 100 tries")


class Workers(RouterProcess):
    """The supervisor, with the status endpoint of each worker (the --http port plus k)."""

    def __init__(self, n: int, *extra: str) -> None:
        self.n = n
        self.http = free_ports_in_a_row(n)
        super().__init__("W", "--workers", str(n), "--http", f"127.0.0.1:{self.http}",
                         "--reconnect-timeout", "30", "--log-level", "debug", *extra)
        try:
            wait_for(lambda: all(self.joined(k) for k in range(n)) or self.proc.poll(), 20,
                     "every worker joined")
            assert self.proc.poll() is None, "the supervisor exited"
        except AssertionError as err:
            self.stop()
            raise AssertionError(f"{err}; its log:\n{''.join(self.log[-60:])}") from None

    def health(self, k: int) -> dict:
        return fetch(HostPort("127.0.0.1", self.http + k), "/health", timeout=2)[1]

    def joined(self, k: int) -> bool:
        try:
            return self.health(k)["joining"] is None
        except StatusError:
            return False

    def count(self, what: str) -> list[int]:
        return [self.health(k)[what] for k in range(self.n)]


def spread(workers: Workers, what: str, make: Callable[[int], Any], least: int) -> list:
    """Open clients until there are `least` and each worker has one (the kernel picks the
    worker of each connection)."""
    made: list = []
    while len(made) < least or 0 in workers.count(what):
        assert len(made) < MAX_CLIENTS, f"{len(made)} clients all landed on one worker"
        made.append(make(len(made)))
        wait_for(lambda: sum(workers.count(what)) == len(made), 10, f"{what} attached")
    return made


def wait_known_everywhere(workers: Workers, keys: list[str]) -> None:
    """Each subscriber is known at the worker it is not on (gossip over loopback)."""
    for key in keys:
        wait_for(lambda k=key: workers.logged(f"knows subscriber {k}@"), 15, f"{key} known")


def expected(name: str, count: int) -> list[str]:
    return [f"{name}:{i}" for i in range(1, count + 1)]


def check_each_publisher_once_in_order(ids: list[str], names: list[str], count: int) -> None:
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated"
    for name in names:
        mine = [i for i in ids if i.split(":")[0] == name]
        assert mine == expected(name, count), f"{name}: lost or out of order"


def test_clients_spread_over_two_workers_get_everything_exactly_once(tmp_path: Path) -> None:
    count = 300
    with Workers(2) as workers:
        url = f"amqp://{workers.url}"
        consumers = spread(workers, "subscribers", lambda i: Consumer(Subscriber(
            url, "workers/#", id=f"s{i}", state_dir=str(tmp_path / f"s{i}"), durable=True,
            timeout=30)), least=3)
        wait_known_everywhere(workers, [f"s{i}/sub/s{i}" for i in range(len(consumers))])
        pubs = spread(workers, "publishers", lambda i: Publisher(
            url, TOPIC, id=f"p{i}", state_dir=str(tmp_path / f"p{i}")), least=2)
        try:
            for i in range(count):
                for pub in pubs:
                    pub.send(f"order {i}")
            for pub in pubs:
                pub.flush(timeout=60)
                assert pub.failures() == []
                assert pub.stats()["accepted_total"] == count
            total = count * len(pubs)
            for c in consumers:
                wait_for(lambda c=c: len(c.ids) >= total, 30, "every message")
                names = [f"p{i}" for i in range(len(pubs))]
                check_each_publisher_once_in_order(c.ids, names, count)
            stats = [workers.health(k)["stats"] for k in range(2)]
            assert all(s["received"] > 0 for s in stats), f"a worker took no message: {stats}"
        finally:
            for pub in pubs:
                pub.close()
            for c in consumers:
                c.close()
                c.sub.close()


def test_a_worker_killed_mid_stream_is_started_again_and_its_clients_resume(
    tmp_path: Path,
) -> None:
    count = 3000
    with Workers(2) as workers:
        url = f"amqp://{workers.url}"
        consumer = Consumer(Subscriber(url, "workers/#", id="audit",
                                       state_dir=str(tmp_path / "sub"), durable=True, timeout=30))
        wait_for(lambda: sum(workers.count("subscribers")) == 1, 10, "the subscriber")
        pub = Publisher(url, TOPIC, id="shop", state_dir=str(tmp_path / "pub"), window=1000)
        try:
            wait_for(lambda: sum(workers.count("publishers")) == 1, 10, "the publisher")
            at = workers.count("publishers").index(1)
            if workers.count("subscribers")[at] == 0:
                wait_known_everywhere(workers, ["audit/sub/audit"])
            victim = workers.health(at)["pid"]
            feeder = threading.Thread(
                target=lambda: [pub.send(f"order {i}") for i in range(count)], daemon=True)
            feeder.start()
            wait_for(lambda: len(consumer.ids) >= count // 3, 30, "a third of the stream")
            in_flight = pub.pending
            os.kill(victim, signal.SIGKILL)  # the publisher's worker
            wait_for(lambda: workers.logged(f"worker W.{at} (pid {victim}) exited (SIGKILL)"),
                     10, "the supervisor to see the kill")
            wait_for(lambda: workers.joined(at) and workers.health(at)["pid"] != victim, 30,
                     "the worker started again")
            feeder.join(60)
            pub.flush(timeout=60)
            wait_for(lambda: len(consumer.ids) >= count, 60, "every message")
            assert in_flight >= 100, f"only {in_flight} messages in flight at the kill"
            assert pub.failures() == []
            assert pub.stats()["accepted_total"] == count
            assert consumer.ids == expected("shop", count), "lost, duplicated or out of order"
        finally:
            pub.close()
            consumer.close()
            consumer.sub.close()


def test_sigterm_stops_every_worker_and_the_supervisor() -> None:
    workers = Workers(2)
    pids = [workers.health(k)["pid"] for k in range(2)]
    assert workers.stop() == 0
    for pid in pids:
        wait_for(lambda p=pid: not os.path.exists(f"/proc/{p}"), 10, f"worker {pid} gone")
    assert workers.logged("SIGTERM received: stopping 2 workers")


def test_a_port_in_use_stops_every_worker_with_one_line_and_status_2() -> None:
    with RouterProcess("busy") as busy:
        run = subprocess.run([EXACTMESH, "router", "--id", "W", "--workers", "2", "--amqp",
                              busy.url], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert f"exactmesh: error: cannot listen on {busy.url} for AMQP: Address already in use; " \
        "choose another --amqp address" in run.stderr
    assert "stopping every worker" in run.stderr


def test_a_worker_that_exits_on_its_own_is_started_again() -> None:
    with Workers(2) as workers:
        first = workers.health(1)["pid"]
        os.kill(first, signal.SIGTERM)  # as if it stopped on its own: not through the supervisor
        started = time.monotonic()
        wait_for(lambda: workers.joined(1) and workers.health(1)["pid"] != first, 30,
                 "worker 1 started again")
        assert time.monotonic() - started < 15
        assert workers.logged(f"worker W.1 (pid {first}) exited (status 0)")

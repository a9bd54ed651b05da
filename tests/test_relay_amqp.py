"""Durable AMQP subscribers with a relay store (docs/relay.md), with the client SDK on both
ends and real router processes: what the store holds for a subscriber that is away survives
a SIGKILL of its router, and reaches it once, in order, when it reattaches; the AMQP
publisher's final outcomes wait for its acceptance.

Every process is stopped by its PID; every wait is on a condition with a deadline."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from amqp_edge.client import Publisher, Subscriber
from router.config import HostPort
from router.runtime.status import fetch

from .harness import RouterProcess, free_port, wait_for
from .test_failover_process import Consumer, check_exactly_once_in_order

WINDOW = 16  # the router's publisher window: the store lets a publisher go past it


def stats(http: int) -> dict[str, Any]:
    code, body = fetch(HostPort("127.0.0.1", http), "/health")
    assert code == 200, body
    return body["stats"]


def listener_returns(url: str, sub_dir: str, pub: Publisher, n: int, name: str,
                     **options: Any) -> None:
    """The durable listener `laptop` comes back at `url`: it gets the `n` messages of
    publisher `name` once each, in order, and only then the publisher has every outcome."""
    back = Subscriber(url, "lap/#", id="laptop", state_dir=sub_dir, durable=True, **options)
    consumer = Consumer(back)
    try:
        wait_for(lambda: len(consumer.ids) >= n, 30, "the messages stored for the listener")
        pub.flush(timeout=30)
        assert pub.failures() == []
        assert pub.stats()["accepted_total"] == n
        check_exactly_once_in_order(consumer.ids, name, n)
    finally:
        consumer.close()
        back.close()
        pub.close()


def test_what_a_router_stored_for_a_durable_subscriber_survives_its_sigkill(
        tmp_path: Path) -> None:
    http = free_port()
    args = ("--publisher-window", str(WINDOW), "--relay-store", str(tmp_path / "relay"),
            "--http", f"127.0.0.1:{http}")
    r = RouterProcess("A", *args)
    url = f"amqp://{r.url}"
    sub_dir, n = str(tmp_path / "sub"), 60
    try:
        away = Subscriber(url, "lap/#", id="laptop", state_dir=sub_dir, durable=True,
                          timeout=3600)
        away.wait_attached(10)
        away.close()  # durable: it detaches, the subscription stays
        pub = Publisher(url, "lap/t", id="shop", state_dir=str(tmp_path / "pub"), window=100)
        for i in range(n):
            pub.send(f"m {i}")
        # Past the router's window of 16: each record let go of its place once stored.
        wait_for(lambda: stats(http)["released"] >= n, 20, "every message stored")
        assert pub.pending == n, "an AMQP publisher's outcome waits for the subscriber"
        os.kill(r.proc.pid, signal.SIGKILL)
        r.proc.wait(10)
        again = RouterProcess("A", *args, port=r.port)
        try:
            assert again.logged("1 durable AMQP subscriber(s) restored"), "".join(again.log)
            assert again.logged(f"{n} stored message copies restored"), "".join(again.log)
            listener_returns(url, sub_dir, pub, n, "shop", timeout=3600)
        finally:
            again.stop()
    finally:
        r.stop()


def test_an_sdk_publisher_is_not_held_by_its_window_for_a_stored_listener(
        tmp_path: Path) -> None:
    """The router tells an AMQP publisher `received` (AMQP 3.4.1, not an outcome) once
    every copy still owed is stored: the SDK takes the message out of its window of 20, so
    1,000 messages go through while the listener is away, and each final outcome still
    comes only with the listener's acceptance."""
    http = free_port()
    r = RouterProcess("A", "--publisher-window", str(WINDOW), "--relay-store",
                      str(tmp_path / "relay"), "--http", f"127.0.0.1:{http}")
    url, sub_dir, n = f"amqp://{r.url}", str(tmp_path / "sub"), 1000
    try:
        away = Subscriber(url, "far/#", id="away", state_dir=sub_dir, durable=True,
                          timeout=3600)
        away.wait_attached(10)
        away.close()
        pub = Publisher(url, "far/t", id="fast", state_dir=str(tmp_path / "pub"), window=20)
        for i in range(n):
            pub.send(f"m {i}", timeout=20)  # would time out at the 21st without `received`
        wait_for(lambda: stats(http)["released"] >= n, 20, "every message stored")
        assert pub.pending == n and pub.stats()["accepted"] == 0
        back = Subscriber(url, "far/#", id="away", state_dir=sub_dir, durable=True,
                          timeout=3600)
        consumer = Consumer(back)
        pub.flush(timeout=60)
        wait_for(lambda: len(consumer.ids) >= n, 30, "every message at the listener")
        assert pub.stats()["accepted_total"] == n and pub.failures() == []
        check_exactly_once_in_order(consumer.ids, "fast", n)
        consumer.close()
        back.close()
        pub.close()
    finally:
        r.stop()

"""The exactly-once client SDK (amqp_edge.client, amqp_edge.trio_client) against real router
processes: exactly once and in order, failed outcomes, subscriber restarts with duplicate
suppression, a publisher process killed with SIGKILL and rerun, failover along the URL list
(a dead port first; a router stopping under a publisher), and the trio API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from amqp_edge.client import (
    Outcome,
    Publisher,
    ReceivedMessage,
    RouterUnreachable,
    Subscriber,
    parse_urls,
)
from amqp_edge.client_store import StoreError
from amqp_edge.trio_client import open_publisher, open_subscriber
from router.core.records import outgoing_tag
from tests.harness import EXACTMESH, ROOT, RouterProcess, free_port, wait_for
from tests.mesh_harness import start_mesh


def amqp(router: RouterProcess) -> str:
    return f"amqp://{router.url}"


class Consumer:
    """A Subscriber drained by a thread that accepts everything; `gate` (when cleared) makes
    it stop taking messages once it has `hold_after` of them."""

    def __init__(self, sub: Subscriber, hold_after: int | None = None) -> None:
        self.sub = sub
        self.got: list[ReceivedMessage] = []
        self.hold_after = hold_after
        self.gate = threading.Event()
        self.gate.set()
        if hold_after is not None:
            self.gate.clear()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for msg in self.sub:
            if self.hold_after is not None and len(self.got) >= self.hold_after:
                self.gate.wait()
            self.got.append(msg)
            self.sub.accept(msg)

    def bodies(self) -> list[Any]:
        return [m.body for m in self.got]

    def stop(self) -> None:
        self.gate.set()
        self.sub.close()
        self.thread.join(10)


def exactly_once_in_order(got: list[Any], owed: list[Any]) -> None:
    seen = set(got)
    dupes = sorted({b for b in got if got.count(b) > 1}, key=str)
    missing = [b for b in owed if b not in seen]
    assert not dupes, f"{len(dupes)} shown twice, e.g. {dupes[:5]}"
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert got == owed, "not in publish order"


# ------------------------------------------------------------------ basics


def test_parse_urls() -> None:
    assert parse_urls("127.0.0.1:5672, amqp://h:1") == ["amqp://127.0.0.1:5672", "amqp://h:1"]
    assert parse_urls(["h"]) == ["amqp://h:5672"]
    for bad in ("http://h:1", "h:port", "amqp://:5", "amqp://h:1/path", ""):
        with pytest.raises(ValueError, match="URL"):
            parse_urls(bad)


def test_publisher_to_subscriber_exactly_once_and_in_order(tmp_path: Path) -> None:
    n = 2000
    with RouterProcess("A") as router:
        sub = Subscriber([amqp(router)], "orders/#", id="billing", state_dir=str(tmp_path))
        sub.wait_attached(10)
        consumer = Consumer(sub)
        outcomes: list[Outcome] = []
        with Publisher([amqp(router)], "orders/eu", id="shop-1", state_dir=str(tmp_path),
                       on_outcome=lambda seq, o: outcomes.append(o)) as pub:
            seqs = [pub.send(f"order {i}".encode()) for i in range(n)]
            pub.flush(timeout=30)
            stats = pub.stats()
        assert seqs == list(range(1, n + 1))
        assert stats["accepted"] == n and stats["sent"] == n and stats["pending"] == 0
        assert {o.state for o in outcomes} == {"accepted"} and len(outcomes) == n
        wait_for(lambda: len(consumer.got) == n, 15, f"{n} messages at the subscriber")
        exactly_once_in_order(consumer.bodies(), [f"order {i}".encode() for i in range(n)])
        first = consumer.got[0]
        assert first.topic == "orders/eu" and first.message_id == "shop-1:1"
        assert first.tag == outgoing_tag("shop-1", "pub/shop-1", b"1").decode()
        assert not first.redelivered
        consumer.stop()
        assert sub.stats()["accepted_total"] == n


def test_properties_ttl_and_text_bodies_arrive(tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        sub = Subscriber([amqp(router)], "p/+", id="s", state_dir=str(tmp_path))
        sub.wait_attached(10)
        with Publisher([amqp(router)], "p/x", id="p", state_dir=str(tmp_path)) as pub:
            pub.send("text", properties={"k": "v", "n": 3}, ttl=30)
            msg = sub.receive(timeout=10)
            assert msg is not None
            assert msg.body == "text" and msg.properties == {"k": "v", "n": 3}
            sub.accept(msg)
            pub.flush(10)
        assert sub.receive(timeout=0.05) is None
        sub.close()


def test_a_failed_outcome_is_listed_and_kept(tmp_path: Path) -> None:
    with RouterProcess("A", "--no-subscribers", "reject") as router:
        seen: list[Outcome] = []
        with Publisher([amqp(router)], "nobody/here", id="lonely", state_dir=str(tmp_path),
                       on_outcome=lambda seq, o: seen.append(o)) as pub:
            for i in range(3):
                pub.send(f"m{i}")
            pub.flush(timeout=10)
            failures = pub.failures()
            assert pub.stats()["failed"] == 3
        assert [f.seq for f in failures] == [1, 2, 3]
        assert {f.condition for f in failures} == {"exactmesh:no-subscribers"}
        assert all(f.description for f in failures)
        assert [o.state for o in seen] == ["rejected"] * 3
        # A new run of the same publisher neither resends nor forgets them.
        with Publisher([amqp(router)], "nobody/here", id="lonely",
                       state_dir=str(tmp_path)) as again:
            assert again.pending == 0 and len(again.failures()) == 3
            assert again.next_seq == 4


def test_a_restarted_subscriber_gets_the_rest_and_no_message_twice(tmp_path: Path) -> None:
    """A durable subscriber accepts 5 of 10, 'crashes' after committing the 6th (its accept
    never reached the router) and leaves 4 unanswered; reopened with the same state dir it is
    shown exactly the last 4, never the 6th again."""
    state = str(tmp_path / "sub")
    with RouterProcess("A") as router:
        sub = Subscriber([amqp(router)], "r/#", id="billing", state_dir=state, durable=True,
                         timeout=30, prefetch=20)
        sub.wait_attached(10)
        pub = Publisher([amqp(router)], "r/x", id="pub", state_dir=str(tmp_path / "pub"))
        for i in range(10):
            pub.send(f"m{i}")
        shown = []
        for _ in range(5):
            msg = sub.receive(timeout=10)
            assert msg is not None
            shown.append(msg.body)
            sub.accept(msg)
        sixth = sub.receive(timeout=10)
        assert sixth is not None
        shown.append(sixth.body)
        sub._store.record(sixth.tag, "accepted")  # committed, then the process "died"
        wait_for(lambda: sub.stats()["received"] == 10, 10, "all ten at the subscriber")
        sub.close()  # durable: detaches, the router keeps the subscription
        assert pub.pending == 5

        again = Subscriber([amqp(router)], "r/#", id="billing", state_dir=state, durable=True,
                           timeout=30, prefetch=20)
        rest = []
        while len(rest) < 4:
            msg = again.receive(timeout=10)
            assert msg is not None, f"only {rest} after the restart"
            rest.append(msg)
            again.accept(msg)
        pub.flush(timeout=10)
        assert again.receive(timeout=0.1) is None
        stats = again.stats()
        # The 6th is either sent again and suppressed by its tag, or (a router that honours
        # the resume declaration, where it was declared "accepted") not sent again at all.
        assert stats["duplicates_suppressed"] <= 1
        assert stats["gen"] == 2 and stats["accepted_total"] == 10
        exactly_once_in_order(shown + [m.body for m in rest], [f"m{i}" for i in range(10)])
        assert all(m.redelivered for m in rest)  # they had all been sent once before
        assert pub.stats()["accepted"] == 10
        pub.close()
        again.close()


def test_release_redelivers_and_reject_fails_the_publisher(tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        sub = Subscriber([amqp(router)], "rr/#", id="picky", state_dir=str(tmp_path))
        sub.wait_attached(10)
        with Publisher([amqp(router)], "rr/x", id="p", state_dir=str(tmp_path)) as pub:
            pub.send("once more")
            first = sub.receive(timeout=10)
            assert first is not None and not first.redelivered
            sub.release(first)
            again = sub.receive(timeout=10)
            assert again is not None and again.redelivered and again.tag == first.tag
            sub.reject(again, "no thanks")
            pub.flush(timeout=10)
            [failure] = pub.failures()
        assert failure.condition == "exactmesh:delivery-failed"
        assert "picky/sub/picky@A" in failure.description
        assert sub.stats()["rejected"] == 1 and sub.stats()["released"] == 1
        sub.close()


def test_two_processes_cannot_share_an_identity_and_state_dir(tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        first = Publisher([amqp(router)], "x/y", id="one", state_dir=str(tmp_path))
        with pytest.raises(StoreError, match="another process"):
            Publisher([amqp(router)], "x/y", id="one", state_dir=str(tmp_path))
        first.close()
        Publisher([amqp(router)], "x/y", id="one", state_dir=str(tmp_path)).close()


# ------------------------------------------------------------------ crashes and failover


def run_pub(*args: str) -> subprocess.Popen:
    return subprocess.Popen([EXACTMESH, "pub", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_a_publisher_killed_with_sigkill_and_rerun_finishes_exactly_once(tmp_path: Path) -> None:
    n, name = 600, "killme"
    with RouterProcess("A") as router:
        sub = Subscriber([amqp(router)], "k/#", id="audit", state_dir=str(tmp_path / "sub"))
        sub.wait_attached(10)
        # The consumer stops taking messages after 100, so the publisher is certainly
        # mid-stream (its window full, waiting for outcomes) when it is killed.
        consumer = Consumer(sub, hold_after=100)
        args = ["--url", amqp(router), "--topic", "k/x", "--id", name,
                "--state-dir", str(tmp_path / "pub"), "--count", str(n), "--window", "20"]
        first = run_pub(*args)
        wait_for(lambda: len(consumer.got) >= 100 and sub.stats()["received"] >= 120, 15,
                 "the subscriber to hold 20 unanswered")
        assert first.poll() is None, "the publisher finished before it could be killed"
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        consumer.gate.set()
        second = run_pub(*args)
        out, err = second.communicate(timeout=30)
        assert second.returncode == 0, err
        summary = __import__("json").loads(out.strip().splitlines()[-1])
        assert summary["failed"] == 0 and summary["resent"] >= 1, summary
        wait_for(lambda: len(consumer.got) >= n, 15, f"{n} messages at the subscriber")
        consumer.stop()
        exactly_once_in_order(consumer.bodies(), [f"{name}-{i}" for i in range(1, n + 1)])


BATCH_CHILD = """
import os, signal, sys
from amqp_edge.client import Subscriber
url, state, out, stop_after, total = sys.argv[1:6]
sub = Subscriber([url], "b/#", id="batcher", state_dir=state, durable=True, timeout=60,
                 prefetch=50)
sub.wait_attached(10)
print("attached", flush=True)
shown = len(open(out).read().split()) if os.path.exists(out) else 0
batches = 0
with open(out, "a") as f:
    while shown < int(total) and batches != (int(stop_after) or -1):  # 0: no limit
        msgs = sub.receive_many(20, timeout=10)
        if not msgs:
            break
        f.write("".join(m.body + chr(10) for m in msgs))
        f.flush()
        sub.accept_many(msgs)
        shown, batches = shown + len(msgs), batches + 1
os.kill(os.getpid(), signal.SIGKILL)  # at once: its last dispositions may not be out
"""


def test_a_subscriber_killed_right_after_accept_many_is_shown_nothing_twice(
        tmp_path: Path) -> None:
    """accept_many commits a batch before its dispositions go: a subscriber process killed
    with SIGKILL the moment accept_many returned, and started again with the same state
    directory, is shown every message once, in order, none of the last batch again."""
    n = 200
    state, out = str(tmp_path / "sub"), tmp_path / "shown.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def start(stop_after: int) -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", BATCH_CHILD, amqp(router), state,
                                  str(out), str(stop_after), str(n)], env=env,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "attached"
        return child

    with RouterProcess("A") as router:
        pub = Publisher([amqp(router)], "b/x", id="pub", state_dir=str(tmp_path / "pub"))
        first = start(3)  # killed after its third batch
        # Sent from a thread: send() waits while the window is full, and it is full while
        # no subscriber process runs.
        sender = threading.Thread(target=lambda: [pub.send(f"m{i}") for i in range(n)])
        sender.start()
        assert first.wait(60) == -signal.SIGKILL
        assert 3 <= len(out.read_text().split()) < n
        assert start(0).wait(60) == -signal.SIGKILL  # the rest, then killed too
        sender.join(20)
        # The answers the killed processes committed but never sent: a third run declares
        # them on resume (or is sent them again and suppresses them) and is shown nothing.
        third = Subscriber([amqp(router)], "b/#", id="batcher", state_dir=state, durable=True,
                           timeout=60, prefetch=50)
        again = third.receive(timeout=2)
        assert again is None, f"{again.body} was shown again"
        pub.flush(timeout=20)
        third.close()
        assert pub.stats()["failed"] == 0
        pub.close()
        exactly_once_in_order(out.read_text().split(), [f"m{i}" for i in range(n)])


def test_failover_skips_a_dead_url(tmp_path: Path) -> None:
    dead = f"amqp://127.0.0.1:{free_port()}"
    with RouterProcess("A") as router:
        urls = [dead, amqp(router)]
        sub = Subscriber(urls, "f/#", id="s", state_dir=str(tmp_path))
        assert sub.wait_attached(10) == amqp(router)
        consumer = Consumer(sub)
        with Publisher(urls, "f/x", id="p", state_dir=str(tmp_path)) as pub:
            for i in range(200):
                pub.send(f"m{i}")
            pub.flush(timeout=15)
            assert pub.stats()["url"] == amqp(router)
        wait_for(lambda: len(consumer.got) == 200, 10, "200 messages")
        consumer.stop()
        exactly_once_in_order(consumer.bodies(), [f"m{i}" for i in range(200)])


def test_unreachable_routers_raise_after_the_connect_timeout(tmp_path: Path) -> None:
    urls = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    started = time.monotonic()
    with Publisher(urls, "u/x", id="p", state_dir=str(tmp_path), connect_timeout=0.5) as pub:
        pub.send("kept for the next run")
        with pytest.raises(RouterUnreachable, match="no exactmesh router reachable"):
            pub.flush(timeout=10)
    assert time.monotonic() - started < 5
    with Publisher(urls, "u/x", id="p", state_dir=str(tmp_path), connect_timeout=0.5) as pub:
        assert pub.pending == 1  # stored before it could be sent, resent by the next run


def knows(router_id: str, container: str, link: str, at: str, topic_filter: str) -> str:
    return f"router {router_id}: knows subscriber {container}/{link}@{at} (filter {topic_filter})"


def test_a_publisher_fails_over_when_its_router_stops(tmp_path: Path) -> None:
    """Routers A - B; the subscriber on B; the publisher on A, with B second in its list. A
    stops mid-stream: the publisher reattaches to B, resends what had no outcome, and the
    subscriber is shown every message once (a resend has the same tag on any router)."""
    n = 600
    with start_mesh("line", 2) as mesh:
        a, b = mesh["A"], mesh["B"]
        sub = Subscriber([f"amqp://{b.url}"], "fo/#", id="far", state_dir=str(tmp_path / "s"))
        sub.wait_attached(10)
        mesh["A"].wait_logged(knows("A", "far", "sub/far", "B", "fo/#"), 10)
        consumer = Consumer(sub, hold_after=150)
        pub = Publisher([f"amqp://{a.url}", f"amqp://{b.url}"], "fo/x", id="near",
                        state_dir=str(tmp_path / "p"), window=30)
        sender = threading.Thread(target=lambda: [pub.send(f"m{i}") for i in range(n)],
                                  daemon=True)
        sender.start()
        wait_for(lambda: len(consumer.got) >= 150 and pub.pending >= 30, 15,
                 "the publisher mid-stream")
        a.stop()
        consumer.gate.set()
        sender.join(30)
        pub.flush(timeout=30)
        stats = pub.stats()
        assert stats["url"] == f"amqp://{b.url}" and stats["reconnects"] >= 1
        assert stats["failed"] == 0, pub.failures()
        wait_for(lambda: len(consumer.got) >= n, 15, f"{n} at the subscriber")
        pub.close()
        consumer.stop()
        exactly_once_in_order(consumer.bodies(), [f"m{i}" for i in range(n)])


def test_a_durable_subscriber_fails_over_when_its_router_dies(tmp_path: Path) -> None:
    """Routers A - B; a durable subscriber on A with B second in its list; the publisher on
    B. A is killed (SIGKILL) mid-stream: the subscriber resumes at B, B resends what it was
    owed, and the application is shown every message once, in order.

    (B resends the copies that were in doubt at A once A has been unreachable for
    `unreachable-timeout`; it is 2 s here to keep the test short.)"""
    n = 600
    with start_mesh("line", 2, common=["--unreachable-timeout", "2"]) as mesh:
        a, b = mesh["A"], mesh["B"]
        sub = Subscriber([f"amqp://{a.url}", f"amqp://{b.url}"], "so/#", id="mover",
                         state_dir=str(tmp_path / "s"), durable=True, timeout=20)
        sub.wait_attached(10)
        b.wait_logged(knows("B", "mover", "sub/mover", "A", "so/#"), 10)
        consumer = Consumer(sub, hold_after=150)
        pub = Publisher([f"amqp://{b.url}"], "so/x", id="src", state_dir=str(tmp_path / "p"),
                        window=30)
        sender = threading.Thread(target=lambda: [pub.send(f"m{i}") for i in range(n)],
                                  daemon=True)
        sender.start()
        wait_for(lambda: len(consumer.got) >= 150 and sub.stats()["received"] >= 170, 15,
                 "the subscriber mid-stream")
        a.kill()
        consumer.gate.set()
        sender.join(30)
        pub.flush(timeout=30)
        assert pub.stats()["failed"] == 0, pub.failures()
        wait_for(lambda: len(consumer.got) >= n, 15, f"{n} at the subscriber")
        stats = sub.stats()
        assert stats["url"] == f"amqp://{b.url}" and stats["reconnects"] >= 1
        pub.close()
        consumer.stop()
        exactly_once_in_order(consumer.bodies(), [f"m{i}" for i in range(n)])


# ------------------------------------------------------------------ trio


def test_trio_api_publishes_and_subscribes_and_cancels(tmp_path: Path) -> None:
    n = 300

    async def main(url: str) -> tuple[list[Any], Callable[[], dict]]:
        got: list[Any] = []
        async with open_subscriber([url], "t/#", id="ts", state_dir=str(tmp_path)) as sub:
            await sub.wait_attached()
            with trio.move_on_after(0.05) as scope:
                await sub.receive()  # nothing yet: cancelled cleanly
            assert scope.cancelled_caught
            async with open_publisher([url], topic="t/x", id="tp",
                                      state_dir=str(tmp_path)) as pub:

                async def publish() -> None:
                    for i in range(n):
                        await pub.send(f"m{i}")
                    await pub.flush(timeout=20)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(publish)
                    async for msg in sub:  # one at a time for the first half ...
                        got.append(msg.body)
                        await sub.accept(msg)
                        if len(got) == n // 2:
                            break
                    while len(got) < n:  # ... then in batches, one commit each
                        batch = await sub.receive_many(25)
                        assert 1 <= len(batch) <= 25
                        got.extend(m.body for m in batch)
                        await sub.accept_many(batch)
                assert pub.stats()["accepted"] == n
            return got, sub.stats

    with RouterProcess("A") as router:
        got, stats = trio.run(main, amqp(router))
    exactly_once_in_order(got, [f"m{i}" for i in range(n)])
    assert stats()["accepted"] == n

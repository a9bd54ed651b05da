"""Routers killed with SIGKILL mid-stream, with the client SDK on both ends: nothing lost,
nothing duplicated, everything in order, every publisher told an outcome for every message.

Three routers in a line, A - B - C. The publisher's URL list is A then B; the subscriber's
is C then B (a durable subscription). Killing A (the origin) makes the publisher resume at B
and resend what it held; killing C (the subscriber's router) makes the subscriber resume at B
and B's origin resend what it was owed; killing B (the middle) cuts A from C until B is back.
The killed router restarts a moment later in every case, on the same ports.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from amqp_edge.client import Publisher, Subscriber

from .harness import EXACTMESH, wait_for
from .mesh_harness import Mesh, start_mesh

TOPIC = "failover/orders"
COUNT = 4000
IN_FLIGHT = 2000  # the publisher's window: messages without an outcome at the kill


def amqp(mesh: Mesh, *ids: str) -> list[str]:
    return [f"amqp://{mesh[r].url}" for r in ids]


class Consumer:
    """Receives on its own thread, accepting each message; records message ids in order."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.ids: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.sub.receive(timeout=0.1)
            if msg is not None:
                self.ids.append(str(msg.message_id))
                self.sub.accept(msg)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def wait_known(mesh: Mesh, router: str, key: str, at: str) -> None:
    mesh[router].wait_logged(f"router {router}: knows subscriber {key}@{at}", 15)


def check_exactly_once_in_order(ids: list[str], name: str, count: int) -> None:
    expected = [f"{name}:{i}" for i in range(1, count + 1)]
    dups = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    missing = sorted(set(expected) - set(ids), key=lambda s: int(s.split(":")[1]))
    assert not dups, f"{len(dups)} duplicated, e.g. {dups[:5]}"
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert ids == expected, "out of order"


@pytest.mark.parametrize("victim", ["A", "B", "C"])
def test_sigkill_of_a_router_mid_stream_loses_and_duplicates_nothing(
    victim: str, tmp_path: Path
) -> None:
    with start_mesh("line", 3, common=["--reconnect-timeout", "20",
                                       "--publisher-window", str(IN_FLIGHT)]) as mesh:
        mesh.wait_links_up()
        sub = Subscriber(amqp(mesh, "C", "B"), "failover/#", id="audit",
                         state_dir=str(tmp_path / "sub"), durable=True, timeout=30)
        consumer = Consumer(sub)
        wait_known(mesh, "A", "audit/sub/audit", "C")
        pub = Publisher(amqp(mesh, "A", "B"), TOPIC, id="shop", state_dir=str(tmp_path / "pub"),
                        window=IN_FLIGHT)
        try:
            feeder = threading.Thread(target=lambda: [pub.send(f"order {i}")
                                                      for i in range(COUNT)], daemon=True)
            feeder.start()
            wait_for(lambda: len(consumer.ids) >= COUNT // 3, 30, "a third of the stream")
            in_flight = pub.pending
            killed_at = time.monotonic()
            mesh[victim].kill()
            wait_for(lambda: time.monotonic() - killed_at > 0.5, 5, "half a second")
            mesh[victim].restart()
            feeder.join(60)
            pub.flush(timeout=60)
            wait_for(lambda: len(consumer.ids) >= COUNT, 60, "every message at the subscriber")
            assert in_flight >= 1000, f"only {in_flight} messages in flight at the kill"
            assert pub.failures() == []
            assert pub.stats()["accepted_total"] == COUNT
            check_exactly_once_in_order(consumer.ids, "shop", COUNT)
        finally:
            pub.close()
            consumer.close()
            sub.close()


def test_a_warm_subscriber_that_moves_gets_what_it_missed_first_in_order(
    tmp_path: Path
) -> None:
    """It leaves (its process stops without closing the subscription) while messages keep
    coming, and comes back through another router."""
    with start_mesh("line", 3) as mesh:
        mesh.wait_links_up()
        state = str(tmp_path / "sub")
        first = Subscriber(amqp(mesh, "C"), "failover/#", id="mover", state_dir=state,
                           durable=True, timeout=30)
        consumer = Consumer(first)
        wait_known(mesh, "A", "mover/sub/mover", "C")
        # A window wider than what is published while it is away: those wait for it.
        pub = Publisher(amqp(mesh, "A"), TOPIC, id="shop", state_dir=str(tmp_path / "pub"),
                        window=400)
        try:
            for i in range(200):
                pub.send(f"early {i}")
            wait_for(lambda: len(consumer.ids) >= 200, 30, "the early messages")
            consumer.close()
            first.close()  # durable: it detaches, the subscription stays
            for i in range(300):
                pub.send(f"while away {i}")
            assert pub.pending > 0, "the publisher waits for the warm subscriber"
            again = Subscriber(amqp(mesh, "B"), "failover/#", id="mover", state_dir=state,
                               durable=True, timeout=30)
            second = Consumer(again)
            pub.flush(timeout=30)
            for i in range(100):
                pub.send(f"after {i}")
            pub.flush(timeout=30)
            wait_for(lambda: len(second.ids) >= 400, 30, "the rest at the new router")
            check_exactly_once_in_order(consumer.ids + second.ids, "shop", 600)
            second.close()
            again.close()
        finally:
            pub.close()


def test_a_subscriber_that_does_not_return_in_time_fails_the_publisher_by_name(
    tmp_path: Path
) -> None:
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        sub = Subscriber(amqp(mesh, "B"), "failover/#", id="leaver",
                         state_dir=str(tmp_path / "sub"), durable=True, timeout=2)
        wait_known(mesh, "A", "leaver/sub/leaver", "B")
        sub.close()  # durable: detached, subscribed for 2 s more
        pub = Publisher(amqp(mesh, "A"), TOPIC, id="shop", state_dir=str(tmp_path / "pub"))
        try:
            started = time.monotonic()
            pub.send("nobody will take this")
            pub.flush(timeout=20)
            waited = time.monotonic() - started
            (failure,) = pub.failures()
            assert failure.condition == "exactmesh:delivery-failed"
            assert "leaver/sub/leaver@B" in failure.description
            assert "did not come back within 2 s" in failure.description
            assert waited < 6
        finally:
            pub.close()


def test_the_pub_and_sub_commands_finish_their_streams_across_a_killed_router(
    tmp_path: Path
) -> None:
    """`exactmesh pub` on A (then B) and `exactmesh sub` on B (then A), as a script or a cron
    job would run them; A, the publisher's router, is killed mid-stream and restarted."""
    n = 3000
    with start_mesh("line", 2, common=["--reconnect-timeout", "20"]) as mesh:
        mesh.wait_links_up()
        a, b = mesh["A"], mesh["B"]
        out_path = tmp_path / "sub.jsonl"
        with open(out_path, "w") as out, open(tmp_path / "sub.err", "w") as err:
            sub = subprocess.Popen(
                [EXACTMESH, "sub", "--url", f"amqp://{b.url},amqp://{a.url}", "--topic",
                 "cmd/#", "--id", "reader", "--state-dir", str(tmp_path / "s"), "--durable",
                 "--timeout", "30", "--count", str(n)], stdout=out, stderr=err)
        pub: subprocess.Popen | None = None
        try:
            wait_known(mesh, "A", "reader/sub/reader", "B")
            pub = subprocess.Popen(
                [EXACTMESH, "pub", "--url", f"amqp://{a.url},amqp://{b.url}", "--topic",
                 "cmd/x", "--id", "writer", "--state-dir", str(tmp_path / "p"), "--count",
                 str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            def lines() -> int:
                return out_path.read_text().count("\n")

            wait_for(lambda: lines() >= n // 3, 30, "a third of the stream at the subscriber")
            a.kill()
            a.restart()
            summary, errors = pub.communicate(timeout=60)
            assert pub.returncode == 0, errors
            assert json.loads(summary)["accepted"] == n
            assert sub.wait(timeout=60) == 0
            ids = [json.loads(line)["message_id"] for line in out_path.read_text().splitlines()]
            check_exactly_once_in_order(ids, "writer", n)
        finally:
            for proc in (sub, pub):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(5)

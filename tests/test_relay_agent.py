"""The relay agent, `exactmesh relay` (docs/relay.md), with real processes and the client
SDK: a listener behind a relay goes away, publishers on the mesh's routers go on, and when it
comes back it gets every message once, in each publisher's order; each AMQP publisher gets
its final outcome only then. The same with the router the relay links to SIGKILLed while the
listener is away (the relay links to the next router of its --mesh list), and with the relay
itself SIGKILLed (its store is on disk).

Every process is stopped by its PID; every wait is on a condition with a deadline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqp_edge.client import Publisher, Subscriber

from .harness import EXACTMESH, free_port, wait_for
from .mesh_harness import SECRET, MeshRouter, start_mesh
from .test_failover_process import Consumer, check_exactly_once_in_order
from .test_relay_amqp import listener_returns, stats

WINDOW = 16  # the routers' publisher window: a stored copy gives its place back


class RelayProcess(MeshRouter):
    """`exactmesh relay`, restartable on the same ports like a mesh router."""

    def __init__(self, relay_id: str, uplinks: list[int], store: Path, *extra: str,
                 **kw: Any) -> None:
        self.uplinks, self.store = uplinks, store
        super().__init__(relay_id, 0, [], *extra, **kw)

    def args(self) -> list[str]:
        return [EXACTMESH, "relay", "--id", self.id, "--amqp", self.url,
                "--mesh", ",".join(f"127.0.0.1:{p}" for p in self.uplinks),
                "--store", str(self.store), "--cluster-secret", SECRET,
                "--publisher-window", str(WINDOW), "--log-level", self.log_level,
                *self.extra]


@pytest.mark.parametrize("victim", [None, "uplink", "relay", "origin"])
def test_a_listener_behind_a_relay_gets_what_was_published_while_it_was_away(
        tmp_path: Path, victim: str | None) -> None:
    n = 90  # past the routers' window, within the SDK publisher's
    with start_mesh("line", 2, common=["--publisher-window", str(WINDOW)]) as mesh:
        mesh.wait_links_up()
        http = free_port()
        relay = RelayProcess("R", [mesh["A"].mesh_port, mesh["B"].mesh_port],
                             tmp_path / "relay", "--http", f"127.0.0.1:{http}")
        try:
            relay.wait_logged("link to A up", 15)
            url, sub_dir = f"amqp://{relay.url}", str(tmp_path / "sub")
            laptop = Subscriber(url, "lap/#", id="laptop", state_dir=sub_dir, durable=True)
            laptop.wait_attached(10)
            laptop.close()  # away: the relay keeps its subscription for its registration
            mesh["B"].wait_logged("router B: knows subscriber laptop/sub/laptop@R", 15)
            pub = Publisher([f"amqp://{mesh[r].url}" for r in "BA"], "lap/t", id="shop",
                            state_dir=str(tmp_path / "pub"), window=100)
            for i in range(n):
                pub.send(f"m {i}")
            wait_for(lambda: stats(http)["stored"] >= n, 20, "every message stored at R")
            assert pub.pending == n, "an AMQP publisher's outcome waits for the listener"
            if victim == "uplink":
                mesh["A"].kill()
                relay.wait_logged("link to B up", 20)
            elif victim == "origin":  # the publisher resends at A; R has the copies already
                mesh["B"].kill()
                wait_for(lambda: pub.stats()["reconnects"] >= 1, 20, "the publisher at A")
            elif victim == "relay":
                relay.kill()
                relay.restart()
                assert relay.logged("1 durable AMQP subscriber(s) restored"), relay.tail()
                assert relay.logged(f"{n} stored message copies restored"), relay.tail()
            listener_returns(url, sub_dir, pub, n, "shop")
        finally:
            relay.stop()


def test_a_laptop_disconnects_when_told_safe_and_gets_what_came_meanwhile(
        tmp_path: Path) -> None:
    """The SDK's connection control with a relay: `relay=URL`, advisories as callbacks and
    as an iterator, `disconnect()` returning once it is safe to sever, and `connect()`
    again on the same object. A publisher through the same relay sends while the laptop is
    away; both see every outcome and message once."""
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        try:
            relay.wait_logged("link to B up", 15)
            url = f"amqp://{relay.url}"
            seen: list[str] = []
            laptop = Subscriber(topic_filter="lap/#", relay=url, id="laptop",
                                state_dir=str(tmp_path / "sub"),
                                on_advisory=lambda a: seen.append(a.kind),
                                autoconnect=False)
            assert not laptop.attached
            laptop.connect()
            first = next(laptop.advisories(timeout=10))
            assert (first.kind, first.url) == ("connected", url)
            mesh["A"].wait_logged("router A: knows subscriber laptop/sub/laptop@R", 15)
            advisory = laptop.disconnect(timeout=10)
            assert advisory.safe_to_sever and advisory.url == url
            pub = Publisher(f"amqp://{mesh['A'].url}", "lap/t", id="shop",
                            state_dir=str(tmp_path / "pub"))
            for i in range(50):
                pub.send(f"m {i}")
            wait_for(lambda: pub.stats()["sent"] >= 50, 10, "every message sent")
            laptop.connect()
            consumer = Consumer(laptop)
            wait_for(lambda: len(consumer.ids) >= 50, 30, "what came while it was away")
            pub.flush(timeout=30)
            assert pub.stats()["accepted_total"] == 50
            check_exactly_once_in_order(consumer.ids, "shop", 50)
            assert seen == ["connected", "disconnected", "connected"], seen
            consumer.close()
            laptop.close()
            pub.close()
        finally:
            relay.stop()


def test_a_relay_that_does_not_answer_is_advised_once(tmp_path: Path) -> None:
    dead = f"amqp://127.0.0.1:{free_port()}"
    pub = Publisher(topic="lap/t", relay=dead, id="lonely", state_dir=str(tmp_path / "p"))
    try:
        advisory = next(pub.advisories(timeout=10))
        assert advisory.kind == "no-response" and advisory.url == dead, advisory
        assert list(pub.advisories(timeout=1.5)) == [advisory], "advised once per streak"
        assert pub.disconnect(timeout=5).safe_to_sever
    finally:
        pub.close()


def test_the_trio_client_has_the_same_connection_control(tmp_path: Path) -> None:
    import trio

    from amqp_edge.trio_client import open_publisher, open_subscriber

    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        try:
            relay.wait_logged("link to B up", 15)

            async def main() -> list[str]:
                kinds: list[str] = []
                async with open_subscriber(topic_filter="lap/#", relay=f"amqp://{relay.url}",
                                           id="trio-laptop",
                                           state_dir=str(tmp_path / "sub")) as sub:
                    advisories = sub.advisories()
                    kinds.append((await advisories.__anext__()).kind)
                    await trio.to_thread.run_sync(lambda: mesh["A"].wait_logged(
                        "router A: knows subscriber trio-laptop/sub/trio-laptop@R", 15))
                    assert (await sub.disconnect()).safe_to_sever
                    async with open_publisher(f"amqp://{mesh['A'].url}", topic="lap/t",
                                              id="trio-shop",
                                              state_dir=str(tmp_path / "pub")) as pub:
                        for i in range(20):
                            await pub.send(f"m {i}")
                        await sub.connect()
                        got = []
                        with trio.fail_after(30):
                            async for msg in sub:
                                got.append(str(msg.message_id))
                                await sub.accept(msg)
                                if len(got) == 20:
                                    break
                            await pub.flush()
                        check_exactly_once_in_order(got, "trio-shop", 20)
                    kinds += [a.kind async for a in _until_connected(advisories)]
                return kinds

            assert trio.run(main) == ["connected", "disconnected", "connected"]
        finally:
            relay.stop()


async def _until_connected(advisories: Any) -> Any:
    async for advisory in advisories:
        yield advisory
        if advisory.kind == "connected":
            return


def test_a_cron_job_publisher_collects_on_its_next_run_the_outcomes_of_the_last(
        tmp_path: Path) -> None:
    """`exactmesh pub --relay URL --handover` runs for about a second: it hands its messages
    to the relay, takes what outcomes come within a second, and disconnects cleanly. Its
    first run finds the subscriber away, so it leaves with every outcome owed. The relay
    keeps those records (its registration) while the subscriber comes back and accepts;
    the next run declares them, is answered at once, and publishes its own."""
    import json
    import subprocess

    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        # A window that holds a run's messages: they wait at the relay for a subscriber
        # away without a relay store of its own, so each keeps its place meanwhile.
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay",
                             "--publisher-window", "100")
        sub_url, sub_dir = f"amqp://{mesh['A'].url}", str(tmp_path / "sub")
        try:
            relay.wait_logged("link to B up", 15)
            away = Subscriber(sub_url, "cron/#", id="ledger", state_dir=sub_dir, durable=True,
                              timeout=60)
            away.wait_attached(10)
            away.close()
            relay.wait_logged("router R: knows subscriber ledger/sub/ledger@A", 15)

            def run(count: int) -> dict[str, int]:
                done = subprocess.run(
                    [EXACTMESH, "pub", "--relay", f"amqp://{relay.url}", "--topic", "cron/t",
                     "--id", "nightly", "--state-dir", str(tmp_path / "job"), "--count",
                     str(count), "--handover", "--timeout", "10"],
                    capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
                return json.loads(done.stdout)

            first = run(20)
            assert (first["sent"], first["accepted"], first["pending"]) == (20, 0, 20)
            sub = Subscriber(sub_url, "cron/#", id="ledger", state_dir=sub_dir, durable=True,
                             timeout=60)
            consumer = Consumer(sub)
            wait_for(lambda: len(consumer.ids) >= 20, 20, "the first run's messages")
            second = run(30)  # the first run's outcomes, and ten more messages
            assert second["resent"] == 20 and second["sent"] == 10
            assert second["accepted"] >= 20, second
            wait_for(lambda: len(consumer.ids) >= 30, 20, "the second run's messages")
            third = run(30)  # nothing new: whatever outcomes are left
            assert third["sent"] == 0 and third["pending"] == 0, third
            assert second["accepted"] + third["accepted"] == 30
            check_exactly_once_in_order(consumer.ids, "nightly", 30)
            consumer.close()
            sub.close()
        finally:
            relay.stop()


def test_a_listener_process_killed_mid_stream_behind_a_relay(tmp_path: Path) -> None:
    """`exactmesh sub --relay` SIGKILLed while it takes what the relay stored for it, then
    run again: every message is shown, in order; only the one it was showing when it died
    may come twice (it prints a message before it accepts it)."""
    import json
    import os
    import signal
    import subprocess

    n = 400
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        try:
            relay.wait_logged("link to B up", 15)
            argv = [EXACTMESH, "sub", "--relay", f"amqp://{relay.url}", "--topic", "lap/#",
                    "--id", "laptop", "--state-dir", str(tmp_path / "sub"), "--count", str(n)]
            first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
            pub = Publisher(f"amqp://{mesh['A'].url}", "lap/t", id="shop",
                            state_dir=str(tmp_path / "pub"), window=100)
            try:
                mesh["A"].wait_logged("knows subscriber laptop/sub/laptop@R", 15)
                for i in range(n):
                    pub.send(f"m {i}")
                assert first.stdout is not None
                shown = [first.stdout.readline() for _ in range(n // 3)]
                os.kill(first.pid, signal.SIGKILL)  # mid-stream, between any two steps
                first.wait(10)
                shown += first.stdout.read().splitlines()  # what it printed meanwhile
                rest = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                assert rest.returncode == 0, rest.stderr
                pub.flush(timeout=30)
                assert pub.stats()["accepted_total"] == n
            finally:
                pub.close()

            def ids(lines: list[str]) -> list[str]:
                return [json.loads(line)["message_id"] for line in lines if line.strip()]

            before, after = ids(shown), ids(rest.stdout.splitlines())
            if before and after and after[0] == before[-1]:
                del after[0]  # shown, not yet accepted, when it died: shown again
            check_exactly_once_in_order(before + after, "shop", n)
        finally:
            relay.stop()

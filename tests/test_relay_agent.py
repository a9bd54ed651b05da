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
from .test_relay_amqp import stats

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


@pytest.mark.parametrize("victim", [None, "uplink", "relay"])
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
            pub = Publisher(f"amqp://{mesh['B'].url}", "lap/t", id="shop",
                            state_dir=str(tmp_path / "pub"), window=100)
            for i in range(n):
                pub.send(f"m {i}")
            wait_for(lambda: stats(http)["stored"] >= n, 20, "every message stored at R")
            assert pub.pending == n, "an AMQP publisher's outcome waits for the listener"
            if victim == "uplink":
                mesh["A"].kill()
                relay.wait_logged("link to B up", 20)
            elif victim == "relay":
                relay.kill()
                relay.restart()
                assert relay.logged("1 durable AMQP subscriber(s) restored"), relay.tail()
                assert relay.logged(f"{n} stored message copies restored"), relay.tail()
            back = Subscriber(url, "lap/#", id="laptop", state_dir=sub_dir, durable=True)
            consumer = Consumer(back)
            wait_for(lambda: len(consumer.ids) >= n, 30, "the messages stored for the laptop")
            pub.flush(timeout=30)
            assert pub.failures() == []
            assert pub.stats()["accepted_total"] == n
            check_exactly_once_in_order(consumer.ids, "shop", n)
            consumer.close()
            back.close()
            pub.close()
        finally:
            relay.stop()

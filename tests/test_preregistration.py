"""Pre-registration (seed 000; amqp_edge/expect.py, docs/relay.md): a publisher names the
durable listeners it expects, with a time limit. A listener that attaches first after 1,000
messages, at another router, gets all 1,000 once and in order; one that never comes fails
by name at its time limit, and the publisher's other listeners are not held by it.

Real router processes and the client SDK; every wait is on a condition with a deadline."""

from __future__ import annotations

import time
from pathlib import Path

from amqp_edge.client import Publisher, Subscriber

from .harness import RouterProcess, wait_for
from .mesh_harness import start_mesh
from .test_failover_process import Consumer, check_exactly_once_in_order


def test_a_pre_registered_listener_attaching_late_gets_every_message(tmp_path: Path) -> None:
    n = 1000
    with start_mesh("line", 2, extra={"A": ["--relay-store", str(tmp_path / "store")]}) as mesh:
        mesh.wait_links_up()
        pub = Publisher(f"amqp://{mesh['A'].url}", "late/t", id="early-bird",
                        state_dir=str(tmp_path / "pub"), expect={"latecomer": "late/#"},
                        expect_timeout=600)
        try:
            for i in range(n):
                pub.send(f"m {i}", timeout=30)
            mesh["A"].wait_logged("listener latecomer/sub/latecomer pre-registered", 10)
            assert pub.stats()["accepted"] == 0, "owed to the listener: no outcome yet"
            sub = Subscriber(f"amqp://{mesh['B'].url}", "late/#", id="latecomer",
                             state_dir=str(tmp_path / "sub"), durable=True, timeout=600)
            consumer = Consumer(sub)
            wait_for(lambda: len(consumer.ids) >= n, 60, "all 1,000 at the late listener")
            pub.flush(timeout=30)
            assert pub.failures() == [] and pub.stats()["accepted_total"] == n
            check_exactly_once_in_order(consumer.ids, "early-bird", n)
            consumer.close()
            sub.close()
        finally:
            pub.close()


def test_a_pre_registered_listener_that_never_comes_fails_by_name(tmp_path: Path) -> None:
    with RouterProcess("A") as r:
        present = Subscriber(f"amqp://{r.url}", "ghost/#", id="present",
                             state_dir=str(tmp_path / "sub"))
        consumer = Consumer(present)
        pub = Publisher(f"amqp://{r.url}", "ghost/t", id="hopeful",
                        state_dir=str(tmp_path / "pub"), expect={"ghost": "ghost/#"},
                        expect_timeout=2)
        try:
            started = time.monotonic()
            for i in range(5):
                pub.send(f"m {i}")
            wait_for(lambda: len(pub.failures()) == 5, 15, "five failures naming the ghost")
            waited = time.monotonic() - started
            assert 1.5 <= waited <= 10, f"failed after {waited:.1f} s, limit 2 s"
            for f in pub.failures():
                assert "ghost/sub/ghost" in f.description, f
            wait_for(lambda: len(consumer.ids) >= 5, 10, "the present listener's copies")
            check_exactly_once_in_order(consumer.ids, "hopeful", 5)
        finally:
            pub.close()
            consumer.close()
            present.close()


def test_a_malformed_expectation_is_refused_with_a_clear_error() -> None:
    from proton import symbol

    from .harness import ClientThread
    from .harness import Publisher as RawPublisher

    bad = [{"key": "nokey", "filter": "a", "timeout": 5}]
    with RouterProcess("A") as r:
        raw = RawPublisher(r.url, "x/y", [], properties={symbol("exactmesh:expect"): bad})
        client = ClientThread(raw)
        try:
            wait_for(lambda: raw.link_error is not None, 10, "the refusal")
            assert "key 'nokey' is not container-id/link-name" in str(raw.link_error)
        finally:
            client.stop()

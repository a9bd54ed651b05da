"""A router that starts cut off from its peers knows none of the subscribers behind them
(`join-timeout`, docs/guarantees.md "Partitions").

Found on the test bed (`python -m tests.hosts restart-isolated`): a router restarted while its
peers could not be reached accepted every message at once, owed to nobody, and the subscribers
behind the peers never got them. Now guaranteed messages published there wait until a peer's
gossip has told the router the mesh's subscriptions, then go to the subscribers known then.

Real router processes and proton clients over loopback. The peer is paused with SIGSTOP (by
PID): its kernel still accepts the TCP connection, but no peer handshake answers, as behind a
partition. Nothing sleeps to synchronise; a fixed window is used only to assert that nothing
is answered while the router cannot know who is owed the messages.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tests.harness import ClientThread, Publisher, Subscriber, Tally, numbered, wait_for
from tests.mesh_harness import Mesh, start_clients, start_mesh, stop_clients, wait_outcomes

NOTHING_WINDOW = 1.5  # seconds in which no outcome may arrive (not a synchronisation)


@contextmanager
def paused(mesh: Mesh, router_id: str) -> Iterator[None]:
    pid = mesh[router_id].proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def subscriber_at_a(mesh: Mesh) -> tuple[Subscriber, ClientThread]:
    """A subscriber at A that B knows of."""
    sub = Subscriber(mesh["A"].url, "join/#", "sub", container_id="app-a")
    subc = start_clients(sub)
    mesh.wait_knows("B", sub, "A")
    return sub, subc


@contextmanager
def restarted_cut_off(mesh: Mesh, router: str = "B", peer: str = "A") -> Iterator[None]:
    """`router` restarts while `peer` is paused: until it resumes, `router` cannot hear the
    subscriptions behind it."""
    with paused(mesh, peer):
        mesh[router].kill()
        mesh[router].restart()
        yield


def held_publisher(mesh: Mesh, router: str, n: int,
                   window: int) -> tuple[Publisher, ClientThread]:
    """A publisher at `router` of `n` messages sends a window of them, and none is answered
    while the router cannot know who is owed them."""
    pub = Publisher(mesh[router].url, "join/x", numbered(n), window=window)
    pubc = ClientThread(pub)
    wait_for(lambda: pub.next >= window, 10, f"the publisher to send a window of {window}")
    time.sleep(NOTHING_WINDOW)  # the router cannot know who is owed these: nothing is answered
    assert pub.outcomes == {}, Counter(o.state for o in pub.outcomes.values())
    return pub, pubc


def test_a_router_restarted_cut_off_holds_messages_until_it_has_heard_the_mesh() -> None:
    with start_mesh("line", 2) as mesh:
        sub, subc = subscriber_at_a(mesh)
        with restarted_cut_off(mesh):
            mesh["B"].wait_logged("waiting up to 30 s to hear the mesh's subscriptions")
            pub, pubc = held_publisher(mesh, "B", 50, 20)
        mesh["B"].wait_logged("router B joined the mesh through A", 20)
        wait_outcomes(pub, 30)
        assert pub.states() == ["accepted"] * 50, Counter(pub.states())
        Tally([m.body for m in pub.messages], sub.bodies()).check_exactly_once_in_order()
        stop_clients(subc, pubc)


def test_past_the_join_timeout_messages_fail_not_in_doubt_until_the_router_joins() -> None:
    """Past `--join-timeout`, what waited fails, as does what is published until the router
    joins: nobody was sent it (not in doubt), and the reason says what to do."""
    with start_mesh("line", 2, extra={"B": ["--join-timeout", "1"]}) as mesh:
        sub, subc = subscriber_at_a(mesh)
        with restarted_cut_off(mesh):
            early = Publisher(mesh["B"].url, "join/x", numbered(5, "early"), window=5)
            earlyc = ClientThread(early)
            wait_outcomes(early, 15)
            mesh["B"].wait_logged("heard no peer's subscriptions within")
            late = Publisher(mesh["B"].url, "join/x", numbered(3, "late"), window=3)
            latec = ClientThread(late)
            wait_outcomes(late, 15)
        for pub in (early, late):
            assert pub.states() == ["rejected"] * len(pub.messages), Counter(pub.states())
            outcome = pub.outcomes[0]
            assert outcome.condition == "exactmesh:delivery-failed"
            assert "not routed: router B has not heard the mesh's subscriptions" in (
                outcome.description), outcome.description
            assert "In doubt" not in outcome.description
            assert outcome.info["failed"] == [] and outcome.info["pending"] == []
        mesh["B"].wait_logged("router B joined the mesh through A", 20)
        again = Publisher(mesh["B"].url, "join/x", numbered(5, "again"), window=5)
        againc = ClientThread(again)
        wait_outcomes(again, 15)
        assert again.states() == ["accepted"] * 5
        Tally([m.body for m in again.messages], sub.bodies()).check_exactly_once_in_order()
        stop_clients(subc, earlyc, latec, againc)


def test_a_router_that_only_listens_waits_for_a_peer_too_then_serves_alone() -> None:
    """Found on the test bed (ring with MQTT clients, seed 31): router A, which only listens
    (its peers connect to it), was restarted, and a device published to it before its peers
    had linked back: accepted at once, owed to nobody behind them. Now A waits as a router
    with a `connect` line does; past join-timeout, since it cannot tell a first start from a
    restart, it serves the subscribers it knows instead of failing."""
    with start_mesh("line", 2, extra={"A": ["--join-timeout", "30"]}) as mesh:
        sub = Subscriber(mesh["B"].url, "join/#", "sub", container_id="app-b")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "B")
        with restarted_cut_off(mesh, "A", "B"):
            mesh["A"].wait_logged("waiting up to 30 s to hear the mesh's subscriptions")
            pub, pubc = held_publisher(mesh, "A", 20, 20)
        mesh["A"].wait_logged("router A joined the mesh through B", 20)
        wait_outcomes(pub, 30)
        assert pub.states() == ["accepted"] * 20, Counter(pub.states())
        Tally([m.body for m in pub.messages], sub.bodies()).check_exactly_once_in_order()
        stop_clients(subc, pubc)

    with start_mesh("line", 2, extra={"A": ["--join-timeout", "1"]}) as mesh:
        with restarted_cut_off(mesh, "A", "B"):
            mesh["A"].wait_logged("serving the subscribers it knows", 10)
            local = Subscriber(mesh["A"].url, "join/#", "local", container_id="app-a")
            pub = Publisher(mesh["A"].url, "join/x", numbered(3), window=3)
            clients = start_clients(local), ClientThread(pub)
            wait_outcomes(pub, 15)
            assert pub.states() == ["accepted"] * 3, Counter(pub.states())
        stop_clients(*clients)

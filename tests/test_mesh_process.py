"""The mesh with real router processes and real proton clients over loopback.

Every exactly-once claim is checked by counting what each subscriber received (bodies, order)
against what each publisher was told. Tests wait for what routers log (gossip's `knows
subscriber` line, `link to X up/down`), never sleep to synchronise; a short fixed window is
used only to assert that something does not happen. Routers are stopped and killed by PID.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from proton import symbol

from tests.harness import ClientThread, Publisher, Subscriber, Tally, numbered, wait_for
from tests.mesh_harness import (
    Mesh,
    start_clients,
    start_mesh,
    stop_clients,
    sub_label,
    wait_outcomes,
)

DELIVERY_FAILED = "exactmesh:delivery-failed"
NOTHING_WINDOW = 0.5  # seconds in which something must NOT happen (not a synchronisation)


def bodies(pub: Publisher) -> list[Any]:
    return [m.body for m in pub.messages]


def info(outcome: Any, key: str) -> list[str]:
    return list((outcome.info or {}).get(symbol(key), []))


def snapshot(client: ClientThread, pub: Publisher) -> tuple[dict[int, Any], int]:
    """The publisher's outcomes and how many it sent, read on its own thread (consistent)."""
    return client.call(lambda: (dict(pub.outcomes), pub.next))


def report(mesh: Mesh, *pubs: Publisher) -> str:
    states = "; ".join(f"{p.address}: {Counter(p.states())}" for p in pubs)
    return f"{states}\n{mesh.logs()}"


# ---------------------------------------------------------------------- 1. fan-out

TOPICS = {  # topic -> body prefix; 150 messages each
    "orders/eu/paris": "eu-paris-",
    "orders/us/paris": "us-paris-",
    "orders/us/nyc": "us-nyc-",
}
FILTERS = {  # link name -> (filter, topics it matches)
    "all": ("orders/#", ["orders/eu/paris", "orders/us/paris", "orders/us/nyc"]),
    "paris": ("orders/+/paris", ["orders/eu/paris", "orders/us/paris"]),
    "eu-paris": ("orders/eu/paris", ["orders/eu/paris"]),
    "none": ("payments/#", []),
}


@pytest.mark.parametrize(("topology", "n"), [("line", 3), ("ring", 5)])
def test_fanout_with_overlapping_wildcards_on_every_router_is_exactly_once_in_order(
    topology: str, n: int
) -> None:
    with start_mesh(topology, n) as mesh:
        subs: dict[str, list[Subscriber]] = {
            r.id: [Subscriber(r.url, f, name, container_id=f"app-{r.id}")
                   for name, (f, _) in FILTERS.items()]
            for r in mesh
        }
        subc = start_clients(*(s for group in subs.values() for s in group))
        mesh.wait_all_know(subs, routers=["A"])
        pubs = {topic: Publisher(mesh["A"].url, topic, numbered(150, prefix), window=50)
                for topic, prefix in TOPICS.items()}
        pubc = ClientThread(*pubs.values())
        try:
            for pub in pubs.values():
                wait_outcomes(pub, 30)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{report(mesh, *pubs.values())}") from None
        for topic, pub in pubs.items():
            assert pub.states() == ["accepted"] * 150, f"{topic}: {Counter(pub.states())}"
        for rid, group in subs.items():
            for sub in group:
                got = sub.bodies()
                topics = FILTERS[sub.name][1]
                # Each publisher's stream must be whole and in order; the three interleave.
                for topic in topics:
                    prefix = TOPICS[topic]
                    mine = [b for b in got if b.startswith(prefix)]
                    try:
                        Tally(bodies(pubs[topic]), mine).check_exactly_once_in_order()
                    except AssertionError as err:
                        raise AssertionError(f"{sub.name}@{rid}, {topic}: {err}") from None
                assert len(got) == 150 * len(topics), (
                    f"{sub.name}@{rid} got {len(got)} messages, owed {150 * len(topics)}")
        stop_clients(subc, pubc)


# ---------------------------------------------------------------------- 2, 3. remote answers


def test_remote_subscriber_withholding_its_disposition_holds_the_publisher() -> None:
    with start_mesh("line", 3) as mesh:
        fast_a = Subscriber(mesh["A"].url, "hold/#", "fast", container_id="app-a")
        fast_b = Subscriber(mesh["B"].url, "hold/#", "fast", container_id="app-b")
        holder = Subscriber(mesh["C"].url, "hold/#", "holder", container_id="app-c",
                            policy=lambda m, d: "hold")
        subc = start_clients(fast_a, fast_b, holder)
        mesh.wait_all_know({"B": [fast_b], "C": [holder]}, routers=["A"])
        pub = Publisher(mesh["A"].url, "hold/x", numbered(5), window=50)
        pubc = ClientThread(pub)
        wait_for(lambda: len(holder.held) == 5 and len(fast_a.received) == 5
                 and len(fast_b.received) == 5, 10, "every subscriber to get the 5 messages")
        time.sleep(NOTHING_WINDOW)  # a window in which nothing may happen
        assert pub.outcomes == {}, "publisher answered before the remote subscriber accepted"
        answered_at = time.monotonic()
        assert subc.call(holder.answer_held) == 5
        wait_outcomes(pub, 5)
        assert pub.states() == ["accepted"] * 5
        delay = max(o.at for o in pub.outcomes.values()) - answered_at
        assert delay < 0.5, f"publisher accepted {delay * 1000:.0f} ms after the remote accept"
        print(f"remote accept -> publisher accepted: {delay * 1000:.1f} ms")
        stop_clients(subc, pubc)


def test_remote_subscriber_rejecting_fails_the_publisher_naming_it_with_its_router() -> None:
    with start_mesh("line", 3) as mesh:
        ok_a = Subscriber(mesh["A"].url, "rej/#", "ok", container_id="app-a")
        ok_b = Subscriber(mesh["B"].url, "rej/#", "ok", container_id="app-b")
        bad = Subscriber(mesh["C"].url, "rej/#", "bad", container_id="app-c",
                         policy=lambda m, d: "reject")
        subc = start_clients(ok_a, ok_b, bad)
        mesh.wait_all_know({"B": [ok_b], "C": [bad]}, routers=["A"])
        pub = Publisher(mesh["A"].url, "rej/1", numbered(3))
        pubc = ClientThread(pub)
        wait_outcomes(pub, 10)
        bad_label = sub_label(bad, "C")
        assert bad_label == "app-c/bad@C"
        for i, outcome in pub.outcomes.items():
            assert outcome.state == "rejected", f"message {i}: {outcome}"
            assert outcome.condition == DELIVERY_FAILED
            assert bad_label in outcome.description and "rejected" in outcome.description
            assert info(outcome, "failed") == [bad_label]
            assert sorted(info(outcome, "succeeded") + info(outcome, "pending")) == [
                sub_label(ok_a, "A"), sub_label(ok_b, "B")]
        assert len(bad.received) == 3
        stop_clients(subc, pubc)


# ---------------------------------------------------------------------- 4. a cut connection


@pytest.mark.parametrize("cut", [("A", "B"), ("B", "C")], ids=["cut-A-B", "cut-B-C"])
def test_connection_cut_and_restored_mid_stream_loses_and_duplicates_nothing(
    cut: tuple[str, str]
) -> None:
    a, b = cut
    with start_mesh("line", 3, proxied=[cut]) as mesh:
        mesh.wait_links_up()
        sub = Subscriber(mesh["C"].url, "cut/#", "sub", container_id="app-c")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "C")
        pub = Publisher(mesh["A"].url, "cut/x", numbered(600), window=50)
        pubc = ClientThread(pub)
        wait_for(lambda: len(sub.received) >= 150, 15, "150 messages before the cut")
        since = {r: len(mesh[r].log) for r in (a, b)}
        proxy = mesh.proxy(a, b)
        proxy.cut()
        mesh[a].wait_logged(mesh[a].link_down_line(b), 5, since[a])
        mesh[b].wait_logged(mesh[b].link_down_line(a), 5, since[b])
        outcomes, _ = snapshot(pubc, pub)
        got = set(sub.bodies())
        unreceived = [i for i, o in outcomes.items()
                      if o.state == "accepted" and pub.messages[i].body not in got]
        assert not unreceived, f"accepted while not received: {unreceived[:5]}"
        assert len(outcomes) < 600, "the stream ended before the cut: nothing was tested"
        proxy.restore()
        mesh[a].wait_logged(mesh[a].link_up_line(b), 10, since[a])
        try:
            wait_outcomes(pub, 30)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{report(mesh, pub)}") from None
        assert pub.states() == ["accepted"] * 600, Counter(pub.states())
        Tally(bodies(pub), sub.bodies()).check_exactly_once_in_order()
        assert proxy.connections >= 2, "the link did not come back through the proxy"
        stop_clients(subc, pubc)


# ---------------------------------------------------------------------- 5. a router killed


def _kill_the_subscribers_router(to_the_end: bool) -> None:
    """A-B-C, publisher on A, subscriber on C; C is SIGKILLed mid-stream. Every message is
    accepted and received, or still pending, or rejected naming the subscriber; with
    --unreachable-timeout 2 on A the ones pending at the kill fail within a few seconds.
    `to_the_end`: also the rest of the stream, published after the kill, must be answered."""
    with start_mesh("line", 3, extra={"A": ["--unreachable-timeout", "2"]}) as mesh:
        sub = Subscriber(mesh["C"].url, "kill/#", "sub", container_id="app-c")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "C")
        label = sub_label(sub, "C")
        pub = Publisher(mesh["A"].url, "kill/x", numbered(400), window=50)
        pubc = ClientThread(pub)
        wait_for(lambda: len(sub.received) >= 100, 15, "100 messages before the kill")
        mesh["C"].kill()
        killed_at = time.monotonic()
        at_kill, sent_at_kill = snapshot(pubc, pub)
        pending_at_kill = [i for i in range(sent_at_kill) if i not in at_kill]
        assert pending_at_kill, "nothing was in flight at the kill: nothing was tested"

        def check_outcomes() -> None:
            outcomes = pub.outcomes.copy()  # before the bodies: accepted implies received
            got = Counter(sub.bodies())
            dupes = [b for b, k in got.items() if k > 1]
            assert not dupes, f"received twice: {dupes[:5]}"
            for i, o in outcomes.items():
                body = pub.messages[i].body
                if o.state == "accepted":
                    assert got[body] == 1, f"{body} accepted but never received by {label}"
                else:
                    assert o.state == "rejected", f"{body}: {o}"
                    assert o.condition == DELIVERY_FAILED, f"{body}: {o}"
                    assert label in info(o, "failed"), f"{body}: {o.info}"
                    assert label in o.description
            in_order = [b for b in bodies(pub) if b in got]
            assert sub.bodies() == in_order, "received out of publish order"

        check_outcomes()
        try:
            wait_for(lambda: all(i in pub.outcomes for i in pending_at_kill), 10,
                     f"outcomes for the {len(pending_at_kill)} messages pending at the kill")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{report(mesh, pub)}") from None
        failed_after = max(pub.outcomes[i].at for i in pending_at_kill) - killed_at
        print(f"pending at kill: {len(pending_at_kill)}, all answered "
              f"{failed_after:.2f} s after the kill")
        assert failed_after < 5, f"pending messages took {failed_after:.1f} s to fail"
        time.sleep(NOTHING_WINDOW)  # a window in which router A must not die
        assert mesh["A"].alive, f"router A died:\n{mesh['A'].tail()}"
        check_outcomes()
        if to_the_end:
            # C is still unreachable (and still in A's gossip copy): what A keeps sending
            # toward its subscriber must fail as well, naming it.
            try:
                wait_outcomes(pub, 15)
            except AssertionError as err:
                raise AssertionError(f"{err}\n{report(mesh, pub)}") from None
            check_outcomes()
            assert mesh["A"].alive, f"router A died:\n{mesh['A'].tail()}"
        stop_clients(subc, pubc)


def test_killing_the_subscribers_router_fails_what_was_pending_naming_the_subscriber() -> None:
    _kill_the_subscribers_router(to_the_end=False)


def test_after_the_unreachable_timeout_later_messages_fail_too() -> None:
    _kill_the_subscribers_router(to_the_end=True)


def test_killing_the_middle_of_a_line_holds_messages_until_it_is_back() -> None:
    """A-B-C, publisher on A, subscriber on C; B (which only carries traffic) is SIGKILLed:
    nothing is accepted that C's subscriber did not accept; B restarted on the same ports,
    the held messages complete, each received exactly once."""
    with start_mesh("line", 3) as mesh:
        sub = Subscriber(mesh["C"].url, "mid/#", "sub", container_id="app-c")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "C")
        pub = Publisher(mesh["A"].url, "mid/x", numbered(400), window=50)
        pubc = ClientThread(pub)
        wait_for(lambda: len(sub.received) >= 100, 15, "100 messages before the kill")
        since = {r: len(mesh[r].log) for r in "AC"}
        mesh["B"].kill()
        mesh["A"].wait_logged(mesh["A"].link_down_line("B"), 5, since["A"])
        mesh["C"].wait_logged(mesh["C"].link_down_line("B"), 5, since["C"])

        def accepted_but_not_received() -> list[str]:
            outcomes = pub.outcomes.copy()  # before the bodies: accepted implies received
            got = set(sub.bodies())
            return [pub.messages[i].body for i, o in outcomes.items()
                    if o.state == "accepted" and pub.messages[i].body not in got]

        # An acceptance that crossed B before the kill may still be on its way from A to the
        # publisher's thread; it is for a message the subscriber had by now. Nothing else may
        # be told accepted while A cannot reach C.
        reached = set(sub.bodies())
        before, _ = snapshot(pubc, pub)
        time.sleep(NOTHING_WINDOW)  # partitioned: no new acceptance may arrive in this window
        during, sent = snapshot(pubc, pub)
        late = [pub.messages[i].body for i in during.keys() - before.keys()]
        assert set(late) <= reached, f"outcomes while A could not reach C: {late}"
        assert len(during) < sent, "nothing was held by the partition: nothing was tested"
        assert not accepted_but_not_received()
        held = sent - len(during)
        mesh["B"].restart()
        try:
            wait_outcomes(pub, 30)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{report(mesh, pub)}") from None
        assert not accepted_but_not_received()
        assert pub.states() == ["accepted"] * 400, Counter(pub.states())
        Tally(bodies(pub), sub.bodies()).check_exactly_once_in_order()
        print(f"held across the partition: {held}")
        stop_clients(subc, pubc)


def test_killing_a_router_of_a_ring_reroutes_the_stream_exactly_once() -> None:
    """Ring A-B-C-D, publisher on A, subscriber on C: the route A-B-C (ties go to the
    smallest first hop) loses B mid-stream and the stream goes on by A-D-C."""
    with start_mesh("ring", 4) as mesh:
        mesh.wait_links_up()
        sub = Subscriber(mesh["C"].url, "ring/#", "sub", container_id="app-c")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "C")
        pub = Publisher(mesh["A"].url, "ring/x", numbered(400), window=50)
        pubc = ClientThread(pub)
        wait_for(lambda: len(sub.received) >= 100, 15, "100 messages before the kill")
        mesh["B"].kill()
        killed_at = time.monotonic()
        at_kill, _ = snapshot(pubc, pub)
        assert len(at_kill) < 400, "the stream ended before the kill: nothing was tested"
        try:
            wait_outcomes(pub, 30)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{report(mesh, pub)}") from None
        assert pub.states() == ["accepted"] * 400, Counter(pub.states())
        Tally(bodies(pub), sub.bodies()).check_exactly_once_in_order()
        print(f"stream finished {time.monotonic() - killed_at:.2f} s after the kill")
        stop_clients(subc, pubc)

"""Topology, subscription gossip and anti-entropy (mesh/topology.py, gossip.py, sync.py).

The unit tests pin the rules of docs/mesh-protocol.md; the hypothesis test runs a small mesh
through dropped, duplicated and reordered frames, link flaps, restarts and local attach/detach,
then checks that anti-entropy over reliable links leaves every router with the same tables and
with next hops that match networkx on the true graph.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mesh.gossip import Gossip, RemoteSub, RouterRestarted, SubChange
from mesh.sync import MeshSync
from mesh.topology import Topology


def lsa(origin: str, nbrs: dict[str, int], inc: int = 1, ver: int = 1) -> dict[str, Any]:
    return {"t": "LSA", "origin": origin, "inc": inc, "ver": ver, "nbrs": nbrs}


def topo_of(me: str, edges: dict[tuple[str, str], int]) -> Topology:
    """A Topology for `me` that heard every router's LSA for `edges` (both ends report)."""
    nbrs: dict[str, dict[str, int]] = {}
    for (a, b), cost in edges.items():
        nbrs.setdefault(a, {})[b] = cost
        nbrs.setdefault(b, {})[a] = cost
    t = Topology(me, 1)
    t.set_neighbors(nbrs.get(me, {}))
    for origin, n in nbrs.items():
        if origin != me:
            assert t.on_lsa(lsa(origin, n))
    return t


# -- topology ------------------------------------------------------------------------------------


def test_fresh_topology_holds_only_itself() -> None:
    t = Topology("A", 5)
    assert t.lsa("A") == {"t": "LSA", "origin": "A", "inc": 5, "ver": 0, "nbrs": {}}
    assert t.versions() == {"A": (5, 0)}
    assert t.incarnation("A") == 5 and t.incarnation("B") is None
    assert t.next_hop("A") is None and t.next_hop("B") is None
    assert t.reachable() == set()


def test_set_neighbors_bumps_version_and_returns_a_copy() -> None:
    t = Topology("A", 5)
    frame = t.set_neighbors({"B": 2})
    assert frame == {"t": "LSA", "origin": "A", "inc": 5, "ver": 1, "nbrs": {"B": 2}}
    frame["nbrs"]["C"] = 1  # the caller mutating its frame must not reach our state
    assert t.lsa("A")["nbrs"] == {"B": 2}
    assert t.set_neighbors({"B": 2})["ver"] == 2
    with pytest.raises(ValueError):
        t.set_neighbors({"B": 0})
    with pytest.raises(ValueError):
        t.set_neighbors({"A": 1})


def test_one_sided_link_is_not_an_edge() -> None:
    t = Topology("A", 1)
    t.set_neighbors({"B": 1})
    assert t.on_lsa(lsa("B", {"C": 1}))
    assert t.on_lsa(lsa("C", {"B": 1}))
    assert t.next_hop("B") is None and t.reachable() == set()  # B does not list A yet
    assert t.on_lsa(lsa("B", {"A": 1, "C": 1}, ver=2))
    assert t.next_hop("B") == "B" and t.next_hop("C") == "B"
    assert t.reachable() == {"B", "C"}
    t.set_neighbors({})  # our end went down: B's report alone keeps no edge
    assert t.reachable() == set()


def test_edge_weight_is_the_larger_of_the_two_costs() -> None:
    # A-B reported as 1 by A but 5 by B; A-C-B costs 2 + 2: the detour wins only with max().
    t = Topology("A", 1)
    t.set_neighbors({"B": 1, "C": 2})
    t.on_lsa(lsa("B", {"A": 5, "C": 2}))
    t.on_lsa(lsa("C", {"A": 2, "B": 2}))
    assert t.graph()["A"]["B"]["weight"] == 5
    assert t.next_hop("B") == "C"


def test_equal_cost_ties_go_to_the_smallest_first_hop() -> None:
    # Two equal paths A-C-D and A-B-D; and E behind D. Whatever the order LSAs arrive in.
    edges = {("A", "C"): 1, ("C", "D"): 1, ("A", "B"): 1, ("B", "D"): 1, ("D", "E"): 1}
    t = topo_of("A", edges)
    assert t.next_hop("D") == "B" and t.next_hop("E") == "B"
    rev = topo_of("A", dict(reversed(edges.items())))
    assert rev.next_hop("D") == "B" and rev.next_hop("E") == "B"


def test_tie_broken_over_all_shortest_paths_not_the_first_found() -> None:
    # D is reached at cost 3 via A-Z-D (Z cost 1, Z-D cost 2) and via A-Y-X-D (1 each):
    # the smaller first hop is Y, two hops deep on its path.
    t = topo_of("A", {("A", "Z"): 1, ("Z", "D"): 2, ("A", "Y"): 1, ("Y", "X"): 1,
                      ("X", "D"): 1})
    assert t.next_hop("D") == "Y"


def test_newer_means_higher_inc_then_higher_ver() -> None:
    t = Topology("A", 1)
    assert t.on_lsa(lsa("B", {"A": 1}, inc=3, ver=4))
    assert not t.on_lsa(lsa("B", {}, inc=3, ver=4))  # duplicate
    assert not t.on_lsa(lsa("B", {}, inc=3, ver=2))  # stale
    assert not t.on_lsa(lsa("B", {}, inc=2, ver=99))  # an older incarnation, however high ver
    assert t.lsa("B")["nbrs"] == {"A": 1}
    assert t.on_lsa(lsa("B", {}, inc=4, ver=1))  # a restart: lower ver, newer inc
    assert t.incarnation("B") == 4 and t.versions()["B"] == (4, 1)


def test_lsa_about_ourselves_is_ignored_and_a_newer_one_counted() -> None:
    t = Topology("A", 5)
    t.set_neighbors({"B": 1})
    assert not t.on_lsa(lsa("A", {}, inc=4, ver=9))
    assert t.foreign_self_claims == 0
    assert not t.on_lsa(lsa("A", {}, inc=6, ver=1))
    assert t.foreign_self_claims == 1
    assert t.lsa("A")["nbrs"] == {"B": 1} and t.incarnation("A") == 5


def test_unreachable_routers_are_kept_and_come_back() -> None:
    t = topo_of("A", {("A", "B"): 1, ("B", "C"): 1})
    assert t.next_hop("C") == "B"
    assert t.on_lsa(lsa("B", {"A": 1}, ver=2))  # B lost its link to C
    assert t.next_hop("C") is None and t.reachable() == {"B"}
    assert t.lsa("C") is not None
    assert t.on_lsa(lsa("B", {"A": 1, "C": 1}, ver=3))
    assert t.next_hop("C") == "B"


def test_split_by_next_hop() -> None:
    t = topo_of("A", {("A", "B"): 1, ("B", "C"): 1, ("A", "D"): 1})
    t.on_lsa(lsa("X", {}))  # known but unreachable
    by_hop, unreachable = t.split_by_next_hop(["C", "D", "B", "X", "Q"])
    assert by_hop == {"B": ["C", "B"], "D": ["D"]}
    assert unreachable == ["X", "Q"]
    with pytest.raises(ValueError):
        t.split_by_next_hop(["A"])


def test_paths_are_recomputed_lazily_and_only_on_link_changes(monkeypatch) -> None:
    calls = []
    real = nx.dijkstra_predecessor_and_distance

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(nx, "dijkstra_predecessor_and_distance", counting)
    t = Topology("A", 1)
    t.set_neighbors({"B": 1})
    for ver in range(1, 6):  # a burst of LSAs: no path computation until someone asks
        t.on_lsa(lsa("B", {"A": 1, "C": ver}, ver=ver))
    assert calls == []
    assert t.next_hop("B") == "B" and t.next_hop("C") is None and t.reachable() == {"B"}
    assert len(calls) == 1
    t.on_lsa(lsa("B", {"A": 1, "C": 5}, ver=6))  # same links, newer ver: cache kept
    t.next_hop("B")
    assert len(calls) == 1
    t.on_lsa(lsa("C", {"B": 5}))
    assert t.next_hop("C") == "B" and len(calls) == 2


@pytest.mark.parametrize("bad", [
    {"t": "LSA", "origin": "B", "inc": 1, "ver": 1},
    {"t": "LSA", "origin": "B", "inc": "1", "ver": 1, "nbrs": {}},
    {"t": "LSA", "origin": "B", "inc": 1, "ver": 1, "nbrs": {"A": 0}},
    {"t": "LSA", "origin": "B", "inc": 1, "ver": 1, "nbrs": {"A": True}},
    {"t": "SUBS", "origin": "B", "inc": 1, "ver": 1, "nbrs": {}},
])
def test_malformed_lsa_raises(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Topology("A", 1).on_lsa(bad)


# -- gossip --------------------------------------------------------------------------------------


def sub(router: str, n: int, flt: str = "a/#", gen: int = 0) -> RemoteSub:
    return RemoteSub(router, f"c{n}/l{n}", flt, f"c{n}", f"l{n}", gen)


def attach(g: Gossip, n: int, flt: str = "a/#", gen: int = 0) -> dict[str, Any]:
    return g.local_attach(f"c{n}/l{n}", flt, f"c{n}", f"l{n}", gen)


def test_attach_and_detach_flood_deltas_that_apply_in_order() -> None:
    b, a = Gossip("B", 7), Gossip("A", 1)
    d1 = attach(b, 1)
    assert d1 == {"t": "SUBS", "origin": "B", "inc": 7, "ver": 1, "full": False,
                  "add": {"c1/l1": ["a/#", "c1", "l1", 0, 0.0, 0, 0]}, "remove": []}
    d2 = attach(b, 2, "x/+", 1)
    d3 = b.local_detach("c1/l1")
    assert b.local_detach("nope/nope") is None
    assert d3 is not None and d3["ver"] == 3 and d3["remove"] == ["c1/l1"]
    assert a.on_subs(d1) == ([SubChange("added", sub("B", 1))], True, None)
    assert a.on_subs(d2) == ([SubChange("added", sub("B", 2, "x/+", 1))], True, None)
    assert a.on_subs(d3) == ([SubChange("removed", sub("B", 1))], True, None)
    assert a.table("B") == b.table("B") == {"c2/l2": sub("B", 2, "x/+", 1)}
    assert a.versions() == {"A": (1, 0), "B": (7, 3)}
    assert a.full("B") == b.full("B")


def test_duplicates_and_stale_frames_are_ignored() -> None:
    b, a = Gossip("B", 7), Gossip("A", 1)
    d1, d2 = attach(b, 1), attach(b, 2)
    a.on_subs(d1)
    a.on_subs(d2)
    full2 = b.full("B")
    attach(b, 3)
    assert a.on_subs(d1) == ([], False, None)
    assert a.on_subs(d2) == ([], False, None)
    assert a.on_subs(full2) == ([], False, None)  # a full table of a version we hold
    a.on_subs(b.full("B"))
    assert a.on_subs(full2) == ([], False, None)  # and an older one
    assert a.versions()["B"] == (7, 3)


def test_gap_pulls_once_until_a_full_table_arrives() -> None:
    b, a = Gossip("B", 7), Gossip("A", 1)
    a.on_subs(attach(b, 1))
    attach(b, 2)  # lost
    d3, d4 = attach(b, 3), attach(b, 4)
    assert a.on_subs(d3) == ([], False, {"t": "PULL", "origins": ["B"]})
    assert a.on_subs(d4) == ([], False, None)  # still waiting for the first PULL's answer
    events, reflood, pull = a.on_subs(b.full("B"))
    assert reflood and pull is None
    assert sorted(e.sub.key for e in events if isinstance(e, SubChange)) == [
        "c2/l2", "c3/l3", "c4/l4"]
    assert a.table("B") == b.table("B")
    attach(b, 5)  # lost again: a new gap pulls again
    assert a.on_subs(attach(b, 6))[2] == {"t": "PULL", "origins": ["B"]}


def test_delta_for_an_unknown_origin() -> None:
    b, a = Gossip("B", 7), Gossip("A", 1)
    d1, d2 = attach(b, 1), attach(b, 2)
    # ver 1 applies onto nothing (every table starts empty); ver 2 alone is a gap.
    assert Gossip("C", 1).on_subs(d2)[2] == {"t": "PULL", "origins": ["B"]}
    assert a.on_subs(d1) == ([SubChange("added", sub("B", 1))], True, None)


def test_restart_with_higher_inc_replaces_the_table() -> None:
    old, a = Gossip("B", 7), Gossip("A", 1)
    a.on_subs(attach(old, 1))
    a.on_subs(attach(old, 2))
    new = Gossip("B", 8)
    d1 = attach(new, 3)
    events, reflood, pull = a.on_subs(d1)  # ver 1 of a newer inc applies onto the empty table
    assert reflood and pull is None
    assert events[0] == RouterRestarted("B", 8)
    assert set(events[1:3]) == {SubChange("removed", sub("B", 1)),
                                SubChange("removed", sub("B", 2))}
    assert events[3:] == [SubChange("added", sub("B", 3))]
    assert a.table("B") == new.table("B") and a.versions()["B"] == (8, 1)
    # A stale frame of the old incarnation changes nothing.
    assert a.on_subs(old.full("B")) == ([], False, None)


def test_restart_learned_from_a_full_table_or_a_gap() -> None:
    old, a = Gossip("B", 7), Gossip("A", 1)
    a.on_subs(attach(old, 1))
    new = Gossip("B", 9)
    attach(new, 1)
    d2 = attach(new, 2)
    assert a.on_subs(d2) == ([], False, {"t": "PULL", "origins": ["B"]})
    events, reflood, _ = a.on_subs(new.full("B"))
    # c1/l1 reads the same in both incarnations, but the old subscriber is gone all the same
    # and the new one is a new attach: the engine sees the restart, then c1/l1 removed and
    # added (found on the test bed: a device back at its restarted router with the same
    # generation was never added again, and its messages went to nobody), and the table ends
    # equal to the new one.
    assert events == [RouterRestarted("B", 9), SubChange("removed", sub("B", 1)),
                      SubChange("added", sub("B", 1)), SubChange("added", sub("B", 2))]
    assert reflood
    assert a.table("B") == new.table("B")
    # An empty full table of a restarted router still tells that its subscribers are gone.
    events, _, _ = a.on_subs(Gossip("B", 10).full("B"))
    assert events[0] == RouterRestarted("B", 10)
    assert {e.kind for e in events[1:]} == {"removed"} and a.table("B") == {}


def test_reattach_with_other_fields_is_removed_then_added() -> None:
    b, a = Gossip("B", 7), Gossip("A", 1)
    a.on_subs(attach(b, 1))
    assert a.on_subs(attach(b, 1, gen=1))[0] == [
        SubChange("removed", sub("B", 1)), SubChange("added", sub("B", 1, gen=1))]
    assert a.on_subs(attach(b, 1, gen=1)) == ([], True, None)  # identical: silent


def test_frames_about_ourselves_are_ignored() -> None:
    a = Gossip("A", 5)
    attach(a, 1)
    impostor = Gossip("A", 6)
    assert a.on_subs(attach(impostor, 9)) == ([], False, None)
    assert a.foreign_self_claims == 1
    assert a.on_subs(Gossip("A", 4).full("A")) == ([], False, None)
    assert a.foreign_self_claims == 1
    assert set(a.table("A")) == {"c1/l1"}


def test_table_returns_a_copy() -> None:
    a = Gossip("A", 1)
    attach(a, 1)
    a.table("A").clear()
    assert len(a.table("A")) == 1 and a.table("Z") == {}


def test_malformed_subs_raises() -> None:
    good = attach(Gossip("B", 1), 1)
    for bad in ({**good, "add": {"k": ["f", "c", "l"]}}, {**good, "full": 1},
                {**good, "remove": [1]}, {**good, "ver": -1}, {**good, "t": "LSA"},
                {**good, "add": {"k": ["f", "c", "l", 1, 0.0, 0, -1]}},
                {**good, "add": {"k": ["f", "c", "l", 1, 0.0, 0, 1.5]}},
                {**good, "add": {"k": ["f", "c", "l", 1, 0.0, 0, 1, 1]}}):
        with pytest.raises(ValueError):
            Gossip("A", 1).on_subs(bad)


def test_entries_from_older_routers_read_qos_and_since_as_zero() -> None:
    """Five fields predate the QoS, six the generation a subscription started afresh at."""
    frame = {"t": "SUBS", "origin": "B", "inc": 1, "ver": 1, "full": False, "remove": [],
             "add": {"c/5": ["a/#", "c", "5", 3, 0.0], "c/6": ["a/#", "c", "6", 3, 0.0, 1],
                     "c/7": ["a/#", "c", "7", 3, 0.0, 1, 2]}}
    a = Gossip("A", 1)
    a.on_subs(frame)
    got = {k: (s.qos, s.since) for k, s in a.table("B").items()}
    assert got == {"c/5": (0, 0), "c/6": (1, 0), "c/7": (1, 2)}


# -- anti-entropy --------------------------------------------------------------------------------


def router(me: str, inc: int = 1) -> MeshSync:
    return MeshSync(Topology(me, inc), Gossip(me, inc))


def test_digest_lists_both_halves() -> None:
    a = router("A", 3)
    a.topology.set_neighbors({"B": 1})
    attach(a.gossip, 1)
    attach(a.gossip, 2)
    a.topology.on_lsa(lsa("B", {"A": 1}, inc=4, ver=2))
    assert a.digest() == {"t": "DIGEST", "entries": {"A": [3, 1, 2], "B": [4, 2, -1]}}
    # A restart half heard of: the LSA is of inc 5, the SUBS copy still of inc 4.
    a.gossip.on_subs(attach(Gossip("B", 4), 1))
    a.topology.on_lsa(lsa("B", {"A": 1}, inc=5, ver=1))
    assert a.digest()["entries"]["B"] == [5, 1, -1]


def test_on_digest_sends_what_is_newer_and_pulls_the_rest() -> None:
    a, b = router("A"), router("B")
    a.topology.set_neighbors({"B": 1})
    attach(a.gossip, 1)
    b.topology.set_neighbors({"A": 1})
    b.topology.on_lsa(lsa("C", {"B": 1}))
    out = a.on_digest(b.digest())
    assert out == [a.topology.lsa("A"), a.gossip.full("A"),
                   {"t": "PULL", "origins": ["B", "C"]}]
    assert a.on_digest(a.digest()) == []  # nothing to repair between equals
    answer = b.on_pull(out[-1])
    assert answer == [b.topology.lsa("B"), b.gossip.full("B"), b.topology.lsa("C")]
    assert b.on_pull({"t": "PULL", "origins": ["Z", "B", "B"]}) == answer[:2]


def test_on_digest_never_pulls_our_own_origin() -> None:
    a = router("A", 3)
    claims = {"t": "DIGEST", "entries": {"A": [9, 9, 9]}}
    assert a.on_digest(claims) == []
    old = {"t": "DIGEST", "entries": {"A": [2, 9, 9]}}
    assert a.on_digest(old) == [a.topology.lsa("A"), a.gossip.full("A")]


def test_malformed_digest_and_pull_raise() -> None:
    a = router("A")
    for bad in ({"t": "DIGEST", "entries": {"B": [1, 2]}}, {"t": "DIGEST", "entries": []},
                {"t": "DIGEST", "entries": {"B": [1, 2, "3"]}}):
        with pytest.raises(ValueError):
            a.on_digest(bad)
    with pytest.raises(ValueError):
        a.on_pull({"t": "PULL", "origins": [1]})


# -- a simulated mesh ----------------------------------------------------------------------------


class Node:
    """One router: the three sans-IO parts plus the engine's view built from gossip events."""

    def __init__(self, me: str, inc: int) -> None:
        self.topo = Topology(me, inc)
        self.gossip = Gossip(me, inc)
        self.sync = MeshSync(self.topo, self.gossip)
        self.view: dict[str, dict[str, RemoteSub]] = {}

    def apply(self, events: list[SubChange | RouterRestarted]) -> None:
        # The events must be a consistent change log: removing exactly what was there,
        # adding only what was not.
        for ev in events:
            if isinstance(ev, RouterRestarted):
                continue
            table = self.view.setdefault(ev.sub.router, {})
            if ev.kind == "removed":
                assert table.pop(ev.sub.key) == ev.sub
            else:
                assert ev.sub.key not in table
                table[ev.sub.key] = ev.sub


class Mesh:
    """Routers, links with per-end costs, and frames in flight (each encoded as on the wire)."""

    def __init__(self, names: list[str], costs: dict[tuple[str, str], int]) -> None:
        self.costs = costs  # (a, b) -> the cost a reports for its link to b
        self.incs = dict.fromkeys(names, 1)
        self.nodes = {n: Node(n, 1) for n in names}
        self.local: dict[str, dict[str, tuple[str, bool]]] = {n: {} for n in names}
        self.up: set[frozenset[str]] = set()
        self.epoch: dict[frozenset[str], int] = {}  # a frame dies with its connection
        self.inflight: list[tuple[str, str, bytes, int]] = []

    def nbrs(self, r: str) -> dict[str, int]:
        # Sorted: set order depends on string hashing, and a failing example must replay.
        return {n: self.costs[(r, n)] for n in sorted(x for e in self.up if r in e for x in e)
                if n != r}

    def send(self, src: str, dst: str, frame: dict[str, Any]) -> None:
        edge = frozenset((src, dst))
        if edge in self.up:
            self.inflight.append((src, dst, msgpack.packb(frame), self.epoch[edge]))

    def flood(self, src: str, frame: dict[str, Any], skip: str | None = None) -> None:
        for n in sorted(self.nbrs(src)):
            if n != skip:
                self.send(src, n, frame)

    def link_up(self, a: str, b: str) -> None:
        edge = frozenset((a, b))
        if edge in self.up:
            return
        self.up.add(edge)
        self.epoch[edge] = self.epoch.get(edge, 0) + 1
        for x, y in ((a, b), (b, a)):
            self.flood(x, self.nodes[x].topo.set_neighbors(self.nbrs(x)))
            self.send(x, y, self.nodes[x].sync.digest())

    def link_down(self, a: str, b: str) -> None:
        edge = frozenset((a, b))
        if edge not in self.up:
            return
        self.up.discard(edge)
        self.epoch[edge] += 1
        for x in (a, b):
            self.flood(x, self.nodes[x].topo.set_neighbors(self.nbrs(x)))

    def restart(self, r: str) -> None:
        links = sorted(tuple(sorted(e)) for e in self.up if r in e)
        for a, b in links:
            self.link_down(a, b)
        self.incs[r] += 1
        self.nodes[r] = Node(r, self.incs[r])
        self.local[r] = {}
        for a, b in links:
            self.link_up(a, b)

    def attach(self, r: str, n: int, flt: str, resuming: bool) -> None:
        self.local[r][f"c{n}/l{n}"] = (flt, int(resuming))
        self.flood(r, self.nodes[r].gossip.local_attach(f"c{n}/l{n}", flt, f"c{n}", f"l{n}",
                                                         int(resuming)))

    def detach(self, r: str, n: int) -> None:
        self.local[r].pop(f"c{n}/l{n}", None)
        frame = self.nodes[r].gossip.local_detach(f"c{n}/l{n}")
        if frame is not None:
            self.flood(r, frame)

    def deliver(self, i: int) -> None:
        src, dst, raw, epoch = self.inflight.pop(i)
        if self.epoch[frozenset((src, dst))] != epoch:
            return
        frame = msgpack.unpackb(raw)
        node = self.nodes[dst]
        if frame["t"] == "LSA":
            if node.topo.on_lsa(frame):
                self.flood(dst, frame, skip=src)
        elif frame["t"] == "SUBS":
            events, reflood, pull = node.gossip.on_subs(frame)
            node.apply(events)
            if reflood:
                self.flood(dst, frame, skip=src)
            if pull is not None:
                self.send(dst, src, pull)
        elif frame["t"] == "DIGEST":
            for f in node.sync.on_digest(frame):
                self.send(dst, src, f)
        else:
            for f in node.sync.on_pull(frame):
                self.send(dst, src, f)

    def drain(self) -> int:
        """Deliver everything in order, no loss; returns how many frames that took."""
        count = 0
        while self.inflight:
            self.deliver(0)
            count += 1
            assert count < 100_000, "frames keep flowing: a flooding loop"
        return count

    def anti_entropy_round(self) -> None:
        for r in sorted(self.nodes):
            for n in sorted(self.nbrs(r)):
                self.send(r, n, self.nodes[r].sync.digest())
        self.drain()

    def true_graph(self) -> nx.Graph:
        g = nx.Graph()
        g.add_nodes_from(self.nodes)
        for e in self.up:
            a, b = sorted(e)
            g.add_edge(a, b, weight=max(self.costs[(a, b)], self.costs[(b, a)]))
        return g


def check_converged(mesh: Mesh) -> None:
    names = sorted(mesh.nodes)
    for o in names:
        owner = mesh.nodes[o]
        expected = {k: RemoteSub(o, k, flt, *k.split("/"), res)
                    for k, (flt, res) in mesh.local[o].items()}
        assert owner.gossip.table(o) == expected
        for r in names:
            node = mesh.nodes[r]
            assert node.gossip.versions()[o] == owner.gossip.versions()[o], (r, o)
            assert node.gossip.full(o) == owner.gossip.full(o), (r, o)
            assert node.topo.lsa(o) == owner.topo.lsa(o), (r, o)
            if r != o:
                assert node.view.get(o, {}) == expected, (r, o)
    g = mesh.true_graph()
    dist = dict(nx.all_pairs_dijkstra_path_length(g))
    for r in names:
        topo = mesh.nodes[r].topo
        assert topo.reachable() == set(dist[r]) - {r}
        for d in names:
            if d == r:
                assert topo.next_hop(d) is None
                continue
            # The smallest neighbour that starts some shortest path, computed independently.
            best = min(n for n in g[r]
                       if g[r][n]["weight"] + dist[n][d] == dist[r][d])
            assert topo.next_hop(d) == best, (r, d)


@st.composite
def meshes(draw: st.DrawFn) -> tuple[list[str], dict[tuple[str, str], int], list[tuple]]:
    n = draw(st.integers(3, 8))
    names = [chr(ord("A") + i) for i in range(n)]
    edges = {frozenset((names[i], names[draw(st.integers(0, i - 1))])) for i in range(1, n)}
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    edges |= {frozenset(p) for p in draw(st.lists(st.sampled_from(pairs), max_size=n))}
    costs: dict[tuple[str, str], int] = {}
    for e in sorted(edges, key=sorted):
        a, b = sorted(e)
        # Mostly cost 1, so that equal-cost ties are common; ends may disagree.
        costs[(a, b)] = draw(st.sampled_from([1, 1, 1, 2, 3]))
        costs[(b, a)] = draw(st.sampled_from([costs[(a, b)], costs[(a, b)], 1, 2]))
    router = st.sampled_from(names)
    edge = st.sampled_from(sorted(tuple(sorted(e)) for e in edges))
    op = st.one_of(
        st.tuples(st.just("attach"), router, st.integers(0, 5), st.sampled_from(["a/#", "b/+"]),
                  st.booleans()),
        st.tuples(st.just("detach"), router, st.integers(0, 5)),
        st.tuples(st.just("flap"), edge),
        st.tuples(st.just("restart"), router),
        st.tuples(st.just("digest"), router),
        st.tuples(st.just("deliver"), st.integers(1, 30)),
    )
    return names, costs, draw(st.lists(op, max_size=40))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(meshes(), st.randoms(use_true_random=False))
def test_mesh_converges_after_faults(spec: tuple, rng: random.Random) -> None:
    names, costs, ops = spec
    mesh = Mesh(names, costs)
    for a, b in sorted(costs):
        if a < b:
            mesh.link_up(a, b)
    for op in ops:
        kind = op[0]
        if kind == "attach":
            mesh.attach(op[1], op[2], op[3], op[4])
        elif kind == "detach":
            mesh.detach(op[1], op[2])
        elif kind == "flap":
            a, b = op[1]
            if frozenset((a, b)) in mesh.up:
                mesh.link_down(a, b)
            else:
                mesh.link_up(a, b)
        elif kind == "restart":
            mesh.restart(op[1])
        elif kind == "digest":
            r = op[1]
            for n in mesh.nbrs(r):
                mesh.send(r, n, mesh.nodes[r].sync.digest())
        else:
            for _ in range(op[1]):
                if not mesh.inflight:
                    break
                i = rng.randrange(len(mesh.inflight))  # reordering
                roll = rng.random()
                if roll < 0.2:
                    mesh.inflight.pop(i)  # dropped
                    continue
                if roll < 0.3:  # duplicated: a copy stays in flight somewhere
                    j = rng.randrange(len(mesh.inflight) + 1)
                    mesh.inflight.insert(j, mesh.inflight[i])
                    i += j <= i
                mesh.deliver(i)
    # Faults stop: every link comes back, what is in flight arrives in order, then anti-entropy.
    for a, b in sorted(costs):
        if a < b:
            mesh.link_up(a, b)
    mesh.drain()
    # One round is enough: every link exchanges digests, and whatever a router applies it
    # re-floods, so the newest state of every origin crosses every link at least once.
    mesh.anti_entropy_round()
    check_converged(mesh)


def test_mesh_converges_by_flooding_alone_without_faults() -> None:
    # With reliable links, deltas and LSAs alone reach everyone: anti-entropy is only repair.
    names = list("ABCDEF")
    edges = [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E"), ("E", "F"), ("F", "A"), ("A", "D")]
    costs = {**{e: 1 for e in edges}, **{(b, a): 1 for a, b in edges}}
    mesh = Mesh(names, costs)
    for a, b in edges:
        mesh.link_up(a, b)
    mesh.drain()
    mesh.attach("C", 1, "a/#", False)
    mesh.attach("F", 2, "b/+", True)
    mesh.drain()
    mesh.restart("D")
    mesh.attach("D", 3, "a/#", False)
    mesh.drain()
    check_converged(mesh)

"""Link-state topology of the mesh (docs/mesh-protocol.md, section Topology). Sans-IO.

Every router floods `LSA {origin, inc, ver, nbrs: {router: cost}}` when its set of up links
changes. `Topology` keeps the newest LSA per origin, builds a graph from the links that *both*
ends report, and answers next-hop queries from a cache that is rebuilt lazily (on the first
query after a change), so that a burst of LSAs during a flood costs one Dijkstra, not one per
frame.

Decisions the protocol page leaves open:

- Our own LSA exists from the start (`ver` 0, no neighbours), so `lsa(me)` and `versions()`
  always include us and a restarted router's first real LSA (`ver` 1) is newer than nothing.
- An LSA about ourselves from someone else is never applied: we are the only writer of our
  LSA. One that claims to be newer than ours (a higher `inc`, or our `inc` with a higher
  `ver`) must not exist; it is ignored and counted in `foreign_self_claims`.
- Costs must be positive integers (zero or negative costs would let Dijkstra build cycles of
  equal distance and break the tie rule below). A malformed LSA raises `ValueError`, which the
  caller treats as a protocol error on the link it came from; the `nbrs` map is checked only
  for an LSA that is newer (the others are dropped unread, and most of a flood is duplicates).
- Ties between equal-cost paths go to the lexicographically smallest first hop among *all*
  shortest paths, so that every router computes the same answer whatever the order in which
  LSAs arrived.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import networkx as nx


def _check_header(frame: dict[str, Any]) -> None:
    """Raise ValueError unless `frame` is an LSA with a string origin and int inc/ver."""
    origin, inc, ver = frame.get("origin"), frame.get("inc"), frame.get("ver")
    # `type(v) is int` rather than isinstance: bool is an int subclass and is not a version.
    if (frame.get("t") != "LSA" or not isinstance(origin, str) or type(inc) is not int
            or type(ver) is not int or inc < 0 or ver < 0):
        raise ValueError(f"not a well-formed LSA frame: {frame!r}")


def _check_nbrs(frame: dict[str, Any]) -> None:
    """Raise ValueError unless the LSA's nbrs is a map of router id -> positive int cost."""
    nbrs = frame.get("nbrs")
    if not isinstance(nbrs, dict) or not all(
        isinstance(r, str) and _valid_cost(c) for r, c in nbrs.items()
    ):
        raise ValueError(f"LSA from {frame['origin']!r}: bad nbrs {nbrs!r}")


def _valid_cost(cost: object) -> bool:
    return isinstance(cost, int) and not isinstance(cost, bool) and cost > 0


class Topology:
    """The newest LSA per origin and the next hop from `me` toward every reachable router."""

    def __init__(self, me: str, inc: int) -> None:
        self.me = me
        self.inc = inc
        self.http = ""  # this router's status endpoint, as its LSAs advertise it
        self._ver = 0
        self._lsas: dict[str, dict[str, Any]] = {me: self._own_lsa({})}
        self._vers: dict[str, tuple[int, int]] = {me: (inc, 0)}  # kept for cheap digests
        # Next hop per reachable destination; None means "stale, recompute on next query".
        self._hops: dict[str, str] | None = None
        self.foreign_self_claims = 0

    # -- our own state -------------------------------------------------------------------------

    def _own_lsa(self, nbrs: dict[str, int]) -> dict[str, Any]:
        frame = {"t": "LSA", "origin": self.me, "inc": self.inc, "ver": self._ver,
                 "nbrs": dict(nbrs)}
        if self.http:  # where `exactmesh stat --mesh` asks this router (older routers ignore it)
            frame["http"] = self.http
        return frame

    def set_neighbors(self, nbrs: dict[str, int]) -> dict[str, Any]:
        """Record our up links with their costs; returns our new LSA frame for the caller to flood.

        The version is bumped even if the set did not change, so that the caller can always
        flood the returned frame and have it accepted as new.
        """
        for router, cost in nbrs.items():
            if router == self.me or not _valid_cost(cost):
                raise ValueError(f"bad neighbour {router!r} with cost {cost!r}")
        old = self._lsas[self.me]["nbrs"]
        self._ver += 1
        frame = self._own_lsa(nbrs)
        self._lsas[self.me] = frame
        self._vers[self.me] = (self.inc, self._ver)
        if frame["nbrs"] != old:
            self._hops = None
        return self._copy(frame)

    # -- remote state --------------------------------------------------------------------------

    def on_lsa(self, frame: dict[str, Any]) -> bool:
        """Apply an LSA; True if it was newer than what we held (the caller then re-floods it).

        Raises ValueError on a malformed frame (for `nbrs`: only if the frame is newer).
        """
        _check_header(frame)
        origin = frame["origin"]
        key = (frame["inc"], frame["ver"])
        if origin == self.me:
            if key > (self.inc, self._ver):
                self.foreign_self_claims += 1
            return False
        held = self._lsas.get(origin)
        if held is not None and key <= (held["inc"], held["ver"]):
            return False
        # Checked only now: most LSAs of a flood are duplicates, and those never get stored.
        _check_nbrs(frame)
        stored = self._copy(frame)
        stored["nbrs"] = {r: c for r, c in stored["nbrs"].items() if r != origin}
        self._lsas[origin] = stored
        self._vers[origin] = key
        # Only a change of neighbour set or costs can move a path; a re-announcement of the
        # same links (e.g. a restart that came back with the same links) keeps the cache.
        if held is None or held["nbrs"] != stored["nbrs"]:
            self._hops = None
        return True

    def lsa(self, origin: str) -> dict[str, Any] | None:
        """The newest LSA we hold for `origin` (ours included), as a frame the caller may send."""
        held = self._lsas.get(origin)
        return None if held is None else self._copy(held)

    def incarnation(self, router: str) -> int | None:
        held = self._lsas.get(router)
        return None if held is None else held["inc"]

    def versions(self) -> dict[str, tuple[int, int]]:
        """origin -> (inc, ver) of every LSA we hold, ours included (for DIGEST frames)."""
        return dict(self._vers)

    # -- routing -------------------------------------------------------------------------------

    def next_hop(self, dst: str) -> str | None:
        """The neighbour to forward to toward `dst`; None if unreachable or `dst` is us."""
        return self._next_hops().get(dst)

    def routes(self) -> dict[str, tuple[str, int]]:
        """Every reachable router -> (next hop, path cost), for operators (`exactmesh stat`)."""
        costs = nx.single_source_dijkstra_path_length(self.graph(), self.me)
        return {r: (hop, int(costs[r])) for r, hop in self._next_hops().items()}

    def links(self) -> list[tuple[str, str, int, bool]]:
        """Every link some router reports: (a, b, cost, up), a < b; up when both ends report
        it (one end only: it is coming up, or went down at the other)."""
        out = []
        for a, frame in sorted(self._lsas.items()):
            for b, cost in sorted(frame["nbrs"].items()):
                back = self._lsas.get(b)
                both = back is not None and a in back["nbrs"]
                if a < b or not both:
                    out.append((min(a, b), max(a, b), cost, both))
        return out

    def known(self) -> set[str]:
        """Every router we hold an LSA of, reachable or not (us excluded)."""
        return set(self._lsas) - {self.me}

    def advertised(self, router: str, field: str) -> Any:
        """A field of `router`'s newest LSA (such as "http"), or None."""
        held = self._lsas.get(router)
        return None if held is None else held.get(field)

    def reachable(self) -> set[str]:
        """Routers reachable from us over links both ends report (us excluded)."""
        return set(self._next_hops())

    def split_by_next_hop(
        self, dests: Iterable[str]
    ) -> tuple[dict[str, list[str]], list[str]]:
        """Group `dests` by next hop: (next hop -> dests in input order, unreachable dests).

        `me` is not a valid destination here (local delivery is the caller's job, and silently
        dropping it would make the sender retransmit forever): it raises ValueError.
        """
        hops = self._next_hops()
        by_hop: dict[str, list[str]] = {}
        unreachable: list[str] = []
        for dst in dests:
            if dst == self.me:
                raise ValueError("split_by_next_hop: the local router is not a routed destination")
            hop = hops.get(dst)
            if hop is None:
                unreachable.append(dst)
            else:
                by_hop.setdefault(hop, []).append(dst)
        return by_hop, unreachable

    def graph(self) -> nx.Graph:
        """The graph of links both ends report, weight = the larger of the two costs.

        A one-sided report is a link that is not up yet at the other end or already down there;
        using it could route into a router that will drop the frame. Taking the larger cost
        makes both ends agree on the weight even if they were configured differently.
        """
        g = nx.Graph()
        g.add_node(self.me)
        for origin, frame in self._lsas.items():
            for other, cost in frame["nbrs"].items():
                back = self._lsas.get(other)
                if origin < other and back is not None and origin in back["nbrs"]:
                    g.add_edge(origin, other, weight=max(cost, back["nbrs"][origin]))
        return g

    def _next_hops(self) -> dict[str, str]:
        if self._hops is None:
            self._hops = self._compute_hops()
        return self._hops

    def _compute_hops(self) -> dict[str, str]:
        # `pred` lists every predecessor on some shortest path, so propagating the smallest
        # first hop along it in order of distance gives the smallest first hop over all
        # shortest paths. Positive costs make every predecessor strictly closer, so sorting by
        # distance is a valid topological order of that DAG.
        pred, dist = nx.dijkstra_predecessor_and_distance(self.graph(), self.me)
        hops: dict[str, str] = {}
        for node in sorted(dist, key=lambda n: (dist[n], n)):
            if node != self.me:
                # A predecessor that is us makes `node` itself a first hop.
                hops[node] = min(node if p == self.me else hops[p] for p in pred[node])
        return hops

    @staticmethod
    def _copy(frame: dict[str, Any]) -> dict[str, Any]:
        # Callers may mutate or encode what we return; our stored copy must not change with it.
        return {**frame, "nbrs": dict(frame["nbrs"])}

"""How fast and at what cost one change spreads through a mesh of routers.

Run: `python -m benchmarks.gossip_convergence [--routers 50,200] [--seed N]`.

A sans-IO simulation (mesh/topology.py, gossip.py, sync.py) of N routers on a random connected
graph: a ring (so it is connected) plus links from each router to `--degree` random others,
every link of cost 1 and 1 ms one-way latency, no loss, zero processing time. The glue is what
a router does: flood LSAs and applied SUBS to every other neighbour, answer a gap's PULL, and
exchange DIGESTs when a link comes up. Subscriptions are attached with the mesh's own
`Gossip.local_attach`, and every frame crosses the simulated link as the bytes of the mesh's
codec (mesh/frames.py), so a change of the wire format breaks this benchmark the way it would
break a real link. For each event it reports when the last router knew of it (simulated
ms = hops; "ecc" is the event router's eccentricity, the lower bound) and how many frames it
cost until the mesh was quiet again.

The mesh starts converged: every router is handed every LSA and table directly, which is the
state flooding reaches and costs N^2 calls instead of ~2 N |E| frames. `--flood-start` simulates
the start instead (all links up at once) and reports it as one more row; it is the slow part.

    python -m benchmarks.gossip_convergence                      # 50 and 200 routers
    python -m benchmarks.gossip_convergence --routers 20,500 --seed 3 --flood-start
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from mesh.frames import FrameDecoder, encode
from mesh.gossip import Gossip
from mesh.peers import PeerSettings
from mesh.sync import MeshSync
from mesh.topology import Topology

LATENCY_MS = 1


class Router:
    def __init__(self, me: str, inc: int) -> None:
        self.me = me
        self.topo = Topology(me, inc)
        self.gossip = Gossip(me, inc)
        self.sync = MeshSync(self.topo, self.gossip)


@dataclass
class Phase:
    """What one event cost: frames by type, and when each router first knew of it."""

    name: str
    start_ms: int
    frames: collections.Counter[str] = field(default_factory=collections.Counter)
    known_at: dict[str, int] = field(default_factory=dict)
    last_news_ms: int | None = None  # when a router last applied a frame that was new to it
    quiet_ms: int = 0

    def all_know(self, n: int) -> str:
        """When the last router knew, as a table cell."""
        if not self.known_at:  # no predicate: the last time anything was news to anyone
            if self.last_news_ms is None:
                return "no news"
            return f"{self.last_news_ms - self.start_ms} ms"
        if len(self.known_at) < n:
            return f"{len(self.known_at)}/{n}"
        return f"{max(self.known_at.values()) - self.start_ms} ms"


Knows = Callable[["Router"], bool] | None


class Sim:
    """Routers plus a FIFO of frames in flight.

    Every frame takes exactly LATENCY_MS, so frames arrive in the order they were sent and a
    deque is a valid event queue (a heap would cost a log factor for nothing).
    """

    def __init__(self, graph: nx.Graph) -> None:
        self.graph = graph
        self.routers = {n: Router(n, 1) for n in graph}
        self.up: dict[str, set[str]] = {n: set() for n in graph}
        self.queue: collections.deque[tuple[int, str, str, bytes]] = collections.deque()
        self.decoder = FrameDecoder(PeerSettings.max_frame)  # every wire holds whole frames
        self.now = 0
        self.phase = Phase("", 0)

    def send(self, src: str, dst: str, frame: dict[str, Any], wire: bytes | None = None) -> None:
        """Queue `frame` as the bytes a peer link would carry (mesh/frames.py), so that a frame
        the mesh's own code builds but its codec or receiver rejects fails here as it would on
        a real link, instead of being handed over as a Python object."""
        self.phase.frames[frame["t"]] += 1
        self.queue.append((self.now + LATENCY_MS, src, dst, wire or encode(frame)))

    def flood(self, src: str, frame: dict[str, Any], skip: str | None = None) -> None:
        wire = encode(frame)  # once per flood, as the bytes are the same on every link
        for n in sorted(self.up[src]):  # sorted: the same run for the same seed
            if n != skip:
                self.send(src, n, frame, wire)

    def costs(self, r: str) -> dict[str, int]:
        return dict.fromkeys(self.up[r], 1)

    def install_converged(self) -> None:
        """All links up and every LSA and table everywhere, without simulating the floods."""
        for a, b in self.graph.edges:
            self.up[a].add(b)
            self.up[b].add(a)
        for r in self.routers.values():
            r.topo.set_neighbors(self.costs(r.me))
        for o, owner in self.routers.items():
            lsa, subs = owner.topo.lsa(o), owner.gossip.full(o)
            assert lsa is not None and subs is not None
            for r in self.routers.values():
                if r is not owner:
                    r.topo.on_lsa(lsa)
                    r.gossip.on_subs(subs)

    def all_links_up(self) -> None:
        """Every link comes up at once: one LSA per router, DIGESTs both ways on every link."""
        for a, b in self.graph.edges:
            self.up[a].add(b)
            self.up[b].add(a)
        for r in sorted(self.routers):
            self.flood(r, self.routers[r].topo.set_neighbors(self.costs(r)))
        for r in sorted(self.routers):
            for n in sorted(self.up[r]):
                self.send(r, n, self.routers[r].sync.digest())

    def links_up(self, r: str, nbrs: list[str]) -> None:
        """`r`'s links to `nbrs` come up at once: one LSA per end, DIGESTs both ways."""
        for n in nbrs:
            self.up[r].add(n)
            self.up[n].add(r)
        for x in [r, *nbrs]:
            self.flood(x, self.routers[x].topo.set_neighbors(self.costs(x)))
        for n in nbrs:
            self.send(r, n, self.routers[r].sync.digest())
            self.send(n, r, self.routers[n].sync.digest())

    def links_down(self, r: str) -> list[str]:
        """All of `r`'s links drop (it stopped); its neighbours flood their new LSAs."""
        nbrs = sorted(self.up[r])
        # Frames already on the dropped connections die with them.
        self.queue = collections.deque(q for q in self.queue if r not in (q[1], q[2]))
        for n in nbrs:
            self.up[n].discard(r)
            self.flood(n, self.routers[n].topo.set_neighbors(self.costs(n)))
        self.up[r].clear()
        return nbrs

    def deliver(self, src: str, dst: str, frame: dict[str, Any]) -> None:
        r = self.routers[dst]
        kind = frame["t"]
        if kind == "LSA":
            if r.topo.on_lsa(frame):
                self.phase.last_news_ms = self.now
                self.flood(dst, frame, skip=src)
        elif kind == "SUBS":
            _events, reflood, pull = r.gossip.on_subs(frame)
            if reflood:
                self.phase.last_news_ms = self.now
                self.flood(dst, frame, skip=src)
            if pull is not None:
                self.send(dst, src, pull)
        elif kind == "DIGEST":
            for f in r.sync.on_digest(frame):
                self.send(dst, src, f)
        else:
            for f in r.sync.on_pull(frame):
                self.send(dst, src, f)

    def run(self, name: str, start: Callable[[], None], knows: Knows = None) -> Phase:
        """Start an event now, run until no frame is in flight, and account for it.

        `knows(router)` says whether a router knows of the event; it is asked after every
        frame a router handles until it says yes, so it must be cheap.
        """
        self.phase = Phase(name, self.now)
        start()
        if knows is not None:
            for r in self.routers.values():
                if knows(r):
                    self.phase.known_at[r.me] = self.now
        while self.queue:
            self.now, src, dst, wire = self.queue.popleft()
            (frame,) = self.decoder.feed(wire)
            self.deliver(src, dst, frame)
            if knows is not None and dst not in self.phase.known_at and knows(self.routers[dst]):
                self.phase.known_at[dst] = self.now
        self.phase.quiet_ms = self.now - self.phase.start_ms
        return self.phase


def random_mesh(n: int, degree: int, rng: random.Random) -> nx.Graph:
    """A ring (connected whatever the draw) plus `degree` random links from every router."""
    names = [f"r{i:03d}" for i in range(n)]
    g = nx.cycle_graph(names)
    for a in names:
        for b in rng.sample([x for x in names if x != a], degree):
            g.add_edge(a, b)
    return g


def check_converged(sim: Sim) -> None:
    """Every router holds every origin's newest LSA and table, and routes like networkx."""
    ref = {o: (r.topo.lsa(o), r.gossip.full(o)) for o, r in sim.routers.items()}
    for r in sim.routers.values():
        for o, (lsa, subs) in ref.items():
            if r.topo.lsa(o) != lsa or r.gossip.full(o) != subs:
                raise AssertionError(f"{r.me} differs from {o} about {o}")
    dist = dict(nx.all_pairs_shortest_path_length(sim.graph))
    for r in sim.routers.values():
        assert r.topo.reachable() == set(dist[r.me]) - {r.me}, r.me
        for d in dist[r.me]:
            if d != r.me:
                best = min(nb for nb in sim.graph[r.me] if dist[nb][d] == dist[r.me][d] - 1)
                assert r.topo.next_hop(d) == best, (r.me, d)


def bench(n: int, degree: int, seed: int, flood_start: bool) -> tuple[nx.Graph, list[Phase], float]:
    rng = random.Random(seed)
    graph = random_mesh(n, degree, rng)
    names = sorted(graph)
    wall = time.perf_counter()
    sim = Sim(graph)
    phases: list[Phase] = []
    if flood_start:
        phases.append(sim.run("mesh start: all links up at once", sim.all_links_up))
    else:
        sim.install_converged()

    x = rng.choice(names)

    def attach() -> None:
        sim.flood(x, sim.routers[x].gossip.local_attach("c/l", "a/#", "c", "l", gen=1))

    ecc = nx.eccentricity(graph, x)
    phases.append(sim.run(f"1 attach at {x} (ecc {ecc})", attach,
                          lambda r: "c/l" in r.gossip.table(x)))

    y = rng.choice([r for r in names if r != x])
    for i in range(3):  # y had subscribers: that they are gone is part of the news
        y_router = sim.routers[y]
        sim.run("", lambda i=i, yr=y_router: sim.flood(
            y, yr.gossip.local_attach(f"c{i}/l", "b/#", f"c{i}", "l", gen=1, timeout=30.0)))
    old_inc = sim.routers[y].topo.inc
    lost: list[str] = []
    ecc = nx.eccentricity(graph, y)

    def knows_down(r: Router) -> bool:
        # Every neighbour's LSA without y: cheaper per frame than asking for a route.
        return r.me == y or all(y not in (r.topo.lsa(nb) or {"nbrs": {}})["nbrs"] for nb in lost)

    phases.append(sim.run(f"{y} stops, {len(graph[y])} links drop (ecc {ecc})",
                          lambda: lost.extend(sim.links_down(y)), knows_down))

    def restart() -> None:
        sim.routers[y] = Router(y, old_inc + 1)
        sim.links_up(y, lost)

    def knows_restart(r: Router) -> bool:
        subs = r.gossip.full(y)
        return (r.topo.incarnation(y) == old_inc + 1
                and subs is not None and subs["inc"] == old_inc + 1 and not subs["add"])

    phases.append(sim.run(f"{y} back, new inc, links up", restart, knows_restart))

    def digests() -> None:
        for r in names:
            for nb in sorted(sim.up[r]):
                sim.send(r, nb, sim.routers[r].sync.digest())

    phases.append(sim.run("1 anti-entropy round, nothing to repair", digests))
    check_converged(sim)
    return graph, phases, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--routers", default="50,200", help="comma-separated mesh sizes")
    ap.add_argument("--degree", type=int, default=3, help="random links per router, plus a ring")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flood-start", action="store_true",
                    help="simulate the mesh start instead of installing the converged state")
    args = ap.parse_args(argv)
    print(f"{'routers':>7} {'links':>5} {'diam':>4}  {'event':<40} {'all know':>8} "
          f"{'quiet':>6} {'frames':>7}  by type")
    for n in (int(s) for s in args.routers.split(",")):
        graph, phases, wall = bench(n, args.degree, args.seed, args.flood_start)
        diam = nx.diameter(graph)
        for p in phases:
            by_type = " ".join(f"{t}={c}" for t, c in sorted(p.frames.items()))
            print(f"{n:>7} {graph.number_of_edges():>5} {diam:>4}  {p.name:<40} "
                  f"{p.all_know(n):>8} {p.quiet_ms:>3} ms {sum(p.frames.values()):>7}  {by_type}")
        print(f"{'':>7} ({n} routers: {wall:.2f} s real time, end state converged, every route "
              "checked against networkx)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

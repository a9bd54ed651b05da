"""A whole exactmesh cluster in one process, on a simulated clock, reproducible from one seed.

Each router is the real sans-IO pair, `Engine` + `MeshNode`, driven the way the runtime drives
it (`router/node.py` `Node.flush`, `mesh/runtime.py`): engine actions in order, mesh actions to
`MeshNode.apply`, the others to the simulated client that owns the link; then the frames the
mesh node produced go to the network. Each router's timer fires at the earlier of
`engine.next_deadline()` and `meshnode.next_deadline()` and calls both `tick`s.

The network carries frames between linked routers as bytes (`mesh.frames.encode`, and one
`FrameDecoder` per direction and connection), after a random delay; with faults on it drops,
duplicates and reorders them, and partitions take links down: the connection dies at once
(frames in flight on it are lost), each end notices within `DOWN_DETECT` seconds
(`link_down`), and healing brings up a new connection (`link_up` at both ends with the other's
incarnation). A crash (`restarts`) kills a router with all its state and clients; it starts
again after a moment with a new incarnation (higher, as `mesh/runtime.py` takes it).

Clients talk to their router's engine directly and react after a delay (events on the same
clock): publishers publish within their credit, settle after the outcome and sometimes
before it; subscribers grant credit, accept, reject, release or modify, some slowly; clients
attach and detach at random times. After `duration` the faults stop, the network heals, the
clients become well-behaved, and time runs on until everything is finished (or `drain` runs
out); then `Checker.final` checks that nothing is left over.

Everything random comes from `random.Random(seed)`, and events at the same instant run in the
order they were scheduled, so a seed replays exactly (with the same PYTHONHASHSEED: see
`replay_command`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import random
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from mesh.frames import FrameDecoder, FrameError, encode
from mesh.meshnode import MeshNode
from router.actions import (
    MESH_ACTIONS,
    CloseLink,
    Credit,
    Decide,
    Forward,
    Send,
    SettleCopy,
    Verdict,
)
from router.engine import Disposition, Engine, EngineConfig
from router.records import ALL, SOME, LinkIdentity, outgoing_tag

from .checker import Checker, Msg, Violation

MESH_TYPES = frozenset(MESH_ACTIONS)
TOPOLOGIES = ("line", "ring", "star", "random", "full")
TOPICS = ("a", "a/b", "b", "a/c")
FILTERS = ("a", "a/#", "+", "#", "a/+", "b", "+/c", "a/b")
NAMES = "ABCDEFGHIJKLMNOP"
MAX_FRAME = 1 << 20
DOWN_DETECT = 0.3  # the longest a link end takes to notice its connection is gone
SPIN_STEP = 1e-6  # how far the clock moves when a timer is due again at the instant it ran
MAX_EVENTS = 5_000_000


@dataclass(frozen=True)
class Params:
    """Everything a run depends on. `spec()` / `parse()` round-trip it through one string."""

    seed: int
    routers: int = 3
    topology: str = "line"  # one of TOPOLOGIES
    drop: float = 0.0  # per frame, while faults are on
    dup: float = 0.0
    reorder: float = 0.0  # share of frames that may overtake earlier ones on their link
    partitions: int = 0  # link-down episodes during the workload
    partition_min: float = 0.5
    partition_max: float = 2.0
    isolate: float = 0.3  # share of episodes that cut every link of one router
    restarts: int = 0  # router crashes during the workload (back up after up to 1.5 s)
    # The restarted router's incarnation: "higher" than before (what mesh/runtime.py does: it
    # is the clock in microseconds), or "random" (what it once did, which broke restarts).
    restart_inc: str = "higher"
    unreachable_timeout: float = 3.0
    gossip_interval: float = 0.5
    duration: float = 6.0  # seconds of workload and faults
    drain: float = 60.0  # then at most this long for everything to finish
    publishers: int = 3  # attached at the start (churn adds and removes more)
    subscribers: int = 4
    messages: int = 15  # per publisher, at most
    churn: float = 0.5  # attach/detach events per second
    flaky: float = 0.3  # share of subscribers that also reject, release and modify
    slow: float = 0.2  # share of subscribers that take up to 1.5 s to answer
    stall: float = 0.1  # share of subscribers that rarely grant credit
    ttl: float = 0.1  # share of messages with a ttl
    early_settle: float = 0.05  # share of deliveries the publisher settles before an outcome
    presettled: float = 0.03  # share of messages sent pre-settled
    presettled_subs: float = 0.05  # share of subscribers attached at-most-once
    some_mode: float = 0.25  # share of publishers in delivery mode `some`
    override: float = 0.1  # share of messages with a per-message delivery mode
    window: int = 8  # publisher window
    transfer_window: int = 4096  # MeshNode's reliable-transfer window (items in flight)
    max_attempts: int = 3

    def spec(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))

    @classmethod
    def parse(cls, spec: str) -> Params:
        spec = spec.strip()
        if spec.isdigit():
            return cls.from_seed(int(spec))
        kinds = {f.name: f.default for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in spec.split(","):
            name, _, value = part.strip().partition("=")
            if name not in kinds:
                raise ValueError(f"unknown simulation parameter {name!r}")
            default = kinds[name]
            kind = int if name == "seed" else type(default)
            values[name] = kind(value)
        return cls(**values)

    @classmethod
    def from_seed(cls, seed: int) -> Params:
        """Parameters drawn from the seed alone (the long run and quick replays use these)."""
        rng = random.Random(f"exactmesh-params-{seed}")
        timeout = rng.choice([2.0, 3.0, 5.0])
        return cls(
            seed=seed,
            routers=rng.randint(2, 6),
            topology=rng.choice(TOPOLOGIES),
            drop=rng.choice([0.0, 0.0, 0.01, 0.05, 0.2]),
            dup=rng.choice([0.0, 0.0, 0.02, 0.1]),
            reorder=rng.choice([0.0, 0.1, 0.5]),
            partitions=rng.choice([0, 0, 1, 2, 3]),
            partition_max=rng.choice([1.0, timeout * 0.6, timeout * 1.5, timeout * 2.5]),
            unreachable_timeout=timeout,
            publishers=rng.randint(1, 4),
            subscribers=rng.randint(1, 5),
            churn=rng.choice([0.0, 0.5, 2.0]),
            flaky=rng.choice([0.0, 0.3, 1.0]),
            ttl=rng.choice([0.0, 0.1, 0.5]),
            restarts=rng.choice([0, 0, 0, 1, 2]),
            transfer_window=rng.choice([4096, 4096, 2, 8]),
        )


def replay_command(params: Params) -> str:
    return f"PYTHONHASHSEED=0 .venv/bin/python -m tests.sim.world '{params.spec()}'"


def code_version() -> str:
    """A short digest of the router code under test (router/ and mesh/), for failure reports:
    a seed replays exactly only against the same code."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for path in sorted([*root.glob("router/*.py"), *root.glob("mesh/*.py")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


class SimFailure(AssertionError):
    """A run broke a property (or the router code raised). Says how to replay it."""

    def __init__(self, params: Params, what: str, trace: list[str]) -> None:
        tail = "\n    ".join(trace[-40:])
        super().__init__(
            f"exactmesh simulation failed: {what}\n"
            f"  params: {params.spec()}\n"
            f"  replay: {replay_command(params)}\n"
            f"  router code: {code_version()} (router/*.py + mesh/*.py); this process's "
            f"PYTHONHASHSEED: {os.environ.get('PYTHONHASHSEED', 'unset (random)')}\n"
            f"  last events:\n    {tail}"
        )
        self.params = params
        self.what = what


# ---------------------------------------------------------------------------- the parts


class SimRouter:
    def __init__(self, rid: str, inc: int, p: Params) -> None:
        self.id = rid
        self.inc = inc
        self.engine = Engine(EngineConfig(router_id=rid, publisher_window=p.window,
                                          max_delivery_attempts=p.max_attempts))
        self.mesh = MeshNode(rid, inc, self.engine, unreachable_timeout=p.unreachable_timeout,
                             gossip_interval=p.gossip_interval,
                             transfer_window=p.transfer_window)
        self.tick_at: float | None = None
        self.tick_token = 0
        self.last_tick = -1.0
        self.dead = False  # crashed: this instance never runs again


class SimLink:
    """A mesh connection between two routers; a new one (epoch) every time it comes up."""

    def __init__(self, a: str, b: str, cost: int) -> None:
        self.a, self.b = a, b
        self.cost = cost
        self.up = False
        self.epoch = 0
        self.cuts = 0  # partition episodes holding it down
        self.ends_up = {a: False, b: False}  # what each end's mesh node believes
        self.last = {a: 0.0, b: 0.0}  # latest delivery time scheduled, by sender
        self.decoders = {a: FrameDecoder(MAX_FRAME), b: FrameDecoder(MAX_FRAME)}  # by receiver

    def other(self, end: str) -> str:
        return self.b if end == self.a else self.a


class PubClient:
    kind = "pub"

    def __init__(self, router: SimRouter, link: int, n: int, topic: str, mode: str,
                 rate: float) -> None:
        self.router = router
        self.link = link
        self.ident = LinkIdentity(f"app-{router.id}", f"pub{n}")
        self.label = self.ident.label(router.id)
        self.topic = topic
        self.mode = mode
        self.rate = rate  # mean seconds between publish attempts
        self.credit = 0
        self.published = 0
        self.undecided: dict[bytes, Msg] = {}  # by publisher tag
        self.decided: dict[bytes, Msg] = {}  # outcome known, not settled yet
        self.detached = False

    def payload(self, seq: int) -> bytes:
        return f"{self.label}#{seq}".encode()


class SubClient:
    kind = "sub"

    def __init__(self, router: SimRouter, link: int, n: int, topic_filter: str,
                 presettled: bool, flaky: bool, slow: bool, stalled: bool, target: int) -> None:
        self.router = router
        self.link = link
        self.ident = LinkIdentity(f"app-{router.id}", f"sub{n}")
        self.key = self.ident.key
        self.label = self.ident.label(router.id)
        self.filter = topic_filter
        self.presettled = presettled
        self.flaky = flaky
        self.slow = slow
        self.stalled = stalled
        self.target = target  # credit it keeps topping up to
        self.credit = 0
        self.copies: dict[str, int] = {}  # msg id -> copies received
        self.releases: dict[str, int] = {}  # msg id -> redeliveries asked for
        self.processed: dict[str, int] = {}  # msg id -> times accepted (or taken pre-settled)
        self.last_seq: dict[str, int] = {}  # publisher label -> seq of last first delivery
        self.unanswered: dict[bytes, int] = {}  # tag -> which copy is awaiting an answer
        self.router_unsettled: dict[bytes, None] = {}  # copies the router has not settled
        self.detached = False


# ---------------------------------------------------------------------------- the world


class World:
    def __init__(self, params: Params) -> None:
        p = self.p = params
        self.rng = random.Random(p.seed)
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._tie = itertools.count()
        self.events = 0
        self.faults = True
        self.draining = False
        self.routers: dict[str, SimRouter] = {}
        self.links: dict[tuple[str, str], SimLink] = {}
        self.clients: dict[int, PubClient | SubClient] = {}
        self._link_ids = itertools.count(1)
        self._client_names = itertools.count(1)
        self.checker = Checker(self)
        self.trace: deque[str] = deque(maxlen=400)
        self.counts = {"frames": 0, "lost": 0, "dropped": 0, "duplicated": 0, "spins": 0}
        self.finished_at: float | None = None
        self._build()

    # ------------------------------------------------------------------ events

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (max(t, self.now), next(self._tie), fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, fn, *args)

    def log(self, what: str) -> None:
        self.trace.append(f"{self.now:9.4f} {what}")

    def run_until(self, t: float) -> None:
        queue = self._queue
        while queue and queue[0][0] <= t:
            when, _, fn, args = heapq.heappop(queue)
            self.now = when
            self.events += 1
            if self.events > MAX_EVENTS:
                raise Violation(f"more than {MAX_EVENTS} events: the simulation does not settle")
            fn(*args)
        self.now = max(self.now, t)

    # ------------------------------------------------------------------ set-up

    def _build(self) -> None:
        p, rng = self.p, self.rng
        if not 2 <= p.routers <= len(NAMES):
            raise ValueError(f"routers must be 2..{len(NAMES)}")
        ids = list(NAMES[: p.routers])
        for rid in ids:
            self.routers[rid] = SimRouter(rid, rng.randrange(1, 2**62), p)
        for a, b in self._edges(ids):
            cost = 1 if rng.random() < 0.7 else rng.randint(2, 3)
            self.links[(a, b)] = SimLink(a, b, cost)
        self.log(f"routers {ids}, links {[f'{a}-{b}' for a, b in self.links]}")
        for rid in ids:
            self._schedule_tick(self.routers[rid])
        for link in self.links.values():
            self.at(0.0, self._link_up, link)
        for _ in range(p.subscribers):
            self.at(rng.uniform(0.0, 1.0), self.attach_subscriber)
        for _ in range(p.publishers):
            self.at(rng.uniform(0.0, 1.0), self.attach_publisher)
        if p.churn > 0:
            self.after(rng.expovariate(p.churn), self._churn)
        for _ in range(p.restarts):
            self.at(rng.uniform(0.5, max(0.6, p.duration - 0.5)), self._crash)
        for _ in range(p.partitions):
            start = rng.uniform(0.5, max(0.6, p.duration - 0.5))
            length = rng.uniform(p.partition_min, max(p.partition_min, p.partition_max))
            self.at(start, self._partition, length)
        self.at(p.duration, self._begin_drain)

    def _edges(self, ids: list[str]) -> list[tuple[str, str]]:
        n, rng = len(ids), self.rng
        topology = self.p.topology
        pairs: list[tuple[int, int]]
        if topology == "line":
            pairs = [(i, i + 1) for i in range(n - 1)]
        elif topology == "ring":
            pairs = [(i, i + 1) for i in range(n - 1)] + ([(0, n - 1)] if n > 2 else [])
        elif topology == "star":
            pairs = [(0, i) for i in range(1, n)]
        elif topology == "full":
            pairs = list(itertools.combinations(range(n), 2))
        elif topology == "random":
            pairs = [(rng.randrange(i), i) for i in range(1, n)]  # a random spanning tree
            pairs += [(i, j) for i, j in itertools.combinations(range(n), 2)
                      if (i, j) not in pairs and rng.random() < 0.3]
        else:
            raise ValueError(f"topology must be one of {TOPOLOGIES}")
        return [tuple(sorted((ids[i], ids[j]))) for i, j in pairs]  # type: ignore[misc]

    # ------------------------------------------------------------------ running

    def run(self) -> World:
        """Run the workload, then drain; raise SimFailure if a property broke."""
        handler = _TraceHandler(self)
        logger = logging.getLogger("exactmesh")
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            self.run_until(self.p.duration)
            end = self.p.duration + self.p.drain
            while self.now < end:
                self.run_until(min(self.now + 0.25, end))
                if self.quiet():
                    self.finished_at = self.now
                    break
            self.checker.final(self)
        except Violation as v:
            raise SimFailure(self.p, str(v), list(self.trace)) from None
        except Exception as exc:  # the router code (or the simulator) raised
            tb = traceback.format_exc(limit=12)
            raise SimFailure(self.p, f"t={self.now:.6f}: {type(exc).__name__}: {exc}\n{tb}",
                             list(self.trace)) from exc
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
        return self

    def quiet(self) -> bool:
        """Nothing left to do: the network is whole and every delivery is finished."""
        if any(not link.up for link in self.links.values()):
            return False
        for c in self.clients.values():
            if c.detached:
                continue
            if c.kind == "sub":
                if c.unanswered or c.router_unsettled:
                    return False
            elif c.decided or any(m.tracked for m in c.undecided.values()):
                return False
        for r in self.routers.values():
            if r.engine.records or r.mesh.transfer.in_flight():
                return False
        return True

    def _begin_drain(self) -> None:
        self.log("faults stop; draining")
        self.faults = False
        self.draining = True
        for link in self.links.values():
            if link.cuts:
                link.cuts = 1
                self._heal(link)

    # ------------------------------------------------------------------ routers

    def settle(self, r: SimRouter) -> None:
        """What `Node.flush` and `MeshRuntime._settle` do after every event at a router."""
        engine, mesh, now = r.engine, r.mesh, self.now
        while True:
            actions = engine.take_actions()
            if not actions:
                break
            for action in actions:
                if type(action) in MESH_TYPES:
                    if isinstance(action, Forward):
                        self.checker.on_forward(r, action)
                    elif isinstance(action, Verdict):
                        self.checker.on_verdict(r, action)
                    mesh.apply(action, now)
                    continue
                client = self.clients.get(action.link)
                if client is None or client.detached or client.router is not r:
                    self.checker.stray(r, action)
                else:
                    self._to_client(client, action)
            self._output(r)
        self._output(r)
        self.checker.check_router(r)
        self._schedule_tick(r)

    def _output(self, r: SimRouter) -> None:
        for peer, frame in r.mesh.take_frames():
            self._net_send(r.id, peer, frame)

    def _schedule_tick(self, r: SimRouter) -> None:
        deadlines = [d for d in (r.engine.next_deadline(), r.mesh.next_deadline())
                     if d is not None]
        if not deadlines:
            return
        t = min(deadlines)
        if t <= self.now and r.last_tick == self.now:
            # Due again at the very instant it ran: a real clock would have moved on a little
            # by the next wake-up; so does ours (counted: it is a wasted wake-up).
            self.counts["spins"] += 1
            t = self.now + SPIN_STEP
        t = max(t, self.now)
        if r.tick_at is not None and r.tick_at <= t:
            return
        r.tick_at = t
        r.tick_token += 1
        self.at(t, self._tick, r, r.tick_token)

    def _tick(self, r: SimRouter, token: int) -> None:
        if token != r.tick_token or r.dead:
            return
        r.tick_at = None
        r.last_tick = self.now
        r.engine.tick(self.now)
        r.mesh.tick(self.now)
        self.settle(r)

    # ------------------------------------------------------------------ network

    def _net_send(self, src: str, dst: str, frame: dict) -> None:
        link = self.links.get((src, dst) if src < dst else (dst, src))
        if link is None:
            raise Violation(f"{src} sent a {frame['t']} frame to {dst}, which it has no link to")
        try:
            data = encode(frame)
        except FrameError as err:
            raise Violation(f"{src} produced a frame that cannot be encoded: {err}") from None
        self.counts["frames"] += 1
        if not link.up or not link.ends_up[src]:
            self.counts["lost"] += 1  # sent on a dead connection (or before the end noticed)
            return
        rng = self.rng
        copies = 1
        if self.faults:
            if rng.random() < self.p.drop:
                self.counts["dropped"] += 1
                return
            if rng.random() < self.p.dup:
                self.counts["duplicated"] += 1
                copies = 2
        for _ in range(copies):
            t = self.now + rng.uniform(0.0005, 0.005)
            if self.faults and rng.random() < self.p.reorder:
                t += rng.uniform(0.0, 0.05)  # may overtake, and be overtaken
            else:
                t = max(t, link.last[src])
                link.last[src] = t
            self.at(t, self._deliver, link, link.epoch, src, dst, data)

    def _deliver(self, link: SimLink, epoch: int, src: str, dst: str, data: bytes) -> None:
        if link.epoch != epoch or not link.up:
            self.counts["lost"] += 1
            return
        r = self.routers[dst]
        try:
            frames = link.decoders[dst].feed(data)
        except FrameError as err:
            raise Violation(f"{dst} cannot decode a frame from {src}: {err}") from None
        for frame in frames:
            r.mesh.on_frame(src, frame, self.now)
        self.settle(r)

    def _link_up(self, link: SimLink) -> None:
        if self.routers[link.a].dead or self.routers[link.b].dead:
            return  # comes up when the router is back
        for end in (link.a, link.b):
            if link.ends_up[end]:  # the end has not noticed the old connection died yet
                self._end_down(link, end, link.epoch)
        link.up = True
        link.epoch += 1
        link.ends_up = {link.a: True, link.b: True}
        link.last = {link.a: self.now, link.b: self.now}
        link.decoders = {link.a: FrameDecoder(MAX_FRAME), link.b: FrameDecoder(MAX_FRAME)}
        self.log(f"link {link.a}-{link.b} up")
        ends = [link.a, link.b]
        self.rng.shuffle(ends)
        for end in ends:
            other = link.other(end)
            r = self.routers[end]
            r.mesh.link_up(other, self.routers[other].inc, link.cost, self.now)
            self.settle(r)

    def _cut(self, link: SimLink) -> None:
        link.cuts += 1
        if link.cuts > 1 or not link.up:
            return
        link.up = False
        link.epoch += 1
        self.log(f"link {link.a}-{link.b} cut")
        for end in (link.a, link.b):
            self.after(self.rng.uniform(0.0, DOWN_DETECT), self._end_down, link, end, link.epoch)

    def _end_down(self, link: SimLink, end: str, epoch: int) -> None:
        if epoch != link.epoch or not link.ends_up[end]:
            return
        link.ends_up[end] = False
        r = self.routers[end]
        if r.dead:
            return
        r.mesh.link_down(link.other(end), self.now)
        self.settle(r)

    def _heal(self, link: SimLink) -> None:
        if link.cuts == 0:
            return
        link.cuts -= 1
        if link.cuts == 0:
            self._link_up(link)

    def _crash(self) -> None:
        if not self.faults:
            return
        rng = self.rng
        self.crash(rng.choice(sorted(self.routers)), rng.uniform(0.2, 1.5))

    def crash(self, victim: str, downtime: float, inc: int | None = None) -> None:
        """The router process dies now: its clients and all its state go, its connections die
        (the peers notice within DOWN_DETECT), and `downtime` later it starts again with a new
        incarnation (`inc`, else per `restart_inc`) and no clients."""
        r = self.routers[victim]
        if r.dead:
            return
        r.dead = True
        self.log(f"router {victim} crashes")
        for c in self.clients.values():
            if c.router is r and not c.detached:
                c.detached = True  # nothing is promised to the clients of a dead router
                if c.kind == "pub":
                    for msg in c.undecided.values():
                        msg.publisher_gone = True
        for key, link in self.links.items():
            if victim in key:
                link.ends_up[victim] = False
                if link.up:
                    link.up = False
                    link.epoch += 1
                    other = link.other(victim)
                    self.after(self.rng.uniform(0.0, DOWN_DETECT), self._end_down, link, other,
                               link.epoch)
        self.after(downtime, self._restart, victim, inc)

    def _restart(self, victim: str, inc: int | None = None) -> None:
        old = self.routers[victim]
        if inc is not None:
            pass
        elif self.p.restart_inc == "higher":
            inc = old.inc + 1 + self.rng.randrange(1000)
        else:
            inc = self.rng.randrange(1, 2**62)  # what mesh/runtime.py does
        r = self.routers[victim] = SimRouter(victim, inc, self.p)
        self.log(f"router {victim} restarts, incarnation {old.inc} -> {inc}")
        self._schedule_tick(r)
        for key, link in sorted(self.links.items()):
            if victim in key and link.cuts == 0 and not link.up:
                self._link_up(link)

    def cut_link(self, a: str, b: str, at: float, length: float) -> None:
        """Script a partition: the link a-b goes down at `at` and comes back `length` later."""
        link = self.links[(a, b) if a < b else (b, a)]
        self.at(at, self._log_and, f"scripted: link {link.a}-{link.b} cut for {length:g} s",
                self._cut, link)
        self.at(at + length, self._heal, link)

    def isolate(self, router: str, at: float, length: float) -> None:
        """Script a partition: every link of `router` goes down at `at` for `length`."""
        for key in sorted(self.links):
            if router in key:
                self.cut_link(key[0], key[1], at, length)

    def _log_and(self, what: str, fn: Callable[..., None], *args: Any) -> None:
        self.log(what)
        fn(*args)

    def _partition(self, length: float) -> None:
        if not self.faults:
            return
        rng = self.rng
        if rng.random() < self.p.isolate:
            victim = rng.choice(sorted(self.routers))
            cut = [link for key, link in self.links.items() if victim in key]
            self.log(f"partition: {victim} isolated for {length:.3f} s")
        else:
            key = rng.choice(sorted(self.links))
            cut = [self.links[key]]
            self.log(f"partition: link {key[0]}-{key[1]} cut for {length:.3f} s")
        for link in cut:
            self._cut(link)
            self.after(length, self._heal, link)

    # ------------------------------------------------------------------ clients

    def _alive(self) -> list[str]:
        return [rid for rid in sorted(self.routers) if not self.routers[rid].dead] or ["A"]

    def publishers(self) -> list[PubClient]:
        return [c for c in self.clients.values() if c.kind == "pub"]  # type: ignore[misc]

    def subscribers(self) -> list[SubClient]:
        return [c for c in self.clients.values() if c.kind == "sub"]  # type: ignore[misc]

    def _churn(self) -> None:
        if self.draining:
            return
        rng = self.rng
        live_subs = [c for c in self.subscribers() if not c.detached]
        live_pubs = [c for c in self.publishers() if not c.detached]
        choice = rng.choices(["sub+", "pub+", "sub-", "pub-"], [3, 2, 2, 1])[0]
        if choice == "sub+":
            self.attach_subscriber()
        elif choice == "pub+":
            self.attach_publisher()
        elif choice == "sub-" and live_subs:
            self.detach_subscriber(rng.choice(live_subs))
        elif choice == "pub-" and live_pubs:
            self.detach_publisher(rng.choice(live_pubs))
        self.after(rng.expovariate(self.p.churn), self._churn)

    def attach_publisher(self, router: str | None = None, topic: str | None = None,
                         mode: str | None = None, rate: float | None = None) -> PubClient | None:
        rng = self.rng
        r = self.routers[router] if router else self.routers[rng.choice(self._alive())]
        if r.dead:
            return None  # nobody can attach to a router that is down
        topic = topic or rng.choice(TOPICS)
        mode = mode or (SOME if rng.random() < self.p.some_mode else ALL)
        link = next(self._link_ids)
        pub = PubClient(r, link, next(self._client_names), topic, mode,
                        rate=rate or rng.choice([0.02, 0.1, 0.3]))
        self.clients[link] = pub
        self.log(f"attach publisher {pub.label} topic {topic} mode {mode}")
        r.engine.attach_publisher(link, pub.ident, topic, mode)
        self.settle(r)
        self.after(rng.expovariate(1 / pub.rate), self._publish_loop, pub)
        return pub

    def attach_subscriber(self, router: str | None = None, topic_filter: str | None = None,
                          good: bool = False) -> SubClient | None:
        rng, p = self.rng, self.p
        r = self.routers[router] if router else self.routers[rng.choice(self._alive())]
        if r.dead:
            return None
        topic_filter = topic_filter or rng.choice(FILTERS)
        link = next(self._link_ids)
        sub = SubClient(
            r, link, next(self._client_names), topic_filter,
            presettled=not good and rng.random() < p.presettled_subs,
            flaky=not good and rng.random() < p.flaky,
            slow=not good and rng.random() < p.slow,
            stalled=not good and rng.random() < p.stall,
            target=rng.randint(1, 5),
        )
        self.clients[link] = sub
        self.checker.register_sub(sub)
        self.log(f"attach subscriber {sub.label} filter {topic_filter}"
                 f"{' presettled' if sub.presettled else ''}{' flaky' if sub.flaky else ''}"
                 f"{' slow' if sub.slow else ''}{' stalled' if sub.stalled else ''}")
        r.engine.attach_subscriber(link, sub.ident, topic_filter, sub.presettled)
        self.settle(r)
        self.after(rng.uniform(0.0, 0.05), self._credit_loop, sub)
        return sub

    def detach_publisher(self, pub: PubClient) -> None:
        if pub.detached:
            return
        self.log(f"detach publisher {pub.label}")
        pub.detached = True
        for msg in pub.undecided.values():
            msg.publisher_gone = True
        pub.undecided.clear()
        pub.decided.clear()
        pub.router.engine.detach_publisher(pub.link)
        self.settle(pub.router)

    def detach_subscriber(self, sub: SubClient) -> None:
        if sub.detached:
            return
        self.log(f"detach subscriber {sub.label}")
        sub.detached = True
        sub.router.engine.detach_subscriber(sub.link)
        self.settle(sub.router)

    # -- publishers

    def _publish_loop(self, pub: PubClient) -> None:
        if pub.detached or self.draining:
            return
        if pub.credit > 0 and pub.published < self.p.messages:
            self.publish(pub)
        self.after(self.rng.expovariate(1 / pub.rate), self._publish_loop, pub)

    def publish(self, pub: PubClient, *, presettled: bool | None = None,
                ttl_ms: int | bool | None = False) -> Msg:
        rng, p = self.rng, self.p
        r, engine = pub.router, pub.router.engine
        tag = str(pub.published).encode()
        msg_id = outgoing_tag(pub.ident.container, pub.ident.name, tag).decode()
        if presettled is None:
            presettled = rng.random() < p.presettled
        override = rng.choice([ALL, SOME]) if rng.random() < p.override else None
        if ttl_ms is False:
            ttl_ms = rng.randint(200, 3000) if rng.random() < p.ttl else None
        # What the origin knows right now: who is owed this message (read-only look-ups).
        local = engine._index.match(pub.topic)
        remote = engine._remote.match(pub.topic) if len(engine._remote) else ()
        msg = self.checker.on_publish(pub, tag, msg_id, override or pub.mode, presettled,
                                      local, remote, ttl_ms)  # type: ignore[arg-type]
        pub.published += 1
        pub.credit -= 1
        if not presettled:
            pub.undecided[tag] = msg
        self.log(f"publish {pub.label}#{msg.seq} {msg_id[:8]} mode {msg.mode} owed "
                 f"{sorted(msg.owed)}{' presettled' if presettled else ''}"
                 f"{f' ttl {ttl_ms}' if ttl_ms else ''}")
        engine.message(pub.link, tag, pub.payload(msg.seq), settled=presettled, mode=override,
                       ttl_ms=ttl_ms, now=self.now)  # type: ignore[arg-type]
        self.settle(r)
        if not presettled and not self.draining and rng.random() < p.early_settle:
            self.after(rng.uniform(0.0, 0.05), self._settle_delivery, pub, tag)
        return msg

    def _settle_delivery(self, pub: PubClient, tag: bytes) -> None:
        if pub.detached:
            return
        if pub.decided.pop(tag, None) is None:
            msg = pub.undecided.pop(tag, None)
            if msg is None:
                return
            msg.early_settled = True  # before an outcome: stop tracking it (the seed's DELETE)
            self.log(f"{pub.label} settles {msg.id[:8]} early")
        pub.router.engine.publisher_settled(pub.link, tag)
        self.settle(pub.router)

    # -- subscribers

    def _credit_loop(self, sub: SubClient) -> None:
        if sub.detached:
            return
        target = max(sub.target, 5) if self.draining else sub.target
        if sub.credit < target:
            sub.credit = target
            sub.router.engine.subscriber_credit(sub.link, target)
            self.settle(sub.router)
        if self.draining:
            period = 0.05
        elif sub.stalled:
            period = self.rng.uniform(1.0, 3.0)
        else:
            period = self.rng.uniform(0.02, 0.4 if sub.slow else 0.1)
        self.after(period, self._credit_loop, sub)

    def _answer(self, sub: SubClient, tag: bytes, copy: int) -> None:
        if sub.detached or sub.unanswered.get(tag) != copy:
            return  # gone, or the router settled the copy meanwhile (expired or withdrawn)
        rng = self.rng
        msg = self.checker.msg_by_tag(tag)
        if sub.flaky and not self.draining:
            disposition = rng.choices(
                [Disposition.ACCEPTED, Disposition.REJECTED, Disposition.RELEASED,
                 Disposition.MODIFIED, Disposition.UNDELIVERABLE], [70, 8, 12, 6, 4])[0]
        else:
            disposition = Disposition.ACCEPTED
        settled = rng.random() < 0.7
        del sub.unanswered[tag]
        if settled:
            sub.router_unsettled.pop(tag, None)
        if disposition == Disposition.ACCEPTED:
            self.checker.on_processed(sub, msg)
        elif disposition in (Disposition.RELEASED, Disposition.MODIFIED):
            sub.releases[msg.id] = sub.releases.get(msg.id, 0) + 1
        self.log(f"{sub.label} answers {msg.id[:8]} {disposition_name(disposition)}"
                 f"{' settled' if settled else ''}")
        sub.router.engine.copy_outcome(sub.link, tag, disposition, settled=settled,
                                       error="the simulated subscriber says no")
        self.settle(sub.router)

    # -- engine actions for a client

    def _to_client(self, client: PubClient | SubClient, action: Any) -> None:
        rng = self.rng
        if isinstance(action, CloseLink):
            raise Violation(f"{client.router.id} closed {client.label}: {action}")
        if client.kind == "pub":
            pub: PubClient = client  # type: ignore[assignment]
            if isinstance(action, Credit):
                self.checker.on_credit(pub, action.amount)
                pub.credit += action.amount
            elif isinstance(action, Decide):
                msg = pub.undecided.pop(action.tag, None)
                self.checker.on_decide(pub, action, msg)
                assert msg is not None
                self.log(f"{pub.label} told {str(action.outcome)[:160]} for #{msg.seq} "
                         f"{msg.id[:8]}")
                pub.decided[action.tag] = msg
                delay = rng.uniform(0.2, 1.0) if rng.random() < 0.1 else rng.uniform(0.001, 0.02)
                self.after(delay, self._settle_delivery, pub, action.tag)
            else:
                raise Violation(f"{client.router.id} sent {action} on publisher link "
                                f"{pub.label}")
            return
        sub: SubClient = client  # type: ignore[assignment]
        if isinstance(action, Send):
            msg = self.checker.on_send(sub, action)
            sub.credit -= 1
            self.log(f"{sub.label} gets {msg.pub.label}#{msg.seq} {msg.id[:8]} attempt "
                     f"{action.attempt}{' settled' if action.settled else ''}")
            if action.settled:
                self.checker.on_processed(sub, msg)
                return
            copy = sub.copies[msg.id]
            sub.unanswered[action.tag] = copy
            sub.router_unsettled[action.tag] = None
            delay = rng.uniform(0.2, 1.5) if sub.slow else rng.uniform(0.001, 0.02)
            self.after(delay, self._answer, sub, action.tag, copy)
        elif isinstance(action, SettleCopy):
            self.checker.on_settle_copy(sub, action)
            del sub.router_unsettled[action.tag]
            sub.unanswered.pop(action.tag, None)
        else:
            raise Violation(f"{client.router.id} sent {action} on subscriber link {sub.label}")

    # ------------------------------------------------------------------ reporting

    def summary(self) -> str:
        s = self.checker.stats
        done = f"{self.finished_at:.2f}" if self.finished_at is not None else "never"
        return (f"{self.p.routers} routers ({self.p.topology}), {s.published} published, "
                f"{s.accepted} accepted, {s.rejected} rejected, {s.first_deliveries} first "
                f"deliveries, {s.redeliveries} redeliveries; frames {self.counts}; "
                f"{self.events} events; finished at t={done}")


def disposition_name(d: int) -> str:
    return {1: "accepted", 2: "rejected", 3: "released", 4: "modified",
            5: "undeliverable"}.get(d, str(d))


class _TraceHandler(logging.Handler):
    """Puts the routers' own log lines (peer lost, restarts, …) into the world's trace."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.INFO)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        self.world.log(f"[log] {record.getMessage()}")


def run(params: Params) -> World:
    """Run one simulation; raise SimFailure (an AssertionError) if a property broke."""
    return World(params).run()


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m tests.sim.world SEED|SPEC [-v]\n"
              "  SPEC is 'seed=N,routers=3,...' as printed by a failing test")
        return 2
    params = Params.parse(argv[0])
    if os.environ.get("PYTHONHASHSEED") is None:
        print("note: set PYTHONHASHSEED=0 (as the failing test printed) for an exact replay",
              file=sys.stderr)
    started = time.perf_counter()
    try:
        world = run(params)
    except SimFailure as failure:
        print(failure)
        return 1
    print(f"ok in {time.perf_counter() - started:.2f} s: {world.summary()}")
    if "-v" in argv:
        print("\n".join(world.trace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A whole exactmesh cluster in one process, on a simulated clock, reproducible from one seed.

Each router is the real sans-IO trio, `Engine` + `NodeLoop` + `MeshNode`, driven the way the
runtime drives it: after every event the node loop (`router/nodeloop.py`, the code
`Node.flush` runs) applies the engine's actions in order, mesh actions to `MeshNode.apply`,
the others to the connection that registered the link (here the simulated client's side,
registered on attach and forgotten when the router learns the link is gone, as the edges
do); then the frames the mesh node produced go to the network. Each router's timer fires at
`NodeLoop.next_deadline()` and runs `NodeLoop.tick`.

The network carries frames between linked routers as bytes (`mesh.frames.encode`, and one
`FrameDecoder` per direction and connection), after a random delay; with faults on it drops,
duplicates and reorders them, and partitions take links down: the connection dies at once
(frames in flight on it are lost), each end notices within `DOWN_DETECT` seconds
(`link_down`), and healing brings up a new connection (`link_up` at both ends with the other's
incarnation). A crash (`restarts`) kills a router with all its state; it starts again after
a moment with a new incarnation (higher, as `mesh/runtime.py` takes it).

Clients die with their router, unless they are *survivors* (`survivors`, a share of clients):
those behave like the exactly-once SDK (amqp_edge/client.py). When their router crashes, or
their connection drops (`drop_client` faults: the router lives and notices the loss, after up
to `notice` seconds, as `detach_*(final=False)`), they attach again after 0.05-`move_max`
seconds to a random live router (perhaps the same one, restarted) with the same identity
(container-id and link name), the next attach generation and their resume declaration: a
subscriber declares the deliveries it holds unanswered ("received") and those it accepted
("accepted"), and keeps, across moves, the ids it processed (the SDK's store): a copy of one it
answered is answered again without processing it (a suppressed duplicate); a publisher declares
the deliveries it has no outcome for, sends them again first, in order, with the same tag and
payload, then goes on publishing. A share of subscribers are warm (`warm`: a durable terminus
with a timeout in [`warm_min`, `warm_max`] seconds), and `reconnect_timeout` is the engines'.
With every failover parameter at its default, a run is what it was before they existed (the
same random draws, so old specs replay the same).

A share of the clients (`sdk`; none, half or all of them in a failover seed's run) are
run by the SDK's own state machines, `amqp_edge.sdk_core` (router/sim/sdk.py): what they
declare, send again, answer from their store and grant as credit is the SDK's code, not a
model of it. The others model whatever any AMQP client may do.

A share of those SDK clients (`wire`; none by default, none, half or all of them in a
failover seed's run) talk to their router over AMQP instead
(router/sim/amqp.py): the SDK's cores drive a client-side proton engine, each attach is a
new connection, and the router's side is the real `amqp_edge.connection.AmqpConnection` on
the router's `SimRuntime` (router/sim/mqtt.py), fed bytes and drained as `amqp_edge.server`
does; a crash or a dropped connection breaks the bytes in flight, and the router calls the
connection's `closed()` when it notices. The checker sees the engine's actions on their links
where the connection registers them, and their messages as the engine takes them.

The other clients talk to their router's engine directly and react after a delay (events on
the same clock): publishers publish within their credit, settle after the outcome and sometimes
before it; subscribers grant credit, accept, reject, release or modify, some slowly; clients
attach and detach at random times. After `duration` the faults stop, the network heals, the
clients become well-behaved, and time runs on until everything is finished (or `drain` runs
out); then `Checker.final` checks that nothing is left over.

MQTT devices (`mqtt`, a share of the clients attached at random; router/sim/mqtt.py) are MQTT 5
clients speaking real packets (mqtt_edge's codec) over an in-order byte pipe to the real MQTT
session, `mqtt_edge.session.MqttConnection`, at their router: each router has a `SimRuntime`
(the `RuntimePort` the edge runs against: this clock, the real engine, link registration and
flushing through its node loop, its mesh node, `call_later` as an event) and an `MqttState`,
both lost when it crashes. A publisher device publishes QoS 1 within the server's Receive
Maximum and checks each PUBACK against the outcome; a subscriber device subscribes at QoS 1
(one filter or two), checks each PUBLISH and answers PUBACK, some 0x80. The checker sees them
as AMQP clients: engine actions are tapped where the session registers its links (before it
turns them into packets), and a publisher's message is announced when the session has passed
it to the engine. Devices die with their router, are dropped (the router notices after up to
`notice`, and the server's `closed()` runs), and leave by DISCONNECT or UNSUBSCRIBE; they do
not come back yet. With devices around, AMQP publishers send AMQP messages (with `to`, or a
share `bare` without) instead of raw bytes. With `mqtt` 0 nothing of this draws a random
number: a run is what it was before.

Everything random comes from `random.Random(seed)`, and events at the same instant run in the
order they were scheduled, so a spec replays exactly (`replay_command`), against the same code
(`code_version`), in any process: nothing the routers or the simulator do depends on the
order of a set or on `hash()`, which vary with PYTHONHASHSEED (iterations that would are sorted
or go over insertion-ordered dicts; `World.fingerprint` and test_simulation check it).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import os
import random
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from mesh.frames import FrameDecoder, FrameError, encode
from mesh.meshnode import MeshNode
from router.core import events as ev
from router.core.actions import (
    CloseLink,
    Credit,
    Decide,
    Forward,
    Relayed,
    Send,
    SettleCopy,
    Verdict,
)
from router.core.engine import Disposition, Engine, EngineConfig
from router.core.records import ALL, SOME, LinkIdentity, outgoing_tag
from router.nodeloop import NodeLoop

from .amqp import AmqpSide, WireClient
from .checker import Checker, Msg, Violation
from .mqtt import MqttSide, SimRuntime
from .relay import SimStore
from .sdk import SdkClients, SdkPublisher, SdkSubscriber

TOPOLOGIES = ("line", "ring", "star", "random", "full")
TOPICS = ("a", "a/b", "b", "a/c")
FILTERS = ("a", "a/#", "+", "#", "a/+", "b", "+/c", "a/b")
NAMES = "ABCDEFGHIJKLMNOP"
MAX_FRAME = 1 << 20
DOWN_DETECT = 0.3  # the longest a link end takes to notice its connection is gone
SPIN_STEP = 1e-6  # how far the clock moves when a timer is due again at the instant it ran
MAX_EVENTS = 5_000_000
# Trace lines kept (the last ones); 0 keeps them all (`-v` on the command line does).
TRACE_LINES = int(os.environ.get("EXACTMESH_SIM_TRACE", "400"))
MOVE_MIN = 0.05  # the soonest a survivor attaches again
RESUME_ACCEPTED_AGE = 60.0  # a subscriber declares what it accepted this recently ...
RESUME_ACCEPTED_MAX = 1000  # ... at most this many (amqp_edge/client.py)


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
    # Failover (router/core/failover.py). All off by default: such a run is the same as before.
    survivors: float = 0.0  # share of subscribers that come back after losing their link
    pub_survivors: float = -1.0  # share of publishers that do (-1: the same as survivors)
    drop_client: int = 0  # client connections dropped (the router lives) during the workload
    notice: float = 0.0  # the longest a router takes to notice a dropped client connection
    move_max: float = 1.5  # a survivor attaches again 0.05 s to this long after losing its link
    move_to: str = "any"  # where: "any" live router, or "same" (its own, once it is back)
    warm: float = 0.0  # share of subscribers that are warm (a durable terminus)
    warm_min: float = 0.5  # their timeouts, drawn uniformly from [warm_min, warm_max]
    warm_max: float = 5.0
    reconnect_timeout: float = 30.0  # EngineConfig: how long orphans and lost subscribers wait
    resume_timeout: float = 5.0  # EngineConfig: how long a resumed subscriber's holds last
    declare: float = 1.0  # share of subscriber re-attaches that declare what they hold
    # Share of clients run by the SDK's state machines (router/sim/sdk.py), drawn from a
    # generator of their own: 0 leaves every other draw of a run as it was.
    sdk: float = 0.0
    # Share of those SDK clients that talk to their router over AMQP (router/sim/amqp.py):
    # the client's proton engine and the router's real AmqpConnection, bytes between them.
    # Drawn from a generator of its own; 0: none, and no draw for it.
    wire: float = 0.0
    # MQTT (router/sim/mqtt.py): the share of clients attached at random that are MQTT 5
    # devices (QoS 1) talking to the real MQTT session. 0: none, and no random draw for it.
    mqtt: float = 0.0
    # With MQTT: the share of AMQP publishers whose messages carry no `to` (a bare Data
    # body; the MQTT edge must name the topic they published to). The others set `to` as
    # the SDK does.
    bare: float = 0.0
    # 1: every router runs a relay store (router/sim/relay.py, docs/relay.md): copies for warm
    # subscribers away or with their window full are stored, and records whose pending copies
    # are all stored give their publisher's window back and their body to the store. Not with
    # MQTT devices (an MQTT publisher is answered on stored copies: not in the checker yet).
    relay: int = 0
    # Share of publishers that publish at least once (docs/guarantees.md, "At least once"):
    # their routers keep no tombstones of their messages. Drawn from a generator of its own;
    # 0: none, and no draw for it.
    alo: float = 0.0

    def __post_init__(self) -> None:
        if self.relay and self.mqtt:
            raise ValueError("relay=1 with mqtt > 0 is not modelled yet (the checker does not "
                             "know that an MQTT publisher is answered on stored copies)")

    def spec(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))

    @classmethod
    def parse(cls, spec: str) -> Params:
        spec = spec.strip()
        if spec.isdigit():
            return cls.from_seed(int(spec))
        if spec[:1] == "f" and spec[1:].isdigit():
            return cls.failover_from_seed(int(spec[1:]))
        if spec[:1] == "m" and spec[1:].isdigit():
            return cls.mqtt_from_seed(int(spec[1:]))
        if spec[:1] == "r" and spec[1:].isdigit():
            return cls.relay_from_seed(int(spec[1:]))
        kinds = {f.name: f.default for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in spec.split(","):
            name, _, value = part.strip().partition("=")
            if name not in kinds:
                raise ValueError(f"unknown simulation parameter {name!r}")
            if name in values:
                # two specs run together (a lost comma): replaying the second as the
                # first would pass for the wrong reason
                raise ValueError(f"simulation parameter {name!r} given twice in one spec")
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

    @classmethod
    def failover_from_seed(cls, seed: int) -> Params:
        """Parameters with failover on (clients survive and move), drawn from the seed alone.
        `exactmesh sim --spec f1234` replays one of these."""
        rng = random.Random(f"exactmesh-failover-{seed}")
        timeout = rng.choice([2.0, 3.0, 5.0])
        return cls(
            seed=seed,
            routers=rng.randint(2, 5),
            topology=rng.choice(TOPOLOGIES),
            drop=rng.choice([0.0, 0.0, 0.0, 0.01, 0.05]),
            dup=rng.choice([0.0, 0.0, 0.02]),
            reorder=rng.choice([0.0, 0.1, 0.5]),
            partitions=rng.choice([0, 0, 0, 1, 2]),
            partition_max=rng.choice([1.0, timeout * 0.6, timeout * 1.5]),
            unreachable_timeout=timeout,
            publishers=rng.randint(1, 4),
            subscribers=rng.randint(1, 5),
            churn=rng.choice([0.0, 0.0, 0.5, 1.0]),
            flaky=rng.choice([0.0, 0.0, 0.3]),
            ttl=rng.choice([0.0, 0.0, 0.1]),
            restarts=rng.choice([0, 1, 1, 2, 3]),
            transfer_window=rng.choice([4096, 4096, 8]),
            survivors=rng.choice([0.5, 0.8, 1.0]),
            pub_survivors=rng.choice([-1.0, -1.0, 0.0]),
            drop_client=rng.choice([0, 1, 2, 4]),
            notice=rng.choice([0.0, 0.0, 0.5, 2.0]),
            move_to=rng.choice(["any", "any", "same"]),
            warm=rng.choice([0.0, 0.5, 1.0]),
            warm_max=rng.choice([1.0, 3.0, 5.0]),
            reconnect_timeout=rng.choice([1.0, 3.0, 8.0]),
            sdk=random.Random(f"exactmesh-sdk-{seed}").choice([0.0, 0.5, 1.0]),
            wire=random.Random(f"exactmesh-wire-{seed}").choice([0.0, 0.5, 1.0]),
            # MQTT devices in a third of the runs (mqtt_from_seed: in all of them, more).
            mqtt=random.Random(f"exactmesh-mqtt-share-{seed}").choice([0.0, 0.0, 0.3]),
            bare=random.Random(f"exactmesh-bare-{seed}").choice([0.0, 0.5]),
        )

    @classmethod
    def mqtt_from_seed(cls, seed: int) -> Params:
        """The failover workload of `seed` with MQTT 5 devices among the clients attached at
        random (router/sim/mqtt.py), drawn from the seed alone, more of them than the
        failover workload has. `exactmesh sim --spec m1234` replays one."""
        rng = random.Random(f"exactmesh-mqtt-{seed}")
        return replace(cls.failover_from_seed(seed), mqtt=rng.choice([0.3, 0.5, 0.8, 1.0]),
                       bare=rng.choice([0.0, 0.0, 0.5]))


    @classmethod
    def relay_from_seed(cls, seed: int) -> Params:
        """The failover workload of `seed` with a relay store in every router, warm
        subscribers in every run and no MQTT devices. `exactmesh sim --spec r1234` replays
        one."""
        rng = random.Random(f"exactmesh-relay-{seed}")
        return replace(cls.failover_from_seed(seed), relay=1, mqtt=0.0, bare=0.0,
                       warm=rng.choice([0.5, 1.0]), warm_max=rng.choice([3.0, 5.0, 8.0]))


# The code a run depends on: the sans-IO core, the mesh, and the simulator itself.
CODE_GLOBS = ("router/core/*.py", "router/sim/*.py", "router/nodeloop.py", "mesh/*.py",
              "mqtt_edge/*.py", "amqp_edge/*.py")


def replay_command(params: Params) -> str:
    return f"exactmesh sim --spec '{params.spec()}'"


def code_version() -> str:
    """A short digest of the code a run depends on (CODE_GLOBS), for failure reports: a seed
    replays exactly only against the same code."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for path in sorted(p for pattern in CODE_GLOBS for p in root.glob(pattern)):
        h.update(path.relative_to(root).as_posix().encode())
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
            f"  code: {code_version()} ({' + '.join(CODE_GLOBS)}): a spec replays exactly "
            "against the same code\n"
            f"  last events:\n    {tail}"
        )
        self.params = params
        self.what = what
        self.trace = trace


# ---------------------------------------------------------------------------- the parts


class SimRouter:
    def __init__(self, rid: str, inc: int, p: Params) -> None:
        self.id = rid
        self.inc = inc
        # The record each copy was sent from, by the Send action, noted as the engine makes it:
        # the mesh hands the engine a whole batch before the actions are taken, and the record
        # may be forgotten (and another made for a resend) within it.
        self.sent_from: dict[int, tuple[Send, object]] = {}
        self.engine = NotingEngine(Engine(EngineConfig(
            router_id=rid, publisher_window=p.window, max_delivery_attempts=p.max_attempts,
            reconnect_timeout=p.reconnect_timeout, resume_timeout=p.resume_timeout,
            relay_store=bool(p.relay), check_invariants=True)), self.sent_from)
        self.mesh = MeshNode(rid, inc, self.engine,  # type: ignore[arg-type]
                             unreachable_timeout=p.unreachable_timeout,
                             gossip_interval=p.gossip_interval,
                             transfer_window=p.transfer_window)
        self.loop = NodeLoop(self.engine)  # type: ignore[arg-type]  # World._wire sets it up
        self.clients: ClientSide | None = None
        self.mqtt_node: SimRuntime | None = None  # its MQTT runtime and state (World._wire)
        self.tick_at: float | None = None
        self.tick_token = 0
        self.last_tick = -1.0
        self.dead = False  # crashed: this instance never runs again


class ClientSide:
    """The simulated clients' connections to one router, as its node loop sees them
    (`router.ports.EdgeConnection`): each client registers its link, with itself as the
    link's state, when it attaches."""

    def __init__(self, world: World, router: SimRouter) -> None:
        self.world = world
        self.router = router

    def apply(self, client: Any, action: Any) -> None:
        self.world._on_link_action(self.router, client, action)

    def shutdown(self, description: str) -> None:
        """Never called: the simulator stops routers by crashing them."""


class CheckedMesh:
    """A router's mesh node as its node loop sees it (`router.ports.MeshPort`), with the
    checker looking at what the engine hands it: forwards and verdicts."""

    def __init__(self, mesh: MeshNode, checker: Checker, router: SimRouter) -> None:
        self.mesh = mesh
        self.checker = checker
        self.router = router

    def apply(self, action: Any, now: float) -> None:
        if isinstance(action, Forward):
            self.checker.on_forward(self.router, action)
        elif isinstance(action, Verdict):
            self.checker.on_verdict(self.router, action)
        self.mesh.apply(action, now)

    def tick(self, now: float) -> None:
        self.mesh.tick(now)

    def next_deadline(self) -> float | None:
        return self.mesh.next_deadline()

    def share_retained(self, item: Any, now: float) -> None:
        self.mesh.share_retained(item, now)

    def attach_retained(self, on_item: Any, source: Any) -> None:
        self.mesh.attach_retained(on_item, source)


class NotingEngine:
    """A router's engine as the simulator drives it (the mesh node and the clients alike):
    each event goes to the real engine's `handle`, and the record each copy it sends comes
    from is noted in `sent_from` as the engine makes the Send. Everything else is the
    engine's own."""

    def __init__(self, engine: Engine, sent_from: dict[int, tuple[Send, object]]) -> None:
        self.core = engine
        self.sent_from = sent_from
        # Copies queued from one origin's forward whose record a resend from another origin
        # then took over (`Record.former`), by id: (the copy, that first origin). They keep
        # their place in the queue, from the first origin's traffic (see Checker.on_send).
        self.taken_over: dict[int, tuple[object, str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def handle(self, event: ev.Event) -> Any:
        core = self.core
        start = core.actions_pending()
        rec = core.find(event.msg_id) if type(event) is ev.RemoteMessage else None
        first = rec.origin if rec is not None else None
        queued = list(rec.copies.values()) if first is not None else []
        result = core.handle(event)
        if first is not None and rec.origin != first:  # type: ignore[union-attr]
            for copy in queued:
                self.taken_over.setdefault(id(copy), (copy, first))
        for action in core.peek_actions(start):
            if type(action) is Send:
                rec = self.sent_record(action)
                if rec is not None:
                    self.sent_from[id(action)] = (action, rec)
        return result

    def sent_record(self, send: Send) -> Any:
        """The record `send` was made from: the one its subscriber's copy is in. Not always
        the one `find` gives for its id (the newest): a resend owed beside a live record of
        the same message (failover.py `_owed_beside`) makes a second record of that id for
        the other subscribers, while the first goes on sending its own copies (seed 86546:
        the copy came from a record queued from the publisher's old router, `find` named
        the new one's)."""
        core = self.core
        rec = core.find(send.tag.decode())
        sub = core.subscribers.get(send.link)
        if rec is None or sub is None or sub.sid in rec.copies:
            return rec
        if not send.settled and (flying := sub.inflight.get(send.tag)) is not None:
            return flying
        return next((r for r in core.records.values()
                     if r.id == rec.id and sub.sid in r.copies), rec)


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


class Client:
    """What publishers and subscribers share: an identity (container-id and link name) that
    outlives the links it attaches with. `router`, `link` and `label` are the current (or last)
    attach's; a survivor gets new ones each time it attaches again."""

    kind = ""
    mqtt = False  # an MQTT device's client (router/sim/mqtt.py) is not one of these

    def __init__(self, router: SimRouter, link: int, ident: LinkIdentity,
                 survivor: bool) -> None:
        self.router = router
        self.link = link
        self.ident = ident
        self.key = ident.key
        self.label = ident.label(router.id)
        self.survivor = survivor  # comes back after losing its link (as the SDK does)
        self.detached = False  # no link now: closed, dead, or lost and not back yet
        self.away = False  # lost its link and will attach again
        self.gone = False  # closed its link, or died: for good
        self.epoch = 0  # one per attach: the loops of an older attach stop
        self.gen = 1  # attach generation (the SDK's persisted counter)
        self.history = [router.id]  # the routers it attached to, in order
        self.moves = 0  # attaches after losing a link
        self.lost_links: set[int] = set()  # links it lost (the router may not know yet)
        self.lost_at: float | None = None
        # router id -> when it last lost a link to that router: an origin's orphans wait
        # `reconnect-timeout` from the loss of the link they were published (or resent) on,
        # not from a later loss elsewhere (the checker's `on_resend`).
        self.lost_at_router: dict[str, float] = {}
        self.away_spans: list[tuple[float, float]] = []  # (lost, attached again)
        # A script's say in its next move (None: random): how long until it attaches again,
        # and to which router.
        self.move_delay: float | None = None
        self.move_router: str | None = None
        # Its AMQP side when it talks to its router over AMQP (an SDK client: sim/amqp.py).
        self.wire: WireClient | None = None


class PubClient(Client):
    kind = "pub"

    def __init__(self, router: SimRouter, link: int, n: int, topic: str, mode: str,
                 rate: float, survivor: bool = False) -> None:
        super().__init__(router, link, LinkIdentity(f"app-{router.id}", f"pub{n}"), survivor)
        self.topic = topic
        self.mode = mode
        self.rate = rate  # mean seconds between publish attempts
        self.credit = 0
        self.published = 0
        self.undecided: dict[bytes, Msg] = {}  # by publisher tag, in publish order
        self.decided: dict[bytes, Msg] = {}  # outcome known, not settled yet
        self.resend_queue: deque[bytes] = deque()  # declared on attach, not sent again yet
        self.once = True  # False: it publishes at least once (Params.alo)
        self.sdk: SdkPublisher | None = None  # run by the SDK's state machine (sim/sdk.py)
        # Its payloads as AMQP messages (MQTT subscribers may get them: router/sim/mqtt.py).
        self.body: Callable[[bytes], bytes] | None = None

    def payload(self, seq: int) -> bytes:
        text = f"{self.key}#{seq}".encode()
        return self.body(text) if self.body is not None else text


class SubClient(Client):
    kind = "sub"

    def __init__(self, router: SimRouter, link: int, n: int, topic_filter: str,
                 presettled: bool, flaky: bool, slow: bool, stalled: bool, target: int,
                 survivor: bool = False, warm: float | None = None) -> None:
        super().__init__(router, link, LinkIdentity(f"app-{router.id}", f"sub{n}"), survivor)
        self.filter = topic_filter
        self.presettled = presettled
        self.flaky = flaky
        self.slow = slow
        self.stalled = stalled
        self.target = target  # credit it keeps topping up to
        self.warm = warm  # its durable terminus' timeout (seconds), None if not warm
        # Strict: it never lost a link (no move, its router never crashed under it): the
        # router's own exactly-once applies to it raw, no duplicate suppression needed.
        self.strict = True
        self.credit = 0
        # Across its attaches (the SDK keeps these in its store):
        self.copies: dict[str, int] = {}  # msg id -> copies received
        self.releases: dict[str, int] = {}  # msg id -> redeliveries asked for
        self.processed: dict[str, int] = {}  # msg id -> times accepted (or taken pre-settled)
        self.answers: dict[str, int] = {}  # msg id -> its answer (accepted or rejected)
        self.accepted_at: dict[str, float] = {}  # msg id -> when it accepted (to declare)
        self.said: dict[str, set[int]] = {}  # msg id -> every disposition it gave
        # publisher key -> (seq of the last first delivery, the router it was last sent from)
        self.last_seq: dict[str, tuple[int, tuple[str, int]]] = {}
        # tag -> (which copy, the link it came on, the stored answer to give again or None):
        # copies it holds unanswered; they outlive a lost link (the application still holds
        # them) and are declared "received" when it attaches again.
        self.unanswered: dict[bytes, tuple[int, int, int | None]] = {}
        self.router_unsettled: dict[bytes, None] = {}  # copies on this link not settled yet
        # msg id -> ((router, incarnation, record number) the last copy came from, copies
        # from that record): a router that forgot a record may take a resend for new.
        self.sources: dict[str, tuple[tuple[str, int, int], int]] = {}
        self.dup_ok: set[str] = set()  # ids it may get again (a router's second record)
        self.lost_settled: set[str] = set()  # pre-settled copies lost on a dead connection
        self.raw_duplicates = 0  # copies of messages it had processed already
        self.sdk: SdkSubscriber | None = None  # run by the SDK's state machine (sim/sdk.py)
        self.suppressed = 0  # of those, answered from its store without processing


# ---------------------------------------------------------------------------- the world


class World(SdkClients):
    def __init__(self, params: Params, *, trace_lines: int | None = None) -> None:
        """`trace_lines`: how many of the last trace lines to keep (0: all; default
        TRACE_LINES)."""
        self._records_seen: dict[int, object] = {}
        p = self.p = params
        self.rng = random.Random(p.seed)
        self.sdk_rng = random.Random(f"exactmesh-sdk-clients-{p.seed}")  # who runs the SDK
        self.wire_rng = random.Random(f"exactmesh-wire-clients-{p.seed}")  # ... over AMQP
        self.alo_rng = random.Random(f"exactmesh-alo-clients-{p.seed}")  # who is at least once
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._tie = itertools.count()
        self.events = 0
        self.faults = True
        self.draining = False
        self.routers: dict[str, SimRouter] = {}
        self.stores: dict[str, SimStore] = {}  # relay stores by router id (Params.relay)
        self.links: dict[tuple[str, str], SimLink] = {}
        self.clients: dict[int, PubClient | SubClient] = {}  # by link, every link ever
        self.all_clients: list[PubClient | SubClient] = []  # in order of first attach
        self._link_ids = itertools.count(1)
        self._client_names = itertools.count(1)
        self.checker = Checker(self)
        self.mqtt = MqttSide(self, TOPICS, FILTERS)
        self.amqp = AmqpSide(self)
        keep = TRACE_LINES if trace_lines is None else trace_lines
        self.trace: deque[str] = deque(maxlen=keep or None)
        # Every trace line and every frame put on the network, in order: `fingerprint()`.
        self._digest = hashlib.blake2b(digest_size=16)
        self.counts = {"frames": 0, "lost": 0, "dropped": 0, "duplicated": 0, "spins": 0}
        # Failover: links lost, re-attaches, actions for lost links, stolen links closed.
        self.moves = {"crash_lost": 0, "dropped": 0, "reattached": 0, "lost_actions": 0,
                      "stolen": 0, "resent": 0}
        self.crashed: dict[str, list[float]] = {}  # router id -> crash times
        self.restarted: dict[str, list[float]] = {}  # router id -> restart times, likewise
        self.ever_cut = False  # a link was cut (random or scripted partition)
        self.finished_at: float | None = None
        self._build()

    # ------------------------------------------------------------------ events

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (max(t, self.now), next(self._tie), fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, fn, *args)

    def log(self, what: str) -> None:
        line = f"{self.now:9.4f} {what}\n"
        self.trace.append(line[:-1])
        self._digest.update(line.encode())

    def fingerprint(self) -> str:
        """A digest of the run so far: every trace line (all of them, kept or not) and every
        frame the routers sent, in order. Two runs of one spec must give the same one, in any
        process (whatever its PYTHONHASHSEED) and on any machine, against the same code."""
        return self._digest.hexdigest()

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
            self.routers[rid] = self._wire(SimRouter(rid, rng.randrange(1, 2**62), p))
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
        for _ in range(p.drop_client):
            self.at(rng.uniform(0.5, max(0.6, p.duration - 0.5)), self._drop_client)
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
            self.amqp.final()
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
        if not self.mqtt.quiet():
            return False  # bytes on their way between an MQTT device and its router
        if not self.amqp.quiet():
            return False  # ... or an AMQP client and its router, or messages not sent yet
        for c in self.all_clients:
            if c.away:
                return False  # a survivor on its way back
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
        """What the runtime does after every event at a router: the node's loop applies the
        engine's actions (`NodeLoop.flush`, the runtime's own code), and the frames the mesh
        node produced go out (`MeshRuntime._settle`)."""
        r.loop.flush(self.now)
        self._after_flush(r)

    def _after_flush(self, r: SimRouter) -> None:
        r.sent_from.clear()
        self._output(r)
        self.checker.check_router(r)
        self._schedule_tick(r)

    def _on_link_action(self, r: SimRouter, client: PubClient | SubClient,
                        action: Any) -> None:
        """An engine action on a link a client registered with `r`'s node loop (it stays
        registered until the router notices the link is gone, as an edge's does)."""
        if client.link == action.link and not client.detached and client.router is r:
            self._to_client(client, action)
        elif action.link in client.lost_links:
            self._lost_action(client, action)
        else:
            self.checker.stray(r, action)

    def _wire(self, r: SimRouter) -> SimRouter:
        """Set up `r`'s node loop as the runtime does: its mesh node and frame sender (what
        `MeshRuntime` registers), and the clients' side, which registers links."""
        r.loop = NodeLoop(r.engine, unrouted=lambda action: self.mqtt.unrouted(r, action)  # type: ignore[arg-type]
                          or self.amqp.unrouted(r, action) or self.checker.stray(r, action))
        r.loop.attach_mesh(CheckedMesh(r.mesh, self.checker, r), lambda: self._output(r))
        if self.p.relay:  # one store per router id: it outlives a crash, as a disk does
            store = self.stores.get(r.id)
            if store is None:
                store = self.stores[r.id] = SimStore()
            else:
                store.restarted()
            r.loop.store = store
        r.clients = ClientSide(self, r)
        r.mqtt_node = self.mqtt.start(r)
        return r

    def _output(self, r: SimRouter) -> None:
        for peer, frame in r.mesh.take_frames():
            self._net_send(r.id, peer, frame)

    def _schedule_tick(self, r: SimRouter) -> None:
        t = r.loop.next_deadline()
        if t is None:
            return
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
        r.loop.tick(self.now)  # the engine's deadlines, the mesh node's, then a flush
        self._after_flush(r)

    # ------------------------------------------------------------------ network

    def _net_send(self, src: str, dst: str, frame: dict) -> None:
        link = self.links.get((src, dst) if src < dst else (dst, src))
        if link is None:
            raise Violation(f"{src} sent a {frame['t']} frame to {dst}, which it has no link to")
        try:
            data = encode(frame)
        except FrameError as err:
            raise Violation(f"{src} produced a frame that cannot be encoded: {err}") from None
        self._digest.update(f"{src}>{dst} ".encode())
        self._digest.update(data)
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
        self.ever_cut = True
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
        self.crashed.setdefault(victim, []).append(self.now)
        for c in self.all_clients:
            if c.router is r and not c.detached:
                # Nothing is promised to the clients of a dead router, except to survivors,
                # which come back (elsewhere, or here once it is back).
                self.moves["crash_lost"] += 1
                self._lose(c, f"router {victim} crashed")
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
        r = self.routers[victim] = self._wire(SimRouter(victim, inc, self.p))
        self.log(f"router {victim} restarts, incarnation {old.inc} -> {inc}")
        self.restarted.setdefault(victim, []).append(self.now)
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
        return [c for c in self.all_clients if c.kind == "pub"]  # type: ignore[misc]

    def subscribers(self) -> list[SubClient]:
        return [c for c in self.all_clients if c.kind == "sub"]  # type: ignore[misc]

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

    def _new_link(self, client: PubClient | SubClient) -> int:
        link = next(self._link_ids)
        self.clients[link] = client
        return link

    def attach_publisher(self, router: str | None = None, topic: str | None = None,
                         mode: str | None = None, rate: float | None = None,
                         survivor: bool | None = None) -> PubClient | None:
        rng, p = self.rng, self.p
        if router is None and p.mqtt > 0 and rng.random() < p.mqtt:
            return self.mqtt.attach_publisher()  # type: ignore[return-value]
        r = self.routers[router] if router else self.routers[rng.choice(self._alive())]
        if r.dead:
            return None  # nobody can attach to a router that is down
        topic = topic or rng.choice(TOPICS)
        mode = mode or (SOME if rng.random() < self.p.some_mode else ALL)
        link = next(self._link_ids)
        rate = rate or rng.choice([0.02, 0.1, 0.3])
        if survivor is None:
            share = p.survivors if p.pub_survivors < 0 else p.pub_survivors
            survivor = share > 0 and rng.random() < share
        pub = PubClient(r, link, next(self._client_names), topic, mode, rate=rate,
                        survivor=survivor)
        if p.sdk > 0 and self.sdk_rng.random() < p.sdk:
            pub.sdk = SdkPublisher()
        pub.body = self.mqtt.amqp_body(topic) or self.amqp.amqp_body(topic)
        if pub.sdk is not None and p.wire > 0 and self.wire_rng.random() < p.wire:
            self.amqp.make(pub)
        if p.alo > 0 and self.alo_rng.random() < p.alo and pub.wire is None:
            pub.once = False
        self.clients[link] = pub
        self.all_clients.append(pub)
        self.log(f"attach publisher {pub.label} topic {topic} mode {mode}"
                 f"{' survivor' if survivor else ''}{' SDK' if pub.sdk else ''}"
                 f"{' AMQP' if pub.wire else ''}{'' if pub.once else ' at-least-once'}")
        if pub.wire is not None:
            self.amqp.attach(pub, r)
            return pub
        r.loop.register_link(link, r.clients, pub)
        r.engine.handle(ev.PublisherAttached(self.now, link, pub.ident, topic, mode,
                                             once=pub.once))
        if pub.sdk is not None:
            pub.sdk.core.attached()
        self.settle(r)
        self.after(rng.expovariate(1 / pub.rate), self._publish_loop, pub, pub.epoch)
        return pub

    def attach_subscriber(self, router: str | None = None, topic_filter: str | None = None,
                          good: bool = False, survivor: bool | None = None,
                          warm: float | None = None) -> SubClient | None:
        rng, p = self.rng, self.p
        if router is None and p.mqtt > 0 and rng.random() < p.mqtt:
            subs = self.mqtt.attach_subscriber()
            return subs[0] if subs else None  # type: ignore[return-value]
        r = self.routers[router] if router else self.routers[rng.choice(self._alive())]
        if r.dead:
            return None
        topic_filter = topic_filter or rng.choice(FILTERS)
        link = next(self._link_ids)
        presettled = not good and rng.random() < p.presettled_subs
        flaky = not good and rng.random() < p.flaky
        slow = not good and rng.random() < p.slow
        stalled = not good and rng.random() < p.stall
        target = rng.randint(1, 5)
        if survivor is None:
            survivor = p.survivors > 0 and rng.random() < p.survivors
        if warm is None and p.warm > 0 and rng.random() < p.warm:
            warm = round(rng.uniform(p.warm_min, max(p.warm_min, p.warm_max)), 3)
        sub = SubClient(r, link, next(self._client_names), topic_filter, presettled=presettled,
                        flaky=flaky, slow=slow, stalled=stalled, target=target,
                        survivor=survivor, warm=warm)
        if p.sdk > 0 and self.sdk_rng.random() < p.sdk:
            sub.sdk = SdkSubscriber(self, prefetch=target)
            sub.presettled = False  # the SDK's subscribers answer every message
            if p.wire > 0 and self.wire_rng.random() < p.wire:
                self.amqp.make(sub)
                warm = sub.warm
        self.clients[link] = sub
        self.all_clients.append(sub)
        self.checker.register_sub(sub)
        self.log(f"attach subscriber {sub.label} filter {topic_filter}"
                 f"{' presettled' if sub.presettled else ''}{' flaky' if sub.flaky else ''}"
                 f"{' slow' if sub.slow else ''}{' stalled' if sub.stalled else ''}"
                 f"{' survivor' if survivor else ''}{f' warm {warm:g} s' if warm else ''}"
                 f"{' SDK' if sub.sdk else ''}{' AMQP' if sub.wire else ''}")
        if sub.wire is not None:
            self.amqp.attach(sub, r)
            return sub
        r.loop.register_link(link, r.clients, sub)
        r.engine.handle(ev.SubscriberAttached(self.now, link, sub.ident, topic_filter,
                                              sub.presettled, warm, gen=sub.gen))
        if sub.sdk is not None:
            sub.sdk.core.attached()
        self.settle(r)
        self.after(rng.uniform(0.0, 0.05), self._credit_loop, sub, sub.epoch)
        return sub

    def detach_publisher(self, pub: PubClient) -> None:
        """The publisher closes its link (for good)."""
        if pub.mqtt:
            self.mqtt.detach(pub)  # type: ignore[arg-type]
            return
        if pub.detached:
            return
        self.log(f"detach publisher {pub.label}")
        pub.detached = pub.gone = True
        for msg in pub.undecided.values():
            msg.publisher_gone = True
        pub.undecided.clear()
        pub.decided.clear()
        pub.resend_queue.clear()
        if pub.wire is not None:
            self.amqp.close(pub)  # its link and connection, over AMQP
            return
        pub.router.loop.forget_link(pub.link)  # as an edge does, before it tells the engine
        pub.router.engine.handle(ev.PublisherDetached(self.now, pub.link, True))
        self.settle(pub.router)

    def detach_subscriber(self, sub: SubClient) -> None:
        """The subscriber closes its link: its subscription ends, warm or not."""
        if sub.mqtt:
            self.mqtt.detach(sub)  # type: ignore[arg-type]
            return
        if sub.detached or sub.gone:
            return
        self.log(f"detach subscriber {sub.label}")
        if sub.wire is not None:
            # Gone for the application now; detached once its router lets the link go.
            sub.gone = True
            self.checker.on_gone(sub)
            self.amqp.close(sub)
            return
        sub.detached = sub.gone = True
        self.checker.on_gone(sub)
        sub.router.loop.forget_link(sub.link)
        sub.router.engine.handle(ev.SubscriberDetached(self.now, sub.link, True))
        self.settle(sub.router)

    # -- losing a link, and coming back (failover)

    def _lose(self, c: PubClient | SubClient, why: str) -> None:
        """`c`'s link is gone without a close (its router crashed, or its connection dropped).
        A survivor attaches again later; any other client is gone for good."""
        if c.mqtt:
            self.mqtt.lose(c, why)  # type: ignore[arg-type]
            return
        if c.wire is not None and self.amqp.lose(c, why):
            return
        c.detached = True
        c.lost_links.add(c.link)
        c.lost_at = self.now
        c.lost_at_router[c.router.id] = self.now
        c.epoch += 1
        self.sdk_lost(c)
        if c.kind == "pub":
            pub: PubClient = c  # type: ignore[assignment]
            pub.credit = 0
            pub.resend_queue.clear()
            if not c.survivor:
                for msg in pub.undecided.values():
                    msg.publisher_gone = True
            else:
                pub.decided.clear()  # it has their outcomes: settling them died with the link
        else:
            sub: SubClient = c  # type: ignore[assignment]
            sub.strict = False
            sub.credit = 0
            sub.router_unsettled.clear()
        if c.survivor:
            c.away = True
            delay = c.move_delay
            if delay is None:
                delay = self.rng.uniform(MOVE_MIN, max(MOVE_MIN, self.p.move_max))
            self.log(f"{c.label} lost its link ({why}); back in {delay:.3f} s")
            self.after(delay, self._reattach, c)
        else:
            c.gone = True
            if c.kind == "sub":
                self.checker.on_gone(c)  # type: ignore[arg-type]
            if self.p.survivors > 0:
                self.log(f"{c.label} lost its link ({why}) and is gone for good")

    def _drop_client(self) -> None:
        if not self.faults:
            return
        rng = self.rng
        candidates = [c for c in self.all_clients if not c.detached]
        if candidates:
            self.drop_connection(rng.choice(candidates))

    def drop_connection(self, c: PubClient | SubClient, notice: float | None = None) -> None:
        """`c`'s connection drops; its router lives and notices `notice` seconds later (drawn
        from [0, p.notice] if not given): then it detaches the link without a close."""
        if c.detached:
            return
        r, link = c.router, c.link
        self.moves["dropped"] += 1
        self._lose(c, "connection dropped")
        if notice is None:
            notice = self.rng.uniform(0.0, self.p.notice) if self.p.notice > 0 else 0.0
        if notice > 0:
            self.after(notice, self._router_notices, r, c, link)
        else:
            self._router_notices(r, c, link)

    def _router_notices(self, r: SimRouter, c: PubClient | SubClient, link: int) -> None:
        if c.mqtt:
            self.mqtt.router_notices(r, c)  # type: ignore[arg-type]
            return
        if c.wire is not None:
            self.amqp.router_notices(r, c, link)
            return
        if r.dead:
            return
        self.log(f"{r.id} notices the connection of {c.key} (link {link}) is gone")
        if c.kind == "sub":
            r.loop.forget_link(link)
            r.engine.handle(ev.SubscriberDetached(self.now, link, False))
        else:
            r.loop.forget_link(link)
            r.engine.handle(ev.PublisherDetached(self.now, link, False))
        self.settle(r)

    def _reattach(self, c: PubClient | SubClient) -> None:
        """A survivor attaches again: a random live router, the same identity, the next
        generation, and its resume declaration."""
        if not c.away:
            return
        alive = [rid for rid in sorted(self.routers) if not self.routers[rid].dead]
        if c.move_router is not None:
            alive = [rid for rid in alive if rid == c.move_router]
        elif self.p.move_to == "same":
            alive = [rid for rid in alive if rid == c.router.id]
        if not alive:
            self.after(0.1, self._reattach, c)
            return
        rng = self.rng
        r = self.routers[rng.choice(alive)]
        link = self._new_link(c)
        assert c.lost_at is not None
        c.away_spans.append((c.lost_at, self.now))
        c.router, c.link, c.label = r, link, c.ident.label(r.id)
        c.detached = c.away = False
        c.gen += 1
        c.moves += 1
        c.history.append(r.id)
        c.epoch += 1
        self.moves["reattached"] += 1
        if c.wire is not None:
            self.amqp.attach(c, r)  # a new connection, with its core's declaration
            return
        if c.kind == "sub":
            sub: SubClient = c  # type: ignore[assignment]
            declared = self.sdk_declaration(sub) if sub.sdk else self._declaration(sub)
            self.log(f"{sub.key} attaches again at {r.id} (gen {sub.gen}, declares "
                     f"{len(declared)}: {sum(v == 'received' for v in declared.values())} "
                     "received)")
            r.loop.register_link(link, r.clients, sub)
            r.engine.handle(ev.SubscriberAttached(self.now, link, sub.ident, sub.filter,
                                                  sub.presettled, sub.warm, gen=sub.gen,
                                                  declared=declared))
            if sub.sdk is not None:
                sub.sdk.core.attached()
            self.settle(r)
            self.after(rng.uniform(0.0, 0.05), self._credit_loop, sub, sub.epoch)
            return
        pub: PubClient = c  # type: ignore[assignment]
        resends = [tag for tag, msg in pub.undecided.items() if msg.tracked]
        if pub.sdk is not None:
            resends = self.sdk_attach_resends(pub)  # the SDK's own declaration
        self.log(f"{pub.key} attaches again at {r.id}, resending {len(resends)}")
        pub.resend_queue = deque(resends if pub.sdk is None else ())
        r.loop.register_link(link, r.clients, pub)
        r.engine.handle(ev.PublisherAttached(self.now, link, pub.ident, pub.topic, pub.mode,
                                             resends, once=pub.once))
        if pub.sdk is not None:
            pub.sdk.core.attached()  # it sends its resends first when credit comes
        self.settle(r)
        self._send_resends(pub, pub.epoch)
        self.after(rng.expovariate(1 / pub.rate), self._publish_loop, pub, pub.epoch)

    def _declaration(self, sub: SubClient) -> dict[str, str]:
        """What the SDK declares on attach: deliveries accepted in the last 60 s (at most
        1000), and the ones it holds unanswered."""
        p = self.p
        if p.declare < 1.0 and self.rng.random() >= p.declare:
            return {}
        recent = sorted((at, msg_id) for msg_id, at in sub.accepted_at.items()
                        if self.now - at <= RESUME_ACCEPTED_AGE)[-RESUME_ACCEPTED_MAX:]
        declared = {msg_id: "accepted" for _, msg_id in recent}
        for tag in sub.unanswered:
            declared.setdefault(tag.decode(), "received")
        return declared

    def _lost_action(self, c: PubClient | SubClient, action: Any) -> None:
        """An action for a link its client lost (the router has not noticed yet): it goes
        nowhere, as on a dead connection."""
        self.moves["lost_actions"] += 1
        if isinstance(action, CloseLink):
            self.moves["stolen"] += 1
            self.log(f"{c.router.id if c.router else '?'} closes lost link {action.link} of "
                     f"{c.key}: {action.condition}")
        elif isinstance(action, Send | Decide):
            self.log(f"lost on link {action.link} of {c.key}: {type(action).__name__} "
                     f"{action.tag[:8]!r}")
            if isinstance(action, Send) and action.settled:
                # At most once: the router counts it accepted as it sends it, and it is lost.
                self.checker.on_lost_settled(c, action)  # type: ignore[arg-type]

    # -- publishers

    def _publish_loop(self, pub: PubClient, epoch: int) -> None:
        if pub.detached or self.draining or epoch != pub.epoch:
            return
        if pub.sdk is not None:
            self.sdk_transmit(pub, epoch)
            if (pub.credit > 0 and pub.published < self.p.messages
                    and pub.sdk.core.can_publish() and not pub.detached):
                self.sdk_publish(pub)
        elif pub.resend_queue:
            self._send_resends(pub, epoch)
        elif pub.credit > 0 and pub.published < self.p.messages:
            self.publish(pub)
        self.after(self.rng.expovariate(1 / pub.rate), self._publish_loop, pub, epoch)

    def _origin_view(self, pub: PubClient) -> tuple[tuple[int, ...], tuple[tuple[str, str], ...]]:
        """Who the publisher's router would owe a message to topic right now (read-only)."""
        local, remote, _away = pub.router.engine.matching(pub.topic)
        return local, remote

    def publish(self, pub: PubClient, *, presettled: bool | None = None,
                ttl_ms: int | bool | None = False, tag: bytes | None = None) -> Msg:
        """Publish one message (`tag`: the one the SDK's core gave it, for an SDK client)."""
        rng, p = self.rng, self.p
        r, engine = pub.router, pub.router.engine
        tag = str(pub.published).encode() if tag is None else tag
        msg_id = outgoing_tag(pub.ident.container, pub.ident.name, tag).decode()
        if presettled is None:
            presettled = rng.random() < p.presettled
        override = None
        if pub.sdk is None:
            override = rng.choice([ALL, SOME]) if rng.random() < p.override else None
        if ttl_ms is False:
            ttl_ms = rng.randint(200, 3000) if rng.random() < p.ttl else None
        # What the origin knows right now: who is owed this message (read-only look-ups).
        local, remote = self._origin_view(pub)
        msg = self.checker.on_publish(pub, tag, msg_id, override or pub.mode, presettled,
                                      local, remote, ttl_ms)  # type: ignore[arg-type]
        msg.override = override
        pub.published += 1
        if not presettled:
            pub.undecided[tag] = msg
        self.log(f"publish {pub.label}#{msg.seq} {msg_id[:8]} mode {msg.mode} owed "
                 f"{sorted(msg.owed)}{' presettled' if presettled else ''}"
                 f"{f' ttl {ttl_ms}' if ttl_ms else ''}")
        if pub.sdk is not None:
            self.sdk_queued(pub, pub.payload(msg.seq))  # stored, then sent when its turn comes
            return msg
        pub.credit -= 1
        engine.handle(ev.MessageArrived(self.now, pub.link, tag, pub.payload(msg.seq),
                                        presettled, override, ttl_ms))  # type: ignore[arg-type]
        self.settle(r)
        if not presettled and not self.draining and rng.random() < p.early_settle:
            self.after(rng.uniform(0.0, 0.05), self._settle_delivery, pub, tag)
        return msg

    def _send_resends(self, pub: PubClient, epoch: int) -> None:
        """Send again, in order and within credit, what the publisher declared on attach."""
        if pub.detached or epoch != pub.epoch:
            return
        r = pub.router
        while pub.resend_queue and pub.credit > 0:
            tag = pub.resend_queue.popleft()
            msg = pub.undecided.get(tag)
            if msg is None or not msg.tracked:
                continue  # settled early meanwhile: not sent again
            local, remote, away = r.engine.matching(pub.topic)
            self.checker.on_resend(pub, msg, local, remote, away)
            pub.credit -= 1
            self.moves["resent"] += 1
            self.log(f"resend {pub.label}#{msg.seq} {msg.id[:8]} owed now {sorted(msg.owed)}")
            r.engine.handle(ev.MessageArrived(self.now, pub.link, tag, pub.payload(msg.seq),
                                              False, msg.override, msg.ttl_ms))
            self.settle(r)
            if pub.detached or epoch != pub.epoch:
                return

    def _settle_delivery(self, pub: PubClient, tag: bytes) -> None:
        if pub.detached:
            return
        if pub.decided.pop(tag, None) is None:
            msg = pub.undecided.pop(tag, None)
            if msg is None:
                return
            msg.early_settled = True  # before an outcome: stop tracking it (the seed's DELETE)
            self.log(f"{pub.label} settles {msg.id[:8]} early")
        pub.router.engine.handle(ev.PublisherSettled(self.now, pub.link, tag))
        self.settle(pub.router)

    # -- subscribers

    def _credit_loop(self, sub: SubClient, epoch: int) -> None:
        if sub.detached or epoch != sub.epoch:
            return
        target = max(sub.target, 5) if self.draining else sub.target
        if sub.sdk is not None:
            grant = self.sdk_credit(sub)
            if grant:
                sub.credit += grant
                sub.router.engine.handle(ev.SubscriberCredit(self.now, sub.link, sub.credit))
                self.settle(sub.router)
        elif sub.credit < target:
            sub.credit = target
            sub.router.engine.handle(ev.SubscriberCredit(self.now, sub.link, target))
            self.settle(sub.router)
        if self.draining:
            period = 0.05
        elif sub.stalled:
            period = self.rng.uniform(1.0, 3.0)
        else:
            period = self.rng.uniform(0.02, 0.4 if sub.slow else 0.1)
        self.after(period, self._credit_loop, sub, epoch)

    def _answer(self, sub: SubClient, tag: bytes, copy: int) -> None:
        held = sub.unanswered.get(tag)
        if sub.gone or held is None or held[0] != copy:
            return  # gone, or the router settled the copy meanwhile (expired or withdrawn)
        _, link, stored = held
        rng = self.rng
        msg = self.checker.msg_by_tag(tag)
        if stored is not None:
            disposition = stored  # the SDK answers a copy of one it answered from its store
        elif sub.flaky and not self.draining:
            disposition = rng.choices(
                [Disposition.ACCEPTED, Disposition.REJECTED, Disposition.RELEASED,
                 Disposition.MODIFIED, Disposition.UNDELIVERABLE], [70, 8, 12, 6, 4])[0]
        else:
            disposition = Disposition.ACCEPTED
        settled = True if stored is not None else rng.random() < 0.7
        del sub.unanswered[tag]
        on_wire = link == sub.link and not sub.detached
        if settled and on_wire:
            sub.router_unsettled.pop(tag, None)
        sub.said.setdefault(msg.id, set()).add(disposition)
        if stored is not None:
            self.checker.on_suppressed(sub, msg)
        elif disposition == Disposition.ACCEPTED:
            self.checker.on_processed(sub, msg)
            sub.answers[msg.id] = Disposition.ACCEPTED
            sub.accepted_at[msg.id] = self.now
        elif disposition == Disposition.REJECTED:
            sub.answers[msg.id] = Disposition.REJECTED
        elif disposition in (Disposition.RELEASED, Disposition.MODIFIED):
            sub.releases[msg.id] = sub.releases.get(msg.id, 0) + 1
        self.log(f"{sub.label} answers {msg.id[:8]} {disposition_name(disposition)}"
                 f"{' settled' if settled else ''}{' (again, from its store)' if stored else ''}"
                 f"{'' if on_wire else ' but its link is gone'}")
        if not on_wire:
            return
        sub.router.engine.handle(ev.CopyOutcome(self.now, sub.link, tag, disposition, settled,
                                                "the simulated subscriber says no"))
        self.settle(sub.router)

    # -- engine actions for a client

    def _to_client(self, client: PubClient | SubClient, action: Any) -> None:
        rng = self.rng
        if isinstance(action, CloseLink):
            raise Violation(f"{client.router.id} closed {client.label}'s current link "
                            f"{action.link}: {action}")
        if client.kind == "pub":
            pub: PubClient = client  # type: ignore[assignment]
            if isinstance(action, Credit):
                self.checker.on_credit(pub, action.amount)
                pub.credit += action.amount
                if pub.sdk is not None:
                    self.after(0.0, self.sdk_transmit, pub, pub.epoch)
                elif pub.resend_queue:
                    self.after(0.0, self._send_resends, pub, pub.epoch)
            elif isinstance(action, Decide):
                msg = pub.undecided.pop(action.tag, None)
                self.checker.on_decide(pub, action, msg)
                assert msg is not None
                self.log(f"{pub.label} told {str(action.outcome)[:160]} for #{msg.seq} "
                         f"{msg.id[:8]}")
                pub.decided[action.tag] = msg
                if pub.sdk is not None and not self.sdk_decided(pub, action):
                    return
                delay = rng.uniform(0.2, 1.0) if rng.random() < 0.1 else rng.uniform(0.001, 0.02)
                self.after(delay, self._settle_delivery, pub, action.tag)
            elif isinstance(action, Relayed):  # not an outcome: the message is still owed
                if action.tag not in pub.undecided:
                    raise Violation(f"{pub.label} told {action.tag!r} is stored by relays "
                                    "after its outcome, or for nothing it published")
                self.log(f"{pub.label} told {action.tag[:8]!r} is stored by relays")
                if pub.sdk is not None and pub.sdk.core.on_disposition(
                        action.tag, "received").wake:
                    self.after(0.0, self.sdk_transmit, pub, pub.epoch)
            else:
                raise Violation(f"{client.router.id} sent {action} on publisher link "
                                f"{pub.label}")
            return
        sub: SubClient = client  # type: ignore[assignment]
        if isinstance(action, Send):
            noted = sub.router.sent_from.pop(id(action), None)
            rec = noted[1] if noted is not None and noted[0] is action else None
            # The record's identity, not its number: an adopted record is numbered anew (publish
            # order) but is the same record. Pinned, so that no later record reuses the id.
            if rec is not None:
                self._records_seen.setdefault(id(rec), rec)
            msg = self.checker.on_send(sub, action, rec)
            sub.credit -= 1
            self.log(f"{sub.label} gets {msg.pub.key}#{msg.seq} {msg.id[:8]} attempt "
                     f"{action.attempt}{' settled' if action.settled else ''}")
            if sub.sdk is not None:
                self.sdk_delivery(sub, action, msg)
                return
            if action.settled:
                if sub.processed.get(msg.id) or action.tag in sub.unanswered:
                    # Processed already, or it still holds an earlier copy (which answers for
                    # this one, as the SDK does): not processed again.
                    self.checker.on_suppressed(sub, msg)
                else:
                    self.checker.on_processed(sub, msg)
                    sub.accepted_at[msg.id] = self.now
                return
            copy = sub.copies[msg.id]
            stored = sub.answers.get(msg.id)
            sub.unanswered[action.tag] = (copy, sub.link, stored)
            sub.router_unsettled[action.tag] = None
            if stored is not None:
                self.after(0.0, self._answer, sub, action.tag, copy)
                return
            delay = rng.uniform(0.2, 1.5) if sub.slow else rng.uniform(0.001, 0.02)
            self.after(delay, self._answer, sub, action.tag, copy)
        elif isinstance(action, SettleCopy):
            self.checker.on_settle_copy(sub, action)
            del sub.router_unsettled[action.tag]
            if sub.sdk is None:  # the SDK's application still holds it, and answers it
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
                f"{self.events} events; finished at t={done}{self.failover_summary()}"
                f"{self.mqtt.summary()}{self.amqp.summary()}")

    def failover_summary(self) -> str:
        """What moved, and what the subscribers' own duplicate suppression had to do (empty
        when nothing lost a link)."""
        if not any(self.moves.values()):
            return ""
        s = self.checker.stats
        return (f"; failover {self.moves}, {s.resent} resends ({s.rebuilt} rebuilt), "
                f"{s.raw_duplicates} raw duplicates ({s.suppressed} suppressed by subscribers),"
                f" {s.new_records} copies from a router's second record, "
                f"{s.failed_but_processed} failures naming a subscriber that had processed "
                f"({s.failed_in_doubt} named in doubt), "
                f"{s.timeout_failures} stayed-away failures ({s.timeout_checked} timed), "
                f"{s.lost_settled} at-most-once copies lost, {s.order_exempt} out of order "
                "across a publisher's move")


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


def run(params: Params, *, trace_lines: int | None = None) -> World:
    """Run one simulation; raise SimFailure (an AssertionError) if a property broke."""
    return World(params, trace_lines=trace_lines).run()


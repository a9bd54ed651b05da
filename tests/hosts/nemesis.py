"""Faults on the namespace hosts, drawn from a seeded schedule.

Kinds (each has a start, a duration and a heal, recorded in the history):

- `kill`: SIGKILL of a router's process group; the heal restarts it with the same
  configuration (a new incarnation) and waits until it is ready, linked to its neighbours
  and knows every subscriber again;
- `pause`: SIGSTOP of a router's process group for longer than the heartbeat; SIGCONT heals;
- `partition`: two hosts drop each other's packets (nftables, in both namespaces);
- `oneway`: packets from one host to another are dropped; the other direction flows;
- `isolate`: a router host and its client host are cut from every other host (the clients
  there still reach their router);
- `restart-isolated`: `isolate`, and the router is killed and restarted inside the cut;
- `lossy`: a link (two router hosts, or a router and its client host) drops
  `netns.LOSS_PERCENT` of its packets each way, at random (nftables `numgen random`);
- `flap`: a link goes down and up again, FLAP_PERIOD apart, for the fault's duration;
- `slow` (not in the default set, `--kinds` adds it): a router host's link is shaped to
  `netns.SLOW_RATE` each way (tc tbf), so packets queue for up to `netns.SLOW_LATENCY` and
  past that are dropped: the growing delay of a congested link.

Duplication and reordering of packets are not injected: TCP below every link removes them
(the mesh's own frames are dropped, duplicated and reordered by the simulator instead,
`router/sim`). A fixed delay needs netem, which this kernel lacks; `slow` is the delay the
kernel can make.

A scenario may register more kinds (`Nemesis.actions`): a function taking the fault's plan
and returning the heal. After each heal the nemesis waits (on the history, with deadlines)
until every subscriber processed a message published after the heal, and until every
message published before it has an outcome; then it starts the next fault. Only the fault
durations are timed waits.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tests.hosts.history import Fault, History
from tests.hosts.netns import SLOW_LATENCY, SLOW_RATE, Testbed
from tests.hosts.routers import RouterHost

KINDS = ("kill", "pause", "partition", "oneway", "isolate", "lossy", "flap")
MORE_KINDS = ("restart-isolated", "slow")  # (and `pubkill`, which a scenario defines)
# Seconds a fault lasts, drawn uniformly: around the test bed's unreachable-timeout (3 s), so
# some partitions heal before routers give up on each other and some after.
DURATIONS: dict[str, tuple[float, float]] = {
    "kill": (0.5, 2.5), "pause": (1.5, 4.0), "partition": (1.5, 5.0),
    "oneway": (1.5, 5.0), "isolate": (1.5, 5.0), "pubkill": (0.5, 1.5),
    # long enough for its clients to come round to it again (a connection attempt to a host
    # that drops packets is given up after 5 s, amqp_edge/sdk_core.py ATTEMPT_TIMEOUT)
    "restart-isolated": (13.0, 15.0),
    "lossy": (3.0, 6.0), "flap": (2.0, 5.0), "slow": (3.0, 6.0),
}
FLAP_PERIOD = (0.2, 0.8)  # seconds between a flapping link's changes, drawn per change

Heal = Callable[[], None]


@dataclass(frozen=True)
class Plan:
    kind: str
    targets: tuple[str, ...]  # host names
    duration: float


@dataclass(frozen=True)
class Layout:
    """What the nemesis may pick from: router hosts, each router host's client host, and
    the links of the topology (pairs of router hosts)."""

    routers: Sequence[str]
    client_of: Mapping[str, str]
    links: Sequence[tuple[str, str]]


def schedule(seed: int, cycles: int, layout: Layout, kinds: Sequence[str] = KINDS,
             extra_targets: Mapping[str, Sequence[tuple[str, ...]]] | None = None
             ) -> list[Plan]:
    """`cycles` rounds of every kind in `kinds`, each round in a seeded order."""
    rng = random.Random(seed)
    pairs = [tuple(link) for link in layout.links] + [
        (r, layout.client_of[r]) for r in layout.routers if r in layout.client_of]
    plans = []
    for _ in range(cycles):
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            low, high = DURATIONS.get(kind, (1.0, 3.0))
            duration = round(rng.uniform(low, high), 2)
            if kind in ("kill", "pause", "slow"):
                targets: tuple[str, ...] = (rng.choice(list(layout.routers)),)
            elif kind in ("partition", "lossy", "flap"):
                targets = tuple(rng.choice(pairs))
            elif kind == "oneway":
                a, b = rng.choice(pairs)
                targets = (a, b) if rng.random() < 0.5 else (b, a)
            elif kind in ("isolate", "restart-isolated"):
                r = rng.choice(list(layout.routers))
                targets = (r, layout.client_of[r]) if r in layout.client_of else (r,)
            elif extra_targets and kind in extra_targets:
                targets = tuple(rng.choice(list(extra_targets[kind])))
            else:
                raise ValueError(f"unknown fault kind {kind!r}")
            plans.append(Plan(kind, targets, duration))
    return plans


class Nemesis:
    def __init__(self, bed: Testbed, routers: Mapping[str, RouterHost],
                 history: History, recovery_timeout: float = 30.0,
                 links: Sequence[tuple[str, str]] = ()) -> None:
        self.bed = bed
        self.routers = routers  # by host name
        self.links = links  # between router hosts
        self.history = history
        self.recovery_timeout = recovery_timeout
        self.stop = threading.Event()
        self.actions: dict[str, Callable[[Plan], Heal]] = {
            "kill": self._kill, "pause": self._pause, "partition": self._partition,
            "oneway": self._oneway, "isolate": self._isolate,
            "restart-isolated": self._restart_isolated,
            "lossy": self._lossy, "flap": self._flap, "slow": self._slow,
        }

    def run(self, plans: Sequence[Plan], log: Callable[[str], None] = print) -> None:
        for plan in plans:
            if self.stop.is_set():
                return
            self.inject(plan, log)

    def inject(self, plan: Plan, log: Callable[[str], None] = print) -> Fault:
        fault = self.history.add_fault(Fault(plan.kind, list(plan.targets), time.monotonic(),
                                             detail=self.describe(plan)))
        heal = self.actions[plan.kind](plan)
        log(f"nemesis: {fault.detail} for {plan.duration:.2f} s")
        try:
            # The fault's duration: the one timed wait of the test bed.
            self.stop.wait(plan.duration)
        finally:
            heal_at = fault.heal = time.monotonic()
            heal()
            fault.healed = time.monotonic()
        recovered = self.history.wait(
            lambda h: h.every_sub_got_one_published_after(heal_at), self.recovery_timeout,
            "recovery")
        recovered_in = self.history.recovery(heal_at)
        # Then let it settle: every message published before the heal has its outcome, so
        # that the next fault starts from a quiet mesh and the history says which fault
        # each failure belongs to.
        settled = self.history.wait(lambda h: h.outcomes_before(heal_at),
                                    self.recovery_timeout, "outcomes")
        fault.settled = time.monotonic()
        log("nemesis: healed; " + (f"recovered in {recovered_in:.2f} s" if recovered
                                    and recovered_in is not None
                                    else "NOT recovered") +
            f", settled in {fault.settled - heal_at:.2f} s"
            + ("" if settled else " (messages still without an outcome)"))
        return fault

    def describe(self, plan: Plan) -> str:
        names = [self._name(t) for t in plan.targets]
        if plan.kind == "kill":
            return f"SIGKILL {names[0]}, restart"
        if plan.kind == "pause":
            return f"SIGSTOP {names[0]}, SIGCONT"
        if plan.kind == "partition":
            return f"partition {names[0]} | {names[1]}"
        if plan.kind == "oneway":
            return f"drop {names[0]} -> {names[1]}"
        if plan.kind == "isolate":
            return f"isolate {' + '.join(names)}"
        if plan.kind == "lossy":
            return f"lose packets {names[0]} <-> {names[1]}"
        if plan.kind == "flap":
            return f"flap {names[0]} <-> {names[1]}"
        if plan.kind == "slow":
            return f"slow {names[0]}'s link to {SLOW_RATE} (queue up to {SLOW_LATENCY})"
        if plan.kind == "restart-isolated":
            return f"isolate {' + '.join(names)}, SIGKILL and restart {names[0]} inside"
        return f"{plan.kind} {' '.join(names)}"

    def _name(self, host: str) -> str:
        router = self.routers.get(host)
        return f"{host}(router {router.id})" if router is not None else host

    # ------------------------------------------------------------------ the kinds

    def _kill(self, plan: Plan) -> Heal:
        host = plan.targets[0]
        router = self.routers[host]
        router.kill()

        def heal() -> None:
            # Healed once it is back in the mesh: started, linked to its neighbours and told
            # every subscriber, so that the next fault never cuts off a router that knows
            # nobody yet (that is the `restart-isolated` kind: docs/testbed.md, "Findings").
            router.start()
            for a, b in self.links:
                if host in (a, b):
                    peer = self.routers[b if a == host else a]
                    router.wait_logged(f"router {router.id}: link to {peer.id} up", 30)
            router.wait_knows(self.history.subscribers, 30)

        return heal

    def _restart_isolated(self, plan: Plan) -> Heal:
        """Cut a router host and its client host off (as `isolate`), then SIGKILL the router
        and start it again inside the cut: it comes back knowing no subscriber but those
        attached to it. Healed by joining the hosts again."""
        heal_cut = self._isolate(plan)
        router = self.routers[plan.targets[0]]
        router.kill()
        router.start()
        return heal_cut

    def _pause(self, plan: Plan) -> Heal:
        router = self.routers[plan.targets[0]]
        router.pause()
        return router.resume

    def _cut(self, pairs: Sequence[tuple[str, str]]) -> Heal:
        for src, dst in pairs:
            self.bed.block(src, dst)

        def heal() -> None:
            for src, dst in pairs:
                self.bed.unblock(src, dst)

        return heal

    def _partition(self, plan: Plan) -> Heal:
        a, b = plan.targets
        return self._cut([(a, b), (b, a)])

    def _oneway(self, plan: Plan) -> Heal:
        a, b = plan.targets
        return self._cut([(a, b)])

    def _lossy(self, plan: Plan) -> Heal:
        a, b = plan.targets
        self.bed.impair(a, b)
        self.bed.impair(b, a)

        def heal() -> None:
            self.bed.unimpair(a, b)
            self.bed.unimpair(b, a)

        return heal

    def _slow(self, plan: Plan) -> Heal:
        host = plan.targets[0]
        self.bed.slow(host)
        return lambda: self.bed.unslow(host)

    def _flap(self, plan: Plan) -> Heal:
        """Cut and join the link in turn (from a seeded generator) until healed; it ends
        joined."""
        a, b = plan.targets
        rng = random.Random(repr(plan))  # str seeds are hashed with SHA-512: reproducible
        done = threading.Event()

        def flap() -> None:
            cut = False
            while not done.wait(rng.uniform(*FLAP_PERIOD)):
                for src, dst in ((a, b), (b, a)):
                    (self.bed.unblock if cut else self.bed.block)(src, dst)
                cut = not cut
            if cut:
                for src, dst in ((a, b), (b, a)):
                    self.bed.unblock(src, dst)

        thread = threading.Thread(target=flap, name="flap", daemon=True)
        thread.start()

        def heal() -> None:
            done.set()
            thread.join(10)

        return heal

    def _isolate(self, plan: Plan) -> Heal:
        inside = set(plan.targets)
        outside = [h for h in self.bed.hosts if h not in inside]
        return self._cut([(a, b) for a in inside for b in outside] +
                         [(b, a) for a in inside for b in outside])

"""The properties a simulated cluster must keep, asserted as it runs and once it has drained.

From docs/guarantees.md and the design notes ("Properties that must always hold"):

1. A publisher told `accepted` in mode `all`: every subscriber owed the message accepted it,
   exactly once. In mode `some`: at least one did. "Owed" is what the origin router knew when
   the message arrived: its local subscribers that matched, plus the (router, key) pairs its
   remote subscription index matched, read from the origin engine just before `message()`
   (and cross-checked against the `Forward` action it then emits).
2. No subscriber processes a message twice: a second copy only as a redelivery it asked for
   (it released or modified the copy before), with `attempt` counting the earlier copies.
   Nobody gets a message it was not owed.
3. Per publisher, every subscriber sees first deliveries in publish order.
4. Every failure outcome names who failed (`exactmesh:delivery-failed`, `failed` non-empty,
   only owed subscribers, each named in the description); `succeeded` lists only subscribers
   that really accepted; mode `some` fails only if nobody is listed as succeeded.
5. After the faults stop, the network heals and time runs on: every publisher delivery has an
   outcome, every engine holds no record, every transfer channel has nothing in flight, every
   copy sent unsettled was settled, and no publisher link holds more than its window.

A `Violation` carries one sentence; `World` adds the seed, the parameters and a replay command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from router.actions import Accepted, Decide, Forward, Rejected, Send, SettleCopy, Verdict
from router.engine import DELIVERY_FAILED
from router.records import ALL

if TYPE_CHECKING:
    from .world import PubClient, SimRouter, SubClient, World


class Violation(AssertionError):
    """A property of the mesh did not hold."""


@dataclass
class Msg:
    """One publisher delivery, as the checker knows it."""

    id: str  # the delivery id: outgoing tag in hex, the same on every router
    pub: PubClient
    tag: bytes
    seq: int  # publish order on its publisher link, from 1
    mode: str
    presettled: bool
    owed: dict[str, SubClient]  # label -> subscriber
    owed_remote: dict[str, list[str]]  # router -> labels there (what Forward must say)
    published_at: float
    ttl_ms: int | None
    outcome: Any = None
    decided_at: float | None = None
    early_settled: bool = False  # the publisher settled before an outcome (stop tracking)
    publisher_gone: bool = False  # the publisher detached before an outcome
    forwarded: bool = False

    @property
    def tracked(self) -> bool:
        """Whether an outcome is owed to the publisher."""
        return not (self.presettled or self.early_settled or self.publisher_gone)


@dataclass
class Stats:
    published: int = 0
    accepted: int = 0
    rejected: int = 0
    first_deliveries: int = 0
    redeliveries: int = 0
    processed: int = 0
    stray_actions: int = 0
    notes: list[str] = field(default_factory=list)


class Checker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.msgs: dict[str, Msg] = {}
        self.subs_by_label: dict[str, SubClient] = {}
        self.subs_by_key: dict[str, SubClient] = {}
        self.stats = Stats()

    # ------------------------------------------------------------------ helpers

    def fail(self, what: str) -> None:
        raise Violation(f"t={self.world.now:.6f}: {what}")

    def note(self, what: str) -> None:
        if len(self.stats.notes) < 50:
            self.stats.notes.append(f"t={self.world.now:.6f}: {what}")

    def register_sub(self, sub: SubClient) -> None:
        self.subs_by_label[sub.label] = sub
        self.subs_by_key[sub.key] = sub

    def msg_by_tag(self, tag: bytes) -> Msg:
        msg = self.msgs.get(tag.decode())
        if msg is None:
            self.fail(f"a copy with tag {tag!r} that no publisher sent")
        return msg

    # ------------------------------------------------------------------ publishing

    def on_publish(
        self,
        pub: PubClient,
        tag: bytes,
        msg_id: str,
        mode: str,
        presettled: bool,
        local: tuple[int, ...],
        remote: tuple[tuple[str, str], ...],
        ttl_ms: int | None,
    ) -> Msg:
        """Called just before the origin engine's `message()`, with what its indexes match."""
        owed: dict[str, SubClient] = {}
        for link in local:
            sub = self.world.clients.get(link)
            if sub is None or sub.kind != "sub" or sub.router is not pub.router:
                self.fail(f"origin {pub.router.id} matched local link {link}, not a subscriber")
            owed[sub.label] = sub
        owed_remote: dict[str, list[str]] = {}
        for router, key in remote:
            sub = self.subs_by_key.get(key)
            if sub is None or sub.router.id != router:
                self.fail(f"{pub.router.id} knows a subscriber {key}@{router} that never "
                          "attached there (gossip invented it)")
            if router == pub.router.id:
                self.fail(f"{pub.router.id} lists its own subscriber {key} as remote")
            owed[sub.label] = sub
            owed_remote.setdefault(router, []).append(sub.label)
        if msg_id in self.msgs:
            self.fail(f"delivery id {msg_id} used twice")
        self.stats.published += 1
        msg = Msg(msg_id, pub, tag, pub.published + 1, mode, presettled, owed, owed_remote,
                  self.world.now, ttl_ms)
        self.msgs[msg_id] = msg
        return msg

    def on_forward(self, router: SimRouter, action: Forward) -> None:
        msg = self.msgs.get(action.msg_id)
        if msg is None:
            self.fail(f"{router.id} forwards {action.msg_id}, which no publisher sent")
        if msg.pub.router is not router:
            self.fail(f"{router.id} forwards {msg.id}, published at {msg.pub.router.id}")
        if msg.forwarded:
            self.fail(f"{router.id} forwards {msg.id} twice")
        msg.forwarded = True
        said = {r: sorted(f"{k}@{r}" for k in keys) for r, keys in action.owed.items()}
        meant = {r: sorted(labels) for r, labels in msg.owed_remote.items()}
        if said != meant:
            self.fail(f"{router.id}'s Forward of {msg.id} owes {said}, its index matched {meant}")

    def on_verdict(self, router: SimRouter, action: Verdict) -> None:
        msg = self.msgs.get(action.msg_id)
        if msg is None:
            self.fail(f"{router.id} gives a verdict on {action.msg_id}, which nobody sent")
        self._check_status(msg, action.status, f"{router.id}'s verdict on {msg.id}")
        for label in action.status.get("failed", ()):
            if not label.endswith(f"@{router.id}"):
                self.fail(f"{router.id}'s verdict on {msg.id} fails {label} of another router")

    def _check_status(self, msg: Msg, status: dict[str, Any], where: str) -> None:
        for label in status.get("succeeded", ()):
            sub = self.subs_by_label.get(label)
            if sub is None or not sub.processed.get(msg.id):
                self.fail(f"{where} lists {label} as succeeded, but it never accepted it")
            if label not in msg.owed:
                self.fail(f"{where} lists {label} as succeeded, but it was not owed the message")
        for key in ("failed", "pending"):
            for label in status.get(key, ()):
                if label not in msg.owed:
                    self.fail(f"{where} lists {label} as {key}, but it was not owed the message "
                              f"(owed: {sorted(msg.owed)})")

    # ------------------------------------------------------------------ subscribers

    def on_send(self, sub: SubClient, send: Send) -> Msg:
        msg = self.msg_by_tag(send.tag)
        if sub.detached:
            self.fail(f"{sub.label} got {msg.id} after it detached")
        if sub.label not in msg.owed:
            self.fail(f"{sub.label} got {msg.id} (publisher {msg.pub.label}, seq {msg.seq}), "
                      f"which it was not owed (owed: {sorted(msg.owed)})")
        if send.payload != msg.pub.payload(msg.seq):
            self.fail(f"{sub.label} got {msg.id} with payload {send.payload!r}")
        if sub.credit <= 0:
            self.fail(f"{sub.label} got {msg.id} without credit")
        copies = sub.copies.get(msg.id, 0)
        if sub.processed.get(msg.id):
            self.fail(f"{sub.label} got {msg.id} again (attempt {send.attempt}) after it had "
                      "accepted it: a duplicate")
        if copies != sub.releases.get(msg.id, 0):
            self.fail(f"{sub.label} got {msg.id} a {copies + 1}. time, having asked for "
                      f"{sub.releases.get(msg.id, 0)} redeliveries: a duplicate not asked for")
        if send.attempt != copies:
            self.fail(f"{sub.label} got copy {copies + 1} of {msg.id} flagged attempt "
                      f"{send.attempt}")
        # A pre-settled publisher delivery goes pre-settled to local subscribers only: other
        # routers deliver it unsettled (best effort there too).
        settled = sub.presettled or (msg.presettled and msg.pub.router is sub.router)
        if send.settled != settled:
            self.fail(f"{sub.label} got {msg.id} settled={send.settled}, expected {settled}")
        sub.copies[msg.id] = copies + 1
        if copies == 0:
            self.stats.first_deliveries += 1
            last = sub.last_seq.get(msg.pub.label, 0)
            if msg.seq <= last:
                self.fail(f"{sub.label} got first deliveries out of publish order: "
                          f"{msg.pub.label} seq {msg.seq} after seq {last}")
            sub.last_seq[msg.pub.label] = msg.seq
        else:
            self.stats.redeliveries += 1
        return msg

    def on_processed(self, sub: SubClient, msg: Msg) -> None:
        """The subscriber accepted the message (or took a pre-settled copy): it processed it."""
        n = sub.processed.get(msg.id, 0)
        if n:
            self.fail(f"{sub.label} processed {msg.id} twice")
        sub.processed[msg.id] = 1
        self.stats.processed += 1

    def on_settle_copy(self, sub: SubClient, action: SettleCopy) -> None:
        if action.tag not in sub.router_unsettled:
            self.fail(f"router settled copy {action.tag!r} on {sub.label}, which was not "
                      "unsettled on its side")

    # ------------------------------------------------------------------ publishers

    def on_decide(self, pub: PubClient, action: Decide, msg: Msg | None) -> None:
        if pub.detached:
            self.fail(f"outcome for {pub.label} after it detached")
        if msg is None:
            self.fail(f"outcome for tag {action.tag!r} that {pub.label} never sent")
        if msg.outcome is not None:
            self.fail(f"two outcomes for {msg.id} of {pub.label}")
        if msg.presettled:
            self.fail(f"outcome for pre-settled {msg.id} of {pub.label}")
        if msg.early_settled:
            self.fail(f"outcome for {msg.id} of {pub.label}, which it had settled early")
        msg.outcome = action.outcome
        msg.decided_at = self.world.now
        out = action.outcome
        if isinstance(out, Accepted):
            self.stats.accepted += 1
            if msg.mode == ALL:
                for label, sub in msg.owed.items():
                    if sub.processed.get(msg.id) != 1:
                        self.fail(f"{pub.label} told accepted for {msg.id} (mode all, owed "
                                  f"{sorted(msg.owed)}) but {label} did not accept it")
            elif msg.owed and not any(s.processed.get(msg.id) for s in msg.owed.values()):
                self.fail(f"{pub.label} told accepted for {msg.id} (mode some) but none of "
                          f"{sorted(msg.owed)} accepted it")
        elif isinstance(out, Rejected):
            self.stats.rejected += 1
            if out.condition != DELIVERY_FAILED:
                if not msg.owed:
                    return  # no-subscribers policy: not what this simulation configures
                self.fail(f"{pub.label}'s {msg.id} failed with {out.condition}: {out}")
            info = out.info
            failed = list(info.get("failed", ()))
            if not failed:
                self.fail(f"{pub.label}'s {msg.id} failed without naming who failed: {out}")
            for label in failed:
                if label not in out.description:
                    self.fail(f"failure of {msg.id} does not name {label} in its description")
                if label not in info.get("reasons", {}):
                    self.fail(f"failure of {msg.id} gives no reason for {label}")
            self._check_status(msg, info, f"{pub.label}'s outcome for {msg.id}")
            if msg.mode != ALL and info.get("succeeded"):
                self.fail(f"{msg.id} (mode some) failed although {info['succeeded']} succeeded")
            if info.get("delivery_id") != msg.id:
                self.fail(f"failure of {msg.id} carries delivery_id {info.get('delivery_id')}")
        else:
            self.fail(f"{pub.label} got outcome {out!r}")

    def on_credit(self, pub: PubClient, amount: int) -> None:
        if pub.detached:
            self.fail(f"credit for {pub.label} after it detached")
        if amount <= 0:
            self.fail(f"credit {amount} for {pub.label}")

    def check_router(self, router: SimRouter) -> None:
        window = router.engine.config.publisher_window
        for p in router.engine.publishers.values():
            if p.live + p.credit_out > window:
                self.fail(f"publisher {p.label} holds {p.live} records + {p.credit_out} credit "
                          f"> window {window}")

    def stray(self, router: SimRouter, action: Any) -> None:
        """An action for a link that is gone. The real node drops these; a Send or an outcome
        would be a copy or an answer lost without anybody being told."""
        self.stats.stray_actions += 1
        if isinstance(action, Send | Decide):
            self.fail(f"{router.id} acted on link {action.link}, which is gone: {action}")

    # ------------------------------------------------------------------ the end

    def final(self, world: World) -> None:
        """Property 5, once the network is whole and time has run on."""
        problems: list[str] = []
        for pub in world.publishers():
            if pub.detached:
                continue
            for msg in pub.undecided.values():
                if msg.tracked and msg.outcome is None:
                    problems.append(f"{pub.label}'s {msg.id} (seq {msg.seq}, owed "
                                    f"{sorted(msg.owed)}, published t={msg.published_at:.3f}) "
                                    "never got an outcome")
            if pub.decided:
                problems.append(f"{pub.label} still holds {len(pub.decided)} decided deliveries "
                                "(simulation bug)")
        for sub in world.subscribers():
            if sub.detached:
                continue
            if sub.unanswered:
                problems.append(f"{sub.label} still has {len(sub.unanswered)} unanswered copies")
            if sub.router_unsettled:
                tags = [self.msgs[t.decode()].id for t in sub.router_unsettled]
                problems.append(f"router never settled copies {tags} on {sub.label}")
        for r in world.routers.values():
            eng = r.engine
            for rec in eng.records.values():
                problems.append(f"{r.id} still holds record {describe_record(rec)}")
            stale = sorted(k for k in eng._mesh_records if eng._mesh_records[k].seq
                           not in eng.records)
            if stale:
                problems.append(f"{r.id} keeps mesh records it forgot: {stale}")
            for p in eng.publishers.values():
                if p.live:
                    problems.append(f"{r.id}: publisher {p.label} still holds {p.live} records")
            n = r.mesh.transfer.in_flight()
            if n:
                chans = {d: r.mesh.transfer.unacked(d) for d in sorted(world.routers)}
                problems.append(f"{r.id}'s transfer still has {n} items in flight: {chans}")
        for msg in self.msgs.values():
            if msg.ttl_ms and msg.decided_at is not None:
                # The origin fails what is still pending when the ttl runs out (docs: checked
                # within 50 ms of the deadline), wherever the subscribers are.
                late = msg.decided_at - (msg.published_at + msg.ttl_ms / 1000.0)
                if late > 0.05:
                    problems.append(f"{msg.id} with ttl {msg.ttl_ms} ms published "
                                    f"t={msg.published_at:.3f} got its outcome only at "
                                    f"t={msg.decided_at:.3f}")
            if isinstance(msg.outcome, Accepted) and msg.mode == ALL:
                for label, sub in msg.owed.items():
                    if sub.processed.get(msg.id) != 1:
                        problems.append(f"{msg.id} accepted but {label} processed it "
                                        f"{sub.processed.get(msg.id, 0)} times")
        if problems:
            shown = problems[:12]
            more = f"\n  … and {len(problems) - 12} more" if len(problems) > 12 else ""
            self.fail("after healing and draining:\n  " + "\n  ".join(shown) + more)


def describe_record(rec: Any) -> str:
    """One line about a live engine record, for a person reading a failure."""
    copies = ", ".join(f"{c.sub.label}:{c.state.name}" for c in rec.copies.values())
    peers = ", ".join(f"{p.router}:{p.state.name}" for p in rec.peers.values())
    who = rec.publisher.label if rec.publisher is not None else f"origin {rec.origin}"
    return (f"{rec.id[:8]} from {who}: outcome={rec.outcome!s:.20} pub_settled={rec.pub_settled} "
            f"pending={rec.pending} copies[{copies}] peers[{peers}]")

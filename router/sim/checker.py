"""The properties a simulated cluster must keep, asserted as it runs and once it has drained.

From docs/guarantees.md and the design notes ("Properties that must always hold"). Subscribers
are named by their key (`container/link`): a survivor keeps its key when it moves to another
router, and outcomes name it `key@router` with the router it was (last) owed at.

1. A publisher told `accepted` in mode `all`: every subscriber owed the message processed it,
   exactly once. In mode `some`: at least one did. "Owed" is what the origin router knew when
   the message arrived: its local subscribers that matched, plus the (router, key) pairs its
   remote subscription index matched (router "" for a warm subscriber away from a lost
   router), read from the origin engine just before `message()` (and cross-checked against
   the `Forward` action it then emits). A publisher that resends a message after losing its
   link (failover) adds who its new router matches then.
2. No subscriber processes a message twice. A *strict* subscriber (it never lost a link: it
   never moved and its router never crashed under it) must not even get a second copy, except
   a redelivery it asked for (it released or modified the copy before), with `attempt`
   counting the earlier copies. One that lost a link may get copies of what it answered
   already (its answer may have died with the link): it answers them from its store without
   processing them, as the SDK does (counted: raw duplicates, suppressed). Nobody gets a
   message it was not owed.
3. Per publisher, every subscriber gets first deliveries in publish order, across its moves
   (what a warm subscriber missed while away comes before anything newer).
4. Every failure outcome names who failed (`exactmesh:delivery-failed`, `failed` non-empty,
   only owed subscribers, each named in the description with a reason); `succeeded` lists
   only subscribers that really accepted; mode `some` fails only if nobody is listed as
   succeeded. The reason must be true of that subscriber: it rejected (released, refused) the
   message, its ttl ran out, it left, its router restarted or was out of reach, or it stayed
   away longer than its timeout (checked against the time it really was away when the network
   is clean). A strict subscriber named as failed must not have processed the message, unless
   the reason is a ttl or a router that went (restarted, out of reach): its answer was still
   on its way.
5. After the faults stop, the network heals and time runs on: every publisher delivery has an
   outcome, every engine holds no record, every transfer channel has nothing in flight, every
   copy sent unsettled was settled, and no publisher link holds more than its window.

A `Violation` carries one sentence; `World` adds the seed, the parameters and a replay command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from router.core.actions import Accepted, Decide, Forward, Rejected, Send, SettleCopy, Verdict
from router.core.engine import DELIVERY_FAILED, Disposition
from router.core.records import ALL, IN_DOUBT

if TYPE_CHECKING:
    from .world import PubClient, SimRouter, SubClient, World

AWAY_SLACK = 0.1  # on a clean network, how late news of a re-attach may reach a router
TIMEOUT_REASON = re.compile(r"did not (?:come back|reattach) within ([0-9.]+) s")


class Violation(AssertionError):
    """A property of the mesh did not hold."""


def key_of(label: str) -> str:
    """`container/link@router` -> `container/link`."""
    return label.rsplit("@", 1)[0]


def router_of(label: str) -> str:
    return label.rsplit("@", 1)[1] if "@" in label else ""


@dataclass
class Msg:
    """One publisher delivery, as the checker knows it."""

    id: str  # the delivery id: outgoing tag in hex, the same on every router
    pub: PubClient
    tag: bytes
    seq: int  # publish order on its publisher link, from 1
    mode: str
    presettled: bool
    owed: dict[str, SubClient]  # key -> subscriber, at any arrival (publish or resend)
    owed_remote: dict[str, list[str]]  # router -> keys there, first arrival (for its Forward)
    published_at: float
    ttl_ms: int | None
    origin: SimRouter | None = None  # the router it was first published at
    override: str | None = None  # its per-message delivery mode
    outcome: Any = None
    decided_at: float | None = None
    early_settled: bool = False  # the publisher settled before an outcome (stop tracking)
    publisher_gone: bool = False  # the publisher left for good before an outcome
    forwarded: bool = False
    sent_at: float = 0.0  # its latest send (a resend restarts its ttl at a new origin)
    sent_from: tuple[str, int] = ("", 0)  # the router (and incarnation) of its latest send
    # (router, incarnation) -> its publisher's stint (see `stint`) at its latest send there
    stints: dict[tuple[str, int], int] = field(default_factory=dict)
    resends: int = 0
    # Who must have processed it for an `accepted` outcome (mode all): who was owed it when
    # it was first published; after a resend the mesh had to rebuild that (see on_resend),
    # who the new origin could know of then.
    required: dict[str, SubClient] = field(default_factory=dict)
    original: frozenset[str] = frozenset()  # keys owed when first published
    # Keys owed it only because a resend was rebuilt at another router: they may get it out
    # of publish order (they were not owed it when it was published).
    extras: set[str] = field(default_factory=set)
    rebuilt: bool = False  # resent where its origin's own record could not answer for it
    # Resent after its publisher had been away from the router holding its record longer
    # than reconnect-timeout: the mesh may have given it up, and the resend is a new
    # publication (docs/guarantees.md), whose failure may name a subscriber that processed
    # the given-up one.
    late: bool = False
    # When it took its place in its publisher's order: when it was published, or when its
    # publisher resent it after the mesh had given it up (see on_resend).
    order_at: float = 0.0
    # (router, incarnation) -> `required` while that router was its origin.
    eras: dict[tuple[str, int], dict[str, SubClient]] = field(default_factory=dict)

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
    # failover
    resent: int = 0
    raw_duplicates: int = 0  # copies of messages the subscriber had processed (movers only)
    suppressed: int = 0  # answered from the subscriber's store without processing
    failed_but_processed: int = 0  # named failed though it processed it (its answer was lost)
    failed_in_doubt: int = 0  # named failed, in doubt (it may have processed it)
    timeout_failures: int = 0  # failures naming a subscriber that stayed away too long
    timeout_checked: int = 0  # ... of which the time away was checked
    rebuilt: int = 0  # resends whose owed set the mesh had to rebuild
    lost_settled: int = 0  # at-most-once copies lost with a dropped connection
    order_exempt: int = 0  # out of order across a publisher's move (different origins)
    republished: int = 0  # resends after the mesh gave the message up (reconnect-timeout)
    new_records: int = 0  # copies from a router's second record of a message (late resend)
    unknown_reasons: int = 0
    notes: list[str] = field(default_factory=list)


class Checker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.msgs: dict[str, Msg] = {}
        self.by_seq: dict[tuple[str, int], Msg] = {}  # (publisher key, seq) -> its message
        self.subs_by_key: dict[str, SubClient] = {}
        # (subscriber key, publisher key) -> the stint its last first delivery was sent in
        self.last_stint: dict[tuple[str, str], int] = {}
        self.stats = Stats()

    # ------------------------------------------------------------------ helpers

    def fail(self, what: str) -> None:
        raise Violation(f"t={self.world.now:.6f}: {what}")

    def note(self, what: str) -> None:
        if len(self.stats.notes) < 50:
            self.stats.notes.append(f"t={self.world.now:.6f}: {what}")

    def register_sub(self, sub: SubClient) -> None:
        self.subs_by_key[sub.key] = sub

    def on_gone(self, sub: SubClient) -> None:
        """`sub` closed its link, or died: it will not attach again."""

    def msg_by_tag(self, tag: bytes) -> Msg:
        msg = self.msgs.get(tag.decode())
        if msg is None:
            self.fail(f"a copy with tag {tag!r} that no publisher sent")
        return msg

    def _router_down_since(self, since: float) -> bool:
        """Some router was down (crashed, not yet restarted and gossiping) at a moment from
        `since` to now: news that had to pass through it was held up, however clean the
        network."""
        world = self.world
        late = self.world.p.gossip_interval + AWAY_SLACK  # a restarted router's first gossip
        for router, crashes in world.crashed.items():
            restarts = world.restarted.get(router, [])
            for i, down in enumerate(crashes):
                up = restarts[i] + late if i < len(restarts) else float("inf")
                if down <= world.now and up >= since:
                    return True
        return False

    @staticmethod
    def stint(pub: PubClient) -> int:
        """How many times the publisher attached at another router than its previous one: a
        move and a move back make its latest router its new one again."""
        return sum(1 for a, b in pairwise(pub.history) if a != b)

    def _network_clean(self) -> bool:
        """No loss, partition or reordering: news (gossip) travels in milliseconds."""
        p = self.world.p
        return not (p.drop or p.dup or p.reorder or self.world.ever_cut)

    # ------------------------------------------------------------------ publishing

    def _owed_now(
        self, pub: PubClient, local: tuple[int, ...], remote: tuple[tuple[str, str], ...]
    ) -> tuple[dict[str, SubClient], dict[str, list[str]]]:
        """Who the publisher's router matches now: local subscriber sids and remote
        (router, key) pairs, checked against where those subscribers really attached."""
        owed: dict[str, SubClient] = {}
        here = pub.router.id
        for sid in local:
            sub = self.world.clients.get(sid)
            if sub is None or sub.kind != "sub" or here not in sub.history:
                self.fail(f"origin {here} matched local link {sid}, not a subscriber of it")
            if sub.strict and (sub.router is not pub.router or sub.detached):
                self.fail(f"origin {here} matched {sub.label}, which is attached elsewhere")
            owed[sub.key] = sub
        owed_remote: dict[str, list[str]] = {}
        for router, key in remote:
            sub = self.subs_by_key.get(key)
            if sub is None or (router and router not in sub.history):
                self.fail(f"{here} knows a subscriber {key}@{router} that never attached "
                          "there (gossip invented it)")
            if not router and not sub.warm:
                self.fail(f"{here} keeps {key} matchable while away, but it is not warm")
            if router == here and sub.strict:
                self.fail(f"{here} lists its own subscriber {key} as remote")
            owed[key] = sub
            owed_remote.setdefault(router, []).append(key)
        return owed, owed_remote

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
        owed, owed_remote = self._owed_now(pub, local, remote)
        if msg_id in self.msgs:
            self.fail(f"delivery id {msg_id} used twice")
        self.stats.published += 1
        msg = Msg(msg_id, pub, tag, pub.published + 1, mode, presettled, owed, owed_remote,
                  self.world.now, ttl_ms, origin=pub.router, sent_at=self.world.now,
                  required=dict(owed), original=frozenset(owed))
        msg.eras[(pub.router.id, pub.router.inc)] = msg.required
        msg.sent_from = (pub.router.id, pub.router.inc)
        msg.stints[msg.sent_from] = self.stint(pub)
        msg.order_at = self.world.now
        self.msgs[msg_id] = msg
        self.by_seq[(pub.key, msg.seq)] = msg
        return msg

    def on_resend(self, pub: PubClient, msg: Msg, local: tuple[int, ...],
                  remote: tuple[tuple[str, str], ...], away: tuple[str, ...]) -> None:
        """The publisher sends `msg` again after losing its link (just before `message()`),
        with what its new router matches now: local sids, remote (router, key) pairs and the
        keys of subscribers away from a lost router (not warm) whose filter matches.

        If the new router is the one that published it and still holds its record of it (or
        the outcome it decided), that record knows exactly who is owed, and nobody new may
        be. Otherwise the mesh rebuilds who is owed from what the new router knows now: every
        subscriber that matches, away ones included. Those are then required for `accepted`
        (the ones it was owed to that the new router cannot know of, gone for good or not
        heard of yet, are not); those not owed it before are extras (allowed out of publish
        order). Routers that hold no record of it by the time the resend reaches them (the
        publisher came back after their `reconnect-timeout`) take it for a new message:
        their subscribers may get it again, strict or not."""
        world, now = self.world, self.world.now
        p = world.p
        # Where its record waited for this resend: the router of its latest send. That
        # record was orphaned when the publisher lost its link there, and waits
        # `reconnect-timeout` from then. A later attach elsewhere that did not resend it
        # (one that broke before the resend went out, say) starts no clock for it, so the
        # publisher's time away is counted from that loss, not from its latest one.
        waited_at = msg.sent_from[0]
        msg.resends += 1
        msg.sent_at = now
        msg.sent_from = (pub.router.id, pub.router.inc)
        msg.stints[msg.sent_from] = self.stint(pub)
        self.stats.resent += 1
        r = pub.router
        rec = r.engine.find(msg.id)
        era = msg.eras.get((r.id, r.inc))
        # Its outcome, kept after the record was forgotten: the answer comes from that.
        stone = rec is None and r.engine.remembered(msg.id) is not None
        # Its record there, orphaned, or settled on the lost link as the outcome went out
        # (receiver-settle-mode first; the outcome died with the link): the resend takes it.
        exact = stone or (era is not None and (
            rec is not None and rec.pub_tag == msg.tag and rec.origin is None
            and ((rec.publisher is None and not rec.pub_settled)
                 or (rec.publisher is not None and rec.pub_settled))))
        gone_for = now - pub.lost_at_router.get(waited_at, pub.lost_at or 0.0)
        if gone_for >= p.reconnect_timeout - 0.01:
            msg.late = True
        noticed = not any(link in r.engine.publishers for link in pub.lost_links)
        if (r is msg.origin and not r.dead and not exact and not msg.rebuilt and noticed
                and gone_for < p.reconnect_timeout - 0.01):
            self.fail(f"{pub.key} resends {msg.id} to {r.id}, which published it and lives, "
                      f"{gone_for:.3f} s after losing its link (reconnect-timeout "
                      f"{p.reconnect_timeout:g} s), but {r.id} kept neither its record nor "
                      f"its outcome{f': {describe_record(rec)}' if rec is not None else ''}")
        # `r` was its origin before and keeps neither its record nor its outcome: it gave
        # the message up, and a destination's record that answers `r` only waits for the
        # forget on its way.
        given_up = era is not None and rec is None and not stone
        if (not stone and gone_for >= p.reconnect_timeout
                and not any(not r2.dead and (rec2 := r2.engine.find(msg.id)) is not None
                            and not rec2.pub_settled
                            and not (given_up and rec2.origin == r.id)
                            for r2 in world.routers.values())):
            # Its publisher stayed away longer than reconnect-timeout, and every router gave
            # it up (no record waits for this resend, no outcome is kept): the resend is a
            # new publication, placed after whatever its publisher had published before,
            # which the routers went on delivering meanwhile. Later messages delivered
            # before it are in order; it keeps its place among the rest (see on_send).
            msg.order_at = now
            self.stats.republished += 1
        if exact:
            if era is not None:
                msg.required = era  # what that router's record of it was owed to
            return
        if not msg.rebuilt:
            msg.rebuilt = True
            self.stats.rebuilt += 1
        owed, _ = self._owed_now(pub, local, remote)
        for key in away:
            owed[key] = self.subs_by_key[key]
        for key, sub in owed.items():
            msg.owed.setdefault(key, sub)
            if key not in msg.original:
                msg.extras.add(key)
        msg.required = owed
        msg.eras[(r.id, r.inc)] = owed

    def on_forward(self, router: SimRouter, action: Forward) -> None:
        msg = self.msgs.get(action.msg_id)
        if msg is None:
            self.fail(f"{router.id} forwards {action.msg_id}, which no publisher sent")
        if action.resend:
            # A publisher's resend, a subscriber's move or an adopted record: only ever to
            # subscribers owed the message, at a router they attached to.
            for r, keys in action.owed.items():
                for key in keys:
                    sub = self.subs_by_key.get(key)
                    if key not in msg.owed or sub is None:
                        self.fail(f"{router.id} resends {msg.id} to {key}@{r}, which was not "
                                  f"owed it (owed: {sorted(msg.owed)})")
                    if r not in sub.history:
                        self.fail(f"{router.id} resends {msg.id} to {key}@{r}, but {key} "
                                  f"never attached at {r}")
            return
        if msg.origin is not router:
            self.fail(f"{router.id} forwards {msg.id}, first published at "
                      f"{msg.origin.id if msg.origin else '?'}")
        if msg.forwarded:
            self.fail(f"{router.id} forwards {msg.id} twice")
        msg.forwarded = True
        said = {r: sorted(keys) for r, keys in action.owed.items()}
        meant = {r: sorted(keys) for r, keys in msg.owed_remote.items() if r}
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
            sub = self.subs_by_key.get(key_of(label))
            if sub is None or not (sub.processed.get(msg.id) or msg.id in sub.lost_settled):
                self.fail(f"{where} lists {label} as succeeded, but it never accepted it")
            if sub.key not in msg.owed:
                self.fail(f"{where} lists {label} as succeeded, but it was not owed the message")
        for kind in ("succeeded", "failed", "pending"):
            for label in status.get(kind, ()):
                key = key_of(label)
                if key not in msg.owed:
                    self.fail(f"{where} lists {label} as {kind}, but it was not owed the "
                              f"message (owed: {sorted(msg.owed)})")
                if router_of(label) not in msg.owed[key].history:
                    self.fail(f"{where} lists {label} as {kind}, but {key} never attached at "
                              f"{router_of(label)}")

    # ------------------------------------------------------------------ subscribers

    def on_send(self, sub: SubClient, send: Send, rec: Any) -> Msg:
        """A copy for `sub`, sent from its router's record `rec` of the message (None if not
        known)."""
        msg = self.msg_by_tag(send.tag)
        record = id(rec) if rec is not None else -1
        if sub.detached:
            self.fail(f"{sub.label} got {msg.id} after it detached")
        if sub.key not in msg.owed:
            self.fail(f"{sub.label} got {msg.id} (publisher {msg.pub.key}, seq {msg.seq}), "
                      f"which it was not owed (owed: {sorted(msg.owed)})")
        if send.payload != msg.pub.payload(msg.seq):
            self.fail(f"{sub.label} got {msg.id} with payload {send.payload!r}")
        if sub.credit <= 0:
            self.fail(f"{sub.label} got {msg.id} without credit")
        copies = sub.copies.get(msg.id, 0)
        source = (sub.router.id, sub.router.inc, record)
        before = sub.sources.get(msg.id)
        if before is not None and before[0] != source:
            # Its router forgot the record it sent the earlier copies from, and took a resend
            # for a new message: only after its publisher resent it (too late for the router:
            # reconnect-timeout) may that happen, and then the subscriber may get it again.
            # At least once, a late copy from the mesh after the record was forgotten is
            # delivered again too: nobody kept a tombstone of it.
            if msg.resends == 0 and sub.strict and getattr(msg.pub, "once", True):
                self.fail(f"{sub.label} got {msg.id} from a second record at {sub.router.id} "
                          "although its publisher never resent it")
            sub.dup_ok.add(msg.id)
            self.stats.new_records += 1
        from_here = before[1] if before is not None and before[0] == source else 0
        sub.sources[msg.id] = (source, from_here + 1)
        asked = sub.releases.get(msg.id, 0)
        if sub.strict and msg.id not in sub.dup_ok:
            if sub.processed.get(msg.id):
                self.fail(f"{sub.label} got {msg.id} again (attempt {send.attempt}) after it "
                          "had accepted it: a duplicate")
            if copies != asked:
                self.fail(f"{sub.label} got {msg.id} a {copies + 1}. time, having asked for "
                          f"{asked} redeliveries: a duplicate not asked for")
        if sub.strict and send.attempt != from_here:
            self.fail(f"{sub.label} got copy {from_here + 1} of {msg.id} from its router's "
                      f"record flagged attempt {send.attempt}")
        if not (sub.strict and msg.id not in sub.dup_ok) and (
                sub.processed.get(msg.id) or sub.answers.get(msg.id) is not None):
            self.stats.raw_duplicates += 1
            sub.raw_duplicates += 1
        # A pre-settled publisher delivery is at most once at every router: it goes
        # pre-settled to every subscriber, and nothing waits for an answer to it.
        settled = sub.presettled or msg.presettled
        if send.settled != settled:
            self.fail(f"{sub.label} got {msg.id} settled={send.settled}, expected {settled}")
        sub.copies[msg.id] = copies + 1
        if copies == 0 and sub.key in msg.extras:
            self.stats.first_deliveries += 1  # owed by a rebuilt resend: no order to keep
        elif copies == 0:
            self.stats.first_deliveries += 1
            came_from = msg.sent_from
            # The record the copy came from, which need not be the newest of its id
            # (`NotingEngine.sent_record`).
            live = rec if rec is not None else sub.router.engine.find(msg.id)
            if live is not None and live.origin is not None and live.origin != came_from[0]:
                # The copy comes from a record its router got from another origin than the
                # message's latest send: an earlier origin's forward, which the resend did
                # not replace (the new origin answered it from a record of its own, say).
                src = self.world.routers.get(live.origin)
                came_from = (live.origin, src.inc if src is not None else 0)
            elif (live is not None and live.origin is None and live.pub_ident is not None
                    and came_from[0] != sub.router.id):
                # Likewise from a record its own router has of the publisher's time there (an
                # orphan the latest send, from elsewhere, has not taken over yet): that
                # router's traffic from before the publisher moved.
                came_from = (sub.router.id, sub.router.inc)
            copy = next((c for c in live.copies.values() if c.sub.key == sub.key), None) \
                if live is not None else None
            first = sub.router.engine.taken_over.get(id(copy))
            if first is not None and first[0] is copy:
                # Queued from an earlier origin's forward before a resend from the latest
                # took the record over: that origin's traffic, in its place in the queue (a
                # publisher that moved: not ordered against its new router's resends).
                src = self.world.routers.get(first[1])
                came_from = (first[1], src.inc if src is not None else 0)
            last, last_from = sub.last_seq.get(msg.pub.key, (0, came_from))
            stint = msg.stints.get(came_from, 0)
            if msg.seq <= last:
                before = self.by_seq.get((msg.pub.key, last))
                if before is not None and before.order_at < msg.order_at:
                    pass  # `msg` was given up and published again (on_resend) after it
                elif came_from == last_from and stint == self.last_stint.get(
                        (sub.key, msg.pub.key), stint):
                    self.fail(f"{sub.label} got first deliveries out of publish order: "
                              f"{msg.pub.key} seq {msg.seq} after seq {last}")
                # The two were last sent from different routers, or from one router before
                # and after their publisher moved to another and back: nothing orders the
                # old origin's traffic against the new one's.
                self.stats.order_exempt += 1
            else:
                sub.last_seq[msg.pub.key] = (msg.seq, came_from)
                self.last_stint[(sub.key, msg.pub.key)] = stint
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

    def on_suppressed(self, sub: SubClient, msg: Msg) -> None:
        """A copy of a message the subscriber had answered: answered again from its store."""
        if sub.strict and msg.id not in sub.dup_ok:
            self.fail(f"{sub.label} (it never lost a link) got {msg.id} again after answering")
        self.stats.suppressed += 1
        sub.suppressed += 1

    def on_lost_settled(self, sub: SubClient, send: Send) -> None:
        """A pre-settled copy (at most once) sent on a link its subscriber had lost."""
        msg = self.msg_by_tag(send.tag)
        if not (sub.presettled or msg.presettled):
            self.fail(f"a settled copy of {msg.id} for {sub.key}, which is not at-most-once")
        sub.lost_settled.add(msg.id)
        self.stats.lost_settled += 1

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
                for key, sub in msg.required.items():
                    if sub.processed.get(msg.id) != 1 and msg.id not in sub.lost_settled:
                        self.fail(f"{pub.label} told accepted for {msg.id} (mode all, owed "
                                  f"{sorted(msg.required)}{' rebuilt' if msg.rebuilt else ''})"
                                  f" but {key} did not accept it{self._whereabouts(sub)}")
            elif msg.required and not any(s.processed.get(msg.id) or msg.id in s.lost_settled
                                          for s in msg.owed.values()):
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
            doubt = set(info.get(IN_DOUBT, ()))
            if not doubt <= set(failed):
                self.fail(f"failure of {msg.id} lists {sorted(doubt - set(failed))} in doubt, "
                          "but not as failed")
            for label in failed:
                self._check_reason(msg, label, info["reasons"][label], label in doubt)
            if msg.mode != ALL and info.get("succeeded"):
                self.fail(f"{msg.id} (mode some) failed although {info['succeeded']} succeeded")
            if info.get("delivery_id") != msg.id:
                self.fail(f"failure of {msg.id} carries delivery_id {info.get('delivery_id')}")
        else:
            self.fail(f"{pub.label} got outcome {out!r}")

    def _whereabouts(self, sub: SubClient) -> str:
        return (f" ({sub.label}: history {sub.history}, strict {sub.strict}, "
                f"{'gone' if sub.gone else 'away' if sub.away else 'attached'}, "
                f"away spans {[(round(a, 3), round(b, 3)) for a, b in sub.away_spans]})")

    def _check_reason(self, msg: Msg, label: str, reason: str, doubt: bool) -> None:
        """A failure names `label` with `reason` (in doubt or not): is it true of that
        subscriber? One that processed the message must be named in doubt."""
        world = self.world
        sub = msg.owed[key_of(label)]
        where = f"the failure of {msg.id} names {label} ({reason!r})"
        processed = bool(sub.processed.get(msg.id))
        said = sub.said.get(msg.id, set())
        # Reasons an answer can lose against: a deadline, or a router that went (its verdict
        # died with it, or is still on its way).
        in_flight = any(w in reason for w in ("ttl", "unreachable", "which restarted",
                                              "did not reattach"))
        if doubt:
            self.stats.failed_in_doubt += 1
        if processed:
            if sub.strict and not in_flight and msg.id not in sub.dup_ok and not msg.late:
                self.fail(f"{where}, but it had processed it{self._whereabouts(sub)}")
            if not doubt:
                self.fail(f"{where} as failed for certain, but it had processed it: it must "
                          f"be named in doubt{self._whereabouts(sub)}")
            self.stats.failed_but_processed += 1
        m = TIMEOUT_REASON.search(reason)
        if m:
            self.stats.timeout_failures += 1
            timeout = float(m.group(1))
            if sub.gone:
                return  # it left for good (closed, or died): true whatever the timing
            if not self._network_clean():
                return  # gossip of its return may be seconds late: not checkable here
            self.stats.timeout_checked += 1
            spans = list(sub.away_spans)
            if sub.away and sub.lost_at is not None:
                spans.append((sub.lost_at, float("inf")))
            for lost, back in spans:
                # The router's clock starts when it notices (a crash: when it hears of the
                # restart), never before the subscriber lost its link.
                if back - lost >= timeout - AWAY_SLACK:
                    return
            if any(self._router_down_since(back) for _, back in spans):
                return  # a router was down after it came back: gossip of its return may
                # not have had a path (a crashed router carries none), so not checkable here
            self.fail(f"{where}, but it was not away that long: away "
                      f"{[(round(a, 3), round(b, 3)) for a, b in spans]}"
                      f"{self._whereabouts(sub)}")
        elif reason.startswith("rejected it"):
            if Disposition.REJECTED not in said:
                self.fail(f"{where}, but it never rejected it (it said {sorted(said)})")
        elif reason.startswith("released it"):
            if not said & {Disposition.RELEASED, Disposition.MODIFIED}:
                self.fail(f"{where}, but it never released it (it said {sorted(said)})")
        elif reason.startswith("said it can never take it here"):
            if Disposition.UNDELIVERABLE not in said:
                self.fail(f"{where}, but it never said so (it said {sorted(said)})")
        elif "ttl" in reason:
            if not msg.ttl_ms:
                self.fail(f"{where}, but it has no ttl")
        elif "which restarted" in reason:
            if not world.crashed.get(router_of(label)):
                self.fail(f"{where}, but {router_of(label)} never crashed")
        elif "unreachable for" in reason:
            if not (world.ever_cut or world.crashed):
                self.fail(f"{where}, but no router was ever cut off or down")
        elif reason in ("detached before accepting it",
                        "was no longer attached when the message arrived"):
            if sub.strict and not sub.gone:
                self.fail(f"{where}, but it is attached and never left"
                          f"{self._whereabouts(sub)}")
        else:
            self.stats.unknown_reasons += 1
            self.note(f"{where}: a reason the checker does not know")

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
                                    f"{sorted(msg.owed)}, published t={msg.published_at:.3f}"
                                    f"{f', resent {msg.resends}x' if msg.resends else ''}) "
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
            problems += self._check_doubts(r)
            n = r.mesh.transfer.in_flight()
            if n:
                chans = {d: r.mesh.transfer.unacked(d) for d in sorted(world.routers)}
                problems.append(f"{r.id}'s transfer still has {n} items in flight: {chans}")
        for msg in self.msgs.values():
            if msg.ttl_ms and msg.decided_at is not None:
                # The origin fails what is still pending when the ttl runs out (docs: checked
                # within 50 ms of the deadline), wherever the subscribers are. A resend starts
                # the ttl again at its new origin.
                late = msg.decided_at - (msg.sent_at + msg.ttl_ms / 1000.0)
                if late > 0.05:
                    problems.append(f"{msg.id} with ttl {msg.ttl_ms} ms published "
                                    f"t={msg.published_at:.3f} (last sent t={msg.sent_at:.3f}) "
                                    f"got its outcome only at t={msg.decided_at:.3f}")
            if isinstance(msg.outcome, Accepted) and msg.mode == ALL:
                for key, sub in msg.required.items():
                    if sub.processed.get(msg.id) != 1 and msg.id not in sub.lost_settled:
                        problems.append(f"{msg.id} accepted but {key} processed it "
                                        f"{sub.processed.get(msg.id, 0)} times")
        if problems:
            shown = problems[:12]
            more = f"\n  … and {len(problems) - 12} more" if len(problems) > 12 else ""
            self.fail("after healing and draining:\n  " + "\n  ".join(shown) + more)


    def _check_doubts(self, router: SimRouter) -> list[str]:
        """A part in doubt that the origin resolved later (router/core/doubts.py) says
        whether that subscriber processed the message: it must be true."""
        problems = []
        live = [(rec.id, rec.resolved) for rec in router.engine.records.values() if rec.resolved]
        for msg_id, resolved in [(d.id, d.resolved) for d in router.engine._doubts] + live:
            msg = self.msgs.get(msg_id)
            if msg is None:
                continue
            for label, said in resolved.items():
                sub = msg.owed.get(key_of(label))
                if sub is None:
                    continue
                processed = bool(sub.processed.get(msg.id))
                if said["accepted"] != processed:
                    problems.append(
                        f"{router.id} resolved {label}'s part of {msg.id} in doubt as "
                        f"{'accepted' if said['accepted'] else 'not accepted'} "
                        f"({said['reason']!r}, said by {said['router']}), but it "
                        f"{'processed' if processed else 'did not process'} it"
                        f"{self._whereabouts(sub)}")
        return problems


def describe_record(rec: Any) -> str:
    """One line about a live engine record, for a person reading a failure."""
    copies = ", ".join(f"{c.sub.label}:{c.state.name}" for c in rec.copies.values())
    peers = ", ".join(f"{p.key}@{p.router}:{p.state.name}" for p in rec.peers.values())
    who = rec.publisher.label if rec.publisher is not None else f"origin {rec.origin}"
    return (f"{rec.id[:8]} from {who}: outcome={rec.outcome!s:.20} pub_settled={rec.pub_settled} "
            f"pending={rec.pending} copies[{copies}] peers[{peers}]"
            f"{f' orphan until {rec.orphan_until:.3f}' if rec.orphan_until else ''}")

"""What the delivery engine does when routers fail and clients move (docs/resume-protocol.md).

The `Engine` inherits this mixin; the state it works on is created in `Engine.__init__`. It
keeps four things apart from the core delivery rule in `engine.py`:

- **Where each subscriber is.** A subscriber key (`container/link`) lives at one router at a
  time; the newest attach, by generation, wins. When gossip says a key now lives elsewhere,
  the origin resends what that subscriber was still owed to its new router
  (sender-initiated retransmission, seed 002), and the router it left drops its copies.
- **Subscribers of a lost router.** A restarted router lost its clients. Its subscribers are
  *away* for their timeout (a warm one's own, else `reconnect-timeout`): what they were owed
  waits for them to reattach anywhere, and only then fails, naming them. Likewise a subscriber
  that left the router it was owed at, while the origin hears of no new place for it.
- **Records whose publisher or origin is gone** (*orphans*). They wait `reconnect-timeout` for
  the publisher to resume and resend; a resend adopts the record (what was accepted stays
  accepted, nothing is delivered twice), then the new origin owns it.
- **Resume on attach.** A publisher declares the tags it will resend; a subscriber declares
  its unsettled deliveries. Deliveries a subscriber declared that this router has not seen
  become placeholders: nothing is sent to it until the ones it had not accepted arrive (or
  `resume-timeout` passes). Forgotten records leave a *tombstone* with their outcome, so a
  resend of a message whose outcome was decided is answered from it, not delivered again.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .actions import (
    ACCEPTED,
    CloseLink,
    Decide,
    Forward,
    Outcome,
    Relayed,
    Subscribed,
    Verdict,
)
from .groups import GroupsMixin
from .records import ALL, AWAY, CopyState, PartState, Publisher, Record, Subscriber
from .topics import matches
from .transitions import (
    Step,
    add_part,
    adopt_as_origin,
    adopt_for,
    await_ended,
    drop_copy,
    drop_part,
    drop_parts,
    move_part,
    orphan,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .engine import Engine

QUEUED, SENT, ACCEPTED_STATE = CopyState.QUEUED, CopyState.SENT, CopyState.ACCEPTED
LINK_STOLEN = "amqp:link:stolen"


@dataclass(slots=True)
class Away:
    """A remote subscriber whose router was lost, waiting to reattach somewhere."""

    filter: str
    timeout: float  # its warm timeout, 0 if it is not warm
    wait: float  # how long it may take to reattach
    deadline: float
    router: str  # the router that was lost
    gen: int
    qos: int  # an MQTT subscription's granted QoS (0 for others)
    since: int  # the generation its subscription started afresh at (0: not known)


class FailoverMixin(GroupsMixin):
    """Subscriber moves, lost routers, orphaned records and resume (see the module doc)."""

    def _init_failover(self: Engine) -> None:
        # Where each subscriber key lives mesh-wide: (attach generation, router); this
        # router's own id for local subscribers. Only the winner is in the match indexes.
        self._where: dict[str, tuple[int, str]] = {}
        # key -> (filter, warm timeout, MQTT QoS, generation its subscription started afresh
        # at) of remote subscribers, as gossip told us
        self._remote_meta: dict[str, tuple[str, float, int, int]] = {}
        self._away: dict[str, Away] = {}
        self._away_expiry: list[tuple[float, str]] = []
        self._orphans: list[tuple[float, int]] = []  # (deadline, record seq)
        self._holds: list[tuple[float, int]] = []  # (deadline, sid): placeholder holds
        # Records owed to a moved subscriber that wait to be resent to its router until an
        # orphan published before them is resolved (`_retarget`): key -> records.
        self._held: dict[str, list[Record]] = {}
        # Outcomes of forgotten records, by delivery id, oldest first, for resends.
        # None where only `_stone_keys` is known: a destination's record forgotten without
        # the mesh-wide outcome (its origin restarted), which knows who accepted here only.
        self._tombstones: OrderedDict[str, Outcome | None] = OrderedDict()
        # Whom a tombstone answers for: the subscribers that accepted, and those that failed.
        self._stone_keys: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # The origin of each tombstone whose record was fresh (`Record.fresh`): a plain
        # forward of the same id from another origin is a new message (`_late_copy`).
        self._fresh_stones: dict[str, str] = {}
        # Records a resend from another router took from a publisher still attached here
        # (`_release_from_publisher`), by delivery id: the publisher link and its tag. That
        # resend may be stale (sent before the publisher moved here); see `_reclaim`. With
        # them, the remote subscribers it was owed to then, each with the router it was owed
        # at (their parts were dropped; the resend's origin need not owe them), and
        # the outcome that publisher was told already, if any (it is not told twice).
        self._released: dict[
            str, tuple[Publisher, bytes, tuple[tuple[str, str | None], ...], Outcome | None]] = {}
        # Entries of `_released` whose record had given its window place back already (a
        # relay store's released record, `Engine._maybe_release`): they count in no window.
        self._uncounted: set[str] = set()
        # Remote subscribers that left the router our records still owe them at, with no
        # news of where they went: (deadline, that router, wait) by key (see
        # `_remote_subscriber_removed`), and the deadlines as a heap.
        self._left: dict[str, tuple[float, str, float]] = {}
        self._left_expiry: list[tuple[float, str]] = []
        # Subscriber keys whose subscription ended here (closed, or away too long) with no
        # newer attach of them heard of since, with its attach generation, the last
        # `tombstones` of them: an attach of one here starts afresh (`_continued_since`).
        self._ended: OrderedDict[str, int] = OrderedDict()
        # Parts of our records owed to a subscription that ended, waiting for the verdict of
        # the router they are owed at (`_end_earlier`): (deadline, delivery id, key).
        self._ended_parts: list[tuple[float, str, str]] = []

    # ------------------------------------------------------------------ where subscribers are

    def known_gen(self: Engine, key: str) -> int:
        """The newest attach generation of subscriber `key` this router knows of, anywhere in
        the mesh (0 if none): a new attach takes a higher one, so that it wins mesh-wide."""
        gens = [0]
        if key in self._where:
            gens.append(self._where[key][0])
        if key in self._away:
            gens.append(self._away[key].gen)
        if key in self._ended:
            gens.append(self._ended[key])
        local = self._by_key.get(key) or self._warm.get(key)
        if local is not None:
            gens.append(local.gen)
        return max(gens)

    def warm_elsewhere(self: Engine, prefix: str) -> list[tuple[str, str, int]]:
        """Warm subscribers whose key starts with `prefix` that live at another router, or are
        away from a lost router waiting to reattach: (key, filter, MQTT QoS) each. An MQTT
        session that connects here asks which of its subscriptions live elsewhere."""
        me = self.config.router_id
        found = []
        for key, (_gen, router) in self._where.items():
            if router != me and key.startswith(prefix):
                meta = self._remote_meta.get(key)
                if meta is not None and meta[1]:
                    found.append((key, meta[0], meta[2]))
        for key, away in self._away.items():
            if away.timeout and key.startswith(prefix):
                found.append((key, away.filter, away.qos))
        return found

    def _continued_since(self: Engine, key: str, topic_filter: str, gen: int) -> int:
        """A new subscriber object for `key` attaches here at generation `gen`: the generation
        its subscription started afresh at, 0 if not known. It goes on with a subscription
        this router knows to live at another router, or to be away from a lost one, with the
        same filter (it moved). Else, if its last subscription ended here, it starts afresh
        now. Else this router cannot tell (it restarted, or never heard of an attach
        elsewhere that the subscriber moves on from): not known, and it is followed."""
        cur = self._where.get(key)
        meta = self._remote_meta.get(key)
        if (cur is not None and cur[1] != self.config.router_id and meta is not None
                and meta[0] == topic_filter):
            return meta[3]  # (0 from an older router: not known, nor then ours)
        away = self._away.get(key)
        if away is not None and away.filter == topic_filter:
            return away.since
        return gen if key in self._ended else 0

    def _note_ended(self: Engine, sub: Subscriber) -> None:
        """`sub`'s subscription ended here: the next attach of its key here starts afresh."""
        ended = self._ended
        ended[sub.key] = sub.gen
        ended.move_to_end(sub.key)
        if len(ended) > self.config.tombstones:
            ended.popitem(last=False)

    def _remote_subscriber_added(
        self: Engine, router: str, key: str, topic_filter: str, gen: int, timeout: float,
        qos: int, since: int = 0,
    ) -> None:
        """Gossip: subscriber `key` with `topic_filter` is attached at `router`, its
        subscription started afresh at generation `since` (0: not known)."""
        cur = self._where.get(key)
        away = self._away.get(key)
        if cur is not None and away is None and (gen, router) < cur:
            return  # an older attach than the one we know of: stale news
        self._ended.pop(key, None)  # a newer attach: whether that one ends here is not known
        if cur is not None and cur[1] == self.config.router_id:
            local = self._by_key.get(key) or self._warm.get(key)
            if local is not None:
                self._moved_away(local, router, gen)
        elif cur is not None and cur[1] != router:
            self._remote_remove((cur[1], key))
        if away is not None:
            self._end_away(key, away)
            if away.filter != topic_filter:
                self._fail_key(key, None, "came back with another filter")
        self._where[key] = (gen, router)
        self._remote_meta[key] = (topic_filter, timeout, qos, since)
        self._remote_add((router, key), topic_filter)
        self._end_earlier(key, since)
        # Resend what it is owed elsewhere, moved or not as far as we can tell: the news that
        # it left its old router may have come first (a subscriber that is not warm), and its
        # old router, when our message gets there, leaves it to us ("it lives elsewhere").
        # A new generation at the same router also gets the resends: that router may have
        # dropped its copies when the subscriber left in between (we may not have heard).
        self._retarget(key, router, force=cur is None or cur[0] != gen)

    def _remote_subscriber_removed(self: Engine, router: str, key: str) -> None:
        """Gossip: `key` left `router` for good (or moved on, which `_where` already says).
        What our records still owe it there waits for it to show up elsewhere: its old
        router fails what it held if it left for good, but drops it if it moved (`_moved_away`)
        and we may never hear where to (it left there too before we heard). If it is nowhere
        when its timeout passes, that fails (`_tick_failover`)."""
        cur = self._where.get(key)
        if cur is not None and cur[1] == router:
            del self._where[key]
            meta = self._remote_meta.pop(key, None)
            if any((p := rec.peers.get(key)) is not None and p.state == PartState.PENDING
                   and p.router == router and p.ended is None
                   for rec in self.records.values()):
                wait = (meta[1] if meta is not None else 0.0) or self.config.reconnect_timeout
                deadline = self._now + wait
                self._left[key] = (deadline, router, wait)
                heapq.heappush(self._left_expiry, (deadline, key))
                self._note_deadline(deadline)
        self._remote_remove((router, key))

    def _claim(self: Engine, sub: Subscriber) -> None:
        """`sub` attached here: the mesh's older idea of where it lives gives way, and what
        this router's own publishers still owed it elsewhere becomes local copies."""
        key = sub.key
        cur = self._where.get(key)
        if cur is not None and cur[1] != self.config.router_id:
            self._remote_remove((cur[1], key))
        away = self._away.get(key)
        if away is not None:
            self._end_away(key, away)
        self._where[key] = (sub.gen, self.config.router_id)
        self._ended.pop(key, None)
        self._end_earlier(key, sub.since)
        self._held.pop(key, None)  # they become copies here, with the rest
        owed = sorted((rec for rec in self.records.values()
                       if (p := rec.peers.get(key)) is not None
                       and p.state == PartState.PENDING and p.ended is None),
                      key=lambda r: r.seq)
        for rec in owed:
            drop_part(rec, key)  # the part becomes a copy, which counts instead
            self._add_copy(rec, sub)
            sub.queue.append(rec)
        if owed:
            self.stats.resent += len(owed)
            self._pump(sub)
        for rec in owed:  # one it declared accepted on resume may be decided now
            self._decide(rec)
            self._maybe_forget(rec)

    def _moved_away(self: Engine, sub: Subscriber, router: str, gen: int) -> None:
        """A newer attach of `sub`'s key at `router` (generation `gen`) wins: this one ends
        without failing anything. Copies of this router's own messages it had not accepted
        follow it there; other origins resend theirs on their own, from the same gossip."""
        if sub.link is not None:
            self.subscribers.pop(sub.link, None)
            self._actions.append(CloseLink(
                sub.link, LINK_STOLEN,
                f"subscriber {sub.key} attached again at router {router}; this older "
                "attach is closed (one subscriber identity lives at one router at a time)"))
        self._warm.pop(sub.key, None)
        self._index_remove(sub.sid)
        self._by_sid.pop(sub.sid, None)
        if self._by_key.get(sub.key) is sub:
            del self._by_key[sub.key]
        self._where.pop(sub.key, None)
        self._actions.append(Subscribed(sub.key, None))
        touched = dict.fromkeys(list(sub.inflight.values()) + list(sub.queue))
        sub.inflight.clear()
        sub.queue.clear()
        waiting: set[Any] = set()  # the publishers of the orphans met so far
        for rec in touched:  # in the order it was getting them (record numbers here follow
            # arrival, which is not publish order when resends reuse older records)
            copy = rec.copies.get(sub.sid)
            if copy is None or copy.state not in (QUEUED, SENT):
                continue
            drop_copy(rec, sub.sid)
            if rec.origin is None and not rec.presettled:
                if rec.orphan_until is None and (
                        rec.pub_ident is None or rec.pub_ident not in waiting):
                    self._owe_remote(rec, sub.key, router, gen)
                elif rec.orphan_until is None:  # behind its publisher's orphan: it waits
                    add_part(rec, sub.key, router, gen=gen)
                    self._mesh_records[(self.config.router_id, rec.id)] = rec
                    self._held.setdefault(sub.key, []).append(rec)
                else:  # owed there, sent if its publisher resumes here (_resend_parts)
                    add_part(rec, sub.key, router, gen=gen)
                    self._mesh_records[(self.config.router_id, rec.id)] = rec
                    waiting.add(rec.pub_ident)
            self._decide(rec)
            self._maybe_forget(rec)

    def _replace_subscriber(self: Engine, key: str, label: str) -> None:
        """The same subscriber attaches again here while its older link is still attached
        (this router has not noticed yet that the old connection died, or the client opened
        two): the older link is closed, and the new one takes over its state as a warm
        subscriber coming back would, what it had in doubt first, in order."""
        old = self._by_key.get(key)
        if old is None or old.link is None:
            return
        self.subscribers.pop(old.link, None)
        self._actions.append(CloseLink(
            old.link, LINK_STOLEN, f"subscriber {label} attached again; this older attach "
            "is closed (one subscriber identity has one link at a time)"))
        if not old.warm_timeout:
            old.warm_timeout = self.config.reconnect_timeout  # just long enough to hand over
        self._go_warm(old, self._now)

    def _replace_publisher(self: Engine, ident: Any, label: str) -> None:
        """The same publisher attaches again here while its older link is still attached:
        that link is closed, and its messages wait for the new link to resend them."""
        for old in [p for p in self.publishers.values() if p.ident == ident]:
            del self.publishers[old.link]
            self._actions.append(CloseLink(
                old.link, LINK_STOLEN, f"publisher {label} attached again; this older attach "
                "is closed (one publisher identity has one link at a time)"))
            for rec in list(old.records.values()):
                self._orphan(rec)
            old.records.clear()

    def _retarget(self: Engine, key: str, router: str, force: bool = False) -> None:
        """`key` now lives at `router`: resend there, in publish order, every message of ours
        it has not answered for yet (with `force`, also those already sent there)."""
        # Not an orphan's: its publisher may have resumed elsewhere, whose router is the
        # origin now; the orphan only waits (and stops at its deadline). What comes after
        # an orphan waits with it (`_held`), or the subscriber would get it first: it is
        # owed at `router` now, and sent once the orphan is resolved (`_release_held`).
        # Only its own publisher's: order is per publisher. An orphan owed at `router`
        # already still counts: what its publisher published after it waits behind it.
        at = self._where.get(key)
        gen = at[0] if at is not None and at[1] == router else 0
        held = self._held.pop(key, [])
        owed = sorted(dict.fromkeys(
            [rec for rec in held if rec.seq in self.records] + [
                rec for rec in self.records.values()
                if (p := rec.peers.get(key)) is not None
                and p.state == PartState.PENDING and p.ended is None
                and (force or p.router != router or rec.orphan_until is not None)]),
            key=lambda r: r.seq)
        waiting: set[Any] = set()  # the publishers of the orphans met so far
        for rec in owed:
            part = rec.peers.get(key)
            if part is None or part.state != PartState.PENDING or part.ended is not None:
                continue  # (one owed to a subscription that ended stays: `_end_earlier`)
            if rec.orphan_until is not None:
                # Not held itself: `_resend_parts` sends it. But it is owed there now, so that
                # if it leaves there too, its part waits for it as the others do (`_left`).
                part.router = part.last = router
                part.gen = gen
                waiting.add(rec.pub_ident)
                continue
            part.router = part.last = router
            part.gen = gen
            if rec.pub_ident is not None and rec.pub_ident in waiting:
                self._held.setdefault(key, []).append(rec)
            else:
                self._send_part(rec, key, router)

    def _release_held(self: Engine) -> None:
        """An orphan was resolved (adopted, or given up): what waited behind it for a moved
        subscriber goes to where that subscriber lives now, up to the next orphan. If it
        left for good meanwhile, nobody will answer for what was never sent to it: it
        fails here, as its router would have failed the copies."""
        if not self._held:
            return
        me = self.config.router_id
        for key in sorted(self._held):
            recs = self._held[key]
            where = self._where.get(key)
            if where is not None and where[1] != me:
                self._retarget(key, where[1])
                continue
            if where is None and key not in self._away and not any(
                    rec.orphan_until is not None and (p := rec.peers.get(key)) is not None
                    and p.state == PartState.PENDING for rec in self.records.values()):
                del self._held[key]
                for rec in sorted(recs, key=lambda r: r.seq):
                    part = rec.peers.get(key)
                    if (rec.seq in self.records and part is not None
                            and part.state == PartState.PENDING and part.ended is None):
                        move_part(rec, part, Step.FAIL, "detached before accepting it")
                        self._decide(rec)
                        self._maybe_forget(rec)

    def _owe_remote(self: Engine, rec: Record, key: str, router: str, gen: int) -> None:
        """Add a part for `key` at `router` (generation `gen`) to our record and send it
        there."""
        add_part(rec, key, router, gen=gen)
        self._mesh_records[(self.config.router_id, rec.id)] = rec
        self._send_part(rec, key, router)

    def _send_part(self: Engine, rec: Record, key: str, router: str) -> None:
        rec.told.add(router)
        if rec.former:
            self._reached(rec, (router,))
        self.stats.resent += 1
        pub = rec.publisher
        at = self._where.get(key)
        gens = {key: at[0]} if at is not None and at[1] == router else None
        self._actions.append(Forward(rec.id, {router: [key]}, rec.address, rec.payload,
                                     rec.mode, self._ttl_left(rec),
                                     pub.label if pub is not None else "", resend=True,
                                     gens=gens))

    def _reached(self: Engine, rec: Record, routers: Iterable[str]) -> None:
        """Our record is resent to `routers`: a former origin among them (`Record.former`,
        `_adopt_for_publisher`) hands its record over to us as the resend arrives
        (`_remote_resend` adopts it, one its publisher settled included), so nothing there
        waits for the copies here any more, and it hears no more verdicts from us. If its
        record was its publisher's (whose connection died unnoticed), a verdict from the
        router it released the record to reads as that router yielding and answering it as
        origin (`Engine._peer_verdict`, `_reclaim`): from us, the true origin, it would make it
        take the record back for that long-gone publisher (or orphan it) and stop answering
        us for its subscribers, and our publisher would never get an outcome."""
        gone = set(routers)
        rec.former = tuple(o for o in rec.former if o not in gone)

    def _ttl_left(self: Engine, rec: Record) -> int | None:
        if rec.expires is None:
            return None
        return max(1, int((rec.expires - self._now) * 1000))

    # ------------------------------------------------------------------ lost routers

    def _peer_lost(self: Engine, router: str, reason: str, restarted: bool) -> None:
        """`router` restarted (its clients and records are gone) or stayed unreachable too
        long (given up). After a restart its subscribers are away for their timeout and its
        messages here wait for their publishers to resume; after a give-up what it owed us
        fails now, and its messages here go on (their verdicts reach it when it is back)."""
        if restarted:
            for key, (gen, r) in sorted(self._where.items()):
                if r == router:
                    self._go_away(key, gen, router)
        for (origin, _), rec in sorted(self._mesh_records.items(), key=lambda i: i[1].seq):
            if origin == router:
                if restarted:
                    self._orphan(rec)
                    if rec.id in self._released:
                        self._reclaim(rec)
                continue
            for part in list(rec.peers.values()):
                if part.state != PartState.PENDING or part.router != router:
                    continue
                if part.ended is not None:  # its verdict will not come now
                    move_part(rec, part, Step.FAIL, "detached before accepting it")
                elif part.key in self._away:
                    part.router = None
                else:  # in doubt: its verdict may be what was lost
                    move_part(rec, part, Step.FAIL, reason)
            self._decide(rec)
            self._maybe_forget(rec)

    def _go_away(self: Engine, key: str, gen: int, router: str) -> None:
        del self._where[key]
        topic_filter, timeout, qos, since = self._remote_meta.pop(key)
        self._remote_remove((router, key))
        wait = timeout or self.config.reconnect_timeout
        away = Away(topic_filter, timeout, wait, self._now + wait, router, gen, qos, since)
        self._away[key] = away
        heapq.heappush(self._away_expiry, (away.deadline, key))
        self._note_deadline(away.deadline)
        if timeout:  # warm: what is published meanwhile waits for it too
            self._remote_add((AWAY, key), topic_filter)

    def away_from(self: Engine, router: str) -> list[tuple[str, str, float, float, int, int, int]]:
        """The warm subscribers away from `router` (lost when it restarted), for its new run:
        (key, filter, timeout, seconds left, gen, qos, since) each (`AwayLearned`)."""
        return [(key, a.filter, a.timeout, max(0.0, a.deadline - self._now), a.gen, a.qos,
                 a.since)
                for key, a in sorted(self._away.items()) if a.router == router and a.timeout]

    def _away_learned(self: Engine,
                      entries: list[tuple[str, str, float, float, int, int, int]]) -> None:
        """A peer says these subscribers of our previous run are away: owe them what is
        published here until they reattach (anywhere) or their time is up, as the peer does.
        One already back, here or elsewhere, or known away already, is left as it is."""
        me = self.config.router_id
        for key, topic_filter, timeout, left, gen, qos, since in entries:
            if key in self._away or key in self._where or key in self._by_key \
                    or key in self._warm:
                continue
            away = Away(topic_filter, timeout, left, self._now + left, me, gen, qos, since)
            self._away[key] = away
            heapq.heappush(self._away_expiry, (away.deadline, key))
            self._note_deadline(away.deadline)
            if timeout:
                self._remote_add((AWAY, key), topic_filter)

    def _end_away(self: Engine, key: str, away: Away) -> None:
        del self._away[key]
        if away.timeout:
            self._remote_remove((AWAY, key))

    def _end_earlier(self: Engine, key: str, since: int) -> None:
        """Subscriber `key` subscribed afresh at attach generation `since`: what our records
        still owe an attach of it before that was owed to a subscription that ended (it
        closed, or stayed away past its timeout, and its router failed what it held). It does
        not follow the new subscription, which is owed nothing published before it and may
        have been sent newer messages already: the older ones would come after those. Nor
        does it fail here and now: the router it is owed at answers for the ended
        subscription, which may have accepted it, and that verdict may be held up behind
        others on its channel. It waits for that verdict for `reconnect-timeout` (the same
        bound an orphan waits for a resend), then fails (`_tick_failover`); at once if
        that router is lost already (it will not answer), or when it is (`_peer_lost`)."""
        if not since:
            return  # not known: it may have moved, and what it was owed follows it
        until = self._now + self.config.reconnect_timeout
        waiting = False
        for rec in sorted(self.records.values(), key=lambda r: r.seq):
            part = rec.peers.get(key)
            if (part is None or part.state != PartState.PENDING or part.gen >= since
                    or part.ended is not None):
                continue
            if part.router is None:  # away from a lost router: no verdict will come
                move_part(rec, part, Step.FAIL, "detached before accepting it")
                self._decide(rec)
                self._maybe_forget(rec)
                continue
            await_ended(part, until)
            heapq.heappush(self._ended_parts, (until, rec.id, key))
            waiting = True
        if waiting:
            self._note_deadline(until)
        held = self._held.get(key)
        if held:  # (held ones owed to the ended subscription are not sent once released)
            held[:] = [rec for rec in held
                       if (p := rec.peers.get(key)) is None or p.ended is None]
            if not held:
                del self._held[key]

    def _fail_key(self: Engine, key: str, router: str | None, reason: str) -> None:
        """Fail every pending part for `key` owed at `router` (None: away)."""
        for rec in sorted(self.records.values(), key=lambda r: r.seq):
            part = rec.peers.get(key)
            if (part is not None and part.state == PartState.PENDING and part.router == router
                    and part.ended is None):  # (an ended one waits for its verdict)
                move_part(rec, part, Step.FAIL, reason)
                self._decide(rec)
                self._maybe_forget(rec)

    # ------------------------------------------------------------------ orphans and resends

    def _orphan(self: Engine, rec: Record) -> None:
        """Its publisher (or origin router) is gone without settling: keep the record, and
        its copies going, for `reconnect-timeout`, waiting for the publisher to resend."""
        if rec.pub_settled:
            return
        if rec.origin is not None:
            self._mesh_records.pop((rec.origin, rec.id), None)
        until = self._now + self.config.reconnect_timeout
        orphan(rec, until)
        heapq.heappush(self._orphans, (until, rec.seq))
        self._note_deadline(until)

    def _give_up(self: Engine, rec: Record) -> None:
        """Orphan `rec` will not be resent: stop tracking it, as for a DELETE, and stop
        waiting for answers even if it was decided (a router that adopted it for a new origin
        answers that one, not us)."""
        adopt_as_origin(rec)
        self._withdraw(rec)
        self._publisher_done(rec)

    def _settled_by_declaration(self: Engine, ident: Any, resends: dict[bytes, int]) -> None:
        """A publisher attached here declaring `resends`: every message it holds without a
        final outcome (docs/resume-protocol.md). Its orphans here that it did not declare, it
        has settled (it has their outcome, or settled early): they are given up now, not at
        their deadline. Else what waits behind them for a moved subscriber (`_held`) would
        be sent after the publisher's new messages, which go out at once."""
        gone = [rec for rec in self.records.values()
                if rec.orphan_until is not None and rec.pub_ident == ident and rec.pub_tag
                and rec.pub_tag not in resends]
        for rec in sorted(gone, key=lambda r: r.seq):
            if rec.seq in self.records and rec.orphan_until is not None:
                self._give_up(rec)
        if gone:
            self._release_held()

    def _adopt(self: Engine, rec: Record, renumber: bool = True) -> None:
        """A resend found `rec`: it is nobody's orphan any more. It is numbered anew, as if it
        arrived now: record numbers give publish order (moves requeue and resend by them),
        and resends come in publish order, after whatever this router already had. Not
        `renumber`: a record its publisher published here keeps its number, which is its
        place in publish order among that publisher's records here (a later one it settled
        is not resent, and must stay after it). So does one published here that another
        origin's resend took since (`pub_ident` stays, its tag went): numbered anew, it went
        after the publisher's later ones that stayed here, and a move resent it after them."""
        if rec.origin is not None:
            self._mesh_records.pop((rec.origin, rec.id), None)
        if self._released:
            self._drop_released(rec.id)
        adopt_as_origin(rec)
        self.stats.adopted += 1
        if not renumber or rec.pub_ident is not None:
            return
        del self.records[rec.seq]
        rec.seq = self._next_seq()
        self.records[rec.seq] = rec
        if rec.expires is not None:
            heapq.heappush(self._expiry, (rec.expires, rec.seq))
            self._note_deadline(rec.expires)

    def _resend_from_publisher(
        self: Engine, pub: Publisher, tag: bytes, ttl_ms: int | None, settled: bool
    ) -> bool:
        """A delivery the publisher declared as a resend. Returns True if the mesh already
        had it (a live record, adopted here, or a tombstone answered from); False if it is to
        be handled as a new message (forwarded as a resend)."""
        out_tag = self._tag_for(pub, tag)
        msg_id = out_tag.decode()
        rec = self._by_id.get(msg_id)
        if rec is not None and rec.publisher is None and rec.pending and rec.pub_settled:
            # A destination's record whose origin let it go without an outcome while copies
            # were still owed here: the publisher resending it here wants that outcome, and a
            # second record would send those subscribers a second copy. It takes this one.
            rec.pub_settled = False
            rec.final = None
        if rec is not None and rec.publisher is not None and rec.pub_settled \
                and rec.origin is None:
            # Its own record, settled on an older link of this publisher (mode first settles
            # as the outcome goes out, on a connection that may be dead unnoticed) and still
            # owed to someone: the publisher never got that outcome. It takes the record.
            self._unsettle(rec)
        if rec is not None and rec.publisher is None and not rec.pub_settled:
            self._adopt_for_publisher(rec, pub, tag, settled)
            return True
        if rec is None and self._tombstones.get(msg_id) is not None and not settled:
            self.stats.adopted += 1
            done = Record(self._next_seq(), pub, tag, out_tag, b"", pub.mode, False, None)
            self._hold_for_settlement(pub, done, self._tombstones[msg_id])  # type: ignore[arg-type]
            return True
        return False

    def _unsettle(self: Engine, rec: Record) -> None:
        """Live record `rec`, which its publisher's link settled (`PublisherSettled`), is
        resent by that publisher, here or at another router: it did not get the outcome
        (in receiver-settle-mode first the router settles as it sends the outcome, and a
        connection that died unnoticed delivers neither). The settlement is void: the record
        waits for the resend's link, as an orphan would (one record per message id), and
        leaves the old link's window."""
        old = rec.publisher
        rec.publisher = None
        rec.pub_settled = False
        if old is not None and not rec.released:  # (released: it counts in no window)
            old.live -= 1
            if self.publishers.get(old.link) is old:
                self._refill(old)

    def _adopt_for_publisher(
        self: Engine, rec: Record, pub: Publisher, tag: bytes, settled: bool,
        reclaimed: tuple[tuple[str, str | None], ...] | None = None,
        told: Outcome | None = None,
    ) -> None:
        """`pub` (attached here) owns live record `rec` of its delivery `tag` from now on:
        this router becomes its origin and answers the publisher for the whole mesh.
        `reclaimed`: it was that publisher's record here already (`_reclaim`), owed to these
        remote subscribers (at these routers) when a stale resend took it; it is owed to them
        again (`_owe_reclaimed`) and to nobody new. `told`:
        the outcome the publisher had been told before then; it is not told again."""
        # Its own origin record (the publisher's connection to us dropped): that knows
        # exactly who is owed. Not a destination's record, nor one handed over.
        published_here = bool(rec.pub_tag) and rec.origin is None
        if rec.origin is not None and rec.origin not in rec.former:
            # The origin it answered may hold a record its publisher settled (mode first,
            # on a connection that died unnoticed), which no resend reaches and which never
            # times out: it goes on hearing about the copies here (`_answer_former`), until
            # a resend of ours reaches it and it hands that record over (`_reached`).
            rec.former = (*rec.former, rec.origin)
        self._adopt(rec, renumber=not published_here)
        rec.publisher, rec.pub_tag = pub, tag
        rec.partial = False  # it answers this publisher for the whole mesh now
        if not rec.released:
            pub.live += 1
        elif pub.link in self.publishers:
            # Released on stored copies: it counts in no window, so the credit its resend
            # took comes back now (no forget will give it back).
            self._refill(pub)
        if settled:
            self._publisher_done(rec)
            self._release_held()
            return
        pub.records[tag] = rec
        if rec.released and rec.outcome is None and not pub.stored_enough:
            self._actions.append(Relayed(pub.link, tag))  # as it was told before it left
        if published_here or rec.peers:
            # Another origin's record has parts only for subscribers that moved away from
            # here while it was an orphan (`_moved_away`): they were left to be sent once its
            # publisher resumed here, which is now.
            self._resend_parts(rec)
            self._release_held()
        decided = rec.outcome
        if rec.peers or reclaimed or (not published_here and self._remote_owed(rec)):
            rec.outcome = None  # it answers to this publisher across the mesh now
            decided = None
        if not published_here:
            # Remote parts first: a new local copy can be accepted as it is sent (a
            # pre-settled subscriber), and the record must not be decided without them.
            self._owe_new_remotes(rec, None if reclaimed is None else
                                  tuple(k for k, _ in reclaimed))
            if reclaimed:
                self._owe_reclaimed(rec, reclaimed)
            if reclaimed is None and self._owe_new_locals(rec):
                decided = None
            if reclaimed is None and self._has_groups() and self._owe_groups(rec):
                rec.outcome = None  # (a shared group's member is owed it now)
                decided = None
        if told is not None:
            # It waits for the publisher's settlement and its parts' answers; a second
            # outcome for one delivery tag would be a protocol error on the publisher's link.
            rec.outcome = told
        elif decided is not None and rec.outcome is not None:
            self._actions.append(Decide(pub.link, tag, decided))
        elif rec.outcome is None:  # (else a new copy, accepted as sent, decided it)
            self._decide(rec)

    def _owe_reclaimed(self: Engine, rec: Record,
                       reclaimed: tuple[tuple[str, str | None], ...]) -> None:
        """A reclaimed record is owed again to the remote subscribers it was owed to when the
        stale resend took it, at the router each was owed at, also where gossip no longer
        matches one (it left there since): that router answers for it (from its record or
        tombstone, or as a new message for a subscriber gone), so none counts unheard of."""
        local = {c.sub.key for c in rec.copies.values()}
        again = tuple((r, k) for k, r in reclaimed
                      if r is not None and r != self.config.router_id
                      and k not in rec.peers and k not in local)
        if again:
            self._forward(rec, again, self._ttl_left(rec), resend=True)

    def _resend_parts(self: Engine, rec: Record) -> None:
        """Our own record comes out of orphanhood: what it still owes goes again to where
        each subscriber lives now. Again even where it went before: while the publisher was
        away another router may have owned the message, and a destination drops a late copy
        from an origin it no longer answers to (it adopts a resend instead)."""
        me = self.config.router_id
        for key, part in rec.peers.items():
            where = self._where.get(key)
            if (part.state == PartState.PENDING and where is not None and where[1] != me
                    and part.ended is None):  # (one owed to an ended subscription stays)
                part.router = part.last = where[1]
                part.gen = where[0]
                self._send_part(rec, key, where[1])

    def _owe_new_locals(self: Engine, rec: Record) -> int:
        """Owe an adopted record to the local subscribers that match it now and have no copy
        of it: one may have moved here from a router that died with its copy."""
        matched = self._index.match(rec.address)
        if self._no_local and rec.pub_ident is not None:
            matched = self._not_own(matched, rec.pub_ident.container)
        by_sid = self._by_sid
        return self._add_locals(rec, [by_sid[sid] for sid in matched], undecide=True)

    def _add_locals(self: Engine, rec: Record, subs: list[Subscriber], undecide: bool) -> int:
        """Add copies to an existing record for those of `subs` that have none yet. All are
        added before any is sent: one accepted as it is sent (pre-settled) must not decide
        the record without the others. With `undecide`, an outcome decided before them is
        void (the record is decided again, with them) from before the first is sent."""
        have = {c.sub.key for c in rec.copies.values()}
        added = [sub for sub in dict.fromkeys(subs) if sub.key not in have]
        for sub in added:
            self._add_copy(rec, sub)
            sub.queue.append(rec)
        if added and undecide:
            rec.outcome = None
        if rec.expires is not None and rec.expires <= self._now:
            # Owed to them after its ttl ran out (a late resend): the expiry is past, so
            # they fail now, unsent, rather than wait for a deadline that will not come.
            for sub in added:
                copy = rec.copies[sub.sid]
                if copy.state == CopyState.QUEUED:
                    self._fail(rec, copy, "did not get it before its ttl ran out")
            return len(added)
        for sub in added:
            self._pump(sub)
        return len(added)

    def _remote_owed(self: Engine, rec: Record) -> bool:
        return bool(self._resend_matches(rec.address))

    def _resend_matches(self: Engine, address: str) -> tuple[tuple[str, str], ...]:
        """Who a publisher's resend is owed to besides local subscribers: the remote ones
        that match, and those away from a lost router (warm or not: it may have been owed
        to them there)."""
        remote = tuple(self._remote.match(address)) if len(self._remote) else ()
        if self._away:
            seen = {k for _, k in remote}
            remote += tuple((AWAY, k) for k, a in sorted(self._away.items())
                            if not a.timeout and k not in seen and matches(a.filter, address))
        return remote

    def _owe_new_remotes(self: Engine, rec: Record, only: tuple[str, ...] | None = None) -> None:
        """Owe an adopted record to the remote subscribers that match it now and are not owed
        it yet: their routers hold the old origin's record (they adopt it) or never had it.
        `only`: of those, just these keys."""
        if not len(self._remote) and not self._away:
            return
        local = {c.sub.key for c in rec.copies.values()}
        remote = tuple((r, k) for r, k in self._resend_matches(rec.address)
                       if k not in rec.peers and k not in local and (only is None or k in only))
        if remote:
            self._forward(rec, remote, self._ttl_left(rec), resend=True)

    def _remote_resend(
        self: Engine, origin: str, msg_id: str, owed: list[str]
    ) -> list[str]:
        """A message another router marked as a resend (or one we hold a record of). Answers
        what a record or tombstone here can (adopting the record); returns the owed keys left
        to handle as a new message (all of them if nothing here knew it)."""
        rec = self._mesh_records.get((origin, msg_id))
        if rec is None:
            rec = self._carrier(msg_id)
            released = None
            remotes: tuple[tuple[str, str | None], ...] = ()
            told = None
            if rec is not None and rec.publisher is not None and rec.pub_settled \
                    and rec.origin is None:
                # Settled on its publisher's link, which never got the outcome: it resent it
                # at `origin`, which this record answers from now on (`_unsettle`).
                self._unsettle(rec)
            elif rec is not None and rec.publisher is not None and not rec.pub_settled:
                released = self._release_from_publisher(rec)
                # (each with the router it was owed at: the resend's origin need not owe it)
                remotes = tuple((k, p.router) for k, p in rec.peers.items())
                told = rec.outcome  # its publisher's record: decided means told
            if rec is None or rec.publisher is not None or rec.pub_settled:
                if rec is None and msg_id in self._tombstones:
                    # It answers only for the subscribers the forgotten record had: one that
                    # attached (or moved) here since is owed a copy, as for a new message.
                    good, bad = self._stone_keys.get(msg_id, ((), ()))
                    had = good + bad
                    answered = [k for k in owed if k in had]
                    if answered:
                        self._actions.append(self._stone_verdict(origin, msg_id, answered))
                    # Nor does its outcome answer the publisher any more: `origin` took the
                    # message up again after the forgotten record (it had no record of it
                    # left to adopt: its publisher came back after every router gave it up,
                    # or its tombstone is gone), as a new message owed to whoever matches
                    # there now, subscribers that record never knew included. That origin's
                    # outcome answers the publisher; a resend of it here later is new here
                    # too (asking the mesh again), not told the older record's outcome: an
                    # acceptance would say nothing of those subscribers (seed 95188). Who
                    # accepted or failed here still answers for them (`_stone_keys`).
                    if self._tombstones[msg_id] is not None:
                        if msg_id in self._stone_keys:
                            self._tombstones[msg_id] = None
                        else:
                            del self._tombstones[msg_id]
                            self._fresh_stones.pop(msg_id, None)
                    return [k for k in owed if k not in had]
                if rec is not None:
                    return self._owed_beside(rec, origin, owed)
                return owed
            # A destination's record another router resends: it may be a stale resend, sent
            # before the publisher moved to the origin this record answers now (a retarget
            # held up in the mesh), and nothing here tells which is newer. The origin it
            # answered keeps getting its verdicts, or a publisher there waits for ever.
            if rec.origin is not None and rec.origin != origin:
                former = [o for o in rec.former if o != origin]
                former.append(rec.origin)
                rec.former = tuple(former)
            self._adopt(rec)
            if released is not None:
                # (the resend may be stale: `_reclaim`)
                self._released[msg_id] = (released[0], released[1], remotes, told)
            rec.pub_tag = b""  # a destination's record now, whoever published it here
            # If it was ours, the new origin owes those routers now (and it is no longer a
            # record of ours in _mesh_records, peers or not).
            self._drop_parts(rec)
            adopt_for(rec, origin)
            self._mesh_records[(origin, msg_id)] = rec
            rec.outcome = None
            self._release_held()
        # Owed keys that left before the resend came fail, named, as for a new message (else
        # the origin waits for ever for an answer about them); then the attached ones.
        if self._fail_missing(rec, self._missing(owed)):
            rec.outcome = None
        self._add_owed(rec, owed)
        if rec.outcome is not None:  # decided before: say it again to whoever asks now
            self._actions.append(self._verdict(rec, rec.outcome))
        else:
            self._answer_done(rec, owed)
            self._decide(rec)
        self._maybe_forget(rec)
        return []

    def _carrier(self: Engine, msg_id: str) -> Record | None:
        """The live record of `msg_id` that carries the message, if any: not a stand-in made
        only to hold an outcome for its publisher to settle (answered from a tombstone, or
        refused), which has no body to deliver and no one to owe it to."""
        rec = self._by_id.get(msg_id)
        if rec is not None and not rec.payload and not rec.copies and not rec.peers:
            return None
        return rec

    def _owed_beside(self: Engine, rec: Record, origin: str, owed: list[str]) -> list[str]:
        """A resend from `origin` while `rec`, a live record of the same message that it
        does not adopt, is still here: one message has one record per router, or a
        subscriber would get two copies of it under one tag. The keys `rec` has copies for
        are answered by `rec` (now for the ones done, with its later verdicts for the
        others); the rest are returned, to be owed as a new message."""
        have = {c.sub.key: c for c in rec.copies.values()}
        mine = [k for k in owed if k in have]
        if mine:
            done = [k for k in mine if have[k].state in (ACCEPTED_STATE, CopyState.FAILED)]
            # Answering an origin other than the record's own is a word to a former origin,
            # as its later verdicts are (`_tell_former`): marked so, it counts for a record
            # `origin` still holds, and is not read as this record yielding to one it handed
            # over to us (`_peer_verdict` -> `_reclaim`). Unmarked, a late plain copy's answer
            # made the previous origin take its record back from the publisher's new router
            # and resend it there after newer messages (failover seed 44651).
            beside = origin != rec.origin
            if done:
                self._actions.append(
                    Verdict(origin, rec.id, False, rec.status(), done, beside))
            if beside and origin not in rec.former:
                rec.former = (*rec.former, origin)
        return [k for k in owed if k not in have]

    def _answer_done(self: Engine, rec: Record, owed: list[str]) -> None:
        """The origin resends `rec` for `owed` keys (it has not heard of them) while the
        record is undecided here: those whose copy here is done already (one that left before
        the first copy came, failed) are answered for now, not with the verdict. Else the
        origin, still waiting, resends it wherever the subscriber goes next, which gets it
        after what it got here since."""
        asked = set(owed)
        keys = [c.sub.key for c in rec.copies.values()
                if c.sub.key in asked and c.state in (ACCEPTED_STATE, CopyState.FAILED)]
        if keys and rec.origin is not None:
            self._actions.append(Verdict(rec.origin, rec.id, False, rec.status(), keys))

    def _stone_verdict(self: Engine, origin: str, msg_id: str, keys: list[str]) -> Verdict:
        """The answer a tombstone gives for `keys`: who accepted and who failed, named as
        subscribers of this router."""
        good = set(self._stone_keys.get(msg_id, ((), ()))[0])
        if all(k in good for k in keys):
            return Verdict(origin, msg_id, True, {}, keys)
        me = self.config.router_id
        failed = [f"{k}@{me}" for k in keys if k not in good]
        why = "did not accept it before (answered from a record of its outcome)"
        status = {"succeeded": [f"{k}@{me}" for k in keys if k in good], "failed": failed,
                  "pending": [], "reasons": dict.fromkeys(failed, why)}
        return Verdict(origin, msg_id, False, status, keys)

    def _release_from_publisher(self: Engine, rec: Record) -> tuple[Publisher, bytes] | None:
        """Another router resent this message of a publisher still attached here: it moved,
        whether or not we noticed its old connection die. The record is its old link's no
        more (it is adopted for the new origin). Unless that link is gone, returns it and
        the tag: the resend may be older than the link (`_reclaim`), so until we know, the
        record still counts in the link's window (`_drop_released` ends that)."""
        pub = rec.publisher
        assert pub is not None
        pub.records.pop(rec.pub_tag, None)
        rec.publisher = None
        if pub.link in self.publishers:
            if rec.released:
                self._uncounted.add(rec.id)
            return pub, rec.pub_tag
        if not rec.released:
            pub.live -= 1
        return None

    def _drop_released(
        self: Engine, msg_id: str
    ) -> tuple[Publisher, bytes, tuple[tuple[str, str | None], ...], Outcome | None] | None:
        """Forget that `msg_id` was released from a publisher here (`_released`): it no longer
        counts in that link's window. Returns its entry there, if it was."""
        entry = self._released.pop(msg_id, None)
        if entry is not None and not self._uncount(msg_id):
            pub = entry[0]
            pub.live -= 1
            if self.publishers.get(pub.link) is pub:
                self._refill(pub)
        return entry

    def _uncount(self: Engine, msg_id: str) -> bool:
        """Whether the `_released` entry of `msg_id` just taken counted in no window."""
        if msg_id in self._uncounted:
            self._uncounted.discard(msg_id)
            return True
        return False

    def _reclaim(self: Engine, rec: Record) -> bool:
        """`rec` was released from a publisher attached here to the router that resent it
        (`_release_from_publisher`), and that router turns out not to be its origin: it
        answers us as its origin (its resend was older than the publisher's move here, and
        it adopted ours since), stopped tracking it without an outcome, or restarted. If that
        publisher is still attached here, the record is its again, as if it had just resent
        it here (the resend that took it was stale); returns whether it was."""
        pub, tag, remotes, told = self._released.pop(rec.id)
        if not self._uncount(rec.id):
            pub.live -= 1  # (counted again below, or given back)
        if self.publishers.get(pub.link) is not pub or tag in pub.records or rec.pub_settled:
            if self.publishers.get(pub.link) is pub:
                self._refill(pub)
            return False
        self._adopt_for_publisher(rec, pub, tag, False, remotes, told)
        return True

    def _released_answered(self: Engine, rec: Record, outcome: Outcome) -> bool:
        """Whether the mesh-wide `outcome` of the origin `rec` was released to answers its
        publisher here (`_answer_released`). That origin's record need not have been owed
        to the remote subscribers ours was when the resend took it (a stale resend, from a
        router that did not know them): an acceptance in mode 'all' (or a failure in another
        mode) says nothing about them, and the record is reclaimed to hear from them."""
        _, _, remotes, told = self._released[rec.id]
        if not remotes or told is not None:
            return True
        return (outcome is ACCEPTED) != (rec.mode == ALL)

    def _answer_released(self: Engine, rec: Record, outcome: Outcome) -> None:
        """The origin `rec` was released to forgot it with the mesh-wide `outcome`: the
        publisher still attached here that it was released from is told that outcome (it is
        still waiting if the resend that took the record was older than its move here)."""
        pub, tag, _, told = self._released.pop(rec.id)
        uncounted = self._uncount(rec.id)
        if not uncounted:
            pub.live -= 1  # (counted again below, or given back)
        if self.publishers.get(pub.link) is not pub or tag in pub.records or told is not None:
            # (`told`: it had its outcome before the record was taken; its settlement finds
            # nothing to do)
            if self.publishers.get(pub.link) is pub:
                self._refill(pub)
            return
        done = Record(self._next_seq(), pub, tag, rec.out_tag, b"", pub.mode, False, None)
        if uncounted:  # its window place was given back: the stand-in takes none either
            done.released = True
            self._stored_waiting += 1
        self._hold_for_settlement(pub, done, outcome, counted=not uncounted)

    def _drop_parts(self: Engine, rec: Record) -> None:
        drop_parts(rec)
        self._mesh_records.pop((self.config.router_id, rec.id), None)

    def _add_owed(self: Engine, rec: Record, owed: list[str], undecide: bool = True) -> int:
        """Add copies to an existing record for owed keys attached here and not in it yet."""
        by_key = self._by_key
        return self._add_locals(rec, [by_key[k] for k in owed if k in by_key], undecide)

    def remembered(self: Engine, msg_id: str) -> Outcome | None:
        """The mesh-wide outcome of a forgotten delivery, while it is remembered."""
        return self._tombstones.get(msg_id)

    def remembered_accepted(self: Engine, msg_id: str) -> tuple[str, ...]:
        """Subscribers here that accepted a forgotten delivery, while it is remembered."""
        keys = self._stone_keys.get(msg_id)
        return () if keys is None else keys[0]

    def _late_copy(self: Engine, msg_id: str, origin: str) -> bool:
        """Whether a plain forward from `origin` of a delivery remembered by a tombstone is a
        late copy of that delivery (answered from the tombstone), rather than a new message
        that reuses its id. It is late unless the remembered record was a fresh message from
        another origin: its publisher said it had never sent that one before, so a plain
        forward of the same id from elsewhere is a later message (an MQTT client that moved
        to another router, or restarted with its session, and reuses packet ids)."""
        fresh_from = self._fresh_stones.get(msg_id)
        return fresh_from is None or fresh_from == origin

    def _remember(self: Engine, rec: Record) -> None:
        """A record is forgotten: keep its outcome, bounded, for resends, and who accepted
        and failed here. A record that came from another router keeps only the mesh-wide
        outcome its origin sent with the forget: its own verdict covered only the
        subscribers here. Without an outcome (its origin restarted, or its publisher did not
        come back in time) it keeps who accepted here, so that a later resend does not
        deliver to them again (`_message`)."""
        if self._released:
            self._drop_released(rec.id)
        if rec.presettled or not rec.once:
            return  # at least once: a resend or a late copy of it is delivered again
        outcome = rec.final if rec.partial else rec.outcome
        keys: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        if len(rec.copies) == 1:  # the usual single copy, without building tuples in a loop
            for c in rec.copies.values():
                if c.state == ACCEPTED_STATE:
                    keys = ((c.sub.key,), ())
                elif c.state == CopyState.FAILED:
                    keys = ((), (c.sub.key,))
        elif rec.copies:
            copies = rec.copies.values()
            keys = (tuple(c.sub.key for c in copies if c.state == ACCEPTED_STATE),
                    tuple(c.sub.key for c in copies if c.state == CopyState.FAILED))
        if outcome is None and not keys[0] and not keys[1]:
            return  # nothing to answer a resend with
        stones = self._tombstones
        stones[rec.id] = outcome
        if keys[0] or keys[1]:
            self._stone_keys[rec.id] = keys
        if rec.fresh:
            self._fresh_stones[rec.id] = rec.origin or self.config.router_id
        else:
            self._fresh_stones.pop(rec.id, None)
        if len(stones) > self.config.tombstones:
            oldest = stones.popitem(last=False)[0]
            self._stone_keys.pop(oldest, None)
            self._fresh_stones.pop(oldest, None)

    # ------------------------------------------------------------------ subscriber resume

    def _resume(self: Engine, sub: Subscriber, declared: dict[str, str]) -> dict[str, Any]:
        """Compare what the subscriber declared unsettled with our records; return our view
        (docs/resume-protocol.md). Unknown ones become placeholders."""
        known: dict[str, str] = {}
        placeholders: list[str] = []
        for tag, state in declared.items():
            rec = self._by_id.get(tag)
            copy = rec.copies.get(sub.sid) if rec is not None else None
            if rec is not None and copy is not None:
                if state == "accepted" and copy.state in (QUEUED, SENT):
                    sub.inflight.pop(rec.out_tag, None)
                    self._accepted_settled(rec, copy, Step.DECLARED)
                known[tag] = "accepted" if copy.state == ACCEPTED_STATE else "unsettled"
            else:
                if sub.placeholders.get(tag, "accepted") != "accepted":
                    # An earlier attach of it declared this one received, and it is back
                    # before that arrived: `holding` counts it once, as declared now, or
                    # the hold outlives its placeholders and nothing is sent to it again.
                    sub.holding -= 1
                sub.placeholders[tag] = state
                placeholders.append(tag)
                if state != "accepted":
                    sub.holding += 1
        if sub.placeholders:
            heapq.heappush(self._holds, (self._now + self.config.resume_timeout, sub.sid))
            self._note_deadline(self._now + self.config.resume_timeout)
        return {"known": known, "placeholders": placeholders}

    def _fulfil(self: Engine, sub: Subscriber, rec: Record) -> bool:
        """A copy for `sub` of a delivery it declared on resume arrived. Returns True if it had
        declared it accepted (then it counts as accepted and is not sent)."""
        state = sub.placeholders.pop(rec.id, None)
        if state is None:
            return False
        if state == "accepted":
            return True
        sub.holding -= 1
        return False

    # ------------------------------------------------------------------ time

    def _tick_failover(self: Engine, now: float) -> None:
        heap = self._away_expiry
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            away = self._away.get(key)
            if away is None or away.deadline != deadline:
                continue
            self._end_away(key, away)
            self._fail_key(key, None, f"did not reattach within {away.wait:g} s after router "
                                      f"{away.router} was lost")
        left = self._left_expiry
        while left and left[0][0] <= now:
            deadline, key = heapq.heappop(left)
            entry = self._left.get(key)
            if entry is None or entry[0] != deadline:
                continue
            del self._left[key]
            if key not in self._where and key not in self._away:  # still nowhere we know of
                _, router, wait = entry
                self._fail_key(key, router, f"did not reattach within {wait:g} s after "
                                            f"leaving router {router}")
        ended = self._ended_parts
        me = self.config.router_id
        while ended and ended[0][0] <= now:
            until, msg_id, key = heapq.heappop(ended)
            rec = self._mesh_records.get((me, msg_id))
            part = rec.peers.get(key) if rec is not None else None
            if (rec is not None and part is not None and part.state == PartState.PENDING
                    and part.ended == until):  # its router did not answer for it in time
                move_part(rec, part, Step.FAIL, "detached before accepting it")
                self._decide(rec)
                self._maybe_forget(rec)
        orphans = self._orphans
        while orphans and orphans[0][0] <= now:
            until, seq = heapq.heappop(orphans)
            rec = self.records.get(seq)
            if rec is not None and rec.orphan_until == until:
                self._give_up(rec)  # nobody resent it here
                self._release_held()
        holds = self._holds
        while holds and holds[0][0] <= now:
            _, sid = heapq.heappop(holds)
            sub = self._by_sid.get(sid)
            if sub is not None and sub.placeholders:
                sub.placeholders.clear()
                sub.holding = 0
                self._pump(sub)

    def _failover_deadlines(self: Engine) -> list[float]:
        out = []
        for heap in (self._away_expiry, self._orphans, self._holds, self._left_expiry,
                     self._ended_parts):
            if heap:
                out.append(heap[0][0])
        return out


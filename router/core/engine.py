"""The delivery engine: exactly-once publish-subscribe on one router, as a sans-IO state machine.

Events come in through one entry point, `Engine.handle(event)`, as the typed objects of
`router.core.events` (a publisher attached, a message arrived, a subscriber accepted, time
passed), each stamped with its time; effects go out as `router.core.actions` records, collected
with `take_actions()`. Nothing here reads a clock or touches a socket, so a test or a simulator
can drive many engines deterministically. Every state change of a copy or a peer part, and the
counters they keep, happens in `router.core.transitions`; `router.core.invariants` checks
them after every event when `EngineConfig.check_invariants` is on (the simulator turns it on).

The rule it keeps (seed 004): a publisher's delivery is accepted only when every subscriber
whose filter matched when the message arrived has accepted it (mode `all`), or when one has
(mode `some`). The publisher then settles; that settlement is relayed to the subscribers and
the record is forgotten once nobody needs it.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from . import invariants
from .actions import (
    ACCEPTED,
    IN_STORE,
    CloseLink,
    Credit,
    Decide,
    EngineAction,
    Forget,
    Forward,
    Hold,
    Outcome,
    Rejected,
    Relayed,
    Send,
    SettleCopy,
    StoredAt,
    Subscribed,
    Unhold,
    Verdict,
)
from .doubts import Doubt, Doubts, resolve
from .events import (
    NO_LOCAL,
    AwayLearned,
    CopyOutcome,
    CopyWithheld,
    Event,
    Held,
    MeshJoined,
    MeshJoining,
    MeshJoinTimedOut,
    MessageArrived,
    MessageRefused,
    PeerLost,
    PeerStored,
    PeerVerdict,
    PublisherAttached,
    PublisherDetached,
    PublisherSettled,
    RemoteForget,
    RemoteMessage,
    RemoteSubscriberAdded,
    RemoteSubscriberRemoved,
    Restored,
    SubscriberAttached,
    SubscriberCredit,
    SubscriberDetached,
    TimePassed,
)
from .failover import AWAY, LINK_STOLEN, FailoverMixin
from .records import (
    ALL,
    EXACTLY_ONCE,
    GUARANTEES,
    IN_DOUBT,
    MODES,
    Copy,
    CopyState,
    LinkIdentity,
    PartState,
    Publisher,
    Record,
    Subscriber,
    outgoing_tag,
)
from .topics import SHARE_PREFIX, SubscriptionIndex, matches
from .transitions import Step, add_copy, add_part, hold_copy, hold_part, move_copy, move_part

QUEUED, SENT, ACCEPTED_STATE, FAILED, WITHDRAWN = (
    CopyState.QUEUED,
    CopyState.SENT,
    CopyState.ACCEPTED,
    CopyState.FAILED,
    CopyState.WITHDRAWN,
)

DELIVERY_FAILED = "exactmesh:delivery-failed"
NO_SUBSCRIBERS = "exactmesh:no-subscribers"
TRANSFER_LIMIT = "amqp:link:transfer-limit-exceeded"
OTHER_TOPICS = "(other)"  # per-topic counters past EngineConfig.topic_counters


class Disposition:
    """What a subscriber said about a copy (the AMQP outcomes, protocol-neutral)."""

    ACCEPTED: Final = 1
    REJECTED: Final = 2
    RELEASED: Final = 3  # not processed: redeliver to it
    MODIFIED: Final = 4  # not processed, delivery-failed: redeliver to it
    UNDELIVERABLE: Final = 5  # modified with undeliverable-here: it will never take it


@dataclass(slots=True)
class EngineConfig:
    router_id: str = "router"
    no_subscribers: str = "accept"  # or "reject"
    max_delivery_attempts: int = 5  # first delivery plus redeliveries to one subscriber
    publisher_window: int = 256  # records one publisher link may hold in the router
    reconnect_timeout: float = 30.0  # a warm subscriber's default time to come back
    # How long a resumed subscriber's placeholders hold back newer messages (seconds).
    resume_timeout: float = 5.0
    tombstones: int = 65536  # outcomes of forgotten deliveries kept for resends
    # Forgotten failures with subscribers in doubt kept for the status query (doubts.py):
    # fewer than tombstones, since each keeps its whole status (a few hundred bytes and up).
    doubts_kept: int = 10000
    # A relay store (docs/relay.md): copies for warm subscribers that are away are stored
    # durably (`Hold`), and a record whose every pending copy is stored gives its publisher's
    # window place back, drops its body and answers a publisher whose acknowledgement counts
    # stored copies (MQTT). At most `relay_waiting_limit` such records at once: beyond it,
    # publishers wait as they do without a store (back-pressure).
    relay_store: bool = False
    relay_waiting_limit: int = 100_000
    # Check router/core/invariants.py after every event (the simulator does; it walks every
    # record, so a router under load does not).
    check_invariants: bool = False
    # Per-topic counters (GET /metrics) for at most this many topics, the rest counted
    # together under OTHER_TOPICS; 0: none, and no work per message for them.
    topic_counters: int = 0


@dataclass(slots=True)
class EngineStats:
    received: int = 0
    delivered: int = 0  # copies sent, redeliveries included
    redelivered: int = 0
    accepted: int = 0  # publisher deliveries decided accepted
    rejected: int = 0
    expired: int = 0
    deleted: int = 0  # publisher settled before an outcome (the seed's DELETE)
    resent: int = 0  # copies resent to a subscriber's new router (failover, moves)
    adopted: int = 0  # publisher resends the mesh already had (answered without delivery)
    stored: int = 0  # copies the relay store took for a warm subscriber away
    released: int = 0  # records that gave their publisher's window back on stored copies
    # Messages an MQTT publisher was told PUBACK/PUBREC for on stored copies that then failed
    # (the session expired, say): nobody tells that publisher again, so they are counted.
    early_failed: int = 0
    # Publisher deliveries decided more than 1 s (10 s) after they arrived (docs/operations.md).
    delayed_1s: int = 0
    delayed_10s: int = 0
    # What subscribers here answered for their copies (AMQP outcomes; MQTT acks are accepted).
    copies_accepted: int = 0
    copies_rejected: int = 0
    copies_released: int = 0
    copies_modified: int = 0  # modified, undeliverable-here included
    # Pre-settled (at most once) copies not sent to a matched subscriber that was away.
    presettled_dropped: int = 0


class Engine(FailoverMixin):
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.stats = EngineStats()
        self.publishers: dict[int, Publisher] = {}
        self.subscribers: dict[int, Subscriber] = {}
        self.records: dict[int, Record] = {}  # live records by sequence number
        # Failed messages with subscribers in doubt, after their records are forgotten: what
        # their routers say late resolves them (doubts.py; the status query shows it).
        self._doubts = Doubts(self.config.doubts_kept)
        self._index: SubscriptionIndex[int] = SubscriptionIndex()
        self._by_key: dict[str, Subscriber] = {}  # local subscribers by mesh key
        self._by_sid: dict[int, Subscriber] = {}  # attached and warm ones, by sid
        self._warm: dict[str, Subscriber] = {}  # warm subscribers away, by key
        self._warm_expiry: list[tuple[float, int]] = []  # heap of (deadline, sid)
        # Subscribers at other routers, as gossip told us: (router, key) -> filter.
        self._remote: SubscriptionIndex[tuple[str, str]] = SubscriptionIndex()
        # Records that involve other routers, by (origin router, delivery id).
        self._mesh_records: dict[tuple[str, str], Record] = {}
        # Live records by delivery id, for status queries. A publisher may reuse a tag while a
        # record with it is still alive (pre-settled messages; mode 'some' with copies still
        # owed; a failover), so the index holds the newest and the older ones wait in
        # `_id_clashes` to take its place when it is forgotten.
        self._by_id: dict[str, Record] = {}
        self._id_clashes: dict[str, list[Record]] = {}
        self._actions: list[EngineAction] = []
        self._seq = 0
        self._expiry: list[tuple[float, int]] = []  # heap of (deadline, record seq)
        self._now = 0.0  # the latest event's time: the engine's clock never runs backwards
        self._new_deadline: float | None = None  # see take_new_deadline
        # Relay store: records released on stored copies, and those waiting for room.
        self._stored_waiting = 0
        self._release_blocked: deque[Record] = deque()
        self._no_local = False  # a subscriber asked for No Local: `_message` checks for it
        # Between MeshJoining and MeshJoined: the messages that arrived, in order (pre-settled
        # ones too: one that passed would overtake its publisher's earlier guaranteed ones;
        # simulator, failover seed 1342). Each counts as live for its publisher, so the
        # publisher window bounds them.
        self._joining = False
        self._before_join: list[MessageArrived] = []
        # After MeshJoinTimedOut: why guaranteed messages fail at once until MeshJoined.
        self._join_failure = ""
        # topic -> [received, accepted, rejected], when asked for (`topic_counters`)
        self._topic_counts: dict[str, list[int]] | None = \
            {} if self.config.topic_counters else None
        self._init_failover()
        self._init_groups()

    # ------------------------------------------------------------------ the entry point

    def handle(self, event: Event) -> Any:
        """Take one event; its effects are in `take_actions()` afterwards. An attach returns
        the router's view for the attach reply (see `_attach_publisher`, `_attach_subscriber`);
        every other event returns None. The most frequent events are tested first."""
        if event.now > self._now:
            self._now = event.now
        result: Any = None
        if isinstance(event, MessageArrived):
            self._message(event)
        elif isinstance(event, CopyOutcome):
            self._copy_outcome(event.link, event.tag, event.disposition, event.settled,
                               event.error)
        elif isinstance(event, PublisherSettled):
            self._publisher_settled(event.link, event.tag)
        elif isinstance(event, SubscriberCredit):
            self._subscriber_credit(event.link, event.credit)
        elif isinstance(event, RemoteMessage):
            self._remote_message(event)
        elif isinstance(event, PeerVerdict):
            self._peer_verdict(event.router, event.msg_id, event.accepted, event.status,
                               event.keys, event.former)
        elif isinstance(event, RemoteForget):
            self._remote_forget(event.origin, event.msg_id, event.accepted, event.description,
                                event.info)
        elif isinstance(event, TimePassed):
            self._tick(self._now)
        elif isinstance(event, CopyWithheld):
            self._copy_withheld(event.link, event.tag, event.settled)
        else:
            result = self._handle_rare(event)
        if self.config.check_invariants:
            invariants.check(self, isinstance(event, TimePassed))
        return result

    def _handle_rare(self, event: Event) -> Any:
        """Attaches, detaches, gossip and lost routers: events that do not come per message."""
        if isinstance(event, PublisherAttached):
            return self._attach_publisher(event.link, event.ident, event.address, event.mode,
                                          event.resends, event.stored_enough, event.once)
        if isinstance(event, PublisherDetached):
            self._detach_publisher(event.link, event.final)
        elif isinstance(event, SubscriberAttached):
            return self._attach_subscriber(event)
        elif isinstance(event, SubscriberDetached):
            self._detach_subscriber(event.link, event.final)
        elif isinstance(event, MessageRefused):
            self._refuse_message(event.link, event.tag, event.condition, event.description,
                                 event.settled)
        elif isinstance(event, MeshJoining):
            self._joining = True
        elif isinstance(event, MeshJoined):
            self._joined()
        elif isinstance(event, MeshJoinTimedOut):
            self._join_timed_out(event.description)
        elif isinstance(event, AwayLearned):
            self._away_learned(event.entries)
        elif isinstance(event, RemoteSubscriberAdded):
            self._remote_subscriber_added(event.router, event.key, event.topic_filter,
                                          event.gen, event.timeout, event.qos, event.since)
        elif isinstance(event, RemoteSubscriberRemoved):
            self._remote_subscriber_removed(event.router, event.key)
        elif isinstance(event, PeerLost):
            self._peer_lost(event.router, event.reason, event.restarted)
        elif isinstance(event, Held):
            self._copies_stored(event.items)
        elif isinstance(event, PeerStored):
            self._peer_stored(event.router, event.msg_id, event.keys)
        elif isinstance(event, Restored):
            return self._restore(event.items)
        else:
            raise TypeError(f"the engine has no handler for {type(event).__name__}")
        return None

    # ------------------------------------------------------------------ plumbing

    def take_actions(self) -> list[EngineAction]:
        """The effects produced since the last call, in the order they must be applied."""
        actions, self._actions = self._actions, []
        return actions

    def actions_pending(self) -> int:
        """How many effects wait to be taken: what one event added is what follows them."""
        return len(self._actions)

    def peek_actions(self, start: int = 0) -> list[EngineAction]:
        """The effects waiting from `start` on, without taking them (the simulator notes
        which record each copy came from as the engine makes it)."""
        return self._actions[start:]

    def next_deadline(self) -> float | None:
        """When a `TimePassed` next has work to do (a message's ttl runs out), or None."""
        heap = self._expiry
        while heap and heap[0][1] not in self.records:
            heapq.heappop(heap)
        warm = self._warm_expiry
        while warm and warm[0][1] not in self._by_sid:
            heapq.heappop(warm)
        deadlines = [h[0][0] for h in (heap, warm) if h] + self._failover_deadlines()
        return min(deadlines) if deadlines else None

    @property
    def now(self) -> float:
        """The engine's clock: the latest time an event carried."""
        return self._now

    def take_new_deadline(self) -> float | None:
        """The earliest deadline set since the last call, if any: a runtime whose timer sleeps
        until `next_deadline()` wakes it earlier for this one."""
        deadline, self._new_deadline = self._new_deadline, None
        return deadline

    def _note_deadline(self, deadline: float) -> None:
        if self._new_deadline is None or deadline < self._new_deadline:
            self._new_deadline = deadline

    def knows_subscriber(self, key: str) -> bool:
        """Whether the subscriber with mesh key `key` is known here: attached, warm and
        away, or at another router."""
        return key in self._by_key or key in self._warm or key in self._remote_meta

    def find(self, delivery_id: str) -> Record | None:
        """A live record by its delivery id (the outgoing tag in hex); the newest if a reused
        tag gave several live records the same id."""
        return self._by_id.get(delivery_id)

    def doubt(self, delivery_id: str) -> Doubt | None:
        """A forgotten message of ours that failed with subscribers in doubt, and what their
        routers said of them since (doubts.py)."""
        return self._doubts.get(delivery_id)

    def matching(
        self, address: str
    ) -> tuple[tuple[int, ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
        """Who a message to topic `address` would be owed here now (read-only): local
        subscriber numbers, remote (router, key) pairs, and the keys of subscribers away from
        a lost router that are not warm (a publisher's resend is owed to them too)."""
        remote = tuple(self._remote.match(address)) if len(self._remote) else ()
        away = tuple(key for key, a in sorted(self._away.items())
                     if not a.timeout and matches(a.filter, address))
        return self._index.match(address), remote, away

    def gauges(self) -> dict[str, int]:
        """What an operator watches (docs/operations.md): records in flight, warm subscribers
        away, links held back, deliveries waiting on relays, tombstones kept."""
        subs = self._by_sid.values()
        return {
            "records": len(self.records),
            "warm_away": sum(1 for s in subs if s.link is None),
            "subscribers_blocked": sum(1 for s in self.subscribers.values()
                                       if s.credit <= 0 and s.queue),
            "publishers_at_window": sum(1 for p in self.publishers.values()
                                        if p.live >= self.config.publisher_window),
            "relay_waiting": self._stored_waiting,
            "tombstones": len(self._tombstones),
        }

    def _count_topic(self, topic: str, which: int) -> None:
        counts = self._topic_counts
        assert counts is not None
        row = counts.get(topic)
        if row is None:
            if len(counts) >= self.config.topic_counters:
                topic = OTHER_TOPICS
                row = counts.get(topic)
            if row is None:
                row = counts[topic] = [0, 0, 0]
        row[which] += 1

    def topic_counts(self) -> dict[str, tuple[int, int, int]]:
        """Per topic: (received, accepted, rejected) of publisher deliveries here, for the
        first `topic_counters` topics seen, the rest under OTHER_TOPICS; {} when off."""
        return {t: (r[0], r[1], r[2]) for t, r in (self._topic_counts or {}).items()}

    def subscriptions(self) -> dict[str, list[tuple[str, str]]]:
        """Who is subscribed where, as this router knows it: router id -> [(key, filter)]
        (this router's own subscribers, warm ones away included, and those gossip told it
        of; "" for warm subscribers away from a lost router)."""
        out: dict[str, list[tuple[str, str]]] = {
            self.config.router_id: [(s.key, s.filter) for s in self._by_sid.values()]}
        for (router, key), topic_filter in self._remote.items():
            out.setdefault(router, []).append((key, topic_filter))
        return out

    def stuck(self, older_than: float, now: float) -> list[Record]:
        """Undecided records that arrived more than `older_than` seconds before `now` (the
        caller's clock: an idle engine's own stops at its last event). Not those a relay
        store holds for subscribers away (`released`): waiting is what they are for."""
        since = now - older_than
        return [r for r in self.records.values()
                if r.outcome is None and not r.presettled and not r.released
                and r.born < since]

    def iter_records(self) -> Iterator[Record]:
        return iter(self.records.values())

    # ------------------------------------------------------------------ links

    def _attach_publisher(
        self, link: int, ident: LinkIdentity, address: str, mode: str,
        resends: list[bytes] | None, stored_enough: bool = False, once: bool = True,
    ) -> dict[str, Any]:
        """A client attached a link to send to topic `address` (already validated).
        `resends` are the tags it declared unsettled (resume): it sends those again, and the
        mesh answers them from its records instead of delivering them twice. Returns the
        router's view for the attach reply: the declared tags it holds records of."""
        if mode not in MODES:
            raise ValueError(f"delivery mode {mode!r} is not one of {MODES}")
        label = ident.label(self.config.router_id)
        self._replace_publisher(ident, label)
        pub = Publisher(link, ident, address, mode, label, stored_enough)
        pub.once = once
        declared = list(dict.fromkeys(resends or ()))
        pub.resends = {t: i for i, t in enumerate(declared)}
        pub.resend_ids = {outgoing_tag(ident.container, ident.name, t).decode(): t
                          for t in declared}
        self.publishers[link] = pub
        if resends is not None:
            self._settled_by_declaration(ident, pub.resends)
        self._refill(pub, force=True)
        known = [t for i, t in pub.resend_ids.items() if i in self._by_id]
        return {"known": known}

    def _detach_publisher(self, link: int, final: bool) -> None:
        """The publisher's link is gone. Closed (`final`): nobody is left to tell an outcome
        to, so its undecided messages stop being tracked (as if it had settled them early).
        Lost (a dropped connection, a detach without close): they wait `reconnect-timeout`
        for it to resume, on any router, and resend them."""
        pub = self.publishers.pop(link, None)
        if pub is None:
            return
        for rec in list(pub.records.values()):
            if final:
                self._publisher_done(rec)
            else:
                self._orphan(rec)
        pub.records.clear()

    def _attach_subscriber(self, ev: SubscriberAttached) -> dict[str, Any]:
        """A client attached a link to receive messages matching `topic_filter`. It is owed
        every message that arrives from now on; nothing published before. With
        `warm_timeout` (a durable terminus) it stays subscribed that long when it goes away,
        and what arrives meanwhile waits for it. A warm subscriber coming back with the same
        identity and filter, here or at another router, gets first what it had not
        accepted, in publish order.

        `gen` is the attach generation the client declared (the newest attach of a key wins
        mesh-wide) and `declared` its unsettled deliveries, id -> "accepted" | "received"
        (docs/resume-protocol.md). Returns this router's view of those for the attach reply."""
        link, ident, topic_filter = ev.link, ev.ident, ev.topic_filter
        presettled, warm_timeout, gen = ev.presettled, ev.warm_timeout, ev.gen
        label = ident.label(self.config.router_id)
        gen = max(gen, self.known_gen(ident.key) + 1)
        self._replace_subscriber(ident.key, label)
        warm = self._warm.pop(ident.key, None)
        if warm is not None and warm.filter == topic_filter:
            warm.link, warm.credit, warm.warm_until = link, 0, None
            warm.warm_timeout, warm.presettled, warm.gen = warm_timeout, presettled, gen
            self.subscribers[link] = warm
            sub = warm
        else:
            if warm is not None:
                self._expire_warm(warm, "came back with another filter")
            sub = Subscriber(link, ident, topic_filter, label, presettled)
            sub.warm_timeout = warm_timeout
            sub.gen = gen
            sub.since = self._continued_since(ident.key, topic_filter, gen)
            self.subscribers[link] = sub
            self._by_sid[sub.sid] = sub
            self._by_key[sub.key] = sub
            self._index_add(sub.sid, topic_filter)
        sub.no_local = ev.qos & NO_LOCAL != 0
        sub.qos2_shared = ev.qos & 3 == 2 and topic_filter.startswith(SHARE_PREFIX)
        if sub.no_local:
            self._no_local = True
        self._actions.append(Subscribed(sub.key, topic_filter, gen, warm_timeout or 0.0, ev.qos,
                                        sub.since))
        answer = self._resume(sub, ev.declared or {})
        self._claim(sub)
        return answer

    def _detach_subscriber(self, link: int, final: bool) -> None:
        """The subscriber's link is gone. `final` (it closed the link) ends the subscription:
        whatever it had not accepted fails, naming it. Otherwise (a detach without close, a
        lost connection) a warm subscriber stays subscribed until its timeout."""
        sub = self.subscribers.pop(link, None)
        if sub is None:
            return
        if not final and sub.warm_timeout:
            self._go_warm(sub, self._now)
            return
        self._unsubscribe(sub, "detached before accepting it")

    def _unsubscribe(self, sub: Subscriber, reason: str) -> None:
        """The subscription ends: its copies not yet accepted fail with `reason`."""
        self._index_remove(sub.sid)
        self._by_sid.pop(sub.sid, None)
        if self._by_key.get(sub.key) is sub:
            del self._by_key[sub.key]
            self._actions.append(Subscribed(sub.key, None))
            if self._where.get(sub.key, (0, ""))[1] == self.config.router_id:
                del self._where[sub.key]
            self._note_ended(sub)
        touched = list(sub.inflight.values()) + list(sub.queue)
        sub.inflight.clear()
        sub.queue.clear()
        for rec in touched:
            copy = rec.copies.get(sub.sid)
            if copy is None:
                continue
            copy.sub_settled = True  # the link is gone: nothing left to settle on it
            if copy.state in (QUEUED, SENT):
                self._fail(rec, copy, self._leave_reason(sub, copy, reason))
        for rec in dict.fromkeys(touched):
            self._decide(rec)
            self._maybe_forget(rec)

    def _go_warm(self, sub: Subscriber, now: float) -> None:
        """A warm subscriber went away: copies in doubt go back to its queue, to be sent
        again first, and everything waits in publish order until it returns or times out."""
        sub.link = None
        sub.credit = 0
        waiting: dict[int, Record] = {}  # in the order it was getting them, not by seq
        for rec in list(sub.inflight.values()) + list(sub.queue):
            copy = rec.copies.get(sub.sid)
            if copy is None:
                continue
            copy.sub_settled = True  # its link is gone: nothing to settle there any more
            if copy.state == SENT:  # in doubt: it may not have seen it, so it comes again
                copy.doubt = True
                move_copy(rec, copy, Step.REQUEUE)
            if copy.state == QUEUED:
                waiting[rec.seq] = rec
        sub.inflight.clear()
        sub.queue = deque(waiting.values())
        if self.config.relay_store:
            for rec in sub.queue:
                self._ask_hold(rec, sub)
        sub.warm_until = until = now + (sub.warm_timeout or self.config.reconnect_timeout)
        heapq.heappush(self._warm_expiry, (until, sub.sid))
        self._note_deadline(until)
        self._warm[sub.key] = sub

    def _expire_warm(self, sub: Subscriber, reason: str) -> None:
        self._warm.pop(sub.key, None)
        self._unsubscribe(sub, reason)

    def _subscriber_credit(self, link: int, credit: int) -> None:
        """The subscriber's link credit is now `credit` (as the edge reads it off the link)."""
        sub = self.subscribers.get(link)
        if sub is not None:
            sub.credit = credit
            if credit > 0:
                sub.stored_full = False
            self._pump(sub)

    def _copy_withheld(self, link: int, tag: bytes, settled: bool) -> None:
        """The edge did not send a copy (`CopyWithheld`): accepted, and its credit back."""
        sub = self.subscribers.get(link)
        if sub is None:
            return
        if not settled:
            self._copy_outcome(link, tag, Disposition.ACCEPTED, True, "")
        sub.credit += 1
        self._pump(sub)

    def has_queued(self, link: int) -> bool:
        sub = self.subscribers.get(link)
        return bool(sub and sub.queue)

    # ------------------------------------------------------------------ other routers

    def _remote_message(self, ev: RemoteMessage) -> None:
        """A message from the origin router, owed to subscribers `owed` (keys) here. They get
        it if still attached; one that left meanwhile counts as failed, unless it moved to
        another router (its origin resends it there). A `resend` may find a record here
        already (from the old origin, or for other subscribers): it is added to, not
        delivered twice."""
        origin, msg_id, owed, ttl_ms = ev.origin, ev.msg_id, ev.owed, ev.ttl_ms
        if ev.gens:
            owed = self._not_reattached(owed, ev.gens)
            if not owed:
                return
        if (origin, msg_id) in self._mesh_records or ev.resend:
            owed = self._remote_resend(origin, msg_id, owed)
            if not owed:
                return
        elif (live := self._carrier(msg_id)) is not None and live.origin != origin:
            # A late copy from its previous origin: the router its publisher resumed at owns
            # the record now (ids are unique per publisher, tag and, for a reused tag, salt).
            # Subscribers here it was owed to and the record lacks get their copy now, in the
            # order it came. The previous origin is answered too, as for a resend beside a
            # live record (`_owed_beside`: now for the copies done, later with the record's
            # verdicts): it still holds its record with a part pending here, and nobody else
            # will end that part. The new origin's resend never reaches it when it owes
            # nobody there, so its record (or a publisher still waiting on it) stayed for
            # ever (seed 15173: a plain forward from B, held up behind a restarting hub,
            # came after the publisher's resend at A had been delivered here).
            self._owed_beside(live, origin, owed)
            if self._add_owed(live, owed, undecide=live.answered is None):
                self._decide(live)
            return
        elif live is None and msg_id in self._tombstones and self._late_copy(msg_id, origin):
            # A late copy after the record it would have joined was forgotten here: the
            # tombstone answers it for the subscribers that record had, as for a resend, and
            # they do not get the message again (a plain forward from the previous origin
            # held up in the mesh until the new origin's resend had been delivered, accepted
            # and forgotten).
            owed = self._remote_resend(origin, msg_id, owed)
            if not owed:
                return
        self._seq += 1
        expires = self._now + ttl_ms / 1000.0 if ttl_ms else None
        mode = ev.mode if ev.mode in MODES else ALL
        rec = Record(self._seq, None, b"", msg_id.encode(), ev.payload, mode, ev.presettled,
                     expires, address=ev.address, origin=origin)
        rec.fresh = not ev.resend
        rec.once = ev.once
        rec.born = self._now
        self.stats.received += 1
        self._track(rec)
        self._mesh_records[(origin, msg_id)] = rec
        if expires is not None:
            heapq.heappush(self._expiry, (expires, rec.seq))
            self._note_deadline(expires)
        missing: list[str] = []
        matched: list[int] = []
        for key in owed:
            sub = self._by_key.get(key)
            if sub is not None:
                if ev.presettled and sub.link is None:
                    continue  # at most once: not kept for a warm subscriber that is away
                matched.append(sub.sid)
            elif self._where.get(key, (0, self.config.router_id))[1] == self.config.router_id:
                missing.append(key)
            # else it lives at another router now: the origin resends it there
        # The failures first: sending copies can decide the verdict (an at-most-once
        # subscriber accepts on send), and it must not be decided without them.
        self._fail_missing(rec, missing)
        self._add_copies(rec, tuple(matched))
        self._decide(rec)
        self._maybe_forget(rec)

    def _not_reattached(self, owed: list[str], gens: dict[str, int]) -> list[str]:
        """Of the keys the origin owes here, leave out those it owed at an older attach than
        the one here now (it left and attached again, here or elsewhere first, since the
        origin sent this): the origin resends to the newer attach when it hears of it, in
        publish order, and this older send may have been overtaken by those resends (a
        partition held it up), or be followed by them."""
        by_key = self._by_key
        return [k for k in owed
                if (sub := by_key.get(k)) is None or sub.gen <= gens.get(k, sub.gen)]

    def _missing(self, owed: list[str]) -> list[str]:
        """Of the keys the origin owes here, those neither attached here nor living at another
        router as far as we know: they left before the message came."""
        me = self.config.router_id
        by_key, where = self._by_key, self._where
        return [k for k in owed if k not in by_key and where.get(k, (0, me))[1] == me]

    def _fail_missing(self, rec: Record, keys: list[str]) -> int:
        """A failed stand-in copy for each of `keys` the record has none for, so that the
        verdict names them: they left before the message came. Returns how many it added."""
        have = {c.sub.key for c in rec.copies.values()}
        added = 0
        for key in keys:
            if key in have:
                continue
            ghost = Subscriber(-1, LinkIdentity(*key.split("/", 1)) if "/" in key
                               else LinkIdentity(key, ""), "", f"{key}@{self.config.router_id}",
                               False)
            copy = add_copy(rec, min(min(rec.copies, default=0), 0) - 1, ghost)
            self._fail(rec, copy, "was no longer attached when the message arrived")
            copy.sub_settled = True
            have.add(key)
            added += 1
        return added

    def _peer_verdict(
        self, router: str, msg_id: str, accepted: bool, status: dict[str, Any],
        keys: list[str] | None, former: bool = False,
    ) -> None:
        """A destination router's verdict on one of our messages, answering for the
        subscribers `keys` there (all we owe there if not given). `former`: its record
        answered us before it answered another origin (`Record.former`)."""
        rec = self._mesh_records.get((self.config.router_id, msg_id))
        if rec is None:
            if not self._released or msg_id not in self._released or former:
                # Forgotten: a failure it answers for late may resolve a part in doubt.
                if len(self._doubts):
                    self._doubts.resolve(router, msg_id, accepted, status, keys)
                # (`former`: told to us for a record of ours it answered before, which a
                # resend of its own took since. That is no sign that the resend which took
                # ours was stale, and we do not reclaim on it: the router the publisher
                # resumed at would yield the record back to us, and when our dead link's
                # record is given up, resend its copies after newer messages, a second
                # time (failover seed 93498).)
                return
            # We took this record from our publisher for `router`, which answers us as its
            # origin: its resend was stale, it yielded to ours (failover.py `_reclaim`).
            rec = self._mesh_records.get((router, msg_id))
            if rec is None or rec.id != msg_id:
                return
            if not self._reclaim(rec):
                self._orphan(rec)  # nobody's now: it waits for its publisher to resend
                return
            rec = self._mesh_records.get((self.config.router_id, msg_id))
            if rec is None:
                return
        asked = keys
        if keys is None:
            keys = [k for k, p in rec.peers.items() if p.router == router]
        failed = status.get("failed", ())
        succeeded = status.get("succeeded", ())
        reasons = status.get("reasons", {})
        for key in keys:
            part = rec.peers.get(key)
            if part is None or part.state != PartState.PENDING:
                continue
            label = f"{key}@{router}"
            if (accepted and not status) or label in succeeded:
                move_part(rec, part, Step.ACCEPT)
            elif part.router != router:
                continue  # it moved on from there: that router's failure is stale news
            elif label in failed:
                move_part(rec, part, Step.FAIL, reasons.get(label, "failed"),
                          label in status.get(IN_DOUBT, ()))
            else:  # answered for, but named nowhere: it cannot be counted as accepted
                move_part(rec, part, Step.FAIL, f"got no outcome from router {router}")
        if rec.failed:
            self._resolve_live(rec, router, accepted, status, asked)
        self._decide(rec)
        self._maybe_forget(rec)

    def _resolve_live(self, rec: Record, router: str, accepted: bool, status: dict[str, Any],
                      keys: list[str] | None) -> None:
        """A verdict that comes for parts this live record failed in doubt (their router was
        given up, then answered) resolves them as for a forgotten record (doubts.py)."""
        unsure = [p.label for p in rec.peers.values()
                  if p.state == PartState.FAILED and p.doubt]
        if unsure:
            if rec.resolved is None:
                rec.resolved = {}
            resolve(unsure, rec.resolved, router, accepted, status, keys)

    def _remote_forget(self, origin: str, msg_id: str, accepted: bool | None,
                       description: str, info: dict[str, Any] | None) -> None:
        """The origin is done with its message: relay settlement here, and drop the record
        once the copies still owed are answered (like a local publisher's settlement).
        `accepted` is the mesh-wide outcome, if there was one; a failure comes with the
        publisher's description and info, which a resend answered from the tombstone gets."""
        rec = self._mesh_records.get((origin, msg_id))
        if rec is not None:
            if accepted:
                rec.final = ACCEPTED
            elif accepted is not None:
                rec.final = Rejected(
                    DELIVERY_FAILED, description or f"message {msg_id} failed at another "
                    "router (this answer comes from a record of its outcome, kept for resends)",
                    info or {})
            if self._released and msg_id in self._released:
                # Taken from our publisher by a resend from `origin` (failover.py): tell that
                # publisher the outcome; without one, the record is its again.
                if rec.final is not None and self._released_answered(rec, rec.final):
                    self._answer_released(rec, rec.final)
                else:
                    # No outcome, or one that need not cover what the publisher's record
                    # owed elsewhere when the resend took it: the record is its again.
                    final, rec.final = rec.final, None
                    if self._reclaim(rec):
                        return
                    rec.final = final
            if rec.outcome is None and rec.former:
                # It stopped tracking it without an outcome, but an origin this record
                # answered before may be where the publisher waits (`Record.former`): what is
                # owed here goes on, and is answered to it, before the record is forgotten.
                rec.pub_settled = True
                self._maybe_forget(rec)
                return
            self._publisher_done(rec)

    # ------------------------------------------------------------------ messages

    def _message(self, ev: MessageArrived) -> None:
        """A publisher's delivery arrived whole. `mode` is the per-message override
        (`x-opt-delivery-mode`), `ttl_ms` the header's time to live.

        `address` is this message's topic, for a publisher whose messages go to many topics
        (an MQTT client); by default the link's address. `resend` says the delivery may be a
        resend of one the mesh already has (an MQTT PUBLISH with DUP=1): a live record of it
        is adopted, but it is never answered from a tombstone, since MQTT packet ids are
        reused and an old outcome for the same id may belong to another message."""
        link, tag, payload, settled, ttl_ms = ev.link, ev.tag, ev.payload, ev.settled, ev.ttl_ms
        pub = self.publishers.get(link)
        if pub is None:
            return
        if pub.credit_out <= 0:
            self._actions.append(
                CloseLink(link, TRANSFER_LIMIT, "the link sent a message without credit")
            )
            return
        pub.credit_out -= 1
        if self._joining and not (settled and self._join_failure):
            if self._join_failure:
                self._not_routed(pub, ev)
            else:
                self._before_join.append(ev)
                pub.live += 1
            return
        if not settled and tag in pub.records:
            self._actions.append(
                CloseLink(
                    link,
                    "amqp:invalid-field",
                    f"delivery tag {tag.hex()} is already in use by an unsettled delivery; "
                    "tags must be unique among a link's unsettled deliveries",
                )
            )
            return
        declared, resend = ev.resend, False
        later: int | None = None
        if pub.resends and tag in pub.resends:
            # Its place in the declaration: what it declared after this one comes later in
            # its publish order (`_add_copies`).
            later = pub.resends.pop(tag)
            if self._resend_from_publisher(pub, tag, ttl_ms, settled):
                return
            resend = True
        elif declared and not settled:
            live = self._by_id.get(self._tag_for(pub, tag).decode())
            # Only a live record of its own, orphaned by a lost connection (the first case
            # of `_resend_from_publisher`); never its tombstone branch.
            # [issue 5, MQTT across routers; mqtt-mesh helper] ... or a destination's
            # record here of the same message from an origin router the device left (it
            # resumed here): adopting it makes the resend count once mesh-wide (routers
            # elsewhere adopt theirs from the resend this forwards). The same payload
            # guards against a reused packet id.
            if live is not None and live.publisher is None and not live.pub_settled \
                    and (live.origin is None or live.payload == payload):
                if self._resend_from_publisher(pub, tag, ttl_ms, settled):
                    return
                resend = True
        out_tag = self._tag_for(pub, tag)
        clash = None if resend else self._by_id.get(out_tag.decode())
        if clash is not None and self._moved_on(pub, clash, payload):
            return
        self.stats.received += 1
        mode = ev.mode
        if mode not in MODES:
            mode = pub.mode
        seq = self._next_seq()
        if clash is not None:
            # The publisher reused a tag (legal once it settled) while the older message is
            # still owed to someone: both must stay distinct at subscribers and across the
            # mesh, so this one's tag is salted with its sequence number.
            out_tag = outgoing_tag(pub.ident.container, pub.ident.name, tag + b"#%d" % seq)
        expires = self._now + ttl_ms / 1000.0 if ttl_ms else None
        rec = Record(seq, pub, tag, out_tag, payload, mode, settled, expires)
        rec.born = self._now
        rec.fresh = not (resend or declared)
        guarantee = ev.guarantee
        rec.once = pub.once if guarantee not in GUARANTEES else guarantee == EXACTLY_ONCE
        if ev.address is not None:
            rec.address = ev.address
        if self._topic_counts is not None:
            self._count_topic(rec.address, 0)
        matched = self._index.match(rec.address)
        if self._no_local and matched:
            matched = self._not_own(matched, pub.ident.container)
        if resend:
            remote = self._resend_matches(rec.address)
        else:
            remote = self._remote.match(rec.address) if len(self._remote) else ()
        if self._has_groups():
            local_members, remote_members = self._pick_groups(rec)
            matched += local_members
            remote += remote_members
        if settled:  # at most once: nothing waits for a warm subscriber that is away
            owed = len(matched) + len(remote)
            matched, remote = self._present(matched, remote)
            self.stats.presettled_dropped += owed - len(matched) - len(remote)
        if not matched and not remote:
            self._no_subscribers(pub, rec)
            return
        self._track(rec)
        pub.live += 1
        if not settled:
            pub.records[tag] = rec
        if expires is not None:
            heapq.heappush(self._expiry, (expires, seq))
            self._note_deadline(expires)
        if remote:
            self._forward(rec, remote, ttl_ms, resend)
        self._add_copies(rec, matched, self.remembered_accepted(rec.id) if resend else (), later)
        if settled and not matched:  # forwarded only, at most once: nothing to wait for
            self._maybe_forget(rec)

    def _moved_on(self, pub: Publisher, live: Record, payload: bytes) -> bool:
        """Whether this delivery is one its publisher has since published at another router:
        here is that router's record of the same message (same identity, tag and body). The
        transfer reached us late, on a connection the publisher gave up (its bytes waited in a
        partition or in the socket buffer of this router, paused): publishing it again would
        make a second message of it, under a salted tag no duplicate filter recognises (test
        bed finding 2, docs/testbed.md). The publisher lives there now: this older link is
        closed, as `_replace_publisher` closes one at the same router."""
        if live.origin is None or live.publisher is not None or live.payload != payload:
            return False
        self.publishers.pop(pub.link, None)
        self._actions.append(CloseLink(
            pub.link, LINK_STOLEN, f"publisher {pub.label} has since sent this message "
            f"through router {live.origin}; this older attach is closed and the transfer was "
            "not published again"))
        for rec in list(pub.records.values()):
            self._orphan(rec)
        pub.records.clear()
        return True

    def _joined(self) -> None:
        """The mesh's subscriptions are known: the messages that waited are routed as if
        they arrived now."""
        self._joining = False
        self._join_failure = ""
        for pub, ev in self._take_waiting():
            pub.credit_out += 1  # `_message` takes it again
            self._message(ev)

    def _join_timed_out(self, description: str) -> None:
        """The router heard no peer within `join-timeout`: what waited fails, and so does
        what comes until it joins. Nobody was sent any of it: the failure is not in doubt,
        and publishing again is safe."""
        self._join_failure = description
        for pub, ev in self._take_waiting():
            if ev.settled:  # at most once: to the subscribers it knows, as it would now
                pub.credit_out += 1  # `_message` takes it again
                self._message(ev)
            else:
                self._not_routed(pub, ev)

    def _take_waiting(self) -> list[tuple[Publisher, MessageArrived]]:
        """The messages that waited for the mesh, with their publishers, no longer counted
        in their windows. One whose publisher left meanwhile was never answered; the
        publisher sends it again when it comes back."""
        waited, self._before_join = self._before_join, []
        out = []
        for ev in waited:
            pub = self.publishers.get(ev.link)
            if pub is not None:
                pub.live -= 1
                out.append((pub, ev))
        return out

    def _not_routed(self, pub: Publisher, ev: MessageArrived) -> None:
        self._seq += 1
        rec = Record(self._seq, pub, ev.tag, b"", b"", pub.mode, False, None)
        rec.id = f"not-routed-{self._seq}"
        if ev.address is not None:
            rec.address = ev.address
        self.stats.rejected += 1
        self._hold_for_settlement(pub, rec, Rejected(
            DELIVERY_FAILED, self._join_failure,
            {"succeeded": [], "failed": [], "pending": [], "delivery_id": rec.id}))

    def joining(self) -> int | None:
        """While the router waits to hear the mesh's subscriptions: how many messages wait
        for that; otherwise None."""
        return len(self._before_join) if self._joining else None

    def _present(
        self, matched: tuple[int, ...], remote: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[int, ...], tuple[tuple[str, str], ...]]:
        """The subscribers a pre-settled message goes to: those attached now. The server keeps
        only guaranteed messages for a warm client (seed 001), as MQTT servers keep no QoS 0
        message for an offline session: holding one would hold its publisher's window too."""
        by_sid = self._by_sid
        return (tuple(sid for sid in matched if by_sid[sid].link is not None),
                tuple(entry for entry in remote if entry[0] != AWAY))

    def _not_own(self, matched: tuple[int, ...], own: str) -> tuple[int, ...]:
        """Leave out the subscribers that asked not to get what their own container `own`
        publishes (MQTT 5 No Local, MQTT-3.8.3-3): the message is not owed to them at all."""
        by_sid = self._by_sid
        return tuple(sid for sid in matched
                     if not (by_sid[sid].no_local and by_sid[sid].ident.container == own))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _tag_for(self, pub: Publisher, tag: bytes) -> bytes:
        return outgoing_tag(pub.ident.container, pub.ident.name, tag)

    def _add_copies(
        self, rec: Record, matched: tuple[int, ...], done: tuple[str, ...] = (),
        later: int | None = None,
    ) -> None:
        """Queue a copy for each matched local subscriber, in arrival order. `done`: keys
        that accepted this message before (a forgotten record remembers them): their copies
        count as accepted and are not sent again. `later`: for a publisher's resend that is
        new here, its place among the tags it declared (see `_queue_before`)."""
        by_sid = self._by_sid
        pub = rec.publisher
        for sid in matched:
            sub = by_sid[sid]
            if done and sub.key in done:
                add_copy(rec, sid, sub, accepted=True)
                continue
            if sub.placeholders:
                self._add_copy(rec, sub)
            else:
                add_copy(rec, sid, sub)
            if later is not None and pub is not None and pub.resends and sub.queue:
                self._queue_before(sub, rec, pub, later)
            else:
                sub.queue.append(rec)
        for sid in matched:
            self._pump(by_sid[sid])
        if self.config.relay_store:
            for sid in matched:
                sub = by_sid[sid]
                if sub.warm_timeout and (sub.link is None or sub.credit <= 0):
                    self._store_waiting(rec, sub)
        if rec.accepted:  # a resumed subscriber had declared it accepted already
            self._decide(rec)

    def _queue_before(self, sub: Subscriber, rec: Record, pub: Publisher, place: int) -> None:
        """Queue `rec`, a publisher's resend new here, ahead of the first copy waiting for
        `sub` (not sent yet) of a message the publisher declared after it (after `place`,
        and its resend not here yet): that one came from the message's old origin before the
        publisher resumed here, and its resend, which adopts it where it waits, comes after
        this one."""
        queue = sub.queue
        ids, pending = pub.resend_ids, pub.resends
        for i, queued in enumerate(queue):
            declared = ids.get(queued.id)
            if declared is not None and pending.get(declared, -1) > place:
                copy = queued.copies.get(sub.sid)
                if copy is not None and not copy.attempts:
                    queue.insert(i, rec)
                    return
        queue.append(rec)

    def _add_copy(self, rec: Record, sub: Subscriber) -> None:
        """A copy for `sub`; one it declared accepted on resume counts as accepted at once."""
        add_copy(rec, sub.sid, sub, accepted=bool(sub.placeholders) and self._fulfil(sub, rec))

    def _forward(
        self, rec: Record, remote: tuple[tuple[str, str], ...], ttl_ms: int | None,
        resend: bool = False,
    ) -> None:
        """Owe the message to the remote subscribers we know of, grouped by their router. A
        warm subscriber away from a lost router is owed it too, and gets it when it is back."""
        owed: dict[str, list[str]] = {}
        gens: dict[str, int] = {}
        where = self._where
        presettled = rec.presettled
        for router, key in remote:
            if router:
                owed.setdefault(router, []).append(key)
                if (at := where.get(key)) is not None and at[1] == router:
                    gens[key] = at[0]
                if not presettled:  # at most once: no verdict comes back, nothing to wait for
                    add_part(rec, key, router, gen=gens.get(key, 0))
            else:  # away: named after the router it was lost with
                away = self._away[key]
                add_part(rec, key, None, away.router, away.gen)
        if not presettled:
            rec.told.update(owed)
            self._mesh_records[(self.config.router_id, rec.id)] = rec
        if resend and rec.former and owed:
            self._reached(rec, owed)  # (a former origin this resend reaches takes it over)
        if owed:
            pub = rec.publisher
            self._actions.append(Forward(rec.id, owed, rec.address, rec.payload, rec.mode,
                                         ttl_ms, pub.label if pub is not None else "", resend,
                                         presettled, gens or None, rec.once))

    def _refuse_message(
        self, link: int, tag: bytes, condition: str, description: str, settled: bool
    ) -> None:
        """A publisher's delivery the edge could not make sense of (say, malformed): it is
        rejected at once and delivered to nobody, but it used credit like any other."""
        pub = self.publishers.get(link)
        if pub is None:
            return
        pub.credit_out = max(0, pub.credit_out - 1)
        if settled:
            self._refill(pub)
            return
        self._seq += 1
        rec = Record(self._seq, pub, tag, b"", b"", pub.mode, False, None)
        rec.id = f"refused-{self._seq}"
        self._hold_for_settlement(pub, rec, Rejected(condition, description, {}))

    def _copy_outcome(
        self, link: int, tag: bytes, disposition: int, settled: bool, error: str
    ) -> None:
        """A subscriber gave an outcome for (or settled) copy `tag`. `error` is the
        subscriber's own description, passed on to the publisher when it rejected."""
        sub = self.subscribers.get(link)
        if sub is None:
            return
        rec = sub.inflight.get(tag)
        if rec is None:
            return  # a late answer for a copy already settled (expired, withdrawn)
        copy = rec.copies[sub.sid]
        if settled:
            copy.sub_settled = True
        if copy.state != SENT:
            if settled:
                del sub.inflight[tag]
            return
        if disposition == Disposition.ACCEPTED:
            self.stats.copies_accepted += 1
            move_copy(rec, copy, Step.ACCEPT)
            if settled:
                del sub.inflight[tag]
        elif disposition in (Disposition.RELEASED, Disposition.MODIFIED):
            if disposition == Disposition.RELEASED:
                self.stats.copies_released += 1
            else:
                self.stats.copies_modified += 1
            self._settle_copy(sub, rec, copy)
            copy.doubt = False  # it says it did not process it
            if copy.attempts >= self.config.max_delivery_attempts:
                self._fail(rec, copy, f"released it {copy.attempts} times without accepting",
                           False)
            else:
                move_copy(rec, copy, Step.REQUEUE)
                sub.queue.appendleft(rec)  # a redelivery goes before anything newer
                self._pump(sub)
        else:
            self._settle_copy(sub, rec, copy)
            if disposition == Disposition.REJECTED:
                self.stats.copies_rejected += 1
                why = f"rejected it ({error})" if error else "rejected it"
            else:
                self.stats.copies_modified += 1
                why = "said it can never take it here (modified, undeliverable-here)"
            self._fail(rec, copy, why, False)  # it said so: it did not process it
        self._decide(rec)
        self._maybe_forget(rec)

    def _publisher_settled(self, link: int, tag: bytes) -> None:
        """The publisher settled its delivery `tag`. After an outcome that is the normal end;
        before one it is the seed's DELETE: stop tracking the message."""
        pub = self.publishers.get(link)
        if pub is None:
            return
        rec = pub.records.pop(tag, None)
        if rec is not None:
            self._publisher_done(rec)
        elif self._released:  # one taken by a resend from elsewhere: it is not waiting now
            msg_id = self._tag_for(pub, tag).decode()
            entry = self._released.get(msg_id)
            if entry is not None and entry[0] is pub and entry[1] == tag:
                self._drop_released(msg_id)

    def _tick(self, now: float) -> None:
        """Time is now `now`: fail copies of messages whose ttl ran out, warm subscribers
        that did not come back, and whatever waited too long after a failure."""
        self._tick_failover(now)
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, seq = heapq.heappop(heap)
            rec = self.records.get(seq)
            if rec is not None:
                self._expire(rec)
        warm = self._warm_expiry
        while warm and warm[0][0] <= now:
            until, sid = heapq.heappop(warm)
            sub = self._by_sid.get(sid)
            if sub is not None and sub.link is None and sub.warm_until == until:
                timeout = sub.warm_timeout or self.config.reconnect_timeout
                self._expire_warm(sub, f"did not come back within {timeout:g} s")

    # ------------------------------------------------------------------ internals

    def _pump(self, sub: Subscriber) -> None:
        """Send queued copies while the subscriber has credit."""
        queue = sub.queue
        link = sub.link
        if link is None or sub.holding:
            return  # a warm subscriber away, or one waiting for its placeholders
        sid = sub.sid
        actions = self._actions
        while sub.credit > 0 and queue:
            rec = queue.popleft()
            copy = rec.copies.get(sid)
            if copy is None or copy.state != QUEUED:
                continue  # withdrawn or expired while it waited
            attempt = copy.attempts
            copy.attempts += 1
            sub.credit -= 1
            self.stats.delivered += 1
            if attempt:
                self.stats.redelivered += 1
            if rec.presettled or sub.presettled:
                # At most once: nothing will come back for this copy.
                actions.append(Send(link, rec.out_tag, rec.payload, attempt, True,
                                    rec.address, self._ttl_left(rec)))
                self._accepted_settled(rec, copy, Step.SEND_SETTLED)
            else:
                move_copy(rec, copy, Step.SEND)
                copy.sub_settled = False  # a redelivery is a new transfer to settle
                sub.inflight[rec.out_tag] = rec
                actions.append(Send(link, rec.out_tag, rec.payload, attempt, False,
                                    rec.address, self._ttl_left(rec)))

    def _accepted_settled(self, rec: Record, copy: Copy, step: Step) -> None:
        """A pending copy counts as accepted with nothing left to settle on the link (sent
        pre-settled, or declared accepted by a resuming subscriber)."""
        move_copy(rec, copy, step)
        copy.sub_settled = True
        self._decide(rec)
        self._maybe_forget(rec)

    def _fail(self, rec: Record, copy: Copy, reason: str, doubt: bool = True) -> None:
        """Fail `copy`; in doubt unless the subscriber said it did not take it (`move_copy`)."""
        move_copy(rec, copy, Step.FAIL, reason, doubt)

    def _settle_copy(self, sub: Subscriber, rec: Record, copy: Copy) -> None:
        """Settle the router's side of a sent copy, once."""
        if (sub.inflight.pop(rec.out_tag, None) is not None and not copy.sub_settled
                and sub.link is not None):
            self._actions.append(SettleCopy(sub.link, rec.out_tag))
        copy.sub_settled = True

    def _decide(self, rec: Record) -> None:
        """Tell the publisher (or, for a message from another router, its origin) as soon as
        the outcome is certain. Parts are local copies and other routers' verdicts."""
        if rec.former and rec.origin is None:
            self._answer_former(rec)
        if rec.outcome is not None or rec.presettled:
            if rec.answered is not None and rec.origin is not None:
                self._answer_more(rec)
            return
        if rec.failed and rec.groups is not None and rec.origin is None:
            self._regroup(rec)  # a shared group's member left: another one is owed it now
            if rec.outcome is not None:
                return
        n = rec.parts
        if rec.mode == ALL:
            if rec.failed:
                outcome: Outcome = self._failure(rec)
            elif rec.accepted == n:
                outcome = ACCEPTED
            else:
                if rec.held:
                    self._maybe_release(rec)
                return
        elif rec.accepted:
            outcome = ACCEPTED
        elif rec.failed == n:
            outcome = self._failure(rec)
        else:
            if rec.held:
                self._maybe_release(rec)
            return
        rec.outcome = outcome
        if rec.origin is not None:
            verdict = self._verdict(rec, outcome)
            self._actions.append(verdict)
            if rec.former:
                self._tell_former(rec, verdict)
            return
        if outcome is ACCEPTED:
            self.stats.accepted += 1
        else:
            self.stats.rejected += 1
            if rec.early:
                self.stats.early_failed += 1
        if self._topic_counts is not None:
            self._count_topic(rec.address, 1 if outcome is ACCEPTED else 2)
        if self._now - rec.born > 1.0:
            self.stats.delayed_1s += 1
            if self._now - rec.born > 10.0:
                self.stats.delayed_10s += 1
        pub = rec.publisher
        if pub is not None and not rec.pub_settled and not rec.early:
            self._actions.append(Decide(pub.link, rec.pub_tag, outcome))

    def _verdict(self, rec: Record, outcome: Outcome) -> Verdict:
        """The answer to the origin for the subscribers here. An accepted verdict in mode
        'all' needs no status: every one of `keys` accepted."""
        assert rec.origin is not None
        accepted = outcome is ACCEPTED
        status = {} if accepted and rec.mode == ALL else rec.status()
        # It answers for the subscribers whose copies are done; one still pending (the
        # outcome was decided without it) is answered for later, by `_answer_more`.
        keys = [c.sub.key for c in rec.copies.values() if c.state in (ACCEPTED_STATE, FAILED)]
        rec.answered = set(keys)
        return Verdict(rec.origin, rec.id, accepted, status, keys)

    def _answer_more(self, rec: Record) -> None:
        """After the verdict, more copies are done: tell the origin about them too, so that
        its parts for them end (it cannot forget the message before)."""
        answered = rec.answered
        assert answered is not None and rec.origin is not None
        keys = [c.sub.key for c in rec.copies.values()
                if c.state in (ACCEPTED_STATE, FAILED) and c.sub.key not in answered]
        if keys:
            answered.update(keys)
            verdict = Verdict(rec.origin, rec.id, False, rec.status(), keys)
            self._actions.append(verdict)
            if rec.former:
                self._tell_former(rec, verdict)

    def _answer_former(self, rec: Record) -> None:
        """Our own record answered other origins before (`Record.former`: a destination's
        record its publisher resent here, failover.py `_adopt_for_publisher`): their records
        still wait for the copies here, each answered for once it is done."""
        answered = rec.answered if rec.answered is not None else set()
        done = [c for c in rec.copies.values()
                if c.state in (ACCEPTED_STATE, FAILED) and c.sub.key not in answered]
        if done:
            keys = [c.sub.key for c in done]
            answered.update(keys)
            rec.answered = answered
            failed = [c for c in done if c.state == FAILED]
            # (the copies here only: its parts elsewhere are no business of theirs)
            status = {"succeeded": [c.sub.label for c in done if c.state == ACCEPTED_STATE],
                      "failed": [c.sub.label for c in failed], "pending": [],
                      "reasons": {c.sub.label: c.reason for c in failed}}
            doubt = [c.sub.label for c in failed if c.doubt]
            if doubt:
                status[IN_DOUBT] = doubt
            for origin in rec.former:
                if origin in rec.told:
                    # We resent it there since (`rec.told`): its record there took our resend
                    # and answers us now (failover.py `_remote_resend`), so it waits for no
                    # word from here (failover seed 38481; the word is marked `former` too,
                    # so that it is never read as an origin's answer, seed 93498).
                    continue
                self._actions.append(Verdict(origin, rec.id, False, status, keys, True))

    def _tell_former(self, rec: Record, verdict: Verdict) -> None:
        """The same verdict to the origins `rec` answered before its current one
        (`Record.former`): one of them may be where its publisher is."""
        for origin in rec.former:
            self._actions.append(Verdict(origin, verdict.msg_id, verdict.accepted,
                                         verdict.status, verdict.keys, True))

    def _failure(self, rec: Record) -> Rejected:
        status = rec.status()
        reasons = status["reasons"]
        failed = "; ".join(f"{who} {why}" for who, why in reasons.items())
        n = len(status["succeeded"]) + len(status["failed"]) + len(status["pending"])
        need = "every subscriber" if rec.mode == ALL else "at least one subscriber"
        description = (
            f"message {rec.id} to {rec.address!r} failed for {len(status['failed'])} of {n} "
            f"subscriber(s): {failed}. Delivery mode {rec.mode!r} needs {need} to accept; "
            f"see info for who succeeded, failed and is still pending"
        )
        doubt = status.get(IN_DOUBT)
        if doubt:
            # (the SDK's `Failure.in_doubt` reads this sentence: amqp_edge/sdk_core.py)
            description += (". In doubt (it may have processed the message; its answer was "
                            f"lost): {', '.join(doubt)}")
        info = dict(status, delivery_id=rec.id, mode=rec.mode)
        return Rejected(DELIVERY_FAILED, description, info)

    def _no_subscribers(self, pub: Publisher, rec: Record) -> None:
        if rec.presettled:
            self._refill(pub)
            return
        if self.config.no_subscribers == "reject":
            outcome: Outcome = Rejected(
                NO_SUBSCRIBERS,
                f"no subscriber matches topic {rec.address!r}; subscribe first, or set the "
                f"router's no-subscribers policy to 'accept'",
                {"succeeded": [], "failed": [], "pending": [], "delivery_id": rec.id},
            )
            self.stats.rejected += 1
        else:
            outcome = ACCEPTED
            self.stats.accepted += 1
        if self._topic_counts is not None:
            self._count_topic(rec.address, 1 if outcome is ACCEPTED else 2)
        self._hold_for_settlement(pub, rec, outcome)

    def _hold_for_settlement(self, pub: Publisher, rec: Record, outcome: Outcome,
                             counted: bool = True) -> None:
        """Decide at once, and keep the record until the publisher settles so that its
        settlement finds it (and its credit comes back then, not before; `counted` False:
        it stands for a released record, which counts in no window)."""
        rec.outcome = outcome
        self._track(rec)
        if counted:
            pub.live += 1
        pub.records[rec.pub_tag] = rec
        self._actions.append(Decide(pub.link, rec.pub_tag, outcome))

    def _publisher_done(self, rec: Record) -> None:
        """The publisher settled (or left). Without an outcome yet, the message is no longer
        tracked: copies not sent are withdrawn, copies sent are settled."""
        rec.pub_settled = True
        if rec.outcome is None and not rec.early:  # (answered early: its copies stay owed)
            self.stats.deleted += 1
            self._withdraw(rec)
        self._maybe_forget(rec)

    def _withdraw(self, rec: Record) -> None:
        """Stop waiting for anyone: parts and copies still pending are withdrawn (copies
        sent are settled)."""
        withdrawn = [p for p in rec.peers.values() if p.state == PartState.PENDING]
        for part in withdrawn:
            move_part(rec, part, Step.WITHDRAW)
        for copy in rec.copies.values():
            if copy.state == SENT:
                self._settle_copy(copy.sub, rec, copy)
            if copy.state == QUEUED or copy.state == SENT:
                move_copy(rec, copy, Step.WITHDRAW)

    def _expire(self, rec: Record) -> None:
        self.stats.expired += 1
        for part in rec.peers.values():
            if part.state == PartState.PENDING:
                why = f"did not accept it before its ttl ran out (no answer from {part.router})"
                move_part(rec, part, Step.FAIL, why)
        for copy in rec.copies.values():
            if copy.state == QUEUED:
                self._fail(rec, copy, "did not get it before its ttl ran out")
            elif copy.state == SENT:
                self._settle_copy(copy.sub, rec, copy)
                self._fail(rec, copy, "did not accept it before its ttl ran out")
        self._decide(rec)
        self._maybe_forget(rec)

    def _maybe_forget(self, rec: Record) -> None:
        """Forget a record once its publisher settled and no copy is still owed."""
        if rec.pending or not rec.pub_settled or rec.seq not in self.records:
            return
        self._untrack(rec)
        self._remember(rec)
        outcome = rec.outcome
        if rec.origin is None and isinstance(outcome, Rejected) and rec.failed:
            self._keep_doubt(rec, outcome)
        mesh_key = (rec.origin or self.config.router_id, rec.id)
        if self._mesh_records.get(mesh_key) is rec:  # peers it had may have moved here
            del self._mesh_records[mesh_key]
        if rec.told:
            accepted = None if outcome is None else outcome is ACCEPTED
            if isinstance(outcome, Rejected):
                self._actions.append(Forget(sorted(rec.told), rec.id, False,
                                            outcome.description, outcome.info))
            else:
                self._actions.append(Forget(sorted(rec.told), rec.id, accepted))
        for copy in rec.copies.values():
            if not copy.sub_settled and copy.state == ACCEPTED_STATE:
                # Relay the publisher's settlement to a subscriber still waiting for it.
                self._settle_copy(copy.sub, rec, copy)
        if rec.stored:
            self._actions.append(Unhold(rec.id))
        if rec.released:  # its window place was given back already
            self._released_done()
            return
        pub = rec.publisher
        if pub is not None:
            pub.live -= 1
            if pub.link in self.publishers:
                self._refill(pub)

    def _keep_doubt(self, rec: Record, outcome: Rejected) -> None:
        """A failure is forgotten: keep it if someone is in doubt at the end (a part may have
        failed after the outcome was decided, in mode 'all')."""
        status = rec.status()
        if status.get(IN_DOUBT):
            pub = rec.publisher
            self._doubts.keep(Doubt(rec.id, rec.address, rec.mode,
                                    pub.label if pub is not None else None, outcome.condition,
                                    outcome.description, status, dict(rec.resolved or {})))

    # ------------------------------------------------------------------ relay store

    def _store_waiting(self, rec: Record, sub: Subscriber) -> None:
        """A warm subscriber is away, or present with its window full: its copy of `rec`
        waits, so it is stored, and its publisher need not wait with it (docs/relay.md). The
        first time its window is found full, the copies in that window are stored too: the
        client may be holding its acknowledgements back until its own publishes are answered
        (a client subscribed to its own topic), and they would wait for each other."""
        self._ask_hold(rec, sub)
        if sub.link is not None and not sub.stored_full:
            sub.stored_full = True
            for sent in sub.inflight.values():
                if sent is not rec:  # (asked for just above)
                    self._ask_hold(sent, sub)

    def _ask_hold(self, rec: Record, sub: Subscriber) -> None:
        """Ask the relay store to hold `sub`'s pending copy of `rec`: `Held` comes back once
        the store committed it. Not an at-most-once copy."""
        copy = rec.copies.get(sub.sid)
        if copy is None or copy.held or copy.state > SENT or rec.presettled \
                or sub.presettled:
            return
        self._actions.append(Hold(sub.sid, rec.seq, sub.key, rec.id, rec.address,
                                  rec.payload, rec.origin or ""))

    def _copies_stored(self, items: list[tuple[int, int]]) -> None:
        """The store committed these copies: they are durable now (docs/relay.md)."""
        touched: dict[int, Record] = {}
        for sid, seq in items:
            rec = self.records.get(seq)
            copy = rec.copies.get(sid) if rec is not None else None
            if rec is None or copy is None or copy.held or copy.state > SENT:
                continue  # accepted, failed or gone meanwhile: nothing waits for the store
            hold_copy(rec, copy)
            self.stats.stored += 1
            touched[seq] = rec
        for rec in touched.values():
            if rec.origin is not None:
                self._tell_stored(rec)
            self._decide(rec)

    def _tell_stored(self, rec: Record) -> None:
        """Another router's message: tell its origin which of its copies here are stored,
        once each, so that its parts for them count as stored there."""
        told = rec.stored_told if rec.stored_told is not None else set()
        keys = [c.sub.key for c in rec.copies.values()
                if c.held and c.state <= SENT and c.sub.key not in told]
        if keys and rec.origin is not None:
            told.update(keys)
            rec.stored_told = told
            self._actions.append(StoredAt(rec.origin, rec.id, keys))

    def _peer_stored(self, router: str, msg_id: str, keys: list[str]) -> None:
        """Router `router` says its relay store holds the copies of our message for `keys`:
        their parts count as stored (not accepted), if they are still owed there."""
        rec = self._by_id.get(msg_id)
        if rec is None or rec.origin is not None:
            return  # forgotten, or not ours (any more): its origin now hears it, if anyone
        held = False
        for key in keys:
            part = rec.peers.get(key)
            if part is not None and part.router == router and not part.held \
                    and part.state == PartState.PENDING and part.ended is None:
                hold_part(rec, part)
                held = True
        if held:
            self._decide(rec)

    def _restore(self, items: list[tuple[str, str, str, str]]) -> list[tuple[str, str]]:
        """After a restart: the copies the relay store kept become records again, each owed
        to its warm subscriber (restored away just before), stored and released. Ours have no
        publisher to tell (it was answered, or it resends); another origin's answer their
        origin, which may be waiting for them. Returns the (key, delivery id) of copies
        nobody here is owed any more: the caller drops them from the store."""
        unowed: list[tuple[str, str]] = []
        restored: dict[str, Record] = {}
        for key, msg_id, address, origin in items:
            sub = self._warm.get(key)
            rec = restored.get(msg_id)
            if sub is None or (rec is None and msg_id in self._by_id) or (
                    rec is not None and sub.sid in rec.copies):
                unowed.append((key, msg_id))
                continue
            if rec is None:
                rec = Record(self._next_seq(), None, b"", msg_id.encode(), IN_STORE, ALL,
                             False, None, address=address, origin=origin or None)
                rec.pub_settled = True  # no publisher link here waits for it
                rec.born = self._now
                self._track(rec)
                restored[msg_id] = rec
                if origin:
                    self._mesh_records[(origin, msg_id)] = rec
                else:
                    rec.released = True
                    self._stored_waiting += 1
            copy = add_copy(rec, sub.sid, sub)
            sub.queue.append(rec)
            hold_copy(rec, copy)
        return unowed

    def _maybe_release(self, rec: Record) -> None:
        """Every pending part of our record is a stored copy: its publisher's window place
        comes back, its body goes (the store has it), and a publisher whose acknowledgement
        counts stored copies is answered now. Its final outcome still waits for them."""
        if rec.released or rec.origin is not None or rec.pending != rec.held:
            return
        if self._stored_waiting >= self.config.relay_waiting_limit:
            self._release_blocked.append(rec)  # back-pressure: released when there is room
            return
        rec.released = True
        self._stored_waiting += 1
        self.stats.released += 1
        if rec.stored:  # our own store has the body (not only other routers' stores)
            rec.payload = IN_STORE
        pub = rec.publisher
        if pub is None:
            return
        if rec.outcome is None and not rec.pub_settled:
            if pub.stored_enough:  # MQTT: PUBACK / PUBREC now
                rec.early = True
                self._actions.append(Decide(pub.link, rec.pub_tag, ACCEPTED))
            else:
                self._actions.append(Relayed(pub.link, rec.pub_tag))
        pub.live -= 1
        if pub.link in self.publishers:
            self._refill(pub)

    def _released_done(self) -> None:
        """A released record is forgotten: one blocked by the limit may go now."""
        self._stored_waiting -= 1
        blocked = self._release_blocked
        while blocked and self._stored_waiting < self.config.relay_waiting_limit:
            rec = blocked.popleft()
            if rec.seq in self.records and rec.held:
                self._maybe_release(rec)

    def _track(self, rec: Record) -> None:
        """A record is live: index it by sequence number and by delivery id."""
        self.records[rec.seq] = rec
        older = self._by_id.setdefault(rec.id, rec)
        if older is not rec:  # a reused id: the newest takes the index
            self._id_clashes.setdefault(rec.id, []).append(older)
            self._by_id[rec.id] = rec

    def _untrack(self, rec: Record) -> None:
        """Undo `_track`; an older record with the same id takes the index back."""
        del self.records[rec.seq]
        clashes = self._id_clashes.get(rec.id) if self._id_clashes else None
        if clashes is None:
            del self._by_id[rec.id]
            return
        if self._by_id[rec.id] is rec:
            self._by_id[rec.id] = clashes.pop()
        else:
            clashes.remove(rec)
        if not clashes:
            del self._id_clashes[rec.id]

    def _refill(self, pub: Publisher, force: bool = False) -> None:
        """Keep the publisher's credit plus its live records at the window; grant in
        batches so that a busy link does not cost a flow frame per message."""
        window = self.config.publisher_window
        room = window - pub.live - pub.credit_out
        if room > 0 and (force or room >= max(1, window // 4)):
            pub.credit_out += room
            self._actions.append(Credit(pub.link, room))

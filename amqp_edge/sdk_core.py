"""The exactly-once SDK's decisions, sans-IO: `PublisherCore`, `SubscriberCore`, `Reconnect`.

`amqp_edge.client` runs these inside its proton I/O thread, with SQLite stores
(`amqp_edge.client_store`); the simulator (`router.sim`) can run them on its own clock with the
in-memory stores below. Events go in as method calls with plain values (tags, sequence numbers,
outcome names, `now` as a float the caller reads from its clock); decisions come out as plain
values and small dataclasses. Nothing here does I/O, reads a clock, takes a lock or touches
proton or SQLite (an import-linter contract in pyproject.toml holds it to that).

The cores take no locks. A driver that calls one from several threads serialises the calls
that share state; `PublisherCore` and `SubscriberCore` say which those are.

The stores. A core does not call a store; the driver does, and tells the core what happened:

- `PublisherCore` hands out group commits (`take_commit()`: new messages, accepted ones,
  failed ones) for the driver to write (`PublisherCommit.apply_to(store)`), and acts on them
  only when told they are durable (`committed()`): a message is sent, and an outcome reported,
  only after its commit. When to commit (once per batch of I/O events) is the driver's choice.
- `SubscriberCore` is given what the store says: the answer already recorded for an arriving
  tag (`store.outcome_of(tag)`, argument `answered` of `on_delivery`), whether recording an
  application's answer was new (`store.record`, argument `new` of `answer`, recorded first as
  `must_record` says), and the attach generation (`store.next_gen()`, argument of
  `declaration`). The per-delivery look-up is a read the driver does before the call; a record
  is a commit that must precede the disposition; neither needs the core's state.

The wire format of the declarations is docs/resume-protocol.md.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTEMPT_TIMEOUT",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "FATAL_CONDITIONS",
    "RESUME_ACCEPTED_AGE",
    "RESUME_ACCEPTED_MAX",
    "Answer",
    "Failure",
    "Incoming",
    "MemoryPublisherStore",
    "MemorySubscriberStore",
    "Outcome",
    "PublisherCommit",
    "PublisherCore",
    "Reaction",
    "Reconnect",
    "Shown",
    "SubscriberCore",
    "Transfer",
    "is_fatal",
]

BACKOFF_MIN = 0.05  # the first reconnect waits this long, doubling ...
BACKOFF_MAX = 1.0  # ... up to this
ATTEMPT_TIMEOUT = 5.0  # one connection attempt that has not attached by then is abandoned
RESUME_ACCEPTED_MAX = 256  # a subscriber declares at most this many accepted tags (an
# attach frame must fit the router's max frame size, 32 KiB by default) ...
RESUME_ACCEPTED_AGE = 60.0  # ... accepted in the last this many seconds
# A publisher declares every message it holds without an outcome on each attach, and the
# attach must fit the router's 32 KiB frame: about 2,500 tags. So its window plus what waits
# on relays' disks (`PublisherCore.waiting_limit`) stays within this.
DECLARE_MAX = 2000
PRUNE_EVERY = 10000  # a subscriber prunes its store after every this many acceptances
# A link refused or closed with one of these will be refused again: reconnecting cannot help.
FATAL_CONDITIONS = frozenset({
    "amqp:invalid-field",
    "amqp:not-implemented",
    "amqp:not-allowed",
    "amqp:not-found",
    "amqp:unauthorized-access",
    "amqp:precondition-failed",
    "amqp:link:message-size-exceeded",
    "amqp:decode-error",
    # Another client attached with the same identity, newer than this one: taking the link
    # back would only make the two fight over it.
    "amqp:link:stolen",
})

OUTCOMES = ("accepted", "rejected", "released")


def is_fatal(condition: str | None) -> bool:
    """A link closed (or refused) with this condition name would be refused again."""
    return condition is not None and condition in FATAL_CONDITIONS


# ====================================================================== reconnecting


class Reconnect:
    """Which router URL a client tries next, how long it waits first, when it gives up.

    Round robin over `urls`; the wait starts at BACKOFF_MIN and doubles up to BACKOFF_MAX,
    back to BACKOFF_MIN once attached; with `connect_timeout`, the client gives up when it has
    been without an attach that long (since it was created, or since it lost its link)."""

    def __init__(self, urls: Sequence[str], connect_timeout: float | None, now: float) -> None:
        if not urls:
            raise ValueError("no URL to connect to")
        self.urls = list(urls)
        self.connect_timeout = connect_timeout
        self.backoff = BACKOFF_MIN  # the next wait
        self.down_since = now
        self._index = 0

    def next_url(self) -> str:
        """The URL to connect to now (the next one each call)."""
        url = self.urls[self._index % len(self.urls)]
        self._index += 1
        return url

    def attached(self) -> None:
        self.backoff = BACKOFF_MIN

    def lost(self, was_attached: bool, now: float) -> None:
        """The link or connection is gone (`was_attached`: it had attached)."""
        if was_attached:
            self.down_since = now

    def retry_in(self, now: float) -> float | None:
        """Seconds to wait before the next attempt; None: give up (connect_timeout passed)."""
        delay = self.backoff
        if self.connect_timeout is not None:
            remaining = self.down_since + self.connect_timeout - now
            if remaining <= 0:
                return None
            delay = min(delay, remaining)
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        return delay


# ====================================================================== publisher


@dataclass(frozen=True, slots=True)
class Outcome:
    """A message's final outcome: state 'accepted' or 'rejected' (then condition and
    description say why, e.g. exactmesh:delivery-failed naming the subscribers)."""

    seq: int
    state: str
    condition: str | None = None
    description: str | None = None
    info: dict | None = None


# How a failure's description names the subscribers that may have processed the message all
# the same (their answer was lost: a router went, a deadline passed); the router writes it
# last (router/core/engine.py `_failure`; docs/guarantees.md, "Failed, or in doubt").
IN_DOUBT_MARK = ". In doubt (it may have processed the message; its answer was lost): "


@dataclass(frozen=True, slots=True)
class Failure:
    seq: int
    condition: str
    description: str

    @property
    def in_doubt(self) -> tuple[str, ...]:
        """The subscribers named failed that may have processed the message: sending it
        again could make them process it twice. The others did not get it."""
        _, mark, names = self.description.rpartition(IN_DOUBT_MARK)
        return tuple(names.split(", ")) if mark else ()


@dataclass(frozen=True, slots=True)
class Transfer:
    """Send this now: a delivery tagged `tag` (b"SEQ") carrying `payload`, unsettled.
    `resend`: this message was transmitted before (by this core, or it was loaded from the
    store: an earlier run may have sent it)."""

    seq: int
    tag: bytes
    payload: bytes
    resend: bool


@dataclass(frozen=True, slots=True)
class Reaction:
    """What to do with a publisher delivery after a disposition: `settle` it or not (no
    outcome yet); `retry_in`: arm a timer for that many seconds and call `requeue()` then;
    `wake`: the window has room now (tell blocked callers, transmit)."""

    settle: bool
    retry_in: float | None = None
    wake: bool = False


_SETTLE = Reaction(settle=True)  # the common answers, made once (one per outcome otherwise)
_WAIT = Reaction(settle=False)
_ROOM = Reaction(settle=False, wake=True)


@dataclass(slots=True)
class PublisherCommit:
    """One group commit for the publisher's store: write it (`apply_to`), then hand it back to
    `PublisherCore.committed`."""

    inserts: list[tuple[int, bytes]]  # new messages (seq, payload)
    accepted: list[int]  # delete, count as accepted
    failed: list[tuple[int, str, str]]  # keep as failed: (seq, condition, description)
    next_seq: int
    outcomes: list[Outcome]  # reported once this is durable (what `committed` returns)

    def apply_to(self, store: Any) -> None:
        store.commit(self.inserts, self.accepted, self.failed, self.next_seq)


class PublisherCore:
    """The state machine of the SDK's publisher (docs/resume-protocol.md, "What the SDK does").

    Messages get sequence numbers from `next_seq` on; tag b"SEQ". A message is *held* once its
    commit is durable; held messages without an outcome are declared on every attach and
    resent, in sequence order, ahead of newer ones. At most `window` are on the wire
    unsettled (in flight) and at most `window` are without an outcome (`can_publish`).

    Life of one message: `publish(payload)` -> `take_commit()` / store / `committed()` ->
    `transmit(credit)` -> `on_disposition(tag, "accepted")` -> `take_commit()` / store /
    `committed()` returns its Outcome.

    Threads: the application's side (`publish`, `can_publish`, `next_seq`, `outstanding`)
    shares state only with `take_commit` and `committed`. A driver whose application calls
    from another thread holds one lock around those; the rest (the link's side, `counts`
    aside, which only it writes) it may call from its one I/O thread without the lock, as
    `amqp_edge.client` does to keep the per-message path free of lock hand-offs.
    """

    def __init__(self, *, window: int = 100, next_seq: int = 1,
                 pending: Iterable[tuple[int, bytes]] = (), accepted_total: int = 0,
                 retry_delay: float = BACKOFF_MIN) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        loaded = sorted(pending)
        self.window = window
        self.retry_delay = retry_delay
        self.next_seq = next_seq  # the sequence number the next `publish` gets
        self.outstanding = len(loaded)  # published (or loaded) without an outcome yet
        self.accepted_total = accepted_total  # accepted in all runs (as the store counts)
        self.counts = {"sent": 0, "resent": 0, "accepted": 0, "failed": 0, "released": 0}
        self.linked = False  # attached now
        self._unwritten: list[tuple[int, bytes]] = []  # published, not committed yet
        self._held: dict[int, bytes] = dict(loaded)  # committed, no outcome yet
        self._queue: list[int] = [seq for seq, _ in loaded]  # to send: a heap, seq order
        self._transmitted: set[int] = {seq for seq, _ in loaded}  # sending again = resend
        self._inflight: dict[int, None] = {}  # on the current link, unsettled
        # Of those, the ones the router said are on relays' disks (`received`): they wait
        # for absent listeners and count in no window, up to `waiting_limit` at a time.
        self._waiting: set[int] = set()
        self.waiting_limit = max(0, DECLARE_MAX - window)
        self._accepted: list[int] = []  # for the next commit
        self._failed: list[tuple[int, str, str]] = []
        self._outcomes: list[Outcome] = []
        self._retry: list[int] = []  # released: sent again when the retry timer fires
        self._retry_armed = False

    @classmethod
    def from_store(cls, store: Any, *, window: int = 100) -> PublisherCore:
        """A core for what `store` holds (a PublisherStore or a MemoryPublisherStore)."""
        return cls(window=window, next_seq=store.next_seq(), pending=store.pending(),
                   accepted_total=store.accepted_total())

    # ------------------------------------------------------------------ the application

    def can_publish(self) -> bool:
        """False while `window` messages are without an outcome (a caller waits), those
        waiting on relays' disks aside while there are at most `waiting_limit` of them."""
        outstanding = self.outstanding
        return (outstanding - len(self._waiting) < self.window
                and outstanding < self.window + self.waiting_limit)

    def publish(self, payload: bytes) -> int:
        """Take one message, encoded for sequence number `next_seq` (read it first: the
        message id says it); returns that number. It goes on the wire after its commit."""
        seq = self.next_seq
        self.next_seq = seq + 1
        self._unwritten.append((seq, payload))
        self.outstanding += 1
        return seq

    @property
    def waiting(self) -> int:
        """Messages on relays' disks for absent listeners (`received`), without an outcome."""
        return len(self._waiting)

    @property
    def holding(self) -> int:
        """Committed messages without an outcome (what the next attach declares)."""
        return len(self._held)

    def decided(self, tag: bytes | str) -> bool:
        """Whether delivery `tag` is one of ours that has its outcome already. Proton may
        report a delivery again after that (a later disposition range that covers it): the
        drivers ignore those."""
        try:
            return int(tag) not in self._held
        except ValueError:
            return False

    def all_transmitted(self) -> bool:
        """Whether every message without an outcome is written and went on the wire."""
        held, inflight = self._held, self._inflight
        return not self._unwritten and not any(
            seq in held and seq not in inflight for seq in self._queue)

    # ------------------------------------------------------------------ the store

    def take_commit(self) -> PublisherCommit | None:
        """What to write in one group commit now, or None if nothing."""
        if not (self._unwritten or self._accepted or self._failed):
            return None
        commit = PublisherCommit(self._unwritten, self._accepted, self._failed,
                                 self.next_seq, self._outcomes)
        self._unwritten, self._accepted, self._failed, self._outcomes = [], [], [], []
        return commit

    def committed(self, commit: PublisherCommit) -> list[Outcome]:
        """`commit` is durable: its new messages may go on the wire (call `transmit`); returns
        the outcomes to report to the application, in the order they came."""
        for seq, payload in commit.inserts:
            self._held[seq] = payload
            heapq.heappush(self._queue, seq)
        outcomes = commit.outcomes
        self.outstanding -= len(outcomes)
        for o in outcomes:
            if o.state == "accepted":
                self.counts["accepted"] += 1
                self.accepted_total += 1
            else:
                self.counts["failed"] += 1
        return outcomes

    # ------------------------------------------------------------------ the link

    def declaration(self) -> dict[str, list[bytes]]:
        """The `exactmesh:resume` value for the next attach: every held message without an
        outcome, in sequence order. They go out first on that link, in that order."""
        return {"unsettled": [str(seq).encode() for seq in sorted(self._held)]}

    def attached(self) -> None:
        """The router answered the attach: `transmit` may send."""
        self.linked = True

    def link_lost(self) -> None:
        """The link or its connection is gone (or an attach failed): what was in flight goes
        back to the queue, to be resent first, in sequence order, on the next link."""
        self.linked = False
        for seq in self._inflight:
            heapq.heappush(self._queue, seq)
        self._inflight.clear()
        self._waiting.clear()  # the router says so again when they are resent

    def transmit(self, credit: int) -> list[Transfer]:
        """What to send now, in this order, given the link's `credit` (empty when not
        attached): queued messages in sequence order, within credit and the window."""
        if not self.linked:
            return []
        out: list[Transfer] = []
        queue, held, inflight, transmitted = (self._queue, self._held, self._inflight,
                                              self._transmitted)
        room = self.window + len(self._waiting)
        while queue and credit > 0 and len(inflight) < room:
            seq = heapq.heappop(queue)
            payload = held.get(seq)
            if payload is None or seq in inflight:
                continue  # decided meanwhile, or already on the wire
            inflight[seq] = None
            credit -= 1
            resend = seq in transmitted
            if resend:
                self.counts["resent"] += 1
            else:
                self.counts["sent"] += 1
                transmitted.add(seq)
            out.append(Transfer(seq, str(seq).encode(), payload, resend))
        return out

    def on_disposition(self, tag: bytes | str, state: str | None, *, settled: bool = False,
                       condition: str | None = None, description: str | None = None,
                       info: dict | None = None) -> Reaction:
        """The router updated delivery `tag` on the current link: `state` is its outcome
        ("accepted", "rejected", "released", "modified", or None for none), `settled` whether
        the router settled it; for "rejected", the error's condition, description and info.

        accepted / rejected: final; the outcome goes into the next commit and is reported
        after it. received: not an outcome; every copy still owed is on a relay's disk, so
        the message leaves the window (docs/relay.md); `Reaction.wake` says to tell callers.
        released / modified / settled without an outcome: sent again later with the same tag
        (the Reaction may ask for the retry timer). No outcome yet: wait."""
        try:
            seq = int(tag)
        except ValueError:
            return _SETTLE  # not one of ours
        if state == "accepted":
            outcome = Outcome(seq, "accepted")
            self._accepted.append(seq)
        elif state == "rejected":
            name = condition or "amqp:rejected"
            desc = description or ""
            outcome = Outcome(seq, "rejected", name, desc, info)
            self._failed.append((seq, name, desc))
        elif state == "received" and not settled:
            if seq in self._inflight and seq not in self._waiting:
                self._waiting.add(seq)
                return _ROOM
            return _WAIT
        elif state in ("released", "modified") or settled:
            # Not taken this time (or settled without an outcome): resend it, same tag.
            self._inflight.pop(seq, None)
            self.counts["released"] += 1
            self._retry.append(seq)
            if self._retry_armed:
                return _SETTLE
            self._retry_armed = True
            return Reaction(settle=True, retry_in=self.retry_delay)
        else:
            return _WAIT  # no outcome yet
        self._inflight.pop(seq, None)
        self._waiting.discard(seq)
        self._held.pop(seq, None)
        self._outcomes.append(outcome)
        return _SETTLE

    def requeue(self) -> None:
        """The retry timer fired: released messages join the queue again (call `transmit`)."""
        self._retry_armed = False
        for seq in self._retry:
            if seq in self._held:
                heapq.heappush(self._queue, seq)
        self._retry.clear()

    def detach_on_close(self) -> bool:
        """On close: detach (the router keeps what it knows for a resend) while messages are
        held without an outcome; else close the link. Commit before asking."""
        return bool(self._held)


class MemoryPublisherStore:
    """A `Publisher` outbox kept in memory instead of SQLite (`Publisher(..., store=...)`),
    for a caller that keeps durability itself and chooses the sequence numbers (so the tags,
    b"SEQ") and the identity: e.g. the Spark data source (spark_connector), which derives
    both from the query, batch, partition and row, and recomputes the same messages after a
    failure.

    `preload` is [(seq, payload)], payloads from `encode_message`: they are the messages
    "without an outcome" the publisher finds on start, so it declares all of them in its
    attach (`exactmesh:resume`, docs/resume-protocol.md) and sends them in sequence order;
    a mesh that already has one (a live record or a tombstone) answers it without delivering
    it again. Keep a preload within what one attach frame holds (32 KiB: about 2,500 tags of
    up to 9 digits). Nothing survives the process."""

    def __init__(self, preload: Sequence[tuple[int, bytes]] = ()) -> None:
        self._pending: dict[int, bytes] = dict(preload)
        self._failed: dict[int, tuple[str, str]] = {}
        self._accepted = 0
        self._next_seq = max(self._pending, default=0) + 1

    def next_seq(self) -> int:
        return self._next_seq

    def accepted_total(self) -> int:
        return self._accepted

    def pending(self) -> list[tuple[int, bytes]]:
        return sorted(self._pending.items())

    def failures(self) -> list[Failure]:
        return [Failure(seq, cond, desc) for seq, (cond, desc) in sorted(self._failed.items())]

    def clear_failures(self) -> int:
        n = len(self._failed)
        self._failed.clear()
        return n

    def commit(self, inserts: Sequence[tuple[int, bytes]] = (), accepted: Sequence[int] = (),
               failed: Sequence[tuple[int, str, str]] = (),
               next_seq: int | None = None) -> None:
        self._pending.update(inserts)
        for seq in accepted:
            if self._pending.pop(seq, None) is not None:
                self._accepted += 1
        for seq, cond, desc in failed:
            self._pending.pop(seq, None)
            self._failed[seq] = (cond, desc)
        if next_seq is not None:
            self._next_seq = max(self._next_seq, next_seq)

    def close(self) -> None:
        pass


# ====================================================================== subscriber


@dataclass(frozen=True, slots=True)
class Incoming:
    """What to do with a delivery that arrived (`SubscriberCore.on_delivery`).

    - "show": new: it waits for the application (`take`). Leave the delivery unsettled.
    - "answer": the application answered this tag before: answer `outcome` ("accepted" or
      "rejected", then with `condition` and `description`) and settle, at once.
    - "bind": a copy of one the application still holds: that one now answers for this
      delivery. `previous` is the delivery it answered for until now (None if none): if the
      router has settled that one, settle it and call `previous_settled()`.
    """

    kind: str
    outcome: str | None = None
    condition: str | None = None
    description: str | None = None
    previous: Any = None


@dataclass(frozen=True, slots=True)
class Shown:
    """A message handed to the application (`SubscriberCore.take`): its tag, `copy` (a serial
    to pass back to `answer`) and the payload given to `on_delivery`."""

    tag: str
    copy: int
    payload: Any


@dataclass(frozen=True, slots=True)
class Answer:
    """Put this on the wire: update `delivery` to `outcome` ("accepted"; "rejected" with
    `condition` and `description`; "released"), then settle it."""

    delivery: Any
    tag: str
    outcome: str
    condition: str | None = None
    description: str | None = None


class _Held:
    """A delivery the application has not answered: waiting in the inbox, or taken."""

    __slots__ = ("copy", "delivery", "payload")

    def __init__(self, copy: int, delivery: Any, payload: Any) -> None:
        self.copy = copy
        self.delivery = delivery  # the delivery its answer goes to (None: no live one)
        self.payload = payload


class SubscriberCore:
    """The state machine of the SDK's subscriber (docs/resume-protocol.md).

    Tags are the router's delivery tags as text (32 hex characters; `ReceivedMessage.tag`, the
    store's keys, the declaration's keys); the core treats them as opaque keys. A `delivery` is
    the driver's handle for one delivery on the wire (a proton Delivery, or anything): the core
    only keeps it and hands it back in `Answer`s and `Incoming.previous`.

    - credit: `credit_to_grant(link_credit)` tops the window up to `prefetch`, counting the
      deliveries on this link not answered yet, in steps of at least a quarter of it;
    - duplicate suppression: a tag the store has an answer for is answered again at once and
      not shown; a copy of one the application holds is bound to it, not shown twice;
    - the declaration on attach: accepted in the last `accepted_age` s (at most
      `accepted_max`, the newest), and the ones it held unanswered when a link was lost
      (at most `accepted_age` s ago) as "received";
    - the answers: `answer()` (after the store recorded it) queues the disposition for
      `take_answers()`; it goes nowhere if its delivery's link is gone.

    Threads: the application's side (`take`, `answer`) and the link's side share the held
    deliveries; a driver whose application calls from another thread serialises every call
    (`amqp_edge.client` holds its client lock around each).
    """

    def __init__(self, *, prefetch: int = 100, durable: bool = False,
                 recent_accepted: Iterable[tuple[str, float]] = (), accepted_total: int = 0,
                 accepted_max: int = RESUME_ACCEPTED_MAX,
                 accepted_age: float = RESUME_ACCEPTED_AGE) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.prefetch = prefetch
        self.durable = durable
        self.accepted_age = accepted_age
        self.accepted_total = accepted_total  # accepted in all runs (as the store counts)
        self.gen = 0  # the last attach generation declared
        self.counts = {"received": 0, "duplicates_suppressed": 0, "accepted": 0,
                       "rejected": 0, "released": 0}
        self.linked = False  # attached now
        self._recent_accepted: deque[tuple[str, float]] = deque(recent_accepted,
                                                                maxlen=accepted_max)
        self._declare_received: dict[str, float] = {}  # tag -> when its link was lost
        self._held: dict[str, _Held] = {}  # received, not answered (in the inbox or taken)
        self._inbox: deque[str] = deque()  # held, not taken by the application yet
        self._answers: list[Answer] = []  # for take_answers
        self._live = 0  # deliveries on the current link not yet answered (they use credit)
        self._copies = 0  # serial of the deliveries shown

    @classmethod
    def from_store(cls, store: Any, *, prefetch: int = 100, durable: bool = False,
                   accepted_max: int = RESUME_ACCEPTED_MAX,
                   accepted_age: float = RESUME_ACCEPTED_AGE) -> SubscriberCore:
        """A core for what `store` holds (a SubscriberStore or a MemorySubscriberStore)."""
        return cls(prefetch=prefetch, durable=durable,
                   recent_accepted=store.recent_accepted(accepted_age, accepted_max),
                   accepted_total=store.accepted_total(), accepted_max=accepted_max,
                   accepted_age=accepted_age)

    # ------------------------------------------------------------------ the link

    def declaration(self, gen: int, now: float) -> dict[str, Any]:
        """The `exactmesh:resume` value for an attach with generation `gen` (the store's
        `next_gen()`, taken before every attach attempt)."""
        self.gen = gen
        age = self.accepted_age
        unsettled = {tag: "accepted" for tag, at in self._recent_accepted if now - at <= age}
        for tag, at in list(self._declare_received.items()):
            if now - at > age:
                del self._declare_received[tag]
            else:
                unsettled.setdefault(tag, "received")
        return {"unsettled": unsettled, "gen": gen}

    def attached(self) -> None:
        """The router answered the attach: grant credit (`credit_to_grant`)."""
        self.linked = True
        self._live = 0

    def link_lost(self, now: float) -> None:
        """The link or its connection is gone (or an attach failed). Messages not taken yet
        are dropped (the router sends them again if it still owes them); those the
        application holds stay valid but answer for no delivery now. Both are declared
        "received" on the next attaches (for `accepted_age` s). Queued answers go nowhere."""
        self.linked = False
        for tag in self._inbox:
            self._held.pop(tag, None)
            self._declare_received[tag] = now
        self._inbox.clear()
        for tag, held in self._held.items():
            held.delivery = None
            self._declare_received[tag] = now
        self._answers.clear()
        self._live = 0

    def credit_to_grant(self, credit: int) -> int:
        """How much credit to add now (0: none) given the link's current `credit`."""
        if not self.linked:
            return 0
        want = self.prefetch - credit - self._live
        if want > 0 and (want >= max(1, self.prefetch // 4) or credit == 0):
            return want
        return 0

    def on_delivery(self, tag: str, delivery: Any, payload: Any,
                    answered: str | None) -> Incoming:
        """A whole delivery arrived on the current link: `payload` (kept for the application
        if it is new), `answered` what the store recorded for `tag` (None if nothing)."""
        if answered is not None:
            self.counts["duplicates_suppressed"] += 1
            if answered == "rejected":
                return Incoming("answer", "rejected", "exactmesh:rejected", "rejected before")
            return Incoming("answer", "accepted")
        self._live += 1
        held = self._held.get(tag)
        if held is not None:
            # Sent again while the application still holds the first copy: that copy now
            # answers this delivery; the application does not see it twice.
            previous, held.delivery = held.delivery, delivery
            self.counts["duplicates_suppressed"] += 1
            return Incoming("bind", previous=previous)
        self._copies += 1
        self._held[tag] = _Held(self._copies, delivery, payload)
        self._inbox.append(tag)
        self.counts["received"] += 1
        return Incoming("show")

    def previous_settled(self) -> None:
        """The `previous` delivery of a "bind" was settled by the router: it no longer uses
        credit."""
        self._live -= 1

    # ------------------------------------------------------------------ the application

    @property
    def queued(self) -> int:
        """Messages waiting for the application."""
        return len(self._inbox)

    def holds(self, tag: str) -> bool:
        """Whether the application has `tag` unanswered (in the inbox, or taken)."""
        return tag in self._held

    def take(self) -> Shown | None:
        """The next message for the application, or None."""
        if not self._inbox:
            return None
        tag = self._inbox.popleft()
        held = self._held[tag]
        return Shown(tag, held.copy, held.payload)

    @staticmethod
    def must_record(outcome: str) -> bool:
        """Whether an answer is committed to the store (`store.record(tag, outcome)`) before
        `answer`: accepted and rejected are; released is not (it comes again)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}: use one of {', '.join(OUTCOMES)}")
        return outcome != "released"

    def answer(self, tag: str, outcome: str, now: float, *, new: bool = False,
               copy: int | None = None, condition: str | None = None,
               description: str | None = None) -> bool:
        """The application answered `tag` ("accepted", "rejected" with `condition` and
        `description`, or "released"), already recorded if `must_record` says so (`new`:
        that record was new). `copy`: the `Shown.copy` it answers (None: whichever copy is
        held); an answer to an older copy than the one held sends nothing. The disposition
        waits for `take_answers()`. Returns True when the store should be pruned now."""
        self.must_record(outcome)
        held = self._held.get(tag)
        delivery = None
        if held is not None and (copy is None or copy == held.copy):
            del self._held[tag]
            self._declare_received.pop(tag, None)
            delivery = held.delivery
        self.counts[outcome] += 1
        if outcome == "accepted":
            if new:
                self.accepted_total += 1
            self._recent_accepted.append((tag, now))
        if delivery is not None:
            if outcome == "rejected":
                condition = condition or "exactmesh:rejected"
            self._answers.append(Answer(delivery, tag, outcome, condition, description))
        return outcome == "accepted" and self.counts["accepted"] % PRUNE_EVERY == 0

    def take_answers(self) -> list[Answer]:
        """The dispositions to put on the wire now, in the order the application gave them
        (each settles its delivery)."""
        answers, self._answers = self._answers, []
        self._live -= len(answers)
        return answers

    def detach_on_close(self) -> bool:
        """On close: detach (a durable subscription stays, warm, at the router) or close."""
        return self.durable


class MemorySubscriberStore:
    """A subscriber's answered tags, attach generation and acceptance count, in memory: the
    interface of `client_store.SubscriberStore`, with `clock()` for the times it stamps and
    compares (e.g. a simulator's clock)."""

    def __init__(self, clock: Callable[[], float], limit: int | None = None) -> None:
        self._clock = clock
        # Insertion order is answer order: past `limit` tags, the oldest answer goes first.
        self._limit = limit
        self._processed: dict[str, tuple[str, float]] = {}  # tag -> (outcome, at)
        self._gen = 0
        self._accepted = 0

    def next_gen(self) -> int:
        self._gen += 1
        return self._gen

    def accepted_total(self) -> int:
        return self._accepted

    def outcome_of(self, tag: str) -> str | None:
        entry = self._processed.get(tag)
        return None if entry is None else entry[0]

    def record(self, tag: str, outcome: str) -> bool:
        if tag in self._processed:
            return False
        self._processed[tag] = (outcome, self._clock())
        if self._limit is not None and len(self._processed) > self._limit:
            del self._processed[next(iter(self._processed))]
        if outcome == "accepted":
            self._accepted += 1
        return True

    def record_many(self, tags: Sequence[str], outcome: str) -> list[bool]:
        return [self.record(tag, outcome) for tag in tags]

    def recent_accepted(self, within: float, limit: int) -> list[tuple[str, float]]:
        since = self._clock() - within
        rows = [(tag, at) for tag, (outcome, at) in self._processed.items()
                if outcome == "accepted" and at >= since]
        rows.sort(key=lambda row: row[1])
        return rows[-limit:] if limit > 0 else []

    def prune(self, keep_seconds: float) -> int:
        before = self._clock() - keep_seconds
        old = [tag for tag, (_, at) in self._processed.items() if at < before]
        for tag in old:
            del self._processed[tag]
        return len(old)

    def close(self) -> None:
        pass

"""What must hold inside one engine after every event, checked from the outside.

`check(engine)` raises `InvariantBroken` naming the first thing that does not hold. The
simulator turns it on (`EngineConfig.check_invariants`) so that a bug shows at the event that
caused it, not minutes later as a lost or duplicated message (TigerBeetle asserts its state
machine's invariants the same way). It walks every live record and subscriber: too slow for a
router under load, which is why it is off by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .records import CopyState, PartState, Record, Role
from .transitions import counts, held_count

if TYPE_CHECKING:
    from .engine import Engine


class InvariantBroken(AssertionError):
    """The engine's state contradicts itself: a bug in the engine."""


def check(engine: Engine, ticked: bool) -> None:
    """Everything about `engine`'s state; `ticked`: the event was a `TimePassed`, after which
    nothing whose deadline passed may still be waiting for it (between ticks, an event may
    set a deadline already past, such as a resend's ttl: the next tick handles it)."""
    for seq, rec in engine.records.items():
        _check_record(engine, seq, rec)
    _check_subscribers(engine)
    _check_publishers(engine)
    if ticked:
        _check_deadlines(engine)


def _fail(rec: Record, what: str) -> InvariantBroken:
    return InvariantBroken(f"record {rec.seq} ({rec.id}, {rec.role.name}): {what}")


def _check_record(engine: Engine, seq: int, rec: Record) -> None:
    if rec.seq != seq:
        raise _fail(rec, f"indexed under number {seq}")
    have = (rec.pending, rec.accepted, rec.failed)
    want = counts(rec)
    if have != want:
        raise _fail(rec, f"counters (pending, accepted, failed) say {have}, states say {want}")
    if rec.held != held_count(rec):
        raise _fail(rec, f"counts {rec.held} stored copies pending, its copies say "
                         f"{held_count(rec)}")
    if engine.find(rec.id) is None:
        raise _fail(rec, "is live but cannot be found by its delivery id")
    role = rec.role
    if role == Role.DESTINATION and rec.origin is None:
        raise _fail(rec, "is a destination's record without an origin")
    if role != Role.DESTINATION and rec.origin is not None:
        raise _fail(rec, f"has origin {rec.origin} but is not a destination's record")
    if (role == Role.ORPHAN) != (rec.orphan_until is not None):
        raise _fail(rec, "is an orphan without a deadline, or has one without being an orphan")
    if role == Role.ORPHAN and rec.publisher is not None:
        raise _fail(rec, "is an orphan that has a publisher")
    if rec.peers and role == Role.DESTINATION:
        raise _fail(rec, "a destination's record owes other routers")
    pub = rec.publisher
    if pub is not None and not rec.pub_settled and pub.records.get(rec.pub_tag) is not rec:
        raise _fail(rec, f"its publisher {pub.label} does not hold it under its tag")


def _check_subscribers(engine: Engine) -> None:
    for sub in engine.subscribers.values():
        received = sum(state != "accepted" for state in sub.placeholders.values())
        if sub.holding != received:
            raise InvariantBroken(f"{sub.label} holds for {sub.holding} placeholder(s) but "
                                  f"{received} declared received are left")
        for tag, rec in sub.inflight.items():
            copy = rec.copies.get(sub.sid)
            if copy is None or copy.state not in (CopyState.SENT, CopyState.ACCEPTED):
                state = "none" if copy is None else copy.state.name
                raise _fail(rec, f"in flight to {sub.label} under {tag!r} with copy {state}")
        queued = {id(rec) for rec in sub.queue}
        for rec in engine.records.values():
            copy = rec.copies.get(sub.sid)
            if copy is None or copy.sub is not sub:
                continue
            if copy.state == CopyState.SENT and sub.inflight.get(rec.out_tag) is not rec:
                raise _fail(rec, f"copy SENT to {sub.label} is not in flight there")
            if copy.state == CopyState.QUEUED and id(rec) not in queued:
                raise _fail(rec, f"copy QUEUED for {sub.label} is in nobody's queue")


def _check_publishers(engine: Engine) -> None:
    for link, pub in engine.publishers.items():
        if pub.link != link:
            raise InvariantBroken(f"publisher {pub.label} is indexed under link {link}")
        for tag, rec in pub.records.items():
            if rec.pub_tag != tag or rec.publisher is not pub:
                raise _fail(rec, f"held by {pub.label} under tag {tag!r} that is not its own")
            if rec.seq not in engine.records:
                raise _fail(rec, f"held by {pub.label} but forgotten")


def _check_deadlines(engine: Engine) -> None:
    """Nothing whose time ran out is still waiting for it."""
    now = engine.now
    for rec in engine.records.values():
        if rec.expires is not None and rec.expires <= now:
            if any(c.state in (CopyState.QUEUED, CopyState.SENT) for c in rec.copies.values()):
                raise _fail(rec, f"its ttl ran out at {rec.expires} but copies are still owed")
            if any(p.state == PartState.PENDING for p in rec.peers.values()):
                raise _fail(rec, f"its ttl ran out at {rec.expires} but parts are still owed")
        for part in rec.peers.values():
            if part.state == PartState.PENDING and part.ended is not None and part.ended <= now:
                raise _fail(rec, f"its part for {part.label}, owed to a subscription that "
                                 f"ended, still waits for a verdict past {part.ended}")
        if rec.orphan_until is not None and rec.orphan_until <= now:
            raise _fail(rec, f"still waits for its publisher past {rec.orphan_until}")
    for sub in engine.subscribers.values():
        if sub.warm_until is not None:
            raise InvariantBroken(f"{sub.label} is attached with a deadline to come back")
    for sub in engine._warm.values():
        if sub.warm_until is None or sub.warm_until <= now:
            raise InvariantBroken(f"{sub.label} is still away past its deadline {sub.warm_until}")

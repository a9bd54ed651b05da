"""Every state change of a copy and of a peer part, and the record counters that follow them.

Everything that moves a `Copy` or a `PeerPart` from one state to another, adds one to a record
or takes one away lives here, as h11 keeps its state machine in one module: the engine says
what happened (a `Step`), this module looks the move up in its table and keeps the record's
`pending` / `accepted` / `failed` counters in step. A move the table does not list is a bug
in the engine and raises `IllegalTransition` at once, rather than corrupting a count that
decides what a publisher is told. `router/core/invariants.py` checks the counters against the
states from the outside.

Copies (one subscriber of this router, one message):

    state     step              new state   where it happens
    QUEUED    SEND              SENT        sent on the subscriber's link
    QUEUED    SEND_SETTLED      ACCEPTED    sent pre-settled (at most once): nothing comes back
    QUEUED    DECLARED          ACCEPTED    a resuming subscriber declared it accepted
    SENT      DECLARED          ACCEPTED    likewise, for one in doubt
    SENT      ACCEPT            ACCEPTED    the subscriber accepted it
    SENT      REQUEUE           QUEUED      released/modified, or in doubt when a warm one left
    QUEUED    FAIL              FAILED      it left, the ttl ran out, or it was gone on arrival
    SENT      FAIL              FAILED      rejected, too many attempts, left, ttl ran out
    QUEUED    WITHDRAW          WITHDRAWN   the publisher stopped tracking the message
    SENT      WITHDRAW          WITHDRAWN   likewise (the router settles its side)

A pending copy can also be marked held (`hold_copy`): the router's relay store holds it
durably (docs/relay.md). So can a pending part (`hold_part`), when its router said its store
holds the copy. They keep their states; `Record.held` counts the pending ones.

Peer parts (one subscriber at another router, as the origin sees it):

    PENDING   ACCEPT            ACCEPTED    that router's verdict named it accepted
    PENDING   FAIL              FAILED      named failed, the router was lost, the ttl ran out
    PENDING   WITHDRAW          WITHDRAWN   the publisher stopped tracking the message

A copy or part can also be added (`add_copy`, `add_part`) or dropped (`drop_copy`,
`drop_part`): a subscriber that moved to another router takes its part with it. A PENDING
part owed to a subscription that ended stays PENDING but is marked (`await_ended`): it waits
until a deadline for the verdict of the router it is owed at, and is not moved elsewhere.

Records (whose record it is, `records.Role`):

    ORIGIN       publisher lost, not settled           ORPHAN       `orphan`
    DESTINATION  origin router restarted               ORPHAN       `orphan`
    ORPHAN       its publisher resent it here          ORIGIN       `adopt_as_origin`
    ORPHAN       nobody resent it in time (forgotten)  ORIGIN       `adopt_as_origin`
    any          another router resent it (adopted)    DESTINATION  `adopt_for`
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from .records import Copy, CopyState, PartState, PeerPart, Record, Role, Subscriber

QUEUED: Final = CopyState.QUEUED
SENT: Final = CopyState.SENT
ACCEPTED: Final = CopyState.ACCEPTED
FAILED: Final = CopyState.FAILED
WITHDRAWN: Final = CopyState.WITHDRAWN


class Step(IntEnum):
    """What happened to a copy or a part."""

    SEND = 0
    SEND_SETTLED = 1
    DECLARED = 2
    ACCEPT = 3
    REQUEUE = 4
    FAIL = 5
    WITHDRAW = 6


class IllegalTransition(Exception):  # not AssertionError: mypyc compiles this module
    """The engine asked for a move its table does not have: a bug, never a client's fault."""


COPY_TABLE: Final[dict[tuple[CopyState, Step], CopyState]] = {
    (QUEUED, Step.SEND): SENT,
    (QUEUED, Step.SEND_SETTLED): ACCEPTED,
    (QUEUED, Step.DECLARED): ACCEPTED,
    (SENT, Step.DECLARED): ACCEPTED,
    (SENT, Step.ACCEPT): ACCEPTED,
    (SENT, Step.REQUEUE): QUEUED,
    (QUEUED, Step.FAIL): FAILED,
    (SENT, Step.FAIL): FAILED,
    (QUEUED, Step.WITHDRAW): WITHDRAWN,
    (SENT, Step.WITHDRAW): WITHDRAWN,
}

PART_TABLE: Final[dict[tuple[PartState, Step], PartState]] = {
    (PartState.PENDING, Step.ACCEPT): PartState.ACCEPTED,
    (PartState.PENDING, Step.FAIL): PartState.FAILED,
    (PartState.PENDING, Step.WITHDRAW): PartState.WITHDRAWN,
}

# The same tables as lists indexed by state * 8 + step, holding the new states themselves: the
# copy moves run for every message, and neither hashing a tuple nor making an enum member from
# an int (`CopyState(n)`, a call into the enum machinery) is cheap enough there (measured: the
# latter cost a 1 -> 4 message 4 us more in the engine alone).
_COPY_NEXT: Final[list[CopyState | None]] = [None] * 64
for (_state, _step), _new in COPY_TABLE.items():
    _COPY_NEXT[int(_state) * 8 + int(_step)] = _new
_PART_NEXT: Final[list[PartState | None]] = [None] * 64
for (_pstate, _step), _pnew in PART_TABLE.items():
    _PART_NEXT[int(_pstate) * 8 + int(_step)] = _pnew


def is_pending(state: CopyState) -> bool:
    """Copies still owed: they count in `pending` and keep the record alive."""
    return state in (QUEUED, SENT)


def _copy_delta(rec: Record, state: int, sign: int) -> None:
    if state <= 1:  # QUEUED, SENT
        rec.pending += sign
    elif state == 2:  # ACCEPTED
        rec.accepted += sign
    elif state == 3:  # FAILED
        rec.failed += sign


def _part_delta(rec: Record, state: int, sign: int) -> None:
    if state == 0:  # PENDING
        rec.pending += sign
    elif state == 1:  # ACCEPTED
        rec.accepted += sign
    elif state == 2:  # FAILED
        rec.failed += sign


# ---------------------------------------------------------------------------- copies


def add_copy(rec: Record, key: int, sub: Subscriber, accepted: bool = False) -> Copy:
    """A new copy for `sub` under `key` (its sid; a stand-in's negative number): owed
    (QUEUED), or ACCEPTED at once when a resuming subscriber had declared it so."""
    copy = Copy(sub)
    if accepted:
        copy.state = ACCEPTED
        copy.sub_settled = True
        rec.accepted += 1
    else:
        rec.pending += 1
    rec.copies[key] = copy
    return copy


def move_copy(rec: Record, copy: Copy, step: Step, reason: str = "",
              doubt: bool = True) -> None:
    """Apply `step` to `copy`, as the table says; `reason` is kept for a FAIL, and whether
    the failure is in doubt (`doubt`): it is unless the subscriber itself said it did not
    take the message. A copy never sent here may have reached it through another router
    before it moved, and one sent may have been processed with the answer lost."""
    old = copy.state
    new = _COPY_NEXT[old * 8 + step]
    if new is None:
        raise IllegalTransition(
            f"copy of {rec.id} for {copy.sub.label}: {old.name} has no {step.name}")
    _copy_delta(rec, old, -1)
    _copy_delta(rec, new, 1)
    copy.state = new
    if copy.held and new > SENT:  # a stored copy that is done: no longer waited for
        rec.held -= 1
    if step == Step.FAIL:
        copy.reason = reason
        copy.doubt = doubt


def hold_copy(rec: Record, copy: Copy) -> None:
    """The relay store holds a pending copy durably (docs/relay.md)."""
    if copy.held or copy.state > SENT:
        raise IllegalTransition(
            f"copy of {rec.id} for {copy.sub.label}: {copy.state.name} cannot be stored"
            + (" again" if copy.held else ""))
    copy.held = True
    rec.held += 1
    rec.stored = True


def drop_copy(rec: Record, key: int) -> Copy:
    """Take a copy out of the record (its subscriber moved to another router)."""
    copy = rec.copies.pop(key)
    _copy_delta(rec, copy.state, -1)
    if copy.held and copy.state <= SENT:
        rec.held -= 1
    return copy


# ---------------------------------------------------------------------------- peer parts


def add_part(
    rec: Record, key: str, router: str | None, last: str = "", gen: int = 0
) -> PeerPart:
    """A new pending part for remote subscriber `key` owed at `router` (None: away, named
    after `last`, the router it was lost with) to its attach generation `gen` there."""
    part = PeerPart(router, key, last, gen)
    old = rec.peers.get(key)
    if old is not None:
        _part_delta(rec, int(old.state), -1)
        if old.held and old.state == PartState.PENDING:
            rec.held -= 1
    rec.peers[key] = part
    rec.pending += 1
    return part


def move_part(rec: Record, part: PeerPart, step: Step, reason: str = "",
              doubt: bool = True) -> None:
    """Apply `step` to `part`; for a FAIL, `reason` and whether it is in doubt (`doubt`):
    it is unless the subscriber's router said it failed for certain."""
    old = part.state
    new = _PART_NEXT[old * 8 + step]
    if new is None:
        raise IllegalTransition(
            f"part of {rec.id} for {part.label}: {old.name} has no {step.name}")
    _part_delta(rec, old, -1)
    _part_delta(rec, new, 1)
    part.state = new
    part.reason = reason
    part.doubt = doubt
    if part.held:  # (every move leaves PENDING)
        rec.held -= 1


def hold_part(rec: Record, part: PeerPart) -> None:
    """The router the part is owed at has the copy in its relay store (docs/relay.md)."""
    if part.held or part.state != PartState.PENDING:
        raise IllegalTransition(
            f"part of {rec.id} for {part.label}: {part.state.name} cannot be stored"
            + (" again" if part.held else ""))
    part.held = True
    rec.held += 1


def await_ended(part: PeerPart, until: float) -> None:
    """A PENDING part was owed to a subscription that ended: it stays at its router, whose
    verdict answers for that subscription, and fails if none comes by `until`."""
    if part.state != PartState.PENDING or part.router is None:
        raise IllegalTransition(
            f"part for {part.label}: {part.state.name} at {part.router} cannot await a verdict")
    part.ended = until


def drop_part(rec: Record, key: str) -> PeerPart:
    """Take a part out of the record (its subscriber attached here: a copy replaces it)."""
    part = rec.peers.pop(key)
    _part_delta(rec, part.state, -1)
    if part.held and part.state == PartState.PENDING:
        rec.held -= 1
    return part


def drop_parts(rec: Record) -> None:
    """Take every part out (the record is another origin's now)."""
    for key in list(rec.peers):
        drop_part(rec, key)


def counts(rec: Record) -> tuple[int, int, int]:
    """(pending, accepted, failed) recomputed from the states: what the counters must say."""
    pending = accepted = failed = 0
    for copy in rec.copies.values():
        state = copy.state
        if state in (QUEUED, SENT):
            pending += 1
        elif state == ACCEPTED:
            accepted += 1
        elif state == FAILED:
            failed += 1
    for part in rec.peers.values():
        pstate = part.state
        if pstate == PartState.PENDING:
            pending += 1
        elif pstate == PartState.ACCEPTED:
            accepted += 1
        elif pstate == PartState.FAILED:
            failed += 1
    return pending, accepted, failed


def held_count(rec: Record) -> int:
    """Pending copies the relay store holds and pending parts another router's store holds,
    from the states: what `rec.held` must say."""
    return (sum(1 for c in rec.copies.values() if c.held and c.state in (QUEUED, SENT))
            + sum(1 for p in rec.peers.values() if p.held and p.state == PartState.PENDING))


# ---------------------------------------------------------------------------- record roles


def orphan(rec: Record, until: float) -> None:
    """Its publisher (or origin router) is gone: it waits until `until` for a resend."""
    rec.role = Role.ORPHAN
    rec.origin = None
    rec.publisher = None
    rec.orphan_until = until


def adopt_as_origin(rec: Record) -> None:
    """It is this router's own again: its publisher resent it here (which then makes it
    answer across the mesh: `partial` False), or nobody did in time."""
    rec.role = Role.ORIGIN
    rec.origin = None
    rec.orphan_until = None


def adopt_for(rec: Record, origin: str) -> None:
    """Router `origin` resent it: this router answers that one now."""
    rec.role = Role.DESTINATION
    rec.origin = origin
    rec.orphan_until = None
    rec.partial = True

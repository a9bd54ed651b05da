"""Shared subscriptions (`$share/GROUP/FILTER`, MQTT 5 section 4.8.2): competing consumers.

The members of a group may be attached at any routers. For the publisher the group counts as
one subscriber: the origin owes each message to one member, and that member's answer is the
group's (docs/mqtt.md, "Shared subscriptions"). When the member leaves without answering
(its link closed, its session ended, its router was given up), the origin owes the message
to another member instead; a member that rejected the message, or a message whose ttl ran
out, is the group's answer.

Which member: the one with the highest hash of (delivery id, member key) among the members
attached now (rendezvous hashing). Every router computes the same choice from the same
membership, so a publisher that resends at another router after a failover reaches the member
the first router chose, whose router answers the resend from its record, rather than a second
member. It spreads messages evenly over members, not by their speed: a slow member slows its
share of the publishers' messages (flow control, as for any subscriber).

Members are kept out of the plain match indexes (`Engine._index`, `Engine._remote`), so no
path that owes a message to "every subscriber that matches" (resends, adoption, a lost router's
subscribers) reaches a group except through this module.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from .records import AWAY, Copy, CopyState, PartState, Record, Subscriber
from .topics import SubscriptionIndex, split_shared
from .transitions import drop_copy, drop_part

if TYPE_CHECKING:
    from .engine import Engine

# Failure reasons that are the group's answer: the member saw the message and refused it,
# or its time ran out. Any other failure means the member left without answering.
REJECTED_IT = "rejected it"
NEVER_HERE = "said it can never take it here"
TTL_RAN_OUT = "before its ttl ran out"
# A QoS 2 member had the message sent and left without answering: it may have processed it,
# so no other member is sent it (MQTT-4.8.2-5); the publisher is told it failed.
IN_DOUBT = "(QoS 2, sent and not answered: in doubt, not sent to another member)"


class _Member:
    __slots__ = ("key", "present", "router", "sid")

    def __init__(self, key: str, sid: int | None, router: str | None, present: bool) -> None:
        self.key = key
        self.sid = sid  # a local member's number, else None
        self.router = router  # a remote member's router, else None
        self.present = present


def refused(reason: str) -> bool:
    """Whether a member's failure `reason` is the group's answer (not a member leaving)."""
    return reason.startswith((REJECTED_IT, NEVER_HERE)) or TTL_RAN_OUT in reason \
        or reason.endswith(IN_DOUBT)


_M64 = (1 << 64) - 1


def _rank(msg_id: str, key: str) -> int:
    """The member's score for a message: CRC-32 of each (fast, the same in every process,
    unlike `hash`), mixed by splitmix64's finalizer. CRC-32 alone is linear: ranking members
    by CRC-32 of the two strings together favoured one member of three two to one."""
    z = ((zlib.crc32(msg_id.encode()) << 32 | zlib.crc32(key.encode())) + 0x9E3779B97F4A7C15) \
        & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class GroupsMixin:
    def _init_groups(self: Engine) -> None:
        # Members of shared groups, indexed under the filter inside `$share/GROUP/`: local
        # ones by sid, remote ones by (router, key) as gossip told us.
        self._shared_local: SubscriptionIndex[int] = SubscriptionIndex()
        self._shared_remote: SubscriptionIndex[tuple[str, str]] = SubscriptionIndex()

    # ------------------------------------------------------------------ the indexes

    def _index_add(self: Engine, sid: int, topic_filter: str) -> None:
        shared = split_shared(topic_filter)
        if shared is None:
            self._index.add(sid, topic_filter)
        else:
            self._shared_local.add(sid, shared[1])

    def _index_remove(self: Engine, sid: int) -> None:
        self._index.remove(sid)
        self._shared_local.remove(sid)

    def _remote_add(self: Engine, entry: tuple[str, str], topic_filter: str) -> None:
        shared = split_shared(topic_filter)
        if shared is None:
            self._remote.add(entry, topic_filter)
        else:
            self._shared_remote.add(entry, shared[1])

    def _remote_remove(self: Engine, entry: tuple[str, str]) -> None:
        self._remote.remove(entry)
        self._shared_remote.remove(entry)

    def _has_groups(self: Engine) -> bool:
        return bool(len(self._shared_local) or len(self._shared_remote))

    # ------------------------------------------------------------------ choosing a member

    def _members(self: Engine, address: str) -> dict[str, list[_Member]]:
        """The members of each group matching topic `address`, by group (its whole
        `$share/...` filter), as this router knows them now."""
        groups: dict[str, list[_Member]] = {}
        seen: set[str] = set()
        if len(self._shared_local):
            by_sid = self._by_sid
            for sid in self._shared_local.match(address):
                sub = by_sid[sid]
                seen.add(sub.key)
                groups.setdefault(sub.filter, []).append(
                    _Member(sub.key, sid, None, sub.link is not None))
        if len(self._shared_remote):
            for router, key in self._shared_remote.match(address):
                group = self._group_of(router, key)
                if group is not None and key not in seen:
                    # (AWAY: a warm member of a lost router, chosen only if no member is
                    # attached; its part waits for it to come back.)
                    groups.setdefault(group, []).append(
                        _Member(key, None, router, router != AWAY))
        return groups

    def _group_of(self: Engine, router: str, key: str) -> str | None:
        """The whole `$share/...` filter of remote member `key` (at `router`, or AWAY)."""
        if router == AWAY:
            away = self._away.get(key)
            return away.filter if away is not None else None
        meta = self._remote_meta.get(key)
        return meta[0] if meta is not None else None

    @staticmethod
    def _choose(msg_id: str, members: list[_Member], tried: list[str]) -> _Member | None:
        """The member owed `msg_id` of those not `tried` yet: an attached one if any."""
        best: _Member | None = None
        best_rank = (False, -1)
        for m in members:
            if m.key in tried:
                continue
            rank = (m.present, _rank(msg_id, m.key))
            if rank > best_rank:
                best, best_rank = m, rank
        return best

    def _pick_groups(
        self: Engine, rec: Record,
    ) -> tuple[tuple[int, ...], tuple[tuple[str, str], ...]]:
        """One member of each group matching a new message: local sids and remote
        (router, key) pairs to owe it to. The record remembers whom, per group, to owe it
        to another member if that one leaves. (No Local does not apply: it is not allowed
        on a shared subscription, MQTT-3.8.3-4.)"""
        local: list[int] = []
        remote: list[tuple[str, str]] = []
        chosen: dict[str, list[str]] = {}
        for group, members in self._members(rec.address).items():
            m = self._choose(rec.id, members, [])
            if m is None or (rec.presettled and not m.present):
                continue
            chosen[group] = [m.key]
            if m.sid is not None:
                local.append(m.sid)
            elif m.router is not None:
                remote.append((m.router, m.key))
        if chosen and not rec.presettled:
            rec.groups = chosen
        return tuple(local), tuple(remote)

    # ------------------------------------------------------------------ a member left

    @staticmethod
    def _leave_reason(sub: Subscriber, copy: Copy, reason: str) -> str:
        """Why `sub`'s copy fails as its subscription ends: `reason`, marked in doubt for a
        QoS 2 member that had it sent (MQTT-4.8.2-5: its group does not get it again)."""
        if sub.qos2_shared and (copy.state == CopyState.SENT or copy.doubt):
            return f"{reason} {IN_DOUBT}"
        return reason

    def _regroup(self: Engine, rec: Record) -> None:
        """Of an origin's record with failed parts: each group whose member failed it by
        leaving is owed it by another member now (`refused` failures stand)."""
        groups = rec.groups
        assert groups is not None
        current = {tried[-1]: group for group, tried in groups.items()}
        left: list[tuple[str, int | None]] = []
        for sid, copy in rec.copies.items():
            key = copy.sub.key
            if copy.state == CopyState.FAILED and key in current and not refused(copy.reason):
                left.append((key, sid))
        for key, part in rec.peers.items():
            if part.state == PartState.FAILED and key in current and not refused(part.reason):
                left.append((key, None))
        if not left:
            return
        members = self._members(rec.address)
        for key, at in left:
            group = current[key]
            tried = groups[group]
            m = self._choose(rec.id, members.get(group, []), tried)
            if m is None:
                continue  # nobody else in the group: the failure stands
            tried.append(m.key)
            if at is not None:
                drop_copy(rec, at)
            else:
                drop_part(rec, key)
            self._owe_member(rec, m, resend=False)

    def _owe_member(self: Engine, rec: Record, m: _Member, resend: bool) -> None:
        """Owe `rec` to member `m`. `resend`: its router may hold a record of it from the
        message's previous origin, which it adopts rather than delivers again."""
        if m.sid is not None:
            self._add_locals(rec, [self._by_sid[m.sid]], undecide=False)
        elif m.router is not None:
            self._forward(rec, ((m.router, m.key),), self._ttl_left(rec), resend)

    def _owe_groups(self: Engine, rec: Record) -> bool:
        """A record this router adopted as origin: each matching group it owes no member of
        yet is owed the member every router would choose (a copy or part it has for a member
        counts for that member's group). Whether it owed any member anew."""
        owed = False
        have = {c.sub.key for c in rec.copies.values()} | set(rec.peers)
        groups = rec.groups or {}
        for group, members in self._members(rec.address).items():
            keys = [m.key for m in members if m.key in have]
            if keys:
                groups[group] = keys
                continue
            m = self._choose(rec.id, members, [])
            if m is not None:
                groups[group] = [m.key]
                self._owe_member(rec, m, resend=True)
                owed = True
        if groups:
            rec.groups = groups
        return owed

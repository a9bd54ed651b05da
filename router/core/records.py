"""The state the delivery engine keeps: delivery records, subscribers and publishers.

A `Record` is the seed design's delivery record: the message, its publisher, the publisher's
tag, the outgoing (disambiguated) tag, and one `Copy` per subscriber that matched when the
message arrived. `peers` is the room the mesh keeps for per-router state.
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .actions import Outcome

AWAY = ""  # the router name under which warm subscribers that are away stay matchable

ALL = "all"
SOME = "some"
MODES = (ALL, SOME)

# The guarantee a message gets (docs/guarantees.md, "At least once"): exactly once (the
# default), or at least once, which keeps "accepted only when every subscriber accepted" and
# drops what exactly-once needs beyond it: a forgotten record leaves no tombstone, so a
# resend or a late copy of it is delivered again.
EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)


# The key of a status (`Record.status`) listing the failed subscribers that may have
# processed the message all the same (docs/guarantees.md, "Failed, or in doubt").
IN_DOUBT = "in_doubt"

class CopyState(IntEnum):
    """Where one subscriber's copy of a message stands."""

    QUEUED = 0  # waiting for the subscriber's credit (or for its turn)
    SENT = 1  # on the wire, outcome not known yet (in doubt)
    ACCEPTED = 2
    FAILED = 3  # rejected, too many attempts, expired, or the subscriber left
    WITHDRAWN = 4  # the publisher stopped tracking the message (settled it early)


TERMINAL = (CopyState.ACCEPTED, CopyState.FAILED, CopyState.WITHDRAWN)


def outgoing_tag(container: str, link_name: str, tag: bytes) -> bytes:
    """The tag subscribers see: a 16-byte digest of the publisher's identity and its own tag,
    written as 32 hex characters.

    Any router computes the same tag for the same publisher delivery, so after a failover a
    resumed subscriber and the new router agree on it without a per-message mapping, and it
    fits AMQP's 32-byte limit whatever the publisher's tag and names are. Hex rather than raw
    bytes because proton's Python binding decodes delivery tags as UTF-8 and fails on others."""
    h = _identity_hash(container, link_name).copy()
    h.update(tag)
    return h.hexdigest().encode()


@functools.lru_cache(maxsize=4096)
def _identity_hash(container: str, link_name: str) -> Any:
    """The digest state after the publisher's identity: one per publisher link, so each
    message hashes only its own tag (this is on the per-message path)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(container.encode())
    h.update(b"\x00")
    h.update(link_name.encode())
    h.update(b"\x00")
    return h


@dataclass(slots=True, frozen=True)
class LinkIdentity:
    """A client link's identity in the mesh: the container-id and link name."""

    container: str
    name: str

    @property
    def key(self) -> str:
        """How the mesh names a subscriber: unique mesh-wide, whatever router it is on."""
        return f"{self.container}/{self.name}"

    def label(self, router_id: str) -> str:
        return f"{self.key}@{router_id}"


class Subscriber:
    __slots__ = (
        "credit", "filter", "gen", "holding", "ident", "inflight", "key", "label", "link",
        "no_local", "placeholders", "presettled", "qos2_shared", "queue", "sid", "since",
        "stored_full", "warm_timeout", "warm_until",
    )

    def __init__(
        self, link: int, ident: LinkIdentity, topic_filter: str, label: str, presettled: bool
    ) -> None:
        self.link: int | None = link  # None while a warm subscriber is away
        # Its number in the engine for good: records and the index know it by this, so that
        # a warm subscriber coming back on a new link finds its copies where they were.
        self.sid = link
        self.warm_timeout: float | None = None  # seconds it stays subscribed while away
        self.warm_until: float | None = None  # when it fails if still away
        # Its attach generation: the newest attach of one subscriber key wins mesh-wide.
        self.gen = 0
        # The generation its subscription started afresh at (later attaches that resumed it,
        # here or elsewhere, keep it), 0 if not known: it is owed nothing owed to an attach
        # before that one.
        self.since = 0
        # Resume (docs/resume-protocol.md): deliveries it declared on attach that this router
        # had no record of, by delivery id -> "accepted" | "received". Until the "received"
        # ones arrive (`holding` counts them) nothing is sent to it, so that nothing newer
        # overtakes them.
        self.placeholders: dict[str, str] = {}
        self.holding = 0
        self.ident = ident
        self.filter = topic_filter
        self.label = label
        self.key = ident.key
        # A subscriber that asked for pre-settled transfers is at-most-once: its copy counts
        # as accepted when sent, since it will never send an outcome.
        self.presettled = presettled
        # Not sent what a publisher link of its own container publishes (MQTT 5's No Local
        # option, MQTT-3.8.3-3: the container is the MQTT client id).
        self.no_local = False
        # A member of a shared group that subscribed at MQTT QoS 2: a copy sent to it that it
        # did not answer is not sent to another member (MQTT-4.8.2-5, router/core/groups.py).
        self.qos2_shared = False
        self.credit = 0
        # Records waiting to be sent, in publish order per publisher; redeliveries go first.
        self.queue: deque[Record] = deque()
        # Copies sent and not yet settled on the router's side, by outgoing tag.
        self.inflight: dict[bytes, Record] = {}
        # With a relay store: its window filled up and the copies in it were stored
        # (`Engine._store_waiting`); set again only after it gets credit.
        self.stored_full = False


class Publisher:
    __slots__ = (
        "address", "credit_out", "ident", "label", "link", "live", "mode", "once", "records",
        "resend_ids", "resends",
        "stored_enough",
    )

    def __init__(self, link: int, ident: LinkIdentity, address: str, mode: str, label: str,
                 stored_enough: bool = False):
        self.link = link
        # Its acknowledgement means "every owed subscriber accepted it, or has it durably
        # stored by its relay" (MQTT's PUBACK and PUBREC, docs/relay.md), not "accepted".
        self.stored_enough = stored_enough
        self.ident = ident
        self.address = address
        self.mode = mode
        self.once = True  # its messages' guarantee, unless one says otherwise: exactly once
        self.label = label
        self.live = 0  # records of this link not yet forgotten: the memory the link holds
        self.credit_out = 0  # credit granted and not yet used
        # Records whose publisher has not settled yet, by the publisher's tag.
        self.records: dict[bytes, Record] = {}
        # Tags it declared on attach as unsettled (resume): those deliveries are resends of
        # messages the mesh may already have, not new messages that reuse a tag. In the order
        # declared, which is its publish order; each with its place in that order (a tag
        # leaves when its resend arrives; the places of the others stay).
        self.resends: dict[bytes, int] = {}
        # The delivery ids of all the tags it declared (id -> tag), hashed once on attach:
        # placing each resend needs them (`Engine._queue_before`).
        self.resend_ids: dict[str, bytes] = {}


class Copy:
    __slots__ = ("attempts", "doubt", "held", "reason", "state", "sub", "sub_settled")

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.state = CopyState.QUEUED
        # The router's relay store holds this copy durably (docs/relay.md): while it is
        # pending it counts in `Record.held`. Stays set once it is done: the store's row goes
        # when the record is forgotten.
        self.held = False
        self.attempts = 0  # deliveries so far, counting the first
        self.reason = ""  # why it failed, for the publisher's outcome
        self.sub_settled = False  # the subscriber settled its side
        # Sent on a link that broke before the subscriber answered, and queued again for it:
        # it may have processed it (shared groups at QoS 2 keep it from other members).
        self.doubt = False


class Role(IntEnum):
    """Whose record it is (router/core/transitions.py moves it from one role to another)."""

    ORIGIN = 0  # its publisher is attached here (or settled): this router tells it the outcome
    DESTINATION = 1  # another router's message: this router answers `origin` with a verdict
    ORPHAN = 2  # its publisher or origin is gone: it waits `orphan_until` for a resend


class PartState(IntEnum):
    """Where another router's part of a message stands, as the origin sees it."""

    PENDING = 0
    ACCEPTED = 1
    FAILED = 2
    WITHDRAWN = 3


class PeerPart:
    """One remote subscriber's part of a message, as the origin sees it: the router it is owed
    at (None while that router is lost and the subscriber has not reattached elsewhere), the
    attach generation it is owed to there, and where it stands."""

    __slots__ = ("doubt", "ended", "gen", "held", "key", "last", "reason", "router", "state")

    def __init__(self, router: str | None, key: str, last: str = "", gen: int = 0) -> None:
        self.router = router
        self.last = router or last  # the router it was last owed at, to name it by
        # The subscriber's attach generation there, as far as the origin knows: an attach
        # that subscribed afresh after it is not owed this part (failover.py _end_earlier).
        self.gen = gen
        # Set once the subscriber subscribed afresh after `gen`: the part was owed to a
        # subscription that ended, and it waits until then for the verdict of `router`, which
        # answers for that one; it is not moved (failover.py _end_earlier).
        self.ended: float | None = None
        self.key = key
        self.state = PartState.PENDING
        self.reason = ""
        self.doubt = False  # failed, but the subscriber may have processed it (`move_part`)
        # Its router's relay store holds the copy (that router said so: `PeerStored`); while
        # it is pending it counts in `Record.held`.
        self.held = False

    @property
    def label(self) -> str:
        return f"{self.key}@{self.last}"


class Record:
    __slots__ = (
        "accepted",
        "address",
        "answered",
        "born",
        "copies",
        "early",
        "expires",
        "failed",
        "final",
        "former",
        "fresh",
        "groups",
        "held",
        "id",
        "mode",
        "once",
        "origin",
        "orphan_until",
        "out_tag",
        "outcome",
        "partial",
        "payload",
        "peers",
        "pending",
        "presettled",
        "pub_ident",
        "pub_settled",
        "pub_tag",
        "publisher",
        "released",
        "resolved",
        "role",
        "seq",
        "stored",
        "stored_told",
        "told",
    )

    def __init__(
        self,
        seq: int,
        publisher: Publisher | None,
        pub_tag: bytes,
        out_tag: bytes,
        payload: bytes,
        mode: str,
        presettled: bool,
        expires: float | None,
        address: str = "",
        origin: str | None = None,
    ) -> None:
        self.seq = seq
        self.publisher = publisher  # the local publisher; None once its link is gone
        # Who published it here (kept when its link is gone): publish order is per publisher.
        self.pub_ident = publisher.ident if publisher is not None else None
        self.origin = origin  # the origin router for a message that came from another router
        self.role = Role.ORIGIN if origin is None else Role.DESTINATION
        # Its outcome covers only this router's subscribers: it came from another router
        # (even once orphaned), so its own verdict is not the mesh-wide outcome.
        self.partial = origin is not None
        self.pub_tag = pub_tag
        self.out_tag = out_tag
        self.id = out_tag.decode()  # the delivery id: the same on every router
        self.payload = payload
        self.address = publisher.address if publisher is not None else address
        self.mode = mode
        self.once = True  # exactly once; False: at least once (no tombstone when forgotten)
        self.born = 0.0  # when it arrived (the engine's clock): how long it waits, for metrics
        self.presettled = presettled
        self.expires = expires
        self.copies: dict[int, Copy] = {}  # by subscriber sid
        self.peers: dict[str, PeerPart] = {}  # by remote subscriber key (origin side only)
        self.told: set[str] = set()  # routers it was forwarded to: they hear the forget
        # Parts failed in doubt that their router answered for since (doubts.py `resolve`):
        # label -> {"accepted", "router", "reason"}. None until the first.
        self.resolved: dict[str, dict[str, Any]] | None = None
        # Its publisher sent it as a new message, not as a possible resend (MQTT DUP=0, a tag
        # it did not declare on resume), and a record of that came here as a plain forward:
        # its tombstone then answers no other origin's plain forward of the same id, which is
        # a later message that reuses the id (an MQTT packet id, after a move).
        self.fresh = False
        # Shared subscriptions (router/core/groups.py), at the origin: for each group it is
        # owed to, the members tried, the one owed it now last. None if no group matched.
        self.groups: dict[str, list[str]] | None = None
        # Set while its publisher (or origin router) is gone: when it stops waiting for a
        # resend (router/core/failover.py).
        self.orphan_until: float | None = None
        # At a destination, the mesh-wide outcome its origin told with the forget (its own
        # `outcome` is only this router's part of it): what its tombstone keeps.
        self.final: Outcome | None = None
        # At a destination, the subscribers its verdicts to the origin answered for so far.
        self.answered: set[str] | None = None
        # The origins it answered before a resend from another router took it over (at a
        # destination), or before its publisher's resend here made it ours (at an origin,
        # failover.py `_adopt_for_publisher`): they get its verdicts too, marked `former`
        # (a destination's record there may wait for them; the resend may have been the
        # older one). A router our resend reached since leaves it (failover.py `_reached`).
        self.former: tuple[str, ...] = ()
        self.pending = 0  # copies and peer parts not yet decided
        self.accepted = 0  # copies and peer parts accepted
        self.failed = 0  # copies and peer parts failed
        self.outcome: Outcome | None = None
        self.pub_settled = presettled
        # Relays (docs/relay.md): pending copies the relay store holds; whether a copy of it
        # was ever stored (the store has rows to drop when it is forgotten); whether every
        # pending copy was stored, which gave its publisher's window place back and, for a
        # publisher whose acknowledgement counts stored copies, its answer (`Engine._release`).
        self.held = 0
        self.stored = False
        self.released = False
        self.early = False  # its publisher was answered on stored copies
        # At a destination: the subscribers whose stored copies the origin was told of.
        self.stored_told: set[str] | None = None

    @property
    def parts(self) -> int:
        return len(self.copies) + len(self.peers)

    def status(self) -> dict[str, Any]:
        """Subscribers by where they stand, here and (origin side) at other routers: the
        seed's STATUS answer, with `reasons` for the failed ones."""
        out: dict[str, Any] = {"succeeded": [], "failed": [], "pending": [], "reasons": {}}
        doubt: list[str] = []
        for copy in self.copies.values():
            if copy.state == CopyState.ACCEPTED:
                out["succeeded"].append(copy.sub.label)
            elif copy.state == CopyState.FAILED:
                out["failed"].append(copy.sub.label)
                out["reasons"][copy.sub.label] = copy.reason
                if copy.doubt:
                    doubt.append(copy.sub.label)
            elif copy.state != CopyState.WITHDRAWN:
                out["pending"].append(copy.sub.label)
        for part in self.peers.values():
            if part.state == PartState.PENDING:
                out["pending"].append(part.label)
            elif part.state == PartState.ACCEPTED:
                out["succeeded"].append(part.label)
            elif part.state == PartState.FAILED:
                out["failed"].append(part.label)
                out["reasons"][part.label] = part.reason
                if part.doubt:
                    doubt.append(part.label)
        if doubt:
            # Failed, but it may have processed the message: its answer was lost (a router
            # went, a deadline passed). The others failed for certain: they did not get it.
            out[IN_DOUBT] = doubt
        return out

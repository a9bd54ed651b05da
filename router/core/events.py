"""What can happen to a router's delivery engine: the events `Engine.handle` takes.

Each event carries the time it happened (`now`, seconds on the runtime's monotonic clock or the
simulator's); the engine reads no clock of its own, and its clock never runs backwards (an
event stamped earlier than the last one is handled at the last one's time). Edges make the
client events, the mesh the router events, the runtime's timer `TimePassed`.

The classes write their own `__init__` for mypyc (router/core/actions.py says why), and take
`now` first so that every construction reads alike: `MessageArrived(now, link, tag, payload)`.
"""

from __future__ import annotations

from typing import Any

from .records import LinkIdentity


class Event:
    __slots__ = ("now",)

    def __init__(self, now: float) -> None:
        self.now = now

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields())
        return f"{type(self).__name__}({fields})"

    def _fields(self) -> list[str]:
        names: list[str] = []
        for cls in reversed(type(self).__mro__):
            names.extend(getattr(cls, "__slots__", ()))
        return names


# ---------------------------------------------------------------------------- clients


class PublisherAttached(Event):
    """A client attached a link to send to topic `address` (validated) in delivery `mode`.
    `resends`: the tags it declared unsettled on resume (it sends them again).
    `stored_enough`: its acknowledgement counts copies a relay stored (MQTT, docs/relay.md).
    `once`: its messages are exactly once unless one says otherwise (False: at least once)."""

    __slots__ = ("address", "ident", "link", "mode", "once", "resends", "stored_enough")

    def __init__(self, now: float, link: int, ident: LinkIdentity, address: str, mode: str,
                 resends: list[bytes] | None = None, stored_enough: bool = False,
                 once: bool = True) -> None:
        self.now = now
        self.link = link
        self.ident = ident
        self.address = address
        self.mode = mode
        self.resends = resends
        self.stored_enough = stored_enough
        self.once = once


class PublisherDetached(Event):
    """The publisher's link is gone: closed (`final`) or lost (it may resume elsewhere)."""

    __slots__ = ("final", "link")

    def __init__(self, now: float, link: int, final: bool = True) -> None:
        self.now = now
        self.link = link
        self.final = final


NO_LOCAL = 0x04  # in `SubscriberAttached.qos`: not sent what its own container publishes


class SubscriberAttached(Event):
    """A client attached a link to receive what matches `topic_filter`. `warm_timeout`: a
    durable subscriber, kept that long while away; `gen`: the attach generation it declared;
    `declared`: its unsettled deliveries on resume (id -> "accepted" | "received"); `qos`:
    an MQTT subscription's options (MQTT 5 section 3.8.3.1: the granted QoS 0-2 in bits 0-1,
    No Local in bit 2, `NO_LOCAL`), gossiped with it so that a router taking the session
    over knows them (AMQP subscribers leave it 0)."""

    __slots__ = ("declared", "gen", "ident", "link", "presettled", "qos", "topic_filter",
                 "warm_timeout")

    def __init__(self, now: float, link: int, ident: LinkIdentity, topic_filter: str,
                 presettled: bool = False, warm_timeout: float | None = None, gen: int = 0,
                 declared: dict[str, str] | None = None, qos: int = 0) -> None:
        self.now = now
        self.link = link
        self.ident = ident
        self.topic_filter = topic_filter
        self.presettled = presettled
        self.warm_timeout = warm_timeout
        self.gen = gen
        self.declared = declared
        self.qos = qos


class SubscriberDetached(Event):
    """The subscriber's link is gone: closed (`final`: the subscription ends) or lost (a warm
    subscriber stays subscribed for its timeout)."""

    __slots__ = ("final", "link")

    def __init__(self, now: float, link: int, final: bool = True) -> None:
        self.now = now
        self.link = link
        self.final = final


class SubscriberCredit(Event):
    """The subscriber's link credit is now `credit`."""

    __slots__ = ("credit", "link")

    def __init__(self, now: float, link: int, credit: int) -> None:
        self.now = now
        self.link = link
        self.credit = credit


class MessageArrived(Event):
    """A publisher's delivery arrived whole. `mode`: a per-message delivery mode override;
    `ttl_ms`: its time to live; `address`: its topic when the link has none of its own (MQTT);
    `resend`: it may be a resend of one the mesh has (MQTT DUP=1). `guarantee`: a per-message
    guarantee override (`x-opt-guarantee`: "exactly-once" or "at-least-once")."""

    __slots__ = ("address", "guarantee", "link", "mode", "payload", "resend", "settled", "tag",
                 "ttl_ms")

    def __init__(self, now: float, link: int, tag: bytes, payload: bytes,
                 settled: bool = False, mode: str | None = None, ttl_ms: int | None = None,
                 address: str | None = None, resend: bool = False,
                 guarantee: str | None = None) -> None:
        self.now = now
        self.link = link
        self.tag = tag
        self.payload = payload
        self.settled = settled
        self.mode = mode
        self.ttl_ms = ttl_ms
        self.address = address
        self.resend = resend
        self.guarantee = guarantee


class MessageRefused(Event):
    """A publisher's delivery the edge could not make sense of: rejected at once with
    `condition` and `description`, delivered to nobody."""

    __slots__ = ("condition", "description", "link", "settled", "tag")

    def __init__(self, now: float, link: int, tag: bytes, condition: str, description: str,
                 settled: bool) -> None:
        self.now = now
        self.link = link
        self.tag = tag
        self.condition = condition
        self.description = description
        self.settled = settled


class CopyOutcome(Event):
    """A subscriber's outcome for (or settlement of) copy `tag`: a `Disposition` value;
    `error` is its own description when it rejected."""

    __slots__ = ("disposition", "error", "link", "settled", "tag")

    def __init__(self, now: float, link: int, tag: bytes, disposition: int, settled: bool,
                 error: str = "") -> None:
        self.now = now
        self.link = link
        self.tag = tag
        self.disposition = disposition
        self.settled = settled
        self.error = error


class CopyWithheld(Event):
    """The edge did not send copy `tag` it was given in a `Send`: its subscriber may not read
    it (the ACL, checked per message: docs/security.md). For the publisher it counts as
    accepted by that subscriber, and the unit of credit it took is given back. `settled`:
    the `Send` was pre-settled (nothing to answer)."""

    __slots__ = ("link", "settled", "tag")

    def __init__(self, now: float, link: int, tag: bytes, settled: bool) -> None:
        self.now = now
        self.link = link
        self.tag = tag
        self.settled = settled


class PublisherSettled(Event):
    """The publisher settled its delivery `tag` (before an outcome: the seed's DELETE)."""

    __slots__ = ("link", "tag")

    def __init__(self, now: float, link: int, tag: bytes) -> None:
        self.now = now
        self.link = link
        self.tag = tag


# ---------------------------------------------------------------------------- other routers


class RemoteMessage(Event):
    """Router `origin`'s message `msg_id`, owed to subscribers `owed` (keys) here;
    `presettled`: at most once (sent to those attached, answered for to nobody). `gens`: the
    attach generation each owed key was owed it at, by key (None from an older router).
    `once`: exactly once (False: at least once, as its publisher asked)."""

    __slots__ = ("address", "gens", "mode", "msg_id", "once", "origin", "owed", "payload",
                 "presettled", "resend", "ttl_ms")

    def __init__(self, now: float, origin: str, msg_id: str, address: str, payload: bytes,
                 owed: list[str], mode: str, ttl_ms: int | None, resend: bool = False,
                 presettled: bool = False, gens: dict[str, int] | None = None,
                 once: bool = True) -> None:
        self.now = now
        self.origin = origin
        self.msg_id = msg_id
        self.address = address
        self.payload = payload
        self.owed = owed
        self.mode = mode
        self.ttl_ms = ttl_ms
        self.resend = resend
        self.presettled = presettled
        self.gens = gens
        self.once = once


class PeerVerdict(Event):
    """Router `router`'s verdict on our message `msg_id` for subscribers `keys` there.
    `former`: it answers us as an origin its record answered before (actions.Verdict)."""

    __slots__ = ("accepted", "former", "keys", "msg_id", "router", "status")

    def __init__(self, now: float, router: str, msg_id: str, accepted: bool,
                 status: dict[str, Any], keys: list[str] | None = None,
                 former: bool = False) -> None:
        self.now = now
        self.router = router
        self.msg_id = msg_id
        self.accepted = accepted
        self.status = status
        self.keys = keys
        self.former = former


class RemoteForget(Event):
    """Router `origin` is done with its message `msg_id`; `accepted`: the mesh-wide outcome,
    and for a failure the publisher's `description` and `info` (who failed, and why)."""

    __slots__ = ("accepted", "description", "info", "msg_id", "origin")

    def __init__(self, now: float, origin: str, msg_id: str, accepted: bool | None = None,
                 description: str = "", info: dict[str, Any] | None = None) -> None:
        self.now = now
        self.origin = origin
        self.msg_id = msg_id
        self.accepted = accepted
        self.description = description
        self.info = info


class RemoteSubscriberAdded(Event):
    """Gossip: subscriber `key` with `topic_filter` is attached at `router`, at attach
    generation `gen`, its subscription started afresh at generation `since` (0: not known,
    from an older router)."""

    __slots__ = ("gen", "key", "qos", "router", "since", "timeout", "topic_filter")

    def __init__(self, now: float, router: str, key: str, topic_filter: str, gen: int = 0,
                 timeout: float = 0.0, qos: int = 0, since: int = 0) -> None:
        self.now = now
        self.router = router
        self.key = key
        self.topic_filter = topic_filter
        self.gen = gen
        self.timeout = timeout
        self.qos = qos
        self.since = since


class RemoteSubscriberRemoved(Event):
    """Gossip: subscriber `key` left `router`."""

    __slots__ = ("key", "router")

    def __init__(self, now: float, router: str, key: str) -> None:
        self.now = now
        self.router = router
        self.key = key


class PeerLost(Event):
    """Router `router` restarted (its clients and records are gone) or was given up."""

    __slots__ = ("reason", "restarted", "router")

    def __init__(self, now: float, router: str, reason: str, restarted: bool = False) -> None:
        self.now = now
        self.router = router
        self.reason = reason
        self.restarted = restarted


class MeshJoining(Event):
    """The router has just started with peers to reach and knows none of the subscribers
    behind them: a guaranteed message published here now would be owed to local subscribers
    only. Until `MeshJoined`, such messages wait (holding their publishers' windows)."""

    __slots__ = ()

    def __init__(self, now: float) -> None:
        self.now = now


class MeshJoinTimedOut(Event):
    """The router did not hear the mesh's subscriptions within `join-timeout`: the messages
    that waited fail with `description`, as do those published until `MeshJoined`."""

    __slots__ = ("description",)

    def __init__(self, now: float, description: str) -> None:
        self.now = now
        self.description = description


class MeshJoined(Event):
    """The router has heard the mesh's subscriptions from a peer (or gave up waiting): the
    messages that waited are routed now, to the subscribers known now."""

    __slots__ = ()

    def __init__(self, now: float) -> None:
        self.now = now


class AwayLearned(Event):
    """A peer holds subscribers of this router's previous run as away (warm, waiting to
    reattach): (key, filter, warm timeout, seconds left, gen, qos, since) each. This router,
    restarted, knew nothing of them; it owes them what is published here meanwhile, as
    every other router does."""

    __slots__ = ("entries",)

    def __init__(self, now: float, entries: list[tuple[str, str, float, float, int, int, int]]
                 ) -> None:
        self.now = now
        self.entries = entries


# ---------------------------------------------------------------------------- relay store


class Held(Event):
    """The relay store committed the copies of `Hold` actions: (sid, record seq) each."""

    __slots__ = ("items",)

    def __init__(self, now: float, items: list[tuple[int, int]]) -> None:
        self.now = now
        self.items = items


class PeerStored(Event):
    """Router `router`'s relay store holds the copies of our message `msg_id` for `keys`."""

    __slots__ = ("keys", "msg_id", "router")

    def __init__(self, now: float, router: str, msg_id: str, keys: list[str]) -> None:
        self.now = now
        self.router = router
        self.msg_id = msg_id
        self.keys = keys


class Restored(Event):
    """A restarted router's relay store still holds these copies, in arrival order, as
    (subscriber key, delivery id, address, origin router or ""): they are owed again to the
    warm subscribers restored before (the MQTT edge restores its persistent sessions)."""

    __slots__ = ("items",)

    def __init__(self, now: float, items: list[tuple[str, str, str, str]]) -> None:
        self.now = now
        self.items = items


# ---------------------------------------------------------------------------- time


class TimePassed(Event):
    """The runtime's timer: it is `now`, at or after `Engine.next_deadline()`."""

    __slots__ = ()

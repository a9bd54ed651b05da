"""What the delivery engine asks its runtime to do.

The engine never touches a socket: every effect it wants is one of these small records,
returned in order. The runtime (the AMQP or MQTT edge) applies them in that order; the order
matters, for example a `SettleCopy` for an old copy comes before the `Send` that redelivers it
under the same tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACCEPTED_NAME = "accepted"

# The records the engine makes for every message write their own __init__ (init=False): mypyc
# compiles a hand-written one, while the one `dataclasses` generates is built at import and
# runs as plain Python, which was 3% of the router's CPU per MQTT message (py-spy --native).


@dataclass(slots=True, frozen=True)
class Accepted:
    """The outcome a publisher gets when the mesh has accepted its message."""

    def __str__(self) -> str:
        return ACCEPTED_NAME


ACCEPTED = Accepted()


@dataclass(slots=True, frozen=True)
class Rejected:
    """A failure outcome. `condition` is an AMQP error symbol such as
    `exactmesh:delivery-failed`; `description` is a sentence a person can act on;
    `info` lists subscribers as `succeeded`, `failed` and `pending` (and why each failed)."""

    condition: str
    description: str
    info: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"rejected ({self.condition}): {self.description}"


Outcome = Accepted | Rejected


@dataclass(slots=True, init=False)
class Send:
    """Deliver one copy of a message on a subscriber link.

    `attempt` is 0 for the first delivery and n for the n-th redelivery (the AMQP header's
    delivery-count); `settled` means the copy goes pre-settled (at most once). `address`:
    the topic it was published to (an MQTT PUBLISH needs it when the message carries no
    `to`, and the record may be gone by the time the copy is written out). `ttl_left_ms`:
    for a message with a time to live, what is left of it now (an MQTT PUBLISH carries that,
    not the original interval: MQTT-3.3.2-6)."""

    link: int
    tag: bytes
    payload: bytes
    attempt: int
    settled: bool
    address: str
    ttl_left_ms: int | None

    def __init__(self, link: int, tag: bytes, payload: bytes, attempt: int, settled: bool,
                 address: str = "", ttl_left_ms: int | None = None) -> None:
        self.link = link
        self.tag = tag
        self.payload = payload
        self.attempt = attempt
        self.settled = settled
        self.address = address
        self.ttl_left_ms = ttl_left_ms


@dataclass(slots=True, init=False)
class SettleCopy:
    """Settle the router's side of a copy sent earlier on a subscriber link (relayed
    publisher settlement, a withdrawn or expired copy, or an old copy before a redelivery)."""

    link: int
    tag: bytes

    def __init__(self, link: int, tag: bytes) -> None:
        self.link = link
        self.tag = tag


@dataclass(slots=True, init=False)
class Decide:
    """Tell a publisher the outcome of its delivery `tag`. The router leaves the delivery
    unsettled: the publisher settles it, and that settlement is what the engine relays on."""

    link: int
    tag: bytes
    outcome: Outcome

    def __init__(self, link: int, tag: bytes, outcome: Outcome) -> None:
        self.link = link
        self.tag = tag
        self.outcome = outcome


@dataclass(slots=True, init=False)
class Credit:
    """Grant `amount` more credit to a publisher link."""

    link: int
    amount: int

    def __init__(self, link: int, amount: int) -> None:
        self.link = link
        self.amount = amount


@dataclass(slots=True)
class CloseLink:
    """Close a link with an AMQP error condition (the client broke a rule)."""

    link: int
    condition: str
    description: str


@dataclass(slots=True, init=False)
class Relayed:
    """Tell a publisher that every copy still owed of its delivery `tag` is on a relay's
    disk (docs/relay.md): not an outcome (AMQP's non-terminal `received` state, 3.4.1). Its
    outcome comes later; meanwhile its place in the publisher's own window may go."""

    link: int
    tag: bytes

    def __init__(self, link: int, tag: bytes) -> None:
        self.link = link
        self.tag = tag


Action = Send | SettleCopy | Decide | Credit | CloseLink | Relayed


# ---------------------------------------------------------------------- toward the relay store


@dataclass(slots=True, init=False)
class Hold:
    """Store a copy durably for `key`, a warm subscriber that is away (docs/relay.md), then
    tell the engine `Held` with (`sid`, `seq`). Only a router with a relay store gets these."""

    sid: int
    seq: int
    key: str
    msg_id: str
    address: str
    payload: bytes
    origin: str  # the router its verdict goes to ("" for our own message)

    def __init__(self, sid: int, seq: int, key: str, msg_id: str, address: str,
                 payload: bytes, origin: str = "") -> None:
        self.sid = sid
        self.seq = seq
        self.key = key
        self.msg_id = msg_id
        self.address = address
        self.payload = payload
        self.origin = origin


@dataclass(slots=True)
class Unhold:
    """The record of `msg_id` is forgotten: the store's copies of it go."""

    msg_id: str


# The engine sends a `Send` or `Forward` of a released record (`Record.released`) with this
# payload: the body is in the relay store only, and the node loop reads it from there.
IN_STORE = b""
STORE_ACTIONS = (Hold, Unhold)


# ---------------------------------------------------------------------- toward other routers


@dataclass(slots=True, init=False)
class Forward:
    """Send a message to other routers (the mesh layer sends one copy per next hop).

    `owed` lists, per destination router, the subscriber keys (`container/link`) this router
    knew there when the message arrived: the subscribers the destination must answer for.
    `resend` marks a message the mesh may have seen before (a publisher resumed, or a
    subscriber moved): a destination holding a record of it adds to that record, or answers
    from what it remembers of a forgotten one, instead of delivering it again.
    `gens`: the attach generation, by key, of the attach each owed subscriber was owed it at
    (as far as this router knows): a destination where that key attached again since leaves
    the copy to the resend that the newer attach brings from here."""

    msg_id: str
    owed: dict[str, list[str]]
    address: str
    payload: bytes
    mode: str
    ttl_ms: int | None
    publisher: str
    resend: bool = False
    presettled: bool = False
    gens: dict[str, int] | None = None
    once: bool = True  # False: at least once (its destinations keep no tombstone of it)

    def __init__(self, msg_id: str, owed: dict[str, list[str]], address: str, payload: bytes,
                 mode: str, ttl_ms: int | None, publisher: str, resend: bool = False,
                 presettled: bool = False, gens: dict[str, int] | None = None,
                 once: bool = True) -> None:
        self.msg_id = msg_id
        self.owed = owed
        self.address = address
        self.payload = payload
        self.mode = mode
        self.ttl_ms = ttl_ms
        self.publisher = publisher
        self.resend = resend
        self.presettled = presettled
        self.gens = gens
        self.once = once


@dataclass(slots=True, init=False)
class Verdict:
    """Tell the origin router how its message fared with the subscribers here: `accepted` per
    the delivery mode, and `status` naming who succeeded, failed and is pending (and why).
    `keys` are the subscribers the verdict answers for: a subscriber that moved here after an
    earlier verdict is answered for by a later one. `former`: sent to an origin the record
    answered before its current one (`Record.former`), for a record of its own it may still
    hold; it does not say that the sender answers it as its origin now."""

    origin: str
    msg_id: str
    accepted: bool
    status: dict[str, Any]
    keys: list[str] = field(default_factory=list)
    former: bool = False

    def __init__(self, origin: str, msg_id: str, accepted: bool, status: dict[str, Any],
                 keys: list[str] | None = None, former: bool = False) -> None:
        self.origin = origin
        self.msg_id = msg_id
        self.accepted = accepted
        self.status = status
        self.keys = [] if keys is None else keys
        self.former = former


@dataclass(slots=True, init=False)
class Forget:
    """The origin is done with a message: the destinations relay settlement and drop it.
    `accepted` is the mesh-wide outcome (None if there was none: the publisher withdrew it),
    which a destination keeps as the message's tombstone for resends; for a failure,
    `description` and `info` are the publisher's own (who succeeded, failed and why), so
    that a resend answered from the tombstone names them too."""

    routers: list[str]
    msg_id: str
    accepted: bool | None = None
    description: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def __init__(self, routers: list[str], msg_id: str, accepted: bool | None = None,
                 description: str = "", info: dict[str, Any] | None = None) -> None:
        self.routers = routers
        self.msg_id = msg_id
        self.accepted = accepted
        self.description = description
        self.info = {} if info is None else info


@dataclass(slots=True)
class Subscribed:
    """A local subscriber attached (`topic_filter` set) or left (None): gossip it, with its
    attach generation (the newest attach of a key wins mesh-wide) and, for a warm subscriber,
    how long it stays subscribed while away (0 for others), an MQTT subscription's
    granted QoS (0 for others), which a router taking the device's session over needs, and
    the generation its subscription started afresh at (`since`: an origin does not follow it
    with what an earlier, ended subscription of the key was owed)."""

    key: str
    topic_filter: str | None
    gen: int = 0
    timeout: float = 0.0
    qos: int = 0
    since: int = 0


@dataclass(slots=True)
class StoredAt:
    """Tell the origin router that this router's relay store holds the copies of its message
    for subscribers `keys` (docs/relay.md): not an acceptance; their parts may now count as
    stored there (a window place given back, an MQTT publisher answered)."""

    origin: str
    msg_id: str
    keys: list[str]


MeshAction = Forward | Verdict | Forget | Subscribed | StoredAt
MESH_ACTIONS = (Forward, Verdict, Forget, Subscribed, StoredAt)
# Everything the engine emits: edge actions and, in a mesh, the ones toward other routers.
EngineAction = Action | Forward | Verdict | Forget | Subscribed | StoredAt | Hold | Unhold

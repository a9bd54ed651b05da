"""Reply-name substitution at a relay (seed 000; docs/relay.md, "Requests and replies").

A request that reaches a relay (or a router with a relay store) from one of its clients, with
a `reply-to`, leaves with a surrogate instead: `_relay/R/H/reply/UUID`, where R is the relay
and H a digest of the client's container-id. The surrogate is kept in the relay's store, the
same for the same reply name every time, and the relay subscribes to `_relay/R/H/#` for that
client, durably and for its registration, as the link `CONTAINER/replies`. So a reply sent
while the requester is away waits in the store. The client receives its replies by attaching
a receiver link named `replies` with source address `$replies`; each reply comes with its
`to` set back to the reply name the request carried. The SDK does this (`Requester`,
amqp_edge/request.py); any AMQP client may.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from router.core.message import (
    PROPERTY_REPLY_TO,
    PROPERTY_TO,
    property_string,
    with_property_string,
)
from router.core.records import LinkIdentity

from .names import REPLIES_LINK, REPLIES_SOURCE
from .persistence import subscribe_away

if TYPE_CHECKING:
    from router.ports import RuntimePort

__all__ = ["REPLIES_LINK", "REPLIES_SOURCE", "restore_name", "substitute"]

SURROGATE_ROOT = "_relay/"


def client_prefix(router_id: str, container: str) -> str:
    """The topic prefix of one client's surrogates at this relay (a digest: a container-id
    may hold characters a topic may not)."""
    return f"{SURROGATE_ROOT}{router_id}/{hashlib.sha256(container.encode()).hexdigest()[:16]}"


def reply_filter(router_id: str, container: str) -> str:
    return client_prefix(router_id, container) + "/#"


def substitute(node: RuntimePort, container: str, payload: bytes, at: int) -> bytes:
    """A message from a client of this relay: a request's `reply-to` replaced by its
    surrogate, the client's reply subscription made if there is none. Others as they are.
    `at`: where its properties section would start (`MessageInfo.annotations_end`: the edge
    scanned it already). Raises MalformedMessage for a malformed properties section."""
    original = property_string(payload, PROPERTY_REPLY_TO, at)
    store = node.relay_store
    if original is None or store is None or original.startswith(SURROGATE_ROOT):
        return payload
    router_id = node.config.id
    surrogate = store.surrogate(container, original, client_prefix(router_id, container))
    ident = LinkIdentity(container, REPLIES_LINK)
    if not node.engine.knows_subscriber(ident.key):
        subscribe_away(node, ident, reply_filter(router_id, container), False,
                       node.config.reconnect_timeout, keep=True)
    return with_property_string(payload, PROPERTY_REPLY_TO, surrogate, at)


def restore_name(node: RuntimePort, payload: bytes) -> bytes:
    """A reply handed to its requester: its `to` set back from the surrogate to the reply
    name of the request."""
    to = property_string(payload, PROPERTY_TO)
    store = node.relay_store
    if to is None or store is None or not to.startswith(SURROGATE_ROOT):
        return payload
    found = store.original(to)
    return payload if found is None else with_property_string(payload, PROPERTY_TO, found[1])

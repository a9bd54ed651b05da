"""Durable AMQP subscribers across a restart, with a relay store (`--relay-store`, or the
relay agent's `--store`; docs/relay.md).

A durable source terminus (AMQP 3.5.3) makes a warm subscriber; with a relay store the edge
also keeps it there (`AmqpConnection`: attached, away since, closed), and the copies owed to
it while it is away are there too (the engine's `Hold`). After a restart `restore_links`
puts each one back into the engine as a warm subscriber away, for what is left of its
timeout; the node then hands the engine the stored copies (`Restored`). A client that
reattaches the same link (container id and link name) gets what was stored for it, once, in
order.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from router.core import events as ev
from router.core.records import LinkIdentity

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.amqp")


def subscribe_away(node: RuntimePort, ident: LinkIdentity, topic_filter: str,
                   presettled: bool, timeout: float, keep: bool = False) -> None:
    """A warm subscriber whose client is away, for `timeout` seconds: restored after a
    restart, or pre-registered (`keep`: also kept in the relay store, if there is one, so
    that a restart restores it)."""
    now = node.now()
    link = node.new_link_id()  # registered by nobody: the client is away
    node.engine.handle(ev.SubscriberAttached(now, link, ident, topic_filter,
                                             presettled=presettled, warm_timeout=timeout))
    node.engine.handle(ev.SubscriberDetached(now, link, False))
    store = node.relay_store
    if keep and store is not None:
        store.keep_link(ident.key, ident.container, ident.name, topic_filter, presettled,
                        timeout)
        store.link_away(ident.key)


def restore_links(node: RuntimePort) -> int:
    """Put the durable subscriber links of the last run back, away; returns how many."""
    store = node.relay_store
    if store is None:
        return 0
    links = store.durable_links()
    for container, name, topic_filter, presettled, left in links:
        subscribe_away(node, LinkIdentity(container, name), topic_filter, presettled, left)
    if links:
        log.info("relay store: %d durable AMQP subscriber(s) restored", len(links))
    return len(links)

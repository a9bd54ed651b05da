"""Persistent MQTT sessions across a router restart, with a relay store (`--relay-store`,
docs/relay.md).

While the router runs, each persistent session is kept in the relay store as it changes
(`MqttConnection._keep_session`: its expiry and subscriptions; when its client went away, in
wall-clock time), and the copies owed to it while its client is away are there too (the
engine's `Hold`). After a restart, `restore_sessions` puts the sessions back into the edge's
registry and their subscriptions back into the engine as warm subscribers away (for what is
left of their expiry); the node then hands the engine the stored copies (`Restored`), so that
a client that reconnects finds "session present" and gets what was stored for it, once, in
order.

Not restored (docs/relay.md, "What is built"): packet ids of QoS 2 exchanges in flight when
the router stopped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from router.core import events as ev
from router.core.records import LinkIdentity

from .session import NEVER_EXPIRES, SUBSCRIBER_PREFIX, SessionState

if TYPE_CHECKING:
    from router.ports import RuntimePort

    from .session import MqttState

log = logging.getLogger("exactmesh.mqtt")


def restore_sessions(node: RuntimePort, state: MqttState) -> int:
    """Put the persistent sessions of the last run back, away; returns how many."""
    store = node.relay_store
    if store is None:
        return 0
    engine, now = node.engine, node.now()
    restored = 0
    for client_id, expiry, left, subs in store.sessions():
        if left is not None and left <= 0:
            store.drop_session(client_id)  # it expired while the router was down
            continue
        session = SessionState(client_id)
        session.persistent = session.stored = True
        session.expiry = expiry
        session.subs = dict(subs)
        remaining = min(expiry if left is None else left, float(NEVER_EXPIRES))
        session.expires_at = now + remaining
        state.sessions[client_id] = session
        for topic_filter, qos in subs.items():
            link = node.new_link_id()  # registered by nobody: the client is away
            ident = LinkIdentity(client_id, SUBSCRIBER_PREFIX + topic_filter)
            engine.handle(ev.SubscriberAttached(now, link, ident, topic_filter,
                                                presettled=qos & 3 == 0,
                                                warm_timeout=remaining,
                                                qos=qos))
            engine.handle(ev.SubscriberDetached(now, link, False))
        restored += 1
    if restored:
        log.info("relay store: %d persistent MQTT session(s) restored", restored)
    return restored

"""The relay store inside a router (`exactmesh router --relay-store DIR`, docs/relay.md):
`router.ports.RelayStorePort` over `relay.store.RelayStore`.

The engine asks it to hold the copies owed to warm subscribers that are away (`Hold`); the
node loop commits what one pass asked for in one transaction and tells the engine (`Held`),
which may then answer MQTT publishers and give their windows back. Rows are keyed by the
subscriber's key and the delivery id; the engine drops them when it forgets the message.

The MQTT edge keeps its persistent sessions here too (client id, expiry, subscriptions, and
while the client is away when the session ends, in wall-clock time: the runtime's monotonic
clock starts again with the process). After a restart it restores them, and the engine gets
the copies back (`Restored`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from relay.store import DurableLink, Inbound, RelayStore

log = logging.getLogger("exactmesh.relay")


class RouterRelayStore:
    def __init__(self, directory: str, router_id: str) -> None:
        self.store = RelayStore(directory, router_id)
        # Reply names (amqp_edge/replies.py), cached: looked up on every request and reply.
        self._surrogates: dict[tuple[str, str], str] = {}
        self._originals: dict[str, tuple[str, str]] = {}

    # ---------------------------------------------------------------- copies

    def hold(self, holds: list[Any], forgets: list[str]) -> None:
        with self.store.batch():
            for h in holds:
                self.store.hold(h.key, [Inbound(h.msg_id, h.address, h.payload,
                                                origin=h.origin)])
            if forgets:
                self.store.forget_copies(forgets)

    def payload(self, msg_id: str) -> bytes | None:
        return self.store.payload(msg_id)

    def restorable(self) -> list[tuple[str, str, str, str]]:
        return self.store.restorable()

    def drop_copies(self, items: list[tuple[str, str]]) -> None:
        with self.store.batch():
            for key, msg_id in items:
                self.store.drop_copy(key, msg_id)

    def held(self) -> tuple[int, int]:
        return self.store.held()

    # ---------------------------------------------------------------- durable AMQP links

    def keep_link(self, key: str, container: str, name: str, topic_filter: str,
                  presettled: bool, timeout: float) -> None:
        self.store.keep_link(key, DurableLink(container, name, topic_filter, presettled,
                                              timeout))

    def link_away(self, key: str) -> None:
        self.store.link_away(key, time.time())

    def drop_link(self, key: str) -> None:
        self.store.drop_link(key)

    def durable_links(self) -> list[tuple[str, str, str, bool, float]]:
        """(container, link name, filter, presettled, seconds left) of each durable link
        still registered; those whose time ran out while the router was down are dropped."""
        now, kept = time.time(), []
        for link in self.store.durable_links():
            left = link.timeout if link.away_until is None else link.away_until - now
            if left <= 0:
                self.store.drop_link(f"{link.container}/{link.name}")
                continue
            kept.append((link.container, link.name, link.filter, link.presettled, left))
        return kept

    # ---------------------------------------------------------------- reply names

    def surrogate(self, client: str, original: str, prefix: str) -> str:
        key = (client, original)
        found = self._surrogates.get(key)
        if found is None:
            found = self._surrogates[key] = self.store.surrogate(client, original, prefix)
            self._originals[found] = key
        return found

    def original(self, surrogate: str) -> tuple[str, str] | None:
        found = self._originals.get(surrogate)
        if found is None:
            found = self.store.original(surrogate)
            if found is not None:
                self._originals[surrogate] = found
        return found

    # ---------------------------------------------------------------- MQTT sessions

    def sessions(self) -> list[tuple[str, float, float | None, dict[str, int]]]:
        now = time.time()
        return [(r.client, r.expiry, None if r.away_until is None else r.away_until - now,
                 self.store.subscriptions(r.client)) for r in self.store.registrations()]

    def save_session(self, client_id: str, expiry: float, subs: dict[str, int]) -> None:
        with self.store.batch():
            self.store.register(client_id, expiry)
            for topic_filter in set(self.store.subscriptions(client_id)) - set(subs):
                self.store.unsubscribe(client_id, topic_filter)
            for topic_filter, qos in subs.items():
                self.store.subscribe(client_id, topic_filter, qos)

    def session_away(self, client_id: str) -> None:
        self.store.went_away(client_id, time.time())

    def drop_session(self, client_id: str) -> None:
        self.store.drop(client_id)

    def close(self) -> None:
        self.store.close()

"""The relay store inside a router (`exactmesh router --relay-store DIR`, docs/relay.md):
`router.ports.RelayStorePort` over `relay.store.RelayStore`.

The engine asks it to hold the copies owed to warm subscribers that are away (`Hold`); the
node loop commits what one pass asked for in one transaction and tells the engine (`Held`),
which may then answer MQTT publishers and give their windows back. Rows are keyed by the
subscriber's key and the delivery id; the engine drops them when it forgets the message.
"""

from __future__ import annotations

import logging
from typing import Any

from relay.store import Inbound, RelayStore

log = logging.getLogger("exactmesh.relay")


class RouterRelayStore:
    def __init__(self, directory: str, router_id: str) -> None:
        self.store = RelayStore(directory, router_id)
        left, size = self.store.held()
        if left:
            # A restarted router has no records for these: it cannot tell their publishers
            # or resume them yet (docs/relay.md, "What is built"), so they are dropped.
            log.warning("relay store %s: %d held copies (%d bytes) from an earlier run are "
                        "dropped: this version does not restore them after a restart",
                        self.store.db.path, left, size)
            self.store.db.conn.execute("DELETE FROM inbound")

    def hold(self, holds: list[Any], forgets: list[str]) -> None:
        with self.store.batch():
            for h in holds:
                self.store.hold(h.key, [Inbound(h.msg_id, h.address, h.payload)])
            if forgets:
                self.store.forget_copies(forgets)

    def payload(self, msg_id: str) -> bytes | None:
        return self.store.payload(msg_id)

    def close(self) -> None:
        self.store.close()

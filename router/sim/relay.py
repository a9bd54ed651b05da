"""The relay store a simulated router runs with `Params.relay` (docs/relay.md): the node loop's
`router.ports.RelayStorePort`, in memory.

A real store is on disk and outlives its router; here it outlives the `SimRouter` too (the
world keeps one per router id). A restarted simulated router does not restore from it yet
(the runtime does: `router.runtime.node.Node._restore`): it starts with an empty store, as a
router whose disk was lost would, and the mesh must survive that too. The publishers the
simulation has are AMQP ones (an MQTT publisher would be answered on stored copies, which the
checker does not model yet): they still hold their messages and resend them.
"""

from __future__ import annotations

from typing import Any


class SimStore:
    def __init__(self) -> None:
        # Who holds a copy of each delivery, and its body (the same for every holder).
        self.holders: dict[str, set[str]] = {}
        self.bodies: dict[str, bytes] = {}
        self.commits = 0
        self.stored = 0

    def hold(self, holds: list[Any], forgets: list[str]) -> None:
        self.commits += 1
        for h in holds:
            keys = self.holders.setdefault(h.msg_id, set())
            if h.key not in keys:
                keys.add(h.key)
                self.bodies[h.msg_id] = h.payload
                self.stored += 1
        for msg_id in forgets:
            self.holders.pop(msg_id, None)
            self.bodies.pop(msg_id, None)

    def payload(self, msg_id: str) -> bytes | None:
        return self.bodies.get(msg_id)

    def restarted(self) -> None:
        """The router came back: it restores nothing yet (see the module's text)."""
        self.holders.clear()
        self.bodies.clear()

    # MQTT sessions: the simulated devices never ask for persistent ones.
    def sessions(self) -> list[Any]:
        return []

    def save_session(self, client_id: str, expiry: float, subs: dict[str, int]) -> None:
        raise AssertionError("a simulated MQTT session asked to be kept: not modelled")

    def session_away(self, client_id: str) -> None:
        raise AssertionError("a simulated MQTT session asked to be kept: not modelled")

    def drop_session(self, client_id: str) -> None:
        raise AssertionError("a simulated MQTT session asked to be kept: not modelled")

    def restorable(self) -> list[tuple[str, str, str, str]]:
        return []

    def drop_copies(self, items: list[tuple[str, str]]) -> None:
        for key, msg_id in items:
            keys = self.holders.get(msg_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.holders[msg_id]
                    del self.bodies[msg_id]

"""The relay store a simulated router runs with `Params.relay` (docs/relay.md): the node loop's
`router.ports.RelayStorePort`, in memory.

A real store is on disk and outlives its router; here it outlives the `SimRouter` too (the
world keeps one per router id). What the restarted router does with it is what the runtime
does for copies it cannot restore: the simulated clients are AMQP subscribers and MQTT devices
without persistent sessions, and only persistent MQTT sessions are restored, so a restart
drops every copy the last incarnation stored (`router.runtime.relay_store`,
`drop_unrestorable`). The publishers the simulation has are AMQP ones (an MQTT publisher
would be answered on stored copies, which the checker does not model yet): they still hold
their messages and resend them.
"""

from __future__ import annotations

from typing import Any


class SimStore:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], bytes] = {}  # (subscriber key, delivery id) -> body
        self.bodies: dict[str, int] = {}  # delivery id -> how many rows hold it
        self.commits = 0
        self.stored = 0

    def hold(self, holds: list[Any], forgets: list[str]) -> None:
        self.commits += 1
        for h in holds:
            key = (h.key, h.msg_id)
            if key not in self.rows:
                self.rows[key] = h.payload
                self.bodies[h.msg_id] = self.bodies.get(h.msg_id, 0) + 1
                self.stored += 1
        if forgets:
            gone = set(forgets)
            for key in [k for k in self.rows if k[1] in gone]:
                del self.rows[key]
            for msg_id in gone:
                self.bodies.pop(msg_id, None)

    def payload(self, msg_id: str) -> bytes | None:
        if msg_id not in self.bodies:
            return None
        return next(body for (_, d), body in self.rows.items() if d == msg_id)

    def restarted(self) -> None:
        """The router came back: nothing restores these copies (see the module's text)."""
        self.rows.clear()
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
        for key in items:
            if self.rows.pop(key, None) is not None:
                self.bodies[key[1]] -= 1
                if not self.bodies[key[1]]:
                    del self.bodies[key[1]]

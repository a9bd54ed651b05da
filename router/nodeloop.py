"""What a router does after every event, without IO: the node's loop, shared by the trio
runtime (`router.runtime.node.Node`) and the simulator (`router.sim.world`), so that the
simulator runs this code rather than a copy of it.

After every event the engine handled (a frame from a client or a peer, a link up or down, a
deadline passing), `NodeLoop.flush` takes the engine's actions in order and applies each
one: a mesh action goes to the mesh node (`MeshPort.apply`), any other to the connection that
registered the link it names (`EdgeConnection.apply`). Applying one can make more (closing a
link detaches it), so it keeps going until there are none, sending the frames the mesh
produced after each batch. A timer wake-up is `tick`: the engine's deadlines, then the mesh
node's, then a flush.

No clock, no sockets, no trio: the caller passes `now`, and asks `next_deadline` when to tick
again. The runtime sleeps until then; the simulator schedules an event at that time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from router.core.actions import MESH_ACTIONS, Forward, Hold, Send, Unhold
from router.core.events import Held, TimePassed

if TYPE_CHECKING:
    from router.core.engine import Engine
    from router.ports import EdgeConnection, MeshPort, RelayStorePort

MESH_TYPES = frozenset(MESH_ACTIONS)


def _drop(action: Any) -> None:
    """An action for a link no connection holds any more: it went away meanwhile."""


class NodeLoop:
    """A router's engine, the connections that registered its links, and its mesh node."""

    def __init__(self, engine: Engine, *, unrouted: Callable[[Any], None] = _drop) -> None:
        self.engine = engine
        self.mesh: MeshPort | None = None  # the mesh node, when the router has peers
        # The relay store, when the router has one (`--relay-store`, docs/relay.md).
        self.store: RelayStorePort | None = None
        self._mesh_send: Callable[[], None] | None = None
        self._links: dict[int, tuple[EdgeConnection, Any]] = {}
        self._next_link = 0
        # Called with an action for a link nobody registered (or forgot): the runtime drops
        # it (the connection closed meanwhile); the simulator checks that it may.
        self._unrouted = unrouted

    # ---------------------------------------------------------------- registration

    def attach_mesh(self, mesh: MeshPort, send: Callable[[], None]) -> None:
        """The mesh node, and `send`, which sends the frames it produced."""
        self.mesh = mesh
        self._mesh_send = send

    def new_link_id(self) -> int:
        self._next_link += 1
        return self._next_link

    def register_link(self, link_id: int, conn: EdgeConnection, link_state: Any) -> None:
        """The engine's actions on `link_id` go to `conn.apply(link_state, action)`."""
        self._links[link_id] = (conn, link_state)

    def forget_link(self, link_id: int) -> None:
        self._links.pop(link_id, None)

    def link(self, link_id: int) -> tuple[EdgeConnection, Any] | None:
        """The connection and its state for a link, if one registered it."""
        return self._links.get(link_id)

    # ---------------------------------------------------------------- after every event

    def mesh_output(self) -> None:
        """Send the frames the mesh node produced. Without peers there are none."""
        if self._mesh_send is not None:
            self._mesh_send()

    def flush(self, now: float) -> float | None:
        """Apply the engine's actions, in order, where they belong, until there are none.
        Returns a deadline an event set without any action (a warm subscriber went away),
        if there is one, so the runtime can wake its timer earlier."""
        engine, links, mesh_types = self.engine, self._links, MESH_TYPES
        while actions := engine.take_actions():
            mesh = self.mesh
            holds: list[Hold] = []
            forgets: list[str] = []
            for action in actions:
                kind = type(action)
                if kind is Hold:
                    if not action.payload:  # type: ignore[union-attr]
                        # Another copy of a released record: its body is in the store already.
                        self._from_store(action)
                    holds.append(action)  # type: ignore[arg-type]
                    continue
                if kind is Unhold:
                    forgets.append(action.msg_id)  # type: ignore[union-attr]
                    continue
                if (kind is Send or kind is Forward) and not action.payload:  # type: ignore[union-attr]
                    self._from_store(action)  # IN_STORE: no AMQP message encodes empty
                if kind in mesh_types:
                    if mesh is not None:
                        mesh.apply(action, now)
                    continue
                entry = links.get(action.link)  # type: ignore[union-attr]
                if entry is not None:
                    entry[0].apply(entry[1], action)
                else:
                    self._unrouted(action)
            if mesh is not None:
                self.mesh_output()
            if holds or forgets:
                self._store(holds, forgets, now)
        return engine.take_new_deadline()

    def _store(self, holds: list[Hold], forgets: list[str], now: float) -> None:
        """One commit for what one pass asked of the relay store; then the engine hears
        which copies are durable (which may answer publishers: the loop goes on)."""
        assert self.store is not None, "the engine asked for a relay store it was not given"
        self.store.hold(holds, forgets)
        if holds:
            self.engine.handle(Held(now, [(h.sid, h.seq) for h in holds]))

    def _from_store(self, action: Any) -> None:
        """A released record's copy, resend or further hold: its body is in the relay store
        only."""
        payload = self.store.payload(action.tag.decode() if type(action) is Send
                                     else action.msg_id) if self.store else None
        if payload is None:
            raise RuntimeError(f"the relay store lost the body of {action!r}")
        action.payload = payload

    def tick(self, now: float) -> None:
        """A timer wake-up: whatever is due in the engine, then in the mesh node; then the
        actions that made."""
        self.engine.handle(TimePassed(now))
        if self.mesh is not None:
            self.mesh.tick(now)
        self.flush(now)

    def next_deadline(self) -> float | None:
        """When `tick` is due next (None: nothing is waiting for time to pass)."""
        deadlines = [d for d in (self.engine.next_deadline(),
                                 self.mesh.next_deadline() if self.mesh is not None else None)
                     if d is not None]
        return min(deadlines) if deadlines else None

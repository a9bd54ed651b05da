"""The runtime's ports: all that an edge (amqp_edge, mqtt_edge) or the mesh may use of the
router runtime, as Protocols. `router.runtime.node.Node` implements `RuntimePort`;
`mesh.meshnode.MeshNode` implements `MeshPort`.

Edges and the mesh type their `node` against `RuntimePort` and never import
`router.runtime` (the import-linter contracts in pyproject.toml hold them to that): the
runtime imports them to start them, so an import back would be a cycle. What an edge or the
mesh needs to leave with the runtime goes through an explicit registration here, never an
attribute set on the node or a method of it replaced:

- a connection's links: `new_link_id`, `register_link`, `forget_link` (the runtime applies
  the engine's actions on them in `flush`, through `EdgeConnection.apply`);
- the mesh, when the router has peers: `attach_mesh(mesh, send)`, from `mesh.runtime`;
- an edge's per-router state lives with the edge's server (`serve_mqtt` keeps the MQTT
  sessions and retained store), not on the node; the MQTT retained store reaches the other
  routers through `MeshPort.attach_retained`;
- a delayed call (the MQTT will delay): `call_later`.

This module lives beside `router.config`, outside `router.runtime`, so that importing it
neither starts the runtime package (its compiled-module guard) nor makes the runtime package
and the edges import each other. It imports nothing at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from router.config import RouterConfig
    from router.core.engine import Engine
    from router.security.policy import Policy

# A mesh item sharing an MQTT retained message (mqtt_edge/retained.py, `Retained.wire`).
RetainedItem = list[Any]


class EdgeConnection(Protocol):
    """What the runtime calls on whatever owns links (an edge's connection, a will sender)."""

    def apply(self, link_state: Any, action: Any) -> None: ...
    def shutdown(self, description: str) -> None: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class MeshPort(Protocol):
    """What the runtime and the edges use of the mesh node, once it is attached."""

    def apply(self, action: Any, now: float) -> None:
        """An engine action for the mesh (`router.core.actions.MESH_ACTIONS`)."""

    def tick(self, now: float) -> None:
        """Whatever is due by `now`: gossip, retransmissions, giving up on a router."""

    def next_deadline(self) -> float | None:
        """When `tick` is due next."""

    def share_retained(self, item: RetainedItem, now: float) -> None:
        """Send an MQTT retained message (or its clearing) to every reachable router."""

    def attach_retained(self, on_item: Callable[[str, RetainedItem], Any],
                        source: Callable[[str, set[str]], list[RetainedItem]]) -> None:
        """Register the retained store: `on_item(src_router, item)` for each entry another
        router shares, `source(router, reachable)` for the entries to send a router that
        just became reachable."""


class RelayStorePort(Protocol):
    """The router's relay store (`--relay-store`, docs/relay.md), as the node loop uses it;
    `router.runtime.relay_store.RouterRelayStore` implements it over `relay.store`."""

    def hold(self, holds: list[Any], forgets: list[str]) -> None:
        """Commit the copies of these `Hold` actions and drop the copies of the delivery ids
        in `forgets`, in one transaction; returns once it is on disk."""

    def payload(self, msg_id: str) -> bytes | None:
        """A held message's body (a released record has none in memory)."""

    # Persistent MQTT sessions, so that a restarted router still has them (the MQTT edge).
    def sessions(self) -> list[tuple[str, float, float | None, dict[str, int]]]:
        """(client id, expiry s, seconds left while away or None, filter -> QoS) each."""

    def save_session(self, client_id: str, expiry: float, subs: dict[str, int]) -> None: ...
    def session_away(self, client_id: str) -> None: ...
    def drop_session(self, client_id: str) -> None: ...

    # Durable AMQP subscriber links, kept the same way (the AMQP edge).
    def keep_link(self, key: str, container: str, name: str, topic_filter: str,
                  presettled: bool, timeout: float) -> None: ...
    def link_away(self, key: str) -> None: ...
    def drop_link(self, key: str) -> None: ...

    def durable_links(self) -> list[tuple[str, str, str, bool, float]]:
        """(container, link name, filter, presettled, seconds left) each."""

    # Reply-name substitution (amqp_edge/replies.py).
    def surrogate(self, client: str, original: str, prefix: str) -> str: ...
    def original(self, surrogate: str) -> tuple[str, str] | None: ...

    def restorable(self) -> list[tuple[str, str, str, str]]:
        """Copies held from before a restart: the engine's `Restored` items."""

    def drop_copies(self, items: list[tuple[str, str]]) -> None:
        """Drop these (subscriber key, delivery id) copies: nobody is owed them now."""


class RuntimePort(Protocol):
    """The router runtime as an edge or the mesh sees it."""

    config: RouterConfig
    engine: Engine  # the delivery engine: its public API only
    connections: set[Any]  # the open client connections (`EdgeConnection`s), for shutdown
    stopping: bool  # shutting down: new connections are closed at once
    mesh: MeshPort | None  # the mesh node, when the router has peers (`attach_mesh`)
    relay_store: RelayStorePort | None  # `--relay-store` (docs/relay.md), else None
    policy: Policy  # who may connect, publish, subscribe and read (docs/security.md)

    def now(self) -> float:
        """The runtime's clock (monotonic seconds), the `now` every engine call takes."""

    def new_link_id(self) -> int: ...

    def register_link(self, link_id: int, conn: EdgeConnection, link_state: Any) -> None:
        """The engine's actions on `link_id` go to `conn.apply(link_state, action)`."""

    def forget_link(self, link_id: int) -> None: ...

    def flush(self) -> None:
        """Apply the engine's pending actions (call after every engine call)."""

    def mesh_output(self) -> None:
        """Send the frames the mesh node produced (nothing without a mesh)."""

    def attach_mesh(self, mesh: MeshPort, send: Callable[[], None]) -> None:
        """The mesh runtime registers the mesh node, and `send`, which sends the frames it
        produced (`mesh_output` calls it)."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> Cancellable:
        """Run `fn` after `delay` seconds, in the runtime's thread, unless cancelled first."""

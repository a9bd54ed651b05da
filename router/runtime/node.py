"""The router node: one delivery engine, the edges that feed it, and one trio task tree.

What the node does after every event (apply the engine's actions on the links and the mesh
that registered for them) is `router.nodeloop.NodeLoop`, sans-IO, which the simulator runs
too. The node adds the trio parts: the listeners; the engine's timer, which sleeps until the
engine's next deadline (a ttl, a warm subscriber's or a lost publisher's time to come back)
and is woken earlier when an event sets an earlier one; and the orderly shutdown on SIGTERM.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from router import accel
from router.config import ConfigError, ListenError, RouterConfig
from router.core.engine import Engine, EngineConfig
from router.core.events import Restored, TimePassed
from router.nodeloop import NodeLoop
from router.ports import EdgeConnection, MeshPort
from router.runtime.relay_store import RouterRelayStore
from router.security.policy import Policy, PolicyError

log = logging.getLogger("exactmesh.router")


class Node:
    """Implements `router.ports.RuntimePort`: all that edges and the mesh use of it."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.engine = Engine(
            EngineConfig(
                router_id=config.id,
                no_subscribers=config.no_subscribers,
                max_delivery_attempts=config.max_delivery_attempts,
                publisher_window=config.publisher_window,
                reconnect_timeout=config.reconnect_timeout,
                resume_timeout=config.resume_timeout,
                relay_store=bool(config.relay_store),
                relay_waiting_limit=config.relay_waiting_limit,
                topic_counters=config.topic_metrics,
            )
        )
        self.loop = NodeLoop(self.engine)  # links, the mesh, and applying actions there
        # `--relay-store` (docs/relay.md): the node loop writes copies there, the MQTT edge
        # its persistent sessions (router.ports.RuntimePort.relay_store).
        self.relay_store: RouterRelayStore | None = None
        if config.relay_store:
            self.relay_store = RouterRelayStore(config.relay_store, config.id)
            self.loop.store = self.relay_store
        # Who may connect, publish, subscribe and read (docs/security.md). Raises PolicyError
        # for a password or ACL file that cannot be used.
        self.policy = Policy(config.password_file, config.acl_file, config.allow_anonymous)
        # The client TLS listeners' context: SIGHUP loads new certificates into it, which
        # new connections then use (docs/security.md, rotation).
        self.client_tls = config.client_tls()
        self.connections: set[EdgeConnection] = set()
        self.stopping = False
        self.mqtt_state: Any = None  # the MQTT edge's sessions and retained store, if any
        self._timer_scope: trio.CancelScope | None = None  # the timer's sleep, while it sleeps

    # ---------------------------------------------------------------- ports (router/ports.py)

    @property
    def mesh(self) -> MeshPort | None:
        """The MeshNode, when this router has peers."""
        return self.loop.mesh

    def attach_mesh(self, mesh: MeshPort, send: Callable[[], None]) -> None:
        """The mesh runtime registers the mesh node and its frame sender."""
        self.loop.attach_mesh(mesh, send)

    def mesh_output(self) -> None:
        """Send the frames the mesh layer produced. Without peers there are none."""
        self.loop.mesh_output()

    def call_later(self, delay: float, fn: Callable[[], None]) -> trio.CancelScope:
        """Run `fn` after `delay` seconds (a trio system task); returns its CancelScope."""
        scope = trio.CancelScope()

        async def later() -> None:
            with scope:
                await trio.sleep(delay)
                try:
                    fn()
                except Exception:
                    log.exception("router %s: a delayed call failed", self.config.id)

        trio.lowlevel.spawn_system_task(later)
        return scope

    def new_link_id(self) -> int:
        return self.loop.new_link_id()

    def register_link(self, link_id: int, conn: EdgeConnection, link_state: Any) -> None:
        self.loop.register_link(link_id, conn, link_state)

    def forget_link(self, link_id: int) -> None:
        self.loop.forget_link(link_id)

    @staticmethod
    def now() -> float:
        return trio.current_time()

    def flush(self) -> None:
        """Apply the engine's actions where they belong (`NodeLoop.flush`), and wake the
        timer earlier if an event set an earlier deadline."""
        deadline = self.loop.flush(trio.current_time())
        scope = self._timer_scope
        if deadline is not None and scope is not None and deadline < scope.deadline:
            scope.deadline = deadline  # wake the timer earlier

    # ---------------------------------------------------------------- running

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from amqp_edge.server import serve_amqp  # the edge depends on the node, not back

        async with trio.open_nursery() as nursery:
            runtime = None
            if self.config.peered:
                from mesh.runtime import MeshRuntime

                runtime = MeshRuntime(self, self.config)
            mqtt_state = self._restore()  # before any peer can resend to what it restores
            self.mqtt_state = mqtt_state  # (read by GET /metrics; None without MQTT)
            if runtime is not None:
                await nursery.start(runtime.run)
            listeners = await _listening(nursery, "amqp", "AMQP", serve_amqp, self,
                                         self.config.amqp)
            http_note = ""
            if self.config.amqps is not None:  # AMQP over TLS (docs/security.md)
                tls = await _listening(nursery, "amqps", "AMQP over TLS",
                                       partial(serve_amqp, tls=self.client_tls), self,
                                       self.config.amqps)
                at = tls[0].transport_listener.socket.getsockname()[:2]
                http_note += ", amqps {}:{}".format(*at)
            if self.config.http is not None:
                from .status import serve_status

                http = await _listening(nursery, "http", "HTTP status", serve_status, self,
                                        self.config.http)
                http_note += ", http {}:{}".format(*http[0].socket.getsockname()[:2])
            if self.config.https is not None:
                from .status import serve_status

                https = await _listening(nursery, "https", "HTTPS status",
                                         partial(serve_status, tls=self.client_tls), self,
                                         self.config.https)
                at = https[0].transport_listener.socket.getsockname()[:2]
                http_note += ", https {}:{}".format(*at)
            if self.config.mqtt is not None:  # the MQTT edge (mqtt_edge/server.py)
                from mqtt_edge.server import serve_mqtt

                mqtt = await _listening(nursery, "mqtt", "MQTT",
                                        partial(serve_mqtt, state=mqtt_state), self,
                                        self.config.mqtt)
                http_note += ", mqtt {}:{}".format(*mqtt[0].socket.getsockname()[:2])
            if self.config.mqtts is not None:  # the same sessions, over TLS
                from mqtt_edge.server import serve_mqtt

                mqtts = await _listening(nursery, "mqtts", "MQTT over TLS",
                                         partial(serve_mqtt, state=mqtt_state,
                                                 tls=self.client_tls), self, self.config.mqtts)
                at = mqtts[0].transport_listener.socket.getsockname()[:2]
                http_note += ", mqtts {}:{}".format(*at)
            nursery.start_soon(self._timer)
            nursery.start_soon(self._watch_stuck)
            addr = listeners[0].socket.getsockname()
            cfg = self.config
            mesh_note = f", mesh {cfg.listen}" if cfg.listen else ""
            if cfg.uplinks:  # a relay (router/relay_cli.py)
                mesh_note += ", uplinks " + ",".join(map(str, cfg.uplinks))
            log.info("exactmesh %s %s ready: amqp %s:%s%s%s",
                     "relay" if cfg.uplinks else "router", cfg.id, addr[0], addr[1],
                     mesh_note, http_note)
            log.info("router %s: per-message modules %s", self.config.id, accel.describe())
            task_status.started(addr)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT,
                                           signal.SIGHUP) as signals:
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        self._reload_policy()
                        continue
                    log.info("router %s: %s received, shutting down",
                             self.config.id, signal.Signals(signum).name)
                    break
            await self.shutdown()
            if runtime is not None:
                runtime.close(f"router {self.config.id} is shutting down")
            nursery.cancel_scope.cancel()

    def _reload_policy(self) -> None:
        """SIGHUP: read the password and ACL files again, and the client TLS certificates; a
        file that cannot be used is refused, naming it, and what is in force stays."""
        try:
            self.policy.reload()
        except PolicyError as err:
            log.error("router %s: SIGHUP: %s; the rules in force stay", self.config.id, err)
        else:
            log.info("router %s: SIGHUP: password and ACL files read again", self.config.id)
        if self.client_tls is not None:
            try:
                self.config.load_client_tls(self.client_tls)
            except ConfigError as err:
                log.error("router %s: SIGHUP: %s; the certificate in force stays",
                          self.config.id, err)
            else:
                log.info("router %s: SIGHUP: client TLS certificate read again",
                         self.config.id)

    def _restore(self) -> Any:
        """With a relay store: the warm subscribers of the last run come back, away (durable
        AMQP links, persistent MQTT sessions), then the copies stored for them. Returns the
        MQTT edge's state (None without --mqtt)."""
        from amqp_edge.persistence import restore_links

        state = None
        if self.config.mqtt is not None or self.config.mqtts is not None:
            from mqtt_edge.server import start_state

            state = start_state(self)
        if self.relay_store is None:
            return state
        restore_links(self)
        copies = self.relay_store.restorable()
        unowed = self.engine.handle(Restored(self.now(), copies))
        if unowed:
            self.relay_store.drop_copies(unowed)
        self.flush()
        if copies:
            log.info("relay store: %d stored message copies restored (%d no longer owed, "
                     "dropped)", len(copies) - len(unowed), len(unowed))
        return state

    async def shutdown(self, grace: float = 3.0) -> None:
        """Close every client's links and connection saying why, and give the writers a
        moment to send those frames."""
        self.stopping = True
        reason = (f"router {self.config.id} is shutting down; "
                  "reattach to another router of the mesh")
        for conn in list(self.connections):
            conn.shutdown(reason)
        with trio.move_on_after(grace):
            while self.connections:
                await trio.sleep(0.01)

    async def _watch_stuck(self) -> None:
        """Log each delivery undecided longer than `stuck-after`, once, naming who it waits
        for (a look every half of that: no work per message)."""
        after = self.config.stuck_after
        warned: set[int] = set()
        while True:
            await trio.sleep(max(0.25, after / 2))
            stuck = self.engine.stuck(after, trio.current_time())
            for rec in stuck:
                if rec.seq not in warned:
                    pending = rec.status().get("pending", [])
                    log.warning("router %s: delivery %s (topic %s) undecided for %.1f s; "
                                "waiting for %s", self.config.id, rec.id, rec.address,
                                trio.current_time() - rec.born,
                                ", ".join(map(str, pending)) or "nobody named yet")
            warned = {rec.seq for rec in stuck}

    async def _timer(self) -> None:
        """Sleep until the engine's next deadline; `flush` moves the wake-up earlier when an
        event set an earlier one. No polling: an idle router does not wake."""
        engine = self.engine
        while True:
            engine.take_new_deadline()  # what it says is in next_deadline() from here on
            deadline = engine.next_deadline()
            now = trio.current_time()
            if deadline is not None and deadline <= now:
                engine.handle(TimePassed(now))
                self.flush()
                continue
            with trio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
                self._timer_scope = scope
                try:
                    await trio.sleep_forever()
                finally:
                    self._timer_scope = None


async def _listening(nursery: trio.Nursery, option: str, what: str, serve: Any,
                     *args: Any) -> Any:
    """Start a listening service; a bind failure names the option (one line, exit 2)."""
    try:
        return await nursery.start(serve, *args)
    except OSError as err:
        raise ListenError(option, args[-1], what, err) from err

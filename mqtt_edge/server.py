"""The MQTT listener, under trio (modelled on `amqp_edge.server`). The protocol lives in
`mqtt_edge.session`; here are only sockets, TCP_NODELAY, keep-alive timing and back-pressure:
a connection is not read while it holds PUBLISHes waiting for the engine's publisher credit.

One task reads every MQTT connection of the router: the reactor (`mqtt_edge.reactor`, which
holds the synchronous part and is compiled with the per-message modules). The sockets are
registered once in an epoll object of its own, which trio waits on; each round reads every
connection that has input and then writes what the round produced with one os.write per
connection. Measured against a reader task per connection (QoS 2, paho clients, compiled
build, A/B runs): 3% less CPU per message 1 -> 1 and a fifth less 1 -> 4, with throughput up
8% and 20%: a PUBREC from a subscriber and the PUBREL from a publisher that arrive together
cost one trio wake-up and one write to the publisher, not two of each, and trio does not
re-arm each socket (epoll_ctl) per wait.

Each connection keeps a writer task, which sends only what its socket would not take and
the output made outside a round (timers, other edges, the mesh), and a keep-alive watchdog.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import ssl
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from router.config import HostPort
from router.listeners import open_ssl_over_tcp_listeners, open_tcp_listeners
from router.security.gate import admitted, certificate_user, tls_handshake

from .persistence import restore_sessions
from .reactor import READ_SIZE, Output, Reactor
from .session import MqttConnection, MqttState

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.mqtt")

CLOSE_GRACE = 1.0  # seconds a closing connection gets to send its last packets


def start_state(node: RuntimePort) -> MqttState:
    """The edge's state for a router starting: made once its mesh is attached (so that
    retained messages other routers share are kept), with a relay store's persistent
    sessions restored."""
    state = MqttState(node)
    restore_sessions(node, state)
    return state


async def serve_mqtt(
    node: RuntimePort, where: HostPort, *, state: MqttState | None = None,
    tls: ssl.SSLContext | None = None, task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MQTT clients at `where`; over TLS with the server context `tls` (`--mqtts`).
    `state` is the edge's per-router state (sessions, retained store), kept for as long as
    the edge serves and shared by its listeners; the router makes it before its mesh links
    start, with the persistent sessions of its last run (`start_state`)."""
    state = state or MqttState(node)
    if tls is not None:
        # TLS connections are read by a task each (trio's SSLStream), not by the reactor,
        # which reads plain sockets: TLS records must be decrypted before they are bytes.
        listeners: Any = await open_ssl_over_tcp_listeners(
            where.port, tls, where.host)
        task_status.started(listeners)
        await trio.serve_listeners(partial(_serve_tls_connection, node, state), listeners)
        return
    listeners = await open_tcp_listeners(where.port, where.host)
    reactor = Reactor(node.now)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_reactor, reactor)
            task_status.started(listeners)
            await trio.serve_listeners(partial(_serve_connection, node, state, reactor), listeners)
    finally:
        reactor.ep.close()


class _Wake:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


async def _run_reactor(reactor: Reactor) -> None:
    """The reactor's task: wait until a connection has input, then read while it lasts."""
    ep = reactor.ep
    while True:
        await trio.lowlevel.wait_readable(ep)
        reactor.drain()


async def _serve_connection(node: RuntimePort, state: MqttState, reactor: Reactor,
                            stream: trio.SocketStream) -> None:
    try:
        peer = "{}:{}".format(*stream.socket.getpeername()[:2])
    except OSError:
        peer = "?"
    if not admitted(node, peer, log):
        await trio.aclose_forcefully(stream)
        return
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    conn = MqttConnection(node, peer, state)
    wake = _Wake()
    fd = stream.socket.fileno()
    out = Output(conn, fd, reactor.cycle, wake)
    conn.on_output = out.on_output
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    node.connections.add(conn)
    reading = reactor.add(conn, fd)
    conn.on_resume = reading.resume
    moved = _Wake()
    conn.on_deadline = moved.set
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope, out)
            nursery.start_soon(_watchdog, conn, moved)
            if conn.closing:
                reading.finish()
            await reading.done.wait()
            wake.set()
            await trio.sleep(CLOSE_GRACE)  # the writer cancels us sooner once it is done
            nursery.cancel_scope.cancel()
    except Exception:  # one connection's failure must never take the router down
        log.exception("mqtt connection %s failed; closing it", peer)
        try:
            conn.abort("internal error in the router; see its log")
        except Exception:
            log.exception("mqtt connection %s: cleanup failed", peer)
    finally:
        reactor.remove(reading)  # before the socket closes: its number may be reused
        node.connections.discard(conn)
        conn.closed()
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await stream.aclose()


class _Writing:
    """What `_writer` marks while it sends (the reactor's `Output` for plain sockets)."""

    writing = False


async def _serve_tls_connection(node: RuntimePort, state: MqttState,
                                stream: trio.SSLStream) -> None:
    try:
        peer = "{}:{}".format(*stream.transport_stream.socket.getpeername()[:2])
    except OSError:
        peer = "?"
    if not admitted(node, peer, log) or not await tls_handshake(stream, peer, log):
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await trio.aclose_forcefully(stream)
        return
    conn = MqttConnection(node, peer, state)
    conn.cert_user = certificate_user(stream)
    wake, resumed, moved = _Wake(), _Wake(), _Wake()
    conn.on_output = wake.set
    conn.on_resume = resumed.set
    conn.on_deadline = moved.set
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    node.connections.add(conn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope, _Writing())
            nursery.start_soon(_watchdog, conn, moved)
            await _tls_reader(conn, stream, resumed)
            wake.set()
            await trio.sleep(CLOSE_GRACE)  # the writer cancels us sooner once it is done
            nursery.cancel_scope.cancel()
    except Exception:  # one connection's failure must never take the router down
        log.exception("mqtt connection %s failed; closing it", peer)
        with contextlib.suppress(Exception):
            conn.abort("internal error in the router; see its log")
    finally:
        node.connections.discard(conn)
        conn.closed()
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await stream.aclose()


async def _tls_reader(conn: MqttConnection, stream: trio.SSLStream, resumed: _Wake) -> None:
    """Read a TLS connection until it ends; not while it holds PUBLISHes waiting for
    publisher credit (back-pressure, as the reactor does for plain sockets)."""
    while not conn.closing:
        if conn.paused:
            await resumed.wait()
            continue
        try:
            data = await stream.receive_some(READ_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        if not data:
            return
        conn.receive(data, trio.current_time())


async def _watchdog(conn: MqttConnection, moved: _Wake) -> None:
    """Closes a connection silent for 1.5 x its keep-alive (or without CONNECT in time).

    It sleeps until the deadline it read, and no more often: a packet heard moves the
    deadline later (the watchdog then finds it not yet due and sleeps again), and CONNECT,
    the one change that can move it earlier, wakes it (`moved`). An idle device costs one
    wake-up per 1.5 x its keep-alive."""
    while not conn.closing:
        d = conn.keepalive_deadline()  # None: keep-alive 0, nothing to watch
        if d is not None and trio.current_time() >= d:
            conn.keepalive_expired()
            return
        with trio.move_on_at(math.inf if d is None else d):
            await moved.wait()


async def _writer(
    conn: MqttConnection, stream: trio.abc.Stream, wake: _Wake, scope: trio.CancelScope,
    out: Output | _Writing,
) -> None:
    try:
        while True:
            data = conn.take_output()
            if data:
                out.writing = True
                try:
                    await stream.send_all(data)
                finally:
                    out.writing = False
                if not conn.out:
                    conn.output_drained()
                continue
            if conn.closing:
                break
            await wake.wait()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel()

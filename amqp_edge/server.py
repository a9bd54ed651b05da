"""The AMQP listener: one reader and one writer task per client connection, under trio.

trio lets exactly one task send on a stream, so each connection has a writer task that the
node wakes after it applied actions there; the reader pushes bytes into proton and processes
the events. All events are drained before output is written once: flushing per event nearly
doubled CPU. trio's SocketStream sets TCP_NODELAY itself.
"""

from __future__ import annotations

import logging
import math
import ssl
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from router.config import HostPort
from router.security.tls import tls_handshake

from .connection import AmqpConnection

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.amqp")

READ_SIZE = 64 * 1024
CLOSE_GRACE = 2.0  # seconds a closing connection gets to send its last frames


async def serve_amqp(
    node: RuntimePort, where: HostPort, *, tls: ssl.SSLContext | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve AMQP clients at `where`; over TLS with the server context `tls` (`--amqps`)."""
    listeners: Any
    if tls is None:
        listeners = await trio.open_tcp_listeners(where.port, host=where.host)
    else:
        listeners = await trio.open_ssl_over_tcp_listeners(where.port, tls, host=where.host)
    task_status.started(listeners)
    await trio.serve_listeners(partial(_serve_connection, node), listeners)


def _socket(stream: trio.abc.Stream) -> Any:
    return stream.transport_stream.socket if isinstance(stream, trio.SSLStream) \
        else stream.socket  # type: ignore[attr-defined]


async def _serve_connection(node: RuntimePort, stream: trio.abc.Stream) -> None:
    try:
        peer = "{}:{}".format(*_socket(stream).getpeername()[:2])
    except OSError:
        peer = "?"
    if isinstance(stream, trio.SSLStream) and not await tls_handshake(stream, peer, log):
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await trio.aclose_forcefully(stream)
        return
    conn = AmqpConnection(node, peer)
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    wake = _Wake()
    conn.on_output = wake.set
    node.connections.add(conn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope)
            await _reader(conn, stream)
            # The client closed its side: let the writer send what is left, then stop.
            wake.set()
            await trio.sleep(CLOSE_GRACE)
            nursery.cancel_scope.cancel()
    except Exception:  # one connection's failure must never take the router down
        log.exception("connection %s failed; closing it", peer)
        try:
            conn.abort("internal error in the router; see its log")
        except Exception:
            log.exception("connection %s: cleanup failed", peer)
    finally:
        node.connections.discard(conn)
        conn.closed()
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await stream.aclose()


async def _reader(conn: AmqpConnection, stream: trio.abc.Stream) -> None:
    transport = conn.transport
    while True:
        cap = transport.capacity()
        if cap < 0:
            return  # proton closed the input side (protocol error or close)
        if cap == 0:
            await trio.sleep(0)  # output must drain first
            continue
        try:
            data = await stream.receive_some(min(cap, READ_SIZE))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            conn.peer_eof = True
            transport.close_tail()
            conn.process()
            return
        transport.push(data)
        conn.process()


class _Wake:
    """A resettable wake-up flag for the writer task."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._event.wait()
        self._event = trio.Event()


async def _writer(
    conn: AmqpConnection, stream: trio.abc.Stream, wake: _Wake, scope: trio.CancelScope
) -> None:
    transport = conn.transport
    next_tick = 0.0
    try:
        while True:
            now = trio.current_time()
            if next_tick and now >= next_tick:
                # proton's idle-timeout bookkeeping: heartbeats out, dead peers detected
                next_tick = transport.tick(now)
                conn.process()
            pending = transport.pending()
            if pending < 0:
                break  # output side closed: everything, including close frames, is out
            if pending:
                await stream.send_all(transport.peek(pending))
                transport.pop(pending)
                continue
            if not next_tick:
                next_tick = transport.tick(now) or 0.0
            await wake.wait(next_tick or math.inf)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away; the reader sees it too
    scope.cancel()

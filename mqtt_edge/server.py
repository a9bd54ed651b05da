"""The MQTT listener: a reader, a writer and a keep-alive watchdog task per client connection,
under trio (modelled on `amqp_edge.server`). The protocol lives in `mqtt_edge.session`; here
are only sockets, TCP_NODELAY, keep-alive timing and back-pressure: the reader stops reading
while the connection holds PUBLISHes waiting for the engine's publisher credit.

The per-message path is kept short (benchmarks/mqtt.py): the reader reads the non-blocking
socket with os.read and waits only when it is empty; the output a read produces, on this
connection and on the others it reached through the engine, is written when that read is
processed, with one os.write per connection (`_Cycle`); the writer task sends only what the
socket would not take, and output made outside a read (timers, other edges, the mesh).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from functools import partial
from typing import Any

import trio

from router.config import HostPort

from . import retained
from .session import MqttConnection

log = logging.getLogger("exactmesh.mqtt")

READ_SIZE = 64 * 1024
CLOSE_GRACE = 1.0  # seconds a closing connection gets to send its last packets
MAX_BURST = 16  # reads in a row without waiting before the reader yields to other tasks
KEEPALIVE_RECHECK = 5.0  # seconds; a connection without keep-alive is looked at this often
KEEPALIVE_STEP = 0.25  # how late a keep-alive (or connect) deadline may be noticed


async def serve_mqtt(
    node: Any, where: HostPort, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    listeners = await trio.open_tcp_listeners(where.port, host=where.host)
    retained.store(node)  # now, so that retained messages other routers share are kept
    task_status.started(listeners)
    await trio.serve_listeners(partial(_serve_connection, node), listeners)


class _Wake:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


class _Cycle:
    """Output produced while readers process input is written once per read cycle: each
    connection that got output is written with one non-blocking send when the reader that
    caused it is done (the writer task is woken only when the socket cannot take it all, or
    for output made outside a read: timers, other edges, the mesh). One send per connection
    and batch, and no writer task switch per packet."""

    __slots__ = ("depth", "pending")

    def __init__(self) -> None:
        self.depth = 0  # > 0 while a reader is inside `conn.receive` (or a flush runs)
        self.pending: list[_Out] = []

    def flush(self) -> None:
        """Write every connection that got output; what that produces (QoS 0 credit topped up
        when a socket drained) is written in the same pass."""
        self.depth += 1
        pending: list[_Out] = []
        try:
            while self.pending:
                pending, self.pending = self.pending, []
                while pending:
                    pending.pop().flush()
        finally:
            self.depth -= 1
            # After an error: what was not written yet goes to the writers (none is lost).
            for out in pending + self.pending:
                out.dirty = False
                out.wake.set()
            self.pending = []


def _cycle(node: Any) -> _Cycle:
    cycle = getattr(node, "_mqtt_cycle", None)
    if cycle is None:
        cycle = node._mqtt_cycle = _Cycle()
    return cycle


class _Out:
    """One connection's output path: direct non-blocking writes, the writer task as fallback."""

    __slots__ = ("conn", "cycle", "dirty", "fd", "wake", "writing")

    def __init__(self, conn: MqttConnection, fd: int, cycle: _Cycle, wake: _Wake) -> None:
        self.conn = conn
        self.fd = fd
        self.cycle = cycle
        self.wake = wake
        self.dirty = False
        self.writing = False  # the writer task holds output it has not finished sending

    def on_output(self) -> None:
        if self.cycle.depth:
            if not self.dirty:
                self.dirty = True
                self.cycle.pending.append(self)
        else:
            self.wake.set()

    def flush(self) -> None:
        self.dirty = False
        conn = self.conn
        if not conn.out and not conn.closing:
            return
        if self.writing or conn.closing:
            self.wake.set()  # the writer keeps the order / closes the socket after the rest
            return
        data = conn.out
        try:
            n = os.write(self.fd, data)
        except OSError:  # full (BlockingIOError), or the peer is gone: the writer sees to it
            n = 0
        if n < len(data):
            del data[:n]  # the writer sends the rest when the socket drains
            self.wake.set()
        else:
            data.clear()
            conn.output_drained()


async def _serve_connection(node: Any, stream: trio.SocketStream) -> None:
    try:
        peer = "{}:{}".format(*stream.socket.getpeername()[:2])
    except OSError:
        peer = "?"
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    conn = MqttConnection(node, peer)
    wake, resume = _Wake(), _Wake()
    out = _Out(conn, stream.socket.fileno(), _cycle(node), wake)
    conn.on_output = out.on_output
    conn.on_resume = resume.set
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    node.connections.add(conn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope, out)
            nursery.start_soon(_watchdog, conn)
            await _reader(conn, stream, resume, out.cycle)
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
        node.connections.discard(conn)
        conn.closed()
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await stream.aclose()


async def _reader(
    conn: MqttConnection, stream: trio.SocketStream, resume: _Wake, cycle: _Cycle
) -> None:
    """Reads with os.read on the non-blocking socket and waits with wait_readable only when
    there is nothing to read (trio's receive_some adds two scheduler checkpoints per read);
    keep-alive is the watchdog's."""
    sock = stream.socket
    fd = sock.fileno()
    burst = 0
    while not conn.closing:
        if conn.paused:
            await resume.wait()
            continue
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            burst = 0
            await trio.lowlevel.wait_readable(sock)
            continue
        except OSError:
            data = b""
        if not data:
            return  # the client closed its socket
        cycle.depth += 1
        try:
            conn.receive(data)
        finally:
            cycle.depth -= 1
            if not cycle.depth:
                cycle.flush()
        burst += 1
        if burst >= MAX_BURST:  # data keeps coming: let the other tasks run
            burst = 0
            await trio.lowlevel.checkpoint()


async def _watchdog(conn: MqttConnection) -> None:
    """Closes a connection silent for 1.5 x its keep-alive (or without CONNECT in time)."""
    while not conn.closing:
        d = conn.keepalive_deadline()
        if d is None:  # keep-alive 0: nothing to watch (checked again now and then)
            await trio.sleep(KEEPALIVE_RECHECK)
            continue
        if trio.current_time() < d:
            # Not past the deadline we read: it can move earlier (CONNECT replaces the
            # connect deadline with the keep-alive one), so look again at least this often.
            await trio.sleep_until(min(d, trio.current_time() + KEEPALIVE_STEP))
            continue
        conn.keepalive_expired()
        return


async def _writer(
    conn: MqttConnection, stream: trio.SocketStream, wake: _Wake, scope: trio.CancelScope,
    out: _Out,
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

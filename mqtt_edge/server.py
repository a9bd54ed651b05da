"""The MQTT listener: one reader and one writer task per client connection, under trio
(modelled on `amqp_edge.server`). The protocol lives in `mqtt_edge.session`; here are only
sockets, TCP_NODELAY, keep-alive timing and back-pressure: the reader stops reading while the
connection holds PUBLISHes waiting for the engine's publisher credit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from functools import partial
from typing import Any

import trio

from router.config import HostPort

from .session import MqttConnection

log = logging.getLogger("exactmesh.mqtt")

READ_SIZE = 64 * 1024
CLOSE_GRACE = 1.0  # seconds a closing connection gets to send its last packets


async def serve_mqtt(
    node: Any, where: HostPort, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    listeners = await trio.open_tcp_listeners(where.port, host=where.host)
    task_status.started(listeners)
    await trio.serve_listeners(partial(_serve_connection, node), listeners)


class _Wake:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, deadline: float = math.inf) -> None:
        with trio.move_on_at(deadline):
            await self._event.wait()
        self._event = trio.Event()


async def _serve_connection(node: Any, stream: trio.SocketStream) -> None:
    try:
        peer = "{}:{}".format(*stream.socket.getpeername()[:2])
    except OSError:
        peer = "?"
    with contextlib.suppress(OSError):
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    conn = MqttConnection(node, peer)
    wake, resume = _Wake(), _Wake()
    conn.on_output = wake.set
    conn.on_resume = resume.set
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    node.connections.add(conn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope)
            await _reader(conn, stream, resume)
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


async def _reader(conn: MqttConnection, stream: trio.SocketStream, resume: _Wake) -> None:
    while not conn.closing:
        if conn.paused:
            await resume.wait(_deadline(conn))
            _check_keepalive(conn)
            continue
        data = None
        with trio.move_on_at(_deadline(conn)):
            try:
                data = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
        if data is None:
            _check_keepalive(conn)
            continue
        if not data:
            return  # the client closed its socket
        conn.receive(data)


def _deadline(conn: MqttConnection) -> float:
    d = conn.keepalive_deadline()
    return math.inf if d is None else d


def _check_keepalive(conn: MqttConnection) -> None:
    d = conn.keepalive_deadline()
    if d is not None and trio.current_time() >= d:
        conn.keepalive_expired()


async def _writer(
    conn: MqttConnection, stream: trio.SocketStream, wake: _Wake, scope: trio.CancelScope
) -> None:
    try:
        while True:
            data = conn.take_output()
            if data:
                await stream.send_all(data)
                if not conn.out:
                    conn.output_drained()
                continue
            if conn.closing:
                break
            await wake.wait()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel()

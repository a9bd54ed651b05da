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
from router.listeners import open_ssl_over_tcp_listeners, open_tcp_listeners
from router.security.gate import HANDSHAKE_TIMEOUT, admitted, certificate_user, tls_handshake
from router.security.policy import FAILED_LOG_IN_DELAY

from .connection import AmqpConnection
from .sasl import SaslServer

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
        listeners = await open_tcp_listeners(where.port, where.host)
    else:
        listeners = await open_ssl_over_tcp_listeners(where.port, tls, where.host)
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
    if not admitted(node, peer, log):
        await _close(stream)
        return
    if isinstance(stream, trio.SSLStream) and not await tls_handshake(stream, peer, log):
        await _close(stream)
        return
    user, first = None, b""
    # A password or ACL file, or a limit per user: clients log in (our SASL).
    log_in = not node.policy.open or node.config.max_connections_per_user > 0
    if log_in:
        outcome = await _log_in(node, stream, peer)
        if outcome is None:
            await _close(stream)
            return
        user, first = outcome
    conn = AmqpConnection(node, peer, own_sasl=log_in, user=user)
    if node.stopping:
        conn.shutdown(f"router {node.config.id} is shutting down")
    wake = _Wake()
    conn.on_output = wake.set
    node.connections.add(conn)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_writer, conn, stream, wake, nursery.cancel_scope)
            await _reader(conn, stream, first)
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


async def _close(stream: trio.abc.Stream) -> None:
    with trio.move_on_after(0.5) as scope:
        scope.shield = True
        await trio.aclose_forcefully(stream)


async def _log_in(node: RuntimePort, stream: trio.abc.Stream,
                  peer: str) -> tuple[str | None, bytes] | None:
    """The SASL exchange (amqp_edge/sasl.py), with the handshake deadline: the user (None:
    anonymous) and the bytes that followed it, or None (refused, logged, answered)."""
    policy, cfg = node.policy, node.config
    tls = isinstance(stream, trio.SSLStream)
    identity = certificate_user(stream) if tls and cfg.tls_identity_as_username else None
    mechanisms = ["EXTERNAL"] if identity is not None else []
    if tls or cfg.allow_plain_without_tls:
        mechanisms.append("PLAIN")
    if policy.anonymous_allowed:
        mechanisms.append("ANONYMOUS")

    def check(user: str | None, password: bytes | None) -> str | None:
        certified = user is not None and password is None  # EXTERNAL (see sasl.Check)
        refusal = policy.authenticate(user, password, certified) or policy.admit_user(
            user, node.connections, cfg.max_connections_per_user)
        return None if refusal is None else f"{refusal.kind}: {refusal.detail}"

    sasl = SaslServer(mechanisms, check, identity)
    with trio.move_on_after(HANDSHAKE_TIMEOUT):
        try:
            while not sasl.done:
                data = await stream.receive_some(READ_SIZE)
                if not data:
                    _left(peer, sasl, policy, isinstance(stream, trio.SSLStream))
                    return None
                try:
                    sasl.receive(data)
                except Exception:  # a bug here must not take the router down
                    log.exception("connection %s: the SASL exchange failed; closing it", peer)
                    return None
                if sasl.out:
                    if sasl.refusal is not None:
                        await trio.sleep(FAILED_LOG_IN_DELAY)  # slows password guessing
                    await stream.send_all(bytes(sasl.out))
                    sasl.out.clear()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
    if not sasl.done:
        log.warning("connection %s: no SASL log-in within %g s; closed", peer,
                    HANDSHAKE_TIMEOUT)
        return None
    if sasl.skipped and not policy.anonymous_allowed:
        sasl.refusal = "the client did not log in (no SASL), and anonymous clients are not " \
            "allowed: log in with SASL PLAIN (over TLS, or with --allow-plain-without-tls)"
        policy.refusals["anonymous"] += 1
    if sasl.refusal is not None:
        if not (sasl.checked or sasl.skipped):
            policy.refusals["bad-sasl"] += 1  # a malformed or unexpected SASL exchange
        log.warning("connection %s: SASL log-in refused: %s", peer, sasl.refusal)
        return None
    return sasl.user, sasl.rest


def _left(peer: str, sasl: SaslServer, policy: Any, tls: bool) -> None:
    """The client closed during the SASL exchange: it had no mechanism it could use (no
    credentials for PLAIN, or PLAIN not offered in clear), which is a refusal to log."""
    offered = ", ".join(sasl.mechanisms) or "none"
    hint = "" if tls or "PLAIN" in sasl.mechanisms else "; PLAIN is offered only over TLS " \
        "(--amqps) unless --allow-plain-without-tls"
    policy.refusals["anonymous" if "PLAIN" in sasl.mechanisms else "no-mechanism"] += 1
    log.warning("connection %s: SASL log-in refused: the client left without logging in "
                "(offered: %s%s)", peer, offered, hint)


async def _reader(conn: AmqpConnection, stream: trio.abc.Stream, first: bytes = b"") -> None:
    transport = conn.transport
    if first:  # what the client sent after logging in: its AMQP header, and maybe more
        transport.push(first)
        conn.process()
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

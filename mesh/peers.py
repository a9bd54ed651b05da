"""Peer links under trio: TCP connections to the other routers, authenticated and kept alive.

Every connection, incoming or outgoing, runs in its own nursery with three tasks: a reader
(bytes -> `FrameDecoder` -> the `Handshake` until it is done, then the node's `on_frame`), a
writer (trio lets one task send on a stream; `PeerLink.send` only appends to a buffer and
wakes it, so the node never blocks) and a timer (handshake deadline, then heartbeats). A
connection that fails in any way is logged in one line and closed; nothing escapes the
manager, since one bad peer must never take the router down. trio's SocketStream sets
TCP_NODELAY itself.

With TLS configured (`PeerSettings.tls_server` / `tls_client`), every connection is wrapped
in a `trio.SSLStream` and the TLS handshake runs first, inside the same handshake deadline; the
HMAC handshake then runs inside TLS. A TLS failure closes that one link like any other failure.

Callbacks run synchronously in the link's tasks. They never nest: an `on_down` caused by the
node closing a link from inside a callback runs right after that callback returns.
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from router.listeners import open_tcp_listeners

from .frames import FrameDecoder, FrameError, encode
from .handshake import Handshake

log = logging.getLogger("exactmesh.mesh")

READ_SIZE = 64 * 1024
MAX_OUTPUT = 64 * 1024 * 1024  # queued bytes beyond which a peer counts as too slow
CLOSE_GRACE = 0.5  # seconds a closing link gets to send its REFUSE (and what was queued)


def _clean(text: str, limit: int = 300) -> str:
    """`text` fit for one log line: a peer's id or reason may be long or hold line breaks."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return clean if len(text) <= limit else clean + "..."


@dataclass(frozen=True)
class PeerSettings:
    router_id: str
    inc: int
    cluster: str
    secret: bytes
    heartbeat: float = 1.0
    max_frame: int = 2 * 1024 * 1024
    reconnect_min: float = 0.05
    reconnect_max: float = 1.0
    # A dialled handshake that timed out is tried again with twice the time, up to this many
    # times `handshake_timeout`; a listener allows that longest time from the start. A peer
    # that is up but starved of CPU answers slowly: on the test bed (load 24 on 2 cores) a
    # restarted router retried a 2 s handshake for 30 s and never linked back.
    handshake_patience: int = 8
    # Mutual TLS for peer links (both set, or neither): contexts for accepted connections
    # (server side) and for the ones we dial (client side). Built by `RouterConfig.peer_tls`.
    tls_server: ssl.SSLContext | None = None
    tls_client: ssl.SSLContext | None = None

    @property
    def handshake_timeout(self) -> float:
        return max(2 * self.heartbeat, 2.0)

    @property
    def handshake_timeout_max(self) -> float:
        return self.handshake_timeout * self.handshake_patience

    @property
    def connect_timeout(self) -> float:
        """How long one TCP connect may take: a blackholed SYN must not stall a connect
        loop, and the kernel would retransmit a lost SYN only after 1 s, then 3 s. Attempts
        that time out follow each other at once, so a healed partition is crossed within
        about this long (test bed: 3.7 s after an isolation, with the handshake timeout)."""
        return min(self.handshake_timeout, max(self.heartbeat, 1.0))


def _lost(exc: BaseException) -> str:
    """Why a stream broke, for the log: the TLS error itself when TLS is what failed (trio
    raises BrokenResourceError from the ssl module's error)."""
    cause = exc.__cause__
    if isinstance(cause, ssl.SSLError | ssl.CertificateError):
        return f"TLS error: {cause}"
    return f"connection lost: {str(exc) or type(exc).__name__}"


class PeerLink:
    """One connection to a peer router. The node only ever sees links that are up
    (authenticated and registered); `peer` and `peer_inc` are set from then on."""

    def __init__(self, manager: PeerManager, addr: str, outgoing: bool,
                 handshake_timeout: float) -> None:
        self.peer = ""
        self.peer_inc = 0
        self.outgoing = outgoing
        self.addr = addr
        self.up = False  # registered with the manager: between on_up and on_down
        self.closed = False
        self.reason: str | None = None  # why it closed
        self._manager = manager
        s = manager.settings
        self._handshake = Handshake(s.router_id, s.inc, s.cluster, s.secret)
        self._established = trio.Event()
        self._out = bytearray()
        self._inflight = 0  # bytes the writer has taken but not yet sent
        self.bytes_sent = self.bytes_received = 0  # for operators (GET /stat, the console)
        self._wake = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._last_sent = self._last_recv = trio.current_time()
        # TLS and the HMAC handshake together must be done by then.
        self.handshake_timeout = handshake_timeout
        self._handshake_deadline = self._last_recv + handshake_timeout
        self.handshake_timed_out = False

    def __repr__(self) -> str:
        return f"<PeerLink {self._describe()}{' closed' if self.closed else ''}>"

    def _describe(self) -> str:
        who = self.peer or self._handshake.peer
        direction = "outgoing" if self.outgoing else "incoming"
        return f"peer {self.addr} (router {_clean(who, 64) if who else 'unknown'}, {direction})"

    # ---------------------------------------------------------------- the node's side

    def send(self, frame: dict) -> None:
        """Queue `frame` for the peer; never blocks. Does nothing once the link is closed.
        Raises `FrameError` for an invalid frame or one over `max_frame`: the peer would
        close the link for it, and a retransmission would do so again."""
        if self.closed:
            return
        data = encode(frame)
        limit = self._manager.settings.max_frame
        if len(data) - 4 > limit:
            raise FrameError(
                f"{frame['t']} frame of {len(data) - 4} bytes exceeds the maximum frame size "
                f"of {limit} bytes"
            )
        self.bytes_sent += len(data)
        self._push(data)

    def close(self, reason: str) -> None:
        """Close the link, telling the peer `reason` in a REFUSE frame; on_down follows."""
        self._close(reason)

    # ---------------------------------------------------------------- internals

    def _push(self, data: bytes) -> None:
        self._out += data
        self._last_sent = trio.current_time()
        self._wake.set()
        if len(self._out) + self._inflight > MAX_OUTPUT:
            self._close(
                f"peer too slow: more than {MAX_OUTPUT >> 20} MiB of output queued",
                refuse=False, abort=True, level=logging.WARNING,
            )

    def _close(
        self, reason: str, *, refuse: bool = True, abort: bool = False, level: int = logging.INFO
    ) -> None:
        if self.closed:
            return
        reason = _clean(reason)
        self.closed = True
        self.reason = reason
        log.log(level, "%s: link closed: %s", self._describe(), reason)
        if abort:
            self._out = bytearray()
        elif refuse:
            self._out += encode({"t": "REFUSE", "reason": reason})
        self._wake.set()
        if self._scope is not None:
            if abort:
                self._scope.cancel()
            else:  # the writer cancels sooner once everything is out
                self._scope.deadline = min(
                    self._scope.deadline, trio.current_time() + CLOSE_GRACE)
        self._manager._link_closed(self, reason)

    async def _run(self, stream: trio.abc.Stream) -> None:
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            tls = isinstance(stream, trio.SSLStream) and not self._manager.closed
            if tls and not await self._tls_handshake(stream):
                return
            if self._manager.closed:
                self._close("the router is shutting down")
            else:
                for frame in self._handshake.start():
                    self._push(encode(frame))
            nursery.start_soon(self._writer, stream)
            nursery.start_soon(self._timer)
            if not self.closed:
                nursery.start_soon(self._reader, stream)

    async def _tls_handshake(self, stream: trio.SSLStream) -> bool:
        """The TLS handshake, before any frame; False (and the link closed) if it failed.
        Certificates are checked against the cluster CA only, not against host names: a peer
        is identified by the router id it proves in the HMAC handshake that follows."""
        with trio.move_on_at(self._handshake_deadline):
            try:
                await stream.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._close(f"TLS handshake failed: {_lost(exc).removeprefix('TLS error: ')}",
                            refuse=False, level=logging.WARNING)
                return False
            return True
        self.handshake_timed_out = True
        self._close(f"TLS handshake not complete within {self.handshake_timeout:g} s",
                    refuse=False, level=logging.WARNING)
        return False

    def _broken(self, exc: BaseException) -> None:
        why = _lost(exc)
        if not why.startswith("TLS error"):
            self._close(why, refuse=False)
        elif self._established.is_set():
            self._close(why, refuse=False, level=logging.WARNING)
        else:  # with TLS 1.3 a peer refusing our certificate shows only after do_handshake
            self._close(why.replace("TLS error", "TLS handshake failed", 1), refuse=False,
                        level=logging.WARNING)

    async def _reader(self, stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder(self._manager.settings.max_frame)
        while not self.closed:
            try:
                data = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._broken(exc)
                return
            if not data:
                self._close("connection closed by the peer", refuse=False)
                return
            self.bytes_received += len(data)
            # Any bytes are a sign of life, so a large frame arriving slowly is not "silence".
            self._last_recv = trio.current_time()
            try:
                frames = decoder.feed(data)
            except FrameError as exc:
                for frame in exc.frames:  # the good frames before the bad one still count
                    if self.closed:
                        return
                    self._on_frame(frame)
                self._close(f"protocol error: {exc}", level=logging.WARNING)
                return
            for frame in frames:
                if self.closed:
                    return
                self._on_frame(frame)

    def _on_frame(self, frame: dict) -> None:
        hs = self._handshake
        kind = frame["t"]
        if not hs.done:
            for answer in hs.on_frame(frame):
                self._push(encode(answer))
            if hs.error is not None:
                # Our REFUSE, if we refused, is already queued; a peer's REFUSE needs none.
                why = hs.error if kind == "REFUSE" else f"refusing the link: {hs.error}"
                self._close(why, refuse=False, level=logging.WARNING)
            elif hs.done:
                assert hs.peer is not None and hs.peer_inc is not None
                self.peer = hs.peer
                self.peer_inc = hs.peer_inc
                self._established.set()
                self._manager._link_established(self)
            return
        if kind == "PING":
            return  # its arrival already counted as a sign of life
        if kind == "REFUSE":
            self._close(f"closed by the peer: {frame['reason']}", refuse=False)
        elif kind in ("HELLO", "PROOF"):
            self._close(
                f"protocol error: unexpected {kind} frame after the handshake",
                level=logging.WARNING,
            )
        else:
            self._manager._deliver(self, frame)

    async def _writer(self, stream: trio.abc.Stream) -> None:
        try:
            while True:
                if self._out:
                    # One scheduling round for other tasks to add their frames: on loopback
                    # each send() also runs the receiver's TCP stack, so fewer, larger writes
                    # are most of the relay's CPU.
                    await trio.sleep(0)
                    data, self._out = self._out, bytearray()
                    self._inflight = len(data)
                    await stream.send_all(data)
                    self._inflight = 0
                elif self.closed:
                    break  # everything, including the REFUSE, is out
                else:
                    await self._wake.wait()
                    self._wake = trio.Event()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._broken(exc)
        assert self._scope is not None
        self._scope.cancel()

    async def _timer(self) -> None:
        s = self._manager.settings
        with trio.move_on_at(self._handshake_deadline):
            await self._established.wait()
        if not self._established.is_set():
            self.handshake_timed_out = True
            self._close(f"handshake not complete within {self.handshake_timeout:g} s",
                        level=logging.WARNING)
            return
        period = s.heartbeat / 3
        while not self.closed:
            now = trio.current_time()
            silent = now - self._last_recv
            if silent >= s.heartbeat:
                self._close(f"nothing received for {silent:.2f} s (heartbeat {s.heartbeat:g} s)",
                            level=logging.WARNING)
                return
            if now - self._last_sent >= period:
                self._push(encode({"t": "PING"}))
            await trio.sleep_until(min(self._last_sent + period, self._last_recv + s.heartbeat))


class PeerManager:
    """All of a router's peer links: listening, connecting, the one-link-per-peer rule."""

    def __init__(
        self,
        settings: PeerSettings,
        on_up: Callable[[PeerLink], None],
        on_frame: Callable[[PeerLink, dict], None],
        on_down: Callable[[PeerLink, str], None],
    ) -> None:
        self.settings = settings
        self._on_up = on_up
        self._on_frame = on_frame
        self._on_down = on_down
        self._links: dict[str, PeerLink] = {}  # the up links, by peer router id
        self._all: set[PeerLink] = set()  # every connection, also those in the handshake
        self._changed: trio.Event | None = None
        self._pending: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._emitting = False
        self.closed = False

    # ---------------------------------------------------------------- public

    async def listen(
        self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await open_tcp_listeners(port, host)
        task_status.started(listeners)
        await trio.serve_listeners(self._serve_incoming, listeners)

    async def listen_on(self, fd: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve peers on a listening socket this process was handed (a worker of
        `--workers`: its supervisor holds the socket, so its port stays the worker's across
        restarts and nothing else can take it meanwhile)."""
        sock = trio.socket.from_stdlib_socket(socket.socket(fileno=fd))
        listeners = [trio.SocketListener(sock)]
        task_status.started(listeners)
        await trio.serve_listeners(self._serve_incoming, listeners)

    async def connect(self, host: str, port: int) -> None:
        """Keep a link to host:port: connect, handshake, serve, and after a loss reconnect with
        jittered exponential backoff. Never raises for network errors; returns after
        `close_all`."""
        await self.connect_one([(host, port)])

    async def connect_one(self, targets: list[tuple[str, int]]) -> None:
        """Keep one link to one of `targets` (a relay's uplinks): the first that answers; after
        a loss, or a failure to connect, the next one round the list, with the same backoff
        as `connect`. Returns after `close_all`."""
        s = self.settings
        delay = s.reconnect_min
        failures = 0
        turn = 0
        handshake = s.handshake_timeout
        while not self.closed:
            host, port = targets[turn % len(targets)]
            turn += 1
            addr = f"{host}:{port}"
            stream: trio.SocketStream | None = None
            error = f"no answer within {s.connect_timeout:g} s"
            timed_out = False
            try:
                with trio.move_on_after(s.connect_timeout) as scope:
                    stream = await trio.open_tcp_stream(host, port)
                timed_out = scope.cancelled_caught
            except OSError as exc:
                error = str(exc) or type(exc).__name__
            if stream is None:
                # One line per streak of failures: a peer that is down for an hour should not
                # fill the log at the reconnect rate.
                level = logging.WARNING if failures == 0 else logging.DEBUG
                log.log(level, "peer %s: cannot connect: %s; retrying", addr, error)
                failures += 1
            else:
                link = await self._serve(stream, addr, True, handshake)
                if link.peer:  # it got through the handshake: start again from the shortest delay
                    delay = s.reconnect_min
                    failures = 0
                    handshake = s.handshake_timeout
                elif link.handshake_timed_out and handshake < s.handshake_timeout_max:
                    handshake = min(handshake * 2, s.handshake_timeout_max)
                    log.info("peer %s: the next attempt allows the handshake %g s", addr,
                             handshake)
                # Another link to that router is up (this one lost the duplicate rule, or the
                # peer connected to us meanwhile): reconnecting now would only be refused.
                peer = link.peer or link._handshake.peer
                if peer:
                    await self._wait_gone(peer)
            if self.closed:
                return
            if not timed_out:  # a timed-out attempt has waited already
                await trio.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, s.reconnect_max)

    def links(self) -> dict[str, PeerLink]:
        """The links that are up, by peer router id (a copy)."""
        return dict(self._links)

    def close_all(self, reason: str) -> None:
        """Close every link (telling the peers `reason`) and stop: incoming connections are
        refused and connect loops return from now on. Meant for shutdown."""
        self.closed = True
        for link in list(self._all):
            link.close(reason)
        self._notify()

    # ---------------------------------------------------------------- connections

    async def _serve_incoming(self, stream: trio.SocketStream) -> None:
        try:
            addr = "{}:{}".format(*stream.socket.getpeername()[:2])
        except OSError:
            addr = "?"
        await self._serve(stream, addr, False, self.settings.handshake_timeout_max)

    async def _serve(self, tcp: trio.SocketStream, addr: str, outgoing: bool,
                     handshake_timeout: float) -> PeerLink:
        link = PeerLink(self, addr, outgoing, handshake_timeout)
        self._all.add(link)
        s = self.settings
        context = s.tls_client if outgoing else s.tls_server
        stream: trio.abc.Stream = tcp
        if context is not None:
            stream = trio.SSLStream(tcp, context, server_side=not outgoing)
        try:
            await link._run(stream)
        except Exception:  # a bug in one link must never take the router down
            log.exception("%s: link failed", link._describe())
        finally:
            # Also reached when the whole manager is cancelled: the node still hears on_down.
            link._close("the link's tasks ended", refuse=False)
            self._all.discard(link)
            with trio.move_on_after(0.5) as scope:
                scope.shield = True
                await stream.aclose()
        return link

    # ---------------------------------------------------------------- bookkeeping

    def _link_established(self, link: PeerLink) -> None:
        if self.closed:
            link._close("the router is shutting down")
            return
        existing = self._links.get(link.peer)
        if existing is not None:
            loser, why = self._duplicate(existing, link)
            loser._close(why)
            if loser is link or link.closed:  # (the node may have closed it in on_down)
                return
            if self.closed:
                link._close("the router is shutting down")
                return
        self._links[link.peer] = link
        link.up = True
        log.info("%s: link up (peer incarnation %d)", link._describe(), link.peer_inc)
        self._notify()
        self._emit(self._on_up, link)

    def _duplicate(self, existing: PeerLink, new: PeerLink) -> tuple[PeerLink, str]:
        """Which of two links to the same peer goes, and why. Both routers decide alike, so
        they keep the same connection."""
        me, peer = self.settings.router_id, new.peer
        if new.peer_inc != existing.peer_inc:
            # The peer restarted: the old link is a leftover its new incarnation cannot use.
            return existing, f"replaced by a link to the peer's incarnation {new.peer_inc}"
        old_by = me if existing.outgoing else peer
        new_by = me if new.outgoing else peer
        if old_by == new_by:
            # The initiator gave up on the old connection (e.g. its heartbeat expired before
            # ours did): its newest choice wins.
            return existing, f"replaced by a newer link initiated by router {new_by}"
        winner = min(me, peer)
        loser = existing if new_by == winner else new
        return loser, f"duplicate link to router {peer}: keeping the one router {winner} initiated"

    def _link_closed(self, link: PeerLink, reason: str) -> None:
        if not link.up:
            return
        link.up = False
        if self._links.get(link.peer) is link:
            del self._links[link.peer]
        self._notify()
        self._emit(self._on_down, link, reason)

    def _deliver(self, link: PeerLink, frame: dict) -> None:
        self._emit(self._call_on_frame, link, frame)

    def _call_on_frame(self, link: PeerLink, frame: dict) -> None:
        if link.closed:
            return  # closed by an earlier callback in this same batch
        try:
            self._on_frame(link, frame)
        except Exception:
            # The node's state for this peer may be half-updated: start the link afresh.
            log.exception("%s: handling a %s frame failed", link._describe(), frame["t"])
            link._close(f"internal error handling a {frame['t']} frame", level=logging.ERROR)

    def _emit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run a callback, or queue it if one is running (the node closed a link from within
        a callback): callbacks never nest, and keep their order."""
        self._pending.append((fn, args))
        if self._emitting:
            return
        self._emitting = True
        try:
            while self._pending:
                fn, args = self._pending.popleft()
                try:
                    fn(*args)
                except Exception:
                    log.exception("mesh callback %s failed", getattr(fn, "__name__", fn))
        finally:
            self._emitting = False

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_gone(self, peer: str) -> None:
        while peer in self._links and not self.closed:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()

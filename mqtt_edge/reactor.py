"""The MQTT edge's reactor: the synchronous part of reading every MQTT connection of the
router and writing what that produces (mqtt_edge/server.py runs it under trio and holds the
tasks: the reactor's wait, each connection's writer and keep-alive watchdog).

Each round reads every connection that has input (one os.read each), hands the bytes to its
session, and then writes the output the round produced, on these connections and on the
others the engine reached, with one os.write per connection (`Cycle`). This module is on the
per-message path and is compiled with the others (router/accel.py); it does no waiting of
its own: `Reactor.drain` returns when no connection has input left (or after MAX_ROUNDS).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
from collections.abc import Callable
from typing import Any

import trio

from .session import MqttConnection

log = logging.getLogger("exactmesh.mqtt")

READ_SIZE = 64 * 1024
MAX_EVENTS = 256  # ready connections read per round
MAX_ROUNDS = 16  # rounds of reads in a row before the reactor lets other tasks run


class Cycle:
    """Output produced while the reactor reads is written once per round: each connection
    that got output is written with one non-blocking send when the round is done (the writer
    task is woken only when the socket cannot take it all, or for output made outside a
    round: timers, other edges, the mesh). One send per connection and round, and no writer
    task switch per packet."""

    __slots__ = ("depth", "pending")

    def __init__(self) -> None:
        self.depth = 0  # > 0 while the reactor is inside `conn.receive` (or a flush runs)
        self.pending: list[Output] = []

    def flush(self) -> None:
        """Write every connection that got output; what that produces (QoS 0 credit topped up
        when a socket drained) is written in the same pass."""
        self.depth += 1
        pending: list[Output] = []
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


class Output:
    """One connection's output path: direct non-blocking writes, the writer task as fallback."""

    __slots__ = ("conn", "cycle", "dirty", "fd", "wake", "writing")

    def __init__(self, conn: MqttConnection, fd: int, cycle: Cycle, wake: Any) -> None:
        # wake: the writer task's wake-up (server.py's _Wake), whose set() is all we call
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


class Reading:
    """One connection as the reactor sees it."""

    __slots__ = ("armed", "conn", "done", "fd", "reactor")

    def __init__(self, reactor: Reactor, conn: MqttConnection, fd: int) -> None:
        self.reactor = reactor
        self.conn = conn
        self.fd = fd
        self.done = trio.Event()  # reading ended: the peer closed, or the connection is closing
        self.armed = True

    def read(self, events: int, now: float) -> None:
        conn = self.conn
        if not self.armed:  # paused, yet epoll reports a hang-up or an error (it always does)
            if events & (select.EPOLLHUP | select.EPOLLERR):
                self.finish()
            return
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client closed its socket
            self.finish()
            return
        try:
            conn.receive(data, now)
        except Exception:  # one connection's failure must never take the router down
            log.exception("mqtt connection %s failed; closing it", conn.peer)
            with contextlib.suppress(Exception):
                conn.abort("internal error in the router; see its log")
            self.finish()
            return
        if conn.closing:
            self.finish()
        elif conn.paused:
            self.set_armed(False)

    def resume(self) -> None:
        """The session has publisher credit again: read again."""
        if not self.done.is_set() and not self.armed:
            self.set_armed(True)

    def set_armed(self, armed: bool) -> None:
        self.armed = armed
        with contextlib.suppress(OSError, ValueError):
            self.reactor.ep.modify(self.fd, select.EPOLLIN if armed else 0)

    def finish(self) -> None:
        if not self.done.is_set():
            self.reactor.remove(self)
            self.done.set()


class Reactor:
    """Reads all MQTT connections of the router from one task (see the module docstring)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.ep = select.epoll()
        # The router's clock (trio's), read once per round for all the connections it reads:
        # a read is a few Python calls.
        self.clock = clock
        # The reactor's own: output a round makes for a connection of another listener's
        # reactor (depth 0 there) goes through that connection's writer task.
        self.cycle = Cycle()
        self.reading: dict[int, Reading] = {}

    def add(self, conn: MqttConnection, fd: int) -> Reading:
        r = Reading(self, conn, fd)
        self.reading[fd] = r
        self.ep.register(fd, select.EPOLLIN)
        return r

    def remove(self, r: Reading) -> None:
        if self.reading.get(r.fd) is r:
            del self.reading[r.fd]
            with contextlib.suppress(OSError, ValueError):
                self.ep.unregister(r.fd)

    def drain(self) -> None:
        """Read while input keeps coming (clients answer what the last round wrote), up to
        MAX_ROUNDS rounds, before the other tasks get their turn (server.py awaits the
        epoll object becoming readable again)."""
        ep, clock = self.ep, self.clock
        for _ in range(MAX_ROUNDS):
            events = ep.poll(0, MAX_EVENTS)
            if not events:
                return
            self._round(events, clock())

    def _round(self, events: list[tuple[int, int]], now: float) -> None:
        cycle, reading = self.cycle, self.reading
        cycle.depth += 1
        try:
            for fd, ev in events:
                r = reading.get(fd)
                if r is not None:
                    r.read(ev, now)
        except Exception:  # `read` keeps a connection's failure to itself; this is a bug
            log.exception("mqtt reactor: a round failed; the connections it was reading "
                          "go on")
        finally:
            cycle.depth -= 1
            if not cycle.depth:
                cycle.flush()

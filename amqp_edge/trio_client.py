"""The exactly-once client SDK for trio programs.

    async with open_publisher(urls, topic="orders/eu", id="shop-1", state_dir=d) as pub:
        await pub.send(b"order 1")
        await pub.flush()

    async with open_subscriber(urls, "orders/#", id="billing", state_dir=d) as sub:
        async for msg in sub:
            handle(msg.body)
            await sub.accept(msg)

These wrap the blocking clients of `amqp_edge.client` (whose I/O runs on their own thread):
a call that would block instead waits on a trio Event that the client's thread sets, through
the trio token, when its state changes (an outcome, a message, an error). So every wait is a
plain trio checkpoint: cancellation and timeouts (`trio.move_on_after`) work as usual, and a
cancelled `send` has not sent anything. `accept`/`reject` commit to SQLite on the calling
thread (WAL, synchronous=NORMAL: well under a millisecond) before answering the router.
Opening and closing run in a worker thread; closing is shielded from cancellation.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import trio

from .client import (
    Advisory,
    ClientClosed,
    Failure,
    Publisher,
    ReceivedMessage,
    Subscriber,
)

__all__ = ["TrioPublisher", "TrioSubscriber", "open_publisher", "open_subscriber"]

T = TypeVar("T")


class _Changes:
    """A trio Event set (via the trio token) whenever the client's state changes."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._token = trio.lowlevel.current_trio_token()
        self._event = trio.Event()
        self._scheduled = False
        client._add_listener(self._from_any_thread)

    def _from_any_thread(self) -> None:  # called with the client's lock held
        if self._scheduled:
            return
        self._scheduled = True
        with suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._set)

    def _set(self) -> None:
        self._scheduled = False
        self._event.set()

    async def wait_for(self, ready: Callable[[], T | None]) -> T:
        """Wait until `ready()` returns something other than None (it may raise)."""
        while True:
            self._event = trio.Event()  # before checking: a change after this sets it
            value = ready()
            if value is not None:
                return value
            await self._event.wait()

    def detach(self) -> None:
        self._client._remove_listener(self._from_any_thread)


class _TrioClient:
    """What both trio clients share: attach, connection control and advisories."""

    client: Any
    _changes: _Changes

    async def wait_attached(self) -> str:
        def attached() -> str | None:
            self.client.check()
            return self.client._attached_url if self.client.attached else None

        return await self._changes.wait_for(attached)

    async def connect(self) -> None:
        """Connect again after `disconnect()` (or `autoconnect=False`)."""
        self.client.connect()
        await trio.lowlevel.checkpoint()

    async def disconnect(self, timeout: float | None = 10.0) -> Advisory:
        """Detach cleanly; returns the DISCONNECTED advisory (safe to sever)."""
        return await trio.to_thread.run_sync(functools.partial(self.client.disconnect,
                                                               timeout))

    async def advisories(self) -> AsyncIterator[Advisory]:
        """The advisories kept so far, then each as it comes, until the client closes."""
        number = 0
        while True:
            def ready(since: int = number) -> tuple[list[Advisory], int] | None:
                self.client.check()
                items, after = self.client._advisories_since(since)
                return (items, after) if items else None

            try:
                items, number = await self._changes.wait_for(ready)
            except ClientClosed:
                return
            for advisory in items:
                yield advisory


class TrioPublisher(_TrioClient):
    """`amqp_edge.client.Publisher` for trio: the same semantics, awaitable."""

    def __init__(self, pub: Publisher) -> None:
        self.client = pub
        self._changes = _Changes(pub)

    async def send(self, body: bytes | str, properties: dict | None = None,
                   ttl: float | None = None) -> int:
        """Queue one message (stored before it is transmitted); waits while the window is
        full. Returns its sequence number."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._changes.wait_for(
            lambda: self.client.try_send(body, properties, ttl))

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message sent has a final outcome (TimeoutError after
        `timeout` seconds, naming how many are still pending)."""
        def done() -> bool | None:
            self.client.check()
            return True if self.client.pending == 0 else None

        if timeout is None:
            await self._changes.wait_for(done)
            return
        with trio.move_on_after(timeout):
            await self._changes.wait_for(done)
            return
        raise TimeoutError(f"{self.client.pending} message(s) still without an outcome after "
                           f"{timeout} s")

    @property
    def pending(self) -> int:
        return self.client.pending

    @property
    def next_seq(self) -> int:
        return self.client.next_seq

    def failures(self) -> list[Failure]:
        return self.client.failures()

    def stats(self) -> dict[str, Any]:
        return self.client.stats()


class TrioSubscriber(_TrioClient):
    """`amqp_edge.client.Subscriber` for trio: `async for msg in sub`, `await sub.accept`."""

    def __init__(self, sub: Subscriber) -> None:
        self.client = sub
        self._changes = _Changes(sub)

    async def receive(self) -> ReceivedMessage:
        """The next message (wrap in trio.move_on_after for a timeout)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._changes.wait_for(self.client.try_receive)

    def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ReceivedMessage]:
        while True:
            try:
                msg = await self.receive()
            except ClientClosed:
                return
            yield msg

    async def receive_many(self, max_count: int = 100) -> list[ReceivedMessage]:
        """Waits for the first message, then takes up to `max_count` of those already here
        (`Subscriber.receive_many`)."""
        first = await self.receive()
        rest: list[ReceivedMessage] = []
        while len(rest) < max_count - 1 and (msg := self.client.try_receive()) is not None:
            rest.append(msg)
        return [first, *rest]

    async def accept(self, msg: ReceivedMessage) -> None:
        """Record it as processed (committed), then accept and settle it."""
        self.client.accept(msg)
        await trio.lowlevel.checkpoint()

    async def accept_many(self, msgs: Sequence[ReceivedMessage]) -> None:
        """One commit for the batch, then each is accepted and settled
        (`Subscriber.accept_many`)."""
        self.client.accept_many(msgs)
        await trio.lowlevel.checkpoint()

    async def reject(self, msg: ReceivedMessage, description: str | None = None) -> None:
        self.client.reject(msg, description)
        await trio.lowlevel.checkpoint()

    async def release(self, msg: ReceivedMessage) -> None:
        self.client.release(msg)
        await trio.lowlevel.checkpoint()

    @property
    def accepted_total(self) -> int:
        return self.client.accepted_total

    def stats(self) -> dict[str, Any]:
        return self.client.stats()


async def _close(client: Any, changes: _Changes) -> None:
    changes.detach()
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(client.close)


@asynccontextmanager
async def open_publisher(urls: str | Sequence[str] | None = None, *, topic: str, id: str,
                         state_dir: str, **options: Any) -> AsyncIterator[TrioPublisher]:
    """A `TrioPublisher`; `options` are those of `amqp_edge.client.Publisher` (window,
    connect_timeout, on_outcome, relay, on_advisory, autoconnect, guarantee, ...). Closing does not
    flush: `await pub.flush()` first."""
    pub = await trio.to_thread.run_sync(functools.partial(
        Publisher, urls, topic, id=id, state_dir=state_dir, **options))
    tp = TrioPublisher(pub)
    try:
        yield tp
    finally:
        await _close(pub, tp._changes)


@asynccontextmanager
async def open_subscriber(urls: str | Sequence[str] | None = None, topic_filter: str = "", *,
                          id: str, state_dir: str | None = None,
                          **options: Any) -> AsyncIterator[TrioSubscriber]:
    """A `TrioSubscriber`; `options` are those of `amqp_edge.client.Subscriber` (durable,
    timeout, prefetch, connect_timeout, relay, on_advisory, autoconnect, guarantee, ...):
    `state_dir` may be left out with guarantee="at-least-once"."""
    sub = await trio.to_thread.run_sync(functools.partial(
        Subscriber, urls, topic_filter, id=id, state_dir=state_dir, **options))
    ts = TrioSubscriber(sub)
    try:
        yield ts
    finally:
        await _close(sub, ts._changes)

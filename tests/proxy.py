"""A TCP proxy for tests whose connections can be cut and restored at will.

`Proxy(target_host, target_port)` listens on 127.0.0.1:`port` and forwards every connection
to the target. `cut()` resets every current connection (RST both ways, so each side sees the
loss at once, as after a crashed middlebox) and resets new ones as soon as they are accepted,
until `restore()`. It runs trio in a background thread so that tests of any kind (processes,
threads, or trio in the main thread) can use it; `cut()` and `restore()` return once done.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any

import trio

BUFFER = 64 * 1024


def _reset(stream: trio.SocketStream) -> None:
    """Close `stream` with an RST rather than a FIN: no lingering, unsent data dropped."""
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        # Bound here, in the caller's thread, so that `port` is known (and taken) at once.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0  # accepted and forwarded, for tests that want to know
        self._is_cut = False
        self._pairs: set[tuple[trio.SocketStream, trio.SocketStream | None]] = set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True,
                                        name=f"proxy:{self.port}")
        self._thread.start()
        self._ready.wait(10)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---------------------------------------------------------------- control (any thread)

    def cut(self) -> None:
        """Reset every current connection, and every new one until `restore()`."""
        self._call(self._cut_now)

    def restore(self) -> None:
        self._call(self._restore_now)

    def stop(self) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                self._call(self._stop_now)
            self._thread.join(5)
        self._sock.close()

    def _call(self, fn: Any) -> None:
        # Not trio.from_thread: that refuses to run in a thread with a trio loop of its own,
        # and tests that run trio in the main thread cut connections too.
        assert self._token is not None
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._token.run_sync_soon(run)
        if not done.wait(10):
            raise RuntimeError("the proxy thread did not answer")

    # ---------------------------------------------------------------- the trio side

    def _cut_now(self) -> None:
        self._is_cut = True
        for client, upstream in list(self._pairs):
            _reset(client)
            if upstream is not None:
                _reset(upstream)
        self._pairs.clear()

    def _restore_now(self) -> None:
        self._is_cut = False

    def _stop_now(self) -> None:
        self._cut_now()
        assert self._cancel is not None
        self._cancel.cancel()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(self._sock.dup()))
        async with trio.open_nursery() as nursery:
            self._cancel = nursery.cancel_scope
            self._ready.set()
            async with listener:
                while True:
                    client = await listener.accept()
                    if self._is_cut:
                        _reset(client)
                    else:
                        nursery.start_soon(self._forward, client)

    async def _forward(self, client: trio.SocketStream) -> None:
        pair: tuple[trio.SocketStream, trio.SocketStream | None] = (client, None)
        self._pairs.add(pair)
        try:
            try:
                upstream = await trio.open_tcp_stream(*self.target)
            except OSError:
                _reset(client)  # like a refused connection, as far as the client can tell
                return
            if pair not in self._pairs:  # cut while connecting
                _reset(upstream)
                return
            self._pairs.discard(pair)
            pair = (client, upstream)
            self._pairs.add(pair)
            self.connections += 1
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
                nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)
        finally:
            if pair in self._pairs:  # ended on its own (not cut): close both normally
                self._pairs.discard(pair)
                for stream in pair:
                    if stream is not None:
                        stream.socket.close()

    @staticmethod
    async def _pump(
        src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await src.receive_some(BUFFER):
                await dst.send_all(data)
            # A clean end of stream passes through as one, so a peer's FIN stays a FIN.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await dst.send_eof()
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

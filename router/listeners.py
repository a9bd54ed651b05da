"""The router's listening sockets, alone or shared with the other workers of one host.

`exactmesh router --workers N` (router/workers.py) runs N router processes that all listen on
the same client and peer ports: each opens its own socket with SO_REUSEPORT, and the kernel
spreads new connections over them. Whether this process shares its ports is decided once,
when a worker starts (`share_ports`), before any listener opens; every listener of the router
(AMQP, MQTT, the mesh's, the status endpoint's) opens through this module so that none is
forgotten.

A leaf module (trio and the standard library only), beside router.config, so that the edges
and the mesh may use it.
"""

from __future__ import annotations

import socket
import ssl

import trio

_shared = False


def share_ports() -> None:
    """From now on this process's listeners share their ports with other processes that say
    the same (SO_REUSEPORT): for a worker of `--workers`, before its router starts."""
    global _shared
    _shared = True


def ports_shared() -> bool:
    return _shared


async def open_tcp_listeners(port: int, host: str) -> list[trio.SocketListener]:
    """`trio.open_tcp_listeners`, with SO_REUSEPORT in a worker."""
    if not _shared:
        return await trio.open_tcp_listeners(port, host=host)
    addresses = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                              flags=socket.AI_PASSIVE)
    listeners: list[trio.SocketListener] = []
    try:
        for family, kind, proto, _, sockaddr in addresses:
            listeners.append(await _shared_listener(family, kind, proto, sockaddr))
    except BaseException:
        for listener in listeners:
            await listener.aclose()
        raise
    return listeners


async def _shared_listener(family: int, kind: int, proto: int,
                           sockaddr: tuple) -> trio.SocketListener:
    sock = trio.socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:  # as trio does: one socket per address family
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        await sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


async def open_ssl_over_tcp_listeners(port: int, context: ssl.SSLContext, host: str, *,
                                      https_compatible: bool = False) -> list[trio.SSLListener]:
    """`trio.open_ssl_over_tcp_listeners`, with SO_REUSEPORT in a worker."""
    tcp = await open_tcp_listeners(port, host)
    return [trio.SSLListener(listener, context, https_compatible=https_compatible)
            for listener in tcp]

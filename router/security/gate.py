"""What both client edges do with a new connection before its protocol starts (docs/security.md):
the connection limits, and the TLS handshake of `--amqps` / `--mqtts`, run first with a
deadline. A refusal or failure is one log line."""

from __future__ import annotations

import logging
from typing import Any

import trio

HANDSHAKE_TIMEOUT = 10.0  # a client that stalls in the TLS handshake is closed after it


async def tls_handshake(stream: trio.SSLStream, peer: str, log: logging.Logger) -> bool:
    """Whether the handshake with `peer` succeeded. A plain client at a TLS port, garbage, an
    untrusted or missing client certificate, or silence past the deadline: False, logged."""
    with trio.move_on_after(HANDSHAKE_TIMEOUT):
        try:
            await stream.do_handshake()
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            log.warning("connection %s: TLS handshake failed: %s", peer, err.__cause__ or err)
            return False
    log.warning("connection %s: no TLS handshake within %g s; closed", peer,
                HANDSHAKE_TIMEOUT)
    return False


def certificate_user(stream: Any) -> str | None:
    """The common name of the verified certificate a TLS client presented (`stream`: a
    handshaken trio.SSLStream), or None without one."""
    try:
        cert = stream.getpeercert()
    except (ValueError, AttributeError):
        return None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


def admitted(node: Any, peer: str, log: logging.Logger) -> bool:
    """Whether `--max-connections` and `--max-connections-per-host` let the router serve a
    new connection from `peer`; if not, it is logged (and counted) and to be closed."""
    cfg = node.config
    why = node.policy.admit(peer, node.connections, cfg.max_connections,
                            cfg.max_connections_per_host)
    if why is None:
        return True
    log.warning("connection %s: refused: %s", peer, why)
    return False

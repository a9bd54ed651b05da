"""The TLS handshake of a client listener (`--amqps`, `--mqtts`; docs/security.md), shared by
the edges: run first, with a deadline, and a failure is one log line."""

from __future__ import annotations

import logging

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

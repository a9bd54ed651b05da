"""Link set-up (sans-IO): HELLO both ways, then PROOF both ways, or REFUSE.

Each side proves it holds the cluster secret with HMAC-SHA256(secret, b"exactmesh-proof\\0" +
peer_nonce + own_nonce + own_router_id). The peer's fresh nonce makes a recorded proof
useless on another connection; the sender's own router id at the end means a proof we send
can never be reflected back at us as the peer's, since a peer with our own id is refused.
The secret itself never crosses the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from .frames import PROTOCOL_VERSION

PROOF_LABEL = b"exactmesh-proof\0"
NONCE_SIZE = 16


def proof_mac(secret: bytes, peer_nonce: bytes, own_nonce: bytes, own_router_id: str) -> bytes:
    msg = PROOF_LABEL + peer_nonce + own_nonce + own_router_id.encode()
    return hmac.new(secret, msg, hashlib.sha256).digest()


class Handshake:
    """One side of one link's handshake. Feed it the peer's frames until `done` or `error`;
    send whatever `start` and `on_frame` return. Frames are assumed validated by
    `FrameDecoder` (so their fields have the right types)."""

    def __init__(
        self, me: str, inc: int, cluster: str, secret: bytes, nonce: bytes | None = None
    ) -> None:
        self.me = me
        self.inc = inc
        self.cluster = cluster
        self._secret = secret
        self.nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_SIZE)
        self._peer_nonce: bytes | None = None
        self._peer: str | None = None
        self._peer_inc: int | None = None
        self._done = False
        self._error: str | None = None

    @property
    def done(self) -> bool:
        """Both HELLOs exchanged and the peer's PROOF checked out (ours is on its way)."""
        return self._done

    @property
    def peer(self) -> str | None:
        """The router id from the peer's HELLO; authenticated only once `done`."""
        return self._peer

    @property
    def peer_inc(self) -> int | None:
        return self._peer_inc

    @property
    def error(self) -> str | None:
        """Why the handshake failed (ours or the peer's refusal), or None."""
        return self._error

    def start(self) -> list[dict]:
        return [{
            "t": "HELLO",
            "router": self.me,
            "inc": self.inc,
            "version": PROTOCOL_VERSION,
            "cluster": self.cluster,
            "nonce": self.nonce,
        }]

    def on_frame(self, frame: dict) -> list[dict]:
        """The frames to send in answer to the peer's `frame`."""
        if self._error is not None:
            return []  # already failed: whatever else arrives changes nothing
        if self._done:
            raise RuntimeError("the handshake is complete; link frames go elsewhere")
        kind = frame["t"]
        if kind == "REFUSE":
            self._error = f"refused by the peer: {frame['reason']}"
            return []
        if self._peer_nonce is None:
            if kind != "HELLO":
                return self._refuse(f"unexpected {kind} frame before the peer's HELLO")
            return self._on_hello(frame)
        if kind != "PROOF":
            return self._refuse(f"unexpected {kind} frame during the handshake")
        expected = proof_mac(self._secret, self.nonce, self._peer_nonce, self._peer or "")
        if not hmac.compare_digest(frame["mac"], expected):
            return self._refuse("bad proof: the peer does not hold our cluster secret")
        self._done = True
        return []

    def _on_hello(self, hello: dict) -> list[dict]:
        self._peer = hello["router"]
        self._peer_inc = hello["inc"]
        # Version first: a peer speaking another version may mean other things by the rest.
        if hello["version"] != PROTOCOL_VERSION:
            return self._refuse(
                f"version mismatch: we speak mesh protocol {PROTOCOL_VERSION}, "
                f"the peer speaks {hello['version']}"
            )
        if hello["cluster"] != self.cluster:
            theirs = hello["cluster"][:64]
            return self._refuse(
                f"cluster mismatch: we are in {self.cluster!r}, the peer in {theirs!r}"
            )
        if not hello["router"]:
            return self._refuse("the peer's HELLO has an empty router id")
        if hello["router"] == self.me:
            return self._refuse(f"talking to itself: the peer's router id is ours ({self.me!r})")
        if len(hello["nonce"]) != NONCE_SIZE:
            return self._refuse(
                f"the peer's nonce has {len(hello['nonce'])} bytes, not {NONCE_SIZE}"
            )
        self._peer_nonce = hello["nonce"]
        return [{"t": "PROOF", "mac": proof_mac(self._secret, hello["nonce"], self.nonce, self.me)}]

    def _refuse(self, reason: str) -> list[dict]:
        self._error = reason
        return [{"t": "REFUSE", "reason": reason}]

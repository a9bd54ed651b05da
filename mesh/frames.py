"""Mesh framing (sans-IO): a 4-byte big-endian length, then that many bytes of MessagePack.

The body is a map whose key "t" names the frame type; `FRAME_TYPES` lists the fields each
type must carry. Unknown extra fields are allowed so that a newer router can add fields
without breaking an older one; an unknown type is an error, since the receiver could not
honour whatever the sender meant by it. Every way a byte stream can be wrong surfaces as
`FrameError`, so a link can catch exactly that, log it and close, and nothing else leaks.
"""

from __future__ import annotations

from typing import Any

import msgpack

PROTOCOL_VERSION = 1

HEADER_SIZE = 4
_MAX_LENGTH = 2**32 - 1  # what 4 length bytes can say

# type name -> {field: Python type}. `bool` fields must be real booleans and `int` fields must
# not be booleans (msgpack keeps the two apart; Python's isinstance would not).
FRAME_TYPES: dict[str, dict[str, type]] = {
    "HELLO": {"router": str, "inc": int, "version": int, "cluster": str, "nonce": bytes},
    "PROOF": {"mac": bytes},
    "REFUSE": {"reason": str},
    "PING": {},
    "LSA": {"origin": str, "inc": int, "ver": int, "nbrs": dict},
    "SUBS": {
        "origin": str, "inc": int, "ver": int, "full": bool, "add": dict, "remove": list,
    },
    "DIGEST": {"entries": dict},
    "PULL": {"origins": list},
    "DATA": {"src": str, "sinc": int, "dests": dict, "item": list},
    "ACK": {"src": str, "sinc": int, "dst": str, "dinc": int, "upto": int},
}


class FrameError(ValueError):
    """A frame that breaks the framing contract; str() says what was wrong in one sentence.

    `frames` holds the good frames a `FrameDecoder.feed` call decoded before the bad one."""

    def __init__(self, message: str, frames: list[dict] | None = None) -> None:
        super().__init__(message)
        self.frames: list[dict] = frames if frames is not None else []


def _type_name(value: Any) -> str:
    return type(value).__name__


def validate(frame: Any, *, outgoing: bool = False) -> dict:
    """Check `frame` against `FRAME_TYPES` and return it; raise `FrameError` if it is wrong.

    `outgoing` also accepts tuples for list fields (msgpack sends both as arrays)."""
    if not isinstance(frame, dict):
        raise FrameError(f"a frame must be a map, not {_type_name(frame)}")
    kind = frame.get("t")
    if kind is None:
        raise FrameError('the frame has no "t" (frame type) field')
    if not isinstance(kind, str):
        raise FrameError(f'the frame type "t" must be a string, not {_type_name(kind)}')
    fields = FRAME_TYPES.get(kind)
    if fields is None:
        raise FrameError(f"unknown frame type {kind[:40]!r}")
    for name, expected in fields.items():
        if name not in frame:
            raise FrameError(f"{kind} frame lacks the required field {name!r}")
        value = frame[name]
        if expected is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif expected is list and outgoing:
            ok = isinstance(value, list | tuple)
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise FrameError(
                f"{kind} field {name!r} must be {expected.__name__}, not {_type_name(value)}"
            )
    return frame


def encode(frame: dict) -> bytes:
    """The wire bytes of `frame`; raises `FrameError` if it is not a valid frame (a bug in the
    sender is better caught here than as a protocol error that closes the link)."""
    validate(frame, outgoing=True)
    try:
        body = msgpack.packb(frame, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"{frame['t']} frame cannot be encoded: {exc}") from None
    if len(body) > _MAX_LENGTH:
        raise FrameError(f"{frame['t']} frame of {len(body)} bytes is too long to frame")
    return len(body).to_bytes(HEADER_SIZE, "big") + body


class FrameDecoder:
    """Turns a byte stream into validated frames. After a `FrameError` the stream is out of
    step and the link must be closed: every later `feed` raises the same error again."""

    def __init__(self, max_frame: int) -> None:
        if max_frame < 1:
            raise ValueError("max_frame must be positive")
        self.max_frame = max_frame
        self._buf = bytearray()
        self._error: FrameError | None = None

    def feed(self, data: bytes) -> list[dict]:
        """Every complete frame that `data` finishes, in order. On a bad frame this raises
        `FrameError` whose `frames` attribute holds the good frames that came before it."""
        if self._error is not None:
            raise FrameError(str(self._error))
        buf = self._buf
        buf += data
        frames: list[dict] = []
        pos = 0
        end = len(buf)
        try:
            while end - pos >= HEADER_SIZE:
                length = int.from_bytes(buf[pos:pos + HEADER_SIZE], "big")
                # Checked on the header alone: an oversize body is never waited for.
                if length > self.max_frame:
                    raise FrameError(
                        f"frame of {length} bytes exceeds the maximum frame size "
                        f"of {self.max_frame} bytes"
                    )
                if end - pos - HEADER_SIZE < length:
                    break
                start = pos + HEADER_SIZE
                frames.append(_decode_body(bytes(buf[start:start + length])))
                pos = start + length
        except FrameError as exc:
            exc.frames = frames
            self._error = exc
            buf.clear()
            raise
        del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)


def _decode_body(body: bytes) -> dict:
    # The body is at most max_frame bytes, so bounding every msgpack length by the body's own
    # length (what unpackb does by default; spelled out here) can never reject a frame that
    # fits in max_frame, and a lying length prefix inside cannot make msgpack over-allocate.
    n = len(body)
    try:
        value = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=False,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n // 2,
            max_ext_len=n,
        )
    except Exception as exc:  # msgpack raises ValueError, TypeError and its own kinds
        detail = str(exc) or type(exc).__name__
        raise FrameError(f"frame body of {n} bytes is not valid MessagePack ({detail})") from None
    return validate(value)

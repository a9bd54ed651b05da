"""The server side of AMQP's SASL layer (AMQP 1.0 section 5.3), for logging in with a user
name and password (PLAIN, RFC 4616), as the TLS client certificate's name (EXTERNAL, RFC
4422 appendix A, with --tls-identity-as-username) or as nobody (ANONYMOUS). proton's own SASL server
offers only EXTERNAL and ANONYMOUS without Cyrus, so the router runs this exchange itself,
before the connection's bytes reach proton, which then sees a client that skipped SASL.

Sans-IO: `receive(data)` takes the client's bytes, `out` holds what to send back; once `done`
is set, `user` (None: anonymous) or `refusal` says how it ended, and `rest` holds the bytes
the client sent after the SASL exchange (its AMQP header), which go on to proton.

    client                                   router
      | AMQP 3.1.0.0 (the SASL header) ------->|
      |<------- AMQP 3.1.0.0, sasl-mechanisms --| PLAIN, ANONYMOUS as allowed
      | sasl-init (PLAIN, \\0user\\0password) -->| checked against the password file
      |<---------------------- sasl-outcome ----| 0 ok, 1 auth (and the router closes)
      | AMQP 0.1.0.0, open ... ----------------->| proton from here on
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from proton import Data, DataException, symbol

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MECHANISMS, INIT, OUTCOME = 0x40, 0x41, 0x44
OK, AUTH = 0, 1  # sasl-code (section 5.3.3.6)
MAX_FRAME = 4096  # a sasl-init with a user name and password fits well within this
SASL_FRAME = 1  # frame type (section 5.3.1)

# (user, password) -> why not, or None to let the client in. ANONYMOUS gives (None, None),
# EXTERNAL (the certificate's name, None), PLAIN a password (bytes, maybe empty).
Check = Callable[[str | None, bytes | None], str | None]


class SaslServer:
    def __init__(self, mechanisms: list[str], check: Check, identity: str | None = None) -> None:
        self.mechanisms = mechanisms
        self.check = check
        self.identity = identity  # the verified client certificate's name, for EXTERNAL
        self.out = bytearray()
        self.done = False
        self.user: str | None = None
        self.refusal: str | None = None
        self.skipped = False  # the client sent the AMQP header at once: no SASL at all
        self.checked = False  # the credentials reached `check`
        self.rest = b""
        self._buf = b""
        self._header_seen = False

    def receive(self, data: bytes) -> None:
        if self.done:
            self.rest += data
            return
        self._buf += data
        if not self._header_seen:
            if len(self._buf) < 8:
                return
            header, self._buf = self._buf[:8], self._buf[8:]
            if header == AMQP_HEADER:
                self.skipped, self.done, self.rest = True, True, header + self._buf
                return
            if header != SASL_HEADER:
                self._fail(f"not an AMQP protocol header ({header!r}); use an AMQP 1.0 client",
                           send=False)
                return
            self._header_seen = True
            self.out += SASL_HEADER + _frame(_described(MECHANISMS, _symbols(self.mechanisms)))
        self._read_init()

    def _read_init(self) -> None:
        if len(self._buf) < 8:
            return
        size, doff, kind = struct.unpack(">IBB", self._buf[:6])
        if size > MAX_FRAME or size < 8 or doff < 2 or kind != SASL_FRAME:
            self._fail(f"a SASL frame of {size} bytes, data offset {doff}, type {kind}: not "
                       f"a sasl-init this router takes (one of at most {MAX_FRAME} bytes)")
            return
        if len(self._buf) < size:
            return
        body, self._buf = self._buf[doff * 4:size], self._buf[size:]
        try:
            mechanism, response = _init_fields(body)
            if mechanism not in self.mechanisms:
                self._fail(f"mechanism {mechanism!r} is not offered here (offered: "
                           f"{', '.join(self.mechanisms) or 'none'})")
                return
            if mechanism == "EXTERNAL":
                user, password = _external(response, self.identity), None
            else:
                user, password = _credentials(mechanism, response)
        except (ValueError, KeyError, IndexError, TypeError, DataException) as err:
            self._fail(f"malformed sasl-init ({err or type(err).__name__})")
            return
        self.checked = True  # the verdict is the check's (counted there), not a bad frame's
        why = self.check(user, password)
        if why is not None:
            self._fail(why)
            return
        self.user = user
        self.out += _frame(_described(OUTCOME, [OK]))
        self.done, self.rest = True, self._buf

    def _fail(self, why: str, send: bool = True) -> None:
        self.refusal = why
        self.done = True
        if send and self._header_seen:
            self.out += _frame(_described(OUTCOME, [AUTH]))


def _external(response: bytes, identity: str | None) -> str:
    """EXTERNAL: the user is the certificate's; the response may only repeat that name."""
    if identity is None:
        raise ValueError("EXTERNAL without a verified client certificate")
    asked = response.decode("utf-8")
    if asked and asked != identity:
        raise ValueError(f"EXTERNAL asks to act as {asked!r}, but the client certificate "
                         f"names {identity!r}")
    return identity


def _credentials(mechanism: str, response: bytes) -> tuple[str | None, bytes | None]:
    if mechanism == "ANONYMOUS":
        return None, None
    # PLAIN (RFC 4616): [authzid] NUL authcid NUL passwd
    parts = response.split(b"\x00")
    if len(parts) != 3 or not parts[1]:
        raise ValueError("a PLAIN response is [authzid] NUL user NUL password")
    return parts[1].decode("utf-8"), parts[2]


def _init_fields(body: bytes) -> tuple[str, bytes]:
    data = Data()
    data.decode(body)
    data.rewind()
    data.next()
    value = data.get_object()
    if int(value.descriptor) != INIT:
        raise ValueError(f"performative 0x{int(value.descriptor):x}, not sasl-init")
    fields = [*list(value.value), None, None]
    mechanism, response = fields[0], fields[1]
    if not isinstance(mechanism, str):
        raise ValueError("no mechanism")
    return str(mechanism), bytes(response or b"")


def _symbols(names: list[str]) -> list[object]:
    return [names]  # the one field: an array of symbols


def _described(code: int, fields: list[object]) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_list()
    data.enter()
    for field in fields:
        if isinstance(field, list):
            data.put_array(False, Data.SYMBOL)
            data.enter()
            for name in field:
                data.put_symbol(symbol(name))
            data.exit()
        else:
            data.put_ubyte(int(field))  # type: ignore[call-overload]
    data.exit()
    data.exit()
    return data.encode()


def _frame(body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, SASL_FRAME, 0) + body

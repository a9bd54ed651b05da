"""A sans-IO MQTT 3.1.1 and 5.0 codec: bytes in, packets out; packets in, bytes out.

``Decoder`` turns the bytes a peer sends into packets (``mqtt_edge.packets``), holding a
partial packet between calls, and validates them strictly: a packet that breaks a rule of the
specification raises ``ProtocolError``, whose ``reason_code`` is the MQTT 5.0 reason code the
server sends before closing the connection and whose ``reply()`` gives the bytes to send (a
CONNACK or DISCONNECT, depending on the version and on how far the connection got).  A decoder
that raised is finished: feeding it again raises ``DecoderClosedError``.

``encode(packet, version)`` turns a packet into bytes for MQTT 3.1.1 (version 4) or 5.0
(version 5).  It checks what it must to produce a well-formed packet and raises ``ValueError``
for a packet it cannot encode; it does not re-check everything the decoder does (topic syntax,
for instance).  Encoding for 3.1.1 leaves out what 3.1.1 cannot carry and loses nothing by
leaving out: properties and success reason codes (below 0x80), as an MQTT 5 server does when
it forwards to a 3.1.1 client; a failure reason code 3.1.1 cannot express raises ``ValueError``.

Section numbers in comments are MQTT 5.0 (OASIS Standard, 7 March 2019) unless marked 3.1.1
(OASIS Standard, 29 October 2014); bracketed ones such as [MQTT-3.3.1-4] are the normative
statement identifiers of the version named (5.0 if none).
"""

from __future__ import annotations

import struct
from typing import Any, Literal

from router.core.topics import TopicError, validate_filter, validate_topic

from . import reason_codes as rcs
from .packets import (
    EMPTY_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    make_ack,
    make_publish,
)
from .properties import ALLOWED, PROPERTIES, WILL, PropertyType
from .reason_codes import ReasonCode, reason_name

__all__ = [
    "MAX_PACKET_SIZE",
    "MQTT_5",
    "MQTT_311",
    "Decoder",
    "DecoderClosedError",
    "ProtocolError",
    "encode",
]

#: Protocol level byte of MQTT 3.1.1 (3.1.1 section 3.1.2.2) and of MQTT 5.0 (section 3.1.2.2).
MQTT_311 = 4
MQTT_5 = 5
_VERSIONS = (MQTT_311, MQTT_5)

#: Largest Variable Byte Integer (section 1.5.5), so the largest remaining length.
MAX_VARINT = 268_435_455
#: Largest packet: one type byte, four remaining-length bytes, and the largest remaining length.
MAX_PACKET_SIZE = 1 + 4 + MAX_VARINT

_MALFORMED = ReasonCode.MALFORMED_PACKET.value
_PROTOCOL = ReasonCode.PROTOCOL_ERROR.value
_TOO_LARGE = ReasonCode.PACKET_TOO_LARGE.value
_UNSUPPORTED = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION.value
_BAD_CLIENT_ID = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID.value
_TOPIC_NAME_INVALID = ReasonCode.TOPIC_NAME_INVALID.value
_TOPIC_FILTER_INVALID = ReasonCode.TOPIC_FILTER_INVALID.value
_PAYLOAD_FORMAT = ReasonCode.PAYLOAD_FORMAT_INVALID.value

_T = PacketType
_NAMES: dict[int, str] = {t.value: t.name for t in PacketType}

# Section 2.1.3 table 2-2 (3.1.1 section 2.2.2 table 2.2): the flags bits 3-0 of the fixed
# header for every packet type but PUBLISH, whose bits are DUP, QoS and RETAIN.
# "Where a flag bit is marked as Reserved, it is reserved for future use and MUST be set to
# the value listed" and "If invalid flags are received it is a Malformed Packet"
# [MQTT-2.1.3-1] (3.1.1: [MQTT-2.2.2-1], [MQTT-2.2.2-2]).
_FIXED_FLAGS: dict[int, int] = {t: 0 for t in PacketType}
_FIXED_FLAGS[_T.PUBREL] = _FIXED_FLAGS[_T.SUBSCRIBE] = _FIXED_FLAGS[_T.UNSUBSCRIBE] = 0b0010

# The packet types each side sends (section 2.1.2 table 2-1, "Direction of flow").
_FROM_CLIENT = frozenset(
    {
        _T.CONNECT, _T.PUBLISH, _T.PUBACK, _T.PUBREC, _T.PUBREL, _T.PUBCOMP, _T.SUBSCRIBE,
        _T.UNSUBSCRIBE, _T.PINGREQ, _T.DISCONNECT, _T.AUTH,
    }
)  # fmt: skip
_FROM_SERVER = frozenset(
    {
        _T.CONNACK, _T.PUBLISH, _T.PUBACK, _T.PUBREC, _T.PUBREL, _T.PUBCOMP, _T.SUBACK,
        _T.UNSUBACK, _T.PINGRESP, _T.DISCONNECT, _T.AUTH,
    }
)  # fmt: skip

_REF_UTF8 = "[MQTT-1.5.4-1] (3.1.1: [MQTT-1.5.3-1])"
_REF_NUL = "[MQTT-1.5.4-2] (3.1.1: [MQTT-1.5.3-2])"


class ProtocolError(Exception):
    """A packet the peer sent breaks the MQTT specification; the connection must close.

    ``reason_code`` is the MQTT 5.0 reason code for it (0x81 Malformed Packet, 0x82 Protocol
    Error, 0x84 Unsupported Protocol Version, 0x85 Client Identifier not valid, 0x8F Topic
    Filter invalid, 0x90 Topic Name invalid, 0x95 Packet too large, 0x99 Payload format
    invalid), also for a 3.1.1 connection, where it only tells what kind of error it was.
    ``message`` (also ``str(error)``) says what was wrong, in which packet and where.

    ``version`` is the connection's protocol level (4 or 5) if it was known, ``None`` if not
    (the CONNECT was unreadable or asked for another level).  ``in_connect`` is true when the
    error is in the first packet the decoder expects (CONNECT on a server, CONNACK on a client).
    ``packet_type`` is the type of the offending packet (``None`` if its first byte is not one).
    ``packets`` holds the packets decoded from the same ``receive()`` call before the error.

    ``reply()`` returns the bytes the server sends before it closes the connection.
    """

    def __init__(
        self,
        reason_code: int,
        message: str,
        *,
        version: int | None = None,
        in_connect: bool = False,
        packet_type: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message
        self.version = version
        self.in_connect = in_connect
        self.packet_type = packet_type
        self.packets: list[Packet | int] = []  # decoded before the fault
        # Where in the decoder's buffer the fault is, turned into a packet offset by Decoder.
        self._pos: int | None = None

    def __str__(self) -> str:
        return f"{reason_name(self.reason_code)}: {self.message}"

    def reply(self, *, connack_sent: bool | None = None, reason_string: bool = False) -> bytes:
        """The bytes a server sends for this error before closing; ``b""`` means close only.

        *connack_sent* says whether the server already sent its CONNACK; by default it is
        taken to have done so unless the error is in the CONNECT itself (pass ``False`` when
        the CONNECT and the offending packet came in the same read and no CONNACK went out).

        - MQTT 5.0 before CONNACK: a CONNACK with the reason code (section 3.2.2.2; a server
          "MUST NOT send a DISCONNECT until after it has sent a CONNACK", section 3.14);
          after: a DISCONNECT with it (section 4.13.1).  With *reason_string*, the message
          goes along as a Reason String property (section 3.14.2.2.3).
        - MQTT 3.1.1: CONNACK return code 0x01 for an unsupported protocol level
          [MQTT-3.1.2-2] and 0x02 for a rejected client identifier [MQTT-3.1.3-8],
          [MQTT-3.1.3-9]; otherwise nothing: the server closes the connection without a
          CONNACK [MQTT-3.1.4-1], and 3.1.1 has no server DISCONNECT (section 3.14).
        - Unknown level (``version`` is ``None``): a CONNACK in the 3.1.1 layout with return
          code 0x01 if the level is unsupported (MQTT 3.1 and older clients read that layout,
          and 5.0 section 3.1.2.2 allows answering "Unsupported Protocol Version"), else
          nothing.
        """
        if connack_sent is None:
            connack_sent = not self.in_connect
        code = self.reason_code
        if self.version == MQTT_5:
            props = EMPTY_PROPERTIES
            if reason_string:
                text = self.message if len(self.message) <= 200 else self.message[:197] + "..."
                props = Properties(reason_string=text)
            # A code the packet may not carry (0x8F Topic Filter invalid is no CONNACK code,
            # 0x84 and 0x85 are no DISCONNECT codes) goes as 0x82 Protocol Error.
            if connack_sent:
                if code not in rcs.DISCONNECT_REASON_CODES:
                    code = _PROTOCOL
                return encode(Disconnect(code, props), MQTT_5)
            if code not in rcs.CONNACK_REASON_CODES:
                code = _PROTOCOL
            return encode(ConnAck(False, code, props), MQTT_5)
        if connack_sent:
            return b""
        if code == _UNSUPPORTED or (self.version == MQTT_311 and code == _BAD_CLIENT_ID):
            return encode(ConnAck(False, code), MQTT_311)
        return b""


class DecoderClosedError(Exception):  # not RuntimeError: mypyc compiles this module
    """``Decoder.receive`` was called again after it raised ``ProtocolError``."""


def _fail(code: int, message: str, pos: int | None = None) -> ProtocolError:
    error = ProtocolError(code, message)
    error._pos = pos
    return error


def _overrun(what: str, pos: int, need: int, end: int, container: str = "packet") -> ProtocolError:
    have = max(end - pos, 0)
    return _fail(
        _MALFORMED,
        f"the {what} needs {need} byte(s) but only {have} remain in the {container} "
        f"(the remaining length or property length is shorter than the fields)",
        pos,
    )


# --- readers: each takes (data, pos, end, ...) and returns (value, new pos) -----------------


def _read_byte(data: bytes, pos: int, end: int, what: str, container: str = "packet") -> int:
    if pos >= end:
        raise _overrun(what, pos, 1, end, container)
    return data[pos]


def _read_u16(data: bytes, pos: int, end: int, what: str, container: str = "packet") -> int:
    # Section 1.5.2: Two Byte Integer, big-endian.
    if pos + 2 > end:
        raise _overrun(what, pos, 2, end, container)
    return (data[pos] << 8) | data[pos + 1]


def _read_varint(
    data: bytes, pos: int, end: int, what: str, container: str = "packet"
) -> tuple[int, int]:
    """Section 1.5.5 Variable Byte Integer, at most four bytes, minimally encoded
    [MQTT-1.5.5-1] (Variable Byte Integers other than the remaining length exist only in 5.0)."""
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _overrun(what, pos, 1, end, container)
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and pos - start > 1:
                raise _fail(
                    _MALFORMED,
                    f"the {what} is encoded in {pos - start} bytes where fewer would do; a "
                    f"Variable Byte Integer must use the minimum number of bytes [MQTT-1.5.5-1]",
                    start,
                )
            return value, pos
        shift += 7
        if shift == 28:
            raise _fail(
                _MALFORMED,
                f"the {what} is a Variable Byte Integer longer than 4 bytes (section 1.5.5)",
                start,
            )


def _bad_string(raw: bytes, what: str, start: int) -> ProtocolError:
    """The error for *raw*, the bytes of a string at *start*, that is not a valid MQTT string:
    ill-formed UTF-8 (which includes encoded surrogates; Python's strict decoder refuses them)
    or U+0000."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _fail(
            _MALFORMED,
            f"the {what} is not well-formed UTF-8 ({exc.reason} at byte {exc.start} of the "
            f"string, {raw[exc.start : exc.start + 4].hex(' ')}); MQTT strings must be "
            f"well-formed UTF-8 without the surrogates U+D800-U+DFFF {_REF_UTF8}",
            start + exc.start,
        )
    index = raw.index(0)
    return _fail(
        _MALFORMED,
        f"the {what} contains the null character U+0000 at byte {index} of the string, "
        f"which MQTT strings must not include {_REF_NUL}",
        start + index,
    )


def _read_str(
    data: bytes, pos: int, end: int, what: str, container: str = "packet"
) -> tuple[str, int]:
    """Section 1.5.4 UTF-8 Encoded String (3.1.1 section 1.5.3): two-byte length, then UTF-8."""
    start = pos + 2
    if start > end:
        raise _overrun(f"length of the {what}", pos, 2, end, container)
    stop = start + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise _overrun(what, start, stop - start, end, container)
    raw = data[start:stop]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad_string(raw, what, start) from None
    if "\x00" in text:
        raise _bad_string(raw, what, start)
    return text, stop


def _read_binary(
    data: bytes, pos: int, end: int, what: str, container: str = "packet"
) -> tuple[bytes, int]:
    """Section 1.5.6 Binary Data (3.1.1: section 3.1.3.5 password): two-byte length, bytes."""
    start = pos + 2
    if start > end:
        raise _overrun(f"length of the {what}", pos, 2, end, container)
    stop = start + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise _overrun(what, start, stop - start, end, container)
    return data[start:stop], stop


# Property types as plain names for the dispatch below, and the words for each property in
# messages (built once, not per property read).
_UTF8 = PropertyType.UTF8
_BYTE = PropertyType.BYTE
_FOUR = PropertyType.FOUR_BYTE_INT
_TWO = PropertyType.TWO_BYTE_INT
_VARINT = PropertyType.VAR_INT
_BINARY = PropertyType.BINARY
_WHAT = {ident: f"{spec.title} property" for ident, spec in PROPERTIES.items()}
_PAIR_NAME = "name of a User Property"
_PAIR_VALUE = "value of a User Property"
_IN_BLOCK = "property block"
_NAME = {ident: spec.name for ident, spec in PROPERTIES.items()}


def _read_properties(
    data: bytes, pos: int, end: int, kind: int, where: str
) -> tuple[Properties, int]:
    """Section 2.2.2: a Property Length, then properties, each allowed in *kind*; returns
    them and the position after them."""
    props, pos, _ = _read_properties_seen(data, pos, end, kind, where)
    return props, pos


_NONE_SEEN: frozenset[int] = frozenset()


def _read_properties_seen(
    data: bytes, pos: int, end: int, kind: int, where: str
) -> tuple[Properties, int, set[int] | frozenset[int]]:
    """``_read_properties``, also returning the identifiers present (cheaper to test than
    reading an absent property, which goes through ``Properties.__getattr__``)."""
    if pos >= end:
        raise _overrun(f"property length of the {where}", pos, 1, end)
    length = data[pos]
    if length == 0:
        return EMPTY_PROPERTIES, pos + 1, _NONE_SEEN
    if length < 0x80:
        pos += 1
    else:
        length, pos = _read_varint(data, pos, end, f"property length of the {where}")
    stop = pos + length
    if stop > end:
        raise _fail(
            _MALFORMED,
            f"the property length of the {where} is {length} bytes but only {end - pos} "
            f"bytes remain in the packet (section 2.2.2.1)",
            pos,
        )
    allowed = ALLOWED[kind]
    # name -> value, in the order first seen; the two repeatable properties collect into lists
    # that become tuples at the end.  *ordered*: identifiers came in increasing order, so the
    # names need no sorting (senders usually write them so).
    values: dict[str, Any] = {}
    seen: set[int] = set()
    user: list[tuple[str, str]] = []
    sub_ids: list[int] = []
    ordered = True
    last = 0
    while pos < stop:
        at = pos
        ident = data[pos]
        spec = allowed.get(ident)
        if spec is None:
            # Section 2.2.2.2: an identifier not valid for the packet type is malformed.  All
            # identifiers are below 0x80, so a first byte with the top bit set (a multi-byte
            # Variable Byte Integer) can be no identifier either.
            known = PROPERTIES.get(ident)
            if known is not None:
                detail = f"the property {known.title} (0x{ident:02X}) is not allowed in the {where}"
            else:
                detail = f"0x{ident:02X} is not an MQTT 5 property identifier"
            raise _fail(_MALFORMED, f"{detail} (section 2.2.2.2)", at)
        pos += 1
        kind_of = spec.type
        value: Any
        if kind_of is _UTF8:
            value, pos = _read_str(data, pos, stop, _WHAT[ident], _IN_BLOCK)
        elif kind_of is _BYTE:
            if pos >= stop:
                raise _overrun(_WHAT[ident], pos, 1, stop, _IN_BLOCK)
            value = data[pos]
            pos += 1
        elif kind_of is _FOUR:
            if pos + 4 > stop:
                raise _overrun(_WHAT[ident], pos, 4, stop, _IN_BLOCK)
            value = int.from_bytes(data[pos : pos + 4], "big")
            pos += 4
        elif kind_of is _TWO:
            if pos + 2 > stop:
                raise _overrun(_WHAT[ident], pos, 2, stop, _IN_BLOCK)
            value = (data[pos] << 8) | data[pos + 1]
            pos += 2
        elif kind_of is _VARINT:
            value, pos = _read_varint(data, pos, stop, _WHAT[ident], _IN_BLOCK)
        elif kind_of is _BINARY:
            value, pos = _read_binary(data, pos, stop, _WHAT[ident], _IN_BLOCK)
        else:  # UTF-8 string pair: User Property
            key, pos = _read_str(data, pos, stop, _PAIR_NAME, _IN_BLOCK)
            val, pos = _read_str(data, pos, stop, _PAIR_VALUE, _IN_BLOCK)
            if not user:
                values["user_properties"] = user
                seen.add(ident)
                if ident < last:
                    ordered = False
                last = ident
            user.append((key, val))
            continue
        check = spec.check
        if check is not None:
            problem = check(value)
            if problem is not None:
                raise _fail(
                    _PROTOCOL,
                    f"the {_WHAT[ident]} (0x{ident:02X}) in the {where} is invalid: {problem} "
                    f"(section {spec.section})",
                    at,
                )
        if spec.repeatable:  # Subscription Identifier
            if not sub_ids:
                values["subscription_identifiers"] = sub_ids
                seen.add(ident)
                if ident < last:
                    ordered = False
                last = ident
            sub_ids.append(value)
            continue
        if ident in seen:
            raise _fail(
                _PROTOCOL,
                f"the {_WHAT[ident]} (0x{ident:02X}) appears more than once in the {where}; "
                f"only User Property and Subscription Identifier may repeat (section "
                f"{spec.section})",
                at,
            )
        seen.add(ident)
        values[_NAME[ident]] = value
        if ident < last:
            ordered = False
        last = ident
    if user:
        values["user_properties"] = tuple(user)
    if sub_ids:
        values["subscription_identifiers"] = tuple(sub_ids)
    return Properties._trusted(values, ordered), stop, seen


def _check_response_topic(props: Properties, where: str, pos: int) -> None:
    # Section 3.3.2.3.5 (and 3.1.3.2.6 for the will): the Response Topic is a Topic Name and
    # must not contain wildcard characters.
    topic = props.response_topic
    if topic is not None:
        try:
            validate_topic(topic)
        except TopicError as exc:
            raise _fail(
                _PROTOCOL,
                f"the Response Topic property of the {where} is not a valid topic name: {exc} "
                f"(section 3.3.2.3.5)",
                pos,
            ) from None


def _check_payload_format(payload: bytes, props: Properties, what: str, pos: int) -> None:
    # Section 3.3.2.3.2 (and 3.1.3.2.3): Payload Format Indicator 1 says the payload is UTF-8;
    # a receiver MAY check it, and answers 0x99 Payload format invalid if it is not.
    if props.payload_format_indicator == 1:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(
                _PAYLOAD_FORMAT,
                f"the {what} is marked as UTF-8 (Payload Format Indicator 1) but is not "
                f"well-formed UTF-8 ({exc.reason} at byte {exc.start}) (section 3.3.2.3.2)",
                pos + exc.start,
            ) from None


def _check_filter(topic_filter: str, v5: bool, where: str, pos: int) -> None:
    """Topic filter syntax (section 4.7) and shared subscription syntax (section 4.8.2,
    [MQTT-4.8.2-1], [MQTT-4.8.2-2]; accepted in 3.1.1 too, as common servers do), via
    router.core.topics."""
    try:
        validate_filter(topic_filter)
    except TopicError as exc:
        section = "4.8.2" if topic_filter.startswith("$share/") else "4.7"
        raise _fail(_TOPIC_FILTER_INVALID, f"in the {where}: {exc} (section {section})",
                    pos) from None


class Decoder:
    """Decodes the bytes one peer sends on one connection into packets.

    ``Decoder(max_packet_size)`` decodes what a client sends to a server (the default role):
    the first packet must be CONNECT [MQTT-3.1.0-1], and its protocol level (4 for 3.1.1, 5
    for 5.0) decides how the rest is read; ``version`` and ``connect`` tell it afterwards.
    ``Decoder(max_packet_size, role="client", version=4 or 5)`` decodes what a server sends
    to a client (the first packet must be CONNACK, or AUTH in 5.0), for tests and clients.

    ``receive(data)`` returns the packets completed by *data* (possibly none) and keeps an
    incomplete one for the next call.  A packet larger than *max_packet_size* (type byte +
    remaining-length bytes + remaining length, as "packet size" in section 1.2) is refused with
    0x95 as soon as its fixed header has arrived, before any of it is buffered; so the decoder
    holds at most *max_packet_size* bytes.  A packet that breaks the specification raises
    ``ProtocolError``; the decoder is then finished and raises ``DecoderClosedError`` if fed
    again.

    *check_payload_format*: check that a PUBLISH or will payload marked as UTF-8 by Payload
    Format Indicator 1 is UTF-8, or refuse it with 0x99 (5.0 only; on by default).

    *plain_acks*: a PUBACK / PUBREC / PUBREL / PUBCOMP of four bytes (reason code 0, no
    properties) comes back as the int ``packet type << 16 | packet id`` (`PLAIN_ACK_SHIFT`),
    not as a packet object. Most packets a busy server decodes are these; building each one
    an object only for the session to read its id back cost the router about a tenth of its
    CPU per QoS 2 message. Off by default: tests and clients get packet objects.
    """

    def __init__(
        self,
        max_packet_size: int = MAX_PACKET_SIZE,
        *,
        role: Literal["server", "client"] = "server",
        version: int | None = None,
        check_payload_format: bool = True,
        plain_acks: bool = False,
    ) -> None:
        if not 2 <= max_packet_size <= MAX_PACKET_SIZE:
            raise ValueError(f"max_packet_size must be 2..{MAX_PACKET_SIZE}, not {max_packet_size}")
        if role == "server":
            if version is not None:
                raise ValueError("a server learns the version from CONNECT; do not pass version")
        elif role == "client":
            if version not in _VERSIONS:
                raise ValueError(f"a client decoder needs version 4 or 5, not {version!r}")
        else:
            raise ValueError(f"role must be 'server' or 'client', not {role!r}")
        self.max_packet_size = max_packet_size
        self.role = role
        self.check_payload_format = check_payload_format
        self.plain_acks = plain_acks
        #: The CONNECT packet, once decoded (server role).
        self.connect: Connect | None = None
        #: The error that finished this decoder, if any.
        self.error: ProtocolError | None = None
        self._version: int | None = version
        self._v5 = version == MQTT_5
        self._server = role == "server"
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 0
        self._offset = 0  # stream offset of the first byte not yet consumed
        self._count = 0  # packets decoded
        self._rl_nonminimal = False
        self._parsers: dict[int, Any] = {}
        self._all_parsers: dict[int, Any] = {
            _T.CONNECT: self._connect,
            _T.CONNACK: self._connack,
            _T.PUBLISH: self._publish,
            _T.PUBACK: self._ack,
            _T.PUBREC: self._ack,
            _T.PUBREL: self._ack,
            _T.PUBCOMP: self._ack,
            _T.SUBSCRIBE: self._subscribe,
            _T.SUBACK: self._suback,
            _T.UNSUBSCRIBE: self._unsubscribe,
            _T.UNSUBACK: self._unsuback,
            _T.PINGREQ: self._empty,
            _T.PINGRESP: self._empty,
            _T.DISCONNECT: self._disconnect,
            _T.AUTH: self._auth,
        }
        self._set_parsers(started=False)

    @property
    def version(self) -> int | None:
        """The protocol level: 4 (MQTT 3.1.1) or 5 (MQTT 5.0); ``None`` before CONNECT."""
        return self._version

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete packet are held."""
        return self._pending_len

    def _set_parsers(self, *, started: bool) -> None:
        """Which packet types may come next: only the opening packet at first, then the
        ones the peer's side sends."""
        if not started:
            if self._server:
                kinds: set[int] = {_T.CONNECT}
            else:
                # The first packet from the server is CONNACK [MQTT-3.2.0-1] (3.1.1: the same
                # number); in 5.0 extended authentication may send AUTH first (section 4.12).
                kinds = {_T.CONNACK, _T.AUTH} if self._v5 else {_T.CONNACK}
        else:
            kinds = set(_FROM_CLIENT if self._server else _FROM_SERVER)
            kinds.discard(_T.CONNECT if self._server else _T.CONNACK)
            if not self._v5:
                kinds.discard(_T.AUTH)
                if not self._server:
                    kinds.discard(_T.DISCONNECT)
        self._parsers = {kind: self._all_parsers[kind] for kind in kinds}

    def _unexpected(self, ptype: int) -> ProtocolError:
        """The error for a packet type that may not come now."""
        if ptype == 0 or (ptype == 15 and self._version == MQTT_311):
            # Type 0 is reserved in both versions (section 2.1.2; "Forbidden" in 3.1.1), and
            # 15 is reserved in 3.1.1.
            return _fail(
                _MALFORMED, f"packet type {ptype} is reserved and never sent (section 2.1.2)"
            )
        name = _NAMES[ptype]
        if self._server:
            if ptype == _T.CONNECT:
                return _fail(
                    _PROTOCOL,
                    "a second CONNECT on the same connection is a protocol error [MQTT-3.1.0-2]",
                )
            if self.connect is None:
                return _fail(
                    _PROTOCOL,
                    f"the first packet on a connection must be CONNECT, not {name} [MQTT-3.1.0-1]",
                )
            return _fail(
                _PROTOCOL, f"a client does not send {name}; only a server does (section 2.1.2)"
            )
        if ptype == _T.CONNACK:
            return _fail(_PROTOCOL, "a second CONNACK on the same connection is a protocol error")
        if self._count == 0:
            return _fail(
                _PROTOCOL,
                f"the first packet from a server must be CONNACK, not {name} [MQTT-3.2.0-1]",
            )
        if ptype == _T.DISCONNECT:
            return _fail(_PROTOCOL, "an MQTT 3.1.1 server does not send DISCONNECT (section 3.14)")
        return _fail(
            _PROTOCOL, f"a server does not send {name}; only a client does (section 2.1.2)"
        )

    def receive(self, data: bytes | bytearray | memoryview) -> list[Packet | int]:
        """Take *data*, the next bytes from the peer; return the packets it completes (a
        plain acknowledgement as an int when the decoder was made with *plain_acks*)."""
        if self.error is not None:
            raise DecoderClosedError(
                f"this decoder already raised ProtocolError ({self.error}); the connection must "
                f"be closed, not read from again"
            )
        if not data:
            return []
        if type(data) is not bytes:
            data = bytes(data)
        if self._pending:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._pending_len < self._need:
                return []
            data = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
        packets: list[Packet | int] = []
        plain = self.plain_acks
        pos = 0
        n = len(data)
        need = 0
        ptype: int | None = None
        parsers = self._parsers
        try:
            while pos < n:
                first = data[pos]
                ptype = first >> 4
                # The common acknowledgement (PUBACK/PUBREC/PUBREL/PUBCOMP, remaining length
                # 2: no reason code, no properties) short-cut; anything unusual about it
                # (packet id 0, not allowed here yet) takes the full path below.
                if first in _PLAIN_ACK_FIRST and pos + 3 < n and data[pos + 1] == 2 \
                        and ptype in parsers:
                    packet_id = (data[pos + 2] << 8) | data[pos + 3]
                    if packet_id:
                        packets.append((ptype << PLAIN_ACK_SHIFT) | packet_id if plain else
                                       make_ack(_ACK_CLASSES[ptype], packet_id, 0,
                                                EMPTY_PROPERTIES))
                        self._count += 1
                        pos += 4
                        ptype = None
                        continue
                parse = parsers.get(ptype)
                if parse is None:
                    raise self._unexpected(ptype)
                flags = first & 0x0F
                if ptype != 3 and flags != _FIXED_FLAGS[ptype]:
                    raise _fail(
                        _MALFORMED,
                        f"the flags (bits 3-0 of the first byte) are {flags:04b} but must be "
                        f"{_FIXED_FLAGS[ptype]:04b} for {_NAMES[ptype]} [MQTT-2.1.3-1] "
                        f"(3.1.1: [MQTT-2.2.2-2])",
                        pos,
                    )
                # Remaining length (section 2.1.4; 3.1.1 section 2.2.3): a Variable Byte
                # Integer of at most four bytes.
                i = pos + 1
                if i >= n:
                    need = 2
                    break
                byte = data[i]
                if byte < 0x80:
                    length = byte
                    header = 2
                    nonminimal = False
                else:
                    length = byte & 0x7F
                    shift = 7
                    complete = False
                    while True:
                        i += 1
                        if i >= n:
                            break
                        byte = data[i]
                        length |= (byte & 0x7F) << shift
                        if byte < 0x80:
                            complete = True
                            break
                        shift += 7
                        if shift == 28:
                            raise _fail(
                                _MALFORMED,
                                "the remaining length runs over 4 bytes; the largest remaining "
                                "length, 268435455, takes 4 (section 2.1.4; 3.1.1 section "
                                "2.2.3)",
                                pos + 1,
                            )
                    if not complete:
                        need = i - pos + 1
                        break
                    header = i + 1 - pos
                    nonminimal = byte == 0
                total = header + length
                if total > self.max_packet_size:
                    raise _fail(
                        _TOO_LARGE,
                        f"the packet is {total} bytes (remaining length {length}), over this "
                        f"server's maximum packet size of {self.max_packet_size} bytes "
                        f"(section 3.1.2.11.4, 3.2.2.3.6)",
                    )
                end = pos + total
                if end > n:
                    need = total
                    break
                if nonminimal:
                    self._rl_nonminimal = True
                    if self._v5:
                        raise _fail(
                            _MALFORMED,
                            f"the remaining length {length} is encoded in {header - 1} bytes "
                            f"where fewer would do [MQTT-1.5.5-1]",
                            pos + 1,
                        )
                packets.append(parse(first, data, pos + header, end))
                self._count += 1
                if parsers is not self._parsers:  # the opening packet changed the state
                    parsers = self._parsers
                pos = end
                ptype = None
        except ProtocolError as error:
            self._finish(error, ptype, pos, packets)
            raise
        self._offset += pos
        if pos < n:
            self._pending = [data[pos:] if pos else data]
            self._pending_len = n - pos
            self._need = need if need > self._pending_len else self._pending_len + 1
        return packets

    def _finish(
        self, error: ProtocolError, ptype: int | None, start: int, packets: list[Packet | int]
    ) -> None:
        """Complete *error* with where it happened and remember that the decoder is done."""
        if ptype is None or not 1 <= ptype <= 15:
            what = "packet" if ptype is None else f"type-{ptype} packet"
        else:
            what = f"{_NAMES[ptype]} packet"
        where = f"{what} at byte {self._offset + start} of the stream"
        if error._pos is not None and error._pos > start:
            where += f" (byte {error._pos - start} of the packet)"
        error.message = f"{where}: {error.message}"
        error.args = (error.message,)
        if error.version is None:
            error.version = self._version
        # In the first packet (CONNECT on a server): no CONNACK has gone out yet.
        error.in_connect = self._count == 0
        error.packet_type = ptype
        error.packets = packets
        self.error = error
        self._pending = []
        self._pending_len = 0

    # --- one parser per packet type: (flags, data, start, end) -> packet ---------------------

    def _publish(self, first: int, data: bytes, pos: int, end: int) -> Publish:
        # Section 3.3 (3.1.1 section 3.3).
        flags = first & 0x0F
        qos = (flags >> 1) & 3
        if qos == 3:
            raise _fail(
                _MALFORMED,
                "both QoS bits are set (QoS 3), which a PUBLISH must not have [MQTT-3.3.1-4]",
            )
        dup = flags & 8 != 0
        if dup and not qos:
            raise _fail(
                _PROTOCOL,
                "the DUP flag is set on a QoS 0 PUBLISH; it must be 0 for QoS 0 [MQTT-3.3.1-2]",
            )
        # Topic Name (section 3.3.2.1): a UTF-8 string, inlined here for speed.
        if pos + 2 > end:
            raise _overrun("length of the topic name", pos, 2, end)
        start = pos + 2
        pos = start + ((data[pos] << 8) | data[pos + 1])
        if pos > end:
            raise _overrun("topic name", start, pos - start, end)
        raw = data[start:pos]
        try:
            topic = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad_string(raw, "topic name", start) from None
        if "\x00" in topic:
            raise _bad_string(raw, "topic name", start)
        if "+" in topic or "#" in topic:
            # [MQTT-3.3.2-2]: the Topic Name must not contain wildcard characters.
            try:
                validate_topic(topic)
            except TopicError as exc:
                raise _fail(_TOPIC_NAME_INVALID, f"{exc} [MQTT-3.3.2-2]", start) from None
        if qos:
            # Section 2.2.1 (3.1.1 section 2.3.1): a non-zero Packet Identifier.
            if pos + 2 > end:
                raise _overrun("packet identifier", pos, 2, end)
            packet_id: int | None = (data[pos] << 8) | data[pos + 1]
            if not packet_id:
                raise _fail(
                    _PROTOCOL,
                    f"the packet identifier is 0; a QoS {qos} PUBLISH needs one of 1-65535 "
                    f"(section 2.2.1; 3.1.1: [MQTT-2.3.1-1])",
                    pos,
                )
            pos += 2
        else:
            packet_id = None
        if self._v5:
            if pos < end and data[pos] == 0:
                props = EMPTY_PROPERTIES
                pos += 1
                if not topic:
                    raise self._no_topic(start)
            else:
                props_at = pos
                props, pos, seen = _read_properties_seen(data, pos, end, _T.PUBLISH, "PUBLISH")
                if 0x0B in seen and self._server:
                    raise _fail(
                        _PROTOCOL,
                        "a PUBLISH from a client carries a Subscription Identifier, which only "
                        "a server sends [MQTT-3.3.4-6]",
                        props_at,
                    )
                if 0x08 in seen:
                    _check_response_topic(props, "PUBLISH", props_at)
                if 0x01 in seen and self.check_payload_format:
                    _check_payload_format(data[pos:end], props, "PUBLISH payload", pos)
                if not topic and 0x23 not in seen:
                    raise self._no_topic(start)
        else:
            props = EMPTY_PROPERTIES
            if not topic:
                raise _fail(
                    _PROTOCOL,
                    "the topic name is empty; topic names must be at least one character "
                    "long (3.1.1: [MQTT-4.7.3-1])",
                    start - 2,
                )
        return make_publish(topic, data[pos:end], qos, flags & 1 == 1, dup, packet_id, props)

    @staticmethod
    def _no_topic(start: int) -> ProtocolError:
        return _fail(
            _PROTOCOL,
            "the topic name is empty and there is no Topic Alias; a PUBLISH needs one or the "
            "other (section 3.3.2.3.4)",
            start - 2,
        )

    def _ack(self, first: int, data: bytes, pos: int, end: int) -> Packet:
        # PUBACK, PUBREC, PUBREL, PUBCOMP: sections 3.4-3.7 (3.1.1 sections 3.4-3.7).
        ptype = first >> 4
        cls = _ACK_CLASSES[ptype]
        size = end - pos
        if size < 2:
            raise _overrun("packet identifier", pos, 2, end)
        packet_id = (data[pos] << 8) | data[pos + 1]
        if not packet_id:
            raise _fail(
                _PROTOCOL,
                "the packet identifier is 0; it must be 1-65535 (section 2.2.1; 3.1.1: "
                "[MQTT-2.3.1-1])",
                pos,
            )
        if size == 2:
            return make_ack(cls, packet_id, 0, EMPTY_PROPERTIES)
        if not self._v5:
            raise _fail(
                _MALFORMED,
                f"the remaining length is {size}; in MQTT 3.1.1 it is always 2 (3.1.1 section "
                f"{_ACK_SECTION[ptype]}.1)",
            )
        # Section 3.4.2.1 etc.: a reason code follows, and the property length may be left
        # out when there are no properties (remaining length 3).
        code = data[pos + 2]
        codes = rcs.PUBREL_REASON_CODES if ptype >= _T.PUBREL else rcs.PUBACK_REASON_CODES
        if code not in codes:
            raise _fail(
                _PROTOCOL,
                f"reason code 0x{code:02X} is not one a {_NAMES[ptype]} may carry (section "
                f"{_ACK_SECTION[ptype]}.2.1)",
                pos + 2,
            )
        if size == 3:
            return make_ack(cls, packet_id, code, EMPTY_PROPERTIES)
        props, after = _read_properties(data, pos + 3, end, ptype, _NAMES[ptype])
        if after != end:
            raise _trailing(after, end)
        return make_ack(cls, packet_id, code, props)

    def _connect(self, first: int, data: bytes, pos: int, end: int) -> Connect:
        # Section 3.1 (3.1.1 section 3.1).  Protocol Name (3.1.2.1): "MQTT"; MQTT 3.1 used
        # "MQIsdp" with level 3.
        name_at = pos
        name, pos = _read_str(data, pos, end, "protocol name")
        level = _read_byte(data, pos, end, "protocol level")
        pos += 1
        if name not in ("MQTT", "MQIsdp"):
            error = _fail(
                _PROTOCOL,
                f"the protocol name is {name[:40]!r}, not 'MQTT'; this is not an MQTT 3.1.1 or "
                f"5.0 connection (section 3.1.2.1; 3.1.1: [MQTT-3.1.2-1])",
                name_at,
            )
            error.version = level if level in _VERSIONS else None
            raise error
        if name != "MQTT" or level not in _VERSIONS:
            # Section 3.1.2.2 (3.1.1: [MQTT-3.1.2-2]): an unsupported protocol level.
            raise _fail(
                _UNSUPPORTED,
                f"the client asks for protocol {name!r} level {level}; this server speaks "
                f"MQTT 3.1.1 (level 4) and MQTT 5.0 (level 5) (section 3.1.2.2)",
                pos - 1,
            )
        v5 = level == MQTT_5
        if v5 and self._rl_nonminimal:
            raise _fail(_MALFORMED, "the remaining length is not minimally encoded [MQTT-1.5.5-1]")
        try:
            packet = self._connect_body(data, pos, end, v5)
        except ProtocolError as error:
            error.version = level
            raise
        self._version = level
        self._v5 = v5
        self.connect = packet
        self._set_parsers(started=True)
        return packet

    def _connect_body(self, data: bytes, pos: int, end: int, v5: bool) -> Connect:
        # Connect Flags (section 3.1.2.3; 3.1.1 section 3.1.2.3).
        flags = _read_byte(data, pos, end, "connect flags")
        if flags & 0x01:
            raise _fail(
                _MALFORMED,
                "the reserved bit 0 of the connect flags is 1; it must be 0 [MQTT-3.1.2-3] "
                "(3.1.1: [MQTT-3.1.2-3])",
                pos,
            )
        clean_start = flags & 0x02 != 0
        has_will = flags & 0x04 != 0
        will_qos = (flags >> 3) & 3
        will_retain = flags & 0x20 != 0
        has_password = flags & 0x40 != 0
        has_username = flags & 0x80 != 0
        if has_will:
            if will_qos == 3:
                raise _fail(
                    _MALFORMED,
                    "the will QoS is 3; it must be 0, 1 or 2 [MQTT-3.1.2-12] (3.1.1: "
                    "[MQTT-3.1.2-14])",
                    pos,
                )
        elif will_qos or will_retain:
            raise _fail(
                _MALFORMED,
                f"the Will Flag is 0 but Will QoS is {will_qos} and Will Retain is "
                f"{int(will_retain)}; without a will both must be 0 [MQTT-3.1.2-11], "
                f"[MQTT-3.1.2-13] (3.1.1: [MQTT-3.1.2-13], [MQTT-3.1.2-15])",
                pos,
            )
        if has_password and not has_username and not v5:
            raise _fail(
                _MALFORMED,
                "the Password Flag is 1 but the User Name Flag is 0; in MQTT 3.1.1 a password "
                "needs a user name (3.1.1: [MQTT-3.1.2-22])",
                pos,
            )
        pos += 1
        keep_alive = _read_u16(data, pos, end, "keep alive")
        pos += 2
        props = EMPTY_PROPERTIES
        if v5:
            props_at = pos
            props, pos = _read_properties(data, pos, end, _T.CONNECT, "CONNECT")
            if props.authentication_data is not None and props.authentication_method is None:
                raise _fail(
                    _PROTOCOL,
                    "the CONNECT has Authentication Data but no Authentication Method "
                    "(section 3.1.2.11.10)",
                    props_at,
                )
        # Payload (section 3.1.3): client identifier, will, user name, password, in order.
        client_id_at = pos
        client_id, pos = _read_str(data, pos, end, "client identifier")
        if not client_id and not clean_start and not v5:
            error = _fail(
                _BAD_CLIENT_ID,
                "the client identifier is empty and CleanSession is 0; an empty client "
                "identifier needs CleanSession 1 (3.1.1: [MQTT-3.1.3-7], [MQTT-3.1.3-8])",
                client_id_at,
            )
            raise error
        will = None
        if has_will:
            will_props = EMPTY_PROPERTIES
            will_props_at = pos
            if v5:
                will_props, pos = _read_properties(data, pos, end, WILL, "will properties")
                _check_response_topic(will_props, "will properties", will_props_at)
            topic_at = pos
            will_topic, pos = _read_str(data, pos, end, "will topic")
            try:
                validate_topic(will_topic)
            except TopicError as exc:
                raise _fail(
                    _TOPIC_NAME_INVALID,
                    f"the will topic is not a valid topic name: {exc} (section 3.1.3.3; "
                    f"[MQTT-3.3.2-2])",
                    topic_at,
                ) from None
            payload_at = pos + 2
            will_payload, pos = _read_binary(data, pos, end, "will payload")
            if v5 and self.check_payload_format:
                _check_payload_format(will_payload, will_props, "will payload", payload_at)
            will = Will(will_topic, will_payload, will_qos, will_retain, will_props)
        username = None
        if has_username:
            username, pos = _read_str(data, pos, end, "user name")
        password = None
        if has_password:
            password, pos = _read_binary(data, pos, end, "password")
        if pos != end:
            raise _trailing(pos, end)
        return Connect(
            client_id,
            MQTT_5 if v5 else MQTT_311,
            clean_start,
            keep_alive,
            username,
            password,
            will,
            props,
        )

    def _connack(self, first: int, data: bytes, pos: int, end: int) -> ConnAck:
        # Section 3.2 (3.1.1 section 3.2).
        ack_flags = _read_byte(data, pos, end, "connect acknowledge flags")
        if ack_flags & 0xFE:
            raise _fail(
                _MALFORMED,
                f"bits 7-1 of the connect acknowledge flags are {ack_flags >> 1:07b}; they are "
                f"reserved and must be 0 (section 3.2.2.1; 3.1.1 section 3.2.2.1)",
                pos,
            )
        session_present = ack_flags == 1
        code = _read_byte(data, pos + 1, end, "reason code")
        pos += 2
        props = EMPTY_PROPERTIES
        if self._v5:
            if code not in rcs.CONNACK_REASON_CODES:
                raise _fail(
                    _PROTOCOL,
                    f"reason code 0x{code:02X} is not a CONNACK reason code (section 3.2.2.2)",
                    pos - 1,
                )
            props, pos = _read_properties(data, pos, end, _T.CONNACK, "CONNACK")
        else:
            mapped = rcs.connack_reason_code(code)
            if mapped is None:
                raise _fail(
                    _PROTOCOL,
                    f"return code {code} is reserved; MQTT 3.1.1 defines 0-5 (3.1.1 section "
                    f"3.2.2.3)",
                    pos - 1,
                )
            code = mapped
        if session_present and code:
            raise _fail(
                _PROTOCOL,
                "Session Present is 1 on a refused connection; it must be 0 when the reason "
                "code is not 0 [MQTT-3.2.2-6] (3.1.1: [MQTT-3.2.2-4])",
            )
        if pos != end:
            raise _trailing(pos, end)
        self._set_parsers(started=True)
        return ConnAck(session_present, code, props)

    def _packet_id(self, data: bytes, pos: int, end: int) -> int:
        packet_id = _read_u16(data, pos, end, "packet identifier")
        if not packet_id:
            raise _fail(
                _PROTOCOL,
                "the packet identifier is 0; it must be 1-65535 (section 2.2.1; 3.1.1: "
                "[MQTT-2.3.1-1])",
                pos,
            )
        return packet_id

    def _subscribe(self, first: int, data: bytes, pos: int, end: int) -> Subscribe:
        # Section 3.8 (3.1.1 section 3.8).
        v5 = self._v5
        packet_id = self._packet_id(data, pos, end)
        pos += 2
        props = EMPTY_PROPERTIES
        if v5:
            props_at = pos
            props, pos = _read_properties(data, pos, end, _T.SUBSCRIBE, "SUBSCRIBE")
            if len(props.subscription_identifiers) > 1:
                raise _fail(
                    _PROTOCOL,
                    "the SUBSCRIBE carries more than one Subscription Identifier (section "
                    "3.8.2.1.2)",
                    props_at,
                )
        subscriptions = []
        while pos < end:
            filter_at = pos
            topic_filter, pos = _read_str(data, pos, end, "topic filter")
            options = _read_byte(data, pos, end, f"subscription options of {topic_filter!r}")
            qos = options & 3
            if v5:
                # Section 3.8.3.1.
                if options & 0xC0:
                    raise _fail(
                        _MALFORMED,
                        f"the reserved bits 7-6 of the subscription options of "
                        f"{topic_filter!r} are not 0 [MQTT-3.8.3-5]",
                        pos,
                    )
                if qos == 3:
                    raise _fail(
                        _PROTOCOL,
                        f"the maximum QoS of {topic_filter!r} is 3 (section 3.8.3.1)",
                        pos,
                    )
                retain_handling = (options >> 4) & 3
                if retain_handling == 3:
                    raise _fail(
                        _PROTOCOL,
                        f"the Retain Handling option of {topic_filter!r} is 3; only 0, 1 and "
                        f"2 are defined (section 3.8.3.1)",
                        pos,
                    )
                no_local = options & 0x04 != 0
                if no_local and topic_filter.startswith("$share/"):
                    raise _fail(
                        _PROTOCOL,
                        f"No Local is set on the shared subscription {topic_filter!r} "
                        f"[MQTT-3.8.3-4]",
                        pos,
                    )
                sub = Subscription(
                    topic_filter, qos, no_local, options & 0x08 != 0, retain_handling
                )
            else:
                # 3.1.1 section 3.8.3.1: bits 7-2 reserved; QoS 3 is malformed too.
                if options & 0xFC or qos == 3:
                    raise _fail(
                        _MALFORMED,
                        f"the requested QoS byte of {topic_filter!r} is 0x{options:02X}; bits "
                        f"7-2 must be 0 and the QoS 0, 1 or 2 (3.1.1: [MQTT-3-8.3-4])",
                        pos,
                    )
                sub = Subscription(topic_filter, qos)
            _check_filter(topic_filter, v5, "SUBSCRIBE", filter_at)
            subscriptions.append(sub)
            pos += 1
        if not subscriptions:
            raise _fail(
                _PROTOCOL,
                "the SUBSCRIBE has no topic filter; it needs at least one (section 3.8.3; "
                "3.1.1: [MQTT-3.8.3-3])",
            )
        return Subscribe(packet_id, tuple(subscriptions), props)

    def _unsubscribe(self, first: int, data: bytes, pos: int, end: int) -> Unsubscribe:
        # Section 3.10 (3.1.1 section 3.10).
        packet_id = self._packet_id(data, pos, end)
        pos += 2
        props = EMPTY_PROPERTIES
        if self._v5:
            props, pos = _read_properties(data, pos, end, _T.UNSUBSCRIBE, "UNSUBSCRIBE")
        filters = []
        while pos < end:
            filter_at = pos
            topic_filter, pos = _read_str(data, pos, end, "topic filter")
            _check_filter(topic_filter, self._v5, "UNSUBSCRIBE", filter_at)
            filters.append(topic_filter)
        if not filters:
            raise _fail(
                _PROTOCOL,
                "the UNSUBSCRIBE has no topic filter; it needs at least one (section 3.10.3; "
                "3.1.1: [MQTT-3.10.3-2])",
            )
        return Unsubscribe(packet_id, tuple(filters), props)

    def _suback(self, first: int, data: bytes, pos: int, end: int) -> SubAck:
        # Section 3.9 (3.1.1 section 3.9).
        packet_id = self._packet_id(data, pos, end)
        pos += 2
        props = EMPTY_PROPERTIES
        allowed: frozenset[int] = rcs.SUBACK_RETURN_CODES_311
        if self._v5:
            props, pos = _read_properties(data, pos, end, _T.SUBACK, "SUBACK")
            allowed = rcs.SUBACK_REASON_CODES
        codes = tuple(data[pos:end])
        for i, code in enumerate(codes):
            if code not in allowed:
                raise _fail(
                    _PROTOCOL,
                    f"0x{code:02X} is not a SUBACK reason code (section 3.9.3; 3.1.1: "
                    f"[MQTT-3.9.3-2])",
                    pos + i,
                )
        if not codes:
            raise _fail(_PROTOCOL, "the SUBACK has no reason code; it needs one per filter")
        return SubAck(packet_id, codes, props)

    def _unsuback(self, first: int, data: bytes, pos: int, end: int) -> UnsubAck:
        # Section 3.11 (3.1.1 section 3.11: only the packet identifier).
        packet_id = self._packet_id(data, pos, end)
        pos += 2
        if not self._v5:
            if pos != end:
                raise _fail(_MALFORMED, "an MQTT 3.1.1 UNSUBACK has a remaining length of 2")
            return UnsubAck(packet_id)
        props, pos = _read_properties(data, pos, end, _T.UNSUBACK, "UNSUBACK")
        codes = tuple(data[pos:end])
        for i, code in enumerate(codes):
            if code not in rcs.UNSUBACK_REASON_CODES:
                raise _fail(
                    _PROTOCOL,
                    f"0x{code:02X} is not an UNSUBACK reason code (section 3.11.3)",
                    pos + i,
                )
        if not codes:
            raise _fail(_PROTOCOL, "the UNSUBACK has no reason code; it needs one per filter")
        return UnsubAck(packet_id, codes, props)

    def _empty(self, first: int, data: bytes, pos: int, end: int) -> PingReq | PingResp:
        # PINGREQ and PINGRESP (sections 3.12, 3.13): no variable header, no payload.
        ptype = first >> 4
        if pos != end:
            raise _fail(
                _MALFORMED,
                f"the remaining length is {end - pos}; a {_NAMES[ptype]} has none (section "
                f"3.{ptype}; 3.1.1 section 3.{ptype})",
            )
        return _PING_REQ if ptype == _T.PINGREQ else _PING_RESP

    def _disconnect(self, first: int, data: bytes, pos: int, end: int) -> Disconnect:
        # Section 3.14 (3.1.1 section 3.14: no variable header).
        if pos == end:
            return _DISCONNECT
        if not self._v5:
            raise _fail(_MALFORMED, "an MQTT 3.1.1 DISCONNECT has a remaining length of 0")
        code = data[pos]
        if code not in rcs.DISCONNECT_REASON_CODES:
            raise _fail(
                _PROTOCOL, f"0x{code:02X} is not a DISCONNECT reason code (section 3.14.2.1)", pos
            )
        props = EMPTY_PROPERTIES
        if pos + 1 < end:  # section 3.14.2.2.1: the property length may be left out
            props_at = pos + 1
            props, after = _read_properties(data, pos + 1, end, _T.DISCONNECT, "DISCONNECT")
            if after != end:
                raise _trailing(after, end)
            expiry = props.session_expiry_interval
            if expiry is not None:
                if not self._server:
                    raise _fail(
                        _PROTOCOL,
                        "a server's DISCONNECT carries a Session Expiry Interval, which only "
                        "a client sends (section 3.14.2.2.2)",
                        props_at,
                    )
                connect = self.connect
                if (
                    expiry
                    and connect is not None
                    and not connect.properties.session_expiry_interval
                ):
                    raise _fail(
                        _PROTOCOL,
                        f"the DISCONNECT sets Session Expiry Interval {expiry} but the CONNECT "
                        f"set 0; a session that ends at disconnect cannot be extended then "
                        f"(section 3.14.2.2.2)",
                        props_at,
                    )
        return Disconnect(code, props)

    def _auth(self, first: int, data: bytes, pos: int, end: int) -> Auth:
        # Section 3.15 (MQTT 5.0 only).
        if pos == end:  # section 3.15.2.1: remaining length 0 means Success, no properties
            props = EMPTY_PROPERTIES
            code = 0
        else:
            code = data[pos]
            if code not in rcs.AUTH_REASON_CODES:
                raise _fail(
                    _PROTOCOL, f"0x{code:02X} is not an AUTH reason code (section 3.15.2.1)", pos
                )
            props, after = _read_properties(data, pos + 1, end, _T.AUTH, "AUTH")
            if after != end:
                raise _trailing(after, end)
            if props.authentication_method is None:
                raise _fail(
                    _PROTOCOL,
                    "the AUTH has no Authentication Method (section 3.15.2.2.2)",
                    pos + 1,
                )
        if self._server:
            # Section 4.12: a client sends AUTH only if its CONNECT named an authentication
            # method, and always that method (section 4.12.1).
            connect = self.connect
            method = connect.properties.authentication_method if connect else None
            if method is None:
                raise _fail(
                    _PROTOCOL,
                    "the client sends AUTH but its CONNECT had no Authentication Method "
                    "(section 4.12)",
                )
            if props.authentication_method not in (None, method):
                raise _fail(
                    _PROTOCOL,
                    f"the AUTH uses Authentication Method {props.authentication_method!r} but "
                    f"the CONNECT used {method!r}; it must be the same (section 4.12)",
                )
        return Auth(code, props)


def _trailing(pos: int, end: int) -> ProtocolError:
    return _fail(
        _MALFORMED,
        f"{end - pos} byte(s) follow the last field; the remaining length is longer than the "
        f"packet's contents",
        pos,
    )


# First bytes of PUBACK, PUBREC, PUBREL (flags 0010) and PUBCOMP: the decoder's short-cut.
PLAIN_ACK_SHIFT = 16  # a plain acknowledgement as an int: type << 16 | packet id
_PLAIN_ACK_FIRST = frozenset({0x40, 0x50, 0x62, 0x70})
_ACK_CLASSES: dict[int, Any] = {
    _T.PUBACK: PubAck,
    _T.PUBREC: PubRec,
    _T.PUBREL: PubRel,
    _T.PUBCOMP: PubComp,
}
_ACK_SECTION: dict[int, str] = {
    _T.PUBACK: "3.4", _T.PUBREC: "3.5", _T.PUBREL: "3.6", _T.PUBCOMP: "3.7"}
_PING_REQ = PingReq()
_PING_RESP = PingResp()
_DISCONNECT = Disconnect()


# =============================================================================================
# Encoding

_pack_ack = struct.Struct(">BBH").pack
_pack_ack_rc = struct.Struct(">BBHB").pack


def _varint(value: int) -> bytes:
    """Section 1.5.5: a Variable Byte Integer, minimally encoded."""
    if value < 0x80:
        return bytes((value,))
    if value > MAX_VARINT:
        raise ValueError(f"{value} is over the largest Variable Byte Integer, {MAX_VARINT}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _header(first: int, length: int) -> bytes:
    if length < 0x80:
        return bytes((first, length))
    if length > MAX_VARINT:
        raise ValueError(
            f"the packet's remaining length would be {length}, over the limit of {MAX_VARINT}"
        )
    return bytes((first,)) + _varint(length)


def _enc_str(text: str, what: str) -> bytes:
    """Section 1.5.4: a two-byte length and UTF-8; refuses what a receiver must refuse."""
    if not isinstance(text, str):
        raise TypeError(f"the {what} must be a str, not {type(text).__name__}")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"the {what} contains the unpaired surrogate U+{ord(text[exc.start]):04X}, which "
            f"UTF-8 cannot encode {_REF_UTF8}"
        ) from None
    if len(raw) > 0xFFFF:
        raise ValueError(f"the {what} is {len(raw)} bytes in UTF-8, over the limit of 65535")
    if b"\x00" in raw:
        raise ValueError(f"the {what} contains U+0000, which MQTT strings must not {_REF_NUL}")
    return len(raw).to_bytes(2, "big") + raw


def _enc_bin(data: bytes, what: str) -> bytes:
    """Section 1.5.6: a two-byte length and the bytes."""
    if len(data) > 0xFFFF:
        raise ValueError(f"the {what} is {len(data)} bytes, over the limit of 65535")
    return len(data).to_bytes(2, "big") + bytes(data)


def _enc_int(value: int, size: int, what: str) -> bytes:
    if not 0 <= value < 1 << (8 * size):
        raise ValueError(f"the {what} is {value}, outside 0..{(1 << (8 * size)) - 1}")
    return value.to_bytes(size, "big")


# Property attribute name -> (identifier, identifier byte, type, words for messages, whether
# it repeats), for the encoder.
_ENC_INFO = {
    spec.name: (
        spec.identifier,
        bytes((spec.identifier,)),
        spec.type,
        f"{spec.title} property",
        spec.repeatable,
    )
    for spec in PROPERTIES.values()
}


def _enc_properties(props: Properties, kind: int, where: str) -> bytes:
    """Section 2.2.2: the property length and the properties, in identifier order."""
    if props is EMPTY_PROPERTIES:
        return b"\x00"
    allowed = ALLOWED[kind]
    parts = []
    for name, value in props.items():
        ident, ident_byte, kind_of, what, repeatable = _ENC_INFO[name]
        if ident not in allowed:
            raise ValueError(f"the {what} is not allowed in the {where}")
        if repeatable:
            if kind_of is _VARINT:  # Subscription Identifier
                for item in value:
                    if not 1 <= item <= MAX_VARINT:
                        raise ValueError(f"the {what} is {item}, outside 1..{MAX_VARINT}")
                    parts.append(ident_byte + _varint(item))
            else:  # User Property
                for key, val in value:
                    parts.append(
                        ident_byte + _enc_str(key, _PAIR_NAME) + _enc_str(val, _PAIR_VALUE)
                    )
        elif kind_of is _UTF8:
            parts.append(ident_byte + _enc_str(value, what))
        elif kind_of is _BYTE:
            parts.append(ident_byte + _enc_int(value, 1, what))
        elif kind_of is _TWO:
            parts.append(ident_byte + _enc_int(value, 2, what))
        elif kind_of is _FOUR:
            parts.append(ident_byte + _enc_int(value, 4, what))
        else:  # Binary Data
            parts.append(ident_byte + _enc_bin(value, what))
    body = b"".join(parts)
    return _varint(len(body)) + body


def _check_packet_id(packet_id: object, where: str) -> int:
    if type(packet_id) is not int or not 0 < packet_id <= 0xFFFF:
        raise ValueError(f"the packet identifier of a {where} must be 1-65535, not {packet_id!r}")
    return packet_id


def _enc_publish(p: Publish, v5: bool) -> bytes:
    qos = p.qos
    if qos not in (0, 1, 2):
        raise ValueError(f"PUBLISH QoS must be 0, 1 or 2, not {qos!r}")
    if qos:
        pid = _check_packet_id(p.packet_id, f"QoS {qos} PUBLISH").to_bytes(2, "big")
    else:
        if p.packet_id is not None:
            raise ValueError("a QoS 0 PUBLISH has no packet identifier [MQTT-2.2.1-2]")
        if p.dup:
            raise ValueError("the DUP flag must be 0 on a QoS 0 PUBLISH [MQTT-3.3.1-2]")
        pid = b""
    topic = p.topic
    if type(topic) is str and topic.isascii() and len(topic) <= 0xFFFF and "\x00" not in topic:
        raw_topic = len(topic).to_bytes(2, "big") + topic.encode("ascii")
    else:
        raw_topic = _enc_str(topic, "topic name")
    if v5:
        props = p.properties
        raw_props = (
            b"\x00" if props is EMPTY_PROPERTIES else _enc_properties(props, _T.PUBLISH, "PUBLISH")
        )
    else:
        raw_props = b""
    payload = p.payload
    first = 0x30 | (qos << 1) | (0x08 if p.dup else 0) | (0x01 if p.retain else 0)
    length = len(raw_topic) + len(pid) + len(raw_props) + len(payload)
    return b"".join((_header(first, length), raw_topic, pid, raw_props, payload))


_raw_topics: dict[str, bytes] = {}
_RAW_TOPICS_MAX = 4096


def encode_plain_publish(topic: str, payload: bytes, qos: int, dup: bool, packet_id: int,
                         v5: bool) -> bytes:
    """The bytes of ``Publish(topic, payload, qos, False, dup, packet_id)`` with no properties,
    for the server's per-message path: no packet object, and the encoded topic name cached.
    ``packet_id`` is ignored at QoS 0. Raises ``ValueError`` as `encode` does."""
    raw_topic = _raw_topics.get(topic)
    if raw_topic is None:
        raw_topic = _enc_str(topic, "topic name")
        if len(_raw_topics) >= _RAW_TOPICS_MAX:
            _raw_topics.clear()
        _raw_topics[topic] = raw_topic
    if qos:
        if not 0 < packet_id <= 0xFFFF:
            _check_packet_id(packet_id, f"QoS {qos} PUBLISH")
        pid = packet_id.to_bytes(2, "big")
        first = 0x30 | (qos << 1) | (0x08 if dup else 0)
    else:
        pid = b""
        first = 0x30
    props = b"\x00" if v5 else b""
    length = len(raw_topic) + len(pid) + len(props) + len(payload)
    return b"".join((_header(first, length), raw_topic, pid, props, payload))


def _enc_ack(p: PubAck | PubRec | PubRel | PubComp, v5: bool) -> bytes:
    ptype = p.TYPE
    first = 0x62 if ptype == _T.PUBREL else ptype << 4
    packet_id = p.packet_id
    if type(packet_id) is not int or not 0 < packet_id <= 0xFFFF:
        _check_packet_id(packet_id, ptype.name)
    code = p.reason_code
    if not v5:
        if code >= 0x80:
            raise ValueError(
                f"MQTT 3.1.1 cannot express the failure reason code {reason_name(code)} in a "
                f"{ptype.name}; it has no reason codes"
            )
        return _pack_ack(first, 2, packet_id)
    props = p.properties
    if props is EMPTY_PROPERTIES or not props:
        if code == 0:
            return _pack_ack(first, 2, packet_id)
        _check_code(code, ptype)
        return _pack_ack_rc(first, 3, packet_id, code)
    _check_code(code, ptype)
    raw = _enc_properties(props, ptype, ptype.name)
    return _header(first, 3 + len(raw)) + packet_id.to_bytes(2, "big") + bytes((code,)) + raw


_CODE_SETS = {
    _T.CONNACK: rcs.CONNACK_REASON_CODES,
    _T.PUBACK: rcs.PUBACK_REASON_CODES,
    _T.PUBREC: rcs.PUBACK_REASON_CODES,
    _T.PUBREL: rcs.PUBREL_REASON_CODES,
    _T.PUBCOMP: rcs.PUBREL_REASON_CODES,
    _T.SUBACK: rcs.SUBACK_REASON_CODES,
    _T.UNSUBACK: rcs.UNSUBACK_REASON_CODES,
    _T.DISCONNECT: rcs.DISCONNECT_REASON_CODES,
    _T.AUTH: rcs.AUTH_REASON_CODES,
}


def _check_code(code: int, ptype: PacketType) -> None:
    if code not in _CODE_SETS[ptype]:
        raise ValueError(f"{reason_name(code)} is not a reason code a {ptype.name} may carry")


def _enc_connect(p: Connect, v5: bool) -> bytes:
    level = MQTT_5 if v5 else MQTT_311
    if p.protocol_level != level:
        raise ValueError(
            f"the CONNECT asks for protocol level {p.protocol_level} but is encoded for "
            f"level {level}"
        )
    will = p.will
    flags = 0x02 if p.clean_start else 0
    parts = [b"\x00\x04MQTT", bytes((level,)), b"", _enc_int(p.keep_alive, 2, "keep alive")]
    if v5:
        parts.append(_enc_properties(p.properties, _T.CONNECT, "CONNECT"))
    parts.append(_enc_str(p.client_id, "client identifier"))
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise ValueError(f"the will QoS must be 0, 1 or 2, not {will.qos!r}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        if v5:
            parts.append(_enc_properties(will.properties, WILL, "will properties"))
        parts.append(_enc_str(will.topic, "will topic"))
        parts.append(_enc_bin(will.payload, "will payload"))
    if p.username is not None:
        flags |= 0x80
        parts.append(_enc_str(p.username, "user name"))
    if p.password is not None:
        if p.username is None and not v5:
            raise ValueError("an MQTT 3.1.1 CONNECT cannot have a password without a user name")
        flags |= 0x40
        parts.append(_enc_bin(p.password, "password"))
    parts[2] = bytes((flags,))
    body = b"".join(parts)
    return _header(0x10, len(body)) + body


def _enc_connack(p: ConnAck, v5: bool) -> bytes:
    code = p.reason_code
    if p.session_present and code:
        raise ValueError("Session Present must be 0 when the reason code is not 0")
    if v5:
        _check_code(code, _T.CONNACK)
        raw = _enc_properties(p.properties, _T.CONNACK, "CONNACK")
        return _header(0x20, 2 + len(raw)) + bytes((int(p.session_present), code)) + raw
    mapped = rcs.connack_return_code(code)
    if mapped is None:
        raise ValueError(
            f"MQTT 3.1.1 has no CONNACK return code for {reason_name(code)}; a 3.1.1 server "
            f"closes the connection without a CONNACK instead (3.1.1: [MQTT-3.2.2-6])"
        )
    return bytes((0x20, 2, int(p.session_present), mapped))


def _enc_subscribe(p: Subscribe, v5: bool) -> bytes:
    if not p.subscriptions:
        raise ValueError("a SUBSCRIBE needs at least one subscription")
    parts = [_check_packet_id(p.packet_id, "SUBSCRIBE").to_bytes(2, "big")]
    if v5:
        parts.append(_enc_properties(p.properties, _T.SUBSCRIBE, "SUBSCRIBE"))
    for sub in p.subscriptions:
        if sub.qos not in (0, 1, 2):
            raise ValueError(f"the maximum QoS of {sub.topic_filter!r} must be 0-2")
        options = sub.qos
        if v5:
            if sub.retain_handling not in (0, 1, 2):
                raise ValueError(f"the retain handling of {sub.topic_filter!r} must be 0-2")
            options |= (
                (0x04 if sub.no_local else 0)
                | (0x08 if sub.retain_as_published else 0)
                | (sub.retain_handling << 4)
            )
        elif sub.no_local or sub.retain_as_published or sub.retain_handling:
            raise ValueError(
                f"the subscription to {sub.topic_filter!r} uses MQTT 5 options (no local, "
                f"retain as published, retain handling) that 3.1.1 cannot carry"
            )
        parts.append(_enc_str(sub.topic_filter, "topic filter"))
        parts.append(bytes((options,)))
    body = b"".join(parts)
    return _header(0x82, len(body)) + body


def _enc_suback(p: SubAck, v5: bool) -> bytes:
    if not p.reason_codes:
        raise ValueError("a SUBACK needs at least one reason code")
    pid = _check_packet_id(p.packet_id, "SUBACK").to_bytes(2, "big")
    if v5:
        for code in p.reason_codes:
            _check_code(code, _T.SUBACK)
        raw = _enc_properties(p.properties, _T.SUBACK, "SUBACK")
        codes = bytes(p.reason_codes)
    else:
        # 3.1.1 section 3.9.3: 0x00-0x02 granted QoS, 0x80 failure; every 5.0 failure code
        # becomes 0x80.
        out = []
        for code in p.reason_codes:
            if code >= 0x80:
                out.append(0x80)
            elif code in (0, 1, 2):
                out.append(code)
            else:
                raise ValueError(f"{reason_name(code)} is not a SUBACK reason code")
        raw = b""
        codes = bytes(out)
    return _header(0x90, 2 + len(raw) + len(codes)) + pid + raw + codes


def _enc_unsubscribe(p: Unsubscribe, v5: bool) -> bytes:
    if not p.topic_filters:
        raise ValueError("an UNSUBSCRIBE needs at least one topic filter")
    parts = [_check_packet_id(p.packet_id, "UNSUBSCRIBE").to_bytes(2, "big")]
    if v5:
        parts.append(_enc_properties(p.properties, _T.UNSUBSCRIBE, "UNSUBSCRIBE"))
    parts.extend(_enc_str(f, "topic filter") for f in p.topic_filters)
    body = b"".join(parts)
    return _header(0xA2, len(body)) + body


def _enc_unsuback(p: UnsubAck, v5: bool) -> bytes:
    pid = _check_packet_id(p.packet_id, "UNSUBACK").to_bytes(2, "big")
    if not v5:
        # 3.1.1 section 3.11: no payload; success codes are dropped, failures cannot be said.
        failed = [code for code in p.reason_codes if code >= 0x80]
        if failed:
            raise ValueError(
                f"MQTT 3.1.1 cannot express the failure {reason_name(failed[0])} in an UNSUBACK"
            )
        return b"\xb0\x02" + pid
    if not p.reason_codes:
        raise ValueError("an MQTT 5 UNSUBACK needs one reason code per topic filter")
    for code in p.reason_codes:
        _check_code(code, _T.UNSUBACK)
    raw = _enc_properties(p.properties, _T.UNSUBACK, "UNSUBACK")
    return _header(0xB0, 2 + len(raw) + len(p.reason_codes)) + pid + raw + bytes(p.reason_codes)


def _enc_pingreq(p: PingReq, v5: bool) -> bytes:
    return b"\xc0\x00"


def _enc_pingresp(p: PingResp, v5: bool) -> bytes:
    return b"\xd0\x00"


def _enc_disconnect(p: Disconnect, v5: bool) -> bytes:
    code = p.reason_code
    if not v5:
        if code:
            raise ValueError(f"an MQTT 3.1.1 DISCONNECT has no reason code ({reason_name(code)})")
        return b"\xe0\x00"
    _check_code(code, _T.DISCONNECT)
    props = p.properties
    if props is EMPTY_PROPERTIES or not props:
        # Section 3.14.2.1: reason code 0 and no properties may be sent as remaining length 0.
        return b"\xe0\x00" if code == 0 else bytes((0xE0, 1, code))
    raw = _enc_properties(props, _T.DISCONNECT, "DISCONNECT")
    return _header(0xE0, 1 + len(raw)) + bytes((code,)) + raw


def _enc_auth(p: Auth, v5: bool) -> bytes:
    if not v5:
        raise ValueError("AUTH exists only in MQTT 5.0")
    code = p.reason_code
    _check_code(code, _T.AUTH)
    props = p.properties
    if code == 0 and (props is EMPTY_PROPERTIES or not props):
        return b"\xf0\x00"  # section 3.15.2.1: remaining length 0
    raw = _enc_properties(props, _T.AUTH, "AUTH")
    return _header(0xF0, 1 + len(raw)) + bytes((code,)) + raw


_ENCODERS: dict[type, Any] = {
    Connect: _enc_connect,
    ConnAck: _enc_connack,
    Publish: _enc_publish,
    PubAck: _enc_ack,
    PubRec: _enc_ack,
    PubRel: _enc_ack,
    PubComp: _enc_ack,
    Subscribe: _enc_subscribe,
    SubAck: _enc_suback,
    Unsubscribe: _enc_unsubscribe,
    UnsubAck: _enc_unsuback,
    PingReq: _enc_pingreq,
    PingResp: _enc_pingresp,
    Disconnect: _enc_disconnect,
    Auth: _enc_auth,
}


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of *packet* for protocol level *version*: 4 (MQTT 3.1.1) or 5 (MQTT 5.0).

    Raises ``ValueError`` for a packet that cannot be encoded as a valid packet of that
    version (a packet identifier of 0, a property not allowed in the packet type, a string
    with U+0000, a failure reason code 3.1.1 cannot express, ...).
    """
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise TypeError(f"not an MQTT packet: {packet!r}")
    if version == MQTT_5:
        return encoder(packet, True)  # type: ignore[no-any-return]
    if version == MQTT_311:
        return encoder(packet, False)  # type: ignore[no-any-return]
    raise ValueError(f"version must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0), not {version!r}")

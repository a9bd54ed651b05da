"""MQTT PUBLISH <-> the engine's payload format (an encoded AMQP 1.0 message).

The mesh carries every message as the bytes of an AMQP 1.0 message (AMQP subscribers get them
as they are), so the MQTT edge encodes an incoming PUBLISH as one and decodes the AMQP message
it delivers to an MQTT subscriber. The mapping (docs/mqtt.md has it as a table):

| MQTT 5                      | AMQP 1.0                                                     |
| --------------------------- | ------------------------------------------------------------ |
| payload                     | one Data section (binary body)                               |
| topic name                  | properties.to                                                |
| QoS of the PUBLISH          | message-annotations `x-opt-mqtt-qos` (ubyte)                 |
| message expiry interval (s) | header.ttl (ms)                                              |
| content type                | properties.content-type (symbol)                             |
| response topic              | properties.reply-to                                          |
| correlation data            | properties.correlation-id (binary)                           |
| payload format indicator    | message-annotations `x-opt-mqtt-payload-format` (ubyte)      |
| user properties             | application-properties (string -> string)                   |
| (the publishing client)     | message-annotations `x-opt-exactmesh-publisher`              |

The common shapes are encoded and decoded by the router's AMQP message codec,
`router.core.message` (a few microseconds); anything else (user properties with a repeated
name, AMQP bodies other than Data / a string / binary value, AMQP types that codec does not
read) goes through python-qpid-proton's ``Message``, which is slower (20-40 us) but complete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from router.core import message
from router.core.message import (
    APPLICATION_PROPERTIES,
    DATA,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Unsupported,
    binary,
    compound,
    map_of,
    read_value,
    string,
    symbol,
)

from .packets import EMPTY_PROPERTIES, Properties

__all__ = ["Decoded", "decode", "encode"]

QOS_KEY = "x-opt-mqtt-qos"
FORMAT_KEY = "x-opt-mqtt-payload-format"
PUBLISHER_KEY = message.PUBLISHER_KEY.decode()
REPEATED_KEY = "x-opt-mqtt-user-properties"  # the full list, when a name repeats

_DATA8 = DATA + b"\xa0"  # a Data section's head, vbin8: the size byte follows
_DATA32 = DATA + b"\xb0"  # ... vbin32
_QOS_ENTRY = [symbol(QOS_KEY) + b"\x50" + bytes((q,)) for q in range(3)]
_FORMAT_ENTRY = symbol(FORMAT_KEY) + b"\x50\x01"


# The common case, a PUBLISH without properties (every 3.1.1 PUBLISH), is encoded from a
# cached prefix (the message annotations of one publisher at one QoS), and what `decode` would
# read back from it is remembered, keyed by the encoded message: the copies for this router's
# MQTT subscribers then cost a dict lookup (the bytes object caches its hash), not a decode.
# Two generations of at most _DECODED_MAX entries and _DECODED_BYTES (the encoded message and
# its payload counted) each, for messages up to _DECODED_PAYLOAD: without the byte bound, 2048
# messages of 10 KiB kept 40 MiB alive long after they were delivered or stored.
_ANNOTATIONS_MAX = 4096
_DECODED_MAX = 2048
_DECODED_BYTES = 4 * 1024 * 1024
_DECODED_PAYLOAD = 64 * 1024
_annotations: dict[tuple[int, str], bytes] = {}
_props_sections: dict[str, bytes] = {}  # topic -> its properties section, same bound
_decoded: dict[bytes, Decoded] = {}
_decoded_old: dict[bytes, Decoded] = {}
_decoded_bytes = 0  # in `_decoded`


def encode(
    topic: str, payload: bytes, qos: int, props: Properties = EMPTY_PROPERTIES,
    publisher: str = "",
) -> bytes:
    """The AMQP message for an MQTT PUBLISH to `topic`."""
    if props is EMPTY_PROPERTIES or not props:  # the identity test spares a Python call
        return _encode_plain(topic, payload, qos, publisher)
    out = []
    expiry = props.message_expiry_interval if props else None
    if expiry:
        ttl = min(expiry * 1000, 0xFFFFFFFF)
        # header: list [durable=false, priority=null, ttl=uint]
        out.append(HEADER + b"\xc0\x08\x03\x42\x40\x70" + ttl.to_bytes(4, "big"))
    ann = [_QOS_ENTRY[qos]]
    if props and props.payload_format_indicator == 1:
        ann.append(_FORMAT_ENTRY)
    if publisher:
        ann.append(symbol(PUBLISHER_KEY) + string(publisher))
    user = props.user_properties if props else ()
    names = [k for k, _ in user]
    repeated = len(set(names)) != len(names)
    if repeated:
        ann.append(symbol(REPEATED_KEY) + _encode_pairs(user))
    out.append(MESSAGE_ANNOTATIONS + map_of(ann))
    # properties: message-id, user-id, to, subject, reply-to, correlation-id, content-type
    fields = [b"\x40", b"\x40", string(topic)]
    if props:
        ct, rt, cd = props.content_type, props.response_topic, props.correlation_data
        if ct is not None or rt is not None or cd is not None:
            fields += [b"\x40", string(rt) if rt is not None else b"\x40",
                       binary(cd) if cd is not None else b"\x40",
                       symbol(ct) if ct is not None else b"\x40"]
    out.append(PROPERTIES + compound(0xC0, 0xD0, len(fields), b"".join(fields)))
    if user:
        seen: dict[str, str] = {}
        for k, v in user:
            seen.setdefault(k, v)  # a repeated name: the first value here, all in REPEATED_KEY
        out.append(APPLICATION_PROPERTIES
                   + map_of([string(k) + string(v) for k, v in seen.items()]))
    out.append(DATA + binary(payload))
    return b"".join(out)


def _encode_plain(topic: str, payload: bytes, qos: int, publisher: str) -> bytes:
    """`encode` without properties: the same bytes, from a cached annotations section."""
    global _decoded, _decoded_old, _decoded_bytes
    head = _annotations.get((qos, publisher))
    if head is None:
        ann = [_QOS_ENTRY[qos]]
        if publisher:
            ann.append(symbol(PUBLISHER_KEY) + string(publisher))
        head = MESSAGE_ANNOTATIONS + map_of(ann)
        if len(_annotations) >= _ANNOTATIONS_MAX:
            _annotations.clear()
        _annotations[(qos, publisher)] = head
    props = _props_sections.get(topic)
    if props is None:  # the properties section: message-id and user-id null, `to` the topic
        props = PROPERTIES + compound(0xC0, 0xD0, 3, b"\x40\x40" + string(topic))
        if len(_props_sections) >= _ANNOTATIONS_MAX:
            _props_sections.clear()
        _props_sections[topic] = props
    n = len(payload)
    body = _DATA8 + bytes((n,)) if n < 256 else _DATA32 + n.to_bytes(4, "big")
    message = b"".join((head, props, body, payload))
    if len(payload) <= _DECODED_PAYLOAD:
        if len(_decoded) >= _DECODED_MAX or _decoded_bytes >= _DECODED_BYTES:
            _decoded_old, _decoded, _decoded_bytes = _decoded, {}, 0
        _decoded[message] = Decoded(topic, payload, qos, EMPTY_PROPERTIES)
        _decoded_bytes += len(message) + len(payload)
    return message


def _encode_pairs(pairs: tuple[tuple[str, str], ...]) -> bytes:
    items = [compound(0xC0, 0xD0, 2, string(k) + string(v)) for k, v in pairs]
    return compound(0xC0, 0xD0, len(items), b"".join(items))


# ---------------------------------------------------------------------------------- decoding


@dataclass(slots=True, init=False)
class Decoded:
    """What an MQTT subscriber's PUBLISH needs from an AMQP message."""

    topic: str | None
    payload: bytes
    qos: int  # the QoS it was published with (2 for an unsettled AMQP message)
    properties: Properties

    # Hand-written: mypyc compiles it (the generated one runs as plain Python; actions.py).
    def __init__(self, topic: str | None, payload: bytes, qos: int,
                 properties: Properties) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.properties = properties


def decode(payload: bytes) -> Decoded:
    """Read an AMQP message for an MQTT subscriber. Raises ValueError if it is not one."""
    if type(payload) is bytes and len(payload) <= _DECODED_PAYLOAD + 1024:
        known = _decoded.get(payload) or _decoded_old.get(payload)
        if known is not None:
            return known
    try:
        return _fast_decode(payload)
    except Unsupported:
        pass
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"not a well-formed AMQP message: {err!r}") from None
    return _proton_decode(payload)


def _fast_decode(buf: bytes) -> Decoded:
    pos, n = 0, len(buf)
    ttl = None
    qos = 2
    fmt = None
    repeated = None
    topic = reply_to = content_type = None
    correlation: bytes | None = None
    user: list[tuple[str, str]] = []
    body: list[bytes] = []
    while pos < n:
        if buf[pos] != 0x00 or buf[pos + 1] != 0x53:
            raise Unsupported
        section = buf[pos + 2]
        value, pos = read_value(buf, pos + 3)
        if section == 0x70:  # header
            if isinstance(value, list) and len(value) > 2:
                ttl = value[2]
        elif section == 0x72:  # message-annotations
            for k, v in value:
                if k == QOS_KEY and v in (0, 1, 2):
                    qos = v
                elif k == FORMAT_KEY:
                    fmt = v
                elif k == REPEATED_KEY:
                    repeated = [(str(a), str(b)) for a, b in v]
        elif section == 0x73:  # properties
            f = list(value) + [None] * (7 - len(value))
            topic = f[2] if isinstance(f[2], str) else None
            reply_to = f[4] if isinstance(f[4], str) else None
            cid = f[5]
            if isinstance(cid, bytes):
                correlation = cid
            elif cid is not None:
                correlation = str(cid).encode()
            content_type = f[6] if isinstance(f[6], str) else None
        elif section == 0x74:  # application-properties
            for k, v in value:
                user.append((str(k), _text(v)))
        elif section == 0x75:  # data
            body.append(value)
        elif section == 0x77:  # amqp-value
            if isinstance(value, bytes):
                body.append(value)
            elif isinstance(value, str):
                body.append(value.encode())
                if fmt is None:
                    fmt = 1
            elif value is None:
                pass
            else:
                raise Unsupported
        elif section in (0x71, 0x78):
            pass  # delivery-annotations, footer
        else:
            raise Unsupported  # amqp-sequence bodies
    if repeated is not None:
        user = repeated
    props = _properties(ttl, fmt, content_type, reply_to, correlation, user)
    return Decoded(topic, b"".join(body), qos, props)


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def _properties(ttl: Any, fmt: Any, content_type: str | None, reply_to: str | None,
                correlation: bytes | None, user: list[tuple[str, str]]) -> Properties:
    if not (ttl or fmt or content_type or reply_to or correlation or user):
        return EMPTY_PROPERTIES
    expiry = None
    if ttl:
        expiry = max(1, -(-int(ttl) // 1000))  # whole seconds, rounded up
    return Properties(
        message_expiry_interval=expiry,
        payload_format_indicator=1 if fmt == 1 else None,
        content_type=content_type,
        response_topic=reply_to or None,
        correlation_data=correlation,
        user_properties=tuple(user),
    )


def _proton_decode(payload: bytes) -> Decoded:
    from proton import Message

    m = Message()
    try:
        m.decode(payload)
    except Exception as err:
        raise ValueError(f"not a well-formed AMQP message: {err}") from None
    ann: dict[Any, Any] = dict(m.annotations or {})
    qos = ann.get(QOS_KEY, 2)
    qos = qos if qos in (0, 1, 2) else 2
    body = m.body
    fmt = ann.get(FORMAT_KEY)
    if body is None:
        data = b""
    elif isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
    elif isinstance(body, str):
        data, fmt = body.encode(), 1
    else:
        data, fmt = repr(body).encode(), 1  # a list, map or number: its text
    app: dict[Any, Any] = dict(m.properties or {})
    user = [(str(k), _text(v)) for k, v in app.items()]
    if REPEATED_KEY in ann:
        user = [(str(a), str(b)) for a, b in ann[REPEATED_KEY]]
    cid = m.correlation_id
    correlation = None if cid is None else bytes(cid) if isinstance(cid, bytes | memoryview) \
        else str(cid).encode()
    topic = m.address if isinstance(m.address, str) else None
    ttl = int(m.ttl * 1000) if m.ttl else None
    ct = m.content_type if m.content_type and m.content_type != "None" else None
    props = _properties(ttl, fmt, ct, m.reply_to or None, correlation, user)
    return Decoded(topic, data, qos, props)

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

The common shapes are encoded and decoded here by hand (a few microseconds); anything else
(user properties with a repeated name, AMQP bodies other than Data / a string / binary value,
AMQP types this reader does not know) goes through python-qpid-proton's ``Message``, which is
slower (20-40 us) but complete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .packets import EMPTY_PROPERTIES, Properties

__all__ = ["Decoded", "decode", "encode"]

QOS_KEY = "x-opt-mqtt-qos"
FORMAT_KEY = "x-opt-mqtt-payload-format"
PUBLISHER_KEY = "x-opt-exactmesh-publisher"
REPEATED_KEY = "x-opt-mqtt-user-properties"  # the full list, when a name repeats

_u32 = struct.Struct(">I")
_u16 = struct.Struct(">H")
_u64 = struct.Struct(">Q")


def _str(code8: int, code32: int, raw: bytes) -> bytes:
    n = len(raw)
    if n < 256:
        return bytes((code8, n)) + raw
    return bytes((code32,)) + _u32.pack(n) + raw


def _string(text: str) -> bytes:
    return _str(0xA1, 0xB1, text.encode())


def _symbol(text: str) -> bytes:
    return _str(0xA3, 0xB3, text.encode())


def _binary(raw: bytes) -> bytes:
    return _str(0xA0, 0xB0, raw)


def _compound(code8: int, code32: int, count: int, items: bytes) -> bytes:
    size = len(items) + 1
    if size < 256 and count < 256:
        return bytes((code8, size, count)) + items
    return bytes((code32,)) + _u32.pack(len(items) + 4) + _u32.pack(count) + items


def _map(pairs: list[bytes]) -> bytes:
    return _compound(0xC1, 0xD1, 2 * len(pairs), b"".join(pairs))


_QOS_ENTRY = [_symbol(QOS_KEY) + b"\x50" + bytes((q,)) for q in range(3)]
_FORMAT_ENTRY = _symbol(FORMAT_KEY) + b"\x50\x01"


# The common case, a PUBLISH without properties (every 3.1.1 PUBLISH), is encoded from a
# cached prefix (the message annotations of one publisher at one QoS), and what `decode` would
# read back from it is remembered, keyed by the encoded message: the copies for this router's
# MQTT subscribers then cost a dict lookup (the bytes object caches its hash), not a decode.
# Two generations of at most _DECODED_MAX entries each, for messages up to _DECODED_PAYLOAD.
_ANNOTATIONS_MAX = 4096
_DECODED_MAX = 2048
_DECODED_PAYLOAD = 64 * 1024
_annotations: dict[tuple[int, str], bytes] = {}
_props_sections: dict[str, bytes] = {}  # topic -> its properties section, same bound
_decoded: dict[bytes, Decoded] = {}
_decoded_old: dict[bytes, Decoded] = {}


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
        out.append(b"\x00\x53\x70\xc0\x08\x03\x42\x40\x70" + _u32.pack(ttl))
    ann = [_QOS_ENTRY[qos]]
    if props and props.payload_format_indicator == 1:
        ann.append(_FORMAT_ENTRY)
    if publisher:
        ann.append(_symbol(PUBLISHER_KEY) + _string(publisher))
    user = props.user_properties if props else ()
    names = [k for k, _ in user]
    repeated = len(set(names)) != len(names)
    if repeated:
        ann.append(_symbol(REPEATED_KEY) + _encode_pairs(user))
    out.append(b"\x00\x53\x72" + _map(ann))
    # properties: message-id, user-id, to, subject, reply-to, correlation-id, content-type
    fields = [b"\x40", b"\x40", _string(topic)]
    if props:
        ct, rt, cd = props.content_type, props.response_topic, props.correlation_data
        if ct is not None or rt is not None or cd is not None:
            fields += [b"\x40", _string(rt) if rt is not None else b"\x40",
                       _binary(cd) if cd is not None else b"\x40",
                       _symbol(ct) if ct is not None else b"\x40"]
    out.append(b"\x00\x53\x73" + _compound(0xC0, 0xD0, len(fields), b"".join(fields)))
    if user:
        seen: dict[str, str] = {}
        for k, v in user:
            seen.setdefault(k, v)  # a repeated name: the first value here, all in REPEATED_KEY
        out.append(b"\x00\x53\x74" + _map([_string(k) + _string(v) for k, v in seen.items()]))
    out.append(b"\x00\x53\x75" + _binary(payload))
    return b"".join(out)


def _encode_plain(topic: str, payload: bytes, qos: int, publisher: str) -> bytes:
    """`encode` without properties: the same bytes, from a cached annotations section."""
    global _decoded, _decoded_old
    head = _annotations.get((qos, publisher))
    if head is None:
        ann = [_QOS_ENTRY[qos]]
        if publisher:
            ann.append(_symbol(PUBLISHER_KEY) + _string(publisher))
        head = b"\x00\x53\x72" + _map(ann)
        if len(_annotations) >= _ANNOTATIONS_MAX:
            _annotations.clear()
        _annotations[(qos, publisher)] = head
    props = _props_sections.get(topic)
    if props is None:  # the properties section: message-id and user-id null, `to` the topic
        props = b"\x00\x53\x73" + _compound(0xC0, 0xD0, 3, b"\x40\x40" + _string(topic))
        if len(_props_sections) >= _ANNOTATIONS_MAX:
            _props_sections.clear()
        _props_sections[topic] = props
    n = len(payload)
    body = (b"\x00\x53\x75\xa0" + bytes((n,)) if n < 256
            else b"\x00\x53\x75\xb0" + _u32.pack(n))
    message = b"".join((head, props, body, payload))
    if len(payload) <= _DECODED_PAYLOAD:
        if len(_decoded) >= _DECODED_MAX:
            _decoded_old, _decoded = _decoded, {}
        _decoded[message] = Decoded(topic, payload, qos, EMPTY_PROPERTIES)
    return message


def _encode_pairs(pairs: tuple[tuple[str, str], ...]) -> bytes:
    items = [_compound(0xC0, 0xD0, 2, _string(k) + _string(v)) for k, v in pairs]
    return _compound(0xC0, 0xD0, len(items), b"".join(items))


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


class _Unknown(Exception):
    """Something the fast reader does not handle: use proton."""


def _value(buf: bytes, pos: int) -> tuple[Any, int]:
    """One AMQP value (1.6) at `pos`: (value, next position). Raises _Unknown for types and
    shapes this reader leaves to proton, IndexError/struct.error on truncation."""
    code = buf[pos]
    pos += 1
    if code == 0x00:  # described: skip the descriptor, keep the value
        _, pos = _value(buf, pos)
        return _value(buf, pos)
    if code == 0x40:
        return None, pos
    if code in (0xA1, 0xA3, 0xA0):
        n = buf[pos]
        raw = buf[pos + 1:pos + 1 + n]
        if len(raw) != n:
            raise _Unknown
        return (raw if code == 0xA0 else raw.decode()), pos + 1 + n
    if code in (0xB1, 0xB3, 0xB0):
        n = _u32.unpack_from(buf, pos)[0]
        raw = buf[pos + 4:pos + 4 + n]
        if len(raw) != n:
            raise _Unknown
        return (raw if code == 0xB0 else raw.decode()), pos + 4 + n
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code == 0x56:
        return bool(buf[pos]), pos + 1
    if code in (0x43, 0x44):
        return 0, pos
    if code in (0x50, 0x52, 0x53):
        return buf[pos], pos + 1
    if code in (0x51, 0x54, 0x55):
        v = buf[pos]
        return (v - 256 if v > 127 else v), pos + 1
    if code == 0x60:
        return _u16.unpack_from(buf, pos)[0], pos + 2
    if code == 0x61:
        return struct.unpack_from(">h", buf, pos)[0], pos + 2
    if code == 0x70:
        return _u32.unpack_from(buf, pos)[0], pos + 4
    if code == 0x71:
        return struct.unpack_from(">i", buf, pos)[0], pos + 4
    if code in (0x80, 0x83):  # ulong, timestamp
        return _u64.unpack_from(buf, pos)[0], pos + 8
    if code == 0x81:
        return struct.unpack_from(">q", buf, pos)[0], pos + 8
    if code == 0x45:
        return [], pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code in (0xC0, 0xC1):
            size, count = buf[pos], buf[pos + 1]
            start, end = pos + 2, pos + 1 + size
        else:
            size, count = _u32.unpack_from(buf, pos)[0], _u32.unpack_from(buf, pos + 4)[0]
            start, end = pos + 8, pos + 4 + size
        items: list[Any] = []
        p = start
        for _ in range(count):
            item, p = _value(buf, p)  # not `v`: mypyc types a local by its first assignment
            items.append(item)
        if p != end:
            raise _Unknown
        if code in (0xC1, 0xD1):
            if count % 2:
                raise _Unknown
            # A map, as its (key, value) pairs (keys may be unhashable lists in theory).
            return list(zip(items[0::2], items[1::2], strict=True)), end
        return items, end
    raise _Unknown  # arrays, floats, uuids, chars, decimals: proton


def decode(payload: bytes) -> Decoded:
    """Read an AMQP message for an MQTT subscriber. Raises ValueError if it is not one."""
    if type(payload) is bytes and len(payload) <= _DECODED_PAYLOAD + 1024:
        known = _decoded.get(payload) or _decoded_old.get(payload)
        if known is not None:
            return known
    try:
        return _fast_decode(payload)
    except _Unknown:
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
            raise _Unknown
        section = buf[pos + 2]
        value, pos = _value(buf, pos + 3)
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
                raise _Unknown
        elif section in (0x71, 0x78):
            pass  # delivery-annotations, footer
        else:
            raise _Unknown  # amqp-sequence bodies
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

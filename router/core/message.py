"""The AMQP 1.0 message codec: the one module that writes and reads the bytes of an AMQP message
(its sections, AMQP 1.0 part 3.2, and the values in them, part 1.6). Three users:

- the AMQP edge (amqp_edge/connection.py) reads a message's routing fields (:func:`scan`), adds
  the publisher annotation (:func:`annotate`) and rewrites the header of a message delivered
  again (:func:`with_redelivery`), leaving every other byte as it came;
- the MQTT edge (mqtt_edge/mapping.py) writes a PUBLISH as a message with the value and
  section writers (:func:`string`, :func:`map_of`, :data:`PROPERTIES`, ...) and reads one back
  with :func:`read_value`;
- the client SDK (amqp_edge/client.py) writes the messages a Publisher sends
  (:func:`encode_message`).

Why here, in `router.core`: the mesh carries every message as these bytes, so their format is
the router's own payload format, below both edges; the edges may not import each other and
the clients may import no router internals, so the module must sit where all three may import
it. It is pure logic on bytes: standard library only, no IO, and importing it does nothing
else (the "clients" contract in pyproject.toml allows it to the SDK beside
`router.core.topics`). It is compiled with the other per-message modules (router/accel.py).
Python's proton binding stays the complete (and slower) fallback where a user meets a type
this codec does not write or read (:class:`Unsupported`).

Reading the routing fields
--------------------------

The router forwards a message as the bytes it arrived in (what ``link.recv()`` returns and what
proton's ``Message.encode()`` produces: the message's sections, concatenated, AMQP 1.0 3.2). It
needs only the header's ttl / durable / delivery-count (3.2.1) and two message-annotations,
``x-opt-delivery-mode`` and ``x-opt-guarantee`` (3.2.3), and it needs them for every message,
so decoding the whole message with proton would be wasted work. :func:`scan` walks the section
headers from the start and stops at the first section after message-annotations (properties,
application-properties, the body, the footer: 3.2.4 - 3.2.9), which it never parses: whatever
they hold is forwarded byte for byte.

Because the bytes come from the network, every read is bounds-checked against the payload and
against the size the enclosing list / map / array declared (1.6.22 - 1.6.24), so that a bad
payload raises :class:`MalformedMessage` saying what was wrong and at which byte offset, and
never ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``. Note that proton's own
``Message.decode`` is far more lenient (it accepts an empty payload, truncated bodies, sections
out of order, and silently drops sections whose descriptor is in the symbolic form), so it is no
oracle for what is malformed.

:func:`with_redelivery` is the rare path: it rewrites the header (3.2.1) so that a message sent
again carries the right delivery-count and first-acquirer = false, and keeps every other byte.

Choices the spec leaves open, made here:

* Sections must come in the order of 3.2 (header, delivery-annotations, message-annotations,
  ...), each at most once; proton's encoder always does so.
* A section's descriptor must be the ulong code or the symbolic name of one of the nine message
  sections (0x70 - 0x78, 3.2); anything else (a performative, a delivery state, a domain-specific
  descriptor) means these bytes are not a message, and raises.
* Header / annotation section values must be a list / map as 3.2.1 - 3.2.3 define them; a
  described null is refused.
* Annotation keys are compared as raw bytes against those two, so a key that is not
  valid UTF-8 (or ASCII, as 1.6.21 wants symbols to be) simply does not match and cannot crash
  the scan. Keys of types other than symbol / string are skipped, not refused (3.2.3 allows
  ulong keys too).
* Either value must be a string or symbol (decoded as UTF-8) or null (which
  reads as absent); any other type, invalid UTF-8, or the key appearing twice (as a symbol and as
  a string, say) raises, since silently ignoring it would change the delivery guarantee.
* The header and annotation sections are validated in full (a count / size mismatch in a nested
  annotation value raises), nesting deeper than ``_MAX_DEPTH`` compound values raises.
* An empty payload raises (an AMQP message has at least one section, 3.2); a missing body is
  not noticed (scan never looks that far, and proton writes no body section for body=None).
* ttl_ms is the header's value as sent: an explicit 0 reads as 0, an absent or null ttl as None
  (proton reads both as 0, and writes no ttl when it is 0).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AMQP_VALUE", "APPLICATION_PROPERTIES", "DATA", "EMPTY", "HEADER", "MESSAGE_ANNOTATIONS",
    "PROPERTIES", "PROPERTY_REPLY_TO", "PROPERTY_TO", "PUBLISHER_KEY", "MalformedMessage",
    "MessageInfo", "Unsupported", "annotate",
    "binary", "compound", "encode_message", "encode_value", "list_of", "map_of",
    "property_string", "publisher_annotation", "read_value", "scan", "string", "symbol",
    "with_property_string", "with_redelivery",
]


class MalformedMessage(ValueError):
    """The bytes are not a well-formed AMQP message; str() says what was wrong and where (byte
    offset)."""


@dataclass(slots=True, frozen=True)
class MessageInfo:
    """The routing fields of one message, as :func:`scan` read them."""

    ttl_ms: int | None  # header.ttl (uint milliseconds), None when absent
    delivery_mode: str | None  # message-annotations key `x-opt-delivery-mode`, value as str
    durable: bool  # header.durable, False when absent
    delivery_count: int  # header.delivery-count, 0 when absent
    # Where message-annotations are: the offset of the map (after its descriptor) and of its
    # end, or (-1, where a message-annotations section would go) when there are none.
    # (Not part of equality: two scans of the same fields compare equal wherever they are.)
    annotations_at: int = field(default=-1, compare=False)
    annotations_end: int = field(default=0, compare=False)
    guarantee: str | None = None  # message-annotations key `x-opt-guarantee`, value as str


EMPTY = MessageInfo(None, None, False, 0)

# Section descriptor codes (3.2): the low 32 bits of the ulong descriptor, domain 0x00000000.
_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_MESSAGE_ANNOTATIONS = 0x72
_FOOTER = 0x78

# The symbolic descriptors of the same sections (3.2.1 - 3.2.10); 1.5 allows either form.
_SECTION_SYMBOLS = {
    b"amqp:header:list": 0x70,
    b"amqp:delivery-annotations:map": 0x71,
    b"amqp:message-annotations:map": 0x72,
    b"amqp:properties:list": 0x73,
    b"amqp:application-properties:map": 0x74,
    b"amqp:data:binary": 0x75,
    b"amqp:amqp-sequence:list": 0x76,
    b"amqp:amqp-value:*": 0x77,
    b"amqp:footer:map": 0x78,
}

_MODE_KEY = b"x-opt-delivery-mode"
_MODE_KEY_LEN = len(_MODE_KEY)
_GUARANTEE_KEY = b"x-opt-guarantee"  # "at-least-once" or "exactly-once" (docs/guarantees.md)
_GUARANTEE_KEY_LEN = len(_GUARANTEE_KEY)

# Deeper nesting than this inside an annotation value is refused rather than risking Python's
# recursion limit; real annotations are flat.
_MAX_DEPTH = 64

_u32 = struct.Struct(">I").unpack_from
_u32x2 = struct.Struct(">II").unpack_from
_u64 = struct.Struct(">Q").unpack_from

# What scan works on: bytes, or a memoryview cast to unsigned bytes (indexing gives ints).
_Buffer = bytes | memoryview

# How to skip a value, by its format code (1.6; the "category" is the high nibble, 1.2).
# A number >= 0 is the fixed width in bytes after the code; negatives name the other forms.
_UNKNOWN = -1
_VAR8 = -2  # vbin8 0xa0, str8-utf8 0xa1, sym8 0xa3: 1-byte size, then the bytes
_VAR32 = -3  # vbin32 0xb0, str32-utf8 0xb1, sym32 0xb3: 4-byte size, then the bytes
_COMPOUND8 = -4  # list8 0xc0, map8 0xc1: 1-byte size, 1-byte count, the items (1.6.22, 1.6.23)
_COMPOUND32 = -5  # list32 0xd0, map32 0xd1: 4-byte size, 4-byte count, the items
_ARRAY8 = -6  # array8 0xe0: 1-byte size, 1-byte count, one constructor, the items (1.6.24)
_ARRAY32 = -7  # array32 0xf0: 4-byte size, 4-byte count, one constructor, the items


def _format_table() -> tuple[int, ...]:
    table = [_UNKNOWN] * 256
    # 0x40 null, 0x41 true, 0x42 false, 0x43 uint0, 0x44 ulong0, 0x45 list0: no data (1.6.1 ff).
    for code in range(0x40, 0x46):
        table[code] = 0
    # ubyte, byte, smalluint, smallulong, smallint, smalllong, boolean.
    for code in range(0x50, 0x57):
        table[code] = 1
    table[0x60] = table[0x61] = 2  # ushort, short
    # uint, int, float, char, decimal32.
    for code in range(0x70, 0x75):
        table[code] = 4
    # ulong, long, double, timestamp, decimal64.
    for code in range(0x80, 0x85):
        table[code] = 8
    table[0x94] = table[0x98] = 16  # decimal128, uuid
    for code in (0xA0, 0xA1, 0xA3):
        table[code] = _VAR8
    for code in (0xB0, 0xB1, 0xB3):
        table[code] = _VAR32
    table[0xC0] = table[0xC1] = _COMPOUND8
    table[0xD0] = table[0xD1] = _COMPOUND32
    table[0xE0] = _ARRAY8
    table[0xF0] = _ARRAY32
    return tuple(table)


_FORMAT = _format_table()


def _fail(what: str, offset: int) -> MalformedMessage:
    return MalformedMessage(f"{what} (byte offset {offset})")


# ---------------------------------------------------------------------------- skipping values


def _skip(buf: _Buffer, pos: int, limit: int, depth: int) -> int:
    """Return the offset just after the AMQP value whose constructor is at `pos`, checking that
    it fits before `limit` (the end of the payload or of the enclosing compound value)."""
    if pos >= limit:
        raise _fail("truncated: expected a value", pos)
    code = buf[pos]
    if code == 0:
        # Described value (1.2): 0x00, the descriptor (itself a value), then the value.
        if depth >= _MAX_DEPTH:
            raise _fail(f"values nested more than {_MAX_DEPTH} deep", pos)
        pos = _skip(buf, pos + 1, limit, depth + 1)
        return _skip(buf, pos, limit, depth + 1)
    return _skip_data(buf, code, pos + 1, limit, depth, pos)


def _skip_data(buf: _Buffer, code: int, pos: int, limit: int, depth: int, at: int) -> int:
    """Skip the data of a value of format `code` (its constructor, at `at`, already read)."""
    kind = _FORMAT[code]
    if kind >= 0:
        pos += kind
        if pos > limit:
            raise _fail(f"truncated value of type 0x{code:02x} ({kind} bytes)", at)
        return pos
    if kind == _VAR8:
        if pos >= limit:
            raise _fail(f"truncated size of type 0x{code:02x}", at)
        pos += 1 + buf[pos]
        if pos > limit:
            raise _fail(f"value of type 0x{code:02x} runs past its end", at)
        return pos
    if kind == _VAR32:
        if pos + 4 > limit:
            raise _fail(f"truncated size of type 0x{code:02x}", at)
        pos += 4 + _u32(buf, pos)[0]
        if pos > limit:
            raise _fail(f"value of type 0x{code:02x} runs past its end", at)
        return pos
    if kind == _UNKNOWN:
        raise _fail(f"unknown type code 0x{code:02x}", at)
    if depth >= _MAX_DEPTH:
        raise _fail(f"values nested more than {_MAX_DEPTH} deep", at)
    # Compound or array: the size counts the bytes after the size field, count included.
    if kind in (_COMPOUND8, _ARRAY8):
        if pos + 2 > limit:
            raise _fail(f"truncated size/count of type 0x{code:02x}", at)
        size = buf[pos]
        count = buf[pos + 1]
        stop = pos + 1 + size
        if size < 1:
            raise _fail(f"size {size} of type 0x{code:02x} leaves no room for its count", at)
        pos += 2
    else:
        if pos + 8 > limit:
            raise _fail(f"truncated size/count of type 0x{code:02x}", at)
        size, count = _u32x2(buf, pos)
        stop = pos + 4 + size
        if size < 4:
            raise _fail(f"size {size} of type 0x{code:02x} leaves no room for its count", at)
        pos += 8
    if stop > limit:
        raise _fail(f"type 0x{code:02x} of size {size} runs past the end of its container", at)
    if kind in (_COMPOUND8, _COMPOUND32):
        if code & 0x0F == 1 and count & 1:
            raise _fail(f"map with an odd element count {count}", at)
        # Every item takes at least its constructor byte: refuse impossible counts at once.
        if count > stop - pos:
            raise _fail(f"count {count} of type 0x{code:02x} does not fit in size {size}", at)
        for _ in range(count):
            pos = _skip(buf, pos, stop, depth + 1)
    else:
        # Array (1.6.24): one element constructor, possibly described, then the bare elements.
        if pos >= stop:
            raise _fail("array without an element constructor", at)
        element = buf[pos]
        while element == 0:
            pos = _skip(buf, pos + 1, stop, depth + 1)
            if pos >= stop:
                raise _fail("array without an element constructor", at)
            element = buf[pos]
        pos += 1
        width = _FORMAT[element]
        if width >= 0:
            pos += count * width
        elif width == _UNKNOWN:
            raise _fail(f"unknown array element type code 0x{element:02x}", pos - 1)
        else:
            if count > stop - pos:
                raise _fail(f"count {count} of array does not fit in size {size}", at)
            for _ in range(count):
                pos = _skip_data(buf, element, pos, stop, depth + 1, pos)
    if pos != stop:
        raise _fail(
            f"type 0x{code:02x} declares size {size} but its {count} items end at offset {pos}",
            at,
        )
    return pos


# ---------------------------------------------------------------------------- sections


def _descriptor(buf: _Buffer, pos: int, end: int) -> tuple[int, int]:
    """Read the section descriptor at `pos` (3.2: every section is a described type, 1.2) and
    return (section code 0x70 - 0x78, offset of the section's value)."""
    if buf[pos] != 0:
        raise _fail(
            f"expected a message section (described type 0x00, 3.2), got 0x{buf[pos]:02x}", pos
        )
    if pos + 2 > end:
        raise _fail("truncated section descriptor", pos)
    form = buf[pos + 1]
    if form == 0x53:  # smallulong
        if pos + 3 > end:
            raise _fail("truncated section descriptor", pos)
        code = buf[pos + 2]
        value = pos + 3
    elif form == 0x80:  # ulong
        if pos + 10 > end:
            raise _fail("truncated section descriptor", pos)
        code = _u64(buf, pos + 2)[0]
        value = pos + 10
    elif form == 0x44:  # ulong0
        code = 0
        value = pos + 2
    elif form == 0xA3 or form == 0xB3:  # sym8 / sym32: the symbolic form (1.5)
        if form == 0xA3:
            if pos + 3 > end:
                raise _fail("truncated section descriptor", pos)
            start = pos + 3
            value = start + buf[pos + 2]
        else:
            if pos + 6 > end:
                raise _fail("truncated section descriptor", pos)
            start = pos + 6
            value = start + _u32(buf, pos + 2)[0]
        if value > end:
            raise _fail("truncated section descriptor", pos)
        code = _SECTION_SYMBOLS.get(bytes(buf[start:value]), -1)
        if code < 0:
            raise _fail(
                f"descriptor {bytes(buf[start:value])!r} is not an AMQP message section (3.2)",
                pos,
            )
    else:
        raise _fail(
            f"section descriptor must be a ulong or a symbol (1.5), got type code 0x{form:02x}",
            pos,
        )
    if code < _HEADER or code > _FOOTER:
        raise _fail(f"descriptor 0x{code:x} is not an AMQP message section (3.2)", pos)
    return code, value


def _compound(
    buf: _Buffer, pos: int, end: int, what: str, list_or_map: int
) -> tuple[int, int, int]:
    """Open the list (`list_or_map` 0) or map (1) at `pos`: return (count, first item, stop)."""
    if pos >= end:
        raise _fail(f"truncated: {what} has no value", pos)
    code = buf[pos]
    if code == 0xC0 | list_or_map:
        if pos + 3 > end:
            raise _fail(f"truncated {what}", pos)
        size = buf[pos + 1]
        count = buf[pos + 2]
        stop = pos + 2 + size
        if size < 1:
            raise _fail(f"{what}: size {size} leaves no room for its count", pos)
        first = pos + 3
    elif code == 0xD0 | list_or_map:
        if pos + 9 > end:
            raise _fail(f"truncated {what}", pos)
        size, count = _u32x2(buf, pos + 1)
        stop = pos + 5 + size
        if size < 4:
            raise _fail(f"{what}: size {size} leaves no room for its count", pos)
        first = pos + 9
    elif code == 0x45 and not list_or_map:  # list0
        return 0, pos + 1, pos + 1
    else:
        kind = "map" if list_or_map else "list"
        raise _fail(f"{what} must be a {kind}, got type code 0x{code:02x}", pos)
    if stop > end:
        raise _fail(f"{what} of size {size} runs past the end of the payload", pos)
    if count > stop - first:
        raise _fail(f"{what}: count {count} does not fit in size {size}", pos)
    return count, first, stop


def _header(buf: _Buffer, pos: int, end: int) -> list:
    """Parse the header list (3.2.1) at `pos`: return (durable, priority, ttl, first_acquirer,
    delivery_count, end offset), with None for fields that are absent or null."""
    count, pos, stop = _compound(buf, pos, end, "header", 0)
    fields: list = [None, None, None, None, None]
    for index in range(count):
        if pos >= stop:
            raise _fail(f"header: {count} fields declared, the list ends after {index}", pos)
        code = buf[pos]
        at = pos
        pos += 1
        if index >= 5:
            # A later revision's field: skip it, the list size says where it ends.
            pos = _skip(buf, at, stop, 0)
            continue
        if code == 0x40:  # null: the field's default
            continue
        value: Any  # a bool or an int (typed for mypyc, which would turn True into 1 in an int)
        if index == 0 or index == 3:  # durable, first-acquirer: boolean (1.6.2)
            if code == 0x41:
                value = True
            elif code == 0x42:
                value = False
            elif code == 0x56:
                if pos >= stop or buf[pos] > 1:
                    raise _fail(f"header field {index}: truncated or invalid boolean", at)
                value = buf[pos] == 1
                pos += 1
            else:
                raise _fail(f"header field {index} must be a boolean, got 0x{code:02x}", at)
        elif index == 1:  # priority: ubyte (1.6.3)
            if code != 0x50:
                raise _fail(f"header priority must be a ubyte, got 0x{code:02x}", at)
            if pos >= stop:
                raise _fail("header priority: truncated ubyte", at)
            value = buf[pos]
            pos += 1
        else:  # ttl (milliseconds), delivery-count: uint (1.6.5)
            if code == 0x52:  # smalluint
                if pos >= stop:
                    raise _fail(f"header field {index}: truncated uint", at)
                value = buf[pos]
                pos += 1
            elif code == 0x70:
                if pos + 4 > stop:
                    raise _fail(f"header field {index}: truncated uint", at)
                value = _u32(buf, pos)[0]
                pos += 4
            elif code == 0x43:  # uint0
                value = 0
            else:
                raise _fail(f"header field {index} must be a uint, got 0x{code:02x}", at)
        fields[index] = value
    if pos != stop:
        raise _fail(f"header: list size and its {count} fields disagree (end at {pos})", stop)
    fields.append(stop)
    return fields


def _routing_annotations(buf: _Buffer, pos: int,
                         end: int) -> tuple[str | None, str | None, int]:
    """Walk the message-annotations map (3.2.3) at `pos`: return (the value of the
    x-opt-delivery-mode key or None, that of x-opt-guarantee or None, the map's end offset)."""
    count, pos, stop = _compound(buf, pos, end, "message-annotations", 1)
    if count & 1:
        raise _fail(f"message-annotations: odd map count {count}", pos)
    mode = guarantee = None
    found = 0  # which of the two keys were seen: 1 the mode, 2 the guarantee
    u32 = _u32
    fmt = _FORMAT
    for _ in range(count >> 1):
        if pos >= stop:
            raise _fail("message-annotations: fewer entries than its count", pos)
        code = buf[pos]
        # Symbol (the spec's key type) or string keys; compare bytes, so any junk just misses.
        if code == 0xA3 or code == 0xA1:
            if pos + 2 > stop:
                raise _fail("truncated annotation key", pos)
            start = pos + 2
            pos = start + buf[pos + 1]
        elif code == 0xB3 or code == 0xB1:
            if pos + 5 > stop:
                raise _fail("truncated annotation key", pos)
            start = pos + 5
            pos = start + u32(buf, pos + 1)[0]
        else:
            pos = _skip(buf, pos, stop, 1)
            pos = _skip(buf, pos, stop, 1)
            continue
        if pos > stop:
            raise _fail("annotation key runs past the end of message-annotations", start)
        length = pos - start
        which = 1 if length == _MODE_KEY_LEN and buf[start:pos] == _MODE_KEY else \
            2 if length == _GUARANTEE_KEY_LEN and buf[start:pos] == _GUARANTEE_KEY else 0
        if not which:
            # Another annotation: skip its value, inline for the usual fixed-width and short
            # string / symbol values, through _skip for the rest.
            if pos < stop:
                width = fmt[buf[pos]]
                if width >= 0:
                    after = pos + 1 + width
                elif width == _VAR8 and pos + 1 < stop:
                    after = pos + 2 + buf[pos + 1]
                else:
                    after = stop + 1
                if after <= stop:
                    pos = after
                    continue
            pos = _skip(buf, pos, stop, 1)
            continue
        name = "x-opt-delivery-mode" if which == 1 else "x-opt-guarantee"
        if found & which:
            raise _fail(f"message-annotations: {name} appears twice", start)
        found |= which
        value, pos = _text_value(buf, pos, stop, name)
        if which == 1:
            mode = value
        else:
            guarantee = value
    if pos != stop:
        raise _fail(f"message-annotations: map size and its {count} items disagree", stop)
    return mode, guarantee, stop


def _text_value(buf: _Buffer, pos: int, stop: int, name: str) -> tuple[str | None, int]:
    """The string or symbol value of annotation `name` at `pos` (None for null), and the
    offset after it."""
    if pos >= stop:
        raise _fail(f"truncated: {name} has no value", pos)
    code = buf[pos]
    at = pos
    if code == 0xA1 or code == 0xA3:
        if pos + 2 > stop:
            raise _fail(f"truncated {name} value", at)
        start = pos + 2
        pos = start + buf[pos + 1]
    elif code == 0xB1 or code == 0xB3:
        if pos + 5 > stop:
            raise _fail(f"truncated {name} value", at)
        start = pos + 5
        pos = start + _u32(buf, pos + 1)[0]
    elif code == 0x40:
        return None, pos + 1
    else:
        raise _fail(f"{name} must be a string or symbol, got type code 0x{code:02x}", at)
    if pos > stop:
        raise _fail(f"{name} value runs past the end of message-annotations", at)
    try:
        return str(buf[start:pos], "utf-8"), pos
    except UnicodeDecodeError:
        raise _fail(f"{name} value is not valid UTF-8", at) from None


def scan(payload: bytes | bytearray | memoryview) -> MessageInfo:
    """Read ttl, durable and delivery-count from the header (3.2.1) and x-opt-delivery-mode from
    the message-annotations (3.2.3) of an encoded message, skipping delivery-annotations (3.2.2)
    and stopping, unparsed, at the first later section. Raise MalformedMessage on bad bytes."""
    buf = payload if type(payload) is bytes else memoryview(payload).cast("B")
    end = len(buf)
    if end == 0:
        raise _fail("empty payload: a message has at least one section (3.2)", 0)
    # Fast way out: a message that opens with properties, application-properties or the body.
    if end >= 3 and buf[0] == 0 and buf[1] == 0x53 and 0x72 < buf[2] <= _FOOTER:
        return EMPTY
    ttl = None
    durable = False
    delivery_count = 0
    mode = guarantee = None
    last = 0
    pos = 0
    at = -1
    while pos < end:
        # Inline the usual descriptor form, 0x00 0x53 code; _descriptor does the rest and raises.
        if (
            buf[pos] == 0
            and pos + 3 <= end
            and buf[pos + 1] == 0x53
            and _HEADER <= buf[pos + 2] <= _FOOTER
        ):
            code = buf[pos + 2]
            value = pos + 3
        else:
            code, value = _descriptor(buf, pos, end)
        if code > _MESSAGE_ANNOTATIONS:
            break
        if code <= last:
            raise _fail(f"section 0x{code:x} out of order (3.2) after section 0x{last:x}", pos)
        last = code
        if code == _HEADER:
            fields = _header(buf, value, end)
            durable = fields[0] is True
            ttl = fields[2]
            delivery_count = fields[4] or 0
            pos = fields[5]
        elif code == _DELIVERY_ANNOTATIONS:
            _compound(buf, value, end, "delivery-annotations", 1)
            pos = _skip(buf, value, end, 0)
        else:
            at = value
            mode, guarantee, pos = _routing_annotations(buf, value, end)
    return MessageInfo(ttl, mode, durable, delivery_count, at, pos, guarantee)


PUBLISHER_KEY = b"x-opt-exactmesh-publisher"


def publisher_annotation(identity: str) -> bytes:
    """The encoded message-annotations entry naming a message's publisher (its container-id
    and link name), to add with :func:`annotate`."""
    return symbol(PUBLISHER_KEY.decode()) + string(identity)


def annotate(data: bytes | bytearray | memoryview, info: MessageInfo, entry: bytes) -> bytes:
    """`data` with `entry` (one encoded key and value) added to its message-annotations
    (3.2.3), or a message-annotations section holding it put where one belongs; `info` is what
    :func:`scan` said of it. Every other byte is kept as is."""
    # mypyc holds the types to their annotations: a bytearray (what proton's Message.encode
    # gives) is copied once; the router's own payloads are bytes already.
    payload = data if type(data) is bytes else bytes(data)
    if info.annotations_at < 0:
        where = info.annotations_end
        body = b"\xc1" + bytes((len(entry) + 1, 2)) + entry if len(entry) < 255 else \
            b"\xd1" + (len(entry) + 4).to_bytes(4, "big") + b"\x00\x00\x00\x02" + entry
        return b"".join((payload[:where], b"\x00\x53\x72", body, payload[where:]))
    count, first, stop = _compound(payload, info.annotations_at, len(payload),
                                   "message-annotations", 1)
    items = payload[first:stop]
    size = 4 + len(items) + len(entry)
    head = b"\xd1" + size.to_bytes(4, "big") + (count + 2).to_bytes(4, "big")
    return b"".join((payload[:info.annotations_at], head, items, entry, payload[stop:]))


_HEADER_PREFIX = b"\x00\x53\x70\xc0"  # described, smallulong 0x70 (header, 3.2.1), list8


def with_redelivery(payload: bytes | bytearray | memoryview, delivery_count: int) -> bytes:
    """Return `payload` with its header (3.2.1) replaced, or one put in front when it has none,
    so that delivery-count is `delivery_count` and first-acquirer is false: the message is being
    delivered again (the delivery-count and first-acquirer fields of 3.2.1). Durable, priority
    and ttl are kept (header fields of later spec revisions are dropped); every byte after the
    header is kept as is."""
    if not 0 <= delivery_count <= 0xFFFFFFFF:
        raise ValueError(f"delivery_count {delivery_count} is not a uint")
    buf = bytes(payload)
    scan(buf)  # validates the front sections; raises MalformedMessage
    code, value = _descriptor(buf, 0, len(buf))
    if code == _HEADER:
        durable, priority, ttl, _, _, rest = _header(buf, value, len(buf))
    else:
        durable = priority = ttl = None
        rest = 0
    # The list, as encoded by hand (1.6.22): durable, priority, ttl, first-acquirer, count.
    items = b"".join(
        (
            b"\x41" if durable else b"\x42",
            b"\x50" + bytes((4 if priority is None else priority,)),  # 4 is the default
            b"\x40" if ttl is None else b"\x70" + ttl.to_bytes(4, "big"),
            b"\x42",
            b"\x70" + delivery_count.to_bytes(4, "big"),
        )
    )
    return b"".join((_HEADER_PREFIX, bytes((len(items) + 1, 5)), items, buf[rest:]))


# ============================================================================ writing
#
# Values (1.6) and sections (3.2) as bytes, built by hand: a few microseconds a message, where
# proton's Message.encode costs tens.

# A section is a described value: 0x00, the descriptor as a smallulong (0x53 code), the value.
HEADER = b"\x00\x53\x70"  # list: durable, priority, ttl, first-acquirer, delivery-count
MESSAGE_ANNOTATIONS = b"\x00\x53\x72"  # map, symbol keys
PROPERTIES = b"\x00\x53\x73"  # list: message-id, user-id, to, subject, reply-to, ...
APPLICATION_PROPERTIES = b"\x00\x53\x74"  # map, string keys, simple values
DATA = b"\x00\x53\x75"  # binary: the body as bytes
AMQP_VALUE = b"\x00\x53\x77"  # any one value: the body

_p32 = struct.Struct(">I").pack
_p64 = struct.Struct(">q").pack
_pd = struct.Struct(">d").pack


def _variable(code8: int, code32: int, raw: bytes) -> bytes:
    n = len(raw)
    if n < 256:
        return bytes((code8, n)) + raw
    return bytes((code32,)) + _p32(n) + raw


def string(text: str) -> bytes:
    """A string (str8 / str32, UTF-8)."""
    return _variable(0xA1, 0xB1, text.encode())


def symbol(text: str) -> bytes:
    """A symbol (sym8 / sym32): annotation keys, content types."""
    return _variable(0xA3, 0xB3, text.encode())


def binary(raw: bytes) -> bytes:
    """A binary (vbin8 / vbin32)."""
    return _variable(0xA0, 0xB0, raw)


def compound(code8: int, code32: int, count: int, items: bytes) -> bytes:
    """A list (0xc0 / 0xd0) or map (0xc1 / 0xd1) of `count` encoded items (1.6.22, 1.6.23)."""
    size = len(items) + 1
    if size < 256 and count < 256:
        return bytes((code8, size, count)) + items
    return bytes((code32,)) + _p32(len(items) + 4) + _p32(count) + items


def list_of(items: list[bytes]) -> bytes:
    """A list of encoded values."""
    return compound(0xC0, 0xD0, len(items), b"".join(items))


def map_of(pairs: list[bytes]) -> bytes:
    """A map of encoded key + value pairs (each item one key followed by its value)."""
    return compound(0xC1, 0xD1, 2 * len(pairs), b"".join(pairs))


class Unsupported(Exception):
    """A value or shape this codec does not write or read: use proton's Message instead."""


def encode_value(value: Any) -> bytes:
    """A simple value, with the AMQP type proton would give it: None, bool, int (long),
    float (double), str (string), bytes (binary). Raises Unsupported for anything else
    (subclasses included: proton's symbol, ulong, ... keep their types through proton)."""
    kind = type(value)
    if value is None:
        return b"\x40"
    if kind is bool:
        return b"\x41" if value else b"\x42"
    if kind is int:
        if -128 <= value <= 127:
            return b"\x55" + (value & 0xFF).to_bytes(1, "big")  # smalllong
        if -(1 << 63) <= value < (1 << 63):
            return b"\x81" + _p64(value)
        raise Unsupported(f"integer {value} does not fit an AMQP long")
    if kind is float:
        return b"\x82" + _pd(value)
    if kind is str:
        return string(value)
    if kind is bytes:
        return binary(value)
    raise Unsupported(f"no simple AMQP type for {kind.__name__}")


def encode_message(body: bytes | str, *, to: str, message_id: str | None = None,
                   durable: bool = False, ttl_ms: int | None = None,
                   application_properties: dict[str, Any] | None = None) -> bytes:
    """A whole message, as proton's ``Message(body=..., address=to, id=message_id, durable=...,
    properties=...)`` with ``ttl`` would encode it: a header (durable, ttl), the properties
    (message-id, to), the application-properties, and the body as one amqp-value (binary or
    string, so a receiver decodes the type it was sent with). Raises Unsupported for a value
    `encode_value` does not write, a key that is not a str, a body of another type (a
    subclass included) or a ttl that is not a uint."""
    if ttl_ms is None:
        header = b"\xc0\x02\x01" + (b"\x41" if durable else b"\x42")
    elif not 0 <= ttl_ms <= 0xFFFFFFFF:
        raise Unsupported(f"ttl {ttl_ms} ms is not an AMQP uint")
    else:
        header = (b"\xc0\x08\x03" + (b"\x41" if durable else b"\x42") + b"\x40\x70"
                  + _p32(ttl_ms))
    out = [HEADER, header, PROPERTIES,
           list_of([b"\x40" if message_id is None else string(message_id), b"\x40", string(to)])]
    if application_properties is not None:  # an empty map too, as proton writes it
        pairs = []
        for key, value in application_properties.items():
            if type(key) is not str:
                raise Unsupported(f"application property key {key!r} is not a str")
            pairs.append(string(key) + encode_value(value))
        out += [APPLICATION_PROPERTIES, map_of(pairs)]
    if type(body) is bytes:
        out += [AMQP_VALUE, binary(body)]
    elif type(body) is str:
        out += [AMQP_VALUE, string(body)]
    else:
        raise Unsupported(f"a body of type {type(body).__name__}")
    return b"".join(out)


# ============================================================================ reading values

_u16 = struct.Struct(">H")
_i16 = struct.Struct(">h")
_u32s = struct.Struct(">I")
_i32 = struct.Struct(">i")
_u64s = struct.Struct(">Q")
_i64 = struct.Struct(">q")


def read_value(buf: bytes, pos: int) -> tuple[Any, int]:
    """One AMQP value (1.6) at `pos`: (value, next position). A described value reads as its
    value; a map as its list of (key, value) pairs. Raises Unsupported for the types and
    shapes left to proton (arrays, floats, uuids, chars, decimals), IndexError / struct.error
    on truncation, UnicodeDecodeError on a bad string."""
    code = buf[pos]
    pos += 1
    if code == 0x00:  # described: skip the descriptor, keep the value
        _, pos = read_value(buf, pos)
        return read_value(buf, pos)
    if code == 0x40:
        return None, pos
    if code in (0xA1, 0xA3, 0xA0):
        n = buf[pos]
        raw = buf[pos + 1:pos + 1 + n]
        if len(raw) != n:
            raise Unsupported
        return (raw if code == 0xA0 else raw.decode()), pos + 1 + n
    if code in (0xB1, 0xB3, 0xB0):
        n = _u32s.unpack_from(buf, pos)[0]
        raw = buf[pos + 4:pos + 4 + n]
        if len(raw) != n:
            raise Unsupported
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
        return _i16.unpack_from(buf, pos)[0], pos + 2
    if code == 0x70:
        return _u32s.unpack_from(buf, pos)[0], pos + 4
    if code == 0x71:
        return _i32.unpack_from(buf, pos)[0], pos + 4
    if code in (0x80, 0x83):  # ulong, timestamp
        return _u64s.unpack_from(buf, pos)[0], pos + 8
    if code == 0x81:
        return _i64.unpack_from(buf, pos)[0], pos + 8
    if code == 0x45:
        return [], pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code in (0xC0, 0xC1):
            size, count = buf[pos], buf[pos + 1]
            start, end = pos + 2, pos + 1 + size
        else:
            size, count = _u32s.unpack_from(buf, pos)[0], _u32s.unpack_from(buf, pos + 4)[0]
            start, end = pos + 8, pos + 4 + size
        items: list[Any] = []
        p = start
        for _ in range(count):
            item, p = read_value(buf, p)  # not `v`: mypyc types a local by its first assignment
            items.append(item)
        if p != end:
            raise Unsupported
        if code in (0xC1, 0xD1):
            if count % 2:
                raise Unsupported
            # A map, as its (key, value) pairs (keys may be unhashable lists in theory).
            return list(zip(items[0::2], items[1::2], strict=True)), end
        return items, end
    raise Unsupported  # arrays, floats, uuids, chars, decimals: proton


# ============================================================================ properties (3.2.4)

# Indexes in the properties list: what the relays' reply-name substitution reads and writes.
PROPERTY_TO = 2
PROPERTY_REPLY_TO = 4


def _properties(buf: bytes, at: int) -> tuple[int, int, int, int] | None:
    """(where the list starts, its count, its first item, its end) of the properties section
    (3.2.4, in its usual 0x00 0x53 0x73 form), or None when the message has none. `at`: where
    it would start (`MessageInfo.annotations_end`), or -1 to scan for it."""
    pos = scan(buf).annotations_end if at < 0 else at
    if buf[pos:pos + 3] != PROPERTIES:
        return None
    count, first, stop = _compound(buf, pos + 3, len(buf), "properties", 0)
    return pos + 3, count, first, stop


def _field_span(buf: bytes, first: int, stop: int, index: int) -> tuple[int, int]:
    pos = first
    for _ in range(index):
        pos = _skip(buf, pos, stop, 0)
    return pos, _skip(buf, pos, stop, 0)


def property_string(payload: bytes, index: int, at: int = -1) -> str | None:
    """The properties field `index` (PROPERTY_TO, PROPERTY_REPLY_TO) when it is a string (an
    address), else None: absent, null or of another type. `at` as for `_properties`. Raises
    MalformedMessage."""
    found = _properties(payload, at)
    if found is None or index >= found[1]:
        return None
    start, end = _field_span(payload, found[2], found[3], index)
    code = payload[start]
    if code == 0xA1:
        return str(payload[start + 2:end], "utf-8", "replace")
    if code == 0xB1:
        return str(payload[start + 5:end], "utf-8", "replace")
    return None


def with_property_string(payload: bytes, index: int, text: str, at: int = -1) -> bytes:
    """`payload` with properties field `index` set to the string `text`; every other byte of
    the message is kept. The field must be there (see `property_string`)."""
    found = _properties(payload, at)
    if found is None or index >= found[1]:
        raise ValueError(f"no properties field {index} to replace")
    at, count, first, stop = found
    start, end = _field_span(payload, first, stop, index)
    items = payload[first:start] + string(text) + payload[end:stop]
    return b"".join((payload[:at], compound(0xC0, 0xD0, count, items), payload[stop:]))

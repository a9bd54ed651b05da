"""router.core.message (the AMQP message codec): scan() and with_redelivery() agree with
proton's own decoding, and refuse bad bytes with MalformedMessage only.

Proton's encoder always writes a header section (an empty list0 when no field is set), writes
annotation maps as map32 and always turns str annotation keys into symbols, and its decoder is
lenient about broken input, so the forms proton never writes (map8, list32 headers, string keys,
symbolic or ulong descriptors) are built here by hand, and proton is used as the oracle for the
values, never for what is malformed.
"""

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import (
    UNDESCRIBED,
    Array,
    Data,
    Described,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from router.core.message import EMPTY, MalformedMessage, MessageInfo, scan, with_redelivery

MODE = "x-opt-delivery-mode"

# ---------------------------------------------------------------- a small encoder for hand forms


def vbin(kind: int, data: bytes) -> bytes:
    """kind 0xa0 / 0xa1 / 0xa3 (the 8-bit form, or its 32-bit form when too long)."""
    if len(data) < 256:
        return bytes((kind, len(data))) + data
    return bytes((kind + 0x10,)) + struct.pack(">I", len(data)) + data


def sym(text: str | bytes, wide: bool = False) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return b"\xb3" + struct.pack(">I", len(data)) + data if wide else vbin(0xA3, data)


def string(text: str | bytes, wide: bool = False) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return b"\xb1" + struct.pack(">I", len(data)) + data if wide else vbin(0xA1, data)


def uint_(n: int) -> bytes:
    return b"\x70" + struct.pack(">I", n)


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes((0xC0, len(body) + 1, len(items))) + body


def list32(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body


def map8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes((0xC1, len(body) + 1, len(items))) + body


def map32(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xd1" + struct.pack(">II", len(body) + 4, len(items)) + body


NAMES = {
    0x70: "amqp:header:list",
    0x71: "amqp:delivery-annotations:map",
    0x72: "amqp:message-annotations:map",
    0x73: "amqp:properties:list",
    0x77: "amqp:amqp-value:*",
}


def section(code: int, value: bytes, form: str = "small") -> bytes:
    if form == "small":
        return bytes((0, 0x53, code)) + value
    if form == "ulong":
        return b"\x00\x80" + struct.pack(">Q", code) + value
    return b"\x00" + sym(NAMES[code], wide=form == "sym32") + value


BODY = section(0x77, string("hello"))
PROPERTIES = section(0x73, list8(b"\x40", b"\x40", string("queue")))  # message-id, user-id, to


# ---------------------------------------------------------------- the oracle


def proton_view(payload: bytes) -> tuple:
    """What proton decodes, in scan's terms (proton reads an absent ttl as 0)."""
    m = Message()
    m.decode(payload)
    mode = (m.annotations or {}).get(MODE)
    return (
        round(m.ttl * 1000),
        None if mode is None else str(mode),
        m.durable,
        m.delivery_count,
    )


def scan_view(info: MessageInfo) -> tuple:
    return (info.ttl_ms or 0, info.delivery_mode, info.durable, info.delivery_count)


def agree(payload: bytes) -> MessageInfo:
    info = scan(payload)
    assert scan_view(info) == proton_view(payload)
    assert scan(memoryview(payload)) == info
    assert scan(bytearray(payload)) == info
    return info


# ---------------------------------------------------------------- proton-made messages


def test_no_header_fields():
    m = Message(body="x")
    payload = m.encode()
    assert payload.startswith(b"\x00\x53\x70\x45")  # proton writes an empty header anyway
    assert agree(payload) == EMPTY


def test_no_front_sections_at_all():
    assert agree(BODY) is EMPTY
    assert agree(PROPERTIES + BODY) is EMPTY
    # Only the header of a proton message, taken away.
    payload = Message(body={"a": 1}, address="q").encode()
    assert agree(payload[4:]) is EMPTY


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"ttl": 1.5}, MessageInfo(1500, None, False, 0)),
        ({"durable": True}, MessageInfo(None, None, True, 0)),
        ({"priority": 9}, MessageInfo(None, None, False, 0)),
        ({"first_acquirer": True}, MessageInfo(None, None, False, 0)),
        ({"delivery_count": 7}, MessageInfo(None, None, False, 7)),
        ({"delivery_count": 2**32 - 1}, MessageInfo(None, None, False, 2**32 - 1)),
        (
            {"ttl": 4294967.295, "durable": True, "priority": 0, "delivery_count": 300},
            MessageInfo(2**32 - 1, None, True, 300),
        ),
    ],
)
def test_header_fields(kwargs, expected):
    m = Message(body=b"payload")
    for name, value in kwargs.items():
        setattr(m, name, value)
    assert agree(m.encode()) == expected


@pytest.mark.parametrize("value", ["some", "all", symbol("some"), symbol("all")])
def test_delivery_mode_symbol_key(value):
    m = Message(body="x", ttl=2, annotations={symbol(MODE): value, symbol("x-opt-other"): 7})
    assert agree(m.encode()) == MessageInfo(2000, str(value), False, 0)


def test_proton_turns_str_annotation_keys_into_symbols():
    payload = Message(body="x", annotations={MODE: "all"}).encode()
    assert sym(MODE) in payload
    assert agree(payload).delivery_mode == "all"


@pytest.mark.parametrize("value", ["some", "all"])
@pytest.mark.parametrize("wide", [False, True])
def test_delivery_mode_string_key(value, wide):
    """A str8 / str32 key, which proton's Message never writes but other clients might."""
    annotations = map32(sym("a"), b"\x55\x01", string(MODE, wide), string(value, wide))
    payload = section(0x70, list8(b"\x41")) + section(0x72, annotations) + BODY
    assert agree(payload) == MessageInfo(None, value, True, 0)


def test_delivery_annotations_before_message_annotations():
    m = Message(body=["a", 1], ttl=0.25, durable=True)
    m.instructions = {symbol("x-opt-lock"): uuid.uuid4(), symbol(MODE): "not-this-one"}
    m.annotations = {symbol(MODE): "all"}
    payload = m.encode()
    assert b"\x00\x53\x71" in payload
    assert agree(payload) == MessageInfo(250, "all", True, 0)


def test_delivery_annotations_without_message_annotations():
    m = Message(body="x", delivery_count=1)
    m.instructions = {symbol(MODE): "all"}
    assert agree(m.encode()) == MessageInfo(None, None, False, 1)


def test_big_annotations_map32_and_list32():
    big = {symbol(f"x-opt-k{i}"): "v" * 40 for i in range(20)}
    big[symbol("x-opt-list")] = list(range(100))
    big[symbol(MODE)] = "some"
    m = Message(body="x" * 1000, ttl=60, properties={"p": "q" * 300}, address="a" * 300)
    m.annotations = big
    m.instructions = dict(big)
    payload = m.encode()
    assert b"\x00\x53\x72\xd1" in payload and b"\xd0" in payload
    assert agree(payload) == MessageInfo(60000, "some", False, 0)


ANNOTATION_VALUES = [
    None,
    True,
    False,
    ubyte(1),
    byte(-1),
    ushort(2),
    short(-2),
    uint(3),
    uint(2**32 - 1),
    int32(-3),
    int32(-(2**31)),
    ulong(5),
    ulong(2**64 - 1),
    2**40,
    float32(1.5),
    2.5,
    char("x"),
    timestamp(1000),
    uuid.UUID(int=12345),
    decimal32(1),
    decimal64(2),
    decimal128(b"0123456789abcdef"),
    b"bin",
    b"b" * 300,
    "str",
    "s" * 300,
    symbol("sym"),
    symbol("y" * 300),
    [],
    [1, "a", [2, [3]]],
    {},
    {"k": {"n": [None]}},
    Described(symbol("d"), 1),
    Described(ulong(9), [1, 2]),
    Array(UNDESCRIBED, Data.INT, 1, 2),
    Array(UNDESCRIBED, Data.STRING, "a", "bc"),
    Array(UNDESCRIBED, Data.LIST, [1], [2, 3]),
    Array(UNDESCRIBED, Data.MAP, {"a": 1}),
    Array(UNDESCRIBED, Data.NULL, None, None),
    Array(UNDESCRIBED, Data.BOOL),
    Array(symbol("dd"), Data.INT, 1),
    Array(UNDESCRIBED, Data.UUID, uuid.UUID(int=1), uuid.UUID(int=2)),
]


@pytest.mark.parametrize("value", ANNOTATION_VALUES, ids=lambda v: type(v).__name__)
def test_skips_every_type(value):
    """Every AMQP type proton writes is skipped in delivery- and message-annotations (1.6)."""
    m = Message(body="x", ttl=3, durable=True)
    m.instructions = {symbol("k"): value, symbol("z"): "after"}
    m.annotations = {symbol("k"): value, symbol(MODE): "some", symbol("z"): value}
    assert agree(m.encode()) == MessageInfo(3000, "some", True, 0)


# ---------------------------------------------------------------- hand-made forms


@pytest.mark.parametrize("form", ["small", "ulong", "sym8", "sym32"])
@pytest.mark.parametrize("compound", [(list8, map8), (list32, map32)])
def test_descriptor_and_compound_forms(form, compound):
    list_, map_ = compound
    header = list_(b"\x56\x01", b"\x50\x05", b"\x52\x07", b"\x42", b"\x43")
    da = map_(sym(MODE), string("nope"), b"\x80" + bytes(8), list_(b"\x40", list_()))
    ma = map_(sym("x-opt-a"), b"\x45", sym(MODE), sym("all"), sym("x-opt-b"), map_())

    def build(form: str) -> bytes:
        return (
            section(0x70, header, form)
            + section(0x71, da, form)
            + section(0x72, ma, form)
            + section(0x73, list_(b"\x40"), form)
            + BODY
        )

    numeric = agree(build("small"))
    assert numeric == MessageInfo(7, "all", True, 0)
    assert scan(build(form)) == numeric
    if form.startswith("sym"):
        # Proton 0.40 silently drops sections with symbolic descriptors (1.5 allows them).
        assert proton_view(build(form)) == (0, None, False, 0)
    else:
        assert agree(build(form)) == numeric


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ([], EMPTY),
        ([b"\x40", b"\x40", b"\x40", b"\x40", b"\x40"], EMPTY),
        ([b"\x41", b"\x40", b"\x43"], MessageInfo(0, None, True, 0)),
        (
            [b"\x42", b"\x50\x00", uint_(2**32 - 1), b"\x41", b"\x52\xff"],
            MessageInfo(2**32 - 1, None, False, 255),
        ),
        (
            [b"\x56\x00", b"\x40", b"\x52\x00", b"\x56\x01", uint_(9)],
            MessageInfo(0, None, False, 9),
        ),
    ],
)
def test_header_encodings(fields, expected):
    assert agree(section(0x70, list8(*fields)) + BODY) == expected
    assert agree(section(0x70, list32(*fields)) + BODY) == expected


def test_header_extra_fields_from_a_later_revision_are_skipped():
    header = list8(b"\x41", b"\x40", uint_(10), b"\x40", b"\x52\x02", string("new"), list8())
    assert scan(section(0x70, header) + BODY) == MessageInfo(10, None, True, 2)


def test_header_only_message():
    assert scan(section(0x70, list8(b"\x41"))) == MessageInfo(None, None, True, 0)


def test_null_delivery_mode_reads_as_absent():
    payload = section(0x72, map8(sym(MODE), b"\x40")) + BODY
    assert agree(payload) == EMPTY


def test_non_utf8_symbol_key_does_not_match():
    payload = section(0x72, map8(sym(b"\xff\xfe"), b"\x41", sym(MODE), sym("all"))) + BODY
    assert scan(payload).delivery_mode == "all"
    payload = section(0x72, map8(sym(b"x-opt-delivery-mod\xe9"), sym("all"))) + BODY
    assert scan(payload).delivery_mode is None


def test_described_value_inside_described_value():
    """Proton 0.40's encoder writes such a value correctly, but its decoder then eats the next
    map item (here it returns {a: ..., symbol('all'): None}, elsewhere it raises TypeError:
    unhashable type: 'list'); scan skips it exactly."""
    value = Described(symbol("x-d"), Described(symbol("x-d"), None))
    payload = Message(annotations={symbol("a"): value, symbol(MODE): "all"}).encode()
    assert payload.count(b"\x00\xa3\x03x-d") == 2
    assert scan(payload) == MessageInfo(None, "all", False, 0)
    assert MODE not in decoded(payload).annotations


def test_non_string_annotation_keys_are_skipped():
    payload = section(0x72, map8(b"\x53\x05", sym("x"), b"\x41", b"\x40", sym(MODE), sym("s")))
    assert scan(payload + BODY).delivery_mode == "s"


def test_scan_stops_at_properties_without_parsing_them():
    """Whatever follows message-annotations is forwarded, not read: even junk."""
    payload = section(0x70, list8(b"\x41")) + section(0x73, b"\xff\xff") + b"junk"
    assert scan(payload) == MessageInfo(None, None, True, 0)
    assert scan(section(0x75, b"\xff")) is EMPTY


# ---------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "empty payload"),
        (b"\x01\x02", "expected a message section"),
        (b"\x00", "truncated section descriptor"),
        (b"\x00\x53", "truncated section descriptor"),
        (b"\x00\x80\x00", "truncated section descriptor"),
        (b"\x00\x53\x10\x45", "not an AMQP message section"),
        (b"\x00\x80\x00\x00\x00\x01\x00\x00\x00\x70\x45", "not an AMQP message section"),
        (b"\x00" + sym("amqp:open:list") + b"\x45", "not an AMQP message section"),
        (b"\x00\x55\x70\x45", "must be a ulong or a symbol"),
        (b"\x00\x53\x70", "header has no value"),
        (b"\x00\x53\x70\x40", "header must be a list"),
        (b"\x00\x53\x70\xc1\x01\x00", "header must be a list"),
        (b"\x00\x53\x70\xc0\x05\x01\x41", "runs past the end"),
        (b"\x00\x53\x70\xc0\x00\x00", "leaves no room for its count"),
        (b"\x00\x53\x70\xc0\x02\x02\x41", "does not fit in size"),
        (b"\x00\x53\x70\xc0\x03\x01\x41\x41", "disagree"),
        (b"\x00\x53\x70\xc0\x04\x03\x40\x40\x70", "truncated uint"),
        (b"\x00\x53\x70\xc0\x04\x03\x40\x40\x71", "must be a uint"),
        (b"\x00\x53\x70\xc0\x03\x01\x56\x02", "invalid boolean"),
        (b"\x00\x53\x70\xc0\x02\x01\x50", "must be a boolean"),
        (b"\x00\x53\x70\xc0\x03\x02\x40\x51", "priority must be a ubyte"),
        (b"\x00\x53\x70\x45\x00\x53\x70\x45", "out of order"),
        (b"\x00\x53\x72\xc1\x01\x00\x00\x53\x70\x45", "out of order"),
        (b"\x00\x53\x72\x40", "must be a map"),
        (b"\x00\x53\x72\xc1\x02\x01\x40", "odd map count"),
        (b"\x00\x53\x71\xc1\x02\x01\x40", "odd"),
        (b"\x00\x53\x71\xc1\x03\x02\x40\x33", "unknown type code 0x33"),
        (b"\x00\x53\x72\xc1\x03\x02\x40\x33", "unknown type code 0x33"),
        (section(0x72, map8(sym(MODE), b"\x55\x01")), "must be a string or symbol"),
        (section(0x72, map8(sym(MODE), string(b"\xff"))), "not valid UTF-8"),
        (section(0x72, map8(sym(MODE), string("a"), string(MODE), string("b"))), "twice"),
        (section(0x72, map8(sym("k"), b"\xc0\x03\x01\x41\x41")), "items end"),
        (section(0x72, map8(sym("k"), b"\xe0\x01\x00")), "no room|element constructor"),
        (section(0x72, map8(sym("k"), b"\xe0\x02\x01\x33")), "unknown array element"),
        (section(0x72, map8(sym("k"), b"\xe0\x03\x02\x71\x00")), "past|items end"),
        (section(0x71, map8(sym("k"), b"\xa1\x05ab")), "runs past"),
    ],
)
def test_malformed(payload, fragment):
    with pytest.raises(MalformedMessage, match=fragment) as caught:
        scan(payload)
    assert "byte offset" in str(caught.value)


def test_malformed_offset_points_at_the_problem():
    payload = Message(body="x").encode()
    bad = payload[:4] + b"\x00\x53\x72\xc1\x01\x02" + payload[4:]
    with pytest.raises(MalformedMessage, match=r"byte offset 7\)"):
        scan(bad)


def test_deep_nesting_is_refused_not_a_recursion_error():
    value = b"\x45"
    for _ in range(200):
        value = list32(value)
    with pytest.raises(MalformedMessage, match="nested"):
        scan(section(0x71, map32(sym("k"), value)))
    described = b"\x00" * 500 + b"\x40" * 501
    with pytest.raises(MalformedMessage, match="nested"):
        scan(section(0x72, map32(sym("k"), described)))


# ---------------------------------------------------------------- hypothesis

keys = st.one_of(
    st.sampled_from(["x-opt-a", "x-opt-b", "k"]),
    st.text("abcdefxyz-", min_size=1, max_size=12).map(lambda s: "x-opt-" + s),
).map(symbol)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.text("abc", max_size=5).map(symbol),
    st.integers(0, 2**64 - 1).map(ulong),
    st.integers(0, 2**32 - 1).map(uint),
    st.integers(-(2**31), 2**31 - 1).map(int32),
    st.integers(0, 255).map(ubyte),
    st.integers(-(2**63), 2**63 - 1).map(timestamp),
    st.uuids(),
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4).map(
        lambda xs: Array(UNDESCRIBED, Data.INT, *xs)
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        # Not a described value directly inside another: proton 0.40 decodes those wrongly.
        inner.filter(lambda v: not isinstance(v, Described)).map(
            lambda v: Described(symbol("x-d"), v)
        ),
    ),
    max_leaves=8,
)
modes = st.one_of(st.sampled_from(["some", "all"]), st.text(max_size=10)).flatmap(
    lambda s: st.sampled_from([s, symbol(s)]) if s.isascii() else st.just(s)
)
annotation_maps = st.tuples(
    st.dictionaries(keys, values, max_size=5), st.one_of(st.none(), modes)
).map(lambda t: {**t[0], **({symbol(MODE): t[1]} if t[1] is not None else {})})
bodies = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.dictionaries(st.text(max_size=5), st.integers(-(2**31), 2**31), max_size=5),
    st.lists(st.text(max_size=5), max_size=5),
)


@st.composite
def messages(draw) -> Message:
    m = Message(body=draw(bodies))
    m.ttl = draw(st.integers(0, 2**32 - 1)) / 1000
    m.durable = draw(st.booleans())
    m.priority = draw(st.integers(0, 255))
    m.first_acquirer = draw(st.booleans())
    m.delivery_count = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        m.instructions = draw(annotation_maps)
    if draw(st.booleans()):
        m.annotations = draw(annotation_maps)
    if draw(st.booleans()):
        m.address = draw(st.text(max_size=300))
        m.properties = {"app": draw(st.integers(-(2**31), 2**31))}
    return m


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(messages())
def test_scan_agrees_with_proton(m):
    payload = m.encode()
    info = agree(payload)
    assert info.durable == m.durable
    assert info.delivery_count == m.delivery_count
    assert (info.ttl_ms or 0) == round(m.ttl * 1000)
    mode = (m.annotations or {}).get(MODE)
    assert info.delivery_mode == (None if mode is None else str(mode))


def decoded(payload: bytes) -> Message:
    m = Message()
    m.decode(payload)
    return m


def header_length(payload: bytes) -> int:
    """Length of the header section of a proton-encoded message (list0 or list8)."""
    assert payload[:3] == b"\x00\x53\x70"
    return 4 if payload[3] == 0x45 else 5 + payload[4]


@FAST
@given(messages(), st.integers(0, 2**32 - 1))
def test_with_redelivery_round_trip(m, count):
    payload = m.encode()
    original = decoded(payload)
    again = with_redelivery(payload, count)
    assert again.endswith(payload[header_length(payload) :])  # the rest, byte for byte
    out = decoded(again)
    assert out.delivery_count == count
    assert out.first_acquirer is False
    for field in ("ttl", "durable", "priority", "body", "address", "properties"):
        assert getattr(out, field) == getattr(original, field), field
    assert out.annotations == original.annotations
    assert out.instructions == original.instructions
    assert scan(again) == MessageInfo(
        scan(payload).ttl_ms, scan(payload).delivery_mode, m.durable, count
    )
    assert with_redelivery(again, count) == again


@pytest.mark.parametrize(
    "payload",
    [
        BODY,
        PROPERTIES + BODY,
        section(0x72, map8(sym(MODE), sym("all"))) + PROPERTIES + BODY,
        section(0x71, map8(sym("k"), b"\x41"), "sym8") + BODY,
    ],
)
def test_with_redelivery_inserts_a_header(payload):
    again = with_redelivery(payload, 4)
    assert again.endswith(payload)
    assert again[: -len(payload)] == section(
        0x70, list8(b"\x42", b"\x50\x04", b"\x40", b"\x42", uint_(4))
    )
    original, out = decoded(payload), decoded(again)
    assert (out.delivery_count, out.first_acquirer, out.durable, out.ttl) == (4, False, False, 0)
    assert out.body == original.body and out.annotations == original.annotations


@pytest.mark.parametrize("form", ["ulong", "sym32"])
def test_with_redelivery_replaces_any_header_form(form):
    header = list32(b"\x41", b"\x50\x02", b"\x52\x09", b"\x41", b"\x52\x01", string("later"))
    payload = section(0x70, header, form) + PROPERTIES + BODY
    out = decoded(with_redelivery(payload, 2))
    assert (out.delivery_count, out.first_acquirer) == (2, False)
    assert (out.durable, out.priority) == (True, 2)
    assert round(out.ttl * 1000) == 9 and out.address == "queue" and out.body == "hello"


def test_with_redelivery_bad_input():
    with pytest.raises(MalformedMessage):
        with_redelivery(b"\x00\x53\x70\xc0\x05\x01\x41", 1)
    with pytest.raises(MalformedMessage):
        with_redelivery(b"", 1)
    with pytest.raises(ValueError, match="not a uint"):
        with_redelivery(BODY, -1)
    with pytest.raises(ValueError, match="not a uint"):
        with_redelivery(BODY, 2**32)


# ---------------------------------------------------------------- robustness


def only_malformed(payload: bytes) -> None:
    """scan returns a MessageInfo or raises MalformedMessage, nothing else; likewise for
    with_redelivery, whose result must scan again."""
    try:
        assert isinstance(scan(payload), MessageInfo)
    except MalformedMessage as e:
        assert "byte offset" in str(e)
        return
    again = with_redelivery(payload, 1)
    assert scan(again).delivery_count == 1


prefixes = st.sampled_from(
    [
        b"",
        b"\x00",
        b"\x00\x53\x70",
        b"\x00\x53\x71",
        b"\x00\x53\x72",
        b"\x00\x53\x70\x45\x00\x53\x72",
    ]
)


@settings(max_examples=400, deadline=None)
@given(prefixes, st.binary(max_size=64))
def test_random_bytes(prefix, tail):
    only_malformed(prefix + tail)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.data())
def test_random_damage_to_valid_encodings(m, data):
    payload = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        i = data.draw(st.integers(0, max(len(payload) - 1, 0)))
        if how == "truncate":
            del payload[i:]
        elif how == "flip" and payload:
            payload[i] = data.draw(st.integers(0, 255))
        elif how == "insert":
            payload[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif payload:
            del payload[i]
    only_malformed(bytes(payload))


SAMPLES = [
    Message(body="x", ttl=1, durable=True, annotations={symbol(MODE): "all"}).encode(),
    section(0x70, list32(b"\x41", b"\x50\x01", uint_(5)), "sym8")
    + section(0x71, map8(sym("k"), b"\xe0\x04\x02\x52\x01\x02"), "ulong")
    + section(0x72, map32(sym("a"), b"\x00\xa3\x01d\xc0\x01\x00", string(MODE), string("some")))
    + BODY,
]


@pytest.mark.parametrize("payload", SAMPLES)
def test_every_truncation_and_byte_flip(payload):
    for end in range(len(payload)):
        only_malformed(payload[:end])
    for i in range(len(payload)):
        for value in (
            0x00,
            0x01,
            0x40,
            0x53,
            0x72,
            0xA3,
            0xC0,
            0xD1,
            0xF0,
            0xFF,
            payload[i] ^ 0x80,
            (payload[i] + 1) & 0xFF,
        ):
            flipped = bytearray(payload)
            flipped[i] = value
            only_malformed(bytes(flipped))


# ---------------------------------------------------------------------- publisher annotation


@pytest.mark.parametrize("identity", ["shop/pub/shop", "c" * 300 + "/link"])
@pytest.mark.parametrize("annotations", [None, {symbol("x-opt-delivery-mode"): "some"},
                                         {symbol(f"k{i}"): i for i in range(40)}])
@pytest.mark.parametrize("header", [False, True])
def test_the_publisher_annotation_is_added_and_nothing_else_changes(
    identity: str, annotations: dict | None, header: bool
) -> None:
    from router.core.message import PUBLISHER_KEY, annotate, publisher_annotation

    msg = Message(body="hello", id="m-1", address="a/b", properties={"k": 1},
                  annotations=annotations)
    if header:
        msg.ttl = 5.0
        msg.durable = True
    payload = msg.encode()
    info = scan(payload)
    out = annotate(payload, info, publisher_annotation(identity))
    back = Message()
    back.decode(out)
    assert back.annotations[symbol(PUBLISHER_KEY.decode())] == identity
    assert {k: v for k, v in back.annotations.items() if k != PUBLISHER_KEY.decode()} == (
        annotations or {})
    assert (back.body, back.id, back.address, back.properties) == ("hello", "m-1", "a/b",
                                                                    {"k": 1})
    assert scan(out) == info  # ttl, mode, durable read the same


# ---------------------------------------------------------------- writing (the SDK's messages)


@pytest.mark.parametrize("body", [b"", b"bytes", "text", "x" * 300, b"\x00" * 70_000])
@pytest.mark.parametrize("ttl", [None, 0.25, 1.5, 3600])
@pytest.mark.parametrize("properties", [None, {}, {"k": "v", "n": 3},
                                        {"f": 1.5, "b": False, "z": None, "big": -(1 << 40),
                                         "bin": b"\x01", "s": "y" * 300}])
def test_encode_message_reads_back_as_proton_writes_it(body, ttl, properties) -> None:
    """router.core.message.encode_message (the SDK's encoder) and proton's Message.encode give
    messages that proton decodes alike, with the same types, and that scan reads alike."""
    from router.core.message import encode_message

    theirs = Message(body=body, address="t/x", id="pub:7", properties=properties, durable=True)
    if ttl is not None:
        theirs.ttl = ttl
    ours = encode_message(body, to="t/x", message_id="pub:7", durable=True,
                          ttl_ms=None if ttl is None else int(ttl * 1000),
                          application_properties=properties)
    a, b = Message(), Message()
    a.decode(ours)
    b.decode(theirs.encode())
    for name in ("body", "address", "id", "durable", "ttl", "properties", "delivery_count"):
        va, vb = getattr(a, name), getattr(b, name)
        assert va == vb and type(va) is type(vb), name
    assert {k: type(v) for k, v in (a.properties or {}).items()} == {
        k: type(v) for k, v in (b.properties or {}).items()}
    assert scan(ours) == scan(theirs.encode())


@pytest.mark.parametrize("value", [symbol("s"), ulong(3), uuid.uuid4(), [1], {"a": 1}, 1 << 64])
def test_encode_message_leaves_other_types_to_proton(value) -> None:
    from router.core.message import Unsupported, encode_message

    with pytest.raises(Unsupported):
        encode_message(b"x", to="t", application_properties={"p": value})


# ------------------------------------------------------------------ properties (3.2.4)

from router.core.message import (  # noqa: E402
    PROPERTY_REPLY_TO,
    PROPERTY_TO,
    property_string,
    with_property_string,
)


def address_text(n: int) -> st.SearchStrategy[str]:
    """Text proton encodes as it is: it writes strings as C strings, cut at a NUL."""
    return st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
                   min_size=1, max_size=n)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(reply_to=st.one_of(st.none(), address_text(300)),
       address=st.one_of(st.none(), address_text(40)),
       correlation=st.one_of(st.none(), address_text(20), st.integers(0, 2**63 - 1)),
       ttl=st.one_of(st.none(), st.integers(1, 10**6)), body=st.binary(max_size=50),
       new=address_text(400))
def test_reply_to_reads_and_is_replaced_as_proton_sees_it(reply_to, address, correlation, ttl,
                                                          body, new):
    """Relays read and replace `reply-to` and `to` in place (amqp_edge/replies.py): every
    other field of the message decodes as before, with proton as the oracle."""
    msg = Message(body=body, address=address, reply_to=reply_to, correlation_id=correlation,
                  id="m-1", subject="s", content_type="text/plain", user_id=b"u")
    msg.annotations = {symbol("x-opt-a"): 1}
    if ttl is not None:
        msg.ttl = ttl / 1000
    raw = bytes(msg.encode())
    assert property_string(raw, PROPERTY_REPLY_TO) == reply_to
    assert property_string(raw, PROPERTY_TO) == address
    if reply_to is None:
        return
    out = Message()
    out.decode(with_property_string(raw, PROPERTY_REPLY_TO, new))
    assert out.reply_to == new
    for name in ("body", "address", "correlation_id", "id", "subject", "content_type",
                 "user_id", "annotations", "ttl"):
        assert getattr(out, name) == getattr(msg, name), name


def test_a_message_without_properties_has_no_reply_to():
    raw = bytes(Message(body="x").encode())
    assert property_string(raw, PROPERTY_REPLY_TO) is None
    with pytest.raises(ValueError):
        with_property_string(raw, PROPERTY_REPLY_TO, "r")

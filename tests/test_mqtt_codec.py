"""The MQTT 3.1.1 / 5.0 codec (mqtt_edge): round trips, differential tests against reference
codecs, a table of malformed inputs, and the reply a server sends for each error.

Reference codecs (test-only, in the `test` extra):
- `mqtt5` (Rust, MQTT 5.0 only): `mqtt5.read()` decodes and `Packet.write()` encodes.
- `amqtt` (MQTT 3.1.1, asyncio): its packet classes decode from an asyncio StreamReader and
  encode with `to_bytes()`.
- `paho-mqtt`: a real client talks to a tiny broker loop built on the codec over loopback.

The fuzz tests (random mutations of valid streams) are in tests/test_mqtt_fuzz.py, which
uses the strategies defined here.
EXACTMESH_LONG=1 runs every hypothesis test with many more examples.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import amqtt.mqtt as amqtt_mqtt
import mqtt5
import paho.mqtt.client as paho_client
import pytest
from amqtt.adapters import StreamReaderAdapter
from amqtt.mqtt import packet as amqtt_packet
from amqtt.mqtt.connack import ConnackPacket as AConnack
from amqtt.mqtt.connect import ConnectPacket as AConnect
from amqtt.mqtt.connect import ConnectPayload, ConnectVariableHeader
from amqtt.mqtt.disconnect import DisconnectPacket as ADisconnect
from amqtt.mqtt.pingreq import PingReqPacket as APingReq
from amqtt.mqtt.pingresp import PingRespPacket as APingResp
from amqtt.mqtt.puback import PubackPacket as APuback
from amqtt.mqtt.pubcomp import PubcompPacket as APubcomp
from amqtt.mqtt.publish import PublishPacket as APublish
from amqtt.mqtt.pubrec import PubrecPacket as APubrec
from amqtt.mqtt.pubrel import PubrelPacket as APubrel
from amqtt.mqtt.suback import SubackPacket as ASuback
from amqtt.mqtt.subscribe import SubscribePacket as ASubscribe
from amqtt.mqtt.unsuback import UnsubackPacket as AUnsuback
from amqtt.mqtt.unsubscribe import UnsubscribePacket as AUnsubscribe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqtt_edge.codec import (
    MAX_PACKET_SIZE,
    PLAIN_ACK_SHIFT,
    Decoder,
    DecoderClosedError,
    ProtocolError,
    encode,
)
from mqtt_edge.packets import (
    EMPTY_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
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
)
from mqtt_edge.properties import ALLOWED, PROPERTIES, WILL, PropertyType
from mqtt_edge.reason_codes import (
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    PUBACK_REASON_CODES,
    PUBREL_REASON_CODES,
    SUBACK_REASON_CODES,
    UNSUBACK_REASON_CODES,
    ConnackReturnCode,
    ReasonCode,
    connack_reason_code,
    connack_return_code,
)

LONG = bool(os.environ.get("EXACTMESH_LONG"))


def examples(n: int) -> Any:
    """Hypothesis settings: *n* examples, 25 times more with EXACTMESH_LONG=1."""
    return settings(
        max_examples=n * 25 if LONG else n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# =============================================================================================
# Strategies: valid packets of each version and direction

# Any character MQTT allows in a string: no U+0000, no surrogates (section 1.5.4).
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
TEXT = st.text(CHARS, max_size=10)
LEVEL = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#/"), max_size=5
)
TOPIC = st.lists(LEVEL, min_size=1, max_size=4).map(lambda levels: "/".join(levels) or "t")
PACKET_ID = st.integers(1, 65535)
BINARY = st.binary(max_size=12)
PAYLOAD = st.binary(max_size=40)


@st.composite
def topic_filters(draw: Any, v5: bool = False) -> str:
    levels = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    topic_filter = "/".join(levels)
    if not topic_filter:
        topic_filter = "#"
    if v5 and draw(st.integers(0, 5)) == 0:
        topic_filter = f"$share/{draw(LEVEL.filter(bool))}/{topic_filter}"
    return topic_filter


def _property_value(spec: Any) -> st.SearchStrategy[Any]:
    name = spec.name
    if name == "response_topic":
        return TOPIC
    if spec.check is not None and spec.check.__name__ == "_zero_or_one":
        return st.integers(0, 1)
    low = 1 if spec.check is not None else 0
    kind = spec.type
    if kind is PropertyType.BYTE:
        return st.integers(low, 255)
    if kind is PropertyType.TWO_BYTE_INT:
        return st.integers(low, 65535)
    if kind is PropertyType.FOUR_BYTE_INT:
        return st.integers(low, 2**32 - 1)
    if kind is PropertyType.VAR_INT:
        return st.integers(1, 268_435_455)
    if kind is PropertyType.UTF8:
        return TEXT
    if kind is PropertyType.BINARY:
        return BINARY
    return st.tuples(TEXT, TEXT)


def properties(
    kind: int, *, exclude: tuple[str, ...] = (), fixed: dict[str, Any] | None = None
) -> st.SearchStrategy[Properties]:
    """Valid MQTT 5 properties for packet type *kind* (or WILL)."""
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for spec in ALLOWED[kind].values():
        if spec.name in exclude or (fixed and spec.name in fixed):
            continue
        value = _property_value(spec)
        if spec.repeatable:
            size = 1 if kind == 8 else 3  # SUBSCRIBE: at most one subscription identifier
            value = st.lists(value, min_size=1, max_size=size).map(tuple)
        optional[spec.name] = value
    required = {k: st.just(v) for k, v in (fixed or {}).items()}
    return st.fixed_dictionaries(required, optional=optional).map(lambda d: Properties(**d))


NO_PROPS = st.just(EMPTY_PROPERTIES)
AUTH_METHOD = "SCRAM-SHA-1"
#: The CONNECT every server-side stream starts with: it names an authentication method (so
#: AUTH may follow) and a session expiry (so DISCONNECT may set one).
CONNECT_4 = Connect("client-4", 4, keep_alive=30)
CONNECT_5 = Connect(
    "client-5",
    5,
    keep_alive=30,
    properties=Properties(session_expiry_interval=60, authentication_method=AUTH_METHOD),
)
CONNECTS = {4: CONNECT_4, 5: CONNECT_5}


@st.composite
def publishes(draw: Any, v5: bool, from_server: bool) -> Publish:
    qos = draw(st.integers(0, 2))
    props = EMPTY_PROPERTIES
    if v5:
        exclude = () if from_server else ("subscription_identifiers",)
        props = draw(properties(3, exclude=exclude))
    topic = draw(TOPIC)
    if v5 and props.topic_alias is not None and draw(st.booleans()):
        topic = ""  # section 3.3.2.3.4: the alias stands for the topic
    payload = draw(PAYLOAD)
    if props.payload_format_indicator == 1:
        payload = draw(TEXT).encode()
    return Publish(
        topic,
        payload,
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(PACKET_ID) if qos else None,
        props,
    )


@st.composite
def acks(draw: Any, v5: bool) -> Packet:
    cls = draw(st.sampled_from([PubAck, PubRec, PubRel, PubComp]))
    if not v5:
        return cls(draw(PACKET_ID))  # type: ignore[no-any-return]
    codes = PUBREL_REASON_CODES if cls in (PubRel, PubComp) else PUBACK_REASON_CODES
    return cls(  # type: ignore[no-any-return]
        draw(PACKET_ID),
        draw(st.sampled_from(sorted(codes))),
        draw(properties(cls.TYPE)),
    )


@st.composite
def subscribes(draw: Any, v5: bool) -> Subscribe:
    subs = []
    for topic_filter in draw(st.lists(topic_filters(v5), min_size=1, max_size=4)):
        if v5:
            shared = topic_filter.startswith("$share/")
            subs.append(
                Subscription(
                    topic_filter,
                    draw(st.integers(0, 2)),
                    False if shared else draw(st.booleans()),
                    draw(st.booleans()),
                    draw(st.integers(0, 2)),
                )
            )
        else:
            subs.append(Subscription(topic_filter, draw(st.integers(0, 2))))
    props = draw(properties(8)) if v5 else EMPTY_PROPERTIES
    return Subscribe(draw(PACKET_ID), tuple(subs), props)


@st.composite
def unsubscribes(draw: Any, v5: bool) -> Unsubscribe:
    filters = tuple(draw(st.lists(topic_filters(v5), min_size=1, max_size=4)))
    props = draw(properties(10)) if v5 else EMPTY_PROPERTIES
    return Unsubscribe(draw(PACKET_ID), filters, props)


@st.composite
def wills(draw: Any, v5: bool) -> Will:
    props = draw(properties(WILL)) if v5 else EMPTY_PROPERTIES
    payload = draw(PAYLOAD)
    if props.payload_format_indicator == 1:
        payload = draw(TEXT).encode()
    return Will(draw(TOPIC), payload, draw(st.integers(0, 2)), draw(st.booleans()), props)


@st.composite
def connects(draw: Any, v5: bool) -> Connect:
    props = EMPTY_PROPERTIES
    if v5:
        props = draw(properties(1))
        if props.authentication_data is not None and props.authentication_method is None:
            props = props.replace(authentication_data=None)  # section 3.1.2.11.10
    client_id = draw(TEXT)
    clean = draw(st.booleans()) or (not v5 and not client_id)  # 3.1.1: [MQTT-3.1.3-7]
    username = draw(st.none() | TEXT)
    password = draw(st.none() | BINARY)
    if not v5 and username is None:
        password = None  # 3.1.1: [MQTT-3.1.2-22]
    return Connect(
        client_id,
        5 if v5 else 4,
        clean,
        draw(st.integers(0, 65535)),
        username,
        password,
        draw(st.none() | wills(v5)),
        props,
    )


@st.composite
def disconnects(draw: Any, v5: bool, from_server: bool) -> Disconnect:
    if not v5:
        return Disconnect()
    exclude = ("session_expiry_interval",) if from_server else ()
    return Disconnect(
        draw(st.sampled_from(sorted(DISCONNECT_REASON_CODES))),
        draw(properties(14, exclude=exclude)),
    )


@st.composite
def auths(draw: Any, from_server: bool) -> Auth:
    method = draw(TEXT) if from_server else AUTH_METHOD
    return Auth(
        draw(st.sampled_from([0x00, 0x18, 0x19])),
        draw(properties(15, fixed={"authentication_method": method})),
    )


@st.composite
def connacks(draw: Any, v5: bool) -> ConnAck:
    if v5:
        code = draw(st.sampled_from(sorted(CONNACK_REASON_CODES)))
        props = draw(properties(2))
    else:
        # The 5.0 codes that map one-to-one on 3.1.1 return codes.
        code = draw(st.sampled_from([0x00, 0x84, 0x85, 0x88, 0x86, 0x87]))
        props = EMPTY_PROPERTIES
    return ConnAck(draw(st.booleans()) if code == 0 else False, code, props)


@st.composite
def subacks(draw: Any, v5: bool) -> SubAck:
    codes = sorted(SUBACK_REASON_CODES) if v5 else [0, 1, 2, 0x80]
    return SubAck(
        draw(PACKET_ID),
        tuple(draw(st.lists(st.sampled_from(codes), min_size=1, max_size=4))),
        draw(properties(9)) if v5 else EMPTY_PROPERTIES,
    )


@st.composite
def unsubacks(draw: Any, v5: bool) -> UnsubAck:
    if not v5:
        return UnsubAck(draw(PACKET_ID))
    return UnsubAck(
        draw(PACKET_ID),
        tuple(
            draw(st.lists(st.sampled_from(sorted(UNSUBACK_REASON_CODES)), min_size=1, max_size=4))
        ),
        draw(properties(11)),
    )


def client_packets(version: int) -> st.SearchStrategy[Packet]:
    """Packets a client sends after its CONNECT (CONNECTS[version])."""
    v5 = version == 5
    options = [
        publishes(v5, from_server=False),
        acks(v5),
        subscribes(v5),
        unsubscribes(v5),
        st.just(PingReq()),
        disconnects(v5, from_server=False),
    ]
    if v5:
        options.append(auths(from_server=False))
    return st.one_of(options)


def server_packets(version: int) -> st.SearchStrategy[Packet]:
    """Packets a server sends after its CONNACK."""
    v5 = version == 5
    options = [
        publishes(v5, from_server=True),
        acks(v5),
        subacks(v5),
        unsubacks(v5),
        st.just(PingResp()),
    ]
    if v5:
        options += [disconnects(v5, from_server=True), auths(from_server=True)]
    return st.one_of(options)


def decode_from_client(version: int, packets: list[Packet], data: bytes | None = None) -> list:
    """Decode CONNECTS[version] then *packets* (or *data*) with a server-side decoder."""
    decoder = Decoder(MAX_PACKET_SIZE)
    out = decoder.receive(encode(CONNECTS[version], version))
    assert out == [CONNECTS[version]]
    if data is None:
        data = b"".join(encode(p, version) for p in packets)
    return decoder.receive(data)


def decode_from_server(version: int, packets: list[Packet], data: bytes | None = None) -> list:
    """Decode a CONNACK then *packets* (or *data*) with a client-side decoder."""
    decoder = Decoder(MAX_PACKET_SIZE, role="client", version=version)
    assert decoder.receive(encode(ConnAck(), version)) == [ConnAck()]
    if data is None:
        data = b"".join(encode(p, version) for p in packets)
    return decoder.receive(data)


def feed_in_chunks(decoder: Decoder, data: bytes, sizes: list[int]) -> list[Packet]:
    out: list[Packet] = []
    pos = 0
    i = 0
    while pos < len(data):
        size = sizes[i % len(sizes)] if sizes else len(data)
        out += decoder.receive(data[pos : pos + size])
        pos += size
        i += 1
    return out


# =============================================================================================
# Round trips


@pytest.mark.parametrize("version", [4, 5])
@examples(120)
@given(data=st.data())
def test_round_trip_client_packets(version: int, data: Any) -> None:
    """What a client sends decodes, whole or in any chunking, to the packets encoded."""
    connect = data.draw(connects(version == 5))
    packets = data.draw(st.lists(client_packets(version), min_size=1, max_size=6))
    if version == 5:
        # The drawn CONNECT stands for itself only; the packets after it need CONNECT_5's
        # authentication method and session expiry.
        assert Decoder().receive(encode(connect, 5)) == [connect]
        connect = CONNECT_5
    stream = encode(connect, version) + b"".join(encode(p, version) for p in packets)
    sizes = data.draw(st.lists(st.integers(1, 40), max_size=8))
    decoder = Decoder(MAX_PACKET_SIZE)
    assert feed_in_chunks(decoder, stream, sizes) == [connect, *packets]
    assert decoder.buffered == 0
    assert decoder.version == version
    assert decoder.connect == connect


def _as_plain_ack(p: Packet | int) -> Packet | int:
    """What a `plain_acks` decoder gives for *p*: an int for a four-byte acknowledgement."""
    if type(p) in (PubAck, PubRec, PubRel, PubComp) and p.reason_code == 0 \
            and p.properties == EMPTY_PROPERTIES:
        ptype = {PubAck: 4, PubRec: 5, PubRel: 6, PubComp: 7}[type(p)]
        return ptype << PLAIN_ACK_SHIFT | p.packet_id
    return p


@pytest.mark.parametrize("version", [4, 5])
@examples(120)
@given(data=st.data())
def test_plain_acks_decode_as_ints_and_nothing_else_changes(version: int, data: Any) -> None:
    """The router's decoder (`plain_acks`) reads the same stream to the same packets, except
    that each acknowledgement without reason code or properties is `type << 16 | id`."""
    connect = CONNECT_5 if version == 5 else data.draw(connects(False))
    packets = data.draw(st.lists(client_packets(version), min_size=1, max_size=8))
    stream = encode(connect, version) + b"".join(encode(p, version) for p in packets)
    sizes = data.draw(st.lists(st.integers(1, 40), max_size=8))
    decoder = Decoder(MAX_PACKET_SIZE, plain_acks=True)
    assert feed_in_chunks(decoder, stream, sizes) == [connect, *map(_as_plain_ack, packets)]


def test_plain_acks_keep_the_checks_of_the_full_path() -> None:
    """A packet id 0 or a reason code takes the full path: refused, or a packet object."""
    decoder = Decoder(plain_acks=True)
    assert decoder.receive(encode(CONNECT_5, 5) + bytes([0x50, 2, 1, 2, 0x62, 2, 0, 7])) == [
        CONNECT_5, 5 << PLAIN_ACK_SHIFT | 0x0102, 6 << PLAIN_ACK_SHIFT | 7]
    assert decoder.receive(bytes([0x50, 3, 0, 9, 0x80])) == [PubRec(9, 0x80)]
    with pytest.raises(ProtocolError) as err:
        decoder.receive(bytes([0x70, 2, 0, 3, 0x40, 2, 0, 0]))
    assert err.value.packets == [7 << PLAIN_ACK_SHIFT | 3]  # the one before the fault
    assert "packet id" in str(err.value).lower() or "identifier" in str(err.value).lower()


@pytest.mark.parametrize("version", [4, 5])
@examples(100)
@given(data=st.data())
def test_round_trip_server_packets(version: int, data: Any) -> None:
    """What a server sends decodes on the client side to the packets encoded."""
    connack = data.draw(connacks(version == 5))
    packets = data.draw(st.lists(server_packets(version), min_size=1, max_size=6))
    stream = encode(connack, version) + b"".join(encode(p, version) for p in packets)
    sizes = data.draw(st.lists(st.integers(1, 40), max_size=8))
    decoder = Decoder(MAX_PACKET_SIZE, role="client", version=version)
    assert feed_in_chunks(decoder, stream, sizes) == [connack, *packets]


EVERY_PACKET_5: list[Packet] = [
    CONNECT_5,
    ConnAck(True, 0, Properties(assigned_client_identifier="x", maximum_qos=1)),
    Publish("a/b", b"hello", 1, True, True, 7, Properties(user_properties=(("k", "v"),))),
    PubAck(7, 0x10, Properties(reason_string="nobody")),
    PubRec(8, 0x80),
    PubRel(8, 0x92),
    PubComp(8),
    Subscribe(
        9, (Subscription("a/+", 2, True, True, 2),), Properties(subscription_identifiers=(5,))
    ),
    SubAck(9, (2, 0x87)),
    Unsubscribe(10, ("a/+", "b/#")),
    UnsubAck(10, (0, 0x11)),
    PingReq(),
    PingResp(),
    Disconnect(0x04, Properties(session_expiry_interval=10)),
    Disconnect(0x8B, Properties(server_reference="other:1883", reason_string="bye")),
    Auth(0x18, Properties(authentication_method=AUTH_METHOD, authentication_data=b"\x01")),
]
EVERY_PACKET_4: list[Packet] = [
    Connect("c", 4, False, 10, "user", b"\xff\x00pw", Will("w", b"bye", 2, True)),
    ConnAck(True, 0),
    Publish("a/b", b"hello", 2, True, True, 7),
    PubAck(7),
    PubRec(8),
    PubRel(8),
    PubComp(8),
    Subscribe(9, (Subscription("a/+", 2), Subscription("#", 0))),
    SubAck(9, (2, 0x80)),
    Unsubscribe(10, ("a/+",)),
    UnsubAck(10),
    PingReq(),
    PingResp(),
    Disconnect(),
]


@pytest.mark.parametrize(
    ("version", "packet"),
    [(5, p) for p in EVERY_PACKET_5] + [(4, p) for p in EVERY_PACKET_4],
    ids=lambda v: type(v).__name__ if not isinstance(v, int) else f"v{v}",
)
def test_every_packet_type_round_trips(version: int, packet: Packet) -> None:
    if isinstance(packet, Connect):
        assert Decoder().receive(encode(packet, version)) == [packet]
    elif isinstance(packet, ConnAck):
        client_side = Decoder(role="client", version=version)
        assert client_side.receive(encode(packet, version)) == [packet]
    elif isinstance(packet, SubAck | UnsubAck | PingResp) or (
        isinstance(packet, Disconnect) and packet.properties.server_reference is not None
    ):
        assert decode_from_server(version, [packet]) == [packet]
    else:
        assert decode_from_client(version, [packet]) == [packet]
        if isinstance(packet, Publish | PubAck | PubRec | PubRel | PubComp | Auth):
            assert decode_from_server(version, [packet]) == [packet]


def test_known_encodings() -> None:
    """Byte-exact encodings of a few packets, worked out by hand from the specification."""
    assert encode(PubAck(0x1234), 4) == b"\x40\x02\x12\x34"
    assert encode(PubAck(0x1234), 5) == b"\x40\x02\x12\x34"  # 5.0 section 3.4.2.1: short form
    assert encode(PubRec(1, 0x10), 5) == b"\x50\x03\x00\x01\x10"
    assert encode(PubRel(1), 4) == b"\x62\x02\x00\x01"
    assert encode(PingReq(), 4) == b"\xc0\x00"
    assert encode(Disconnect(), 5) == b"\xe0\x00"
    assert encode(Publish("a/b", b"hi", 1, False, False, 10), 4) == (
        b"\x32\x09\x00\x03a/b\x00\x0ahi"
    )
    assert encode(Publish("a/b", b"hi", 1, False, False, 10), 5) == (
        b"\x32\x0a\x00\x03a/b\x00\x0a\x00hi"
    )
    assert encode(ConnAck(False, ReasonCode.NOT_AUTHORIZED), 4) == b"\x20\x02\x00\x05"
    assert encode(Subscribe(1, (Subscription("a", 1, True, False, 2),)), 5) == (
        b"\x82\x07\x00\x01\x00\x00\x01a\x25"
    )
    # A remaining length of 128 takes two bytes (section 2.1.4).
    big = encode(Publish("t", b"x" * 125, 0), 4)
    assert big[:3] == b"\x30\x80\x01" and len(big) == 131


# =============================================================================================
# Differential tests against mqtt5 (MQTT 5.0)


def _up(props: Properties) -> list[tuple[str, str]]:
    return list(props.user_properties)


def _m_up(packet: Any) -> list[tuple[str, str]]:
    return [tuple(pair) for pair in packet.user_properties]  # type: ignore[misc]


def norm_ours(p: Packet) -> tuple[Any, ...]:
    """*p* in mqtt5's vocabulary: the values a receiver sees, with absent properties at their
    defaults (mqtt5 does not tell an absent property from one sent with its default value)."""
    props = getattr(p, "properties", EMPTY_PROPERTIES)
    if isinstance(p, Connect):
        will = p.will
        w = None
        if will is not None:
            wp = will.properties
            w = (
                will.topic, will.payload, will.qos, will.retain,
                wp.payload_format_indicator or 0, wp.message_expiry_interval, wp.content_type,
                wp.response_topic, wp.correlation_data, wp.will_delay_interval or 0, _up(wp),
            )  # fmt: skip
        rpi = props.request_problem_information
        return (
            "CONNECT", p.client_id, p.username, p.password, p.clean_start, w, p.keep_alive,
            props.session_expiry_interval or 0, props.authentication_method,
            props.authentication_data, bool(1 if rpi is None else rpi),
            bool(props.request_response_information), props.receive_maximum or 65535,
            props.topic_alias_maximum or 0, props.maximum_packet_size, _up(props),
        )  # fmt: skip
    if isinstance(p, ConnAck):

        def flag(value: int | None) -> bool:
            return bool(1 if value is None else value)

        return (
            "CONNACK", p.session_present, p.reason_code, props.session_expiry_interval,
            props.assigned_client_identifier, props.server_keep_alive,
            props.authentication_method, props.authentication_data,
            props.response_information, props.server_reference, props.reason_string,
            props.receive_maximum or 65535, props.topic_alias_maximum or 0,
            2 if props.maximum_qos is None else props.maximum_qos,
            flag(props.retain_available), props.maximum_packet_size,
            flag(props.wildcard_subscription_available),
            flag(props.subscription_identifier_available),
            flag(props.shared_subscription_available), _up(props),
        )  # fmt: skip
    if isinstance(p, Publish):
        return (
            "PUBLISH", p.topic, p.payload, p.qos, p.retain, p.packet_id, p.dup,
            props.payload_format_indicator or 0, props.message_expiry_interval,
            props.content_type, props.response_topic, props.correlation_data,
            list(props.subscription_identifiers), props.topic_alias, _up(props),
        )  # fmt: skip
    if isinstance(p, PubAck | PubRec | PubRel | PubComp):
        return (type(p).__name__, p.packet_id, p.reason_code, props.reason_string, _up(props))
    if isinstance(p, Subscribe):
        subs = [
            (s.topic_filter, s.qos, s.no_local, s.retain_as_published, s.retain_handling)
            for s in p.subscriptions
        ]
        ids = props.subscription_identifiers
        return ("SUBSCRIBE", p.packet_id, subs, ids[0] if ids else None, _up(props))
    if isinstance(p, SubAck | UnsubAck):
        return (
            type(p).__name__,
            p.packet_id,
            list(p.reason_codes),
            props.reason_string,
            _up(props),
        )
    if isinstance(p, Unsubscribe):
        return ("UNSUBSCRIBE", p.packet_id, list(p.topic_filters), _up(props))
    if isinstance(p, Disconnect):
        return (
            "DISCONNECT", p.reason_code, props.session_expiry_interval, props.server_reference,
            props.reason_string, _up(props),
        )  # fmt: skip
    if isinstance(p, Auth):
        return (
            "AUTH", p.reason_code, props.authentication_method, props.authentication_data,
            props.reason_string, _up(props),
        )  # fmt: skip
    return (type(p).__name__,)


def norm_mqtt5(m: Any) -> tuple[Any, ...]:
    """An mqtt5 packet in the same form as norm_ours."""
    name = type(m).__name__
    if name == "ConnectPacket":
        w = m.will
        will = None
        if w is not None:
            will = (
                w.topic, w.payload or b"", int(w.qos), w.retain, w.payload_format_indicator,
                w.message_expiry_interval, w.content_type, w.response_topic, w.correlation_data,
                w.will_delay_interval, _m_up(w),
            )  # fmt: skip
        return (
            "CONNECT", m.client_id, m.username, m.password, m.clean_start, will, m.keep_alive,
            m.session_expiry_interval, m.authentication_method, m.authentication_data,
            m.request_problem_info, m.request_response_info, m.receive_max, m.topic_alias_max,
            m.max_packet_size, _m_up(m),
        )  # fmt: skip
    if name == "ConnAckPacket":
        return (
            "CONNACK", m.session_present, int(m.reason_code), m.session_expiry_interval,
            m.assigned_client_id, m.server_keep_alive, m.authentication_method,
            m.authentication_data, m.response_info, m.server_reference, m.reason_str,
            m.receive_max, m.topic_alias_max, int(m.max_qos), m.retain_available,
            m.max_packet_size, m.wildcard_subscription_available, m.subscription_id_available,
            m.shared_subscription_available, _m_up(m),
        )  # fmt: skip
    if name == "PublishPacket":
        return (
            "PUBLISH", m.topic, m.payload, int(m.qos), m.retain, m.packet_id, m.duplicate,
            m.payload_format_indicator, m.message_expiry_interval, m.content_type,
            m.response_topic, m.correlation_data, list(m.subscription_ids), m.topic_alias,
            _m_up(m),
        )  # fmt: skip
    if name in ("PubAckPacket", "PubRecPacket", "PubRelPacket", "PubCompPacket"):
        ours = {"PubAckPacket": "PubAck", "PubRecPacket": "PubRec"}.get(name, name[:-6])
        return (ours, m.packet_id, int(m.reason_code), m.reason_str, _m_up(m))
    if name == "SubscribePacket":
        subs = [
            (f.pattern, int(f.max_qos), f.no_local, f.retain_as_published, int(f.retain_handling))
            for f in m.topic_filters
        ]
        return ("SUBSCRIBE", m.packet_id, subs, m.subscription_id, _m_up(m))
    if name in ("SubAckPacket", "UnsubAckPacket"):
        ours = "SubAck" if name == "SubAckPacket" else "UnsubAck"
        return (ours, m.packet_id, [int(c) for c in m.reason_codes], m.reason_str, _m_up(m))
    if name == "UnsubscribePacket":
        return ("UNSUBSCRIBE", m.packet_id, list(m.patterns), _m_up(m))
    if name == "DisconnectPacket":
        return (
            "DISCONNECT", int(m.reason_code), m.session_expiry_interval, m.server_reference,
            m.reason_str, _m_up(m),
        )  # fmt: skip
    if name == "AuthPacket":
        return (
            "AUTH", int(m.reason_code), m.authentication_method, m.authentication_data,
            m.reason_str, _m_up(m),
        )  # fmt: skip
    return ({"PingReqPacket": "PingReq", "PingRespPacket": "PingResp"}[name],)


def to_mqtt5(p: Packet) -> Any:
    """The mqtt5 packet that means the same as *p*."""
    props = getattr(p, "properties", EMPTY_PROPERTIES)
    up = list(props.user_properties)
    if isinstance(p, Connect):
        will = None
        if p.will is not None:
            wp = p.will.properties
            will = mqtt5.Will(
                p.will.topic,
                payload=p.will.payload,
                qos=mqtt5.QoS(p.will.qos),
                retain=p.will.retain,
                payload_format_indicator=wp.payload_format_indicator or 0,
                message_expiry_interval=wp.message_expiry_interval,
                content_type=wp.content_type,
                response_topic=wp.response_topic,
                correlation_data=wp.correlation_data,
                will_delay_interval=wp.will_delay_interval or 0,
                user_properties=list(wp.user_properties),
            )
        rpi = props.request_problem_information
        return mqtt5.ConnectPacket(
            p.client_id,
            username=p.username,
            password=p.password,
            clean_start=p.clean_start,
            will=will,
            keep_alive=p.keep_alive,
            session_expiry_interval=props.session_expiry_interval or 0,
            authentication_method=props.authentication_method,
            authentication_data=props.authentication_data,
            request_problem_info=bool(1 if rpi is None else rpi),
            request_response_info=bool(props.request_response_information),
            receive_max=props.receive_maximum or 65535,
            topic_alias_max=props.topic_alias_maximum or 0,
            max_packet_size=props.maximum_packet_size,
            user_properties=up,
        )
    if isinstance(p, ConnAck):
        n = norm_ours(p)
        return mqtt5.ConnAckPacket(
            session_present=p.session_present,
            reason_code=mqtt5.ConnAckReasonCode(p.reason_code),
            session_expiry_interval=n[3],
            assigned_client_id=n[4],
            server_keep_alive=n[5],
            authentication_method=n[6],
            authentication_data=n[7],
            response_info=n[8],
            server_reference=n[9],
            reason_str=n[10],
            receive_max=n[11],
            topic_alias_max=n[12],
            max_qos=mqtt5.QoS(n[13]),
            retain_available=n[14],
            max_packet_size=n[15],
            wildcard_subscription_available=n[16],
            subscription_id_available=n[17],
            shared_subscription_available=n[18],
            user_properties=up,
        )
    if isinstance(p, Publish):
        return mqtt5.PublishPacket(
            p.topic,
            p.payload,
            qos=mqtt5.QoS(p.qos),
            retain=p.retain,
            packet_id=p.packet_id,
            duplicate=p.dup,
            payload_format_indicator=props.payload_format_indicator or 0,
            message_expiry_interval=props.message_expiry_interval,
            content_type=props.content_type,
            response_topic=props.response_topic,
            correlation_data=props.correlation_data,
            subscription_ids=list(props.subscription_identifiers),
            topic_alias=props.topic_alias,
            user_properties=up,
        )
    if isinstance(p, PubAck | PubRec | PubRel | PubComp):
        cls, codes = {
            PubAck: (mqtt5.PubAckPacket, mqtt5.PubAckReasonCode),
            PubRec: (mqtt5.PubRecPacket, mqtt5.PubRecReasonCode),
            PubRel: (mqtt5.PubRelPacket, mqtt5.PubRelReasonCode),
            PubComp: (mqtt5.PubCompPacket, mqtt5.PubCompReasonCode),
        }[type(p)]
        return cls(
            p.packet_id,
            reason_code=codes(p.reason_code),
            reason_str=props.reason_string,
            user_properties=up,
        )
    if isinstance(p, Subscribe):
        filters = [
            mqtt5.TopicFilter(
                s.topic_filter,
                max_qos=mqtt5.QoS(s.qos),
                no_local=s.no_local,
                retain_as_published=s.retain_as_published,
                retain_handling=mqtt5.RetainHandling(s.retain_handling),
            )
            for s in p.subscriptions
        ]
        ids = props.subscription_identifiers
        return mqtt5.SubscribePacket(
            p.packet_id, filters, subscription_id=ids[0] if ids else None, user_properties=up
        )
    if isinstance(p, SubAck):
        return mqtt5.SubAckPacket(
            p.packet_id,
            [mqtt5.SubAckReasonCode(c) for c in p.reason_codes],
            reason_str=props.reason_string,
            user_properties=up,
        )
    if isinstance(p, Unsubscribe):
        return mqtt5.UnsubscribePacket(p.packet_id, list(p.topic_filters), user_properties=up)
    if isinstance(p, UnsubAck):
        return mqtt5.UnsubAckPacket(
            p.packet_id,
            [mqtt5.UnsubAckReasonCode(c) for c in p.reason_codes],
            reason_str=props.reason_string,
            user_properties=up,
        )
    if isinstance(p, Disconnect):
        return mqtt5.DisconnectPacket(
            reason_code=mqtt5.DisconnectReasonCode(p.reason_code),
            session_expiry_interval=props.session_expiry_interval,
            server_reference=props.server_reference,
            reason_str=props.reason_string,
            user_properties=up,
        )
    if isinstance(p, Auth):
        return mqtt5.AuthPacket(
            reason_code=mqtt5.AuthReasonCode(p.reason_code),
            authentication_method=props.authentication_method,
            authentication_data=props.authentication_data,
            reason_str=props.reason_string,
            user_properties=up,
        )
    return mqtt5.PingReqPacket() if isinstance(p, PingReq) else mqtt5.PingRespPacket()


ALL_PACKETS_5 = st.one_of(
    connects(True),
    connacks(True),
    client_packets(5),
    server_packets(5),
)


def decode_any(packet_bytes: bytes, sample: Packet, version: int) -> Packet:
    """Decode the bytes of one packet with the decoder for the side that receives *sample*."""
    if isinstance(sample, Connect):
        out = Decoder().receive(packet_bytes)
    elif isinstance(sample, ConnAck):
        out = Decoder(role="client", version=version).receive(packet_bytes)
    elif isinstance(sample, Disconnect):
        # Only a client sends Session Expiry Interval in DISCONNECT (section 3.14.2.2.2).
        if version == 4 or sample.properties.session_expiry_interval is not None:
            out = decode_from_client(version, [], packet_bytes)
        else:
            out = decode_from_server(version, [], packet_bytes)
    elif (
        isinstance(sample, SubAck | UnsubAck | PingResp)
        or (isinstance(sample, Publish) and sample.properties.subscription_identifiers)
        or (isinstance(sample, Auth) and sample.properties.authentication_method != AUTH_METHOD)
    ):
        out = decode_from_server(version, [], packet_bytes)
    else:
        out = decode_from_client(version, [], packet_bytes)
    assert len(out) == 1, out
    return out[0]  # type: ignore[no-any-return]


@examples(250)
@given(packet=ALL_PACKETS_5)
def test_mqtt5_reads_what_we_encode(packet: Packet) -> None:
    """Every MQTT 5.0 packet we encode, mqtt5 decodes to the same values."""
    data = encode(packet, 5)
    decoded, used = mqtt5.read(memoryview(data))
    assert used == len(data)
    assert norm_mqtt5(decoded) == norm_ours(packet)


@examples(250)
@given(packet=ALL_PACKETS_5)
def test_we_decode_what_mqtt5_writes(packet: Packet) -> None:
    """Every MQTT 5.0 packet mqtt5 encodes, we decode to the same values."""
    reference = to_mqtt5(packet)
    data = reference.write()
    assert norm_mqtt5(reference) == norm_ours(packet)  # the conversion itself is faithful
    decoded = decode_any(data, packet, 5)
    assert norm_ours(decoded) == norm_mqtt5(reference)


# =============================================================================================
# Differential tests against amqtt (MQTT 3.1.1)


def amqtt_decode(data: bytes) -> Any:
    """Decode one packet with amqtt's codec classes, reading from an asyncio StreamReader."""

    async def read() -> Any:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        adapter = StreamReaderAdapter(reader)
        fixed = await amqtt_packet.MQTTFixedHeader.from_stream(adapter)
        assert fixed is not None
        cls = amqtt_mqtt.packet_class(fixed)
        decoded = await cls.from_stream(adapter, fixed_header=fixed)
        assert await reader.read() == b"", "amqtt left bytes of the packet unread"
        return decoded

    return asyncio.run(read())


def norm_amqtt(a: Any) -> tuple[Any, ...]:
    """An amqtt packet in the 3.1.1 terms of our packets (reason codes as 5.0 values)."""
    if isinstance(a, AConnect):
        vh, pl = a.variable_header, a.payload
        will = None
        if vh.will_flag:
            will = (pl.will_topic, bytes(pl.will_message), vh.will_qos, vh.will_retain_flag)
        password = pl.password.encode() if isinstance(pl.password, str) else pl.password
        # amqtt replaces an empty client identifier by a random one (and says so).
        client_id = "" if pl.client_id_is_random else pl.client_id
        return (
            "CONNECT", vh.proto_level, client_id, vh.clean_session_flag, vh.keep_alive, will,
            pl.username if vh.username_flag else None, password if vh.password_flag else None,
        )  # fmt: skip
    if isinstance(a, AConnack):
        return ("CONNACK", bool(a.session_parent), connack_reason_code(a.return_code))
    if isinstance(a, APublish):
        return ("PUBLISH", a.topic_name, a.data, a.qos, a.retain_flag, a.dup_flag, a.packet_id)
    if isinstance(a, APuback | APubrec | APubrel | APubcomp):
        return (type(a).__name__[:-6].lower(), a.variable_header.packet_id)
    if isinstance(a, ASubscribe):
        return ("SUBSCRIBE", a.variable_header.packet_id, [tuple(t) for t in a.payload.topics])
    if isinstance(a, ASuback):
        return ("SUBACK", a.variable_header.packet_id, list(a.payload.return_codes))
    if isinstance(a, AUnsubscribe):
        return ("UNSUBSCRIBE", a.variable_header.packet_id, list(a.payload.topics))
    if isinstance(a, AUnsuback):
        return ("UNSUBACK", a.variable_header.packet_id)
    return (type(a).__name__,)


def norm_ours_311(p: Packet) -> tuple[Any, ...]:
    """Our packet in the same form as norm_amqtt."""
    if isinstance(p, Connect):
        will = None if p.will is None else (p.will.topic, p.will.payload, p.will.qos, p.will.retain)
        return (
            "CONNECT", p.protocol_level, p.client_id, p.clean_start, p.keep_alive, will,
            p.username, p.password,
        )  # fmt: skip
    if isinstance(p, ConnAck):
        return ("CONNACK", p.session_present, p.reason_code)
    if isinstance(p, Publish):
        return ("PUBLISH", p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id)
    if isinstance(p, PubAck | PubRec | PubRel | PubComp):
        return (type(p).__name__.lower(), p.packet_id)
    if isinstance(p, Subscribe):
        return ("SUBSCRIBE", p.packet_id, [(s.topic_filter, s.qos) for s in p.subscriptions])
    if isinstance(p, SubAck):
        return ("SUBACK", p.packet_id, list(p.reason_codes))
    if isinstance(p, Unsubscribe):
        return ("UNSUBSCRIBE", p.packet_id, list(p.topic_filters))
    if isinstance(p, UnsubAck):
        return ("UNSUBACK", p.packet_id)
    return (
        {"PingReq": "PingReqPacket", "PingResp": "PingRespPacket"}.get(
            type(p).__name__, "DisconnectPacket"
        ),
    )


def to_amqtt(p: Packet) -> Any:
    """The amqtt packet that means the same as *p* (3.1.1)."""
    if isinstance(p, Connect):
        vh = ConnectVariableHeader(0, p.keep_alive, "MQTT", 4)
        vh.clean_session_flag = p.clean_start
        payload = ConnectPayload(client_id=p.client_id)
        if p.will is not None:
            vh.will_flag = True
            vh.will_qos = p.will.qos
            vh.will_retain_flag = p.will.retain
            payload.will_topic = p.will.topic
            payload.will_message = p.will.payload
        if p.username is not None:
            vh.username_flag = True
            payload.username = p.username
        if p.password is not None:
            vh.password_flag = True
            payload.password = p.password.decode()  # amqtt keeps passwords as str
        return AConnect(variable_header=vh, payload=payload)
    if isinstance(p, ConnAck):
        return AConnack.build(int(p.session_present), connack_return_code(p.reason_code))
    if isinstance(p, Publish):
        return APublish.build(p.topic, p.payload, p.packet_id, p.dup, p.qos, p.retain)
    if isinstance(p, PubAck | PubRec | PubRel | PubComp):
        cls = {PubAck: APuback, PubRec: APubrec, PubRel: APubrel, PubComp: APubcomp}[type(p)]
        return cls.build(p.packet_id)
    if isinstance(p, Subscribe):
        return ASubscribe.build([(s.topic_filter, s.qos) for s in p.subscriptions], p.packet_id)
    if isinstance(p, SubAck):
        return ASuback.build(p.packet_id, list(p.reason_codes))
    if isinstance(p, Unsubscribe):
        return AUnsubscribe.build(list(p.topic_filters), p.packet_id)
    if isinstance(p, UnsubAck):
        return AUnsuback.build(p.packet_id)
    if isinstance(p, PingReq):
        return APingReq()
    if isinstance(p, PingResp):
        return APingResp()
    return ADisconnect()


@st.composite
def amqtt_connects(draw: Any) -> Connect:
    connect = draw(connects(False))
    if connect.password is not None:
        # amqtt reads and writes the (binary) password as a UTF-8 string, so only UTF-8
        # passwords survive it; see the quirks test below.
        connect = Connect(
            connect.client_id, 4, connect.clean_start, connect.keep_alive, connect.username,
            draw(TEXT).encode(), connect.will,
        )  # fmt: skip
    return connect


ALL_PACKETS_4 = st.one_of(
    amqtt_connects(),
    connacks(False),
    client_packets(4),
    server_packets(4),
)


@examples(200)
@given(packet=ALL_PACKETS_4)
def test_amqtt_reads_what_we_encode(packet: Packet) -> None:
    """Every MQTT 3.1.1 packet we encode, amqtt decodes to the same values."""
    assert norm_amqtt(amqtt_decode(encode(packet, 4))) == norm_ours_311(packet)


@examples(200)
@given(packet=ALL_PACKETS_4)
def test_we_decode_what_amqtt_writes(packet: Packet) -> None:
    """Every MQTT 3.1.1 packet amqtt encodes, we decode to the same packet; the bytes are the
    same as ours too (3.1.1 leaves an encoder no choices)."""
    data = to_amqtt(packet).to_bytes()
    assert data == encode(packet, 4)
    assert decode_any(data, packet, 4) == packet


def test_reference_quirks() -> None:
    """What the reference codecs accept that the specification forbids (and we refuse): the
    reasons the differential tests only use valid packets."""
    # mqtt5 accepts U+0000 in strings, packet identifier 0, wildcards in a topic name, and a
    # SUBSCRIBE without topic filters.
    assert mqtt5.read(memoryview(b"\x40\x02\x00\x00"))[0].packet_id == 0
    assert mqtt5.read(memoryview(b"\x30\x04\x00\x01+\x00"))[0].topic == "+"
    assert mqtt5.read(memoryview(b"\x82\x03\x00\x01\x00"))[0].topic_filters == []
    # amqtt replaces a non-UTF-8 string by the repr of its bytes instead of refusing it, and
    # so reads a binary password wrongly.
    bad_password = encode(Connect("c", 4, True, 0, "u", b"\xff"), 4)
    assert amqtt_decode(bad_password).payload.password == "b'\\xff'"
    assert Decoder().receive(bad_password)[0].password == b"\xff"
    # amqtt invents a client identifier for an empty one.
    assert amqtt_decode(encode(Connect("", 4), 4)).payload.client_id_is_random


# =============================================================================================
# Malformed input: each case with its reason code and a phrase the message must contain

C4 = encode(CONNECT_4, 4)
C5 = encode(CONNECT_5, 5)
C5_NO_AUTH = encode(Connect("x", 5), 5)


def _connect(level: int, flags: int, payload: bytes, props: bytes = b"", name: bytes = b"MQTT"):
    """A CONNECT with the given flags and payload (keep alive 0)."""
    body = len(name).to_bytes(2, "big") + name + bytes((level, flags)) + b"\x00\x00"
    if level == 5:
        body += bytes((len(props),)) + props
    body += payload
    return bytes((0x10, len(body))) + body


def _s(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def _pkt(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes((first, len(body))) + body


def _publish5(props: bytes, payload: bytes = b"x", topic: bytes = b"\x00\x01t") -> bytes:
    return _pkt(0x30, topic + bytes((len(props),)) + props + payload)


MALFORMED: list[tuple[str, bytes, int, str]] = [
    # --- order of packets
    ("first packet not CONNECT", b"\xc0\x00", 0x82, "first packet on a connection must be CONNECT"),
    ("second CONNECT", C5 + C5, 0x82, "second CONNECT"),
    ("reserved type 0", C5 + b"\x00\x00", 0x81, "reserved"),
    ("type 15 in 3.1.1", C4 + b"\xf0\x00", 0x81, "reserved"),
    ("CONNACK from a client", C5 + b"\x20\x03\x00\x00\x00", 0x82, "client does not send CONNACK"),
    ("SUBACK from a client", C4 + b"\x90\x03\x00\x01\x00", 0x82, "client does not send SUBACK"),
    # --- fixed header
    ("PINGREQ flags", C5 + b"\xc1\x00", 0x81, "flags"),
    ("PUBREL flags 0000", C4 + b"\x60\x02\x00\x01", 0x81, "must be 0010"),
    ("SUBSCRIBE flags 0000", C4 + b"\x80\x06\x00\x01" + _s("a") + b"\x00", 0x81, "flags"),
    ("UNSUBSCRIBE flags 0011", C4 + b"\xa3\x05\x00\x01" + _s("a"), 0x81, "flags"),
    ("remaining length over 4 bytes", C5 + b"\x30\xff\xff\xff\xff\x01", 0x81, "4 bytes"),
    ("non-minimal remaining length (5.0)", C5 + b"\xc0\x80\x00", 0x81, "fewer would do"),
    ("non-minimal remaining length of CONNECT (5.0)",
     b"\x10\x8d\x00" + C5_NO_AUTH[2:], 0x81, "minimally encoded"),
    # --- PUBLISH
    ("QoS 3", C5 + _pkt(0x36, b"\x00\x01a\x00\x01\x00"), 0x81, "QoS 3"),
    ("DUP on QoS 0 (5.0)", C5 + _pkt(0x38, b"\x00\x01a\x00"), 0x82, "DUP"),
    ("DUP on QoS 0 (3.1.1)", C4 + _pkt(0x38, b"\x00\x01a"), 0x82, "DUP"),
    ("packet identifier 0", C4 + _pkt(0x32, b"\x00\x01a\x00\x00"), 0x82, "packet identifier is 0"),
    ("wildcard + in topic", C4 + _pkt(0x30, b"\x00\x03a/+"), 0x90, "wildcard"),
    ("wildcard # in topic (5.0)", C5 + _pkt(0x30, b"\x00\x01#\x00"), 0x90, "wildcard"),
    ("ill-formed UTF-8 topic", C4 + _pkt(0x30, b"\x00\x02a\xff"), 0x81, "UTF-8"),
    ("UTF-16 surrogate in topic", C5 + _pkt(0x30, b"\x00\x03\xed\xa0\x80\x00"), 0x81, "UTF-8"),
    ("overlong UTF-8 in topic", C5 + _pkt(0x30, b"\x00\x02\xc0\xaf\x00"), 0x81, "UTF-8"),
    ("U+0000 in topic", C4 + _pkt(0x30, b"\x00\x03a\x00b"), 0x81, "U+0000"),
    ("empty topic, no alias (5.0)", C5 + _pkt(0x30, b"\x00\x00\x00"), 0x82, "Topic Alias"),
    ("empty topic, properties but no alias (5.0)",
     C5 + _pkt(0x30, b"\x00\x00\x03\x03\x00\x00"), 0x82, "Topic Alias"),
    ("empty topic (3.1.1)", C4 + _pkt(0x30, b"\x00\x00x"), 0x82, "at least one character"),
    ("topic longer than the packet", C4 + _pkt(0x30, b"\x00\x09abc"), 0x81, "remain"),
    ("packet identifier cut off", C4 + _pkt(0x32, b"\x00\x01a\x00"), 0x81, "packet identifier"),
    ("no property length (5.0)", C5 + _pkt(0x30, b"\x00\x01a"), 0x81, "property length"),
    # --- properties
    ("unknown property", C5 + _publish5(b"\x7f\x00"), 0x81, "not an MQTT 5 property"),
    ("property identifier >= 0x80", C5 + _publish5(b"\x81\x01"), 0x81, "not an MQTT 5 property"),
    ("property not allowed in PUBLISH", C5 + _publish5(b"\x11\x00\x00\x00\x01"), 0x81,
     "Session Expiry Interval (0x11) is not allowed in the PUBLISH"),
    ("duplicate property", C5 + _publish5(b"\x03\x00\x00\x03\x00\x00"), 0x82, "more than once"),
    ("property length past the packet", C5 + _pkt(0x30, b"\x00\x01t\x09\x01\x00"), 0x81,
     "property length"),
    ("property value past the property length",
     C5 + _pkt(0x30, b"\x00\x01t\x03\x03\x00\x05abcde"), 0x81, "property block"),
    ("non-minimal property length", C5 + _pkt(0x30, b"\x00\x01t\x80\x00x"), 0x81,
     "fewer would do"),
    ("property length over 4 bytes", C5 + _pkt(0x30, b"\x00\x01t\xff\xff\xff\xff\x01x"), 0x81,
     "longer than 4 bytes"),
    ("topic alias 0", C5 + _publish5(b"\x23\x00\x00"), 0x82, "Topic Alias property"),
    ("payload format indicator 2", C5 + _publish5(b"\x01\x02"), 0x82, "only 0 and 1"),
    ("subscription identifier from a client", C5 + _publish5(b"\x0b\x01"), 0x82,
     "Subscription Identifier"),
    ("response topic with a wildcard", C5 + _publish5(b"\x08" + _s("r/#")), 0x82,
     "Response Topic"),
    ("payload not UTF-8 though marked so", C5 + _publish5(b"\x01\x01", b"\xff\xfe"), 0x99,
     "Payload Format Indicator"),
    ("ill-formed UTF-8 in a user property", C5 + _publish5(b"\x26\x00\x01\xff\x00\x00"), 0x81,
     "UTF-8"),
    ("receive maximum 0 in CONNECT", _connect(5, 0x02, _s("c"), b"\x21\x00\x00"), 0x82,
     "Receive Maximum"),
    ("maximum packet size 0 in CONNECT", _connect(5, 0x02, _s("c"), b"\x27\x00\x00\x00\x00"),
     0x82, "Maximum Packet Size"),
    ("request problem information 2", _connect(5, 0x02, _s("c"), b"\x17\x02"), 0x82,
     "Request Problem Information"),
    ("topic alias in CONNECT", _connect(5, 0x02, _s("c"), b"\x23\x00\x01"), 0x81,
     "not allowed in the CONNECT"),
    ("authentication data without method", _connect(5, 0x02, _s("c"), b"\x16\x00\x01x"), 0x82,
     "Authentication Data"),
    ("will delay in CONNECT properties", _connect(5, 0x02, _s("c"), b"\x18\x00\x00\x00\x01"),
     0x81, "not allowed in the CONNECT"),
    ("topic alias in will properties",
     _connect(5, 0x06, _s("c") + b"\x03\x23\x00\x01" + _s("w") + b"\x00\x00"), 0x81,
     "not allowed in the will properties"),
    # --- CONNECT
    ("reserved connect flag", _connect(4, 0x03, _s("c")), 0x81, "reserved bit 0"),
    ("will QoS 3", _connect(5, 0x1E, _s("c") + b"\x00" + _s("w") + b"\x00\x00"), 0x81,
     "will QoS is 3"),
    ("will QoS without will", _connect(4, 0x0A, _s("c")), 0x81, "Will Flag is 0"),
    ("will retain without will", _connect(5, 0x22, _s("c")), 0x81, "Will Flag is 0"),
    ("password without user name (3.1.1)", _connect(4, 0x42, _s("c") + _s("p")), 0x81,
     "needs a user name"),
    ("empty client id, CleanSession 0 (3.1.1)", _connect(4, 0x00, _s("")), 0x85,
     "client identifier is empty"),
    ("MQTT 3.1 (MQIsdp, level 3)", _connect(3, 0x02, _s("c"), name=b"MQIsdp"), 0x84,
     "level 3"),
    ("level 6", _connect(6, 0x02, _s("c")), 0x84, "level 6"),
    ("protocol name not MQTT", _connect(4, 0x02, _s("c"), name=b"MQTX"), 0x82, "'MQTX'"),
    ("bytes after the CONNECT payload", _connect(4, 0x02, _s("c") + b"\x00"), 0x81, "follow"),
    ("CONNECT cut short", _pkt(0x10, b"\x00\x04MQTT\x04\x02\x00"), 0x81, "keep alive"),
    ("will topic with a wildcard", _connect(4, 0x06, _s("c") + _s("w/+") + b"\x00\x00"), 0x90,
     "will topic"),
    ("will payload not UTF-8 though marked so",
     _connect(5, 0x06, _s("c") + b"\x02\x01\x01" + _s("w") + b"\x00\x01\xff"), 0x99,
     "will payload"),
    ("user name ill-formed UTF-8", _connect(4, 0x82, _s("c") + b"\x00\x01\xff"), 0x81, "user name"),
    ("client id with U+0000", _connect(5, 0x02, b"\x00\x01\x00"), 0x81, "U+0000"),
    # --- acknowledgements
    ("PUBACK packet identifier 0", C5 + b"\x40\x02\x00\x00", 0x82, "packet identifier is 0"),
    ("PUBACK remaining length 3 (3.1.1)", C4 + b"\x40\x03\x00\x01\x00", 0x81, "always 2"),
    ("PUBACK remaining length 1", C5 + b"\x40\x01\x00", 0x81, "packet identifier"),
    ("PUBACK reason code 0x05", C5 + b"\x40\x03\x00\x01\x05", 0x82, "reason code 0x05"),
    ("PUBREL reason code 0x10", C5 + b"\x62\x03\x00\x01\x10", 0x82, "reason code 0x10"),
    ("PUBCOMP bytes after properties", C5 + b"\x70\x05\x00\x01\x00\x00\x00", 0x81, "follow"),
    # --- SUBSCRIBE / UNSUBSCRIBE
    ("SUBSCRIBE without filters (3.1.1)", C4 + b"\x82\x02\x00\x01", 0x82, "no topic filter"),
    ("SUBSCRIBE without filters (5.0)", C5 + b"\x82\x03\x00\x01\x00", 0x82, "no topic filter"),
    ("SUBSCRIBE packet identifier 0", C4 + _pkt(0x82, b"\x00\x00" + _s("a") + b"\x00"), 0x82,
     "packet identifier is 0"),
    ("SUBSCRIBE reserved bits (3.1.1)", C4 + _pkt(0x82, b"\x00\x01" + _s("a") + b"\x04"), 0x81,
     "bits 7-2"),
    ("SUBSCRIBE QoS 3 (3.1.1)", C4 + _pkt(0x82, b"\x00\x01" + _s("a") + b"\x03"), 0x81,
     "bits 7-2"),
    ("SUBSCRIBE reserved bits (5.0)", C5 + _pkt(0x82, b"\x00\x01\x00" + _s("a") + b"\x40"), 0x81,
     "reserved bits 7-6"),
    ("SUBSCRIBE QoS 3 (5.0)", C5 + _pkt(0x82, b"\x00\x01\x00" + _s("a") + b"\x03"), 0x82,
     "maximum QoS"),
    ("SUBSCRIBE retain handling 3", C5 + _pkt(0x82, b"\x00\x01\x00" + _s("a") + b"\x30"), 0x82,
     "Retain Handling"),
    ("No Local on a shared subscription",
     C5 + _pkt(0x82, b"\x00\x01\x00" + _s("$share/g/a") + b"\x04"), 0x82, "No Local"),
    ("filter with # not last", C4 + _pkt(0x82, b"\x00\x01" + _s("a/#/b") + b"\x00"), 0x8F,
     "must be the last"),
    ("filter with + inside a level", C5 + _pkt(0x82, b"\x00\x01\x00" + _s("a+") + b"\x00"), 0x8F,
     "inside the level"),
    ("empty filter", C4 + _pkt(0x82, b"\x00\x01" + _s("") + b"\x00"), 0x8F, "empty"),
    ("shared subscription without a share name",
     C5 + _pkt(0x82, b"\x00\x01\x00" + _s("$share//a") + b"\x00"), 0x8F, "share name is empty"),
    ("shared subscription named +",
     C5 + _pkt(0x82, b"\x00\x01\x00" + _s("$share/+/a") + b"\x00"), 0x8F, "wildcard"),
    ("shared subscription without a filter",
     C5 + _pkt(0x82, b"\x00\x01\x00" + _s("$share/g") + b"\x00"), 0x8F, "no topic filter"),
    ("SUBSCRIBE options byte missing", C4 + _pkt(0x82, b"\x00\x01" + _s("a")), 0x81,
     "subscription options"),
    ("two subscription identifiers in SUBSCRIBE",
     C5 + _pkt(0x82, b"\x00\x01\x04\x0b\x01\x0b\x02" + _s("a") + b"\x00"), 0x82,
     "more than one Subscription Identifier"),
    ("subscription identifier 0", C5 + _pkt(0x82, b"\x00\x01\x02\x0b\x00" + _s("a") + b"\x00"),
     0x82, "Subscription Identifier"),
    ("UNSUBSCRIBE without filters", C5 + b"\xa2\x03\x00\x01\x00", 0x82, "no topic filter"),
    ("UNSUBSCRIBE bad filter", C4 + _pkt(0xA2, b"\x00\x01" + _s("#/a")), 0x8F, "last"),
    # --- PINGREQ, DISCONNECT, AUTH
    ("PINGREQ with a body", C4 + b"\xc0\x01\x00", 0x81, "has none"),
    ("DISCONNECT with a body (3.1.1)", C4 + b"\xe0\x01\x00", 0x81, "remaining length of 0"),
    ("DISCONNECT reason code 0x03", C5 + b"\xe0\x01\x03", 0x82, "DISCONNECT reason code"),
    ("DISCONNECT session expiry after 0 in CONNECT",
     C5_NO_AUTH + b"\xe0\x07\x00\x05\x11\x00\x00\x00\x05", 0x82, "Session Expiry Interval"),
    ("AUTH in 3.1.1", C4 + b"\xf0\x00", 0x81, "reserved"),
    ("AUTH without a method in CONNECT", C5_NO_AUTH + b"\xf0\x00", 0x82,
     "no Authentication Method"),
    ("AUTH with another method", C5 + _pkt(0xF0, b"\x18\x05\x15" + _s("XY")), 0x82, "same"),
    ("AUTH without a method", C5 + b"\xf0\x02\x18\x00", 0x82, "no Authentication Method"),
    ("AUTH reason code 0x05", C5 + b"\xf0\x02\x05\x00", 0x82, "AUTH reason code"),
    ("AUTH bytes after properties", C5 + b"\xf0\x03\x18\x00\x00", 0x81, "follow"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "code", "phrase"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_input(data: bytes, code: int, phrase: str) -> None:
    """Each malformed input raises ProtocolError with the right reason code and a message that
    says what was wrong and where, both fed whole and byte by byte."""
    decoder = Decoder(1000)
    with pytest.raises(ProtocolError) as caught:
        decoder.receive(data)
    error = caught.value
    assert error.reason_code == code, str(error)
    assert phrase.lower() in error.message.lower(), error.message
    assert " packet at byte " in error.message  # where: the packet type and stream offset
    assert decoder.error is error
    with pytest.raises(DecoderClosedError):
        decoder.receive(b"\xc0\x00")
    # The same error whatever the chunking.
    decoder = Decoder(1000)
    with pytest.raises(ProtocolError) as caught:
        for i in range(len(data)):
            decoder.receive(data[i : i + 1])
    assert caught.value.reason_code == code
    assert caught.value.message == error.message


CLIENT_SIDE_MALFORMED: list[tuple[str, int, bytes, int, str]] = [
    ("first packet not CONNACK", 5, b"\xd0\x00", 0x82, "must be CONNACK"),
    ("AUTH first in 3.1.1", 4, b"\xf0\x00", 0x81, "reserved"),
    ("CONNACK reserved flag bits", 4, b"\x20\x02\x02\x00", 0x81, "bits 7-1"),
    ("CONNACK return code 6 (3.1.1)", 4, b"\x20\x02\x00\x06", 0x82, "return code 6"),
    ("CONNACK reason code 0x01 (5.0)", 5, b"\x20\x03\x00\x01\x00", 0x82, "CONNACK reason code"),
    ("session present on a refusal", 4, b"\x20\x02\x01\x05", 0x82, "Session Present"),
    ("CONNACK remaining length 3 (3.1.1)", 4, b"\x20\x03\x00\x00\x00", 0x81, "follow"),
    ("CONNACK with maximum QoS 2", 5, b"\x20\x05\x00\x00\x02\x24\x02", 0x82, "Maximum QoS"),
    ("second CONNACK", 5, b"\x20\x03\x00\x00\x00" * 2, 0x82, "second CONNACK"),
    ("DISCONNECT from a 3.1.1 server", 4, b"\x20\x02\x00\x00\xe0\x00", 0x82, "3.1.1 server"),
    ("server DISCONNECT with session expiry", 5,
     b"\x20\x03\x00\x00\x00\xe0\x07\x00\x05\x11\x00\x00\x00\x01", 0x82, "only a client sends"),
    ("SUBACK code 0x03 (3.1.1)", 4, b"\x20\x02\x00\x00\x90\x03\x00\x01\x03", 0x82, "SUBACK"),
    ("SUBACK without codes", 5, b"\x20\x03\x00\x00\x00\x90\x03\x00\x01\x00", 0x82, "no reason"),
    ("UNSUBACK remaining length 3 (3.1.1)", 4, b"\x20\x02\x00\x00\xb0\x03\x00\x01\x00", 0x81,
     "UNSUBACK"),
    ("UNSUBACK without codes (5.0)", 5, b"\x20\x03\x00\x00\x00\xb0\x03\x00\x01\x00", 0x82,
     "no reason"),
    ("SUBSCRIBE from a server", 5, b"\x20\x03\x00\x00\x00\x82\x03\x00\x01\x00", 0x82,
     "server does not send SUBSCRIBE"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("version", "data", "code", "phrase"),
    [case[1:] for case in CLIENT_SIDE_MALFORMED],
    ids=[case[0] for case in CLIENT_SIDE_MALFORMED],
)
def test_malformed_input_client_side(version: int, data: bytes, code: int, phrase: str) -> None:
    decoder = Decoder(1000, role="client", version=version)
    with pytest.raises(ProtocolError) as caught:
        decoder.receive(data)
    assert caught.value.reason_code == code, str(caught.value)
    assert phrase.lower() in caught.value.message.lower(), caught.value.message


def test_error_message_says_where() -> None:
    decoder = Decoder()
    stream = C4 + encode(PingReq(), 4) + _pkt(0x30, b"\x00\x03a/+")
    with pytest.raises(ProtocolError) as caught:
        decoder.receive(stream)
    error = caught.value
    offset = len(C4) + 2
    assert error.message.startswith(f"PUBLISH packet at byte {offset} of the stream (byte 4 ")
    assert str(error).startswith("0x90 Topic name invalid: PUBLISH packet")
    assert error.packets == [CONNECT_4, PingReq()]  # what came before the error is kept
    assert error.packet_type == 3 and error.version == 4 and not error.in_connect


def test_3_1_1_accepts_non_minimal_remaining_length() -> None:
    # 3.1.1 section 2.2.3 gives the encoding algorithm but, unlike 5.0 [MQTT-1.5.5-1], no rule
    # that the encoding be minimal; we accept it there.
    assert decode_from_client(4, [], b"\xc0\x80\x00") == [PingReq()]


def test_packet_too_large_is_refused_from_the_fixed_header() -> None:
    decoder = Decoder(100)
    decoder.receive(C5)
    # A PUBLISH announcing a remaining length of 1,000,000: refused from its 4 header bytes.
    with pytest.raises(ProtocolError) as caught:
        decoder.receive(b"\x30\xc0\x84\x3d")
    assert caught.value.reason_code == 0x95
    assert "over this server's maximum packet size of 100" in caught.value.message
    assert caught.value.reply() == b"\xe0\x01\x95"
    # Exactly the limit is fine; the limit counts the fixed header.
    decoder = Decoder(len(C5))
    assert decoder.receive(C5) == [CONNECT_5]
    assert Decoder(len(C5) - 1).error is None
    with pytest.raises(ProtocolError):
        Decoder(len(C5) - 1).receive(C5)


def test_partial_packets_are_held_and_bounded() -> None:
    decoder = Decoder(10_000)
    decoder.receive(C4)
    packet = encode(Publish("t", b"x" * 5000, 1, False, False, 1), 4)
    for i in range(0, len(packet) - 1, 700):
        assert decoder.receive(packet[i : min(i + 700, len(packet) - 1)]) == []
    assert decoder.buffered == len(packet) - 1
    assert decoder.receive(packet[-1:]) == [Publish("t", b"x" * 5000, 1, False, False, 1)]
    assert decoder.buffered == 0
    assert decoder.receive(b"") == []
    assert decoder.receive(bytearray(encode(PingReq(), 4))) == [PingReq()]
    assert decoder.receive(memoryview(encode(PingReq(), 4))) == [PingReq()]


def test_decoder_arguments() -> None:
    with pytest.raises(ValueError):
        Decoder(1)
    with pytest.raises(ValueError):
        Decoder(MAX_PACKET_SIZE + 1)
    with pytest.raises(ValueError):
        Decoder(version=5)
    with pytest.raises(ValueError):
        Decoder(role="client")
    with pytest.raises(ValueError):
        Decoder(role="broker")  # type: ignore[arg-type]
    decoder = Decoder()
    assert decoder.version is None and decoder.connect is None


def test_payload_format_check_can_be_turned_off() -> None:
    data = C5 + _publish5(b"\x01\x01", b"\xff")
    decoder = Decoder(check_payload_format=False)
    assert decoder.receive(data)[1].payload == b"\xff"


# =============================================================================================
# What the server sends back for an error


def _error(data: bytes, **kwargs: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        Decoder(1000, **kwargs).receive(data)
    return caught.value


def test_reply_to_unsupported_protocol_level() -> None:
    # 3.1.1 [MQTT-3.1.2-2]: CONNACK return code 0x01, in the 3.1.1 layout that MQTT 3.1 and
    # other unknown levels can read.
    for data in (_connect(3, 0x02, _s("c"), name=b"MQIsdp"), _connect(6, 0x02, _s("c"))):
        error = _error(data)
        assert error.reason_code == 0x84 and error.version is None and error.in_connect
        assert error.reply() == b"\x20\x02\x00\x01"


def test_reply_to_rejected_client_identifier_3_1_1() -> None:
    error = _error(_connect(4, 0x00, _s("")))
    assert error.version == 4 and error.in_connect
    assert error.reply() == b"\x20\x02\x00\x02"  # [MQTT-3.1.3-8]: return code 0x02


def test_reply_to_other_3_1_1_errors_is_to_close() -> None:
    # [MQTT-3.1.4-1]: close without CONNACK; and 3.1.1 has no server DISCONNECT.
    assert _error(_connect(4, 0x03, _s("c"))).reply() == b""
    assert _error(C4 + b"\xc1\x00").reply() == b""
    assert _error(b"\xc0\x00").reply() == b""  # not CONNECT first: version unknown


def test_reply_in_5_0_is_connack_then_disconnect() -> None:
    error = _error(_connect(5, 0x03, _s("c")))
    assert error.version == 5 and error.in_connect
    assert error.reply() == b"\x20\x03\x00\x81\x00"
    assert Decoder(role="client", version=5).receive(error.reply()) == [ConnAck(False, 0x81)]
    # A reason code the reply packet cannot carry goes as 0x82 Protocol Error.
    error = _error(C5 + _pkt(0x82, b"\x00\x01\x00" + _s("a+") + b"\x00"))
    assert error.reason_code == 0x8F
    assert error.reply() == b"\xe0\x01\x8f"
    assert error.reply(connack_sent=False) == b"\x20\x03\x00\x82\x00"
    assert ProtocolError(0x85, "x", version=5).reply() == b"\xe0\x01\x82"
    error = _error(C5 + b"\xc1\x00")
    assert not error.in_connect
    assert error.reply() == b"\xe0\x01\x81"
    assert error.reply(connack_sent=False) == b"\x20\x03\x00\x81\x00"
    # With the message as Reason String; mqtt5 reads it.
    reply = error.reply(reason_string=True)
    decoded, _ = mqtt5.read(memoryview(reply))
    assert int(decoded.reason_code) == 0x81
    assert decoded.reason_str.startswith("PINGREQ packet at byte")


# =============================================================================================
# Encoding rules


def test_encoding_3_1_1_leaves_out_what_it_cannot_carry() -> None:
    props = Properties(user_properties=(("k", "v"),), message_expiry_interval=5)
    assert encode(Publish("t", b"x", 1, False, False, 1, props), 4) == encode(
        Publish("t", b"x", 1, False, False, 1), 4
    )
    assert encode(PubAck(1, ReasonCode.NO_MATCHING_SUBSCRIBERS), 4) == b"\x40\x02\x00\x01"
    assert encode(UnsubAck(1, (0, 0x11)), 4) == b"\xb0\x02\x00\x01"
    assert encode(SubAck(1, (1, ReasonCode.NOT_AUTHORIZED)), 4) == b"\x90\x04\x00\x01\x01\x80"
    assert encode(ConnAck(False, ReasonCode.BANNED), 4) == b"\x20\x02\x00\x05"
    assert encode(ConnAck(False, ReasonCode.SERVER_BUSY), 4) == b"\x20\x02\x00\x03"


@pytest.mark.parametrize(
    ("packet", "version", "phrase"),
    [
        (PubAck(1, ReasonCode.NOT_AUTHORIZED), 4, "cannot express"),
        (UnsubAck(1, (0x87,)), 4, "cannot express"),
        (ConnAck(False, ReasonCode.MALFORMED_PACKET), 4, "no CONNACK return code"),
        (Disconnect(0x04), 4, "no reason code"),
        (Auth(), 4, "only in MQTT 5.0"),
        (Connect("c", 5), 4, "protocol level 5"),
        (Connect("c", 4, password=b"p"), 4, "without a user name"),
        (Subscribe(1, (Subscription("a", 0, True),)), 4, "MQTT 5 options"),
        (PubAck(0), 5, "1-65535"),
        (PubAck(70000), 4, "1-65535"),
        (Publish("t", b"", 1), 5, "1-65535"),
        (Publish("t", b"", 0, packet_id=3), 5, "no packet identifier"),
        (Publish("t", b"", 0, dup=True), 4, "DUP"),
        (Publish("t", b"", 3, packet_id=1), 5, "QoS"),
        (Publish("a\x00b", b""), 5, r"U\+0000"),
        (Publish("\ud800", b""), 5, "surrogate"),
        (Publish("x" * 70000, b""), 5, "65535"),
        (Publish("t", b"", properties=Properties(session_expiry_interval=1)), 5, "not allowed"),
        (Publish("t", b"", properties=Properties(topic_alias=70000)), 5, "outside"),
        (Subscribe(1, ()), 5, "at least one"),
        (Subscribe(1, (Subscription("a", 0, retain_handling=3),)), 5, "retain handling"),
        (SubAck(1, (0x05,)), 5, "not a reason code"),
        (PubRel(1, 0x10), 5, "not a reason code"),
        (ConnAck(True, 0x80), 5, "Session Present"),
        (UnsubAck(1), 5, "one reason code per topic filter"),
        (SubAck(1, ()), 5, "at least one"),
        (SubAck(1, (0x11,)), 4, "not a SUBACK reason code"),
        (Unsubscribe(1, ()), 5, "at least one"),
        (Subscribe(1, (Subscription("a", 3),)), 5, "maximum QoS"),
        (Connect("c", 4, will=Will("w", b"", 3)), 4, "will QoS"),
        (Publish("t", b"", properties=Properties(subscription_identifiers=(0,))), 5, "outside"),
        (Publish("t", b"", properties=Properties(correlation_data=bytes(70000))), 5, "65535"),
    ],
    ids=repr,
)
def test_encode_refuses(packet: Packet, version: int, phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        encode(packet, version)


def test_encode_arguments() -> None:
    with pytest.raises(ValueError, match="version"):
        encode(PingReq(), 3)
    with pytest.raises(TypeError):
        encode("PINGREQ", 5)  # type: ignore[arg-type]
    # The message differs when mypyc compiled the codec (router/accel.py); both name str.
    with pytest.raises(TypeError, match="str"):
        encode(Publish(b"t", b""), 5)  # type: ignore[arg-type]


def test_large_packets_round_trip() -> None:
    payload = bytes(range(256)) * 1000  # remaining length in 3 bytes
    packet = Publish("big", payload, 2, False, False, 9, Properties(user_properties=(("a", "b"),)))
    assert decode_from_client(5, [packet]) == [packet]
    assert mqtt5.read(memoryview(encode(packet, 5)))[0].payload == payload


# =============================================================================================
# Properties


def test_properties_value_semantics() -> None:
    a = Properties(topic_alias=3, user_properties=[("k", "v")])
    assert a.topic_alias == 3
    assert a.user_properties == (("k", "v"),)
    assert a.message_expiry_interval is None and a.subscription_identifiers == ()
    assert a == Properties(user_properties=(("k", "v"),), topic_alias=3)
    assert hash(a) == hash(Properties(user_properties=(("k", "v"),), topic_alias=3))
    assert a != Properties(topic_alias=3)
    assert repr(a) == "Properties(topic_alias=3, user_properties=(('k', 'v'),))"
    assert a.replace(topic_alias=None) == Properties(user_properties=(("k", "v"),))
    assert bool(a) and not bool(EMPTY_PROPERTIES) and Properties() == EMPTY_PROPERTIES
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.topic_alias = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del a.topic_alias
    assert a == a and a != "topic_alias=3"
    # Equal whatever order they were given in, and encoded in identifier order.
    b = Properties(user_properties=(("k", "v"),), message_expiry_interval=1, content_type="x")
    assert list(b.as_dict()) == ["message_expiry_interval", "content_type", "user_properties"]
    with pytest.raises(TypeError):
        Properties(bogus=1)
    with pytest.raises(AttributeError):
        _ = a.bogus  # type: ignore[attr-defined]


def test_property_order_on_the_wire_does_not_matter() -> None:
    """Properties sent out of identifier order decode to the same value, and encode back in
    identifier order."""
    user = b"\x26" + _s("k") + _s("v")
    expiry = b"\x02\x00\x00\x00\x3c"
    sub_id = b"\x0b\x07"
    shuffled = user + sub_id + expiry + user + sub_id
    packet = _pkt(0x30, b"\x00\x01t" + bytes((len(shuffled),)) + shuffled + b"x")
    (decoded,) = decode_from_server(5, [], packet)
    expected = Properties(
        message_expiry_interval=60,
        subscription_identifiers=(7, 7),
        user_properties=(("k", "v"), ("k", "v")),
    )
    assert decoded.properties == expected
    assert list(decoded.properties.as_dict()) == list(expected.as_dict())
    assert encode(decoded, 5) == encode(Publish("t", b"x", properties=expected), 5)


def test_property_table_matches_the_specification() -> None:
    # Section 2.2.2.2: 27 properties; only User Property and Subscription Identifier repeat.
    assert len(PROPERTIES) == 27
    assert {s.identifier for s in PROPERTIES.values() if s.repeatable} == {0x0B, 0x26}
    assert set(ALLOWED[12]) == set() == set(ALLOWED[13])  # PINGREQ, PINGRESP: no properties
    assert set(ALLOWED[WILL]) == {0x01, 0x02, 0x03, 0x08, 0x09, 0x18, 0x26}
    assert set(ALLOWED[3]) == {0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23, 0x26}
    assert len(ALLOWED[2]) == 17  # CONNACK: section 3.2.2.3, User Property included


def test_connack_return_code_mapping() -> None:
    for code in ConnackReturnCode:
        assert connack_return_code(connack_reason_code(code)) == code  # type: ignore[arg-type]
    assert connack_return_code(ReasonCode.MALFORMED_PACKET) is None
    assert connack_reason_code(6) is None


# =============================================================================================
# A real client: paho-mqtt against a small broker loop built on the codec


def _serve(listener: socket.socket, log: list[Packet], errors: list[BaseException]) -> None:
    """Answer one client: CONNACK, SUBACK (then a PUBLISH to it), PUBACK/PUBREC/PUBCOMP,
    UNSUBACK, PINGRESP; stop at DISCONNECT or end of stream."""
    try:
        conn, _ = listener.accept()
        conn.settimeout(10)
        decoder = Decoder(1 << 16)
        version = 4
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                out = []
                for p in decoder.receive(data):
                    log.append(p)
                    if isinstance(p, Connect):
                        version = p.protocol_level
                        out.append(ConnAck())
                    elif isinstance(p, Subscribe):
                        out.append(SubAck(p.packet_id, tuple(s.qos for s in p.subscriptions)))
                        props = Properties(user_properties=(("from", "codec"),))
                        out.append(Publish("to/paho", b"hello paho", 1, False, False, 77, props))
                    elif isinstance(p, Publish) and p.qos == 1:
                        out.append(PubAck(p.packet_id))
                    elif isinstance(p, Publish) and p.qos == 2:
                        out.append(PubRec(p.packet_id))
                    elif isinstance(p, PubRel):
                        out.append(PubComp(p.packet_id))
                    elif isinstance(p, Unsubscribe):
                        out.append(UnsubAck(p.packet_id, (0,) * len(p.topic_filters)))
                    elif isinstance(p, PingReq):
                        out.append(PingResp())
                    elif isinstance(p, Disconnect):
                        return
                if out:
                    conn.sendall(b"".join(encode(p, version) for p in out))
    except BaseException as exc:  # reported by the test
        errors.append(exc)


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.timeout(60)
def test_paho_client_against_the_codec(version: int) -> None:
    """paho-mqtt (a real client) connects, subscribes, publishes at QoS 0-2, receives a
    PUBLISH, unsubscribes and disconnects; every packet it sends decodes under our strict
    rules, and it understands every packet we encode."""
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties as PahoProperties

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    port = listener.getsockname()[1]
    log: list[Packet] = []
    errors: list[BaseException] = []
    server = threading.Thread(target=_serve, args=(listener, log, errors), daemon=True)
    server.start()
    protocol = paho_client.MQTTv5 if version == 5 else paho_client.MQTTv311
    client = paho_client.Client(CallbackAPIVersion.VERSION2, "paho-codec", protocol=protocol)
    received: list[Any] = []
    client.on_message = lambda c, u, m: received.append(m)
    try:
        client.connect("127.0.0.1", port, keepalive=30)
        client.loop_start()
        deadline = time.monotonic() + 10

        def wait(cond: Callable[[], bool]) -> None:
            while not cond():
                assert time.monotonic() < deadline, f"timed out; server saw {log}, {errors}"
                time.sleep(0.01)

        wait(client.is_connected)
        client.subscribe([("a/+", 1), ("b/#", 2)])
        wait(lambda: bool(received))
        props = None
        if version == 5:
            props = PahoProperties(PacketTypes.PUBLISH)
            props.UserProperty = ("k", "v")
            props.MessageExpiryInterval = 30
        infos = [
            client.publish("a/x", b"q0", 0, properties=props),
            client.publish("a/y", b"q1", 1, properties=props),
            client.publish("a/z", b"q2", 2, properties=props),
        ]
        for info in infos:
            info.wait_for_publish(timeout=10)
        client.unsubscribe("a/+")
        wait(lambda: any(isinstance(p, Unsubscribe) for p in log))
        client.disconnect()
        server.join(10)
    finally:
        client.loop_stop()
        listener.close()
    assert not errors, errors
    kinds = [type(p).__name__ for p in log]
    assert kinds[0] == "Connect" and log[0].protocol_level == version  # type: ignore[union-attr]
    assert kinds.count("Publish") == 3 and "PubRel" in kinds and "PubAck" in kinds
    assert kinds[-1] == "Disconnect"
    publishes_seen = [p for p in log if isinstance(p, Publish)]
    assert [(p.topic, p.payload, p.qos) for p in publishes_seen] == [
        ("a/x", b"q0", 0), ("a/y", b"q1", 1), ("a/z", b"q2", 2)
    ]  # fmt: skip
    if version == 5:
        assert publishes_seen[0].properties.user_properties == (("k", "v"),)
        assert publishes_seen[0].properties.message_expiry_interval == 30
    subscribe = next(p for p in log if isinstance(p, Subscribe))
    assert [(s.topic_filter, s.qos) for s in subscribe.subscriptions] == [("a/+", 1), ("b/#", 2)]
    assert received[0].topic == "to/paho" and received[0].payload == b"hello paho"


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_plain_publish_encoder_matches_encode(v5: bool) -> None:
    """The server's short-cut for a PUBLISH without properties gives the bytes `encode` gives."""
    from mqtt_edge.codec import encode_plain_publish

    for qos, dup in ((0, False), (1, False), (1, True), (2, False), (2, True)):
        for topic in ("a/b", "\u00e9/\u00fc", "x" * 200):
            for payload in (b"", b"y" * 100, b"z" * 300):
                pid = 77 if qos else None
                want = encode(Publish(topic, payload, qos, False, dup, pid), 5 if v5 else 4)
                assert encode_plain_publish(topic, payload, qos, dup, pid or 0, v5) == want
    with pytest.raises(ValueError):
        encode_plain_publish("a\x00b", b"", 0, False, 0, v5)


def test_mapping_plain_publish_reads_back_through_proton() -> None:
    """The cached-section encoding of a PUBLISH without properties (mqtt_edge/mapping.py) is
    a well-formed AMQP message: proton reads back the topic, body and annotations, and so
    does the mapping's own decoder, for short and long topics and bodies."""
    from proton import Message

    from mqtt_edge import mapping

    for topic in ("a/b", "\u00e9/\u00fc", "x" * 300):
        for payload in (b"", b"y" * 100, b"z" * 300, b"w" * 70_000):
            for qos in (0, 1, 2):
                raw = mapping.encode(topic, payload, qos, publisher="dev-1")
                msg = Message()
                msg.decode(raw)
                assert msg.address == topic and bytes(msg.body) == payload
                assert msg.annotations["x-opt-mqtt-qos"] == qos
                assert msg.annotations["x-opt-exactmesh-publisher"] == "dev-1"
                d = mapping.decode(raw)
                assert (d.topic, d.payload, d.qos) == (topic, payload, qos)

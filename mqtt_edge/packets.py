"""Typed MQTT control packets, the same classes for MQTT 3.1.1 and 5.0.

One frozen dataclass per packet type (MQTT 5.0 section 2.1.2, MQTT 3.1.1 section 2.2.1).
What MQTT 5.0 adds defaults to "nothing": ``properties`` to ``EMPTY_PROPERTIES`` and reason
codes to 0x00 Success, so a 3.1.1 packet is the same object with those defaults.

Reason codes are always MQTT 5.0 values (``mqtt_edge.reason_codes.ReasonCode``), whatever the
connection's version: the codec maps a 3.1.1 CONNACK return code to and from them, and 3.1.1
SUBACK return codes are the same numbers.  They are kept as plain ``int``, which compare equal
to the ``ReasonCode`` members.

Strings are ``str`` (UTF-8 on the wire), binary data and payloads ``bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, NoReturn

__all__ = [
    "EMPTY_PROPERTIES",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Packet",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
]


class PacketType(IntEnum):
    """The control packet type in bits 7-4 of the fixed header (5.0 section 2.1.2, 3.1.1
    section 2.2.1).  0 is reserved; 15 is AUTH in 5.0 and reserved in 3.1.1."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# ---------------------------------------------------------------------------------------------
# Properties (MQTT 5.0 section 2.2.2)

# Attribute name -> value when the property is absent.  The order is the order of identifiers
# in section 2.2.2.2, and the order in which the encoder writes them.
_PROPERTY_DEFAULTS: dict[str, Any] = {
    "payload_format_indicator": None,  # 0x01 byte
    "message_expiry_interval": None,  # 0x02 four-byte integer
    "content_type": None,  # 0x03 UTF-8 string
    "response_topic": None,  # 0x08 UTF-8 string
    "correlation_data": None,  # 0x09 binary data
    "subscription_identifiers": (),  # 0x0B variable byte integer, repeatable in PUBLISH
    "session_expiry_interval": None,  # 0x11 four-byte integer
    "assigned_client_identifier": None,  # 0x12 UTF-8 string
    "server_keep_alive": None,  # 0x13 two-byte integer
    "authentication_method": None,  # 0x15 UTF-8 string
    "authentication_data": None,  # 0x16 binary data
    "request_problem_information": None,  # 0x17 byte
    "will_delay_interval": None,  # 0x18 four-byte integer
    "request_response_information": None,  # 0x19 byte
    "response_information": None,  # 0x1A UTF-8 string
    "server_reference": None,  # 0x1C UTF-8 string
    "reason_string": None,  # 0x1F UTF-8 string
    "receive_maximum": None,  # 0x21 two-byte integer
    "topic_alias_maximum": None,  # 0x22 two-byte integer
    "topic_alias": None,  # 0x23 two-byte integer
    "maximum_qos": None,  # 0x24 byte
    "retain_available": None,  # 0x25 byte
    "user_properties": (),  # 0x26 UTF-8 string pair, repeatable, order kept
    "maximum_packet_size": None,  # 0x27 four-byte integer
    "wildcard_subscription_available": None,  # 0x28 byte
    "subscription_identifier_available": None,  # 0x29 byte
    "shared_subscription_available": None,  # 0x2A byte
}
PROPERTY_NAMES: tuple[str, ...] = tuple(_PROPERTY_DEFAULTS)


class Properties:
    """The MQTT 5.0 properties of a packet or of a will message (section 2.2.2), immutable.

    Each property is an attribute named after it in snake case (``topic_alias``,
    ``message_expiry_interval``, ...); an absent property reads as ``None``.  The two
    properties that may appear more than once are tuples, empty when absent:
    ``user_properties`` (pairs of ``str``, in the order sent, section 3.3.2.3.7) and
    ``subscription_identifiers`` (``int``; several only in a PUBLISH from the server, section
    3.3.2.3.8).  Byte-valued flags such as ``retain_available`` are ``int`` 0 or 1, as sent.

    ``Properties(topic_alias=3, user_properties=(("k", "v"),))`` builds one; two compare equal
    when they hold the same properties.  The order of different properties on the wire carries
    no meaning and is not kept.  Which properties a packet type may carry is checked by the
    codec (``mqtt_edge.properties``), not here.
    """

    # One slot per property, set only when the property is present, and _present: the names
    # of the present ones in identifier order.
    __slots__ = (*PROPERTY_NAMES, "_present")

    # Typed views of the attributes for type checkers (values live in the slots).
    payload_format_indicator: int | None
    message_expiry_interval: int | None
    content_type: str | None
    response_topic: str | None
    correlation_data: bytes | None
    subscription_identifiers: tuple[int, ...]
    session_expiry_interval: int | None
    assigned_client_identifier: str | None
    server_keep_alive: int | None
    authentication_method: str | None
    authentication_data: bytes | None
    request_problem_information: int | None
    will_delay_interval: int | None
    request_response_information: int | None
    response_information: str | None
    server_reference: str | None
    reason_string: str | None
    receive_maximum: int | None
    topic_alias_maximum: int | None
    topic_alias: int | None
    maximum_qos: int | None
    retain_available: int | None
    user_properties: tuple[tuple[str, str], ...]
    maximum_packet_size: int | None
    wildcard_subscription_available: int | None
    subscription_identifier_available: int | None
    shared_subscription_available: int | None

    def __init__(self, **values: Any) -> None:
        present = {}
        for name, value in values.items():
            if name not in _ORDER:
                raise TypeError(f"Properties has no property named {name!r}")
            if value is None or value == ():
                continue  # absent, the same as not given
            if name == "user_properties":
                value = tuple((str(k), str(v)) for k, v in value)
            elif name == "subscription_identifiers":
                value = tuple(value)
            present[name] = value
        self._fill(present, False)

    def _fill(self, present: dict[str, Any], ordered: bool) -> None:
        for name, value in present.items():
            _SETTERS[name](self, value)
        names = tuple(present)
        if not ordered and len(names) > 1:
            names = tuple(sorted(names, key=_ORDER.__getitem__))
        _SET_PRESENT(self, names)

    @classmethod
    def _trusted(cls, present: dict[str, Any], ordered: bool) -> Properties:
        """Build from values already checked (name -> value, all present): for the codec.
        *ordered* says that *present* is already in identifier order."""
        obj = object.__new__(cls)
        obj._fill(present, ordered)
        return obj

    def __getattr__(self, name: str) -> Any:
        # Only called for a slot that was never set: the property is absent.
        try:
            return _PROPERTY_DEFAULTS[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Properties are immutable; use .replace({name}=...)")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Properties are immutable")

    def items(self) -> Iterator[tuple[str, Any]]:
        """The (name, value) pairs of the properties present, in identifier order."""
        for name in self._present:
            yield name, _GETTERS[name](self)

    def as_dict(self) -> dict[str, Any]:
        """The properties present as a dict of name -> value."""
        return dict(self.items())

    def replace(self, **changes: Any) -> Properties:
        """A copy with *changes* applied (a value of ``None`` or ``()`` removes a property)."""
        values = self.as_dict()
        values.update(changes)
        return Properties(**values)

    def __bool__(self) -> bool:
        return bool(self._present)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Properties):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in self.items())
        return f"Properties({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_properties, (self.as_dict(),))


def _rebuild_properties(values: dict[str, Any]) -> Properties:
    return Properties(**values)


# Slot accessors (the setters bypass the immutability guard, which only stops assignment by
# attribute), and each property's rank in identifier order.
_SETTERS = {name: Properties.__dict__[name].__set__ for name in PROPERTY_NAMES}
_GETTERS = {name: Properties.__dict__[name].__get__ for name in PROPERTY_NAMES}
_SET_PRESENT = Properties.__dict__["_present"].__set__
_ORDER = {name: i for i, name in enumerate(PROPERTY_NAMES)}

#: The properties of a packet that has none; decoded packets without properties share it.
EMPTY_PROPERTIES = Properties()


# ---------------------------------------------------------------------------------------------
# Packets


@dataclass(frozen=True, slots=True)
class Will:
    """The will message in a CONNECT (5.0 section 3.1.2.5 and 3.1.3.2-3.1.3.4; 3.1.1 section
    3.1.2.5 and 3.1.3.2-3.1.3.3).  ``properties`` are the will properties (5.0 only)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connect:
    """CONNECT (5.0 section 3.1, 3.1.1 section 3.1): the first packet a client sends.

    ``protocol_level`` is 4 for MQTT 3.1.1 and 5 for MQTT 5.0.  ``clean_start`` is "Clean
    Start" in 5.0 and "CleanSession" in 3.1.1 (bit 1 of the connect flags in both).
    """

    TYPE: ClassVar[PacketType] = PacketType.CONNECT
    client_id: str
    protocol_level: int = 5
    clean_start: bool = True
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class ConnAck:
    """CONNACK (5.0 section 3.2, 3.1.1 section 3.2).  ``reason_code`` is an MQTT 5.0 reason
    code; in 3.1.1 it is sent as the matching return code (``reason_codes.connack_return_code``)."""

    TYPE: ClassVar[PacketType] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Publish:
    """PUBLISH (5.0 section 3.3, 3.1.1 section 3.3).

    ``packet_id`` is ``None`` for QoS 0 and 1-65535 for QoS 1 and 2.  In 5.0 ``topic`` may be
    empty when ``properties.topic_alias`` is set (section 3.3.2.3.4).
    """

    TYPE: ClassVar[PacketType] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class PubAck:
    """PUBACK (5.0 section 3.4, 3.1.1 section 3.4): the answer to a QoS 1 PUBLISH."""

    TYPE: ClassVar[PacketType] = PacketType.PUBACK
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class PubRec:
    """PUBREC (5.0 section 3.5, 3.1.1 section 3.5): QoS 2 delivery part 1."""

    TYPE: ClassVar[PacketType] = PacketType.PUBREC
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class PubRel:
    """PUBREL (5.0 section 3.6, 3.1.1 section 3.6): QoS 2 delivery part 2."""

    TYPE: ClassVar[PacketType] = PacketType.PUBREL
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class PubComp:
    """PUBCOMP (5.0 section 3.7, 3.1.1 section 3.7): QoS 2 delivery part 3."""

    TYPE: ClassVar[PacketType] = PacketType.PUBCOMP
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter and its subscription options in a SUBSCRIBE (5.0 section 3.8.3.1,
    3.1.1 section 3.8.3).  ``qos`` is the maximum QoS; the other options are 5.0 only."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE (5.0 section 3.8, 3.1.1 section 3.8): one or more subscriptions."""

    TYPE: ClassVar[PacketType] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class SubAck:
    """SUBACK (5.0 section 3.9, 3.1.1 section 3.9): one reason code per subscription."""

    TYPE: ClassVar[PacketType] = PacketType.SUBACK
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (5.0 section 3.10, 3.1.1 section 3.10): one or more topic filters."""

    TYPE: ClassVar[PacketType] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class UnsubAck:
    """UNSUBACK (5.0 section 3.11, 3.1.1 section 3.11).  ``reason_codes`` has one code per
    topic filter in 5.0; a 3.1.1 UNSUBACK has none, so it decodes with ``()``."""

    TYPE: ClassVar[PacketType] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class PingReq:
    """PINGREQ (5.0 section 3.12, 3.1.1 section 3.12)."""

    TYPE: ClassVar[PacketType] = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class PingResp:
    """PINGRESP (5.0 section 3.13, 3.1.1 section 3.13)."""

    TYPE: ClassVar[PacketType] = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT (5.0 section 3.14, 3.1.1 section 3.14).  In 3.1.1 only the client sends it,
    and it has no reason code or properties."""

    TYPE: ClassVar[PacketType] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    """AUTH (5.0 section 3.15, MQTT 5.0 only): extended authentication exchange."""

    TYPE: ClassVar[PacketType] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = EMPTY_PROPERTIES


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)


# Fast constructors for the decoder's per-message path.  A frozen dataclass's __init__ sets
# each field through object.__setattr__, about twice the cost of calling the slot descriptors
# directly; these build the same objects (they compare equal, repr and hash the same).
_new = object.__new__


def _slot_setters(cls: type, *names: str) -> tuple[Any, ...]:
    return tuple(cls.__dict__[name].__set__ for name in names)


_PUB_SET = _slot_setters(
    Publish, "topic", "payload", "qos", "retain", "dup", "packet_id", "properties"
)


def make_publish(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    properties: Properties,
) -> Publish:
    """``Publish(...)`` with every field given, built without the frozen-init overhead."""
    s_topic, s_payload, s_qos, s_retain, s_dup, s_pid, s_props = _PUB_SET
    obj = _new(Publish)
    s_topic(obj, topic)
    s_payload(obj, payload)
    s_qos(obj, qos)
    s_retain(obj, retain)
    s_dup(obj, dup)
    s_pid(obj, packet_id)
    s_props(obj, properties)
    return obj


_ACK_SET = {
    cls: _slot_setters(cls, "packet_id", "reason_code", "properties")
    for cls in (PubAck, PubRec, PubRel, PubComp)
}


def make_ack(
    cls: type[PubAck | PubRec | PubRel | PubComp],
    packet_id: int,
    reason_code: int,
    properties: Properties,
) -> PubAck | PubRec | PubRel | PubComp:
    """``cls(packet_id, reason_code, properties)`` for the four publish acknowledgements,
    built without the frozen-init overhead."""
    s_pid, s_rc, s_props = _ACK_SET[cls]
    obj = _new(cls)
    s_pid(obj, packet_id)
    s_rc(obj, reason_code)
    s_props(obj, properties)
    return obj  # type: ignore[no-any-return]

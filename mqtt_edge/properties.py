"""The MQTT 5.0 property table (section 2.2.2.2, table 2-4) and the rules on property values.

Each property has an identifier (one byte on the wire: every identifier is below 128, so its
Variable Byte Integer encoding is one byte), a data type (section 1.5), the packet types that
may carry it, and whether it may appear more than once.  Only User Property (in every packet
that has properties) and Subscription Identifier (in PUBLISH only) may repeat; "It is a
Protocol Error to include <property> more than once" is stated for each of the others in its
own section.

Section 2.2.2.2: "A Control Packet which contains an Identifier which is not valid for its
packet type, or contains a value not of the specified data type, is a Malformed Packet."
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from .packets import PROPERTY_NAMES, PacketType

__all__ = [
    "ALLOWED",
    "BY_NAME",
    "PROPERTIES",
    "WILL",
    "PropertySpec",
    "PropertyType",
]

#: A pseudo packet type for the will properties in a CONNECT payload (section 3.1.3.2), which
#: have their own list of allowed properties.  Real packet types are 1-15.
WILL = 16


class PropertyType(IntEnum):
    """The data types of property values (section 1.5 and 2.2.2.2)."""

    BYTE = 1  # section 1.5.1 (bits), one byte
    TWO_BYTE_INT = 2  # section 1.5.2
    FOUR_BYTE_INT = 3  # section 1.5.3
    VAR_INT = 4  # section 1.5.5, Variable Byte Integer
    UTF8 = 5  # section 1.5.4, UTF-8 Encoded String
    BINARY = 6  # section 1.5.6, Binary Data
    UTF8_PAIR = 7  # section 1.5.7, UTF-8 String Pair


# A check on a decoded value: returns None if the value is allowed, else the reason it is not
# (a phrase completing "it is a Protocol Error because ...").
ValueCheck = Callable[[int], "str | None"]


def _zero_or_one(value: int) -> str | None:
    return None if value in (0, 1) else f"its value is {value}, and only 0 and 1 are defined"


def _non_zero(value: int) -> str | None:
    return None if value != 0 else "its value is 0, which is not allowed"


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One row of the property table."""

    identifier: int
    #: The attribute of ``mqtt_edge.packets.Properties`` that holds it.
    name: str
    #: The name in the specification, for messages.
    title: str
    type: PropertyType
    #: Packet types (``PacketType`` values, or ``WILL``) that may carry it.
    packets: frozenset[int]
    #: Whether it may appear more than once (section 2.2.2.2 and each property's section).
    repeatable: bool
    #: Extra rule on the value, checked on decoding; a failure is a Protocol Error (0x82).
    check: ValueCheck | None
    #: Section of the 5.0 specification where the property and its rules are described.
    section: str


_P = PacketType
_PUBLISH_AND_WILL = frozenset({_P.PUBLISH, WILL})
_ACKS = frozenset({_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP})

_TABLE = [
    # identifier, name, title, type, packets, repeatable, check, section
    (0x01, "payload_format_indicator", "Payload Format Indicator", PropertyType.BYTE,
     _PUBLISH_AND_WILL, False, _zero_or_one, "3.3.2.3.2"),
    (0x02, "message_expiry_interval", "Message Expiry Interval", PropertyType.FOUR_BYTE_INT,
     _PUBLISH_AND_WILL, False, None, "3.3.2.3.3"),
    (0x03, "content_type", "Content Type", PropertyType.UTF8,
     _PUBLISH_AND_WILL, False, None, "3.3.2.3.9"),
    (0x08, "response_topic", "Response Topic", PropertyType.UTF8,
     _PUBLISH_AND_WILL, False, None, "3.3.2.3.5"),
    (0x09, "correlation_data", "Correlation Data", PropertyType.BINARY,
     _PUBLISH_AND_WILL, False, None, "3.3.2.3.6"),
    # Repeatable in PUBLISH only; SUBSCRIBE may carry one (section 3.8.2.1.2).  The
    # PUBLISH/SUBSCRIBE difference is handled by the codec.
    (0x0B, "subscription_identifiers", "Subscription Identifier", PropertyType.VAR_INT,
     frozenset({_P.PUBLISH, _P.SUBSCRIBE}), True, _non_zero, "3.3.2.3.8"),
    (0x11, "session_expiry_interval", "Session Expiry Interval", PropertyType.FOUR_BYTE_INT,
     frozenset({_P.CONNECT, _P.CONNACK, _P.DISCONNECT}), False, None, "3.1.2.11.2"),
    (0x12, "assigned_client_identifier", "Assigned Client Identifier", PropertyType.UTF8,
     frozenset({_P.CONNACK}), False, None, "3.2.2.3.7"),
    (0x13, "server_keep_alive", "Server Keep Alive", PropertyType.TWO_BYTE_INT,
     frozenset({_P.CONNACK}), False, None, "3.2.2.3.14"),
    (0x15, "authentication_method", "Authentication Method", PropertyType.UTF8,
     frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH}), False, None, "3.1.2.11.9"),
    (0x16, "authentication_data", "Authentication Data", PropertyType.BINARY,
     frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH}), False, None, "3.1.2.11.10"),
    (0x17, "request_problem_information", "Request Problem Information", PropertyType.BYTE,
     frozenset({_P.CONNECT}), False, _zero_or_one, "3.1.2.11.7"),
    (0x18, "will_delay_interval", "Will Delay Interval", PropertyType.FOUR_BYTE_INT,
     frozenset({WILL}), False, None, "3.1.3.2.2"),
    (0x19, "request_response_information", "Request Response Information", PropertyType.BYTE,
     frozenset({_P.CONNECT}), False, _zero_or_one, "3.1.2.11.6"),
    (0x1A, "response_information", "Response Information", PropertyType.UTF8,
     frozenset({_P.CONNACK}), False, None, "3.2.2.3.15"),
    (0x1C, "server_reference", "Server Reference", PropertyType.UTF8,
     frozenset({_P.CONNACK, _P.DISCONNECT}), False, None, "3.2.2.3.16"),
    (0x1F, "reason_string", "Reason String", PropertyType.UTF8,
     frozenset({_P.CONNACK, _P.SUBACK, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH}) | _ACKS,
     False, None, "3.2.2.3.9"),
    (0x21, "receive_maximum", "Receive Maximum", PropertyType.TWO_BYTE_INT,
     frozenset({_P.CONNECT, _P.CONNACK}), False, _non_zero, "3.1.2.11.3"),
    (0x22, "topic_alias_maximum", "Topic Alias Maximum", PropertyType.TWO_BYTE_INT,
     frozenset({_P.CONNECT, _P.CONNACK}), False, None, "3.1.2.11.5"),
    # [MQTT-3.3.2-8]: a Topic Alias of 0 is not permitted.
    (0x23, "topic_alias", "Topic Alias", PropertyType.TWO_BYTE_INT,
     frozenset({_P.PUBLISH}), False, _non_zero, "3.3.2.3.4"),
    (0x24, "maximum_qos", "Maximum QoS", PropertyType.BYTE,
     frozenset({_P.CONNACK}), False, _zero_or_one, "3.2.2.3.4"),
    (0x25, "retain_available", "Retain Available", PropertyType.BYTE,
     frozenset({_P.CONNACK}), False, _zero_or_one, "3.2.2.3.5"),
    (0x26, "user_properties", "User Property", PropertyType.UTF8_PAIR,
     (frozenset(_P) | {WILL}) - {_P.PINGREQ, _P.PINGRESP}, True, None, "3.1.2.11.8"),
    (0x27, "maximum_packet_size", "Maximum Packet Size", PropertyType.FOUR_BYTE_INT,
     frozenset({_P.CONNECT, _P.CONNACK}), False, _non_zero, "3.1.2.11.4"),
    (0x28, "wildcard_subscription_available", "Wildcard Subscription Available",
     PropertyType.BYTE, frozenset({_P.CONNACK}), False, _zero_or_one, "3.2.2.3.11"),
    (0x29, "subscription_identifier_available", "Subscription Identifier Available",
     PropertyType.BYTE, frozenset({_P.CONNACK}), False, _zero_or_one, "3.2.2.3.12"),
    (0x2A, "shared_subscription_available", "Shared Subscription Available",
     PropertyType.BYTE, frozenset({_P.CONNACK}), False, _zero_or_one, "3.2.2.3.13"),
]  # fmt: skip

#: identifier -> PropertySpec, for every property of MQTT 5.0.
PROPERTIES: dict[int, PropertySpec] = {
    row[0]: PropertySpec(*row)  # type: ignore[arg-type]
    for row in _TABLE
}
#: ``Properties`` attribute name -> PropertySpec.
BY_NAME: dict[str, PropertySpec] = {spec.name: spec for spec in PROPERTIES.values()}
#: packet type (or ``WILL``) -> {identifier: PropertySpec} of the properties it may carry.
ALLOWED: dict[int, dict[int, PropertySpec]] = {
    kind: {ident: spec for ident, spec in PROPERTIES.items() if kind in spec.packets}
    for kind in [*PacketType, WILL]
}

assert set(BY_NAME) == set(PROPERTY_NAMES), "the table and Properties disagree"

"""MQTT 5.0 reason codes, the MQTT 3.1.1 CONNACK return codes, and the mapping between them.

MQTT 5.0 section 2.4 defines one table of reason codes; each packet type that carries one
(CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK, DISCONNECT, AUTH) may use only
the subset listed in its own section.  Values below 0x80 mean success, 0x80 and above failure
(section 2.4).

MQTT 3.1.1 has reason codes only in CONNACK (the "return code", section 3.2.2.3) and SUBACK
(section 3.9.3, whose values 0x00, 0x01, 0x02 and 0x80 are the same numbers as in 5.0).

The packets in ``mqtt_edge.packets`` always hold MQTT 5.0 reason codes, whatever the
connection's version; the codec maps them to 3.1.1 return codes when it encodes a 3.1.1
CONNACK (``connack_return_code``) and back when it decodes one (``connack_reason_code``).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AUTH_REASON_CODES",
    "CONNACK_REASON_CODES",
    "DISCONNECT_REASON_CODES",
    "PUBACK_REASON_CODES",
    "PUBREL_REASON_CODES",
    "SUBACK_REASON_CODES",
    "SUBACK_RETURN_CODES_311",
    "UNSUBACK_REASON_CODES",
    "ConnackReturnCode",
    "ReasonCode",
    "connack_reason_code",
    "connack_return_code",
    "reason_name",
]


class ReasonCode(IntEnum):
    """Every MQTT 5.0 reason code (section 2.4, table 2-6).

    Some values have several names depending on the packet (0x00 is Success, Normal
    disconnection and Granted QoS 0); the aliases are listed after the first name.
    """

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


def reason_name(code: int) -> str:
    """A readable name for *code*, such as ``'0x81 Malformed Packet'``."""
    try:
        name = ReasonCode(code).name.replace("_", " ").capitalize()
    except ValueError:
        name = "unknown reason code"
    return f"0x{code:02X} {name}"


_R = ReasonCode

# Section 3.2.2.2: CONNACK reason codes.
CONNACK_REASON_CODES = frozenset(
    {
        _R.SUCCESS, _R.UNSPECIFIED_ERROR, _R.MALFORMED_PACKET, _R.PROTOCOL_ERROR,
        _R.IMPLEMENTATION_SPECIFIC_ERROR, _R.UNSUPPORTED_PROTOCOL_VERSION,
        _R.CLIENT_IDENTIFIER_NOT_VALID, _R.BAD_USER_NAME_OR_PASSWORD, _R.NOT_AUTHORIZED,
        _R.SERVER_UNAVAILABLE, _R.SERVER_BUSY, _R.BANNED, _R.BAD_AUTHENTICATION_METHOD,
        _R.TOPIC_NAME_INVALID, _R.PACKET_TOO_LARGE, _R.QUOTA_EXCEEDED,
        _R.PAYLOAD_FORMAT_INVALID, _R.RETAIN_NOT_SUPPORTED, _R.QOS_NOT_SUPPORTED,
        _R.USE_ANOTHER_SERVER, _R.SERVER_MOVED, _R.CONNECTION_RATE_EXCEEDED,
    }
)  # fmt: skip

# Section 3.4.2.1 (PUBACK) and 3.5.2.1 (PUBREC): the same set.
PUBACK_REASON_CODES = frozenset(
    {
        _R.SUCCESS, _R.NO_MATCHING_SUBSCRIBERS, _R.UNSPECIFIED_ERROR,
        _R.IMPLEMENTATION_SPECIFIC_ERROR, _R.NOT_AUTHORIZED, _R.TOPIC_NAME_INVALID,
        _R.PACKET_IDENTIFIER_IN_USE, _R.QUOTA_EXCEEDED, _R.PAYLOAD_FORMAT_INVALID,
    }
)  # fmt: skip

# Section 3.6.2.1 (PUBREL) and 3.7.2.1 (PUBCOMP): the same set.
PUBREL_REASON_CODES = frozenset({_R.SUCCESS, _R.PACKET_IDENTIFIER_NOT_FOUND})

# Section 3.9.3: SUBACK reason codes.
SUBACK_REASON_CODES = frozenset(
    {
        _R.GRANTED_QOS_0, _R.GRANTED_QOS_1, _R.GRANTED_QOS_2, _R.UNSPECIFIED_ERROR,
        _R.IMPLEMENTATION_SPECIFIC_ERROR, _R.NOT_AUTHORIZED, _R.TOPIC_FILTER_INVALID,
        _R.PACKET_IDENTIFIER_IN_USE, _R.QUOTA_EXCEEDED, _R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
        _R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, _R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
    }
)  # fmt: skip

# MQTT 3.1.1 section 3.9.3: SUBACK return codes, 0x00-0x02 granted QoS, 0x80 failure.
SUBACK_RETURN_CODES_311 = frozenset({0x00, 0x01, 0x02, 0x80})

# Section 3.11.3: UNSUBACK reason codes.
UNSUBACK_REASON_CODES = frozenset(
    {
        _R.SUCCESS, _R.NO_SUBSCRIPTION_EXISTED, _R.UNSPECIFIED_ERROR,
        _R.IMPLEMENTATION_SPECIFIC_ERROR, _R.NOT_AUTHORIZED, _R.TOPIC_FILTER_INVALID,
        _R.PACKET_IDENTIFIER_IN_USE,
    }
)  # fmt: skip

# Section 3.14.2.1: DISCONNECT reason codes.
DISCONNECT_REASON_CODES = frozenset(
    {
        _R.NORMAL_DISCONNECTION, _R.DISCONNECT_WITH_WILL_MESSAGE, _R.UNSPECIFIED_ERROR,
        _R.MALFORMED_PACKET, _R.PROTOCOL_ERROR, _R.IMPLEMENTATION_SPECIFIC_ERROR,
        _R.NOT_AUTHORIZED, _R.SERVER_BUSY, _R.SERVER_SHUTTING_DOWN, _R.KEEP_ALIVE_TIMEOUT,
        _R.SESSION_TAKEN_OVER, _R.TOPIC_FILTER_INVALID, _R.TOPIC_NAME_INVALID,
        _R.RECEIVE_MAXIMUM_EXCEEDED, _R.TOPIC_ALIAS_INVALID, _R.PACKET_TOO_LARGE,
        _R.MESSAGE_RATE_TOO_HIGH, _R.QUOTA_EXCEEDED, _R.ADMINISTRATIVE_ACTION,
        _R.PAYLOAD_FORMAT_INVALID, _R.RETAIN_NOT_SUPPORTED, _R.QOS_NOT_SUPPORTED,
        _R.USE_ANOTHER_SERVER, _R.SERVER_MOVED, _R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
        _R.CONNECTION_RATE_EXCEEDED, _R.MAXIMUM_CONNECT_TIME,
        _R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, _R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
    }
)  # fmt: skip

# Section 3.15.2.1: AUTH reason codes.
AUTH_REASON_CODES = frozenset({_R.SUCCESS, _R.CONTINUE_AUTHENTICATION, _R.RE_AUTHENTICATE})


class ConnackReturnCode(IntEnum):
    """MQTT 3.1.1 CONNACK return codes (section 3.2.2.3, table 3.1)."""

    ACCEPTED = 0x00
    UNACCEPTABLE_PROTOCOL_VERSION = 0x01
    IDENTIFIER_REJECTED = 0x02
    SERVER_UNAVAILABLE = 0x03
    BAD_USER_NAME_OR_PASSWORD = 0x04
    NOT_AUTHORIZED = 0x05


# MQTT 5.0 reason code -> the 3.1.1 return code that means the same.  MQTT 5.0 section 3.2.2.2
# gives no mapping; this is the correspondence of the descriptions in both tables.
_TO_311 = {
    _R.SUCCESS: ConnackReturnCode.ACCEPTED,
    _R.UNSUPPORTED_PROTOCOL_VERSION: ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    _R.CLIENT_IDENTIFIER_NOT_VALID: ConnackReturnCode.IDENTIFIER_REJECTED,
    _R.SERVER_UNAVAILABLE: ConnackReturnCode.SERVER_UNAVAILABLE,
    _R.SERVER_BUSY: ConnackReturnCode.SERVER_UNAVAILABLE,
    _R.BAD_USER_NAME_OR_PASSWORD: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    _R.NOT_AUTHORIZED: ConnackReturnCode.NOT_AUTHORIZED,
    _R.BANNED: ConnackReturnCode.NOT_AUTHORIZED,
    _R.QUOTA_EXCEEDED: ConnackReturnCode.SERVER_UNAVAILABLE,
}
_FROM_311 = {
    ConnackReturnCode.ACCEPTED: _R.SUCCESS,
    ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION: _R.UNSUPPORTED_PROTOCOL_VERSION,
    ConnackReturnCode.IDENTIFIER_REJECTED: _R.CLIENT_IDENTIFIER_NOT_VALID,
    ConnackReturnCode.SERVER_UNAVAILABLE: _R.SERVER_UNAVAILABLE,
    ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD: _R.BAD_USER_NAME_OR_PASSWORD,
    ConnackReturnCode.NOT_AUTHORIZED: _R.NOT_AUTHORIZED,
}


def connack_return_code(reason_code: int) -> int | None:
    """The MQTT 3.1.1 CONNACK return code for an MQTT 5.0 CONNACK *reason_code*.

    ``None`` when 3.1.1 has no return code for it (such as 0x81 Malformed Packet): a 3.1.1
    server then closes the connection without a CONNACK (3.1.1 section 3.2.2.3, "If none of
    the return codes listed in Table 3.1 are deemed applicable, then the Server MUST close the
    Network Connection without sending a CONNACK" [MQTT-3.2.2-6]).
    """
    return _TO_311.get(reason_code)  # type: ignore[call-overload]


def connack_reason_code(return_code: int) -> int | None:
    """The MQTT 5.0 reason code for an MQTT 3.1.1 CONNACK *return_code*; ``None`` if the
    return code is not one of 3.1.1's six (0x00-0x05)."""
    return _FROM_311.get(return_code)  # type: ignore[call-overload]

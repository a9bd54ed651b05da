"""Fuzzing the MQTT decoder: no input, however broken, makes it do anything but return packets
or raise ProtocolError.

Valid streams (a CONNECT and client packets, or a CONNACK and server packets, in 3.1.1 and
5.0) get random byte mutations (flip a bit, overwrite, insert, delete, truncate) and are fed
in random chunkings.  For every input the decoder must:
- return packets or raise ProtocolError, and nothing else (no IndexError, no UnicodeError);
- hold no more than max_packet_size bytes while waiting for the rest of a packet;
- after an error: give a known reason code, a message saying where, a reply() that decodes
  as the CONNACK or DISCONNECT it should be, and refuse more input (DecoderClosedError);
- after success: give packets that encode and decode back to themselves.
Hangs would show as the pytest timeout; each receive() is linear in its input.

Two drivers: hypothesis (shrinks failures to a small example) and a seeded random loop that
gets through many more inputs per second.  EXACTMESH_LONG=1 runs both much longer.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import mqtt5
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqtt_edge.codec import Decoder, DecoderClosedError, ProtocolError, encode
from mqtt_edge.packets import ConnAck, Connect, Disconnect, Packet
from mqtt_edge.reason_codes import CONNACK_REASON_CODES, DISCONNECT_REASON_CODES
from tests.test_mqtt_codec import (
    CONNECTS,
    EVERY_PACKET_4,
    EVERY_PACKET_5,
    client_packets,
    connacks,
    connects,
    examples,
    server_packets,
)

LONG = bool(os.environ.get("EXACTMESH_LONG"))
MAX_SIZE = 300  # small, so that mutated lengths often hit the packet size limit

#: The reason codes the decoder may give (MQTT 5.0 section 2.4).
REASON_CODES = {0x81, 0x82, 0x84, 0x85, 0x8F, 0x90, 0x95, 0x99}


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    """Apply (kind, position, value) mutations; positions wrap around the data's length."""
    buf = bytearray(data)
    for kind, where, value in mutations:
        if not buf:
            buf.append(value & 0xFF)
            continue
        i = where % len(buf)
        if kind == "flip":
            buf[i] ^= 1 << (value % 8)
        elif kind == "set":
            buf[i] = value & 0xFF
        elif kind == "insert":
            buf.insert(i, value & 0xFF)
        elif kind == "delete":
            del buf[i]
        elif kind == "truncate":
            del buf[i:]
        elif kind == "duplicate":  # repeat a slice: packets twice, lengths out of step
            buf[i:i] = buf[i : i + 1 + value % 16]
    return bytes(buf)


def check_decoding(data: bytes, sizes: list[int], role: str, version: int) -> list[Packet]:
    """Feed *data* in chunks of *sizes*; check every rule of the module docstring."""
    if role == "server":
        decoder = Decoder(MAX_SIZE)
    else:
        decoder = Decoder(MAX_SIZE, role="client", version=version)
    packets: list[Packet] = []
    pos = 0
    i = 0
    try:
        while pos < len(data):
            size = sizes[i % len(sizes)] if sizes else len(data)
            packets += decoder.receive(data[pos : pos + size])
            assert decoder.buffered <= MAX_SIZE
            pos += size
            i += 1
    except ProtocolError as error:
        check_error(error, decoder, role)
        return packets
    check_accepted(packets, decoder, role, version)
    return packets


def check_error(error: ProtocolError, decoder: Decoder, role: str) -> None:
    assert error.reason_code in REASON_CODES, error
    assert " packet at byte " in error.message, error.message
    assert decoder.error is error
    with pytest.raises(DecoderClosedError):
        decoder.receive(b"\xc0\x00")
    if role != "server":
        return
    for connack_sent in (False, True):
        reply = error.reply(connack_sent=connack_sent, reason_string=True)
        if not reply:
            continue
        if error.version == 5:
            # A 5.0 reply is a CONNACK (before the CONNACK) or DISCONNECT with the reason code;
            # both our client-side decoder and mqtt5 read it.
            answer, used = mqtt5.read(memoryview(reply))
            code = error.reason_code
            if code not in (DISCONNECT_REASON_CODES if connack_sent else CONNACK_REASON_CODES):
                code = 0x82  # what reply() sends for a code the packet cannot carry
            assert used == len(reply) and int(answer.reason_code) == code
            client_side = Decoder(role="client", version=5)
            if connack_sent:
                (packet,) = client_side.receive(encode(ConnAck(), 5) + reply)[1:]
                assert isinstance(packet, Disconnect)
            else:
                (packet,) = client_side.receive(reply)
                assert isinstance(packet, ConnAck)
            assert packet.reason_code == code
        else:
            # 3.1.1: only a CONNACK refusing the connection, in the 3.1.1 layout.
            assert not connack_sent
            (packet,) = Decoder(role="client", version=4).receive(reply)
            assert isinstance(packet, ConnAck) and packet.reason_code == error.reason_code


def check_accepted(packets: list[Packet], decoder: Decoder, role: str, version: int) -> None:
    """What the decoder accepted, the encoder writes back and the decoder reads the same."""
    if not packets:
        return
    if role == "server":
        version = decoder.version or version
        again = Decoder()
    else:
        again = Decoder(role="client", version=version)
    data = b"".join(encode(p, version) for p in packets)
    assert again.receive(data) == packets


def _mutation() -> st.SearchStrategy[tuple[str, int, int]]:
    kinds = st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate"])
    return st.tuples(kinds, st.integers(0, 10_000), st.integers(0, 255))


@st.composite
def streams(draw: Any) -> tuple[bytes, str, int]:
    """A valid stream from one side of a connection, and which side decodes it."""
    version = draw(st.sampled_from([4, 5]))
    role = draw(st.sampled_from(["server", "client"]))
    if role == "server":
        first: Packet = draw(st.sampled_from([CONNECTS[version], draw(connects(version == 5))]))
        rest = st.lists(client_packets(version), max_size=4)
    else:
        first = draw(connacks(version == 5))
        rest = st.lists(server_packets(version), max_size=4)
    packets = [first, *draw(rest)]
    if role == "server" and first != CONNECTS[version]:
        packets = packets[:1]  # the packets after need CONNECTS[version]'s properties
    return b"".join(encode(p, version) for p in packets), role, version


@examples(500)
@given(
    stream=streams(),
    mutations=st.lists(_mutation(), min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 64), max_size=6),
)
def test_fuzz_mutated_streams(
    stream: tuple[bytes, str, int], mutations: list[tuple[str, int, int]], sizes: list[int]
) -> None:
    data, role, version = stream
    check_decoding(mutate(data, mutations), sizes, role, version)


@examples(150)
@given(
    version=st.sampled_from([4, 5]),
    garbage=st.binary(max_size=200),
    sizes=st.lists(st.integers(1, 64), max_size=6),
)
def test_fuzz_garbage_after_connect(version: int, garbage: bytes, sizes: list[int]) -> None:
    """Arbitrary bytes after a valid CONNECT, and arbitrary bytes as the first packet."""
    check_decoding(encode(CONNECTS[version], version) + garbage, sizes, "server", version)
    check_decoding(garbage, sizes, "server", version)
    check_decoding(garbage, sizes, "client", version)


@examples(60)
@given(stream=streams(), sizes=st.lists(st.integers(1, 64), min_size=1, max_size=6))
def test_fuzz_unmutated_streams_decode_whole(
    stream: tuple[bytes, str, int], sizes: list[int]
) -> None:
    """Control: the unmutated streams decode without error in any chunking (within the size
    limit the fuzz decoder uses)."""
    data, role, version = stream
    if role == "server":
        whole = Decoder().receive(data)
    else:
        whole = Decoder(role="client", version=version).receive(data)
    assert check_decoding(data, sizes, role, version) == whole or len(data) > MAX_SIZE


def _corpus() -> list[tuple[bytes, str, int]]:
    corpus = []
    for version, packets in ((5, EVERY_PACKET_5), (4, EVERY_PACKET_4)):
        client = [
            p for p in packets if not isinstance(p, Connect) and type(p).__name__ in _FROM_CLIENT
        ]
        server = [p for p in packets if type(p).__name__ in _FROM_SERVER and p is not packets[1]]
        connect = encode(CONNECTS[version], version)
        corpus.append((connect + b"".join(encode(p, version) for p in client), "server", version))
        connack = encode(packets[1], version)
        corpus.append((connack + b"".join(encode(p, version) for p in server), "client", version))
        corpus.append((encode(packets[0], version), "server", version))
    return corpus


_FROM_CLIENT = {"Publish", "PubAck", "PubRec", "PubRel", "PubComp", "Subscribe", "Unsubscribe",
                "PingReq", "Disconnect", "Auth"}  # fmt: skip
_FROM_SERVER = {"ConnAck", "Publish", "PubAck", "PubRec", "PubRel", "PubComp", "SubAck",
                "UnsubAck", "PingResp"}  # fmt: skip


def test_fuzz_seeded_random_mutations() -> None:
    """Many more mutated inputs than hypothesis gets through, from a fixed seed."""
    corpus = _corpus()
    for data, role, version in corpus:  # the corpus itself is valid
        assert check_decoding(data, [len(data)], role, version) or not data
    rng = random.Random(20240611)
    rounds = 500_000 if LONG else 60_000
    kinds = ["flip", "set", "insert", "delete", "truncate", "duplicate"]
    started = time.perf_counter()
    for _ in range(rounds):
        data, role, version = rng.choice(corpus)
        mutations = [
            (rng.choice(kinds), rng.randrange(10_000), rng.randrange(256))
            for _ in range(rng.randint(1, 3))
        ]
        sizes = [rng.randint(1, 48) for _ in range(rng.randint(0, 4))]
        mutated = mutate(data, mutations)
        before = time.perf_counter()
        check_decoding(mutated, sizes, role, version)
        assert time.perf_counter() - before < 2.0, "a single input took over 2 s"
    assert time.perf_counter() - started < (3_600 if LONG else 60)

"""Fuzzing a running router's MQTT edge: no malformed packet crashes the router or harms
another client (issue 5, "Bad input").

Valid client packets (hypothesis strategies of tests/test_mqtt_codec.py, encoded with
`mqtt_edge.codec.encode`) are mutated (bit flips, overwritten, inserted and deleted bytes,
truncation, a bad remaining length, bad fixed-header flags) and sent over TCP to a router
started with --mqtt, in MQTT 3.1.1 and 5.0: after a valid CONNECT (and its CONNACK), and as
the first packet (a mutated CONNECT). The expected answer is computed by running the project's
own `Decoder` over exactly the bytes the router gets:

- the decoder raises ProtocolError: the router sends `error.reply()` (5.0: a DISCONNECT with
  the decoder's reason code and reason string after CONNACK, a CONNACK with the error code for
  a bad CONNECT; 3.1.1: nothing, or CONNACK 0x01/0x02 for a bad protocol level / client id),
  closes the connection, and logs a line naming the connection and the problem;
- the decoder accepts the bytes (the mutation gave valid packets, or an incomplete one): the
  router answers with well-formed packets and closes the connection when the client closes
  its side.

Meanwhile a healthy paho client (MQTT 5) publishes at QoS 1 to itself on `$healthy/...` (no
offender's wildcard filter can match a `$` topic) after every case; every few dozen cases
the test waits until it got every PUBACK (success) and every message, in order. At the end
the router is alive, logged no traceback, and its RSS is bounded.

Bounds: 150 hypothesis examples + 300 seeded random mutations in `make test`; EXACTMESH_LONG=1
runs 25 times as many of each.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqtt_edge.codec import MQTT_5, Decoder, ProtocolError, encode
from mqtt_edge.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubComp,
    Publish,
)
from tests.harness import RouterProcess, free_port, wait_for
from tests.test_mqtt_codec import client_packets, connects
from tests.test_mqtt_edge import V5, Mq
from tests.test_mqtt_fuzz import mutate

LONG = bool(os.environ.get("EXACTMESH_LONG"))
SCALE = 25 if LONG else 1
HYPOTHESIS_EXAMPLES = 150 * SCALE
RANDOM_MUTATIONS = 300 * SCALE
MAX_PACKET = 1_048_576  # the router's default max-message-size, its MQTT packet size limit
IO_TIMEOUT = 5.0  # a bound on every read from an offender's socket
CHECK_EVERY = 50  # cases between two waits for the healthy client to catch up
HEALTHY_TOPIC = "$healthy/x"
RSS_LIMIT_KIB = 256 * 1024
RSS_GROWTH_KIB = 96 * 1024

#: Offender CONNECTs: a fresh client id each time (no offender takes another's session over),
#: clean start, no session expiry, so an offender's subscriptions end with its connection.
#: The 5.0 one names an authentication method, so that AUTH packets decode (as in the codec
#: fuzz test) and reach the router's session.
def offender_connect(version: int, n: int) -> Connect:
    if version == MQTT_5:
        return Connect(f"fuzz-{n}", 5, keep_alive=30,
                       properties=Properties(authentication_method="SCRAM-SHA-1"))
    return Connect(f"fuzz-{n}", 4, keep_alive=30)


class Healthy:
    """A paho 5.0 client publishing to itself at QoS 1 all through the fuzzing."""

    def __init__(self, port: int) -> None:
        self.c = Mq(port, "healthy", V5)
        self.c.subscribe("$healthy/#", 1)
        self.sent: list[bytes] = []

    def publish(self) -> None:
        payload = b"h%d" % len(self.sent)
        self.sent.append(payload)
        self.c.publish(HEALTHY_TOPIC, payload, 1)

    def check(self, timeout: float = 15.0) -> None:
        """Every message published so far was acknowledged with success and received once,
        in order; and the client was never disconnected."""
        n = len(self.sent)
        wait_for(lambda: len(self.c.acks) >= n and len(self.c.got) >= n, timeout,
                 f"the healthy client's {n} PUBACKs and messages "
                 f"(has {len(self.c.acks)} and {len(self.c.got)})")
        assert self.c.disconnected is None, f"healthy client disconnected: {self.c.disconnected}"
        failed = {mid: rc for mid, (rc, _) in self.c.acks.items() if rc.value >= 0x80}
        assert not failed, f"healthy client's messages failed: {failed}"
        assert self.c.payloads() == self.sent, "healthy client: lost, duplicated or reordered"


class Fuzz:
    """The router, the healthy client, and the bookkeeping of one module's run."""

    def __init__(self) -> None:
        self.port = free_port()
        self.router = RouterProcess("A", "--mqtt", f"127.0.0.1:{self.port}")
        self.rss_start = self.router.rss_kib()
        self.healthy = Healthy(self.port)
        self.cases = 0
        self.counts: dict[str, int] = {}

    def stop(self) -> None:
        try:
            self.healthy.c.stop()
        finally:
            self.router.stop()

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # ------------------------------------------------------------ one case

    def after_connect(self, version: int, mutated: bytes) -> None:
        """A valid CONNECT, its CONNACK, then the mutated bytes."""
        n = self.cases
        connect = encode(offender_connect(version, n), version)
        expect = Decoder(MAX_PACKET)
        assert len(expect.receive(connect)) == 1
        error, packets = _predict(expect, mutated)
        with _Offender(self.port) as off:
            off.sock.sendall(connect)
            connack = off.read_packets(version, 1)
            assert isinstance(connack[0], ConnAck) and connack[0].reason_code == 0, connack
            off.sock.sendall(mutated)
            if error is not None and not packets:
                # The decoder gave nothing before the error: the router's answer is exactly
                # the decoder's reply.
                off.expect_closed_with(error.reply(connack_sent=True, reason_string=True))
                self.expect_log(off.local, error)
                self.count(f"v{version} after CONNECT: decoder error 0x{error.reason_code:02X}")
            else:
                # Valid packets (maybe followed by a decoder error): the session answers them
                # first and may itself refuse one; what comes back must be well formed, and a
                # 5.0 DISCONNECT from the router must carry an error code.
                if error is None and expect.buffered:
                    # An incomplete packet: the router waits for the rest; nothing to check
                    # but that it lives on (the log and the healthy client are checked later).
                    self.count(f"v{version} after CONNECT: incomplete")
                else:
                    if error is None:
                        off.goodbye(version)  # so that the router closes the connection now
                    replies = _decode_replies(version, off.read_to_eof())
                    if version == MQTT_5:
                        for p in replies:
                            if isinstance(p, Disconnect):
                                assert p.reason_code >= 0x80, p
                    self.count(f"v{version} after CONNECT: "
                               f"{'valid packets then error' if error else 'accepted'}")
        self.finish_case()

    def first_packet(self, version: int, mutated: bytes) -> None:
        """The mutated bytes as the very first thing on a connection (a mutated CONNECT)."""
        expect = Decoder(MAX_PACKET)
        error, packets = _predict(expect, mutated)
        with _Offender(self.port) as off:
            off.sock.sendall(mutated)
            if error is not None and not packets:
                off.expect_closed_with(error.reply(connack_sent=False, reason_string=True))
                self.expect_log(off.local, error)
                self.count(f"v{version} first packet: decoder error 0x{error.reason_code:02X}")
            elif error is None and (expect.buffered or not packets):
                self.count(f"v{version} first packet: incomplete")
            else:
                level = packets[0].protocol_level  # type: ignore[attr-defined]
                if error is None:
                    off.goodbye(level)
                replies = _decode_replies(level, off.read_to_eof(), with_connack=False)
                assert replies and isinstance(replies[0], ConnAck), replies
                self.count(f"v{version} first packet: "
                           f"{'valid CONNECT then error' if error else 'accepted'}")
        self.finish_case()

    def expect_log(self, local: str, error: ProtocolError) -> None:
        """The router logged a line naming the connection and the decoder's problem."""
        who = f"mqtt connection {local}"
        text = str(error)
        log = self.router.log
        wait_for(lambda: any(who in line and text in line for line in log), IO_TIMEOUT,
                 f"a log line with {who!r} and {text!r}")

    def finish_case(self) -> None:
        self.cases += 1
        self.healthy.publish()
        if self.cases % CHECK_EVERY == 0:
            self.healthy.check()
            assert self.router.proc.poll() is None, "the router died"

    def final_check(self) -> None:
        self.healthy.check()
        assert self.router.proc.poll() is None, "the router died"
        unknown, known = _router_errors(self.router.log)
        assert not unknown, "the router failed on a connection:\n" + "\n".join(unknown[:3])
        for bug in known:
            self.count(f"known router bug: {bug}")
        print(f"\n{self.cases} cases so far; {sorted(self.counts.items())}")
        rss = self.router.rss_kib()
        assert rss < RSS_LIMIT_KIB and rss - self.rss_start < RSS_GROWTH_KIB, (
            f"router RSS {rss} KiB (started at {self.rss_start} KiB)")


#: Router failures the fuzzing finds that are reported and have their own xfail test below:
#: {a text of the log record: a name}. The fuzz tests tolerate these (they close only the
#: offending connection); any other failure logged by the router fails them.
KNOWN_BUGS: dict[str, str] = {}  # log text -> what it is, for router bugs not fixed yet


def _router_errors(log: list[str]) -> tuple[list[str], list[str]]:
    """The router's ERROR records (a record is a timestamped line and the lines after it) and
    its "internal error" closes, split into unknown ones and known bugs (by KNOWN_BUGS name)."""
    records: list[str] = []
    for line in log:
        if line[:2] == "20" or not records:
            records.append(line)
        else:
            records[-1] += line
    unknown: list[str] = []
    known: list[str] = []
    internal = 0
    for rec in records:
        if " ERROR " in rec.split("\n", 1)[0] or "Traceback" in rec:
            names = [name for text, name in KNOWN_BUGS.items() if text in rec]
            (known.append(names[0]) if names else unknown.append(rec))
        elif "internal error" in rec:
            internal += 1
    if internal > len(known) + len(unknown):
        unknown.append(f"{internal} connections closed for an internal error, "
                       f"{len(known) + len(unknown)} failures logged")
    return unknown, known


def _predict(decoder: Decoder, data: bytes) -> tuple[ProtocolError | None, list[Packet]]:
    """What the router's decoder makes of `data`: (error or None, packets before it)."""
    try:
        return None, decoder.receive(data)
    except ProtocolError as error:
        return error, error.packets


def _decode_replies(version: int, data: bytes, with_connack: bool = True) -> list[Packet]:
    """The router's bytes after its CONNACK must decode as server packets."""
    d = Decoder(role="client", version=version)
    if with_connack:
        d.receive(encode(ConnAck(), version))
    return d.receive(data)


class _Offender:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
        self.local = "{}:{}".format(*self.sock.getsockname()[:2])
        self.buf = b""

    def __enter__(self) -> _Offender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def goodbye(self, version: int) -> None:
        """A normal DISCONNECT (the router may have closed the connection already)."""
        with contextlib.suppress(OSError):
            self.sock.sendall(encode(Disconnect(), version))

    def read_packets(self, version: int, n: int, connack_seen: bool = False) -> list[Packet]:
        d = Decoder(role="client", version=version)
        if connack_seen:
            d.receive(encode(ConnAck(), version))
        got: list[Packet] = []
        deadline = time.monotonic() + IO_TIMEOUT
        while len(got) < n:
            assert time.monotonic() < deadline, "no CONNACK in time"
            chunk = self.sock.recv(65536)
            assert chunk, "the router closed the connection before its CONNACK"
            got += d.receive(chunk)
        return got

    def read_to_eof(self) -> bytes:
        """Everything until the router closes the connection (bounded: fails after
        IO_TIMEOUT)."""
        out = bytearray()
        deadline = time.monotonic() + IO_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the router did not close the connection (got {bytes(out)!r})"
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return bytes(out)
            except TimeoutError:
                raise AssertionError(
                    f"the router did not close the connection within {IO_TIMEOUT}s "
                    f"(got {bytes(out)!r})") from None
            if not chunk:
                return bytes(out)
            out += chunk

    def expect_closed_with(self, reply: bytes) -> None:
        got = self.read_to_eof()
        assert got == reply, f"router answered {got!r}, the decoder's reply is {reply!r}"


@pytest.fixture(scope="module")
def fuzz() -> Any:
    f = Fuzz()
    try:
        yield f
    finally:
        f.stop()


# ------------------------------------------------------------------------ mutations

_KINDS = ["flip", "set", "insert", "delete", "truncate", "duplicate", "length", "flags"]


def apply(data: bytes, kind: str, where: int, value: int) -> bytes:
    """One mutation; "length" rewrites the first packet's remaining length (to a wrong value,
    or a 5-byte / non-terminated varint), "flags" sets bad fixed-header flags."""
    if not data:
        return bytes([value])
    if kind == "length":
        end = 1
        while end < len(data) and end < 5 and data[end] & 0x80:
            end += 1
        choice = value % 4
        if choice == 0:  # a wrong length that still fits one byte
            new = bytes([value & 0x7F])
        elif choice == 1:  # five bytes: longer than the four MQTT allows
            new = b"\xff\xff\xff\xff\x7f"
        elif choice == 2:  # continuation bit set and then the data ends or goes on
            new = b"\x80"
        else:  # a non-minimal encoding of the right value, or a huge one
            new = b"\x80\x80\x80\x01" if value & 0x10 else b"\xff\xff\xff\x7f"
        return data[:1] + new + data[end + 1:]
    if kind == "flags":
        return bytes([(data[0] & 0xF0) | (value & 0x0F)]) + data[1:]
    return mutate(data, [(kind, where, value)])


def mutations() -> st.SearchStrategy[list[tuple[str, int, int]]]:
    one = st.tuples(st.sampled_from(_KINDS), st.integers(0, 10_000), st.integers(0, 255))
    return st.lists(one, min_size=1, max_size=3)


def mutated(data: bytes, changes: list[tuple[str, int, int]]) -> bytes:
    for kind, where, value in changes:
        data = apply(data, kind, where, value)
    return data


_SETTINGS = settings(max_examples=HYPOTHESIS_EXAMPLES, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------ the tests


def test_fuzz_router_hypothesis(fuzz: Fuzz) -> None:
    """Hypothesis-generated valid packets, mutated, after a valid CONNECT and as the first
    packet, in both versions; the healthy client is checked all along and at the end."""

    @_SETTINGS
    @given(data=st.data(), version=st.sampled_from([4, 5]), first=st.booleans(),
           changes=mutations())
    def case(data: Any, version: int, first: bool, changes: list[tuple[str, int, int]]) -> None:
        if first:
            packet: Packet = data.draw(connects(version == MQTT_5))
            fuzz.first_packet(version, mutated(encode(packet, version), changes))
        else:
            packets = data.draw(st.lists(client_packets(version), min_size=1, max_size=2))
            raw = b"".join(encode(p, version) for p in packets)
            fuzz.after_connect(version, mutated(raw, changes))

    case()
    fuzz.final_check()


def test_fuzz_router_seeded_mutations(fuzz: Fuzz) -> None:
    """Seeded random byte mutations of a fixed corpus of valid packets (every client packet
    type of both versions, and CONNECTs with and without will, credentials and properties)."""
    rng = random.Random(20261122)
    corpus = _corpus()
    started = time.monotonic()
    for _ in range(RANDOM_MUTATIONS):
        version, first, raw = rng.choice(corpus)
        changes = [(rng.choice(_KINDS), rng.randrange(10_000), rng.randrange(256))
                   for _ in range(rng.randint(1, 3))]
        bad = mutated(raw, changes)
        if first:
            fuzz.first_packet(version, bad)
        else:
            fuzz.after_connect(version, bad)
    fuzz.final_check()
    assert time.monotonic() - started < (3_600 if LONG else 120)
    # The run exercised the interesting paths (not only, say, "the router waited").
    errors = sum(n for k, n in fuzz.counts.items() if "decoder error" in k)
    assert errors > len(fuzz.counts) and errors > RANDOM_MUTATIONS // 4, fuzz.counts


def _corpus() -> list[tuple[int, bool, bytes]]:
    from tests.test_mqtt_codec import EVERY_PACKET_4, EVERY_PACKET_5

    client_kinds = {"Publish", "PubAck", "PubRec", "PubRel", "PubComp", "Subscribe",
                    "Unsubscribe", "PingReq", "Disconnect", "Auth"}
    corpus: list[tuple[int, bool, bytes]] = []
    for version, every in ((5, EVERY_PACKET_5), (4, EVERY_PACKET_4)):
        for p in every:
            name = type(p).__name__
            if name == "Connect":
                corpus.append((version, True, encode(p, version)))
            elif name in client_kinds:
                if isinstance(p, Publish) and p.topic.startswith("$healthy"):
                    continue
                corpus.append((version, False, encode(p, version)))
        corpus.append((version, True, encode(offender_connect(version, 0), version)))
    return corpus


def test_v311_pubrel_for_an_unknown_packet_id_is_answered_with_pubcomp(fuzz: Fuzz) -> None:
    """MQTT 3.1.1 section 4.3.3 / [MQTT-3.6.4-1]: the receiver of a PUBREL answers it with a
    PUBCOMP with the same packet id (3.1.1 PUBCOMP has no reason code); the connection stays
    up (a PINGREQ after it is answered)."""
    with _Offender(fuzz.port) as off:
        off.sock.sendall(encode(offender_connect(4, 10**6), 4))
        off.read_packets(4, 1)
        off.sock.sendall(b"\x62\x02\x00\x08" + encode(PingReq(), 4))
        got = off.read_packets(4, 2, connack_seen=True)
        assert got == [PubComp(8), PingResp()], got

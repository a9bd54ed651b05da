"""The router's security paths under bad input, at process level (docs/security.md): a real
router process, real sockets, real clients (paho, proton, Python's ssl, hand-built packets).

Each test sends something hostile or broken (garbage at the TLS ports, handshakes that stall,
expired and untrusted client certificates, 65,535-byte user names and passwords, thousands of
wrong passwords, a broken password file on SIGHUP) and checks two things: the bad input gets
the documented answer (refused, one log line naming the peer and the reason, never the
password), and meanwhile or afterwards a well-behaved client's stream flows exactly once,
counted by ids, from a router process that is still alive.

Not repeated here: the SASL exchange byte by byte (tests/test_sasl.py), the connection limits
(tests/test_connection_limits.py), the delay of one refused MQTT log-in
(tests/test_mqtt_security.py). Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from proton import ConnectionException, Message, Timeout
from proton.utils import BlockingConnection

from amqp_edge.sasl import AMQP_HEADER, AUTH, OUTCOME, SASL_HEADER, _described, _frame
from router.security.gate import HANDSHAKE_TIMEOUT
from router.security.policy import BAD_CREDENTIALS, FAILED_LOG_IN_DELAY
from tests.harness import RouterProcess, free_port, wait_for
from tests.test_amqp_tls import Tls, _files
from tests.test_sasl import _init
from tests.test_status import get

PASSWD = shutil.which("mosquitto_passwd")
needs_passwd = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                  "(Debian package mosquitto)")

# Tunables. The storm of failed log-ins takes about
# (STORM_MQTT + STORM_AMQP) / STORM_CONCURRENCY * FAILED_LOG_IN_DELAY seconds (25 s as set).
STREAM = 30  # messages in each well-behaved stream
STORM_MQTT = 2000  # MQTT CONNECTs with a wrong password or an unknown user
STORM_AMQP = 500  # AMQP SASL PLAIN log-ins with a wrong password or an unknown user
STORM_CONCURRENCY = 100  # bad log-ins in flight at once
STORM_ROUND = 10  # MQTT messages per round of the good stream during the storm
MAX_RSS_GROWTH_MB = 200  # what the storm may add to the router's resident memory
STALL_GRACE = 2.0  # seconds past HANDSHAKE_TIMEOUT a stalled handshake may stay open

PASSWORD = "wonder land"
BIG = 65535  # the longest string MQTT can carry (a two-byte length)
SECRET = b"hunter2-"  # in every oversized password: never in a log line
GUESS = "Tr0ub4dor"  # in every wrong password of the storm: never in a log line
CONNACK_BAD_CREDENTIALS = {4: 4, 5: 0x86}  # by protocol level: 3.1.1 return code, 5.0 reason


# ----------------------------------------------------------------------------- raw bytes


def _s16(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_connect(client_id: bytes, user: bytes | None, password: bytes | None,
                 level: int = 4) -> bytes:
    """A CONNECT packet, built by hand (3.1.1: level 4; 5.0: level 5, no properties), clean
    session, keep-alive 30 s."""
    flags = 0x02 | (0x80 if user is not None else 0) | (0x40 if password is not None else 0)
    body = _s16(b"MQTT") + bytes([level, flags]) + struct.pack(">H", 30)
    if level == 5:
        body += b"\x00"  # no properties
    body += _s16(client_id)
    if user is not None:
        body += _s16(user)
    if password is not None:
        body += _s16(password)
    return b"\x10" + _varint(len(body)) + body


def connack_code(data: bytes) -> int | None:
    """The return code (3.1.1) or reason code (5.0) of the CONNACK `data` starts with."""
    if len(data) < 4 or data[0] != 0x20:
        return None
    i, length, shift = 1, 0, 0
    while data[i] & 0x80:  # the remaining length (a 5.0 reason string can make it > 127)
        length |= (data[i] & 0x7F) << shift
        i, shift = i + 1, shift + 7
    return data[i + 2] if len(data) > i + 2 else None


def read_to_end(s: socket.socket, timeout: float, what: str) -> bytes:
    """Everything the router sends until it closes `s`; fails if it is still open after
    `timeout` seconds."""
    s.settimeout(timeout)
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"{what}: the router had not closed the connection after "
                             f"{timeout:g} s (got {got[:40]!r})") from None
    return got


def closed_by_router(s: socket.socket) -> bool:
    """Whether the router has closed `s` (a blocking socket without a timeout), reading
    whatever came before without waiting."""
    try:
        while True:
            if not s.recv(65536, socket.MSG_DONTWAIT):
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def client_hello() -> bytes:
    """A real TLS ClientHello (the first flight of Python's TLS client), as bytes."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()  # it waits for the ServerHello
    hello = outgoing.read()
    assert hello[0] == 0x16 and hello[5] == 0x01, hello[:6]  # handshake record, ClientHello
    return hello


def log_line(router: RouterProcess, *parts: str, timeout: float = 10.0) -> str:
    """The first line of the router's log with every one of `parts` (waiting for it)."""
    def find() -> str | None:
        return next((line for line in list(router.log) if all(p in line for p in parts)),
                    None)
    return wait_for(find, timeout, f"a log line with {parts}")


def count_lines(router: RouterProcess, *parts: str) -> int:
    return sum(all(p in line for p in parts) for line in list(router.log))


def assert_alive(router: RouterProcess) -> None:
    assert router.proc.poll() is None, f"the router exited: {''.join(router.log[-5:])}"


# ---------------------------------------------------------------------- good clients


class Paho:
    """A well-behaved paho 5.0 client (plain or TLS, with a user or a certificate) that
    records its PUBACKs and the payloads it receives."""

    def __init__(self, port: int, client_id: str, user: tuple[str, str] | None = None,
                 tls: tuple[str, tuple[str, str] | None] | None = None) -> None:
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=mqtt.MQTTv5)
        if tls is not None:
            ca, cert = tls
            self.c.tls_set(ca_certs=ca, certfile=cert[0] if cert else None,
                           keyfile=cert[1] if cert else None, cert_reqs=ssl.CERT_REQUIRED)
            self.c.tls_insecure_set(True)  # (the chain is checked; the name is 127.0.0.1)
        if user is not None:
            self.c.username_pw_set(*user)
        self.lock = threading.Lock()
        self.connack: Any = None
        self.acks: dict[int, int] = {}
        self.subacks: list[Any] = []
        self.got: list[bytes] = []
        self.c.on_connect = lambda c, u, f, rc, p=None: setattr(self, "connack", rc)
        self.c.on_publish = lambda c, u, mid, rc, p: self.acks.__setitem__(mid, rc.value)
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self.subacks.append(rcs)
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", port, 30)
        self.c.loop_start()
        wait_for(lambda: self.connack is not None, 10, f"CONNACK for {client_id}")
        assert self.connack.value == 0, (client_id, self.connack)

    def _on_message(self, c: Any, u: Any, m: Any) -> None:
        with self.lock:
            self.got.append(m.payload)

    def subscribe(self, topic_filter: str) -> None:
        self.c.subscribe(topic_filter, 1)
        wait_for(lambda: self.subacks, 10, f"SUBACK for {topic_filter}")
        assert self.subacks[-1][0].value == 1, self.subacks[-1]

    def mine(self, prefix: bytes) -> list[bytes]:
        with self.lock:
            return [p for p in self.got if p.startswith(prefix + b"-")]

    def assert_no_duplicates(self) -> None:
        with self.lock:
            twice = [p for p, n in Counter(self.got).items() if n > 1]
        assert not twice, f"{len(twice)} payloads received more than once, e.g. {twice[:5]}"

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def mqtt_stream(pub: Paho, sub: Paho, topic: str, prefix: bytes, n: int = STREAM) -> None:
    """`n` QoS 1 messages from `pub` to `sub`: each acknowledged and received exactly once,
    in order."""
    owed = [b"%s-%d" % (prefix, i) for i in range(n)]
    mids = [pub.c.publish(topic, payload, 1).mid for payload in owed]
    wait_for(lambda: all(m in pub.acks for m in mids), 15, f"{prefix!r}: {n} PUBACKs")
    assert [pub.acks[m] for m in mids] == [0] * n
    wait_for(lambda: len(sub.mine(prefix)) >= n, 15, f"{prefix!r}: {n} messages")
    assert sub.mine(prefix) == owed


def amqp_stream(url: str, prefix: str, n: int = STREAM, **login: Any) -> None:
    """`n` messages from a new AMQP connection to another (both logging in with `login`), on
    amqp/`prefix` (apart from the MQTT streams' good/#): each received exactly once, in
    order. The sender waits for each outcome."""
    receiving = BlockingConnection(url, timeout=10, container_id=f"{prefix}-rcv", **login)
    errors: list[BaseException] = []
    try:
        receiver = receiving.create_receiver(f"amqp/{prefix}", name=f"{prefix}-r", credit=n)

        def send() -> None:
            try:
                sending = BlockingConnection(url, timeout=10, container_id=f"{prefix}-snd",
                                             **login)
                sender = sending.create_sender(f"amqp/{prefix}")
                for i in range(n):
                    sender.send(Message(body=f"{prefix}-{i}"))
                sending.close()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        got = []
        for _ in range(n):
            got.append(receiver.receive(timeout=15).body)
            receiver.accept()
        # Until the sender has its last outcome, this connection must run to send the
        # accepts (BlockingConnection.wait alone returns only on its next event: seconds).
        deadline = time.monotonic() + 15
        while thread.is_alive():
            assert time.monotonic() < deadline, "the sender still waits for an outcome"
            with contextlib.suppress(Timeout):
                receiving.wait(lambda: not thread.is_alive(), timeout=0.05)
    finally:
        receiving.close()
    assert not errors, errors
    assert got == [f"{prefix}-{i}" for i in range(n)]


def plain_login(user: str = "alice", password: str = PASSWORD) -> dict[str, Any]:
    return {"user": user, "password": password, "allowed_mechs": "PLAIN",
            "allow_insecure_mechs": True}


def log_in(port: int, user: str, password: str, client_id: str) -> int | None:
    """The CONNACK code a hand-built 3.1.1 CONNECT gets (the connection is then dropped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(mqtt_connect(client_id.encode(), user.encode(), password.encode()))
        got = b""
        s.settimeout(FAILED_LOG_IN_DELAY + 10)
        while len(got) < 4 and (chunk := s.recv(64)):
            got += chunk
        return connack_code(got)


# ---------------------------------------------------------------------------- routers


def _tls_router(tmp: Path, client_cert: str) -> tuple[Tls, int]:
    """A router with --amqps and --mqtts (tests/test_amqp_tls.py `Tls`): (it, MQTTS port)."""
    mqtts = free_port()
    return Tls(tmp, client_cert=client_cert, extra=("--mqtts", f"127.0.0.1:{mqtts}")), mqtts


@pytest.fixture
def secured(tmp_path: Path) -> Any:
    """A router with a password file (alice) for MQTT and AMQP SASL PLAIN in clear, and the
    status endpoint."""
    pw = tmp_path / "passwd"
    subprocess.run([PASSWD, "-c", "-b", str(pw), "alice", PASSWORD], check=True,
                   capture_output=True)
    mqtt_port, http = free_port(), free_port()
    with RouterProcess("B", "--mqtt", f"127.0.0.1:{mqtt_port}", "--http", f"127.0.0.1:{http}",
                       "--password-file", str(pw), "--allow-plain-without-tls") as router:
        router.mqtt, router.http, router.passwd = mqtt_port, http, pw
        yield router


# ------------------------------------------------------------------------------ tests


def test_garbage_and_stalled_tls_handshakes_leave_tls_clients_served(tmp_path: Path) -> None:
    """At --amqps and --mqtts: random bytes, a ClientHello with its body scrambled, a
    truncated ClientHello (then EOF), a plain MQTT CONNECT and a plain AMQP header are each
    closed at once with one log line naming the peer; two handshakes that stall (half a
    ClientHello, then silence; nothing at all) hold up nobody and are closed after
    HANDSHAKE_TIMEOUT (10 s: a module constant, router/security/gate.py, no option shortens
    it). Meanwhile MQTT and AMQP streams flow exactly once over TLS."""
    tls, mqtts = _tls_router(tmp_path, "none")
    ports = {"amqps": tls.port, "mqtts": mqtts}
    hello = client_hello()
    garbage = {  # name: (bytes, then EOF)
        "random bytes": (random.Random(7).randbytes(4096), False),
        "a scrambled ClientHello": (hello[:9] + random.Random(8).randbytes(len(hello) - 9),
                                    False),
        "a truncated ClientHello": (hello[:len(hello) // 2], True),
        "five bytes of a ClientHello": (hello[:5], True),
        "a plain MQTT CONNECT": (mqtt_connect(b"plain", None, None), False),
        "a plain AMQP header": (AMQP_HEADER, False),
    }
    with tls.router as router:
        stalled: dict[int, socket.socket] = {}
        opened = time.monotonic()
        for port in ports.values():
            for first in (hello[:len(hello) // 2], b""):
                s = socket.create_connection(("127.0.0.1", port))
                s.settimeout(None)
                s.sendall(first)
                stalled[s.getsockname()[1]] = s
        try:
            for listener, port in ports.items():
                for name, (data, eof) in garbage.items():
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                        local = s.getsockname()[1]
                        s.sendall(data)
                        if eof:
                            s.shutdown(socket.SHUT_WR)
                        got = read_to_end(s, HANDSHAKE_TIMEOUT / 2, f"{name} at {listener}")
                    assert got == b"" or got[0] == 0x15, (name, got[:20])  # at most an alert
                    log_line(router, f"connection 127.0.0.1:{local}: TLS handshake failed")

            sub = Paho(mqtts, "tls-sub", tls=(tls.trust, None))
            sub.subscribe("good/#")
            pub = Paho(mqtts, "tls-pub", tls=(tls.trust, None))
            mqtt_stream(pub, sub, "good/mqtt", b"during")
            amqp_stream(tls.url, "during", ssl_domain=tls.domain())
            assert not any(closed_by_router(s) for s in stalled.values()), \
                "a stalled handshake was closed before its deadline"

            left = HANDSHAKE_TIMEOUT + STALL_GRACE - (time.monotonic() - opened)
            wait_for(lambda: all(closed_by_router(s) for s in stalled.values()), left,
                     f"the stalled handshakes closed within {HANDSHAKE_TIMEOUT:g} s")
        finally:
            for s in stalled.values():
                s.close()
        for local in stalled:
            log_line(router, f"connection 127.0.0.1:{local}: no TLS handshake within")
        mqtt_stream(pub, sub, "good/mqtt", b"after")
        sub.assert_no_duplicates()
        for c in (pub, sub):
            c.stop()
        assert_alive(router)


def test_expired_and_untrusted_client_certificates_are_refused_at_the_handshake(
        tmp_path: Path) -> None:
    """--tls-client-cert required: a client certificate past its not_after, and one signed by
    a CA the router does not trust, fail the handshake at --amqps and --mqtts (no protocol
    byte answered, one log line naming the peer and the reason), proton's client with the
    expired one too; clients with good certificates go on exactly once."""
    tls, mqtts = _tls_router(tmp_path, "required")
    now = datetime.datetime.now(datetime.UTC)
    expired = tls.client_ca.issue_cert("expired-device", not_before=now - datetime.timedelta(
        days=30), not_after=now - datetime.timedelta(days=1))
    expired_files = (str(tmp_path / "expired.crt"), str(tmp_path / "expired.key"))
    Path(expired_files[0]).write_bytes(b"".join(b.bytes() for b in expired.cert_chain_pems))
    expired.private_key_pem.write_to_path(expired_files[1])
    bad = {"expired": (expired_files, "certificate has expired"),
           "untrusted": (_files(tmp_path, tls.stranger, "stranger"),
                         "certificate verify failed")}
    good = _files(tmp_path, tls.client_ca, "device")
    first_bytes = {tls.port: SASL_HEADER, mqtts: mqtt_connect(b"dev", None, None)}
    with tls.router as router:
        sub = Paho(mqtts, "cert-sub", tls=(tls.trust, good))
        sub.subscribe("good/#")
        pub = Paho(mqtts, "cert-pub", tls=(tls.trust, good))
        for port in (tls.port, mqtts):
            for which, (cert, reason) in bad.items():
                context = ssl.create_default_context(cafile=tls.trust)
                context.check_hostname = False
                context.load_cert_chain(*cert)
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                    local = raw.getsockname()[1]
                    got = b""
                    try:  # (TLS 1.3: the client's side completes; the refusal comes after)
                        with context.wrap_socket(raw) as s:
                            s.sendall(first_bytes[port])
                            while chunk := s.recv(4096):
                                got += chunk
                    except (ssl.SSLError, ConnectionResetError):
                        pass
                assert got == b"", (which, port, got[:20])
                line = log_line(router, f"connection 127.0.0.1:{local}: TLS handshake failed")
                assert reason in line, line
        with pytest.raises((ConnectionException, Timeout)):
            tls.connect("expired", expired_files).create_sender("good/x")
        wait_for(lambda: count_lines(router, "certificate has expired") >= 3, 10,
                 "proton's refusal logged")
        mqtt_stream(pub, sub, "good/mqtt", b"cert")
        amqp_stream(tls.url, "cert", ssl_domain=tls.domain(good))
        sub.assert_no_duplicates()
        for c in (pub, sub):
            c.stop()
        assert_alive(router)


@needs_passwd
def test_oversized_user_names_and_passwords_are_refused_with_a_clear_reason(
        secured: Any) -> None:
    """MQTT CONNECTs (3.1.1 and 5.0) with a 65,535-byte password, for a 65,535-byte user
    name and for a known user, get the bad-credentials answer after FAILED_LOG_IN_DELAY;
    proton's SASL PLAIN with a 65,535-byte user name and password (a sasl-init over the
    router's 4 KiB) gets sasl-outcome auth. Each refusal is a log line naming the peer and
    the reason, and no line holds the password; a logged-in client's stream goes on."""
    router = secured
    sub = Paho(router.mqtt, "alice-sub", user=("alice", PASSWORD))
    sub.subscribe("good/#")
    pub = Paho(router.mqtt, "alice-pub", user=("alice", PASSWORD))
    password = (SECRET * (BIG // len(SECRET) + 1))[:BIG]
    for level in (4, 5):
        for user in (b"u" * BIG, b"alice"):
            with socket.create_connection(("127.0.0.1", router.mqtt), timeout=10) as s:
                local = s.getsockname()[1]
                started = time.monotonic()
                s.sendall(mqtt_connect(b"big", user, password, level))
                got = read_to_end(s, FAILED_LOG_IN_DELAY + 10, "an oversized CONNECT")
            assert time.monotonic() - started >= FAILED_LOG_IN_DELAY * 0.9
            assert connack_code(got) == CONNACK_BAD_CREDENTIALS[level], got[:20]
            assert SECRET not in got
            log_line(router, f"mqtt connection 127.0.0.1:{local} ", "refused, 0x86",
                     "unknown user or wrong password")
    for user in ("u" * BIG, "alice"):
        with pytest.raises(ConnectionException, match="unauthorized-access"):
            BlockingConnection(router.url, timeout=10, container_id="big",
                               **plain_login(user, password.decode()))
    sasl = re.compile(r"connection 127\.0\.0\.1:\d+: SASL log-in refused: a SASL frame of "
                      r"(\d+) bytes")

    def sizes() -> list[int]:
        return [int(m[1]) for line in list(router.log) if (m := sasl.search(line))]

    wait_for(lambda: len(sizes()) >= 2, 10, "both SASL refusals logged with the peer and "
             "the reason")
    assert min(sizes()) > BIG, sizes()  # the frame's size, as the client sent it
    assert not any(SECRET.decode() in line for line in list(router.log)), \
        "a password in the log"
    mqtt_stream(pub, sub, "good/mqtt", b"big")
    amqp_stream(router.url, "big", **plain_login())
    _, health = get(router.http, "/health")
    assert health["refusals"][BAD_CREDENTIALS] >= 4, health["refusals"]
    assert health["refusals"]["bad-sasl"] >= 2, health["refusals"]  # the oversized frames
    assert all("at most 4096 bytes" in line for line in router.log if sasl.search(line))
    sub.assert_no_duplicates()
    for c in (pub, sub):
        c.stop()
    assert_alive(router)


@needs_passwd
def test_a_refusal_log_line_stays_short_whatever_the_user_name(secured: Any) -> None:
    router = secured
    with socket.create_connection(("127.0.0.1", router.mqtt), timeout=10) as s:
        local = s.getsockname()[1]
        s.sendall(mqtt_connect(b"long-name", b"u" * BIG, b"a guess"))
        got = read_to_end(s, FAILED_LOG_IN_DELAY + 10, "a CONNECT with a long user name")
    assert connack_code(got) == 4
    line = log_line(router, f"mqtt connection 127.0.0.1:{local} ", "refused, 0x86")
    assert len(line) < 1024, f"a refusal's log line of {len(line)} characters"


@needs_passwd
def test_thousands_of_failed_log_ins_leave_good_clients_served(secured: Any) -> None:
    """STORM_MQTT hand-built MQTT 3.1.1 CONNECTs and STORM_AMQP raw SASL PLAIN log-ins, with
    wrong passwords for alice or unknown users, STORM_CONCURRENCY in flight at once: each is
    refused (CONNACK 4 / sasl-outcome auth), after FAILED_LOG_IN_DELAY. Meanwhile alice
    logs in afresh and her MQTT stream (rounds of STORM_ROUND) and AMQP streams flow exactly
    once; afterwards /health counts every refusal, the log holds none of the passwords, and
    the router's memory has not grown by more than MAX_RSS_GROWTH_MB."""
    router = secured
    sub = Paho(router.mqtt, "alice-sub", user=("alice", PASSWORD))
    sub.subscribe("good/#")
    pub = Paho(router.mqtt, "alice-pub", user=("alice", PASSWORD))
    mqtt_stream(pub, sub, "good/mqtt", b"warm-up")
    amqp_stream(router.url, "warm-up", **plain_login())
    rss_before = router.rss_kib()
    auth_outcome = _frame(_described(OUTCOME, [AUTH]))
    host, port = router.url.split(":")

    def attempt(kind: str, i: int) -> tuple[str, float]:
        """One bad log-in: how it was answered, and after how long."""
        user = "alice" if i % 2 else f"mallory{i}"
        guess = f"{GUESS}-{i}"
        started = time.monotonic()
        try:
            if kind == "mqtt":
                with socket.create_connection(("127.0.0.1", router.mqtt), timeout=10) as s:
                    s.sendall(mqtt_connect(f"guess{i}".encode(), user.encode(), guess.encode()))
                    got = read_to_end(s, FAILED_LOG_IN_DELAY + 15, "a bad CONNECT")
                answer = f"CONNACK {connack_code(got)}" if len(got) == 4 else repr(got[:20])
            else:
                with socket.create_connection((host, int(port)), timeout=10) as s:
                    s.sendall(SASL_HEADER + _init("PLAIN", f"\0{user}\0{guess}".encode()))
                    got = read_to_end(s, FAILED_LOG_IN_DELAY + 15, "a bad SASL log-in")
                ok = got.startswith(SASL_HEADER) and got.endswith(auth_outcome)
                answer = "sasl-outcome auth" if ok else repr(got[-20:])
        except Exception as exc:
            answer = f"{type(exc).__name__}: {exc}"
        return f"{kind}: {answer}", time.monotonic() - started

    plan = [("mqtt", i) for i in range(STORM_MQTT)] + [("amqp", i) for i in range(STORM_AMQP)]
    random.Random(3).shuffle(plan)  # both kinds all along the storm
    rounds_during = 0
    with ThreadPoolExecutor(STORM_CONCURRENCY) as pool:
        futures = [pool.submit(attempt, kind, i) for kind, i in plan]
        while not all(f.done() for f in futures):
            r = rounds_during
            assert log_in(router.mqtt, "alice", PASSWORD, f"alice-{r}") == 0
            mqtt_stream(pub, sub, "good/mqtt", b"storm%d" % r, STORM_ROUND)
            if r % 3 == 0:
                amqp_stream(router.url, f"storm{r}", STORM_ROUND, **plain_login())
            rounds_during += 1
        wait_all(futures, timeout=60)
    outcomes = Counter(f.result()[0] for f in futures)
    assert outcomes == {"mqtt: CONNACK 4": STORM_MQTT, "amqp: sasl-outcome auth": STORM_AMQP}
    assert min(f.result()[1] for f in futures) >= FAILED_LOG_IN_DELAY * 0.9
    assert rounds_during >= 3, f"only {rounds_during} rounds of the good stream in the storm"

    _, health = get(router.http, "/health")
    assert health["refusals"][BAD_CREDENTIALS] >= STORM_MQTT + STORM_AMQP, health["refusals"]
    wait_for(lambda: count_lines(router, "refused, 0x86") >= STORM_MQTT
             and count_lines(router, "SASL log-in refused") >= STORM_AMQP, 10,
             "a log line per refusal")
    assert not any(GUESS in line for line in list(router.log)), "a password in the log"
    grown_mb = (router.rss_kib() - rss_before) / 1024
    assert grown_mb < MAX_RSS_GROWTH_MB, f"the router's memory grew by {grown_mb:.0f} MB"
    mqtt_stream(pub, sub, "good/mqtt", b"after")
    amqp_stream(router.url, "after", **plain_login())
    sub.assert_no_duplicates()
    for c in (pub, sub):
        c.stop()
    assert_alive(router)


@needs_passwd
def test_sighup_with_a_broken_password_file_keeps_the_users_in_force(secured: Any) -> None:
    """SIGHUP with a password file that does not parse (a line without a colon, here a user
    and a plain-text password; a line that is not UTF-8; no file at all) is refused with a
    log line naming the file and the line, quoting neither the line nor a hash: alice still
    logs in (MQTT and AMQP) and her stream flows, bob (added in the broken file) does not.
    Once the file is mended, SIGHUP lets bob in."""
    router = secured
    pw: Path = router.passwd
    sub = Paho(router.mqtt, "alice-sub", user=("alice", PASSWORD))
    sub.subscribe("good/#")
    subprocess.run([PASSWD, "-b", str(pw), "bob", "builder"], check=True, capture_output=True)
    mended = pw.read_bytes()  # alice on line 1, bob on line 2
    moved = pw.with_name("passwd.moved")
    breakages = {
        "a line without a colon": (b"carol s3cret-in-clear\n", "line 3", "no ':'"),
        "a line that is not UTF-8": (b"carol:\xff\xfe s3cret-in-clear\n", "line 3",
                                     "not valid UTF-8"),
        "no file": (None, "", "cannot read the password file"),
    }
    for n, (name, (extra, where, problem)) in enumerate(breakages.items(), start=1):
        if extra is None:
            pw.rename(moved)
        else:
            pw.write_bytes(mended + extra)
        router.proc.send_signal(signal.SIGHUP)
        wait_for(lambda n=n: count_lines(router, "SIGHUP", "rules in force stay") >= n, 10,
                 f"the refusal of {name}")
        line = [x for x in list(router.log) if "SIGHUP" in x and "rules in force stay" in x][-1]
        assert f"{pw} {where}".strip() in line and problem in line, (name, line)
        assert "s3cret" not in line and "$7$" not in line, line
        assert log_in(router.mqtt, "alice", PASSWORD, f"alice-{n}") == 0, name
        assert log_in(router.mqtt, "bob", "builder", f"bob-{n}") == 4, name
        pub = Paho(router.mqtt, f"alice-pub-{n}", user=("alice", PASSWORD))
        mqtt_stream(pub, sub, "good/mqtt", b"broken%d" % n)
        pub.stop()
        amqp_stream(router.url, f"broken{n}", **plain_login())
        if extra is None:
            moved.rename(pw)
    pw.write_bytes(mended)
    router.proc.send_signal(signal.SIGHUP)
    log_line(router, "SIGHUP: password and ACL files read again")
    assert log_in(router.mqtt, "bob", "builder", "bob-mended") == 0
    assert log_in(router.mqtt, "alice", PASSWORD, "alice-mended") == 0
    sub.assert_no_duplicates()
    sub.stop()
    assert not any("s3cret" in line for line in list(router.log)), "a password in the log"
    assert_alive(router)

"""The router's SASL server (amqp_edge/sasl.py), sans-IO, and against bad input over a real
socket: garbage and oversized frames are refused with sasl-outcome `auth` and a log line, and
the router goes on serving."""

from __future__ import annotations

import socket
import struct

from amqp_edge.sasl import AMQP_HEADER, INIT, SASL_HEADER, SaslServer, _described, _frame
from tests.harness import RouterProcess, wait_for


def _init(mechanism: str, response: bytes) -> bytes:
    from proton import Data, symbol

    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(INIT)
    data.put_list()
    data.enter()
    data.put_symbol(symbol(mechanism))
    data.put_binary(response)
    data.exit()
    data.exit()
    return _frame(data.encode())


def _server(users: dict[str, bytes]) -> SaslServer:
    def check(user: str | None, password: bytes | None) -> str | None:
        if user is None:
            return "anonymous"
        return None if users.get(user) == password else "wrong"

    return SaslServer(["PLAIN"], check)


def test_plain_log_in_byte_by_byte_and_what_follows_goes_on() -> None:
    s = _server({"alice": b"pw"})
    stream = SASL_HEADER + _init("PLAIN", b"\x00alice\x00pw") + AMQP_HEADER + b"open..."
    for i in range(len(stream)):  # any split of the bytes gives the same result
        s.receive(stream[i:i + 1])
    assert s.done and s.user == "alice" and s.refusal is None
    assert s.rest == AMQP_HEADER + b"open..."
    assert bytes(s.out).startswith(SASL_HEADER) and bytes(s.out).endswith(
        _frame(_described(0x44, [0])))


def test_external_is_the_certificate_s_user_and_no_other() -> None:
    """EXTERNAL (RFC 4422 appendix A): the user is the verified certificate's name; an
    empty response or one repeating that name logs in, one naming another user is refused."""
    seen: list[tuple[str | None, bytes | None]] = []

    def check(user: str | None, password: bytes | None) -> str | None:
        seen.append((user, password))
        return None

    for response, user, why in ((b"", "sensor-7", None), (b"sensor-7", "sensor-7", None),
                                (b"alice", None, "EXTERNAL asks to act as 'alice'")):
        s = SaslServer(["EXTERNAL", "PLAIN"], check, identity="sensor-7")
        s.receive(SASL_HEADER + _init("EXTERNAL", response))
        assert s.done and s.user == user and (why is None) is (s.refusal is None), s.refusal
        assert why is None or why in (s.refusal or "")
    assert seen == [("sensor-7", None)] * 2  # a certificate stands for the password


def test_refusals() -> None:
    for stream, why in (
            (SASL_HEADER + _init("PLAIN", b"\x00alice\x00nope"), "wrong"),
            (SASL_HEADER + _init("EXTERNAL", b""), "not offered"),
            (SASL_HEADER + _init("PLAIN", b"no nul bytes"), "malformed"),
            (SASL_HEADER + struct.pack(">IBBH", 1 << 20, 2, 1, 0), "not a sasl-init"),
            (SASL_HEADER + struct.pack(">IBBH", 12, 2, 1, 0) + b"\xff\xff\xff\xff", "malformed"),
            (b"HTTP/1.1", "not an AMQP protocol header")):
        s = _server({"alice": b"pw"})
        s.receive(stream)
        assert s.done and s.user is None and why in (s.refusal or ""), (stream, s.refusal)


def test_garbage_at_the_sasl_layer_leaves_the_router_serving(tmp_path) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite public/#\n")
    with RouterProcess("S", "--acl-file", str(acl), "--allow-anonymous") as router:
        host, port = router.url.split(":")
        for junk in (SASL_HEADER + b"\x00\x00\x00\x09\x02\x01\x00\x00\xff",
                     SASL_HEADER + struct.pack(">IBBH", 1 << 30, 2, 1, 0),
                     SASL_HEADER + _init("PLAIN", b"\x00" + b"u" * 3000 + b"\x00p")):
            with socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(junk)
                s.settimeout(5)
                got = b""
                while chunk := s.recv(4096):
                    got += chunk
                assert got.startswith(SASL_HEADER)
        wait_for(lambda: sum("SASL log-in refused" in line for line in router.log) >= 3, 10,
                 "each refusal logged")
        from proton.utils import BlockingConnection

        conn = BlockingConnection(router.url, timeout=10, container_id="after")
        conn.create_sender("public/t")
        conn.close()

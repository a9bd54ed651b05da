"""MQTT over TLS (`--mqtts`, docs/security.md) with paho (`tls_set`) and mosquitto_pub /
mosquitto_sub (`--cafile`, `--cert`, `--key`): messages flow exactly once between the TLS and
the plain listener (one session table); a plain client at the TLS port and a missing client
certificate are refused with one log line each while the others go on."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.harness import RouterProcess, free_port, wait_for
from tests.test_amqp_tls import _ca_file, _files
from tests.test_mqtt_edge import V5, Mq

MOSQUITTO_PUB = shutil.which("mosquitto_pub")


class TlsMq(Mq):
    """The paho wrapper of the MQTT tests, connecting over TLS."""

    def __init__(self, port: int, client_id: str, ca: str,
                 cert: tuple[str, str] | None = None,
                 user: tuple[str, str] | None = None) -> None:
        self._tls = (ca, cert, user)
        super().__init__(port, client_id, V5)

    def _configure(self, c: Any) -> None:  # called by Mq before connect
        ca, cert, user = self._tls
        c.tls_set(ca_certs=ca, certfile=cert[0] if cert else None,
                  keyfile=cert[1] if cert else None, cert_reqs=ssl.CERT_REQUIRED)
        c.tls_insecure_set(True)  # (the chain is checked; the name is 127.0.0.1)
        if user is not None:
            c.username_pw_set(*user)


def _router(tmp: Path, client_cert: str = "none") -> tuple[Any, dict[str, Any]]:
    server_ca, client_ca = trustme.CA(), trustme.CA()
    cert, key = _files(tmp, server_ca, "router")
    ports = {"mqtt": free_port(), "mqtts": free_port()}
    router = RouterProcess(
        "M", "--mqtt", f"127.0.0.1:{ports['mqtt']}", "--mqtts", f"127.0.0.1:{ports['mqtts']}",
        "--tls-cert", cert, "--tls-key", key, "--tls-ca", _ca_file(tmp, client_ca, "clients"),
        "--tls-client-cert", client_cert)
    info = {"ports": ports, "trust": _ca_file(tmp, server_ca, "server"), "client_ca": client_ca}
    return router, info


def test_tls_and_plain_clients_share_the_mesh_exactly_once(tmp_path: Path) -> None:
    router, info = _router(tmp_path)
    with router:
        ports = info["ports"]
        with socket.create_connection(("127.0.0.1", ports["mqtts"]), timeout=5) as s:
            s.sendall(b"\x10\x0c\x00\x04MQTT\x05\x02\x00\x3c\x00")  # plain CONNECT, TLS port
            s.settimeout(5)
            with pytest.raises(OSError):
                while s.recv(1024):
                    pass
                raise ConnectionError("closed")
        wait_for(lambda: any("TLS handshake failed" in line for line in router.log), 10,
                 "the failed handshake's log line")
        plain_sub = Mq(ports["mqtt"], "plain-sub", V5)
        plain_sub.subscribe("tls/#", 2)
        tls_sub = TlsMq(ports["mqtts"], "tls-sub", info["trust"])
        tls_sub.subscribe("tls/#", 2)
        pub = TlsMq(ports["mqtts"], "tls-pub", info["trust"])
        n = 200
        for i in range(n):
            pub.publish("tls/t", b"%d" % i, 2)
        wait_for(lambda: len(pub.acks) == n, 20, "every PUBCOMP over TLS")
        owed = [b"%d" % i for i in range(n)]
        for sub in (plain_sub, tls_sub):
            wait_for(lambda sub=sub: len(sub.got) >= n, 20, "every message")
            assert sub.payloads() == owed
        for c in (plain_sub, tls_sub, pub):
            c.stop()


@pytest.mark.skipif(MOSQUITTO_PUB is None, reason="mosquitto_pub is not installed")
def test_mosquitto_clients_with_a_client_certificate(tmp_path: Path) -> None:
    router, info = _router(tmp_path, client_cert="required")
    with router:
        port = info["ports"]["mqtts"]
        cert, key = _files(tmp_path, info["client_ca"], "device")
        sub = TlsMq(port, "cert-sub", info["trust"], (cert, key))
        sub.subscribe("dev/#", 1)
        base = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "--cafile", info["trust"],
                "--insecure", "-t", "dev/t", "-q", "1"]
        ok = subprocess.run([*base, "--cert", cert, "--key", key, "-m", "signed"],
                            capture_output=True, text=True, timeout=20)
        assert ok.returncode == 0, ok.stderr
        wait_for(lambda: sub.payloads() == [b"signed"], 10, "the message")
        refused = subprocess.run([*base, "-m", "no certificate"], capture_output=True,
                                 text=True, timeout=20)
        assert refused.returncode != 0
        wait_for(lambda: any("TLS handshake failed" in line for line in router.log), 10,
                 "the refusal's log line")
        again = subprocess.run([*base, "--cert", cert, "--key", key, "-m", "still on"],
                               capture_output=True, text=True, timeout=20)
        assert again.returncode == 0, again.stderr
        wait_for(lambda: sub.payloads() == [b"signed", b"still on"], 10, "the next message")
        sub.stop()

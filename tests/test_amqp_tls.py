"""AMQP over TLS (`--amqps`, docs/security.md) with proton's own client (SSLDomain): messages
flow exactly once over TLS; a plain client at the TLS port, garbage, a missing or untrusted
client certificate are refused with one log line each while the other clients go on; SIGHUP
loads a new certificate for new connections. Certificates come from trustme (throwaway CAs)."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import trustme
from proton import ConnectionException, Message, SSLDomain, Timeout
from proton.utils import BlockingConnection

from tests.harness import EXACTMESH, RouterProcess, free_port, wait_for


def _files(directory: Path, ca: trustme.CA, name: str) -> tuple[str, str]:
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def _ca_file(directory: Path, ca: trustme.CA, name: str) -> str:
    path = directory / f"{name}-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def _domain(ca_file: str, cert: tuple[str, str] | None = None) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(ca_file)
    # (the chain, not the name: proton matches DNS names only, and the router is 127.0.0.1)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    if cert is not None:
        domain.set_credentials(cert[0], cert[1], None)
    return domain


class Tls:
    def __init__(self, tmp: Path, client_cert: str = "none", extra: tuple[str, ...] = ()
                 ) -> None:
        self.tmp = tmp
        self.server_ca, self.client_ca, self.stranger = trustme.CA(), trustme.CA(), trustme.CA()
        self.cert, self.key = _files(tmp, self.server_ca, "router")
        self.port = free_port()
        self.url = f"amqps://127.0.0.1:{self.port}"
        self.trust = _ca_file(tmp, self.server_ca, "server")
        self.router = RouterProcess(
            "T", "--amqps", f"127.0.0.1:{self.port}", "--tls-cert", self.cert, "--tls-key",
            self.key, "--tls-ca", _ca_file(tmp, self.client_ca, "clients"),
            "--tls-client-cert", client_cert, *extra)

    def domain(self, cert: tuple[str, str] | None = None) -> SSLDomain:
        return _domain(self.trust, cert)

    def connect(self, container: str, cert: tuple[str, str] | None = None) -> Any:
        return BlockingConnection(self.url, timeout=10, container_id=container,
                                  ssl_domain=self.domain(cert))


def _exchange(tls: Tls, n: int) -> list[str]:
    """`n` messages from one TLS connection to another; the bodies the receiver got."""
    rcv_conn = tls.connect("rcv")
    rcv = rcv_conn.create_receiver("secure/#", name="r", credit=n)
    errors: list[BaseException] = []

    def send() -> None:
        try:
            conn = tls.connect("snd")
            snd = conn.create_sender("secure/t")
            for i in range(n):
                snd.send(Message(body=f"m{i}"))
            conn.close()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    got = []
    for _ in range(n):
        got.append(rcv.receive(timeout=10).body)
        rcv.accept()
    rcv_conn.wait(lambda: not thread.is_alive(), timeout=10)
    rcv_conn.close()
    assert not errors, errors
    return got


def test_messages_flow_exactly_once_over_tls_and_a_plain_client_is_refused(
        tmp_path: Path) -> None:
    tls = Tls(tmp_path)
    with tls.router as router:
        with socket.create_connection(("127.0.0.1", tls.port), timeout=5) as s:
            s.sendall(b"AMQP\x00\x01\x00\x00")  # a plain AMQP header at the TLS port
            s.settimeout(5)
            with pytest.raises((ConnectionError, TimeoutError, OSError)):
                while s.recv(1024):
                    pass
                raise ConnectionError("closed")
        wait_for(lambda: any("TLS handshake failed" in line for line in router.log), 10,
                 "the failed handshake's log line")
        assert _exchange(tls, 50) == [f"m{i}" for i in range(50)]


def test_client_certificates_required(tmp_path: Path) -> None:
    tls = Tls(tmp_path, client_cert="required")
    with tls.router as router:
        for cert in (None, _files(tmp_path, tls.stranger, "stranger")):
            with pytest.raises((ConnectionException, Timeout)):
                tls.connect("refused", cert).create_sender("secure/t")
        wait_for(lambda: sum("TLS handshake failed" in line for line in router.log) >= 2, 10,
                 "both refusals logged")
        good = _files(tmp_path, tls.client_ca, "device")
        conn = tls.connect("device", good)
        conn.create_sender("secure/t")
        conn.close()


def test_sighup_loads_a_new_certificate_for_new_connections(tmp_path: Path) -> None:
    tls = Tls(tmp_path)
    with tls.router as router:
        old = tls.connect("before")
        new_ca = trustme.CA()
        (tmp_path / "new").mkdir()
        cert, key = _files(tmp_path / "new", new_ca, "router")
        Path(tls.cert).write_bytes(Path(cert).read_bytes())
        Path(tls.key).write_bytes(Path(key).read_bytes())
        router.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: any("client TLS certificate read again" in line
                             for line in router.log), 10, "the reload")
        with pytest.raises((ConnectionException, Timeout)):  # the old CA no longer fits
            tls.connect("old-trust").create_sender("secure/t")
        tls.trust = _ca_file(tmp_path, new_ca, "new-server")
        conn = tls.connect("new-trust")
        conn.create_sender("secure/t")
        conn.close()
        old.close()  # the connection made before the reload went on


def test_the_status_endpoint_over_https(tmp_path: Path) -> None:
    """`--https`: the status endpoint with the same certificate; a plain HTTP request at the
    HTTPS port fails the handshake (one log line), and the router answers the next one."""
    import http.client
    import json
    import ssl

    port = free_port()
    server_ca = trustme.CA()
    cert, key = _files(tmp_path, server_ca, "router")
    with RouterProcess("H", "--https", f"127.0.0.1:{port}", "--tls-cert", cert,
                       "--tls-key", key) as router:
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((http.client.HTTPException, OSError)):
            plain.request("GET", "/health")
            plain.getresponse()
        plain.close()
        wait_for(lambda: any("TLS handshake failed" in line for line in router.log), 10,
                 "the failed handshake's log line")
        context = ssl.create_default_context(cafile=_ca_file(tmp_path, server_ca, "h"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
        conn.request("GET", "/health")
        answer = conn.getresponse()
        assert answer.status == 200
        assert json.loads(answer.read())["router"] == "H"
        conn.close()
        ca_file = _ca_file(tmp_path, server_ca, "cli")
        cli = subprocess.run([EXACTMESH, "status", "health", "--https", f"127.0.0.1:{port}",
                              "--cacert", ca_file], capture_output=True, text=True, timeout=20)
        assert cli.returncode == 0 and json.loads(cli.stdout)["router"] == "H", cli.stderr
        untrusted = subprocess.run([EXACTMESH, "status", "health", "--https",
                                    f"127.0.0.1:{port}"], capture_output=True, text=True,
                                   timeout=20)
        assert untrusted.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr

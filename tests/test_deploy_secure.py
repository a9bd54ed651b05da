"""deploy/three-routers-secure: the three routers started from those files (paths and ports
moved to a temporary directory and free ports), peers over required mutual TLS, clients over
TLS logging in, the example ACL in force: a device at C gets the command the ingest service
publishes at A, exactly once, and may not publish into another device's tree."""

from __future__ import annotations

import contextlib
import datetime
import shutil
import socket
import ssl
import subprocess
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from proton import ConnectionException
from proton.utils import BlockingConnection

from amqp_edge.client import Login, Publisher, Subscriber
from tests.harness import RouterProcess, free_port, wait_for
from tests.test_amqp_tls import _domain
from tests.test_mqtt_tls import TlsMq

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "three-routers-secure"
PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed")
USERS = {"ingest": "ingest password", "dev1": "device password"}
MOSQUITTO_SUB = shutil.which("mosquitto_sub")


def _etc(tmp: Path, clients_ca: trustme.CA | None = None) -> dict[str, str]:
    """What /etc/exactmesh holds in the deploy guide, made in `tmp`: {path in the file: here}."""
    cluster_ca, clients_ca = trustme.CA(), clients_ca or trustme.CA()
    out: dict[str, str] = {}
    tls = tmp / "tls"
    tls.mkdir()
    for r in "ABC":
        issued = cluster_ca.issue_cert("127.0.0.1", f"{r.lower()}.routers.test")
        (tls / f"{r}.crt").write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(tls / f"{r}.key"))
    cluster_ca.cert_pem.write_to_path(str(tls / "cluster-ca.crt"))
    clients_ca.cert_pem.write_to_path(str(tls / "clients-ca.crt"))
    secret = tmp / "cluster.secret"
    secret.write_text("a long random secret\n")
    secret.chmod(0o600)
    passwd = tmp / "passwd"
    for user, password in USERS.items():
        subprocess.run([PASSWD, *([] if passwd.exists() else ["-c"]), "-b", str(passwd), user,
                        password], check=True, capture_output=True)
    shutil.copy(DEPLOY / "acl", tmp / "acl")
    for path in [*tls.iterdir(), secret, passwd, tmp / "acl"]:
        out[f"/etc/exactmesh/{path.relative_to(tmp)}"] = str(path)
    out["cluster_ca"] = str(tls / "cluster-ca.crt")
    return out


def _config(r: str, etc: dict[str, str], tmp: Path) -> Path:
    text = (DEPLOY / f"{r}.toml").read_text()
    for etc_path, here in etc.items():
        text = text.replace(f'"{etc_path}"', f'"{here}"')
    path = tmp / f"{r}.toml"
    path.write_text(text)
    assert "/etc/exactmesh" not in text
    return path


@contextlib.contextmanager
def _secure_line(tmp_path: Path, extra: dict[str, list[str]] | None = None,
                 clients_ca: trustme.CA | None = None
                 ) -> Iterator[tuple[dict[str, Any], dict[str, dict[str, int]], dict[str, str]]]:
    """A, B and C from the deploy files, linked over TLS: (routers, their ports, _etc)."""
    etc = _etc(tmp_path, clients_ca)
    ports = {r: {k: free_port() for k in ("amqps", "mqtts", "listen")} for r in "ABC"}
    routers: dict[str, Any] = {}
    try:
        for r, dial in (("A", None), ("B", "A"), ("C", "B")):
            table = tomllib.loads((DEPLOY / f"{r}.toml").read_text())["router"]
            assert table["peer-tls-required"] is True and table["tls-client-cert"] == "optional"
            flags = ["--config", str(_config(r, etc, tmp_path)), "--log-level", "debug",
                     "--amqps", f"127.0.0.1:{ports[r]['amqps']}",
                     "--mqtts", f"127.0.0.1:{ports[r]['mqtts']}",
                     "--listen", f"127.0.0.1:{ports[r]['listen']}", *(extra or {}).get(r, [])]
            if dial:
                flags += ["--connect", f"127.0.0.1:{ports[dial]['listen']}"]
            routers[r] = RouterProcess(r, *flags).__enter__()
        for r, peer in (("A", "B"), ("B", "C")):
            wait_for(lambda r=r, peer=peer: any(f"router {r}: link to {peer} up" in line
                                                for line in routers[r].log), 30,
                     f"the TLS link {r} - {peer}")
        yield routers, ports, etc
    finally:
        for router in routers.values():
            router.__exit__(None, None, None)


def test_the_secure_three_router_configuration(tmp_path: Path) -> None:
    with _secure_line(tmp_path) as (routers, ports, etc):
        ca = etc["cluster_ca"]  # the routers' certificates serve clients and peers alike
        device = TlsMq(ports["C"]["mqtts"], "dev1", ca, user=("dev1", USERS["dev1"]))
        device.subscribe("devices/dev1/#", 1)
        wait_for(lambda: any("knows subscriber dev1/mqtt/devices/dev1/#@C" in line
                             for line in routers["A"].log), 15, "A to know the device")
        login = Login("ingest", USERS["ingest"], ca=ca, verify_name=False)
        # The ingest service's `devices/#` is wider than what it may read (telemetry): it is
        # granted, and each message is checked at B, where it is delivered.
        watcher = Subscriber([f"amqps://127.0.0.1:{ports['B']['amqps']}"], "devices/#",
                             id="ingest-watch", state_dir=str(tmp_path / "watch"), login=login)
        watcher.wait_attached(15)
        wait_for(lambda: any("knows subscriber" in line and "ingest-watch" in line
                             for line in routers["A"].log), 15, "A to know the watcher")
        with Publisher([f"amqps://127.0.0.1:{ports['A']['amqps']}"], "devices/dev1/commands/on",
                       id="ingest", state_dir=str(tmp_path / "ingest"), login=login) as pub:
            for i in range(20):
                pub.send(f"cmd {i}")
            pub.flush(timeout=30)
            assert pub.stats()["accepted"] == 20
        wait_for(lambda: len(device.got) == 20, 15, "the 20 commands at the device")
        assert device.payloads() == [b"cmd %d" % i for i in range(20)]
        other = device.publish("devices/dev2/telemetry/t", b"not mine", 1)
        own = device.publish("devices/dev1/telemetry/t", b"mine", 1)
        # The 20 commands matched the watcher too, but were not its to read: its first
        # message is the device's telemetry, sent after them (and answered once it accepts).
        msg = watcher.receive(timeout=15)
        assert msg is not None and msg.body == b"mine"
        watcher.accept(msg)
        wait_for(lambda: other in device.acks and own in device.acks, 10, "both answers")
        assert device.acks[other][0].value == 0x87 and device.acks[own][0].value == 0
        watcher.close()
        device.stop()


def _cert(tmp: Path, ca: trustme.CA, name: str, **kw: Any) -> tuple[str, str]:
    issued = ca.issue_cert(f"{name}.clients.test", common_name=name, **kw)
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert.write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def _suback(client: TlsMq, topic_filter: str) -> int:
    """Subscribe at QoS 1 and return the SUBACK's reason code."""
    codes: list[int] = []
    client.c.on_subscribe = lambda c, u, mid, rcs, p: codes.extend(rc.value for rc in rcs)
    client.c.subscribe(topic_filter, 1)
    wait_for(lambda: codes, 10, f"SUBACK for {topic_filter}")
    return codes[0]


def _refused_login(port: int, client_id: str, ca: str, user: tuple[str, str] | None) -> int:
    """The CONNACK reason code a paho 5.0 client over TLS gets (it does not try again)."""
    c = TlsMq(port, client_id, ca, user=user)
    c.c.loop_stop()
    return c.connack.value


CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x1e\x00\x00"  # 3.1.1, client id ""


def _closed_before_connack(port: int, ca: str | None, cert: tuple[str, str] | None) -> bool:
    """Whether a client (plain if `ca` is None, else TLS with client certificate `cert`)
    that sends a CONNECT is closed without an answer. (With TLS 1.3 the client finishes its
    handshake before the router has judged its certificate: the refusal comes after.)"""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as raw:
        try:
            if ca is None:
                raw.sendall(CONNECT)
                return raw.recv(100) == b""
            context = ssl.create_default_context(cafile=ca)
            context.check_hostname = False
            if cert is not None:
                context.load_cert_chain(*cert)
            with context.wrap_socket(raw) as tls:
                tls.sendall(CONNECT)
                return tls.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return True


@pytest.mark.skipif(MOSQUITTO_SUB is None, reason="mosquitto_sub is not installed")
def test_every_refusal_at_a_secured_mesh_while_a_stream_goes_on(tmp_path: Path) -> None:
    """The must-show of docs/security.md across the secured line: while the ingest service
    at A streams 300 commands to a device at C, each kind of refusal is tried at C and gets
    its documented answer; the stream arrives exactly once, in order."""
    clients_ca, stranger = trustme.CA(), trustme.CA()
    good = _cert(tmp_path, clients_ca, "dev1")
    untrusted = _cert(tmp_path, stranger, "dev1-stranger")
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    expired = _cert(tmp_path, clients_ca, "dev1-expired",
                    not_before=past - datetime.timedelta(days=30), not_after=past)
    n = 300
    with _secure_line(tmp_path, {"C": ["--max-connections-per-user", "2"]}, clients_ca) as (
            routers, ports, etc):
        ca = etc["cluster_ca"]
        mqtts, amqps = ports["C"]["mqtts"], ports["C"]["amqps"]
        device = TlsMq(mqtts, "dev1", ca, cert=good, user=("dev1", USERS["dev1"]))
        device.subscribe("devices/dev1/commands/#", 1)
        wait_for(lambda: any("knows subscriber dev1/mqtt/devices/dev1/commands/#@C" in line
                             for line in routers["A"].log), 15, "A to know the device")
        login = Login("ingest", USERS["ingest"], ca=ca, verify_name=False)
        pub = Publisher([f"amqps://127.0.0.1:{ports['A']['amqps']}"], "devices/dev1/commands/on",
                        id="ingest", state_dir=str(tmp_path / "ingest"), login=login)
        feeder = threading.Thread(target=lambda: [pub.send(f"cmd {i}") for i in range(n)],
                                  daemon=True)
        feeder.start()
        # Log-ins: wrong password, unknown user, anonymous (MQTT 5 CONNACK codes); AMQP.
        assert _refused_login(mqtts, "r1", ca, ("dev1", "guess")) == 0x86
        assert _refused_login(mqtts, "r2", ca, ("mallory", "x")) == 0x86
        assert _refused_login(mqtts, "r3", ca, None) == 0x87
        with pytest.raises(ConnectionException):
            BlockingConnection(f"amqps://127.0.0.1:{amqps}", timeout=10, container_id="r4",
                               user="dev1", password="guess", allowed_mechs="PLAIN",
                               ssl_domain=_domain(ca)).create_sender("devices/dev1/x")
        # A plain client at the TLS port; an untrusted and an expired client certificate.
        assert _closed_before_connack(mqtts, None, None)
        for bad in (untrusted, expired):
            assert _closed_before_connack(mqtts, ca, bad)
        wait_for(lambda: sum("TLS handshake failed" in line for line in routers["C"].log) >= 3,
                 10, "a log line for each failed handshake")
        # Forbidden publish and subscribe; a wildcard wider than what ingest may read.
        other = device.publish("devices/dev2/telemetry/t", b"not mine", 1)
        wait_for(lambda: other in device.acks, 10, "the forbidden publish's answer")
        assert device.acks[other][0].value == 0x87
        assert _suback(device, "devices/dev2/#") == 0x87
        watcher = TlsMq(mqtts, "ingest-watch", ca, user=("ingest", USERS["ingest"]))
        assert _suback(watcher, "devices/#") == 1
        # mosquitto_sub logs in (-u, -P) over TLS (--cafile) and gets a retained reading.
        device.c.publish("devices/dev1/telemetry/t", b"21.5", 1, retain=True)
        got = subprocess.run(
            [MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(mqtts), "--cafile", ca, "--insecure",
             "-u", "ingest", "-P", USERS["ingest"], "-t", "devices/+/telemetry/#", "-C", "1",
             "-W", "20"], capture_output=True, text=True, timeout=30)
        assert got.returncode == 0 and got.stdout.strip() == "21.5", (got.stdout, got.stderr)
        # ingest has the watcher at C: one more is allowed, the third is over its limit.
        second = TlsMq(mqtts, "ingest-2", ca, user=("ingest", USERS["ingest"]))
        assert second.connack.value == 0
        assert _refused_login(mqtts, "ingest-3", ca, ("ingest", USERS["ingest"])) == 0x97
        second.stop()
        feeder.join(30)
        pub.flush(timeout=60)
        assert pub.stats()["accepted"] == n and pub.failures() == []
        wait_for(lambda: len(device.got) >= n, 20, "every command at the device")
        assert device.payloads() == [b"cmd %d" % i for i in range(n)]
        # The watcher's devices/# matched every command, and was sent none of them.
        assert watcher.payloads() == [b"21.5"]
        pub.close()
        for c in (watcher, device):
            c.stop()

"""deploy/three-routers-secure: the three routers started from those files (paths and ports
moved to a temporary directory and free ports), peers over required mutual TLS, clients over
TLS logging in, the example ACL in force: a device at C gets the command the ingest service
publishes at A, exactly once, and may not publish into another device's tree."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trustme

from amqp_edge.client import Login, Publisher, Subscriber
from tests.harness import RouterProcess, free_port, wait_for
from tests.test_mqtt_tls import TlsMq

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "three-routers-secure"
PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed")
USERS = {"ingest": "ingest password", "dev1": "device password"}


def _etc(tmp: Path) -> dict[str, str]:
    """What /etc/exactmesh holds in the deploy guide, made in `tmp`: {path in the file: here}."""
    cluster_ca, clients_ca = trustme.CA(), trustme.CA()
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


def test_the_secure_three_router_configuration(tmp_path: Path) -> None:
    etc = _etc(tmp_path)
    ports = {r: {k: free_port() for k in ("amqps", "mqtts", "listen")} for r in "ABC"}
    routers: dict[str, Any] = {}
    try:
        for r, dial in (("A", None), ("B", "A"), ("C", "B")):
            table = tomllib.loads((DEPLOY / f"{r}.toml").read_text())["router"]
            assert table["peer-tls-required"] is True and table["tls-client-cert"] == "optional"
            extra = ["--config", str(_config(r, etc, tmp_path)), "--log-level", "debug",
                     "--amqps", f"127.0.0.1:{ports[r]['amqps']}",
                     "--mqtts", f"127.0.0.1:{ports[r]['mqtts']}",
                     "--listen", f"127.0.0.1:{ports[r]['listen']}"]
            if dial:
                extra += ["--connect", f"127.0.0.1:{ports[dial]['listen']}"]
            routers[r] = RouterProcess(r, *extra).__enter__()
        for r, peer in (("A", "B"), ("B", "C")):
            wait_for(lambda r=r, peer=peer: any(f"router {r}: link to {peer} up" in line
                                                for line in routers[r].log), 30,
                     f"the TLS link {r} - {peer}")
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
    finally:
        for router in routers.values():
            router.__exit__(None, None, None)

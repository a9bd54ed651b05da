"""A secured relay agent (docs/security.md, docs/relay.md): towards the mesh it proves the
cluster secret over required mutual TLS like a router; towards its clients it takes the
router's security options (TLS listeners, a password file, an ACL file).

A laptop logs in over TLS, goes away, and gets every message published meanwhile at a mesh
router exactly once, in order, when it comes back; a wrong password and a forbidden
subscription get the documented refusals, at AMQP and MQTT, while that goes on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import trustme
from proton import ConnectionException
from proton.utils import BlockingConnection, LinkDetached

from amqp_edge.client import Login, Publisher, Subscriber
from tests.harness import free_port, wait_for
from tests.mesh_harness import start_mesh
from tests.test_amqp_tls import _ca_file, _domain, _files
from tests.test_mqtt_tls import TlsMq
from tests.test_peer_tls import tls_files
from tests.test_relay_agent import RelayProcess
from tests.test_relay_amqp import listener_returns

PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                "(Debian package mosquitto)")
ACL = """\
user laptop
topic readwrite lap/#
"""


def _peer_flags(files: dict[str, str]) -> list[str]:
    return [arg for option, path in files.items() for arg in (f"--{option}", path)]


def test_a_secured_relay_serves_a_laptop_over_tls_and_refuses_the_rest(tmp_path: Path) -> None:
    cluster = trustme.CA()
    extra = {r: _peer_flags(tls_files(tmp_path / "peers", cluster, r)) for r in "AB"}
    pw, acl = tmp_path / "passwd", tmp_path / "acl"
    subprocess.run([PASSWD, "-c", "-b", str(pw), "laptop", "lid open"], check=True)
    acl.write_text(ACL)
    server_ca = trustme.CA()
    cert, key = _files(tmp_path, server_ca, "relay")
    trust = _ca_file(tmp_path, server_ca, "relay-server")
    amqps, mqtts = free_port(), free_port()
    n = 40
    with start_mesh("line", 2, extra=extra) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess(
            "R", [mesh["A"].mesh_port], tmp_path / "relay",
            *_peer_flags(tls_files(tmp_path / "peers", cluster, "R")), "--peer-tls-required",
            "--amqps", f"127.0.0.1:{amqps}", "--mqtts", f"127.0.0.1:{mqtts}",
            "--tls-cert", cert, "--tls-key", key, "--password-file", str(pw),
            "--acl-file", str(acl))
        try:
            relay.wait_logged("link to A up", 15)
            url, sub_dir = f"amqps://127.0.0.1:{amqps}", str(tmp_path / "sub")
            login = Login("laptop", "lid open", ca=trust, verify_name=False)
            laptop = Subscriber(url, "lap/#", id="laptop", state_dir=sub_dir, durable=True,
                                login=login)
            laptop.wait_attached(10)
            laptop.close()  # away: the relay keeps its subscription
            mesh["B"].wait_logged("router B: knows subscriber laptop/sub/laptop@R", 15)
            pub = Publisher([f"amqp://{mesh['B'].url}"], "lap/t", id="shop",
                            state_dir=str(tmp_path / "pub"), window=100)
            for i in range(n):
                pub.send(f"m {i}")
            # Meanwhile, at the relay: a wrong password, and a subscription outside the ACL.
            with pytest.raises(ConnectionException):
                BlockingConnection(url, timeout=10, container_id="guess", user="laptop",
                                   password="lid shut", allowed_mechs="PLAIN",
                                   ssl_domain=_domain(trust)).create_sender("lap/x")
            conn = BlockingConnection(url, timeout=10, container_id="lap-2", user="laptop",
                                      password="lid open", allowed_mechs="PLAIN",
                                      ssl_domain=_domain(trust))
            with pytest.raises(LinkDetached, match="unauthorized-access"):
                conn.create_receiver("shop/#", name="not hers")
            conn.close()
            guess = TlsMq(mqtts, "guess-m", trust, user=("laptop", "lid shut"))
            guess.c.loop_stop()
            assert guess.connack.value == 0x86
            device = TlsMq(mqtts, "lap-m", trust, user=("laptop", "lid open"))
            assert device.connack.value == 0
            device.stop()
            wait_for(lambda: any("SASL log-in refused" in line for line in relay.log), 10,
                     "the relay's log line for the refused log-in")
            assert not any("lid shut" in line for line in relay.log)
            listener_returns(url, sub_dir, pub, n, "shop", login=login)
        finally:
            relay.stop()

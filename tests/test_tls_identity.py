"""A client certificate standing for the user (`--tls-identity-as-username`,
docs/security.md), and the limit of connections per user (`--max-connections-per-user`).

paho over TLS with a certificate and no password, and proton with SASL EXTERNAL, get the
ACL rules of the user their certificate names; a client without a certificate logs in with
its password as before; a certificate cannot be used to act as another user. Beyond the
per-user limit a log-in is refused (MQTT 5 CONNACK 0x97 Quota exceeded; AMQP SASL outcome
auth) while that user's other connections and everyone else go on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
from proton import ConnectionException, Message
from proton.utils import BlockingConnection, LinkDetached

from tests.harness import RouterProcess, free_port, wait_for
from tests.test_amqp_tls import _ca_file, _domain, _files
from tests.test_mqtt_tls import TlsMq

PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                "(Debian package mosquitto)")
ACL = """\
user sensor-7
topic readwrite sensors/sensor-7/#
user alice
topic read sensors/#
topic readwrite alice/#
"""


def _client_cert(tmp: Path, ca: trustme.CA, name: str) -> tuple[str, str]:
    issued = ca.issue_cert(f"{name}.clients.test", common_name=name)
    cert, key = tmp / f"{name}-client.crt", tmp / f"{name}-client.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


@pytest.fixture
def router(tmp_path: Path) -> Any:
    server_ca, client_ca = trustme.CA(), trustme.CA()
    cert, key = _files(tmp_path, server_ca, "router")
    pw, acl = tmp_path / "passwd", tmp_path / "acl"
    subprocess.run([PASSWD, "-c", "-b", str(pw), "alice", "wonder land"], check=True)
    acl.write_text(ACL)
    ports = {"amqps": free_port(), "mqtts": free_port()}
    with RouterProcess(
            "I", "--amqps", f"127.0.0.1:{ports['amqps']}",
            "--mqtts", f"127.0.0.1:{ports['mqtts']}", "--tls-cert", cert, "--tls-key", key,
            "--tls-ca", _ca_file(tmp_path, client_ca, "clients"), "--tls-client-cert",
            "optional", "--tls-identity-as-username", "--password-file", str(pw),
            "--acl-file", str(acl), "--max-connections-per-user", "2") as proc:
        proc.ports = ports
        proc.trust = _ca_file(tmp_path, server_ca, "server")
        proc.sensor = _client_cert(tmp_path, client_ca, "sensor-7")
        yield proc


def _external(router: Any, container: str, **kw: Any) -> BlockingConnection:
    return BlockingConnection(f"amqps://127.0.0.1:{router.ports['amqps']}", timeout=10,
                              container_id=container, allowed_mechs="EXTERNAL",
                              ssl_domain=_domain(router.trust, router.sensor), **kw)


def test_a_certificate_names_the_user_over_mqtt_and_amqp(router: Any) -> None:
    """sensor-7 publishes by certificate alone (paho, no user name; proton, SASL EXTERNAL)
    into its own tree; alice, by password, reads it; sensor-7 may not write elsewhere."""
    alice = TlsMq(router.ports["mqtts"], "alice-1", router.trust,
                  user=("alice", "wonder land"))
    alice.subscribe("sensors/#", 1)
    sensor = TlsMq(router.ports["mqtts"], "s7", router.trust, cert=router.sensor)
    own = sensor.publish("sensors/sensor-7/temp", b"mqtt", 1)
    other = sensor.publish("sensors/sensor-8/temp", b"not mine", 1)
    wait_for(lambda: own in sensor.acks and other in sensor.acks, 10, "both answers")
    assert sensor.acks[own][0].value == 0 and sensor.acks[other][0].value == 0x87
    conn = _external(router, "s7-amqp")
    conn.create_sender("sensors/sensor-7/temp").send(Message(body="amqp"))  # accepted
    with pytest.raises(LinkDetached, match="unauthorized-access"):
        conn.create_sender("alice/inbox")
    conn.close()
    wait_for(lambda: len(alice.got) == 2, 10, "both of the sensor's messages")
    assert [m[1] for m in alice.got] == [b"mqtt", b"amqp"]
    sensor.stop()
    alice.stop()


def test_a_certificate_cannot_act_as_another_user(router: Any) -> None:
    """An MQTT user name beside a certificate is not used (mosquitto's
    use_identity_as_username); an EXTERNAL log-in is the certificate's user, whatever
    user name the client was given (tests/test_sasl.py: an authorization id naming another
    user is refused)."""
    sensor = TlsMq(router.ports["mqtts"], "s7-as-alice", router.trust, cert=router.sensor,
                   user=("alice", "wrong"))
    mid = sensor.publish("alice/inbox", b"as alice?", 1)
    wait_for(lambda: mid in sensor.acks, 10, "the answer")
    assert sensor.acks[mid][0].value == 0x87  # it is sensor-7, whose rules say no
    sensor.stop()
    conn = BlockingConnection(f"amqps://127.0.0.1:{router.ports['amqps']}", timeout=10,
                              container_id="as-alice", user="alice", allowed_mechs="EXTERNAL",
                              ssl_domain=_domain(router.trust, router.sensor))
    with pytest.raises(LinkDetached, match="rules for user 'sensor-7'"):
        conn.create_sender("alice/x")  # (proton sends no authorization id: it is sensor-7)
    conn.close()


def test_connections_per_user_are_limited(router: Any) -> None:
    """--max-connections-per-user 2: alice's third log-in is refused, over MQTT (0x97) and
    AMQP, while her two connections and sensor-7's go on."""
    port = router.ports["mqtts"]
    first = TlsMq(port, "alice-a", router.trust, user=("alice", "wonder land"))
    first.subscribe("sensors/#", 1)
    second = TlsMq(port, "alice-b", router.trust, user=("alice", "wonder land"))
    third = TlsMq(port, "alice-c", router.trust, user=("alice", "wonder land"))
    third.c.loop_stop()  # (paho would try again)
    assert third.connack is not None and third.connack.value == 0x97
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqps://127.0.0.1:{router.ports['amqps']}", timeout=10,
                           container_id="alice-amqp", user="alice", password="wonder land",
                           allowed_mechs="PLAIN",
                           ssl_domain=_domain(router.trust)).create_sender("alice/x")
    sensor = TlsMq(port, "s7-limit", router.trust, cert=router.sensor)
    mids = [sensor.publish("sensors/sensor-7/n", b"%d" % i, 1) for i in range(20)]
    wait_for(lambda: all(m in sensor.acks for m in mids) and len(first.got) == 20, 10,
             "the sensor's 20 messages at alice's first connection")
    assert [m[1] for m in first.got] == [b"%d" % i for i in range(20)]
    assert any("max-connections-per-user" in line and "alice" in line for line in router.log)
    second.stop()

    def log_in_again() -> TlsMq | None:  # once the router has seen `second` go
        c = TlsMq(port, "alice-d", router.trust, user=("alice", "wonder land"))
        if c.connack.value == 0:
            return c
        c.c.loop_stop()
        return None

    again = wait_for(log_in_again, 15, "a log-in under the limit again")
    for c in (first, again, sensor):
        c.stop()

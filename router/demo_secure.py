"""`exactmesh demo --secure`: the demo's routers run secured as docs/security.md and
deploy/three-routers-secure describe, and every demo client logs in over TLS.

Everything is made at run time in the demo's temporary directory, so that the demo needs
neither openssl nor mosquitto_passwd: a throwaway CA and a certificate per router (trustme,
which `make demo` installs with the [test] extras) that serves clients (`--amqps`,
`--mqtts`) and peers (mutual TLS, `--peer-tls-required`) alike; a password file in
mosquitto's format (`router.security.passwords.hash_password`) with a random password per
user; an ACL that lets each user do exactly what its clients do; the cluster secret in a file
of mode 0600. The routers keep the plain AMQP listener the configuration requires, on
loopback, but no demo client uses it.

`refusals` tries what the ACL and the password file must refuse (a log-in with a wrong
password, a publisher to a topic its user may not write), for the report to show.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from amqp_edge.client import ClientError, Login, Publisher, Subscriber

from .security.passwords import hash_password

# Who logs in as whom: each user may do exactly what its clients do (ACL below).
SHOP = "shop"  # the SDK publishers: write orders/#
BILLING = "billing"  # the SDK subscribers: read orders/# and payments/#
SENSOR = "sensor"  # the MQTT device: read orders/eu/#
DISPATCHER = "dispatcher"  # the relay part's MQTT publisher: write fleet/#
LAPTOP = "laptop"  # the relay part's MQTT device: read fleet/#
ACL = f"""\
# exactmesh demo --secure (mosquitto's acl_file format, docs/security.md): what is not
# allowed here is refused.
user {SHOP}
topic write orders/#

user {BILLING}
topic read orders/#
topic read payments/#

user {SENSOR}
topic read orders/eu/#

user {DISPATCHER}
topic write fleet/#

user {LAPTOP}
topic read fleet/#
"""
FORBIDDEN_TOPIC = "payments/refunds"  # the shop writes orders/# only


class Secure:
    """The throwaway CA, certificates, password file, ACL file and cluster secret in
    `directory`, and the router flags and client options that use them."""

    def __init__(self, directory: str) -> None:
        try:
            import trustme
        except ImportError:
            raise SystemExit("demo: --secure needs the trustme package (make demo installs "
                             "it: pip install -e '.[test]')") from None
        self.dir = Path(directory) / "secure"
        self.dir.mkdir(mode=0o700)
        self._ca = trustme.CA()
        self.ca = str(self.dir / "ca.pem")
        self._ca.cert_pem.write_to_path(self.ca)
        self.passwords = {user: secrets.token_urlsafe(16)
                          for user in (SHOP, BILLING, SENSOR, DISPATCHER, LAPTOP)}
        self.password_file = self._write("passwd", "".join(
            f"{user}:{hash_password(password)}\n" for user, password in self.passwords.items()))
        self.acl_file = self._write("acl", ACL)
        self.secret_file = self._write("cluster.secret", secrets.token_hex(32) + "\n")

    def _write(self, name: str, text: str) -> str:
        """A file only its owner may read (the router refuses a cluster secret others can)."""
        path = self.dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return str(path)

    def _certificate(self, router: str) -> tuple[str, str]:
        cert, key = self.dir / f"{router}.crt", self.dir / f"{router}.key"
        if not cert.exists():
            issued = self._ca.issue_cert("127.0.0.1", f"{router.lower()}.demo.test")
            cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
            issued.private_key_pem.write_to_path(str(key))
        return str(cert), str(key)

    def router_flags(self, router: str, amqps: int, mqtts: int) -> list[str]:
        """A router's options as deploy/three-routers-secure sets them (but for the
        connection limits and client certificates, which the demo does not use)."""
        cert, key = self._certificate(router)
        return ["--amqps", f"127.0.0.1:{amqps}", "--mqtts", f"127.0.0.1:{mqtts}",
                "--tls-cert", cert, "--tls-key", key,
                "--password-file", self.password_file, "--acl-file", self.acl_file,
                "--cluster", "demo", "--cluster-secret-file", self.secret_file,
                "--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", self.ca,
                "--peer-tls-required"]

    def login(self, user: str, password: str | None = None) -> Login:
        # verify_name=False: the chain is checked against the demo's CA, but proton matches
        # only DNS names and the routers are at 127.0.0.1 (an IP address).
        return Login(user, self.passwords[user] if password is None else password,
                     ca=self.ca, verify_name=False)

    def mqtt_login(self, client: Any, user: str) -> None:
        """TLS trusting the demo's CA, and a user name and password, for a paho client."""
        # The chain and the name are both checked: unlike proton, Python's ssl matches the
        # certificate's IP address entry (127.0.0.1), so no tls_insecure_set(True) is needed.
        client.tls_set(ca_certs=self.ca)
        client.username_pw_set(user, self.passwords[user])

    def refusals(self, login_at: tuple[str, str], publish_at: tuple[str, str],
                 state_dir: str) -> list[tuple[str, str | None]]:
        """Try what must be refused, each at a router (name, URL): [(what was tried, how it
        was refused, or None if it was not)]. Takes about LOGIN_REFUSED_GRACE (5 s): the
        SDK gives up a refused log-in only once it has been refused that long."""
        out: list[tuple[str, str | None]] = []
        name, url = login_at
        intruder = Subscriber([url], "orders/#", id="intruder", state_dir=f"{state_dir}/intruder",
                              login=self.login(BILLING, "not the password"))
        what = f"SDK subscriber logging in as {BILLING} with a wrong password at {name}"
        out.append((what, _refused(intruder, "refused the log-in",
                                   "log-in refused (amqp:unauthorized-access)")))
        name, url = publish_at
        shop = Publisher([url], FORBIDDEN_TOPIC, id="shop-refunds",
                         state_dir=f"{state_dir}/shop-refunds", login=self.login(SHOP))
        what = f"SDK publisher of {SHOP} to {FORBIDDEN_TOPIC} at {name}"
        out.append((what, _refused(shop, "amqp:unauthorized-access",
                                   "link refused at attach (amqp:unauthorized-access)")))
        return out


def _refused(client: Publisher | Subscriber, sign: str, said: str) -> str | None:
    """`said` if the client's attach failed with an error containing `sign`, else None."""
    try:
        client.wait_attached(15)
    except (ClientError, TimeoutError) as err:
        return said if sign in str(err) else None
    finally:
        client.close()
    return None

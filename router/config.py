"""Router configuration: a TOML file and command-line flags, flags winning.

Every option has one name, used both as the TOML key and as the long flag
(`max-message-size = 1048576` in the file, `--max-message-size 1048576` on the command line).
A bad value is a `ConfigError` whose text names the option, what was wrong and what is allowed.
"""

from __future__ import annotations

import os
import ssl
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration problem, in one line a person can act on."""


class ListenError(OSError):
    """A listener could not bind: names the option, so the one-line error can say which."""

    def __init__(self, option: str, where: object, what: str, err: OSError) -> None:
        super().__init__(err.errno, err.strerror)
        self.option, self.where, self.what = option, where, what

    def __str__(self) -> str:
        return (f"cannot listen on {self.where} for {self.what}: {self.strerror}; "
                f"choose another --{self.option} address")


@dataclass(slots=True, frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_hostport(text: str, option: str) -> HostPort:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{option}: {text!r} is not HOST:PORT (for example 127.0.0.1:5672)")
    return HostPort(host.strip("[]"), int(port))


@dataclass(slots=True, frozen=True)
class RouterConfig:
    id: str
    amqp: HostPort
    no_subscribers: str = "accept"
    max_message_size: int = 1024 * 1024
    publisher_window: int = 256
    max_delivery_attempts: int = 5
    idle_timeout: float = 16.0
    reconnect_timeout: float = 30.0
    resume_timeout: float = 5.0
    log_level: str = "info"
    log_format: str = "text"  # or "json": one JSON object per line (router/logs.py)
    # A delivery undecided this long is stuck: logged with who it waits for, and counted in
    # exactmesh_deliveries_stuck (docs/operations.md).
    stuck_after: float = 10.0
    # Per-topic counters in /metrics for at most this many topics (0: none).
    topic_metrics: int = 0
    # Router processes on this host (router/workers.py): more than one runs a supervisor and
    # that many routers, sharing the listening ports, in a mesh of their own over loopback.
    workers: int = 1
    http: HostPort | None = None  # the status endpoint (router/runtime/status.py); off by default
    mqtt: HostPort | None = None  # MQTT 3.1.1 / 5.0 clients (mqtt_edge/server.py); off by default
    # A relay store (docs/relay.md): a directory, or "" for none.
    relay_store: str = ""
    relay_waiting_limit: int = 100_000
    # the mesh
    listen: HostPort | None = None  # where peer routers connect to us
    # A worker's own loopback listener for the other workers of its host (router/workers.py
    # sets it; not an option).
    worker_listen: HostPort | None = None
    worker_listen_fd: int = -1  # ... its listening socket, held open by the supervisor
    connect: tuple[HostPort, ...] = ()  # peer routers we connect to
    # A relay's uplinks (`exactmesh relay --mesh`): one link at a time, to the first of these
    # that answers, the next after a loss. No listener: a relay is a leaf of the mesh.
    uplinks: tuple[HostPort, ...] = ()
    cluster: str = "exactmesh"
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    link_costs: tuple[tuple[str, int], ...] = ()  # (peer router id, cost)
    heartbeat: float = 1.0
    unreachable_timeout: float = 30.0
    # How long a router that starts with peers to connect to waits to hear the mesh's
    # subscriptions before routing guaranteed messages (MeshNode.start_joining); None: the
    # unreachable-timeout; 0: it does not wait.
    join_timeout: float | None = None
    gossip_interval: float = 0.5
    # mutual TLS on peer links: all three files, or none
    peer_tls_cert: str = ""
    peer_tls_key: str = ""
    peer_tls_ca: str = ""
    peer_tls_required: bool = False  # refuse to start a peered router without peer TLS
    # Clients (docs/security.md): users in mosquitto's password_file format, per-topic rules
    # in its acl_file format. With either, anonymous clients are refused unless allowed.
    password_file: str = ""
    acl_file: str = ""
    allow_anonymous: bool = False
    # AMQP SASL PLAIN sends the password in clear: it is offered on TLS connections only,
    # unless this says otherwise.
    allow_plain_without_tls: bool = False
    max_connections: int = 0  # client connections at once (AMQP and MQTT); 0: no limit
    max_connections_per_host: int = 0  # from one IP address; 0: no limit
    max_connections_per_user: int = 0  # logged in as one user; 0: no limit
    # TLS for clients (docs/security.md): AMQP over TLS at `amqps`, with this certificate
    # chain and key; client certificates checked against `tls_ca` as `tls_client_cert` says.
    amqps: HostPort | None = None
    mqtts: HostPort | None = None  # MQTT over TLS, same certificate options
    https: HostPort | None = None  # the status endpoint over TLS, same certificate options
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_client_cert: str = "none"  # none | optional | required
    # A verified client certificate's common name is the client's user name (MQTT: in place
    # of the CONNECT's; AMQP: SASL EXTERNAL), without a password.
    tls_identity_as_username: bool = False

    @property
    def anonymous_allowed(self) -> bool:
        """Whether a client without a user name may connect (mosquitto 2's rule: only when
        neither a password file nor an ACL file is configured, or when told so)."""
        return self.allow_anonymous or not (self.password_file or self.acl_file)

    def secret(self) -> bytes:
        """The cluster secret, from the file if one is named (keeps it out of `ps`)."""
        if self.cluster_secret_file:
            path = self.cluster_secret_file
            try:
                with open(path, "rb") as f:
                    if os.fstat(f.fileno()).st_mode & 0o007:
                        mode = os.fstat(f.fileno()).st_mode & 0o777
                        raise ConfigError(
                            f"cluster-secret-file {path!r} can be read by other users (mode "
                            f"{mode:04o}): whoever reads it can join the cluster; make it "
                            f"private with: chmod o-rwx {path}")
                    return f.read().strip()
            except OSError as err:
                raise ConfigError(f"cluster-secret-file {path!r}: {err.strerror}") from None
        return self.cluster_secret.encode()

    def peer_tls(self) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
        """The (server side, client side) TLS contexts for peer links, or None without TLS.
        Loads the files: `build` calls it so that a bad file stops the router at start."""
        files = {"peer-tls-cert": self.peer_tls_cert, "peer-tls-key": self.peer_tls_key,
                 "peer-tls-ca": self.peer_tls_ca}
        if not any(files.values()):
            return None
        for name, path in files.items():
            if not path:
                raise ConfigError(f"{name} is missing: peer-tls-cert, peer-tls-key and "
                                  "peer-tls-ca go together (all three or none)")
        for name, path in files.items():
            try:
                with open(path, "rb"):
                    pass
            except OSError as err:
                raise ConfigError(f"{name} {path!r}: {err.strerror}") from None
        return (_tls_context(ssl.PROTOCOL_TLS_SERVER, self.peer_tls_cert, self.peer_tls_key,
                             self.peer_tls_ca),
                _tls_context(ssl.PROTOCOL_TLS_CLIENT, self.peer_tls_cert, self.peer_tls_key,
                             self.peer_tls_ca))

    def client_tls(self) -> ssl.SSLContext | None:
        """The server-side TLS context of the client listeners (`amqps`, `mqtts`), or None without
        one. Loads the files: `build` calls it, so a bad file stops the router at start;
        `load_client_tls` loads them again into the same context (SIGHUP)."""
        if self.amqps is None and self.mqtts is None and self.https is None:
            return None
        if not (self.tls_cert and self.tls_key):
            raise ConfigError("amqps, mqtts and https need tls-cert and tls-key: the "
                              "router's certificate chain and its private key (PEM files)")
        if self.tls_client_cert != "none" and not self.tls_ca:
            raise ConfigError(f"tls-client-cert {self.tls_client_cert} needs tls-ca: the CA "
                              "certificates that sign the clients' certificates")
        if self.tls_identity_as_username and self.tls_client_cert == "none":
            raise ConfigError("tls-identity-as-username needs client certificates: set "
                              "tls-client-cert to optional or required (and tls-ca)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
                               "required": ssl.CERT_REQUIRED}[self.tls_client_cert]
        self.load_client_tls(context)
        return context

    def load_client_tls(self, context: ssl.SSLContext) -> None:
        """(Re)load the client listeners' certificate, key and client CAs into `context`."""
        _load_chain(context, self.tls_cert, self.tls_key, "tls-cert", "tls-key")
        if self.tls_ca:
            try:
                context.load_verify_locations(cafile=self.tls_ca)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError(f"tls-ca {self.tls_ca!r}: no PEM CA certificate in it "
                                  f"({err})") from None

    @property
    def peered(self) -> bool:
        """Whether this node links to other routers at all."""
        return bool(self.listen or self.connect or self.uplinks or self.worker_listen)

    def cost_to(self, peer: str) -> int:
        return dict(self.link_costs).get(peer, 1)


def _load_chain(context: ssl.SSLContext, cert: str, key: str, cert_option: str,
                key_option: str) -> None:
    """Load a PEM certificate chain and its unencrypted key, naming the option at fault."""
    def encrypted() -> str:
        raise ConfigError(f"{key_option} {key!r}: the key is encrypted; give an unencrypted "
                          "PEM key readable only by the router's user")

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except FileNotFoundError as err:
        which = cert_option if err.filename == cert else key_option
        raise ConfigError(f"{which} {err.filename!r}: no such file") from None
    except OSError as err:
        raise ConfigError(f"{cert_option} / {key_option}: {err.strerror}") from None
    except ssl.SSLError as err:
        if err.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{key_option} {key!r}: does not match the certificate in "
                              f"{cert_option} {cert!r}") from None
        raise ConfigError(f"{cert_option} {cert!r} / {key_option} {key!r}: not a PEM "
                          f"certificate chain and private key ({err})") from None


def _tls_context(protocol: int, cert: str, key: str, ca: str) -> ssl.SSLContext:
    """A context for one side of a peer link: our certificate chain and key, and peers must
    present a certificate signed by the cluster CA (both sides: mutual TLS)."""
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # No host name check: routers connect by address and are identified by the router id
    # each proves in the HMAC handshake, which runs inside TLS; the certificate only has to
    # be signed by the cluster CA.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except ssl.SSLError:
        raise ConfigError(f"peer-tls-cert {cert!r}: no PEM certificate in it") from None

    def encrypted() -> str:
        raise ConfigError(f"peer-tls-key {key!r}: the key is encrypted; give an unencrypted "
                          "PEM key readable only by the router's user")

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as err:
        if err.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"peer-tls-key {key!r}: does not match the certificate in "
                              f"peer-tls-cert {cert!r}") from None
        raise ConfigError(f"peer-tls-key {key!r}: not a PEM private key ({err})") from None
    try:
        context.load_verify_locations(cafile=ca)
    except ssl.SSLError as err:
        raise ConfigError(f"peer-tls-ca {ca!r}: no PEM CA certificate in it ({err})") from None
    return context


# option name -> (RouterConfig field, converter, what is allowed)
def _positive_int(v: Any) -> int:
    if isinstance(v, bool) or int(v) != float(v) or int(v) < 1:
        raise ValueError
    return int(v)


def _count(v: Any) -> int:
    if isinstance(v, bool) or int(v) != float(v) or int(v) < 0:
        raise ValueError
    return int(v)


def _positive_float(v: Any) -> float:
    if isinstance(v, bool) or float(v) <= 0:
        raise ValueError
    return float(v)


def _seconds(v: Any) -> float:
    if isinstance(v, bool) or float(v) < 0:
        raise ValueError
    return float(v)


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("true", "yes", "on", "1"):
        return True
    if str(v).lower() in ("false", "no", "off", "0"):
        return False
    raise ValueError


def _choice(*allowed: str):
    def convert(v: Any) -> str:
        if str(v) not in allowed:
            raise ValueError
        return str(v)

    return convert


def _link_costs(v: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(v, str):  # the flag form: B=5,C=2
        v = dict(part.split("=", 1) for part in v.split(",") if part)
    if not isinstance(v, dict):
        raise ValueError
    return tuple(sorted((_router_id(k), _positive_int(c)) for k, c in v.items()))


def _router_id(v: Any) -> str:
    s = str(v)
    if not s or len(s) > 64 or not all(c.isalnum() or c in "-_." for c in s):
        raise ValueError
    return s


OPTIONS: dict[str, tuple[str, Any, str]] = {
    "id": ("id", _router_id, "1-64 letters, digits, '-', '_' or '.'"),
    "amqp": ("amqp", None, "HOST:PORT"),
    "no-subscribers": ("no_subscribers", _choice("accept", "reject"), "accept or reject"),
    "max-message-size": ("max_message_size", _positive_int, "a positive number of bytes"),
    "publisher-window": ("publisher_window", _positive_int, "a positive count of messages"),
    "max-delivery-attempts": ("max_delivery_attempts", _positive_int, "a positive count"),
    "idle-timeout": ("idle_timeout", _positive_float, "a positive number of seconds"),
    "reconnect-timeout": ("reconnect_timeout", _positive_float,
                          "a positive number of seconds"),
    "resume-timeout": ("resume_timeout", _positive_float, "a positive number of seconds"),
    "workers": ("workers", _positive_int, "a positive count of router processes"),
    "stuck-after": ("stuck_after", _positive_float, "a positive number of seconds"),
    "topic-metrics": ("topic_metrics", _count, "a count of topics, 0 for none"),
    "log-format": ("log_format", _choice("text", "json"), "text or json"),
    "log-level": ("log_level", _choice("debug", "info", "warning", "error"),
                  "debug, info, warning or error"),
    "http": ("http", None, "HOST:PORT"),
    "mqtt": ("mqtt", None, "HOST:PORT"),
    "relay-store": ("relay_store", str, "a directory for the relay store"),
    "relay-waiting-limit": ("relay_waiting_limit", _positive_int,
                            "a positive count of deliveries"),
    "listen": ("listen", None, "HOST:PORT"),
    "connect": ("connect", None, "a list of HOST:PORT"),
    "uplinks": ("uplinks", None, "a list of HOST:PORT"),
    "cluster": ("cluster", _router_id, "1-64 letters, digits, '-', '_' or '.'"),
    "cluster-secret": ("cluster_secret", str, "a string shared by the cluster's routers"),
    "cluster-secret-file": ("cluster_secret_file", str, "a file holding the secret"),
    "link-costs": ("link_costs", _link_costs, "a table of peer router id = positive cost"),
    "heartbeat": ("heartbeat", _positive_float, "a positive number of seconds"),
    "unreachable-timeout": ("unreachable_timeout", _positive_float,
                            "a positive number of seconds"),
    "join-timeout": ("join_timeout", _seconds, "a number of seconds, 0 not to wait"),
    "gossip-interval": ("gossip_interval", _positive_float, "a positive number of seconds"),
    "peer-tls-cert": ("peer_tls_cert", str, "a PEM certificate chain file"),
    "peer-tls-key": ("peer_tls_key", str, "a PEM private key file"),
    "peer-tls-ca": ("peer_tls_ca", str, "a PEM file of CA certificates"),
    "peer-tls-required": ("peer_tls_required", _bool, "true or false"),
    "password-file": ("password_file", str, "a mosquitto password file (mosquitto_passwd)"),
    "acl-file": ("acl_file", str, "a mosquitto ACL file"),
    "allow-anonymous": ("allow_anonymous", _bool, "true or false"),
    "allow-plain-without-tls": ("allow_plain_without_tls", _bool, "true or false"),
    "max-connections": ("max_connections", _count, "a count, 0 for no limit"),
    "max-connections-per-host": ("max_connections_per_host", _count,
                                 "a count, 0 for no limit"),
    "max-connections-per-user": ("max_connections_per_user", _count,
                                 "a count, 0 for no limit"),
    "amqps": ("amqps", None, "HOST:PORT"),
    "mqtts": ("mqtts", None, "HOST:PORT"),
    "https": ("https", None, "HOST:PORT"),
    "tls-cert": ("tls_cert", str, "a PEM certificate chain file"),
    "tls-key": ("tls_key", str, "a PEM private key file"),
    "tls-ca": ("tls_ca", str, "a PEM file of CA certificates"),
    "tls-client-cert": ("tls_client_cert", _choice("none", "optional", "required"),
                        "none, optional or required"),
    "tls-identity-as-username": ("tls_identity_as_username", _bool, "true or false"),
}
# Fields that are no option: what the worker supervisor sets for each worker.
INTERNAL = {"worker_listen", "worker_listen_fd"}
assert {f for f, _, _ in OPTIONS.values()} | INTERNAL == {f.name for f in fields(RouterConfig)}


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None
    # Accept either top-level keys or a [router] table.
    table = data.get("router", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {str(path)!r}: [router] must be a table")
    return {k: v for k, v in table.items() if k != "router"}


def build(file_options: dict[str, Any], flag_options: dict[str, Any]) -> RouterConfig:
    """Merge file and flags (flags win, None means 'not given') and validate everything."""
    merged = dict(file_options)
    merged.update({k: v for k, v in flag_options.items() if v is not None})
    unknown = sorted(set(merged) - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown option {unknown[0]!r}; known options: {', '.join(sorted(OPTIONS))}"
        )
    for required in ("id", "amqp"):
        if required not in merged:
            raise ConfigError(f"option {required!r} is required (--{required} or in the file)")
    values: dict[str, Any] = {}
    for name, raw in merged.items():
        field_name, convert, allowed = OPTIONS[name]
        if name in ("amqp", "amqps", "http", "https", "listen", "mqtt", "mqtts"):
            values[field_name] = parse_hostport(raw, name)
            continue
        if name in ("connect", "uplinks"):
            items = [raw] if isinstance(raw, str) else list(raw)
            values[field_name] = tuple(parse_hostport(x, name) for x in items)
            continue
        try:
            values[field_name] = convert(raw)
        except (ValueError, TypeError):
            raise ConfigError(f"{name}: {raw!r} is not allowed; use {allowed}") from None
    config = RouterConfig(**values)
    if config.peered and not (config.cluster_secret or config.cluster_secret_file):
        raise ConfigError("a router with peers (listen or connect) needs cluster-secret or "
                          "cluster-secret-file: the same secret on every router of the cluster")
    if config.peered and not config.secret():
        raise ConfigError("the cluster secret is empty; put a long random string in "
                          "cluster-secret-file (the same on every router)")
    if config.peer_tls() is None and config.peer_tls_required and config.peered:
        raise ConfigError("peer-tls-required: this router links to other routers, so it "
                          "needs peer-tls-cert, peer-tls-key and peer-tls-ca")
    config.client_tls()  # likewise for the client listeners
    return config

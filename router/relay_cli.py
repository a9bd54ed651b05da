"""`exactmesh relay`: a relay agent for clients that are only sometimes connected
(docs/relay.md, seed 000).

    exactmesh relay --id R --mesh H1:P1,H2:P2 --amqp HOST:PORT [--mqtt HOST:PORT] --store DIR
        --cluster-secret-file FILE [--registration SECONDS] [--http HOST:PORT] [...]

A relay is the same node as a router (engine, edges, relay store), in a role of its own:
- it keeps one link into the mesh, to the first router of `--mesh` that answers, and the
  next after a loss; it accepts no router links, so it is a leaf and carries no traffic
  between routers;
- its store (`--store`) is required: what arrives for its clients while they are away is on
  disk, the mesh is told "stored", and their publishers move on;
- a client stays registered for `--registration` seconds while away (a day by default)
  unless it asks for its own time (an AMQP durable terminus' timeout, an MQTT Session
  Expiry Interval).

`--mesh` names the routers' mesh addresses (their `--listen`), not their AMQP ports: the
relay speaks the mesh protocol to them, because "stored" and the resolution of copies in
doubt are mesh items (docs/mesh-protocol.md). It needs the cluster's secret like a router.
"""

from __future__ import annotations

import argparse

from .config import OPTIONS, ConfigError, RouterConfig, build
from .security_options import add_security_options, security_fields

DEFAULT_REGISTRATION = 86_400.0  # a day: a laptop offline overnight is still owed its messages


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "relay", help="run a relay agent for clients that are only sometimes connected",
        description="Run an exactmesh relay: a leaf of the mesh with a durable store, for "
        "AMQP and MQTT clients that are only sometimes connected (docs/relay.md).")
    p.add_argument("--id", required=True, help="this relay's id in the mesh")
    p.add_argument("--mesh", required=True, metavar="HOST:PORT,...",
                   help="routers' mesh addresses (their --listen), tried in order: one link "
                   "at a time, the next after a loss")
    p.add_argument("--amqp", required=True, metavar="HOST:PORT",
                   help="where to accept AMQP 1.0 clients")
    p.add_argument("--mqtt", metavar="HOST:PORT", help="where to accept MQTT clients")
    p.add_argument("--store", required=True, metavar="DIR",
                   help="the relay store's directory (created if missing)")
    p.add_argument("--registration", type=float, metavar="SECONDS",
                   help="how long a client that went away stays registered, unless it asks "
                   f"for its own time (default {DEFAULT_REGISTRATION:g})")
    p.add_argument("--waiting-limit", type=int, metavar="N",
                   help="deliveries that may wait in the store at once before publishers "
                   "wait too (default 100000)")
    p.add_argument("--publisher-window", type=int, metavar="N",
                   help="messages one publisher link may have in the relay (default 256)")
    p.add_argument("--max-message-size", type=int, metavar="BYTES",
                   help="largest message accepted (default 1048576)")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve delivery status and health as JSON over HTTP (default off)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--cluster", help="the cluster's name (default exactmesh)")
    p.add_argument("--cluster-secret", metavar="SECRET",
                   help="the cluster's shared secret (prefer the file)")
    p.add_argument("--cluster-secret-file", metavar="FILE", help="file holding the secret")
    p.add_argument("--peer-tls-cert", metavar="FILE", help="as for a router")
    p.add_argument("--peer-tls-key", metavar="FILE", help="as for a router")
    p.add_argument("--peer-tls-ca", metavar="FILE", help="as for a router")
    p.add_argument("--peer-tls-required", action="store_const", const=True, default=None,
                   help="as for a router: refuse to start without --peer-tls-*")
    add_security_options(p)  # its clients log in and use TLS as a router's do


def relay_config(args: argparse.Namespace) -> RouterConfig:
    """The node configuration of a relay: its flags under the router's option names."""
    mesh = [part.strip() for part in args.mesh.split(",") if part.strip()]
    for item in mesh:
        if "://" in item:
            raise ConfigError(
                f"--mesh: {item!r} is a URL; give the routers' mesh addresses as HOST:PORT "
                "(each router's --listen): a relay joins the mesh as a leaf router")
    if not mesh:
        raise ConfigError("--mesh: give at least one router's mesh address (HOST:PORT)")
    flags = {
        "id": args.id, "amqp": args.amqp, "mqtt": args.mqtt, "relay-store": args.store,
        "uplinks": mesh,
        "reconnect-timeout": DEFAULT_REGISTRATION if args.registration is None
        else args.registration,
        "relay-waiting-limit": args.waiting_limit, "publisher-window": args.publisher_window,
        "max-message-size": args.max_message_size, "http": args.http,
        "log-level": args.log_level, "cluster": args.cluster,
        "cluster-secret": args.cluster_secret, "cluster-secret-file": args.cluster_secret_file,
        "peer-tls-cert": args.peer_tls_cert, "peer-tls-key": args.peer_tls_key,
        "peer-tls-ca": args.peer_tls_ca, "peer-tls-required": args.peer_tls_required,
    }
    flags.update(_security_flags(args))
    if not args.store:
        raise ConfigError("--store: a relay needs a directory for its store")
    return build({}, flags)


def _security_flags(args: argparse.Namespace) -> dict[str, object]:
    """The client-security flags given (router/security_options.py), by their option names."""
    fields = security_fields()
    return {name: getattr(args, field, None) for name, (field, _, _) in OPTIONS.items()
            if field in fields}


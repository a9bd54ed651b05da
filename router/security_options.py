"""The command-line options of client security (docs/security.md), shared by `exactmesh
router` and `exactmesh relay`: a relay's client listeners are secured like a router's."""

from __future__ import annotations

import argparse


def add_security_options(p: argparse.ArgumentParser) -> None:
    """Add the group of client-security flags; their names are the TOML keys (router/config.py
    OPTIONS), so `vars(args)` carries them under the same fields."""
    security = p.add_argument_group("clients' security (docs/security.md)")
    security.add_argument("--password-file", metavar="FILE",
                          help="users and password hashes in mosquitto's password_file format "
                          "(made with mosquitto_passwd); MQTT clients log in with them")
    security.add_argument("--acl-file", metavar="FILE",
                          help="per-topic rules in mosquitto's acl_file format; what it does "
                          "not allow is refused")
    security.add_argument("--allow-anonymous", action="store_const", const=True, default=None,
                          help="let clients without a user name connect although a password "
                          "or ACL file is given (they get the ACL file's anonymous rules)")
    security.add_argument("--allow-plain-without-tls", action="store_const", const=True,
                          default=None, help="offer AMQP SASL PLAIN (user name and password in "
                          "clear) on connections without TLS too")
    security.add_argument("--max-connections", type=int, metavar="N",
                          help="AMQP and MQTT client connections served at once; more are "
                          "closed at once (default 0: no limit)")
    security.add_argument("--max-connections-per-host", type=int, metavar="N",
                          help="client connections from one IP address (default 0: no limit)")
    security.add_argument("--max-connections-per-user", type=int, metavar="N",
                          help="client connections logged in as one user (default 0: no "
                          "limit)")
    security.add_argument("--amqps", metavar="HOST:PORT",
                          help="where to accept AMQP clients over TLS (with --tls-cert and "
                          "--tls-key)")
    security.add_argument("--mqtts", metavar="HOST:PORT",
                          help="where to accept MQTT clients over TLS (with --tls-cert and "
                          "--tls-key)")
    security.add_argument("--https", metavar="HOST:PORT",
                          help="serve the status endpoint over TLS (with --tls-cert and "
                          "--tls-key)")
    security.add_argument("--tls-cert", metavar="FILE",
                          help="PEM certificate chain of the client TLS listeners (read "
                          "again on SIGHUP)")
    security.add_argument("--tls-key", metavar="FILE", help="PEM private key of that chain")
    security.add_argument("--tls-ca", metavar="FILE",
                          help="PEM CA certificates that sign clients' certificates")
    security.add_argument("--tls-client-cert", choices=["none", "optional", "required"],
                          help="whether clients must present a certificate signed by --tls-ca "
                          "(default none)")
    security.add_argument("--tls-identity-as-username", action="store_const", const=True,
                          default=None, help="a client certificate's common name is its user "
                          "name, no password asked (MQTT; AMQP with SASL EXTERNAL)")


def security_fields() -> frozenset[str]:
    """The configuration fields these flags set (`args.<field>` after parsing)."""
    p = argparse.ArgumentParser(add_help=False)
    add_security_options(p)
    return frozenset(action.dest for action in p._actions)

"""The `exactmesh` command.

    exactmesh router --id A --amqp 127.0.0.1:5672 [--config router.toml] [options]
    exactmesh relay --id R --mesh HOST:PORT,... --amqp HOST:PORT --store DIR [options]
                                     (a relay agent: router/relay_cli.py)
    exactmesh demo [--messages N] [--secure]
    exactmesh status delivery ID --http HOST:PORT      (also: status deliveries, status health)
    exactmesh stat --http HOST:PORT [--mesh] [--json]  (router/stat_cli.py)
    exactmesh pub --url URL --topic T --id NAME --state-dir DIR [--count N]   (router/pubsub_cli.py)
    exactmesh sub --url URL --topic FILTER --id NAME --state-dir DIR [--count N]
    exactmesh request --relay URL --topic T --id NAME --state-dir DIR [--body B | --collect]
    exactmesh accel build|status     (the optional compiled build: router/accel.py)
    exactmesh sim --seeds A-B [--faults all|none] [--routers N]
        [--workload failover|random|mqtt|relay]
    exactmesh sim --spec SPEC [-v]   (the cluster simulation: router/sim/command.py)

Errors in the command line or the configuration, and a port already in use, print one line
naming the problem and exit with status 2. `status` prints the router's JSON answer and exits
0, or 1 when the router does not track that delivery, or 2 when it cannot be asked.
"""

from __future__ import annotations

import argparse
import gc
import json
import ssl
import sys
from collections.abc import Sequence
from urllib.parse import quote

import trio

from . import logs
from .config import (
    OPTIONS,
    ConfigError,
    ListenError,
    RouterConfig,
    build,
    load_toml,
    parse_hostport,
)
from .security_options import add_security_options

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2


def _router_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "router",
        help="run a router",
        description="Run one exactmesh router. Every option can also be set in the TOML "
        "file given with --config (same names, e.g. max-message-size = 65536); flags win.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML file with router options")
    p.add_argument("--id", help="this router's id in the mesh (required)")
    p.add_argument("--amqp", metavar="HOST:PORT", help="where to accept AMQP 1.0 clients")
    p.add_argument("--no-subscribers", choices=["accept", "reject"],
                   help="outcome for a message no subscriber matches (default accept)")
    p.add_argument("--max-message-size", type=int, metavar="BYTES",
                   help="largest message accepted (default 1048576)")
    p.add_argument("--publisher-window", type=int, metavar="N",
                   help="messages one publisher link may have in the router (default 256)")
    p.add_argument("--max-delivery-attempts", type=int, metavar="N",
                   help="deliveries to one subscriber before it counts as failed (default 5)")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="AMQP idle timeout for client connections (default 16)")
    p.add_argument("--reconnect-timeout", type=float, metavar="SECONDS",
                   help="how long a warm (durable) subscriber that went away stays "
                   "subscribed when its terminus sets no timeout (default 30)")
    p.add_argument("--resume-timeout", type=float, metavar="SECONDS",
                   help="how long a resumed subscriber's unknown unsettled deliveries hold "
                   "back newer ones (default 5)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="run N router processes sharing these ports, in a mesh of their own "
                   "over loopback, for N cores (router/workers.py; default 1)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"],
                   help="json: one JSON object per line (time, level, logger, router, "
                   "message) for log shippers (default text)")
    p.add_argument("--topic-metrics", type=int, metavar="N",
                   help="per-topic counters in /metrics for the first N topics, the rest "
                   "together as (other) (default 0: none)")
    p.add_argument("--stuck-after", type=float, metavar="SECONDS",
                   help="a delivery undecided this long is logged, naming who it waits for, "
                   "and counted as stuck in /metrics (default 10)")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve delivery status and health as JSON over HTTP (default off)")
    p.add_argument("--mqtt", metavar="HOST:PORT",
                   help="where to accept MQTT 3.1.1 and 5.0 clients (default off)")
    p.add_argument("--relay-store", metavar="DIR",
                   help="a relay store in DIR: what arrives for persistent MQTT sessions and "
                   "durable AMQP subscribers that are away is stored there, and their "
                   "publishers' windows move on (docs/relay.md; default off)")
    p.add_argument("--relay-waiting-limit", type=int, metavar="N",
                   help="deliveries that may wait in the relay store at once before "
                   "publishers wait too (default 100000)")
    add_security_options(p)
    mesh = p.add_argument_group("mesh (other routers)")
    mesh.add_argument("--listen", metavar="HOST:PORT", help="where peer routers connect")
    mesh.add_argument("--connect", metavar="HOST:PORT", action="append",
                      help="a peer router to connect to (repeatable)")
    mesh.add_argument("--cluster", help="cluster name; routers of other clusters are refused")
    mesh.add_argument("--cluster-secret", metavar="SECRET",
                      help="shared secret proving cluster membership (prefer the file)")
    mesh.add_argument("--cluster-secret-file", metavar="FILE", help="file holding the secret")
    mesh.add_argument("--link-costs", metavar="ID=COST,...",
                      help="routing cost of the link to each peer (default 1)")
    mesh.add_argument("--heartbeat", type=float, metavar="SECONDS",
                      help="a peer silent this long is dead (default 1)")
    mesh.add_argument("--unreachable-timeout", type=float, metavar="SECONDS",
                      help="subscribers on a router unreachable this long fail (default 30)")
    mesh.add_argument("--join-timeout", type=float, metavar="SECONDS",
                      help="after a start, wait this long to hear the mesh's subscriptions "
                      "from a peer before routing guaranteed messages (default: the "
                      "unreachable-timeout; 0: do not wait)")
    mesh.add_argument("--gossip-interval", type=float, metavar="SECONDS",
                      help="anti-entropy period (default 0.5)")
    mesh.add_argument("--peer-tls-cert", metavar="FILE",
                      help="PEM certificate chain for mutual TLS on peer links (with "
                      "--peer-tls-key and --peer-tls-ca; default: no TLS)")
    mesh.add_argument("--peer-tls-key", metavar="FILE", help="PEM private key of that certificate")
    mesh.add_argument("--peer-tls-ca", metavar="FILE",
                      help="PEM CA certificates; peers must present a certificate they signed")
    mesh.add_argument("--peer-tls-required", action="store_const", const=True, default=None,
                      help="refuse to start with peers but without peer TLS")


def _demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run three local routers in a line with publishers and "
                       "subscribers, and print a delivery report")
    p.add_argument("--messages", type=int, default=2000, help="messages to publish in all")
    p.add_argument("--secure", action="store_true",
                   help="run the routers secured (TLS for clients and peers, users, per-topic "
                   "rules; docs/security.md) with every client logging in, and show refused "
                   "log-ins and publishes (needs the trustme package)")


def _status_parser(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group(required=True)
    where.add_argument("--http", metavar="HOST:PORT",
                       help="the router's status endpoint (its --http option)")
    where.add_argument("--https", metavar="HOST:PORT",
                       help="the router's status endpoint over TLS (its --https option)")
    common.add_argument("--cacert", metavar="FILE",
                        help="with --https: the CA that signed the router's certificate "
                        "(default: the system's)")
    p = sub.add_parser("status", help="ask a router about deliveries and its health",
                       description="Ask a router's status endpoint (router option --http) and "
                       "print its JSON answer.")
    actions = p.add_subparsers(dest="action", required=True)
    d = actions.add_parser("delivery", parents=[common],
                           help="who succeeded, failed and is still pending for one delivery")
    d.add_argument("id", nargs="?", help="the delivery id: the delivery tag subscribers "
                   "receive (32 hex characters); or name it by what the publisher knows:")
    d.add_argument("--message-id", metavar="ID",
                   help="the message-id the publisher set (the SDK's: NAME:SEQ)")
    d.add_argument("--publisher", metavar="CONTAINER",
                   help="the publisher's container-id (with --link and --tag)")
    d.add_argument("--link", metavar="NAME", help="the publisher's link name (the SDK's: "
                   "pub/NAME)")
    d.add_argument("--tag", metavar="TAG", help="the publisher's own delivery tag (the SDK's: "
                   "the sequence number)")
    actions.add_parser("deliveries", parents=[common],
                       help="the deliveries the router tracks now (at most 1000)")
    actions.add_parser("health", parents=[common],
                       help="clients, live records and counters")


def _accel_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accel", help="compile the per-message modules with mypyc, or say "
                       "whether a router here runs them compiled",
                       description="The optional compiled build (router/accel.py): `build` "
                       "compiles the modules on the per-message path with mypyc, in place; "
                       "`status` says whether a router started here would run them compiled.")
    p.add_argument("action", choices=["build", "status"])


def _sim_parser(sub: argparse._SubParsersAction) -> None:
    # Declared here, run by router/sim/command.py: importing router.sim decides the compiled
    # modules (router/accel.py), which must not happen for every command.
    p = sub.add_parser("sim", help="run the deterministic cluster simulation for a range of "
                       "seeds, or replay one run",
                       description="Run the whole-cluster simulation (router/sim): one run per "
                       "seed, quiet but for one line per failure with its replay command; exit "
                       "status 1 if a run failed. Or replay one run from its spec.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--seeds", metavar="A-B", help="the seeds to run, A to B inclusive (or A)")
    what.add_argument("--spec", metavar="SPEC",
                      help="replay one run: its spec as a failure prints it (or a seed N, fN, "
                      "mN)")
    p.add_argument("--faults", choices=["all", "none"],
                   help="all (default): every fault the workload draws; none: a clean network")
    p.add_argument("--workload", choices=["failover", "random", "mqtt", "relay"],
                   help="failover (default): clients that survive and move, warm subscribers, "
                   "crashes; random: the seed sweep's, without failover; mqtt: failover with "
                   "MQTT 5 devices among the clients")
    p.add_argument("--routers", type=int, metavar="N", help="routers in every run (2-16)")
    p.add_argument("--set", metavar="NAME=VALUE,...", dest="overrides",
                   help="other parameters for every run of the range, as a spec names them "
                   "(say restarts=3,drop=0.05)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="a line for every run; with --spec, the whole trace")
    p.add_argument("--fingerprint", action="store_true",
                   help="also print a digest of every run's events and frames")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="exactmesh", description="exactly-once pub-sub mesh")
    sub = p.add_subparsers(dest="command", required=True)
    _router_parser(sub)
    from .relay_cli import add_parser as add_relay_parser

    add_relay_parser(sub)
    _demo_parser(sub)
    _status_parser(sub)
    _accel_parser(sub)
    _sim_parser(sub)
    from .pubsub_cli import add_parsers

    add_parsers(sub)  # pub, sub
    from .stat_cli import add_parser as add_stat_parser

    add_stat_parser(sub)
    return p


def router_config(args: argparse.Namespace) -> RouterConfig:
    file_options = load_toml(args.config) if args.config else {}
    flags = {name: getattr(args, field, None) for name, (field, _, _) in OPTIONS.items()}
    return build(file_options, flags)


# The garbage collector's first threshold (Python's default 700 allocations). A router
# allocates a few dozen short-lived container objects per message, which reference counting
# frees: collecting every 700 of them found nothing and cost 4-6% of the router's CPU per MQTT
# QoS 2 message (A/B, benchmarks/mqtt.py clients, medians of 6-8). At 20,000, a collection
# still runs every few milliseconds under load, over at most that many young objects.
GC_THRESHOLD_0 = 20_000


def tune_gc() -> None:
    """For a long-running router process: what is loaded at start is never garbage (freeze
    keeps later full collections from walking it again), and young collections are rarer."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])


def run_router(config: RouterConfig) -> int:
    if config.workers > 1:
        from .workers import run_workers

        return run_workers(config, run_router)
    from .runtime.node import Node

    tune_gc()
    logs.configure(config.log_level, config.log_format, config.id)
    from relay.store import StoreError

    from .security.policy import PolicyError

    try:
        node = Node(config)
    except (StoreError, PolicyError) as err:  # --relay-store: missing, not writable, in
        # use, other version; --password-file / --acl-file: missing or malformed
        print(f"exactmesh: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        trio.run(node.run)
    except (OSError, BaseExceptionGroup) as exc:
        err = _listen_error(exc)
        if err is None:
            raise
        print(f"exactmesh: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _listen_error(exc: BaseException) -> ListenError | None:
    """The bind failure inside whatever exception groups trio wrapped it in."""
    if isinstance(exc, ListenError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _listen_error(inner)
            if found is not None:
                return found
    return None


def run_status(args: argparse.Namespace) -> int:
    """`exactmesh status ...`: one GET to the router's status endpoint."""
    from .runtime.status import StatusError, fetch

    try:
        tls = None
        if args.https:
            where = parse_hostport(args.https, "--https")
            tls = ssl.create_default_context(cafile=args.cacert)
        else:
            where = parse_hostport(args.http, "--http")
        path = {"delivery": _delivery_path(args) if args.action == "delivery" else "",
                "deliveries": "/deliveries", "health": "/health"}[args.action]
        code, body = fetch(where, path, tls=tls)
    except (ConfigError, StatusError, OSError) as err:  # (OSError: an unreadable --cacert)
        print(f"exactmesh: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if code == 200 or (code == 404 and args.action == "delivery"):
        print(json.dumps(body, indent=2))
        return 0 if code == 200 else EXIT_NOT_FOUND
    print(f"exactmesh: error: the router at {where} answered {code}: "
          f"{body.get('error', body)}", file=sys.stderr)
    return EXIT_USAGE


def _delivery_path(args: argparse.Namespace) -> str:
    """The status endpoint's path for `status delivery`: by id, message-id or publisher."""
    by_publisher = [args.publisher, args.link, args.tag]
    ways = [args.id is not None, args.message_id is not None, any(by_publisher)]
    if sum(ways) != 1 or (any(by_publisher) and not all(by_publisher)):
        raise ConfigError("status delivery: give the delivery id, or --message-id, or "
                          "--publisher with --link and --tag (one of the three)")
    if args.id is not None:
        return f"/deliveries/{quote(args.id, safe='')}"
    if args.message_id is not None:
        return f"/deliveries?message-id={quote(args.message_id, safe='')}"
    return (f"/deliveries?publisher={quote(args.publisher, safe='')}"
            f"&link={quote(args.link, safe='')}&tag={quote(args.tag, safe='')}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("router", "relay", "demo"):
        from . import accel

        accel.guard()  # before the compiled modules are imported (router/accel.py)
    if args.command in ("router", "relay"):
        from .relay_cli import relay_config

        try:
            config = (router_config if args.command == "router" else relay_config)(args)
        except ConfigError as err:
            print(f"exactmesh: error: {err}", file=sys.stderr)
            return EXIT_USAGE
        return run_router(config)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(messages=args.messages, secure=args.secure)
    if args.command == "status":
        return run_status(args)
    if args.command == "stat":
        from .stat_cli import run as run_stat

        return run_stat(args)
    if args.command == "accel":
        from . import accel

        if args.action == "build":
            return accel.build()
        print(accel.describe())
        return 0
    if args.command == "sim":
        from .sim.command import main as run_sim

        return run_sim(args)
    if args.command in ("pub", "sub", "request"):
        from .pubsub_cli import run

        return run(args)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

"""`exactmesh stat`: a router's view of itself and the mesh, for operators (the skstat of
this mesh). It asks the router's status endpoint (`GET /stat`, router/runtime/stat.py).

    exactmesh stat --http 127.0.0.1:8080            # counters, connections, links, routes,
                                                    # subscriptions, stuck deliveries
    exactmesh stat --http 127.0.0.1:8080 --mesh     # the same from every router it can reach
    exactmesh stat --http 127.0.0.1:8080 --json     # for scripts

With `--mesh` it asks each router at the status endpoint that router advertises in the mesh
(its own `--http` or `--https` as configured: bind it to an address the others can reach).
Exit status 0; 2 when the first router cannot be asked; with `--mesh`, routers that cannot be
asked are listed with the error, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
from typing import Any

from .config import ConfigError, parse_hostport

EXIT_SOME_FAILED = 1
EXIT_USAGE = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stat", help="a router's counters, clients, links, routes, "
                       "subscriptions and stuck deliveries (with --mesh: every router's)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--http", metavar="HOST:PORT", help="the router's status endpoint")
    where.add_argument("--https", metavar="HOST:PORT", help="... over TLS")
    p.add_argument("--cacert", metavar="FILE", help="with --https: the CA of its certificate")
    p.add_argument("--mesh", action="store_true",
                   help="also ask every other router, at the endpoint each advertises")
    p.add_argument("--json", action="store_true", help="print JSON (a list with --mesh)")


def run(args: argparse.Namespace) -> int:
    from .runtime.status import StatusError, fetch

    tls = None
    try:
        if args.https:
            where = parse_hostport(args.https, "--https")
            tls = ssl.create_default_context(cafile=args.cacert)
        else:
            where = parse_hostport(args.http, "--http")
        code, first = fetch(where, "/stat", tls=tls)
    except (ConfigError, StatusError, OSError) as err:
        print(f"exactmesh: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if code != 200:
        print(f"exactmesh: error: the router at {where} answered {code}: "
              f"{first.get('error', first)}", file=sys.stderr)
        return EXIT_USAGE
    views = [first]
    if args.mesh:
        for router, info in sorted(first.get("routers", {}).items()):
            if router == first["router"]:
                continue
            views.append(_ask(router, info.get("http"), tls, fetch, StatusError))
    if args.json:
        print(json.dumps(views if args.mesh else first, indent=2))
    else:
        print("\n\n".join(render(v) for v in views))
    return EXIT_SOME_FAILED if any("error" in v for v in views) else 0


def _ask(router: str, url: str | None, tls: ssl.SSLContext | None, fetch: Any,
         error: type[Exception]) -> dict[str, Any]:
    if not url:
        return {"router": router, "error": "it advertises no status endpoint (start it with "
                "--http or --https)"}
    scheme, _, rest = url.partition("://")
    try:
        where = parse_hostport(rest, "advertised endpoint")
        code, body = fetch(where, "/stat", tls=tls if scheme == "https" else None)
    except (ConfigError, OSError, error) as err:
        return {"router": router, "error": str(err)}
    if code != 200:
        return {"router": router, "error": f"{url} answered {code}"}
    return body


def render(v: dict[str, Any]) -> str:
    """One router's view as text: sections like skstat's."""
    if "error" in v:
        return f"Router {v['router']}: cannot ask it: {v['error']}"
    lines = [f"Router {v['router']} (pid {v['pid']})", "", "Counters"]
    counters = {**v["counters"], **v["gauges"]}
    lines += [f"  {name:<22} {value:>12,}" for name, value in counters.items()]
    if v["refusals"]:
        lines += ["", "Refusals"] + [f"  {k:<22} {n:>12,}" for k, n in v["refusals"].items()]
    lines += ["", "Connections"] + (
        [f"  {c['protocol']:<6} {c['peer'] or '?':<24} user {c['user'] or '-'}"
         for c in v["connections"]] or ["  (none)"])
    lines += ["", "Links"] + ([_link(x) for x in v["links"]] or ["  (none)"])
    if v["routers"]:
        lines += ["", "Routers (as this one routes)",
                  f"  {'router':<16} {'next hop':<16} {'cost':>11}  link  status endpoint"]
        for router, r in v["routers"].items():
            link = "-" if "link_up" not in r else ("up" if r["link_up"] else "down")
            cost = "unreachable" if r["cost"] is None else r["cost"]
            lines.append(f"  {router:<16} {r['next_hop'] or '-':<16} {cost:>11}  {link:<4}  "
                         f"{r['http'] or '-'}")
    lines += ["", "Subscriptions (router: key filter)"]
    for router, subs in v["subscriptions"].items():
        lines += [f"  {router or '(away)'}: {s['key']} {s['filter']}" for s in subs]
    lines += ["", f"Stuck deliveries (undecided over {v['stuck_after']:g} s)"] + (
        [f"  {s['id']} {s['address']} {s['waited_s']:.1f} s, origin {s['origin']}, waiting "
         f"for {', '.join(s['pending']) or 'nobody named'}" for s in v["stuck"]] or ["  (none)"])
    return "\n".join(lines)


def _link(x: dict[str, Any]) -> str:
    if x["role"] == "publisher":
        return (f"  pub  {x['label']:<40} {x['address']:<20} {x['in_router']} in router"
                f"{' (window full)' if x['at_window'] else ''}"
                f"{'' if x['once'] else ', at least once'}")
    return (f"  sub  {x['label']:<40} {x['filter']:<20} credit {x['credit']}, queued "
            f"{x['queued']}, unsettled {x['unsettled']}{', warm' if x['warm'] else ''}")


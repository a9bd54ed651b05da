"""`python -m tests.hosts SCENARIO [--seed N] [--cycles K] [--hosts N]`: build the namespace
hosts, run the scenario with its nemesis, check the history, tear everything down. Exit 0 if
the checker passes, 1 if it fails (the summary then says how to replay the run), 2 if the
test bed cannot be built here. docs/testbed.md describes the scenarios and the checks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.hosts.nemesis import KINDS, MORE_KINDS
from tests.hosts.netns import NetnsError, cleanup_stale
from tests.hosts.scenarios import SCENARIOS, Options, run


def parse(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts", description=__doc__)
    parser.add_argument("scenario", choices=[*SCENARIOS, "cleanup"],
                        help="a scenario, or `cleanup` to remove what killed runs left")
    parser.add_argument("--seed", type=int, default=1, help="the nemesis' schedule")
    parser.add_argument("--cycles", type=int, default=2, help="rounds of every fault kind")
    parser.add_argument("--hosts", type=int, default=3,
                        help="router hosts (each with a client host)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="messages per second per publisher")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"fault kinds, comma-separated (default {','.join(KINDS)})")
    parser.add_argument("--templates", type=Path, default=Options.templates,
                        help="a directory of router TOML files (and `acl`) to start from")
    parser.add_argument("--topology", choices=["line", "ring", "star", "full"],
                        help="peer links (default: the templates' `connect` lines)")
    parser.add_argument("--mqtt", action="store_true",
                        help="MQTT clients too (paho, QoS 2 over TLS) on every client host")
    parser.add_argument("--relay", action="store_true",
                        help="a relay agent on c1 with a sometimes connected subscriber r1")
    parser.add_argument("--spark", action="store_true",
                        help="a Spark streaming job (local mode) publishing through the "
                        "exactmesh data source on the last client host")
    parser.add_argument("--spark-rate", type=float, default=5.0,
                        help="rows per second of the Spark stream (one batch a second)")
    parser.add_argument("--unreachable-timeout", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Options.out,
                        help="where the run's JSON file goes")
    args = parser.parse_args(argv)
    if args.hosts < 2:
        parser.error("--hosts: at least 2")
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS) - set(MORE_KINDS)
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}")
    return Options(scenario=args.scenario, seed=args.seed, cycles=args.cycles,
                   routers=args.hosts, rate=args.rate, kinds=kinds, templates=args.templates,
                   topology=args.topology, unreachable_timeout=args.unreachable_timeout,
                   mqtt=args.mqtt, relay=args.relay, spark=args.spark,
                   spark_rate=args.spark_rate, out=args.out)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    try:
        if options.scenario == "cleanup":
            removed = cleanup_stale()
            print(f"removed {len(removed)}: {' '.join(removed)}" if removed else "nothing left")
            return 0
        report = run(options)
    except NetnsError as err:
        print(f"cannot build the test bed: {err}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

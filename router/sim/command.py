"""`exactmesh sim`: the cluster simulation (router/sim/world.py) for a range of seeds, or one
run replayed from its spec.

    exactmesh sim --seeds 0-999 [--faults all|none] [--workload failover|random|mqtt|relay]
        [--routers N] [--set NAME=VALUE,...]
    exactmesh sim --spec 'seed=…,routers=…,…' [-v]

A range prints nothing for a run that passes and one line for each that fails, what broke and
the command that replays it exactly, then `sim: N runs, M failed`; the exit status is 1 if a
run failed, else 0 (2: a bad command line). The workload `failover` is
`Params.failover_from_seed` (clients that survive and move, warm subscribers, crashes,
dropped client connections, partitions, lost, duplicated and reordered frames), `random` is
`Params.from_seed` (the seed sweep's: no failover), `mqtt` is `Params.mqtt_from_seed` (the
failover workload with MQTT 5 devices among the clients, router/sim/mqtt.py), `relay` is
`Params.relay_from_seed` (the failover workload with a relay store in every router,
router/sim/relay.py); `--faults none`
runs any of them on a clean network (nothing dropped, duplicated or reordered, no partition,
crash or dropped client connection). `--spec` replays one run and prints its report: on
failure the parameters, the replay command and the last events (`-v`: the whole trace, also
of a run that passes; with a range, `-v` prints a line for every run).
`--fingerprint` adds a line with a digest of every run's events and frames, which must be the
same in every process and on every machine for the same code and seeds.

The command line is parsed in router/cli.py: importing this package decides the compiled
modules (router/accel.py), which the other commands must not have done for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import time
from collections.abc import Iterable

from .world import NAMES, Params, SimFailure, World, replay_command

EXIT_FAILED = 1
EXIT_USAGE = 2
WHAT_MAX = 300  # characters of what broke, in a range's one line per failure
# What `--faults none` turns off: every fault that either workload draws.
CLEAN = dict(drop=0.0, dup=0.0, reorder=0.0, partitions=0, restarts=0, drop_client=0)


class UsageError(ValueError):
    pass


def parse_seeds(text: str) -> range:
    """`A-B` (inclusive) or `A`: non-negative integers."""
    first, dash, last = text.strip().partition("-")
    try:
        a = int(first)
        b = int(last) if dash else a
    except ValueError:
        raise UsageError(f"--seeds: {text!r} is not A-B or A (non-negative integers)") from None
    if a < 0 or b < a:
        raise UsageError(f"--seeds: {text!r} is not a range A-B with 0 <= A <= B")
    return range(a, b + 1)


def parse_overrides(text: str | None) -> dict[str, object]:
    """`--set name=value,...`: parameters as a spec writes them (their kinds from Params)."""
    if not text:
        return {}
    kinds = {f.name: type(f.default) for f in dataclasses.fields(Params)}
    out: dict[str, object] = {}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or name not in kinds or name == "seed":
            known = ", ".join(sorted(k for k in kinds if k != "seed"))
            raise UsageError(f"--set: {part.strip()!r} is not NAME=VALUE with NAME one of: "
                             f"{known}")
        try:
            out[name] = kinds[name](value)
        except ValueError:
            kind = kinds[name].__name__
            raise UsageError(f"--set: {name}={value!r} is not of kind {kind}") from None
    return out


def params_for(seed: int, workload: str = "failover", faults: str = "all",
               routers: int | None = None, overrides: dict[str, object] | None = None) -> Params:
    """The parameters of one run of a range."""
    if workload == "failover":
        params = Params.failover_from_seed(seed)
    elif workload == "random":
        params = Params.from_seed(seed)
    elif workload == "mqtt":
        params = Params.mqtt_from_seed(seed)
    elif workload == "relay":
        params = Params.relay_from_seed(seed)
    else:
        raise UsageError(f"--workload: {workload!r} is not failover, random, mqtt or relay")
    if faults == "none":
        params = dataclasses.replace(params, **CLEAN)
    elif faults != "all":
        raise UsageError(f"--faults: {faults!r} is not all or none")
    if routers is not None:
        if not 2 <= routers <= len(NAMES):
            raise UsageError(f"--routers: {routers} is not in 2..{len(NAMES)}")
        params = dataclasses.replace(params, routers=routers)
    if overrides:
        params = dataclasses.replace(params, **overrides)  # type: ignore[arg-type]
    return params


def failure_line(seed: int, failure: SimFailure) -> str:
    """One line: the seed, what broke (the failure's first line, or its heading and first
    item) and the replay command."""
    lines = failure.what.splitlines() or ["?"]
    what = lines[0]
    if what.endswith(":") and len(lines) > 1:  # a heading, then the problems one a line
        more = len(lines) - 2
        what += " " + lines[1].strip() + (
            f" (and {more} more line{'s' if more > 1 else ''})" if more else "")
    if len(what) > WHAT_MAX:
        what = what[:WHAT_MAX - 1] + "…"
    return f"seed {seed}: {what}; replay: {replay_command(failure.params)}"


def run_range(runs: Iterable[tuple[int, Params]], *, verbose: bool = False,
              fingerprint: bool = False, out=None) -> int:
    """Run each (seed, params); print a line per failure and the totals. The exit status."""
    out = out or sys.stdout
    digest = hashlib.blake2b(digest_size=16)
    count = failed = 0
    try:
        for seed, params in runs:
            count += 1
            world = World(params)
            try:
                world.run()
            except SimFailure as failure:
                failed += 1
                print(failure_line(seed, failure), file=out, flush=True)
            else:
                if verbose:
                    print(f"seed {seed}: ok: {world.summary()}", file=out, flush=True)
            digest.update(f"{seed} {world.fingerprint()}\n".encode())
    except KeyboardInterrupt:
        print(f"sim: interrupted after {count} runs, {failed} failed", file=out)
        return 130
    if fingerprint:
        print(f"sim: fingerprint {digest.hexdigest()}", file=out)
    print(f"sim: {count} runs, {failed} failed", file=out)
    return EXIT_FAILED if failed else 0


def replay(params: Params, *, verbose: bool = False, fingerprint: bool = False,
           out=None) -> int:
    """One run, with its whole report: 0 if it passed, 1 if it failed (2: impossible
    parameters)."""
    out = out or sys.stdout
    started = time.perf_counter()
    try:
        world = World(params, trace_lines=0 if verbose else None)
    except ValueError as err:  # parameters no world can have (say, too many routers)
        print(f"exactmesh: error: --spec: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        world.run()
    except SimFailure as failure:
        print(failure, file=out)
        if verbose and failure.trace:
            print("  whole trace:\n    " + "\n    ".join(failure.trace), file=out)
        if fingerprint:
            print(f"sim: fingerprint {world.fingerprint()}", file=out)
        return EXIT_FAILED
    print(f"ok in {time.perf_counter() - started:.2f} s: {world.summary()}", file=out)
    if verbose:
        print("\n".join(world.trace), file=out)
    if fingerprint:
        print(f"sim: fingerprint {world.fingerprint()}", file=out)
    return 0


def main(args: argparse.Namespace) -> int:
    """`exactmesh sim` with its parsed arguments (router/cli.py)."""
    try:
        if args.spec is not None:
            given = [f"--{name}" for name in ("faults", "workload", "routers", "overrides")
                     if getattr(args, name) is not None]
            given = ["--set" if g == "--overrides" else g for g in given]
            if given:
                raise UsageError(f"--spec replays the spec as it is: drop {' '.join(given)}")
            try:
                params = Params.parse(args.spec)
            except (ValueError, TypeError) as err:
                raise UsageError(f"--spec: {err}") from None
            return replay(params, verbose=args.verbose, fingerprint=args.fingerprint)
        seeds = parse_seeds(args.seeds)
        workload, faults = args.workload or "failover", args.faults or "all"
        overrides = parse_overrides(args.overrides)
        # A bad option fails before any run (a world that cannot be built, too).
        params_for(seeds[0], workload, faults, args.routers, overrides)
    except UsageError as err:
        print(f"exactmesh: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    runs = ((seed, params_for(seed, workload, faults, args.routers, overrides))
            for seed in seeds)
    return run_range(runs, verbose=args.verbose, fingerprint=args.fingerprint)

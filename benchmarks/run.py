"""Throughput/latency benchmark of one exactmesh router: `python -m benchmarks.run`.

For each scenario it starts a fresh router, attaches subscriber processes, starts
publisher processes (benchmarks.loadclient) on their signal, and measures the router's
CPU from /proc across the measured window. It prints one table row per scenario and
checks that every subscriber got every message exactly once.

    python -m benchmarks.run            # 1 pub -> 1 sub, 1 pub -> 4 subs, 20000 msgs each
    python -m benchmarks.run --quick    # a few seconds; a smoke check (exit 1 on failure)
    python -m benchmarks.run --publishers 2 --count 50000 --window 500

See also `python -m benchmarks.failover` (SDK clients across a router SIGKILL: time to the
first delivery and to full recovery) and `python -m benchmarks.sdk_throughput` (the client
SDK next to plain proton clients on one router).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.common import free_port

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
ROUTER_BOTTLENECK_UTIL = 0.90  # a single-threaded router at >= 90% of a core is saturated
READY_TIMEOUT_S = 30.0
ATTACH_TIMEOUT_S = 20.0
SUB_GRACE_S = 10.0  # after the publishers finish, how long subscribers get to finish
STOP_TIMEOUT_S = 5.0
MACHINE_SATURATED = 0.90  # all processes together use >= 90% of all cores


@dataclass
class Config:
    count: int
    window: int
    publishers: int
    subscribers: list[int]
    size: int
    deadline_s: float
    router_cmd: list[str]
    exact_filter: bool
    sasl: bool
    workdir: Path
    line: int = 0  # also run 1 -> 1 through a line of this many routers (0: no)
    router_args: tuple[str, ...] = ()  # extra options for every router
    workers: int = 1  # `exactmesh router --workers N` for the one-router scenarios
    guarantee: str = ""  # the publishers' link property guarantee ("": none sent)


class LineWatcher(threading.Thread):
    """Drains a child's output pipe (so it never blocks) and flags a keyword line."""

    def __init__(self, stream: IO[bytes], keywords: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.seen = {k: threading.Event() for k in keywords}
        self.counts = dict.fromkeys(keywords, 0)
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.start()

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            for keyword, event in self.seen.items():
                if keyword in line:
                    self.counts[keyword] += 1
                    event.set()


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    watcher: LineWatcher
    json_path: Path | None = None
    log_path: Path | None = None
    exit_code: int | None = None

    def wait_keyword(self, keyword: str, deadline: float) -> bool:
        """True once the keyword line was printed; False if the child died or time ran out."""
        event = self.watcher.seen[keyword]
        while time.monotonic() < deadline:
            if event.wait(0.05):
                return True
            if self.proc.poll() is not None:
                return event.is_set()
        return False

    def wait_count(self, keyword: str, n: int, deadline: float) -> bool:
        """True once the keyword was printed at least n times."""
        while time.monotonic() < deadline:
            if self.watcher.counts[keyword] >= n:
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def output_tail(self) -> str:
        lines = list(self.watcher.tail)
        if self.log_path and self.log_path.exists():
            lines += self.log_path.read_text(errors="replace").splitlines()[-20:]
        return "\n".join(f"    {x}" for x in lines[-25:])


@dataclass
class ScenarioResult:
    name: str
    n_pubs: int
    n_subs: int
    count: int
    pubs: list[dict[str, Any]] = field(default_factory=list)
    subs: list[dict[str, Any]] = field(default_factory=list)
    router_cpu_s: float | None = None
    routers: int = 1
    window_s: float = 0.0  # runner-measured: go .. every publisher done
    go_wall: float = 0.0
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- processes




def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn(
    name: str, argv: list[str], keywords: tuple[str, ...], log: Path | None, stdin: bool
) -> Child:
    """Client stderr goes to a file (read only on failure); stdout carries the keyword line."""
    if log is None:
        proc = _popen(argv, stdin, subprocess.STDOUT)
    else:
        with open(log, "wb") as err:
            proc = _popen(argv, stdin, err)
    assert proc.stdout is not None
    return Child(name, proc, LineWatcher(proc.stdout, keywords), log_path=log)


def _popen(argv: list[str], stdin: bool, stderr: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=child_env(),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def stop_child(child: Child) -> None:
    """SIGTERM by PID, then SIGKILL if it does not go; never by name."""
    proc = child.proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
    child.exit_code = proc.returncode
    for pipe in (proc.stdin, proc.stdout):
        if pipe:
            pipe.close()


def wait_exit(children: list[Child], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if all(c.proc.poll() is not None for c in children):
            return True
        time.sleep(0.02)
    return False


def proc_cpu_s(pid: int) -> float | None:
    """utime+stime of a live process (all threads), from /proc; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces; fields resume after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def router_command(explicit: str | None) -> list[str]:
    if explicit:
        return shlex.split(explicit)
    script = Path(sys.executable).with_name("exactmesh")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "router.cli"]  # before the package is (re)installed


def start_router(cfg: Config, port: int) -> Child:
    argv = [*cfg.router_cmd, "router", "--id", "bench", "--amqp", f"127.0.0.1:{port}",
            *cfg.router_args]
    if cfg.workers > 1:  # debug: the runner waits until each worker knows every subscriber
        argv += ["--workers", str(cfg.workers), "--log-level", "debug"]
    router = spawn("router", argv, ("ready", KNOWS), None, stdin=False)
    if not router.wait_keyword("ready", time.monotonic() + READY_TIMEOUT_S):
        stop_child(router)
        raise RuntimeError(
            f"router did not print 'ready' (waited up to {READY_TIMEOUT_S}s) "
            f"(exit {router.exit_code}): {shlex.join(argv)}\n{router.output_tail()}"
        )
    return router


KNOWS = "knows subscriber"


def start_line(cfg: Config, n: int) -> tuple[list[Child], int, int]:
    """Routers R0 - R1 - ... in a line; returns them, R0's and the last one's AMQP ports.
    R0 logs at debug level so that the runner can wait until gossip reached it."""
    amqp = [free_port() for _ in range(n)]
    mesh = [free_port() for _ in range(n)]
    routers = []
    for i in range(n):
        argv = [*cfg.router_cmd, "router", "--id", f"R{i}", "--amqp", f"127.0.0.1:{amqp[i]}",
                "--listen", f"127.0.0.1:{mesh[i]}", "--cluster-secret", "bench",
                *cfg.router_args]
        if i:
            argv += ["--connect", f"127.0.0.1:{mesh[i - 1]}"]
        else:
            argv += ["--log-level", "debug"]
        routers.append(spawn(f"R{i}", argv, ("ready", KNOWS), None, stdin=False))
    deadline = time.monotonic() + READY_TIMEOUT_S
    for r in routers:
        if not r.wait_keyword("ready", deadline):
            for x in routers:
                stop_child(x)
            raise RuntimeError(f"router {r.name} did not start:\n{r.output_tail()}")
    return routers, amqp[0], amqp[-1]


def client_argv(cfg: Config, port: int, role: str, json_path: Path) -> list[str]:
    argv = [sys.executable, "-m", "benchmarks.loadclient", role, "--url", f"127.0.0.1:{port}"]
    argv += ["--json-out", str(json_path)]
    return argv + ([] if cfg.sasl else ["--no-sasl"])


def start_subs(cfg: Config, port: int, n: int, tag: str) -> list[Child]:
    subs = []
    expect = cfg.count * cfg.publishers
    credit = max(500, 2 * cfg.window * cfg.publishers)  # credit must never be the limit
    filt = "bench/t0" if cfg.exact_filter else "bench/#"
    for i in range(n):
        path = cfg.workdir / f"{tag}-sub{i}.json"
        argv = client_argv(cfg, port, "sub", path)
        argv += ["--filter", filt, "--expect", str(expect), "--credit", str(credit)]
        argv += ["--deadline-s", str(cfg.deadline_s + ATTACH_TIMEOUT_S + SUB_GRACE_S)]
        child = spawn(f"sub{i}", argv, ("attached",), cfg.workdir / f"{tag}-sub{i}.log", False)
        child.json_path = path
        subs.append(child)
    return subs


def start_pubs(cfg: Config, port: int, tag: str) -> list[Child]:
    pubs = []
    for i in range(cfg.publishers):
        path = cfg.workdir / f"{tag}-pub{i}.json"
        argv = client_argv(cfg, port, "pub", path)
        argv += ["--topic", f"bench/t{i}", "--pub-id", str(i), "--count", str(cfg.count)]
        argv += ["--window", str(cfg.window), "--size", str(cfg.size), "--wait-go"]
        if cfg.guarantee:
            argv += ["--guarantee", cfg.guarantee]
        argv += ["--deadline-s", str(cfg.deadline_s + ATTACH_TIMEOUT_S)]
        child = spawn(
            f"pub{i}", argv, ("attached", "done"), cfg.workdir / f"{tag}-pub{i}.log", True
        )
        child.json_path = path
        pubs.append(child)
    return pubs


def wait_attached(children: list[Child]) -> None:
    deadline = time.monotonic() + ATTACH_TIMEOUT_S
    for c in children:
        if not c.wait_keyword("attached", deadline):
            raise RuntimeError(
                f"{c.name} did not attach within {ATTACH_TIMEOUT_S}s "
                f"(exit {c.proc.poll()}):\n{c.output_tail()}"
            )


def send_go(pubs: list[Child]) -> None:
    for p in pubs:
        assert p.proc.stdin is not None
        p.proc.stdin.write(b"go\n")
        p.proc.stdin.flush()


# ---------------------------------------------------------------- one scenario


def run_scenario(cfg: Config, n_subs: int, line: int = 1) -> ScenarioResult:
    """One scenario on one router, or (line > 1) publishers on the first router of a line
    and subscribers on the last, router CPU summed over the line."""
    name = f"{cfg.publishers} pub -> {n_subs} sub" + (f", {line}-router line" if line > 1
                                                        else "")
    if line == 1 and cfg.workers > 1:
        name += f", {cfg.workers} workers"
    if cfg.guarantee == "at-least-once":
        name += ", at least once"
    res = ScenarioResult(name, cfg.publishers, n_subs, cfg.count,
                         routers=line if line > 1 else cfg.workers)
    tag = f"p{cfg.publishers}s{n_subs}l{line}"
    routers: list[Child] = []
    clients: list[Child] = []
    try:
        if line > 1:
            routers, pub_port, sub_port = start_line(cfg, line)
        else:
            pub_port = sub_port = free_port()
            routers = [start_router(cfg, pub_port)]
        subs = start_subs(cfg, sub_port, n_subs, tag)
        clients += subs
        wait_attached(subs)  # subscribers first, or early messages would have no one to go to
        if line > 1 and not routers[0].wait_count(KNOWS, n_subs,
                                                   time.monotonic() + ATTACH_TIMEOUT_S):
            raise RuntimeError("gossip did not bring the subscribers to the first router")
        # Workers: each subscriber known at every worker it is not attached to.
        known = n_subs * (cfg.workers - 1)
        if line == 1 and known and not routers[0].wait_count(
                KNOWS, known, time.monotonic() + ATTACH_TIMEOUT_S):
            raise RuntimeError("gossip did not bring every subscriber to every worker")
        pubs = start_pubs(cfg, pub_port, tag)
        clients += pubs
        wait_attached(pubs)  # so the measured window excludes interpreter start-up
        res.router_cpu_s, res.window_s = measure(cfg, routers, pubs, res)
        wait_exit(clients, time.monotonic() + SUB_GRACE_S)
    except RuntimeError as e:  # a start-up failure: report it, keep the other scenarios
        res.problems.append(str(e))
        for router in routers:
            res.problems.append(f"router output:\n{router.output_tail()}")
    finally:
        for c in clients:
            stop_child(c)  # SIGTERM makes a lagging subscriber write a partial report
        for router in routers:
            stop_child(router)
    for router in routers:
        collect_reports(res, [], router)
    collect_reports(res, clients, None)
    return res


def measure(
    cfg: Config, routers: list[Child], pubs: list[Child], res: ScenarioResult
) -> tuple[float | None, float]:
    """Router CPU seconds (all routers) and wall seconds from 'go' until every publisher
    printed 'done'."""
    cpu0 = _total_cpu(routers)
    t0 = time.monotonic()
    res.go_wall = time.time()
    send_go(pubs)
    deadline = t0 + cfg.deadline_s + ATTACH_TIMEOUT_S + 5
    # Publishers print 'done' before their slow interpreter exit, so the window is tight.
    if not all(p.wait_keyword("done", deadline) for p in pubs):
        res.problems.append("publishers did not finish before the deadline")
    cpu1 = _total_cpu(routers)
    window = time.monotonic() - t0
    if cpu0 is None or cpu1 is None:
        res.problems.append("router process vanished during the run")
        return None, window
    return cpu1 - cpu0, window


def _total_cpu(routers: list[Child]) -> float | None:
    """The routers' CPU seconds, with their child processes (the workers of --workers)."""
    times = [proc_cpu_s(r.proc.pid) for r in routers]
    if any(t is None for t in times):
        return None
    children = [child for r in routers for child in child_pids(r.proc.pid)]
    return sum(t for t in times if t is not None) + sum(proc_cpu_s(c) or 0.0 for c in children)


def child_pids(parent: int) -> list[int]:
    """The live processes whose parent is `parent`, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                out.append(int(entry.name))
    return out


def collect_reports(res: ScenarioResult, clients: list[Child], router: Child | None) -> None:
    for c in clients:
        report = read_report(c)
        if report is None:
            res.problems.append(
                f"{c.name} wrote no report (exit {c.exit_code}):\n{c.output_tail()}"
            )
            continue
        (res.pubs if report["role"] == "pub" else res.subs).append({"name": c.name, **report})
    if router is not None and router.exit_code != 0:
        res.problems.append(
            f"router exited with {router.exit_code} on SIGTERM (expected 0):\n"
            f"{router.output_tail()}"
        )


def read_report(c: Child) -> dict[str, Any] | None:
    if c.json_path is None or not c.json_path.exists():
        return None
    try:
        return json.loads(c.json_path.read_text())
    except ValueError:
        return None


# ---------------------------------------------------------------- analysis


def pooled_quantile(pubs: list[dict[str, Any]], q: float) -> float | None:
    """Quantile of all publishers' latencies, from each one's evenly spaced quantiles."""
    points: list[tuple[float, float]] = []
    for p in pubs:
        qs = p.get("latency_quantiles_us") or []
        points += [(v, p["accepted"] / len(qs)) for v in qs]
    if not points:
        return None
    points.sort()
    target = q * sum(w for _, w in points)
    acc = 0.0
    for value, weight in points:
        acc += weight
        if acc >= target:
            return value
    return points[-1][0]


def check_exactly_once(res: ScenarioResult, cfg: Config) -> None:
    expect = cfg.count * cfg.publishers
    for p in res.pubs:
        if p["accepted"] != cfg.count or p["error"]:
            res.problems.append(
                f"{p['name']}: {p['accepted']}/{cfg.count} accepted, rejected {p['rejected']}, "
                f"released {p['released']}, other {p['other'] + p['modified']}; {p['error']}"
            )
    for s in res.subs:
        if s["distinct"] != expect or s["duplicates"] or s["received"] != expect:
            res.problems.append(
                f"{s['name']}: received {s['received']} ({s['distinct']} distinct, "
                f"{s['duplicates']} duplicates, {s['missing']} missing) of {expect}; {s['error']}"
            )
    if len(res.subs) != res.n_subs or len(res.pubs) != res.n_pubs:
        res.problems.append("some clients produced no report")


def summarise(res: ScenarioResult, cores: int) -> dict[str, Any]:
    accepted = sum(p["accepted"] for p in res.pubs)
    start = min((p["start_wall"] for p in res.pubs), default=res.go_wall)
    end = max((p["end_wall"] for p in res.pubs), default=res.go_wall)
    window = max(res.window_s, 1e-9)
    row: dict[str, Any] = {
        "scenario": res.name,
        "msgs_per_s": accepted / max(end - start, 1e-9),
        "p50_ms": _ms(pooled_quantile(res.pubs, 0.50)),
        "p99_ms": _ms(pooled_quantile(res.pubs, 0.99)),
        "accepted": accepted,
        "deliveries": accepted * res.n_subs,
    }
    rcpu = res.router_cpu_s
    row["router_us_msg"] = rcpu * 1e6 / accepted if rcpu is not None and accepted else None
    deliveries = row["deliveries"]
    row["router_us_dlv"] = rcpu * 1e6 / deliveries if rcpu is not None and deliveries else None
    # Through a line, CPU per message is summed over the routers; utilisation is per router.
    row["router_util"] = rcpu / window / res.routers if rcpu is not None else None
    utils = {c["name"]: c["cpu_s"] / window for c in res.pubs + res.subs}
    row["pub_us_msg"] = _mean([p["cpu_us_per_msg"] for p in res.pubs])
    row["sub_us_msg"] = _mean([s["cpu_us_per_msg"] for s in res.subs])
    row["max_in_flight"] = max((p["max_in_flight"] for p in res.pubs), default=0)
    row["bottleneck"] = bottleneck(row["router_util"], utils)
    row["busiest_util"] = max(utils.values(), default=0.0)
    total = (row["router_util"] or 0.0) + sum(utils.values())
    row["machine_util"] = total / cores
    return row


def bottleneck(router_util: float | None, client_utils: dict[str, float]) -> str:
    if router_util is not None and router_util >= ROUTER_BOTTLENECK_UTIL:
        return "router"
    if not client_utils:
        return "?"
    name = max(client_utils, key=lambda k: client_utils[k])
    return f"{name} ({client_utils[name]:.0%})"


def _ms(us: float | None) -> float | None:
    return us / 1000.0 if us is not None else None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# ---------------------------------------------------------------- output

COLUMNS = [
    ("scenario", "scenario", "{}"),
    ("msgs/s", "msgs_per_s", "{:.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("rtr us/msg", "router_us_msg", "{:.1f}"),
    ("rtr us/dlv", "router_us_dlv", "{:.1f}"),
    ("rtr CPU", "router_util", "{:.0%}"),
    ("pub us/msg", "pub_us_msg", "{:.1f}"),
    ("sub us/msg", "sub_us_msg", "{:.1f}"),
    ("bottleneck", "bottleneck", "{}"),
]


def print_table(rows: list[dict[str, Any]], cores: int) -> None:
    cells = [[h for h, _, _ in COLUMNS]]
    for r in rows:
        line = [fmt.format(r[k]) if r[k] is not None else "-" for _, k, fmt in COLUMNS]
        line[-1] += " " + footnote_mark(r)
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.ljust(w) if i in (0, 9) else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print_footnotes(rows, cores)


def footnote_mark(row: dict[str, Any]) -> str:
    if row["machine_util"] >= MACHINE_SATURATED:
        return "*"
    if row["bottleneck"] != "router" and row["busiest_util"] < ROUTER_BOTTLENECK_UTIL:
        return "+"
    return ""


def print_footnotes(rows: list[dict[str, Any]], cores: int) -> None:
    marks = {footnote_mark(r) for r in rows}
    if "*" in marks:
        print(f"* all {cores} cores were >= 90% busy: router and clients compete for CPU,")
        print("  so these numbers are a floor for what the router does on a larger machine.")
    if "+" in marks:
        flying = max(r["max_in_flight"] for r in rows if footnote_mark(r) == "+")
        print("+ no process used a full core: throughput is bound by round trips (at most")
        print(f"  {flying} messages in flight per publisher) or by waits inside a process.")
    print("rtr CPU = router utilisation (% of one core); dlv = one copy to one subscriber;")
    print("pub/sub us/msg = load-client CPU per message (pub: per outcome, sub: per delivery).")


def print_problems(results: list[ScenarioResult]) -> None:
    bad = [r for r in results if r.problems]
    if not bad:
        print("exactly-once check: every subscriber received every message exactly once.")
        return
    bar = "!" * 78
    print(f"\n{bar}\nWARNING: EXACTLY-ONCE / RUN CHECK FAILED\n{bar}", file=sys.stderr)
    for r in bad:
        for p in r.problems:
            print(f"[{r.name}] {p}", file=sys.stderr)
    print(bar, file=sys.stderr)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="small counts: a smoke check")
    p.add_argument("--count", type=int, help="messages per publisher (default 20000)")
    p.add_argument("--window", type=int, default=200, help="unsettled messages per publisher")
    p.add_argument("--publishers", type=int, default=1, help="publisher processes (topics)")
    p.add_argument("--subscribers", default="1,4", help="comma list, one scenario each")
    p.add_argument("--size", type=int, default=100, help="message body bytes")
    p.add_argument("--deadline-s", type=float, help="per-scenario send deadline (default 120)")
    p.add_argument("--router-cmd", help="command to start the router (default: exactmesh)")
    p.add_argument(
        "--exact-filter",
        action="store_true",
        help="subscribe to the topic itself instead of bench/# (1 publisher only)",
    )
    p.add_argument(
        "--no-sasl", dest="sasl", action="store_false", help="clients skip SASL ANONYMOUS"
    )
    p.add_argument("--line", type=int, default=3,
                   help="also run 1 -> 1 through a line of this many routers (0: skip)")
    p.add_argument("--router-args", help="extra options for every router, e.g. "
                   "'--publisher-window 1024'")
    p.add_argument("--workers", type=int, default=1,
                   help="run the one-router scenarios on `exactmesh router --workers N` "
                   "(router CPU summed over the workers)")
    p.add_argument("--guarantee", choices=["exactly-once", "at-least-once"],
                   help="the publishers' delivery guarantee (link property; default: exactly "
                   "once, the router's default)")
    p.add_argument("--json-out", help="also write all raw results here")
    args = p.parse_args(argv)
    if args.exact_filter and args.publishers != 1:
        p.error("--exact-filter needs --publishers 1")
    return args


def make_config(args: argparse.Namespace, workdir: Path) -> Config:
    return Config(
        count=args.count or (1000 if args.quick else 20000),
        window=args.window,
        publishers=args.publishers,
        subscribers=[int(x) for x in args.subscribers.split(",") if x.strip()],
        size=args.size,
        deadline_s=args.deadline_s or (20.0 if args.quick else 120.0),
        router_cmd=router_command(args.router_cmd),
        exact_filter=args.exact_filter,
        sasl=args.sasl,
        workdir=workdir,
        line=args.line,
        router_args=tuple(shlex.split(args.router_args or "")),
        workers=args.workers,
        guarantee=args.guarantee or "",
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    results: list[ScenarioResult] = []
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="exactmesh-bench-") as tmp:
        cfg = make_config(args, Path(tmp))
        print(
            f"exactmesh router benchmark: {cores} cores (os.cpu_count()={os.cpu_count()}), "
            f"{cfg.count} msgs/publisher, {cfg.size}-byte bodies, window {cfg.window}"
        )
        print(f"router: {shlex.join(cfg.router_cmd)}", flush=True)
        if args.quick:
            # /proc CPU times tick every 10 ms: with quick counts, CPU columns are rough.
            print("--quick: a smoke check; counts too small for stable CPU figures")
        scenarios = [(n, 1) for n in cfg.subscribers]
        if cfg.line > 1:
            scenarios.append((1, cfg.line))
        for n_subs, line in scenarios:
            res = run_scenario(cfg, n_subs, line)
            check_exactly_once(res, cfg)
            results.append(res)
            rows.append(summarise(res, cores))
    print()
    print_table(rows, cores)
    print_problems(results)
    if args.json_out:
        raw = [
            {"row": row, "pubs": r.pubs, "subs": r.subs, "problems": r.problems}
            for row, r in zip(rows, results, strict=True)
        ]
        Path(args.json_out).write_text(json.dumps(raw, indent=1))
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

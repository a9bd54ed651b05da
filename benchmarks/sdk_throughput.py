"""Client SDK throughput next to plain proton, on one router: `python -m benchmarks.sdk_throughput`.

One `exactmesh router`, 1 publisher -> 1 subscriber, 100-byte bodies, the publisher keeping
`--window` messages without an outcome; every client in its own process (no shared GIL):

    sdk     amqp_edge.client: a blocking `Publisher` (send() in a loop, SQLite group commits)
            and a durable `Subscriber` (receive_many(), accept_many(): a commit per batch)
    sdk-alo the same two with guarantee="at-least-once" (docs/guarantees.md): the routers
            keep no tombstones, the subscriber keeps no state directory
    proton  plain python-qpid-proton `Container` clients: a MessagingHandler sender keeping
            `window` unsettled, a receiver auto-accepting (prefetch = `--credit`)
    lean    the engine-level cffi clients of benchmarks/loadclient.py: the router's ceiling
            (skip with --no-lean)

Each kind gets a fresh router; the kinds take turns within each run, so background load hits
them alike. Printed per run and as medians: msgs/s (accepted outcomes over the publisher's
send window), latency p50/p99 (the message handed to the client -- send() returned, or
proton's send() -- to its accepted outcome at the publisher), router CPU microseconds per
message (/proc/PID/stat), the clients' own CPU per message, and the ratio SDK / proton.
"other CPU" is what the rest of the machine used during the run (/proc/stat minus this
benchmark's processes): results are given for all runs and for the quiet ones (< 10%).
Every run checks that the subscriber got every message exactly once (exit 1 if not).

    python -m benchmarks.sdk_throughput                  # 3 runs of 20,000 messages each
    python -m benchmarks.sdk_throughput --count 5000 --runs 1 --no-lean
    python -m benchmarks.sdk_throughput --profile        # + two SDK runs under py-spy: the
                                                         #   top costs in each SDK process
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import run as bench
from benchmarks.common import free_port, load_line, write_json

TOPIC = "bench/t0"
FILTER = "bench/#"
KINDS = ("sdk", "sdk-alo", "proton", "lean")
ALO = {"guarantee": "at-least-once"}
ATTACH_TIMEOUT_S = 20.0


# ====================================================================== client processes


def _quantiles_ms(lat_ns: list[int]) -> dict[str, float]:
    if not lat_ns:
        return {}
    lat = sorted(lat_ns)

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6

    return {"p50": q(0.50), "p99": q(0.99), "max": lat[-1] / 1e6}


def _stdin_lines(on_line: Any) -> None:
    """Calls on_line(text) for every stdin line and on_line(None) at EOF, on a thread."""

    def run() -> None:
        for line in sys.stdin:
            on_line(line.strip())
        on_line(None)

    threading.Thread(target=run, daemon=True).start()


def sdk_pub(args: argparse.Namespace, **options: Any) -> dict[str, Any]:
    from amqp_edge.client import Outcome, Publisher

    go = threading.Event()
    _stdin_lines(lambda line: go.set())
    count = args.count
    sent_at = [0] * (count + 2)
    done_at = [0] * (count + 2)
    states: collections.Counter[str] = collections.Counter()

    def on_outcome(seq: int, outcome: Outcome) -> None:
        done_at[seq] = time.perf_counter_ns()
        states[outcome.state] += 1

    pub = Publisher([args.url], TOPIC, id=f"tp-{os.getpid()}", state_dir=args.state_dir,
                    window=args.window, on_outcome=on_outcome, **options)
    error = ""
    try:
        pub.wait_attached(ATTACH_TIMEOUT_S)
        print("attached", flush=True)
        go.wait(ATTACH_TIMEOUT_S * 3)
        body = b"x" * args.size
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(count):
            seq = pub.send(body)
            sent_at[seq] = time.perf_counter_ns()
        pub.flush(timeout=args.deadline_s)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        print("done", flush=True)
    except Exception as exc:  # reported to the runner, which fails the run
        error, elapsed, cpu = f"{type(exc).__name__}: {exc}", 0.0, 0.0
    stats = pub.stats()
    pub.close()
    lat = [d - s for s, d in zip(sent_at, done_at, strict=True) if s and d > s]
    return {"role": "pub", "sent": stats["sent"], "accepted": stats["accepted"],
            "failed": stats["failed"], "states": dict(states), "elapsed_s": elapsed,
            "cpu_s": cpu, "latency_ms": _quantiles_ms(lat), "error": error}


def sdk_sub(args: argparse.Namespace, **options: Any) -> dict[str, Any]:
    from amqp_edge.client import ClientClosed, Subscriber

    stop = threading.Event()
    _stdin_lines(lambda line: stop.set() if line in ("stop", None) else None)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    state_dir = None if options else args.state_dir  # at least once: none
    sub = Subscriber([args.url], FILTER, id=f"ts-{os.getpid()}", state_dir=state_dir,
                     prefetch=args.credit, durable=True, **options)
    # Batches (one commit each) where the SDK has them; before it did, one message at a time.
    batched = hasattr(sub, "accept_many") and args.batch > 1
    seen: set[Any] = set()
    received = dup = 0
    error = ""
    cpu0 = time.process_time()
    try:
        sub.wait_attached(ATTACH_TIMEOUT_S)
        cpu0 = time.process_time()
        print("attached", flush=True)
        done_at = None
        deadline = time.monotonic() + args.deadline_s + ATTACH_TIMEOUT_S  # go comes later
        while not stop.is_set() and time.monotonic() < deadline:
            if done_at is not None and time.monotonic() >= done_at:
                break
            msgs = sub.receive_many(args.batch, timeout=0.1) if batched else \
                [m for m in (sub.receive(timeout=0.1),) if m is not None]
            for msg in msgs:
                received += 1
                if msg.message_id in seen:
                    dup += 1
                seen.add(msg.message_id)
            if batched:
                sub.accept_many(msgs)
            else:
                for msg in msgs:
                    sub.accept(msg)
            if done_at is None and len(seen) >= args.expect:
                done_at = time.monotonic() + args.linger_s
    except ClientClosed:
        error = "client closed"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    cpu = time.process_time() - cpu0
    suppressed = sub.stats()["duplicates_suppressed"]
    sub.close()
    return {"role": "sub", "received": received, "distinct": len(seen), "duplicates": dup,
            "suppressed": suppressed, "cpu_s": cpu, "error": error}


def proton_pub(args: argparse.Namespace) -> dict[str, Any]:
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import ApplicationEvent, Container, EventInjector

    injector = EventInjector()

    class Sender(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.sent = self.accepted = 0
            self.states: collections.Counter[str] = collections.Counter()
            self.sent_at: dict[Any, int] = {}
            self.lat: list[int] = []
            self.go = False
            self.t0 = self.elapsed = self.cpu0 = self.cpu = 0.0
            self.sender: Any = None
            self.timer: Any = None
            self.error = ""
            self.body = b"x" * args.size

        def on_start(self, event: Any) -> None:
            event.container.selectable(injector)
            conn = event.container.connect(args.url, reconnect=False)
            self.sender = event.container.create_sender(conn, TOPIC)
            self.timer = event.container.schedule(args.deadline_s + ATTACH_TIMEOUT_S, self)

        def on_timer_task(self, event: Any) -> None:
            self.error = self.error or f"deadline {args.deadline_s} s reached"
            self.finish()

        def on_link_opened(self, event: Any) -> None:
            if event.link == self.sender:
                print("attached", flush=True)

        def on_go(self, event: Any) -> None:
            if not self.go:
                self.go = True
                self.cpu0, self.t0 = time.process_time(), time.perf_counter()
                self.pump()
            else:  # EOF or 'stop' after go: give up
                self.error = self.error or "stopped"
                self.finish()

        def on_sendable(self, event: Any) -> None:
            self.pump()

        def pump(self) -> None:
            s = self.sender
            if s is None:
                return
            while (self.go and self.sent < args.count and s.credit > 0
                   and len(self.sent_at) < args.window):
                self.sent += 1
                d = s.send(Message(id=f"p:{self.sent}", address=TOPIC, body=self.body))
                self.sent_at[d] = time.perf_counter_ns()

        def _outcome(self, event: Any, state: str) -> None:
            t = self.sent_at.pop(event.delivery, None)
            self.states[state] += 1
            if state == "accepted" and t is not None:
                self.accepted += 1
                self.lat.append(time.perf_counter_ns() - t)
            if sum(self.states.values()) >= args.count:
                self.elapsed = time.perf_counter() - self.t0
                self.cpu = time.process_time() - self.cpu0
                print("done", flush=True)
                self.finish()
            else:
                self.pump()

        def on_accepted(self, event: Any) -> None:
            self._outcome(event, "accepted")

        def on_rejected(self, event: Any) -> None:
            self._outcome(event, "rejected")

        def on_released(self, event: Any) -> None:
            self._outcome(event, "released")

        def on_transport_error(self, event: Any) -> None:
            cond = event.transport.condition
            self.error = self.error or f"transport error: {cond}"

        def finish(self) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.sender is not None:
                self.sender.connection.close()
                self.sender = None
            injector.close()

    handler = Sender()
    _stdin_lines(lambda line: injector.trigger(ApplicationEvent("go")))
    signal.signal(signal.SIGTERM, lambda *_: injector.trigger(ApplicationEvent("go")))
    Container(handler).run()
    return {"role": "pub", "sent": handler.sent, "accepted": handler.accepted,
            "failed": handler.states["rejected"], "states": dict(handler.states),
            "elapsed_s": handler.elapsed, "cpu_s": handler.cpu,
            "latency_ms": _quantiles_ms(handler.lat),
            "error": handler.error or ("" if handler.accepted == args.count else "unfinished")}


def proton_sub(args: argparse.Namespace) -> dict[str, Any]:
    from proton.handlers import MessagingHandler
    from proton.reactor import ApplicationEvent, Container, EventInjector

    injector = EventInjector()

    class Receiver(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=args.credit, auto_accept=True)
            self.seen: set[Any] = set()
            self.received = self.dup = 0
            self.receiver: Any = None
            self.timer: Any = None
            self.cpu0 = time.process_time()
            self.done = False
            self.error = ""

        def on_start(self, event: Any) -> None:
            event.container.selectable(injector)
            conn = event.container.connect(args.url, reconnect=False)
            self.receiver = event.container.create_receiver(conn, FILTER)
            self.timer = event.container.schedule(args.deadline_s + ATTACH_TIMEOUT_S, self)

        def on_link_opened(self, event: Any) -> None:
            if event.link == self.receiver:
                self.cpu0 = time.process_time()
                print("attached", flush=True)

        def on_message(self, event: Any) -> None:
            self.received += 1
            mid = event.message.id
            if mid in self.seen:
                self.dup += 1
            self.seen.add(mid)
            if not self.done and len(self.seen) >= args.expect:
                self.done = True
                self.timer.cancel()
                self.timer = event.container.schedule(args.linger_s, self)

        def on_timer_task(self, event: Any) -> None:  # the linger after the last, or deadline
            if not self.done:
                self.error = f"deadline {args.deadline_s} s reached"
            self.finish()

        def on_stop(self, event: Any) -> None:
            self.error = self.error or "stopped"
            self.finish()

        def finish(self) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.receiver is not None:
                self.receiver.connection.close()
                self.receiver = None
            injector.close()

    handler = Receiver()
    _stdin_lines(lambda line: injector.trigger(ApplicationEvent("stop"))
                 if line in ("stop", None) else None)
    signal.signal(signal.SIGTERM, lambda *_: injector.trigger(ApplicationEvent("stop")))
    Container(handler).run()
    cpu = time.process_time() - handler.cpu0
    return {"role": "sub", "received": handler.received, "distinct": len(handler.seen),
            "duplicates": handler.dup, "suppressed": 0, "cpu_s": cpu,
            "error": handler.error if len(handler.seen) < args.expect else ""}


CLIENTS = {"sdk-pub": sdk_pub, "sdk-sub": sdk_sub, "proton-pub": proton_pub,
           "proton-sub": proton_sub, "sdk-alo-pub": lambda args: sdk_pub(args, **ALO),
           "sdk-alo-sub": lambda args: sdk_sub(args, **ALO)}


def client_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sdk_throughput _client")
    p.add_argument("role", choices=sorted(CLIENTS))
    p.add_argument("--url", required=True)
    p.add_argument("--json-out", required=True)
    p.add_argument("--state-dir", default="")
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--expect", type=int, default=0)
    p.add_argument("--window", type=int, default=100)
    p.add_argument("--credit", type=int, default=500)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--linger-s", type=float, default=0.3)
    p.add_argument("--deadline-s", type=float, default=120.0)
    args = p.parse_args(argv)
    report = CLIENTS[args.role](args)
    write_json(args.json_out, report)
    return 0 if not report["error"] else 1


# ====================================================================== background load


class CpuMonitor:
    """How much CPU the rest of the machine used while a benchmark ran: all busy CPU time
    (/proc/stat: user, nice, system, irq, softirq) minus what this process and its
    descendants used (their /proc/PID/stat, sampled every `interval` s on a thread, so that
    a process killed mid-run still counts up to its last sample)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.me = os.getpid()
        self.last_cpu: dict[int, float] = {}  # my processes: last seen utime+stime (s)
        self.base = bench.proc_cpu_s(self.me) or 0.0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.sample()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            cpu[pid] = (int(fields[11]) + int(fields[12])) / bench.CLK_TCK
        mine = {self.me}
        for pid in parents:  # a process is mine if an ancestor is this process
            chain, p = [], pid
            while p in parents and p not in mine and len(chain) < 64:
                chain.append(p)
                p = parents[p]
            if p in mine:
                mine.update(chain)
        with self.lock:
            for pid in mine:
                if pid in cpu:
                    self.last_cpu[pid] = cpu[pid]

    def snapshot(self) -> tuple[float, float, float]:
        """(monotonic time, all busy CPU s, CPU s of this process tree since the start)."""
        self.sample()
        with open("/proc/stat") as f:
            parts = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in parts[1:8])
        busy = (user + nice + system + irq + softirq) / bench.CLK_TCK
        with self.lock:
            mine = sum(self.last_cpu.values()) - self.base
        return time.monotonic(), busy, mine

    @staticmethod
    def other_util(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
        """CPU the rest of the machine used between two snapshots, as a share of one CPU."""
        window = max(b[0] - a[0], 1e-9)
        return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / window


# ====================================================================== the runner


@dataclass
class Config:
    count: int
    window: int
    credit: int
    size: int
    runs: int
    kinds: list[str]
    deadline_s: float
    router_args: tuple[str, ...]
    profile: bool
    workdir: Path
    monitor: CpuMonitor


@dataclass
class Row:
    kind: str
    run: int
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def bench_config(cfg: Config, workdir: Path) -> bench.Config:
    """benchmarks.run's configuration for the same load (its router start and lean clients)."""
    return bench.Config(count=cfg.count, window=cfg.window, publishers=1, subscribers=[1],
                        size=cfg.size, deadline_s=cfg.deadline_s,
                        router_cmd=bench.router_command(None), exact_filter=False, sasl=True,
                        workdir=workdir, router_args=cfg.router_args)


def spawn_client(kind: str, role: str, port: int, cfg: Config, workdir: Path,
                 tag: str) -> bench.Child:
    json_path = workdir / f"{tag}-{role}.json"
    argv = [sys.executable, "-m", "benchmarks.sdk_throughput", "_client", f"{kind}-{role}",
            "--url", f"127.0.0.1:{port}", "--json-out", str(json_path),
            "--state-dir", str(workdir / f"{tag}-{role}-state"), "--count", str(cfg.count),
            "--expect", str(cfg.count), "--window", str(cfg.window), "--credit",
            str(cfg.credit), "--size", str(cfg.size), "--deadline-s", str(cfg.deadline_s)]
    child = bench.spawn(f"{kind}-{role}", argv, ("attached", "done"),
                        workdir / f"{tag}-{role}.log", stdin=True)
    child.json_path = json_path
    return child


def run_clients(cfg: Config, kind: str, run: int, profile_dir: Path | None = None,
                gil: bool = False) -> Row:
    """One run of the SDK or proton clients on a fresh router."""
    row = Row(kind, run)
    workdir = cfg.workdir / f"{kind}-{run}"
    workdir.mkdir(parents=True, exist_ok=True)
    bcfg = bench_config(cfg, workdir)
    port = free_port()
    router = bench.start_router(bcfg, port)
    clients: list[bench.Child] = []
    spies: list[subprocess.Popen[bytes]] = []
    cpu = window = other = 0.0
    try:
        sub = spawn_client(kind, "sub", port, cfg, workdir, f"r{run}")
        clients.append(sub)
        if not sub.wait_keyword("attached", time.monotonic() + ATTACH_TIMEOUT_S):
            raise RuntimeError(f"subscriber did not attach:\n{sub.output_tail()}")
        pub = spawn_client(kind, "pub", port, cfg, workdir, f"r{run}")
        clients.append(pub)
        if not pub.wait_keyword("attached", time.monotonic() + ATTACH_TIMEOUT_S):
            raise RuntimeError(f"publisher did not attach:\n{pub.output_tail()}")
        if profile_dir is not None:
            mode = "gil" if gil else "active"
            spies = [start_spy(c, profile_dir / f"{c.name}-{mode}.txt", gil) for c in (pub, sub)]
        cpu0 = bench.proc_cpu_s(router.proc.pid) or 0.0
        snap0 = cfg.monitor.snapshot()
        t0 = time.monotonic()
        bench.send_go([pub])
        if not pub.wait_keyword("done", t0 + cfg.deadline_s + 5):
            row.problems.append(f"the publisher did not finish in {cfg.deadline_s} s:\n"
                                f"{pub.output_tail()}")
        cpu = (bench.proc_cpu_s(router.proc.pid) or 0.0) - cpu0
        window = time.monotonic() - t0
        other = CpuMonitor.other_util(snap0, cfg.monitor.snapshot())
        bench.wait_exit(clients, time.monotonic() + 15)
    except RuntimeError as exc:
        row.problems.append(str(exc))
    finally:
        for c in clients:
            bench.stop_child(c)
        for spy in spies:
            try:
                spy.wait(15)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)
        bench.stop_child(router)
    reports = {c.name.rsplit("-", 1)[1]: bench.read_report(c) for c in clients}
    pub_r, sub_r = reports.get("pub"), reports.get("sub")
    if pub_r is None or sub_r is None:
        row.problems.append("a client wrote no report: " + "; ".join(
            f"{c.name} exit {c.exit_code}:\n{c.output_tail()}" for c in clients))
        return row
    acc = pub_r["accepted"]
    elapsed = pub_r["elapsed_s"] or window
    row.figures = {
        "msgs_per_s": acc / elapsed if elapsed else None,
        "p50_ms": pub_r["latency_ms"].get("p50"), "p99_ms": pub_r["latency_ms"].get("p99"),
        "router_us_msg": cpu * 1e6 / acc if acc else None,
        "router_util": cpu / window if window else None,
        "all_util": (cpu + pub_r["cpu_s"] + sub_r["cpu_s"]) / elapsed if elapsed else None,
        "pub_us_msg": pub_r["cpu_s"] * 1e6 / acc if acc else None,
        "sub_us_msg": sub_r["cpu_s"] * 1e6 / max(1, sub_r["received"]),
        "accepted": acc, "received": sub_r["received"], "duplicates": sub_r["duplicates"],
        "suppressed": sub_r.get("suppressed", 0),
        "other_util": other,
    }
    check(row, pub_r, sub_r, cfg.count)
    return row


def check(row: Row, pub: dict[str, Any], sub: dict[str, Any], count: int) -> None:
    if pub["accepted"] != count or pub["error"]:
        row.problems.append(f"publisher: {pub['accepted']}/{count} accepted, outcomes "
                            f"{pub['states']}; {pub['error']}")
    if sub["distinct"] != count or sub["duplicates"] or sub["received"] != count:
        row.problems.append(f"subscriber: received {sub['received']} ({sub['distinct']} "
                            f"distinct, {sub['duplicates']} duplicates) of {count}; "
                            f"{sub['error']}")


def run_lean(cfg: Config, run: int) -> Row:
    row = Row("lean", run)
    workdir = cfg.workdir / f"lean-{run}"
    workdir.mkdir(parents=True, exist_ok=True)
    bcfg = bench_config(cfg, workdir)
    snap0 = cfg.monitor.snapshot()
    res = bench.run_scenario(bcfg, 1)  # other CPU: over the whole scenario, start-up included
    other = CpuMonitor.other_util(snap0, cfg.monitor.snapshot())
    bench.check_exactly_once(res, bcfg)
    row.problems += res.problems
    if res.pubs and res.subs:
        s = bench.summarise(res, len(os.sched_getaffinity(0)))
        row.figures = {
            "msgs_per_s": s["msgs_per_s"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"],
            "router_us_msg": s["router_us_msg"], "router_util": s["router_util"],
            "all_util": s["machine_util"] * len(os.sched_getaffinity(0)),
            "pub_us_msg": s["pub_us_msg"], "sub_us_msg": s["sub_us_msg"],
            "accepted": s["accepted"], "received": res.subs[0]["received"],
            "duplicates": res.subs[0]["duplicates"], "suppressed": 0,
            "other_util": other,
        }
    return row


# ---------------------------------------------------------------- profiling (py-spy)


def start_spy(child: bench.Child, out: Path, gil: bool) -> subprocess.Popen[bytes]:
    """py-spy record (raw collapsed stacks, 250 Hz) on a client until it exits: with `gil`,
    only the thread holding the GIL (where the CPU goes in Python code); without, every
    thread py-spy does not consider idle (so waiting for the GIL counts too)."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    argv = [spy, "record", "--pid", str(child.proc.pid), "--format", "raw", "--rate", "250",
            "--threads", "--output", str(out), "--nonblocking"]
    return subprocess.Popen(argv + (["--gil"] if gil else []),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_costs(path: Path, n: int = 10) -> list[str]:
    """From py-spy's collapsed stacks: the share of samples by source file and by function
    on top of the stack (self), with the thread, and by function anywhere on the stack."""
    if not path.exists():
        return [f"  (no profile: {path.name} missing; is py-spy allowed to ptrace?)"]
    by_self: collections.Counter[tuple[str, str]] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    by_thread: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, num = line.rpartition(" ")
        if not stack or not num.isdigit():
            continue
        frames = stack.split(";")
        count = int(num)
        total += count
        thread = thread_label(frames[0])
        by_thread[thread] += count
        leaf = frames[-1] if len(frames) > 1 else "(no Python frame: native code)"
        by_self[(thread, short(leaf))] += count
        by_file[source_file(leaf)] += count
        for fr in {short(f) for f in frames[1:]}:
            incl[fr] += count
    if not total:
        return ["  (no samples)"]
    out = [f"  {total} samples; by thread: " + ", ".join(
        f"{t} {c / total:.0%}" for t, c in by_thread.most_common())]
    out.append("  by source file of the running function: " + ", ".join(
        f"{f} {c / total:.0%}" for f, c in by_file.most_common(8)))
    out.append("  top functions (self):")
    out += [f"    {c / total:6.1%}  [{t}] {fn}" for (t, fn), c in by_self.most_common(n)]
    out.append("  top functions (inclusive, below the event loop):")
    boring = ("Thread.", "_ClientLoop._run", "Reactor.run", "<module>", "main (",
              "client_main", "_run_module", "_run_code", "sdk_pub", "sdk_sub")
    shown = 0
    for fn, c in incl.most_common():
        if fn.startswith(boring):
            continue
        out.append(f"    {c / total:6.1%}  {fn}")
        shown += 1
        if shown >= n:
            break
    return out


def thread_label(frame: str) -> str:
    """py-spy --threads starts each stack with 'thread (TID): NAME'."""
    name = frame.rpartition(": ")[2]
    if name.startswith("exactmesh-"):
        return "I/O thread"
    return "app thread" if name == "MainThread" else name


def source_file(frame: str) -> str:
    where = frame.partition(" (")[2].rstrip(")")
    path = where.rpartition(":")[0]
    return path or "(native)"


def short(frame: str) -> str:
    """'fn (path/to/file.py:123)' -> 'fn (file.py:123)'."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.rstrip(')')).name})" if where else name


# ---------------------------------------------------------------- output

COLUMNS = [("kind", "kind", "{}"), ("run", "run", "{}"), ("msgs/s", "msgs_per_s", "{:.0f}"),
           ("p50 ms", "p50_ms", "{:.2f}"), ("p99 ms", "p99_ms", "{:.2f}"),
           ("rtr us/msg", "router_us_msg", "{:.1f}"), ("rtr CPU", "router_util", "{:.0%}"),
           ("pub us/msg", "pub_us_msg", "{:.0f}"), ("sub us/msg", "sub_us_msg", "{:.0f}"),
           ("all CPU", "all_util", "{:.0%}"), ("other CPU", "other_util", "{:.0%}")]
QUIET = 0.10  # a run is quiet if the rest of the machine used less than this share of a CPU


def print_table(rows: list[dict[str, Any]]) -> None:
    cells = [[h for h, _, _ in COLUMNS]]
    for r in rows:
        cells.append([spec.format(r[k]) if r.get(k) is not None else "-"
                      for _, k, spec in COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for n, line in enumerate(cells):
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def medians(rows: list[Row], kinds: list[str], quiet: bool = False) -> list[dict[str, Any]]:
    out = []
    for kind in kinds:
        figs = [r.figures for r in rows if r.kind == kind and r.figures
                and (not quiet or r.figures.get("other_util", 1.0) < QUIET)]
        if not figs:
            continue
        label = f"median of {len(figs)} quiet" if quiet else f"median of {len(figs)}"
        med: dict[str, Any] = {"kind": kind, "run": label}
        for _, key, _ in COLUMNS[2:]:
            vals = [f[key] for f in figs if f.get(key) is not None]
            med[key] = statistics.median(vals) if vals else None
        out.append(med)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sdk_throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=20000, help="messages per run (default 20000)")
    p.add_argument("--window", type=int, default=100,
                   help="messages the publisher keeps without an outcome (default 100, the "
                        "SDK's default)")
    p.add_argument("--credit", type=int, default=500,
                   help="subscriber credit / prefetch, all kinds (default 500)")
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    p.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    p.add_argument("--no-lean", action="store_true", help="skip the lean cffi clients")
    p.add_argument("--kinds", help=f"comma list of {', '.join(KINDS)} (default all)")
    p.add_argument("--deadline-s", type=float, default=120.0, help="per run (default 120)")
    p.add_argument("--router-args", default="", help="extra options for the router")
    p.add_argument("--profile", action="store_true",
                   help="after the runs, two more SDK runs with py-spy on both SDK processes "
                        "(samples holding the GIL, then all active threads); prints where their "
                        "time goes (those runs are not in the medians: py-spy takes CPU too)")
    p.add_argument("--profile-out", metavar="DIR",
                   help="with --profile: keep py-spy's raw (collapsed) stacks in DIR "
                        "(e.g. for flamegraph.pl or speedscope)")
    p.add_argument("--json-out", help="also write every run's figures here")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    if args.no_lean and "lean" in kinds:
        kinds.remove("lean")
    if any(k not in KINDS for k in kinds) or not kinds:
        p.error(f"--kinds: choose from {', '.join(KINDS)}")
    args.kinds = kinds
    if args.runs < 1 or args.count < 1:
        p.error("--runs and --count must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_client"]:
        return client_main(argv[1:])
    args = parse_args(argv)
    started = time.monotonic()
    rows: list[Row] = []
    profile: dict[str, list[str]] = {}
    print(f"exactmesh SDK throughput: one router, 1 publisher -> 1 subscriber, {args.count} x "
          f"{args.size}-byte messages, window {args.window}, subscriber credit {args.credit}; "
          f"every client in its own process; {os.cpu_count()} CPUs reported; {load_line()}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="exactmesh-sdk-bench-") as tmp:
        cfg = Config(count=args.count, window=args.window, credit=args.credit, size=args.size,
                     runs=args.runs, kinds=args.kinds, deadline_s=args.deadline_s,
                     router_args=tuple(args.router_args.split()), profile=args.profile,
                     workdir=Path(tmp), monitor=CpuMonitor())
        for run in range(1, cfg.runs + 1):
            for kind in cfg.kinds:
                row = run_lean(cfg, run) if kind == "lean" else run_clients(cfg, kind, run)
                rows.append(row)
                for p in row.problems:
                    print(f"  [{kind} run {run}] {p}", file=sys.stderr, flush=True)
        if cfg.profile:
            pdir = Path(args.profile_out or Path(tmp) / "profile")
            pdir.mkdir(parents=True, exist_ok=True)
            for gil in (True, False):
                prow = run_clients(cfg, "sdk", 0, pdir, gil)
                mode = "gil" if gil else "active"
                rate = prow.figures.get("msgs_per_s")
                title = ("holding the GIL (where the CPU goes in Python)" if gil else
                         "every non-idle thread (also counts waiting for the GIL)")
                for role in ("pub", "sub"):
                    who = "publisher" if role == "pub" else "subscriber"
                    profile[f"SDK {who}, samples {title}; that run "
                            f"{rate or 0:.0f} msgs/s under py-spy"] = top_costs(
                                pdir / f"sdk-{role}-{mode}.txt")
    cfg.monitor.stop()
    print_table([{"kind": r.kind, "run": r.run, **r.figures} for r in rows])
    print()
    med = medians(rows, cfg.kinds)
    quiet = medians(rows, cfg.kinds, quiet=True)
    print_table(med + quiet)
    print()
    for label, table in (("all runs", med), (f"quiet runs (other CPU < {QUIET:.0%})", quiet)):
        by_kind = {m["kind"]: m for m in table}
        if "sdk" in by_kind and "proton" in by_kind and by_kind["proton"]["msgs_per_s"]:
            ratio = by_kind["sdk"]["msgs_per_s"] / by_kind["proton"]["msgs_per_s"]
            print(f"SDK / plain proton throughput, medians of {label}: {ratio:.2f}")
        if "sdk-alo" in by_kind and "proton" in by_kind and by_kind["proton"]["msgs_per_s"]:
            ratio = by_kind["sdk-alo"]["msgs_per_s"] / by_kind["proton"]["msgs_per_s"]
            print(f"SDK at least once / plain proton throughput, medians of {label}: "
                  f"{ratio:.2f}")
    per_run = []
    for run in range(1, cfg.runs + 1):
        f = {r.kind: r.figures for r in rows if r.run == run and r.figures}
        if "sdk" in f and "proton" in f and f["proton"]["msgs_per_s"]:
            per_run.append(f"{f['sdk']['msgs_per_s'] / f['proton']['msgs_per_s']:.2f}")
    if per_run:
        print(f"SDK / plain proton throughput per run: {', '.join(per_run)}")
    print("msgs/s = accepted outcomes / the publisher's sending time; latency = client hands "
          "the message over -> accepted outcome at the publisher; rtr = router CPU per "
          "message and its utilisation (of one core); pub/sub us/msg = each client process's "
          "CPU per message; all CPU = router + publisher + subscriber CPU over the publisher's "
          "sending time (100% = one CPU busy); other CPU = what the rest of the machine (other "
          "users' processes) used meanwhile, from /proc/stat.")
    for name, lines in profile.items():
        print(f"\nwhere the time goes: {name}")
        print("\n".join(lines))
    print(f"\n{load_line()} at the end; total {time.monotonic() - started:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            [{"kind": r.kind, "run": r.run, "figures": r.figures, "problems": r.problems}
             for r in rows], indent=1))
    if any(r.problems for r in rows):
        print("FAILED: a run lost, duplicated or did not finish (above)", file=sys.stderr)
        return 1
    print("exactly-once check: in every run the subscriber received every message once.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

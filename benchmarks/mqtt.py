"""MQTT benchmark: one exactmesh router next to a local mosquitto, same paho clients, same run.

    python -m benchmarks.mqtt                 # QoS 1 and 2, 1 -> 1 and 1 -> 4 (under 2 minutes)
    python -m benchmarks.mqtt --quick         # a few seconds; a smoke check
    python -m benchmarks.mqtt --qos 2 --subs 1 --count 10000 --server exactmesh
    python -m benchmarks.mqtt --shared --subs 3     # a shared group of 3 ($share/bench/...)

For each scenario it starts a fresh mosquitto (a small config file on a free loopback port,
`persistence false`, stopped by PID) and a fresh exactmesh router (`--mqtt`), and runs the
same clients against each: subscriber processes, then one publisher process, all paho-mqtt
(MQTT 3.1.1), each with TCP_NODELAY set after connect (paho 2.2 does not set it). The
publisher keeps its own window of unfinished QoS 1/2 messages (default 20, mosquitto's
default `max_inflight_messages`; paho rescans its whole outgoing queue on each ack, so it
must never queue more than that itself). 100-byte payloads carrying a sequence number.

Printed per scenario and server: msgs/s delivered (first publish until every subscriber has
every message: the throughput compared) and at the publisher (to the last PUBACK/PUBCOMP;
higher for a broker that queues what its subscribers have not taken yet), latency
p50/p99 (publish to PUBACK/PUBCOMP at the publisher), server CPU microseconds per message
(utime+stime from /proc/PID/stat across the run), the clients' CPU per message, and the
exactmesh/mosquitto ratio. Counts are checked: every subscriber got every message the
publisher finished, and at QoS 2 none twice. With `--shared` the subscribers are one shared
group (`$share/bench/...`, a member per subscriber process): the group got every message the
publisher finished, and at QoS 2 no member got one another member got. Each run is bounded
(`--max-seconds`): a slow server sends fewer messages, it does not stretch the run. Machine
load (load average, and CPU used by processes outside the benchmark during each run) is
printed with the figures.

mosquitto (Debian package `mosquitto`) is installed with apt-get when it is missing and the
benchmark runs as root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import free_port

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
MOSQUITTO = "/usr/sbin/mosquitto"
READY_TIMEOUT_S = 20.0
SUB_GRACE_S = 5.0  # after the publisher finished, how long subscribers get to catch up
SHARED_QUIET_S = 0.5  # a group member is done when nothing came for this long after the end
PAYLOAD_SIZE = 100
TOPIC = "bench/mqtt/t"


# ============================================================================ the clients
# Run as `python -m benchmarks.mqtt --role pub|sub ...` in their own processes. They print
# one line "READY" when connected (and, for a subscriber, subscribed), then one JSON line.


def _client(client_id: str, port: int, args: argparse.Namespace | None = None) -> Any:
    import paho.mqtt.client as mqtt

    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv311, clean_session=True)
    c.max_inflight_messages_set(65535)  # the benchmark keeps its own window
    c.max_queued_messages_set(0)
    if args is not None and args.tls_ca:  # benchmarks/secure.py: TLS and a log-in
        c.tls_set(ca_certs=args.tls_ca)
        c.tls_insecure_set(True)  # (the chain is checked; the router is 127.0.0.1)
    if args is not None and args.user:
        c.username_pw_set(args.user, os.environ.get("EXACTMESH_PASSWORD", ""))
    c.connect("127.0.0.1", port, keepalive=60)
    sock = c.socket()
    raw = getattr(sock, "_sock", sock)  # (paho's TLS socket wraps the TCP one)
    with contextlib.suppress(OSError, AttributeError):
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def run_subscriber(args: argparse.Namespace) -> None:
    c = _client(args.client_id, args.port, args)
    state: dict[str, Any] = {"subscribed": False, "connected": False}
    seen = bytearray(args.count)
    counts = {"received": 0, "dup": 0, "bad": 0, "dup_flag": 0}
    last = [0.0]  # when the newest distinct message arrived (time.monotonic)
    last_any = [time.monotonic()]

    def on_connect(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        state["connected"] = True
        client.subscribe(f"$share/bench/{TOPIC}" if args.shared else TOPIC, qos=args.qos)

    def on_subscribe(client: Any, userdata: Any, mid: Any, rcs: Any, props: Any) -> None:
        state["subscribed"] = True

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        counts["received"] += 1
        last_any[0] = time.monotonic()
        if msg.dup:
            counts["dup_flag"] += 1
        seq = int.from_bytes(msg.payload[:8], "big")
        if seq >= len(seen):
            counts["bad"] += 1
        elif seen[seq]:
            counts["dup"] += 1
        else:
            seen[seq] = 1
            last[0] = time.monotonic()  # system-wide clock: compared with the publisher's

    c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
    expected: list[int] = []

    def read_stdin() -> None:
        line = sys.stdin.readline()
        expected.append(int(line) if line.strip() else -1)

    threading.Thread(target=read_stdin, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not state["subscribed"] and time.monotonic() < deadline:
        c.loop(0.05)
    print("READY" if state["subscribed"] else "NOT-SUBSCRIBED", flush=True)
    cpu0 = _cpu_s()
    give_up = None
    loops = 0  # passes of paho's loop(), as in run_publisher
    while True:
        c.loop(0.02)
        loops += 1
        if expected:
            if give_up is None:
                give_up = time.monotonic() + SUB_GRACE_S
            now = time.monotonic()
            if counts["received"] - counts["dup"] >= expected[0] or now > give_up:
                break
            if args.shared and now - last_any[0] > SHARED_QUIET_S:
                break  # a member gets its share only: done once the group went quiet
    cpu = _cpu_s() - cpu0
    # Linger a moment for late duplicates (a resend would show up here), then report.
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        c.loop(0.02)
    c.disconnect()
    distinct = sum(seen)
    print(json.dumps({"received": counts["received"], "distinct": distinct,
                      "dup": counts["dup"], "bad": counts["bad"],
                      "dup_flag": counts["dup_flag"], "cpu_s": cpu, "last_mono": last[0],
                      "loops": loops, **({"seen": seen.hex()} if args.shared else {})}),
          flush=True)


def run_publisher(args: argparse.Namespace) -> None:
    c = _client(args.client_id, args.port, args)
    sent_at: dict[int, float] = {}
    lat: list[float] = []
    state = {"inflight": 0, "acked": 0, "connected": False}
    perf = time.perf_counter

    def on_connect(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        state["connected"] = True

    def on_publish(client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        t = sent_at.pop(mid, None)
        if t is not None:
            lat.append(perf() - t)
            state["inflight"] -= 1
            state["acked"] += 1

    c.on_connect, c.on_publish = on_connect, on_publish
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not state["connected"] and time.monotonic() < deadline:
        c.loop(0.05)
    print("READY", flush=True)
    sys.stdin.readline()  # "go"
    pad = b"x" * (PAYLOAD_SIZE - 8)
    window, qos, count = args.window, args.qos, args.count
    cpu0 = _cpu_s()
    t0_mono = time.monotonic()
    t0 = perf()
    stop_at = t0 + args.max_seconds
    sent = 0
    loops = 0  # passes of paho's loop(): each costs a select() and its Python around it
    while True:
        now = perf()
        if now < stop_at:
            while sent < count and state["inflight"] < window:
                state["inflight"] += 1
                ts = perf()
                info = c.publish(TOPIC, sent.to_bytes(8, "big") + pad, qos=qos)
                if qos:
                    sent_at[info.mid] = ts
                else:
                    state["inflight"] -= 1
                    state["acked"] += 1
                sent += 1
        if state["inflight"] == 0 and (sent >= count or now >= stop_at):
            break
        if now > stop_at + 10:  # the server stopped answering
            break
        c.loop(0.05)
        loops += 1
    elapsed = perf() - t0
    cpu = _cpu_s() - cpu0
    c.disconnect()
    c.loop(0.05)
    lat.sort()

    def pct(p: float) -> float | None:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else None

    print(json.dumps({"sent": sent, "acked": state["acked"], "unfinished": state["inflight"],
                      "elapsed_s": elapsed, "t0_mono": t0_mono, "p50_ms": pct(0.50),
                      "p99_ms": pct(0.99), "cpu_s": cpu, "loops": loops}), flush=True)


# ============================================================================ the servers




def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / CLK_TCK


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM by PID, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def ensure_mosquitto() -> str:
    found = MOSQUITTO if os.path.exists(MOSQUITTO) else shutil.which("mosquitto")
    if found:
        return found
    if os.geteuid() != 0:
        sys.exit("mosquitto is missing: apt-get install -y mosquitto (as root)")
    print("installing mosquitto (apt-get) ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "mosquitto"], check=True, env=env)
    return MOSQUITTO


class Server:
    name = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"{self.name}-{self.port}.log"

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.argv(), cwd=REPO, env=_env(), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not wait_port(self.port, self.proc, READY_TIMEOUT_S):
            stop(self.proc)
            raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class Mosquitto(Server):
    name = "mosquitto"

    def __init__(self, workdir: Path, binary: str, window: int) -> None:
        super().__init__(workdir)
        self.binary = binary
        self.conf = workdir / f"mosquitto-{self.port}.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            f"max_inflight_messages {window}\n"
            # unlimited queue toward a slow subscriber: the count check must not see drops
            "max_queued_messages 0\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n"
        )

    def argv(self) -> list[str]:
        return [self.binary, "-c", str(self.conf)]


class Exactmesh(Server):
    name = "exactmesh"

    def __init__(self, workdir: Path, extra: list[str]) -> None:
        super().__init__(workdir)
        self.extra = extra

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "router.cli", "router", "--id", "B", "--amqp",
                f"127.0.0.1:{free_port()}", "--mqtt", f"127.0.0.1:{self.port}",
                "--log-level", "warning", *self.extra]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ============================================================================ one run


@dataclass
class Run:
    server: str
    qos: int
    subs: int
    shared: bool = False
    pub: dict[str, Any] = field(default_factory=dict)
    sub: list[dict[str, Any]] = field(default_factory=list)
    server_cpu_s: float = 0.0
    other_cpu_s: float = 0.0  # busy CPU of processes outside this benchmark, during the run
    wall_s: float = 0.0
    own_cpu_s: float = 0.0  # the server's, the publisher's and the subscribers' CPU
    problems: list[str] = field(default_factory=list)

    @property
    def msgs(self) -> int:
        return int(self.pub.get("acked", 0))

    @property
    def rate(self) -> float:
        """Delivered: from the first publish until every subscriber has every message. A
        broker that queues (mosquitto here, `max_queued_messages 0`) may finish the publisher
        before its subscribers; what it accepted but has not delivered yet is not throughput."""
        if not self.sub or not self.pub.get("t0_mono"):
            return 0.0
        e = max(s.get("last_mono", 0.0) for s in self.sub) - self.pub["t0_mono"]
        return self.msgs / e if e > 0 else 0.0

    @property
    def pub_rate(self) -> float:
        """At the publisher: first publish to last PUBACK/PUBCOMP."""
        e = self.pub.get("elapsed_s") or 0
        return self.msgs / e if e else 0.0

    @property
    def busy_cores(self) -> float:
        """CPUs the server and its clients kept busy while the messages moved (first publish
        to the last subscriber's last message). The run's wall time would understate it: it
        also holds the clients' start and the subscribers' wait for late duplicates."""
        return self.own_cpu_s * self.rate / self.msgs if self.msgs and self.rate else 0.0

    def passes(self) -> str:
        """The clients' paho loop passes per message: publisher, then the subscribers'
        mean. Fewer means each pass handled more packets (deeper queues, less CPU)."""
        if not self.msgs or not self.sub:
            return "-"
        sub = sum(s.get("loops", 0) for s in self.sub) / len(self.sub)
        return f"pub {self.pub.get('loops', 0) / self.msgs:.2f}, sub {sub / self.msgs:.2f}"

    def us_per_msg(self, cpu_s: float) -> float | None:
        return cpu_s / self.msgs * 1e6 if self.msgs else None


def _spawn_client(role: str, port: int, qos: int, count: int, client_id: str,
                  args: argparse.Namespace) -> subprocess.Popen[str]:
    # (`args` may be another benchmark's, which has no --shared: benchmarks.relay_router.)
    argv = [sys.executable, "-m", "benchmarks.mqtt", "--role", role, "--port", str(port),
            "--qos", str(qos), "--count", str(count), "--client-id", client_id,
            "--window", str(args.window), "--max-seconds", str(args.max_seconds),
            *(["--shared"] if getattr(args, "shared", False) else []),
            *([f"--tls-ca={args.tls_ca}"] if getattr(args, "tls_ca", None) else []),
            *([f"--user={args.user}"] if getattr(args, "user", None) else [])]
    return subprocess.Popen(argv, cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_line(p: subprocess.Popen[str], timeout: float) -> str:
    """One stdout line of a client, or '' on timeout / exit."""
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(p.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0].strip() if out else ""


def run_one(server: Server, qos: int, n_subs: int, args: argparse.Namespace) -> Run:
    r = Run(server.name, qos, n_subs, getattr(args, "shared", False))
    server.start()
    assert server.proc is not None
    pid = server.proc.pid
    tag = f"{server.name}-q{qos}-{n_subs}-{os.getpid()}"
    clients: list[subprocess.Popen[str]] = []
    try:
        subs = [_spawn_client("sub", server.port, qos, args.count, f"{tag}-sub{i}", args)
                for i in range(n_subs)]
        clients += subs
        for i, s in enumerate(subs):
            line = _read_line(s, READY_TIMEOUT_S)
            if line != "READY":
                raise RuntimeError(f"subscriber {i} not ready: {line!r} "
                                   f"{s.stderr.read() if s.poll() is not None else ''}")
        pub = _spawn_client("pub", server.port, qos, args.count, f"{tag}-pub", args)
        clients.append(pub)
        if _read_line(pub, READY_TIMEOUT_S) != "READY":
            raise RuntimeError("publisher not ready")
        cpu0 = proc_cpu_s(pid)
        busy0 = machine_busy_s()
        t0 = time.monotonic()
        pub.stdin.write("go\n")
        pub.stdin.flush()
        line = _read_line(pub, args.max_seconds + 20)
        if not line:
            raise RuntimeError(f"publisher gave no result: {pub.stderr.read()[-2000:]}")
        r.pub = json.loads(line)
        # The subscribers' share of the run ends when they have everything; server CPU
        # counts until then too (mosquitto may still be forwarding when the publisher ends).
        for s in subs:
            s.stdin.write(f"{r.pub['acked']}\n")
            s.stdin.flush()
        for i, s in enumerate(subs):
            line = _read_line(s, SUB_GRACE_S + 5)
            if not line:
                r.problems.append(f"subscriber {i} gave no result")
                continue
            r.sub.append(json.loads(line))
        r.wall_s = time.monotonic() - t0
        r.server_cpu_s = proc_cpu_s(pid) - cpu0
        r.own_cpu_s = r.server_cpu_s + r.pub["cpu_s"] + sum(s["cpu_s"] for s in r.sub)
        r.other_cpu_s = max(0.0, machine_busy_s() - busy0 - r.own_cpu_s)
    finally:
        for c in clients:
            if c.poll() is None:
                try:
                    c.wait(3)
                except subprocess.TimeoutExpired:
                    c.kill()
                    c.wait(3)
        server.stop()
    _check(r)
    return r


def _check(r: Run) -> None:
    p = r.pub
    if p.get("unfinished"):
        r.problems.append(f"{p['unfinished']} messages never got PUBACK/PUBCOMP")
    if r.shared:
        _check_group(r)
        return
    for i, s in enumerate(r.sub):
        if s["distinct"] < r.msgs:
            r.problems.append(f"subscriber {i} got {s['distinct']} of {r.msgs} messages")
        if s["bad"]:
            r.problems.append(f"subscriber {i} got {s['bad']} unknown messages")
        if r.qos == 2 and s["dup"]:
            r.problems.append(f"subscriber {i} got {s['dup']} duplicates at QoS 2")
    if len(r.sub) < r.subs:
        r.problems.append(f"only {len(r.sub)} of {r.subs} subscribers reported")


def _check_group(r: Run) -> None:
    """A shared group: every message at one member at least, at QoS 2 at exactly one."""
    if len(r.sub) < r.subs:
        r.problems.append(f"only {len(r.sub)} of {r.subs} members reported")
    held = [0] * r.msgs
    for s in r.sub:
        seen = bytes.fromhex(s["seen"])
        for i in range(min(r.msgs, len(seen))):
            held[i] += seen[i]
        if s["bad"]:
            r.problems.append(f"a member got {s['bad']} unknown messages")
    missing = held.count(0)
    twice = sum(1 for n in held if n > 1)
    if missing:
        r.problems.append(f"the group got {r.msgs - missing} of {r.msgs} messages")
    if twice and r.qos == 2:
        r.problems.append(f"{twice} messages went to two members at QoS 2")
    spread = [bytes.fromhex(s["seen"]).count(1) for s in r.sub]
    print(f"    group members got {spread} messages, {twice} at two members", flush=True)


# ============================================================================ the report


def _f(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


@dataclass
class Summary:
    """One server in one scenario: the medians over its repeats."""

    server: str
    qos: int
    subs: int
    runs: int
    msgs: int  # in all repeats together
    rate: float | None  # delivered to every subscriber
    pub_rate: float | None  # at the publisher
    p50: float | None
    p99: float | None
    server_us: float | None
    pub_us: float | None
    sub_us: float | None
    busy: float | None  # CPUs the server and its clients kept busy while messages moved
    other: float | None  # % of one core
    shared: bool = False  # the subscribers were one shared group


def _median(values: list[float | None]) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def summarize(runs: list[Run]) -> Summary:
    ok = [r for r in runs if r.msgs]
    return Summary(
        runs[0].server if runs else "-", runs[0].qos if runs else 0,
        runs[0].subs if runs else 0, len(ok), sum(r.msgs for r in ok),
        _median([r.rate for r in ok]),
        _median([r.pub_rate for r in ok]),
        _median([r.pub.get("p50_ms") for r in ok]),
        _median([r.pub.get("p99_ms") for r in ok]),
        _median([r.us_per_msg(r.server_cpu_s) for r in ok]),
        _median([r.us_per_msg(r.pub.get("cpu_s", 0)) for r in ok]),
        _median([sum(s["cpu_s"] for s in r.sub) / len(r.sub) / r.msgs * 1e6
                 for r in ok if r.sub]),
        _median([r.busy_cores for r in ok]),
        _median([r.other_cpu_s / r.wall_s * 100 for r in ok if r.wall_s]),
        bool(runs and runs[0].shared),
    )


@dataclass
class Paired:
    """Ratios of each exactmesh run to the mosquitto run just before it: the host's speed
    drifts within minutes, and a ratio of neighbours drifts less than a ratio of medians."""

    rate: list[float]
    cpu: list[float]

    def describe(self) -> str:
        if not self.rate:
            return ""
        return (f"; run by run: throughput {_median(self.rate):.2f}x "
                f"({min(self.rate):.2f}-{max(self.rate):.2f}), CPU {_median(self.cpu):.2f}x "
                f"({min(self.cpu):.2f}-{max(self.cpu):.2f})")


def paired_ratios(em: list[Run], mq: list[Run]) -> Paired:
    rate, cpu = [], []
    for e, m in zip(em, mq, strict=False):  # one list is empty with --server
        e_us, m_us = e.us_per_msg(e.server_cpu_s), m.us_per_msg(m.server_cpu_s)
        if e.rate and m.rate and e_us and m_us:
            rate.append(e.rate / m.rate)
            cpu.append(e_us / m_us)
    return Paired(rate, cpu)


def report(pairs: list[tuple[Summary, Summary, Paired]]) -> list[str]:
    lines = [
        "| scenario | server | delivered msgs/s | at publisher msgs/s | p50 ms | p99 ms | "
        "server CPU us/msg | pub us/msg | sub us/msg | CPUs busy | other load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ratios = []
    for em, mq, paired in pairs:
        ran = [r for r in (em, mq) if r.server != "-"]  # one side only with --server
        name = f"QoS {ran[0].qos}, 1 -> {ran[0].subs}" + (" shared" if ran[0].shared else "")
        for r in ran:
            lines.append(
                f"| {name} | {r.server} | {_f(r.rate)} | {_f(r.pub_rate)} | "
                f"{_f(r.p50, '{:.2f}')} | "
                f"{_f(r.p99, '{:.2f}')} | {_f(r.server_us, '{:.1f}')} | "
                f"{_f(r.pub_us, '{:.1f}')} | {_f(r.sub_us, '{:.1f}')} | "
                f"{_f(r.busy, '{:.2f}')} | {_f(r.other, '{:.0f}%')} |")
        if len(ran) < 2:
            continue
        ratios.append(
            f"{name}: exactmesh / mosquitto throughput {_ratio(em.rate, mq.rate)} delivered "
            f"({_ratio(em.pub_rate, mq.pub_rate)} at the publisher), "
            f"server CPU per message {_ratio(em.server_us, mq.server_us)}{paired.describe()}"
            + ("" if em.qos != 2 else "  (target: >= 0.90x throughput, <= 1.5x CPU)"))
    return [*lines, *([""] if ratios else []), *ratios]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=("pub", "sub"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--client-id", help=argparse.SUPPRESS)
    ap.add_argument("--tls-ca", help=argparse.SUPPRESS)  # (benchmarks/secure.py's clients)
    ap.add_argument("--user", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=8000, help="messages per run (default 8000)")
    ap.add_argument("--max-seconds", type=float, default=6.0,
                    help="the publisher stops sending after this long (default 6)")
    ap.add_argument("--window", type=int, default=20,
                    help="the publisher's unfinished QoS 1/2 messages (default 20)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per scenario and server, alternating; medians (default 2)")
    ap.add_argument("--qos", type=int, action="append", choices=(0, 1, 2),
                    help="QoS to run (repeat; default 1 and 2)")
    ap.add_argument("--subs", type=int, action="append",
                    help="subscribers per run (repeat; default 1 and 4)")
    ap.add_argument("--server", choices=("both", "exactmesh", "mosquitto"), default="both")
    ap.add_argument("--router-arg", action="append", default=[],
                    help="an extra option for the exactmesh router (repeat)")
    ap.add_argument("--quick", action="store_true", help="QoS 2, 1 -> 1, 1000 messages")
    ap.add_argument("--shared", action="store_true",
                    help="the subscribers are members of one shared group ($share/bench/...)")
    args = ap.parse_args(argv)
    if args.role == "sub":
        args.qos = args.qos[0]
        run_subscriber(args)
        return 0
    if args.role == "pub":
        args.qos = args.qos[0]
        run_publisher(args)
        return 0
    if args.quick:
        args.count, args.qos, args.subs, args.repeat = 1000, [2], [1], 1
    qoss = args.qos or [1, 2]
    subss = args.subs or [1, 4]
    binary = ensure_mosquitto() if args.server != "exactmesh" else ""
    load0 = os.getloadavg()
    servers = {"both": f"exactmesh (one router, --mqtt) vs mosquitto {_mosquitto_version(binary)}",
               "exactmesh": "exactmesh (one router, --mqtt) alone",
               "mosquitto": f"mosquitto {_mosquitto_version(binary)} alone"}[args.server]
    print(f"{servers}: paho-mqtt "
          f"clients (MQTT 3.1.1, TCP_NODELAY), {PAYLOAD_SIZE}-byte payloads, window "
          f"{args.window}, up to {args.count:,} messages or {args.max_seconds:g} s per run, "
          f"{args.repeat} runs each (medians); "
          f"{os.cpu_count()} CPUs reported, load average {load0[0]:.2f} {load0[1]:.2f} at start",
          flush=True)
    if args.server != "mosquitto":
        from router import accel  # the router it starts runs the same modules as this process

        print(f"exactmesh per-message modules: {accel.describe()}", flush=True)
    pairs: list[tuple[Summary, Summary, Paired]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="mqtt-bench-") as tmp:
        work = Path(tmp)
        for qos in qoss:
            for n in subss:
                runs: dict[str, list[Run]] = {"exactmesh": [], "mosquitto": []}
                for rep in range(args.repeat):
                    for which in ("mosquitto", "exactmesh"):
                        if args.server not in ("both", which):
                            continue
                        server: Server = (Mosquitto(work, binary, args.window)
                                          if which == "mosquitto"
                                          else Exactmesh(work, args.router_arg))
                        try:
                            r = run_one(server, qos, n, args)
                        except RuntimeError as err:
                            r = Run(which, qos, n, problems=[str(err)])
                        runs[which].append(r)
                        print(f"  {which:9} QoS {qos} 1 -> {n} #{rep + 1}: {r.msgs:,} msgs, "
                              f"{r.rate:,.0f} msg/s delivered ({r.pub_rate:,.0f} at the "
                              f"publisher), {r.busy_cores:.2f} CPUs busy, server "
                              f"{_f(r.us_per_msg(r.server_cpu_s), '{:.1f}')} us/msg, all "
                              f"{_f(r.us_per_msg(r.own_cpu_s), '{:.0f}')} us/msg"
                              f", paho loop passes per message: {r.passes()}"
                              + (f"  PROBLEMS: {'; '.join(r.problems)}" if r.problems else ""),
                              flush=True)
                        failed |= bool(r.problems)
                pairs.append((summarize(runs["exactmesh"]), summarize(runs["mosquitto"]),
                              paired_ratios(runs["exactmesh"], runs["mosquitto"])))
    print()
    print("\n".join(report(pairs)))
    load1 = os.getloadavg()
    print(f"\nload average at end {load1[0]:.2f} {load1[1]:.2f}; \"other load\": CPU used by "
          "processes outside the benchmark during the run, in % of one core; \"CPUs busy\": "
          f"the server's and its clients' CPU while the messages moved ({os.cpu_count()} here)")
    print("RESULT:", "counts FAILED (see PROBLEMS)" if failed else
          "every subscriber got every message (at QoS 2 exactly once)")
    return 1 if failed else 0


def _mosquitto_version(binary: str) -> str:
    if not binary:
        return ""
    try:
        out = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=5).stdout
        return out.split("\n")[0].replace("mosquitto version ", "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


if __name__ == "__main__":
    sys.exit(main())

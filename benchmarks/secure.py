"""What security costs, side by side in one run (docs/security.md): one exactmesh router at a
time, 1 -> 1, in three set-ups, alternating, for MQTT (QoS 2 and 1) and for AMQP:

    plain   no files: MQTT at --mqtt, AMQP at --amqp (SASL ANONYMOUS)
    log-in  a password file and an ACL of 1,000 rules, no TLS: the clients log in as `bench`
            (MQTT CONNECT user name and password; AMQP SASL PLAIN in clear, the router with
            --allow-plain-without-tls)
    TLS     the same files, and the clients log in over TLS (--mqtts, --amqps; CA from
            trustme)

so that log-in + ACL / plain is the cost of the files and TLS / log-in the cost of TLS.

    python -m benchmarks.secure                 # MQTT QoS 2 and 1 (8000 messages) and AMQP
                                                # (20000), 1 -> 1, 2 runs of each set-up
    python -m benchmarks.secure --quick         # a few seconds; a smoke check
    python -m benchmarks.secure --protocol amqp --repeat 3

The MQTT clients are benchmarks/mqtt.py's (paho 3.1.1, window `--window`); the AMQP clients
are benchmarks/loadclient.py's lean cffi clients, those of `python -m benchmarks.run`
(window `--amqp-window`, subscriber credit 500), unchanged but for a proton Transport that
logs in with SASL PLAIN and speaks TLS (proton's own, in C) where the set-up asks for it.

Printed per scenario: msgs/s (MQTT: first publish until the subscriber has every message;
AMQP: accepted outcomes over the publisher's sending time, as benchmarks.run), latency
p50/p99 at the publisher (to PUBACK/PUBCOMP, to the accepted outcome), router CPU
microseconds per message (/proc/PID/stat across the run), and the ratios to plain; per run
also the CPU that processes outside the benchmark used meanwhile (/proc/stat). The ACL
has 999 other users' sections and patterns before the rule that lets `bench` use `bench/#`,
so each PUBLISH and SUBSCRIBE (AMQP: each attach, and each message to the `bench/#`
receiver) is judged against 1,000 rules. Counts are checked: every message reaches the
subscriber (MQTT QoS 2 and AMQP exactly once)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import run as bench
from benchmarks.common import free_port, load_line
from benchmarks.mqtt import Exactmesh, Run, _f, _median, machine_busy_s, run_one

USER, PASSWORD = "bench", "bench password"
KINDS = ("plain", "login", "tls")
LABELS = {"plain": "plain", "login": "log-in + 1,000-rule ACL",
          "tls": "TLS + log-in + 1,000-rule ACL"}


class Secure(Exactmesh):
    """The MQTT router with the password file and the ACL; with `tls`, at --mqtts."""

    def __init__(self, workdir: Path, files: dict[str, str], tls: bool = True) -> None:
        self.name = "exactmesh-secure" if tls else "exactmesh-login"
        super().__init__(workdir, ["--password-file", files["passwd"],
                                   "--acl-file", files["acl"]])
        self.files, self.tls = files, tls

    def argv(self) -> list[str]:
        plain = super().argv()
        if not self.tls:
            return plain
        at = plain.index("--mqtt")
        return [*plain[:at], "--mqtts", plain[at + 1], *plain[at + 2:],
                "--tls-cert", self.files["cert"], "--tls-key", self.files["key"]]


def _files(work: Path) -> dict[str, str]:
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    files = {k: str(work / n) for k, n in (("cert", "router.crt"), ("key", "router.key"),
                                           ("ca", "ca.pem"), ("passwd", "passwd"),
                                           ("acl", "acl"))}
    Path(files["cert"]).write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(files["key"])
    ca.cert_pem.write_to_path(files["ca"])
    subprocess.run(["mosquitto_passwd", "-c", "-b", files["passwd"], USER, PASSWORD],
                   check=True)
    rules = [f"user other{i}\ntopic readwrite other{i}/#\n" for i in range(499)]
    rules += [f"pattern read shared/{i}/%c/#\n" for i in range(500)]
    Path(files["acl"]).write_text("".join(rules) + f"user {USER}\ntopic readwrite bench/#\n")
    return files


@dataclass
class Figures:
    """One run's figures, MQTT or AMQP."""

    msgs: int = 0
    rate: float | None = None
    p50: float | None = None
    p99: float | None = None
    cpu_us: float | None = None
    other: float | None = None  # CPU used outside the benchmark meanwhile, share of one core
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- MQTT


def mqtt_run(kind: str, qos: int, files: dict[str, str], work: Path,
             args: argparse.Namespace) -> Figures:
    args.tls_ca = files["ca"] if kind == "tls" else None
    args.user = None if kind == "plain" else USER
    server = Exactmesh(work, []) if kind == "plain" else Secure(work, files, kind == "tls")
    try:
        r = run_one(server, qos, 1, args)
    except RuntimeError as err:
        r = Run(server.name, qos, 1, problems=[str(err)])
    return Figures(r.msgs, r.rate or None, r.pub.get("p50_ms"), r.pub.get("p99_ms"),
                   r.us_per_msg(r.server_cpu_s),
                   r.other_cpu_s / r.wall_s if r.wall_s else None, r.problems)


# ---------------------------------------------------------------- AMQP


def lean_client(argv: list[str]) -> int:
    """`python -m benchmarks.secure _lean [--user U] [--tls-ca FILE] pub|sub ...`: a
    benchmarks.loadclient client (the rest of the arguments are its own) whose proton
    Transport logs in as U with SASL PLAIN (password from EXACTMESH_PASSWORD) and, with
    --tls-ca, speaks TLS trusting that CA (the chain is checked, not the name: proton matches
    DNS names only and the router is 127.0.0.1)."""
    import proton

    from benchmarks import loadclient

    opts: dict[str, str] = {}
    while argv[:1] and argv[0] in ("--user", "--tls-ca"):
        opts[argv[0]], argv = argv[1], argv[2:]
    user, ca = opts.get("--user"), opts.get("--tls-ca")
    password = os.environ.get("EXACTMESH_PASSWORD", "")

    class LogIn(proton.Transport):
        def bind(self, connection: proton.Connection) -> None:
            if user:  # (proton reads the credentials at bind)
                connection.user, connection.password = user, password
                sasl = self.sasl()
                sasl.allowed_mechs("PLAIN")
                sasl.allow_insecure_mechs = ca is None
            super().bind(connection)
            if ca:
                domain = proton.SSLDomain(proton.SSLDomain.MODE_CLIENT)
                domain.set_trusted_ca_db(ca)
                domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER)
                proton.SSL(self, domain)

    # What loadclient.Engine makes (this process runs that one client and nothing else).
    proton.Transport = LogIn  # type: ignore[misc]
    return loadclient.main(argv)


def _lean_argv(port: int, role: str, json_path: Path, kind: str, files: dict[str, str],
               cfg: bench.Config) -> list[str]:
    login = [] if kind == "plain" else ["--user", USER]
    tls = ["--tls-ca", files["ca"]] if kind == "tls" else []
    argv = [sys.executable, "-m", "benchmarks.secure", "_lean", *login, *tls, role,
            "--url", f"127.0.0.1:{port}", "--json-out", str(json_path)]
    if role == "sub":  # as benchmarks.run.start_subs / start_pubs
        return [*argv, "--filter", "bench/#", "--expect", str(cfg.count), "--credit",
                str(max(500, 2 * cfg.window)), "--deadline-s",
                str(cfg.deadline_s + bench.ATTACH_TIMEOUT_S + bench.SUB_GRACE_S)]
    return [*argv, "--topic", "bench/t0", "--pub-id", "0", "--count", str(cfg.count),
            "--window", str(cfg.window), "--size", str(cfg.size), "--wait-go",
            "--deadline-s", str(cfg.deadline_s + bench.ATTACH_TIMEOUT_S)]


def amqp_run(kind: str, rep: int, files: dict[str, str], work: Path,
             args: argparse.Namespace) -> Figures:
    """One run of the lean clients, 1 -> 1, on a fresh router (as benchmarks.run does)."""
    workdir = work / f"amqp-{kind}-{rep}"
    workdir.mkdir()
    tls_port = free_port() if kind == "tls" else 0
    router_args = {
        "plain": [],
        "login": ["--password-file", files["passwd"], "--acl-file", files["acl"],
                  "--allow-plain-without-tls"],
        "tls": ["--amqps", f"127.0.0.1:{tls_port}", "--tls-cert", files["cert"],
                "--tls-key", files["key"], "--password-file", files["passwd"],
                "--acl-file", files["acl"]],
    }[kind]
    cfg = bench.Config(count=args.amqp_count, window=args.amqp_window, publishers=1,
                       subscribers=[1], size=100, deadline_s=20.0 if args.quick else 120.0,
                       router_cmd=bench.router_command(None), exact_filter=False, sasl=True,
                       workdir=workdir, router_args=tuple(router_args))
    res = bench.ScenarioResult(f"AMQP {kind}", 1, 1, cfg.count)
    amqp_port = free_port()
    port = tls_port or amqp_port
    routers: list[bench.Child] = []
    clients: list[bench.Child] = []
    busy = 0.0
    try:
        routers.append(bench.start_router(cfg, amqp_port))
        for role in ("sub", "pub"):  # the subscriber first, or early messages go nowhere
            path = workdir / f"{role}.json"
            child = bench.spawn(role, _lean_argv(port, role, path, kind, files, cfg),
                                ("attached", "done"), workdir / f"{role}.log", role == "pub")
            child.json_path = path
            clients.append(child)
            bench.wait_attached([child])
        busy = machine_busy_s()
        res.router_cpu_s, res.window_s = bench.measure(cfg, routers, clients[1:], res)
        busy = machine_busy_s() - busy
        bench.wait_exit(clients, time.monotonic() + bench.SUB_GRACE_S)
    except RuntimeError as err:
        res.problems.append(str(err))
        res.problems += [f"router output:\n{r.output_tail()}" for r in routers]
    finally:
        for c in clients:
            bench.stop_child(c)
        for r in routers:
            bench.stop_child(r)
    for r in routers:
        bench.collect_reports(res, [], r)
    bench.collect_reports(res, clients, None)
    bench.check_exactly_once(res, cfg)
    if not (res.pubs and res.subs):
        return Figures(problems=res.problems)
    s = bench.summarise(res, len(os.sched_getaffinity(0)))
    # (the subscriber's CPU counts from its attach: a little more than the window's)
    own = (res.router_cpu_s or 0.0) + res.pubs[0]["cpu_s"] + res.subs[0]["cpu_s"]
    other = max(0.0, busy - own) / res.window_s if res.window_s else None
    return Figures(s["accepted"], s["msgs_per_s"], s["p50_ms"], s["p99_ms"],
                   s["router_us_msg"], other, res.problems)


# ---------------------------------------------------------------- the report


def _row(name: str, runs: list[Figures]) -> tuple[str, float | None, float | None]:
    ok = [r for r in runs if r.msgs]
    rate = _median([r.rate for r in ok])
    cpu = _median([r.cpu_us for r in ok])
    p50 = _median([r.p50 for r in ok])
    p99 = _median([r.p99 for r in ok])
    return (f"| {name} | {_f(rate)} | {_f(p50, '{:.2f}')} | {_f(p99, '{:.2f}')} | "
            f"{_f(cpu, '{:.1f}')} |", rate, cpu)


def _ratios(name: str, medians: dict[str, tuple[float | None, float | None]]) -> str:
    """'MQTT QoS 2: log-in + ACL / plain 0.98x msgs/s, 1.02x CPU; TLS / log-in ...'."""
    def one(a: str, b: str) -> str:
        (ra, ca), (rb, cb) = medians[a], medians[b]
        if not (ra and rb and ca and cb):
            return "-"
        return f"{ra / rb:.2f}x msgs/s, {ca / cb:.2f}x CPU per message"

    return (f"{name}: log-in + ACL / plain {one('login', 'plain')}; TLS + log-in + ACL / "
            f"log-in + ACL {one('tls', 'login')}; TLS + log-in + ACL / plain "
            f"{one('tls', 'plain')}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_lean"]:
        return lean_client(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=8000, help="MQTT messages per run (8000)")
    ap.add_argument("--max-seconds", type=float, default=6.0,
                    help="the MQTT publisher stops sending after this long (default 6)")
    ap.add_argument("--window", type=int, default=20,
                    help="the MQTT publisher's unfinished messages (default 20)")
    ap.add_argument("--qos", type=int, action="append", choices=(1, 2),
                    help="MQTT QoS to run (repeat; default 2 and 1)")
    ap.add_argument("--amqp-count", type=int, default=20000,
                    help="AMQP messages per run (default 20000, as benchmarks.run)")
    ap.add_argument("--amqp-window", type=int, default=200,
                    help="the AMQP publisher's unsettled messages (default 200, as "
                    "benchmarks.run)")
    ap.add_argument("--protocol", action="append", choices=("mqtt", "amqp"),
                    help="repeat; default both")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs of each set-up, alternating; medians (default 2)")
    ap.add_argument("--quick", action="store_true",
                    help="MQTT QoS 2 (300 messages) and AMQP (2000), 1 run of each "
                    "set-up: a smoke check")
    args = ap.parse_args(argv)
    if args.quick:  # (AMQP: enough for several of /proc's 10 ms CPU ticks)
        args.count, args.amqp_count, args.qos, args.repeat = 300, 2000, [2], 1
    args.shared = False
    protocols = args.protocol or ["mqtt", "amqp"]
    print(f"exactmesh, one router, 1 -> 1: plain, then a password file and an ACL of 1,000 "
          f"rules (log-in), then those and TLS; MQTT: paho 3.1.1 clients, window "
          f"{args.window}, up to {args.count:,} messages or {args.max_seconds:g} s per run; "
          f"AMQP: benchmarks.loadclient's lean clients, window {args.amqp_window}, "
          f"{args.amqp_count:,} messages per run; {args.repeat} runs each (medians); "
          f"{os.cpu_count()} CPUs reported, {load_line()}", flush=True)
    from router import accel  # the routers it starts run the same modules as this process

    print(f"exactmesh per-message modules: {accel.describe()}", flush=True)
    scenarios = [(f"MQTT QoS {q}", q) for q in (args.qos or [2, 1]) if "mqtt" in protocols]
    scenarios += [("AMQP", 0)] if "amqp" in protocols else []
    lines = ["| scenario | msgs/s | p50 ms | p99 ms | router CPU us/msg |",
             "| --- | ---: | ---: | ---: | ---: |"]
    ratios, failed = [], False
    with tempfile.TemporaryDirectory(prefix="secure-bench-") as tmp:
        work = Path(tmp)
        files = _files(work)
        os.environ["EXACTMESH_PASSWORD"] = PASSWORD  # (the clients read it; never argv)
        for name, qos in scenarios:
            runs: dict[str, list[Figures]] = {k: [] for k in KINDS}
            for rep in range(args.repeat):
                for kind in KINDS:
                    r = (mqtt_run(kind, qos, files, work, args) if qos else
                         amqp_run(kind, rep, files, work, args))
                    runs[kind].append(r)
                    print(f"  {name} {kind:5} #{rep + 1}: {r.msgs:,} msgs, {_f(r.rate)} "
                          f"msg/s, p50 {_f(r.p50, '{:.2f}')} ms, router "
                          f"{_f(r.cpu_us, '{:.1f}')} us/msg, other load "
                          f"{_f(r.other and r.other * 100, '{:.0f}%')}"
                          + (f"  PROBLEMS: {'; '.join(r.problems)}" if r.problems else ""),
                          flush=True)
                    failed |= bool(r.problems)
            medians = {}
            for kind in KINDS:
                line, rate, cpu = _row(f"{name}, 1 -> 1, {LABELS[kind]}", runs[kind])
                lines.append(line)
                medians[kind] = (rate, cpu)
            ratios.append(_ratios(name, medians))
    print()
    print("\n".join([*lines, "", *ratios]))
    print("msgs/s: MQTT from the first publish until the subscriber had every message; AMQP "
          "accepted outcomes over the publisher's sending time (as benchmarks.run). Latency "
          "at the publisher; router CPU from /proc/PID/stat; other load (per run, above): CPU "
          "that processes outside the benchmark used meanwhile, in % of one core.")
    print(f"{load_line()} at the end")
    print("RESULT:", "counts FAILED (see PROBLEMS)" if failed else
          "every subscriber got every message (at QoS 2 exactly once; AMQP exactly once)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

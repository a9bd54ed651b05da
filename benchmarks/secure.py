"""What security costs, side by side in one run (docs/security.md): one exactmesh router with
plain MQTT, then one with MQTT over TLS, a password file and an ACL of 1,000 rules, the same
paho clients (benchmarks/mqtt.py) against each, alternating.

    python -m benchmarks.secure                 # QoS 2 and 1, 1 -> 1, 8000 messages, 2 runs
    python -m benchmarks.secure --quick         # a few seconds; a smoke check

Printed per scenario: msgs/s delivered, latency p50/p99 at the publisher, router CPU
microseconds per message, and the secure/plain ratios. The secure router's clients log in
as `bench` over TLS (CA from trustme); its ACL has 999 other users' sections and patterns
before the rule that lets `bench` use `bench/#`, so each PUBLISH and SUBSCRIBE is judged
against 1,000 rules. Counts are checked as in benchmarks.mqtt (at QoS 2 exactly once)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.mqtt import Exactmesh, Run, _f, _median, run_one

USER, PASSWORD = "bench", "bench password"


class Secure(Exactmesh):
    name = "exactmesh-secure"

    def __init__(self, workdir: Path, files: dict[str, str]) -> None:
        super().__init__(workdir, [])
        self.files = files

    def argv(self) -> list[str]:
        plain = super().argv()
        at = plain.index("--mqtt")
        return [*plain[:at], "--mqtts", plain[at + 1], *plain[at + 2:],
                "--tls-cert", self.files["cert"], "--tls-key", self.files["key"],
                "--password-file", self.files["passwd"], "--acl-file", self.files["acl"]]


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


def _row(name: str, runs: list[Run]) -> tuple[str, float | None, float | None]:
    ok = [r for r in runs if r.msgs]
    rate = _median([r.rate for r in ok])
    cpu = _median([r.us_per_msg(r.server_cpu_s) for r in ok])
    p50 = _median([r.pub.get("p50_ms") for r in ok])
    p99 = _median([r.pub.get("p99_ms") for r in ok])
    return (f"| {name} | {_f(rate)} | {_f(p50, '{:.2f}')} | {_f(p99, '{:.2f}')} | "
            f"{_f(cpu, '{:.1f}')} |", rate, cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=8000)
    ap.add_argument("--max-seconds", type=float, default=6.0)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--qos", type=int, action="append", choices=(1, 2))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.qos, args.repeat = 300, [2], 1
    args.shared = False
    print(f"exactmesh, one router: plain MQTT vs MQTT over TLS with a password file and an ACL "
          f"of 1,000 rules; paho 3.1.1 clients, window {args.window}, up to {args.count:,} "
          f"messages or {args.max_seconds:g} s per run, {args.repeat} runs each (medians)",
          flush=True)
    lines = ["| scenario | delivered msgs/s | p50 ms | p99 ms | router CPU us/msg |",
             "| --- | ---: | ---: | ---: | ---: |"]
    ratios, failed = [], False
    with tempfile.TemporaryDirectory(prefix="secure-bench-") as tmp:
        work = Path(tmp)
        files = _files(work)
        os.environ["EXACTMESH_PASSWORD"] = PASSWORD  # (the clients read it; never argv)
        for qos in args.qos or [2, 1]:
            runs: dict[str, list[Run]] = {"plain": [], "secure": []}
            for _ in range(args.repeat):
                for kind in ("plain", "secure"):
                    args.tls_ca = files["ca"] if kind == "secure" else None
                    args.user = USER if kind == "secure" else None
                    server = Secure(work, files) if kind == "secure" else Exactmesh(work, [])
                    try:
                        r = run_one(server, qos, 1, args)
                    except RuntimeError as err:
                        r = Run(kind, qos, 1, problems=[str(err)])
                    runs[kind].append(r)
                    print(f"  {kind:6} QoS {qos} 1 -> 1: {r.msgs:,} msgs, {r.rate:,.0f} msg/s, "
                          f"router {_f(r.us_per_msg(r.server_cpu_s), '{:.1f}')} us/msg"
                          + (f"  PROBLEMS: {'; '.join(r.problems)}" if r.problems else ""),
                          flush=True)
                    failed |= bool(r.problems)
            plain_line, plain_rate, plain_cpu = _row(f"QoS {qos}, 1 -> 1, plain", runs["plain"])
            secure_line, rate, cpu = _row(f"QoS {qos}, 1 -> 1, TLS + log-in + 1,000-rule ACL",
                                          runs["secure"])
            lines += [plain_line, secure_line]
            if plain_rate and rate and plain_cpu and cpu:
                ratios.append(f"QoS {qos}: secure / plain throughput {rate / plain_rate:.2f}x, "
                              f"router CPU per message {cpu / plain_cpu:.2f}x")
    print()
    print("\n".join([*lines, "", *ratios]))
    print("RESULT:", "counts FAILED (see PROBLEMS)" if failed else
          "every subscriber got every message (at QoS 2 exactly once)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

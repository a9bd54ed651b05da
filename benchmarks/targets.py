"""The performance targets, measured against the code before the work on them: `make bench`.

    python -m benchmarks.targets                  # 3 paired runs of every row (about 15 min)
    python -m benchmarks.targets --runs 5 --rows sdk,line
    python -m benchmarks.targets --quick --baseline none   # a smoke check (seconds)

Each row of `TARGETS` is a figure one of the other benchmarks prints (the command that prints
it is in the table's last column). Both sides run the same benchmark scripts, the ones of
this checkout; only the product differs:

    new   this checkout
    old   the product of `--baseline` (a commit, default `BASELINE`, the commit before the
          performance work), unpacked with `git archive` into .bench/baseline-<sha>/ with its
          own compiled modules (`exactmesh accel build` there, once) and this checkout's
          benchmarks/ copied over its own

A run measures every job once on each side, old and new back to back, alternating which goes
first, so background load hits both alike. Printed per row: the target, the median of each
side with its range over the runs, whether the new median meets the target, and per job the
machine's load: the 1-minute load average when it started and the CPU that processes
outside the benchmark used meanwhile ("other", in CPUs, from /proc/stat minus the
benchmark's own process tree).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASELINE = "41101a7"  # main before the performance work began (issue 19)
CACHE = REPO / ".bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ====================================================================== the jobs


@dataclass(frozen=True)
class Job:
    """One benchmark command; `parse` turns its stdout (and JSON file) into named figures."""

    name: str
    argv: tuple[str, ...]
    quick: tuple[str, ...]
    parse: Callable[[str, Path], dict[str, float]]
    timeout: float


def _rows_by_scenario(json_path: Path) -> dict[str, dict[str, Any]]:
    return {r["row"]["scenario"]: r["row"] for r in json.loads(json_path.read_text())}


def parse_amqp(_out: str, json_path: Path) -> dict[str, float]:
    rows = _rows_by_scenario(json_path)
    one, four = rows["1 pub -> 1 sub"], rows["1 pub -> 4 sub"]
    line = next(r for k, r in rows.items() if "line" in k)
    return {"amqp1_us": one["router_us_dlv"], "amqp1_rate": one["msgs_per_s"],
            "amqp4_us": four["router_us_dlv"], "line_share": line["msgs_per_s"]
            / one["msgs_per_s"]}


def parse_sdk(_out: str, json_path: Path) -> dict[str, float]:
    runs = {r["kind"]: r["figures"] for r in json.loads(json_path.read_text())}
    sdk, proton = runs["sdk"]["msgs_per_s"], runs["proton"]["msgs_per_s"]
    return {"sdk_ratio": sdk / proton, "sdk_rate": sdk}


def parse_mqtt(out: str, _json_path: Path) -> dict[str, float]:
    m = re.search(r"QoS 2, 1 -> 1: exactmesh / mosquitto throughput ([\d.]+)x delivered.*?"
                  r"server CPU per message ([\d.]+)x", out)
    if m is None:
        raise ValueError("no 'QoS 2, 1 -> 1: exactmesh / mosquitto' line")
    return {"mqtt_rate": float(m[1]), "mqtt_cpu": float(m[2])}


def parse_spark(out: str, _json_path: Path) -> dict[str, float]:
    m = re.search(r"rows/s: ([\d,]+)", out)
    if m is None:
        raise ValueError("no 'rows/s:' line")
    return {"spark_rate": float(m[1].replace(",", ""))}


JOBS = (
    Job("amqp", ("benchmarks.run", "--subscribers", "1,4", "--line", "3", "--count", "20000",
                 "--json-out", "{json}"),
        ("benchmarks.run", "--quick", "--json-out", "{json}"), parse_amqp, 300),
    Job("sdk", ("benchmarks.sdk_throughput", "--runs", "1", "--kinds", "sdk,proton",
                "--count", "20000", "--json-out", "{json}"),
        ("benchmarks.sdk_throughput", "--runs", "1", "--kinds", "sdk,proton", "--count",
         "500", "--json-out", "{json}"), parse_sdk, 300),
    Job("mqtt", ("benchmarks.mqtt", "--qos", "2", "--subs", "1", "--repeat", "1",
                 "--count", "20000"),
        ("benchmarks.mqtt", "--quick"), parse_mqtt, 300),
    Job("spark", ("benchmarks.spark", "--batches", "8"),
        ("benchmarks.spark", "--batches", "3", "--warmup", "1", "--rows-per-batch", "2000"),
        parse_spark, 600),
)


@dataclass(frozen=True)
class Target:
    key: str  # the figure's name in a job's parse()
    job: str
    path: str
    unit: str
    goal: float
    at_least: bool  # True: the figure must be >= goal; False: <= goal
    fmt: str = "{:,.0f}"

    def met(self, value: float) -> bool:
        return value >= self.goal if self.at_least else value <= self.goal

    def goal_text(self) -> str:
        return ("\u2265 " if self.at_least else "\u2264 ") + self.fmt.format(self.goal)


TARGETS = (
    Target("sdk_ratio", "sdk", "SDK Publisher + durable Subscriber, 1 -> 1",
           "x plain proton msgs/s", 1.0, True, "{:.2f}"),
    Target("spark_rate", "spark", "Spark sink, local[2], one router", "rows/s", 20000, True),
    Target("line_share", "amqp", "line of three routers, 1 -> 1", "of one router's msgs/s",
           0.60, True, "{:.2f}"),
    Target("mqtt_rate", "mqtt", "MQTT QoS 2, 1 -> 1, paho", "x mosquitto msgs/s", 1.0, True,
           "{:.2f}"),
    Target("mqtt_cpu", "mqtt", "MQTT QoS 2, 1 -> 1, paho", "x mosquitto CPU/msg", 1.3, False,
           "{:.2f}"),
    Target("amqp1_us", "amqp", "AMQP 1 -> 1, router CPU", "us/delivery", 15.0, False,
           "{:.1f}"),
    Target("amqp1_rate", "amqp", "AMQP 1 -> 1, one router", "msgs/s", 50000, True),
    Target("amqp4_us", "amqp", "AMQP 1 -> 4, router CPU", "us/delivery", 7.0, False,
           "{:.1f}"),
)


# ====================================================================== measuring


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / CLK_TCK


@dataclass
class Measured:
    figures: dict[str, float] = field(default_factory=dict)
    load1: float = 0.0
    other_cpus: float = 0.0
    seconds: float = 0.0
    error: str = ""


def _session_cpu_s(sid: int, seen: dict[int, float]) -> None:
    """Record in `seen` the CPU seconds so far of every process in session `sid`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # field 6 of proc(5), the session id
            seen[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK


def run_job(job: Job, tree: Path, quick: bool, workdir: Path) -> Measured:
    """Run `job` with `tree` first on the import path; its figures and the machine's load.

    The job runs in a session of its own; its CPU (every process of the session, the JVM of
    Spark included) is sampled from /proc while it runs, so "other" is what the rest of the
    machine used."""
    json_path = workdir / f"{job.name}-{tree.name}.json"
    json_path.unlink(missing_ok=True)
    args = [a.replace("{json}", str(json_path)) for a in (job.quick if quick else job.argv)]
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    env.pop("EXACTMESH_PURE_PYTHON", None)
    m = Measured(load1=os.getloadavg()[0])
    busy0, t0 = _machine_busy_s(), time.monotonic()
    seen: dict[int, float] = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=tree, env=env, text=True,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        while proc.poll() is None and time.monotonic() - t0 < job.timeout:
            _session_cpu_s(proc.pid, seen)
            time.sleep(0.2)  # a sampling period, not a synchronisation
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            m.error = f"ran over {job.timeout:g} s"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    m.seconds = time.monotonic() - t0
    m.other_cpus = max(0.0, (_machine_busy_s() - busy0 - sum(seen.values())) / m.seconds)
    if m.error:
        return m
    if proc.returncode != 0:
        m.error = f"exit {proc.returncode}: {(stderr or stdout)[-400:].strip()}"
        return m
    try:
        m.figures = job.parse(stdout, json_path)
    except (ValueError, KeyError, StopIteration, OSError) as exc:
        m.error = f"could not read its figures ({exc}): {stdout[-400:].strip()}"
    return m


# ====================================================================== the baseline tree


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


def prepare_baseline(rev: str, build: bool = True) -> Path:
    """The product at `rev` in .bench/baseline-<sha>/ (unpacked and compiled once), with this
    checkout's benchmarks/ in place of its own."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = CACHE / f"baseline-{sha[:12]}"
    stamp = tree / ".unpacked"
    if not stamp.exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        stamp.write_text(sha + "\n")
    built = tree / ".accel-built"
    if build and not built.exists():
        env = dict(os.environ, PYTHONPATH=str(tree))
        log = tree / "accel-build.log"
        with log.open("w") as out:
            rc = subprocess.run([sys.executable, "-m", "router.cli", "accel", "build"],
                                cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            print(f"the baseline's compiled build failed (see {log}); it runs as plain "
                  "Python, so its figures are slower than that commit's", flush=True)
        built.write_text(str(rc))
    shutil.rmtree(tree / "benchmarks", ignore_errors=True)
    shutil.copytree(REPO / "benchmarks", tree / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tree


# ====================================================================== reporting


def _fmt_side(target: Target, values: list[float]) -> str:
    if not values:
        return "-"
    med = target.fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({target.fmt.format(min(values))}-{target.fmt.format(max(values))})"


def report(results: dict[str, list[Measured]], jobs: list[Job], sides: list[str]) -> list[str]:
    names = {j.name for j in jobs}
    lines = ["| path | figure | target | " + " | ".join(
        f"{s} median (range)" for s in sides) + " | met |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in sides) + " | --- |"]
    for t in TARGETS:
        if t.job not in names:
            continue
        values = {side: [m.figures[t.key] for m in results[f"{t.job}/{side}"]
                         if t.key in m.figures] for side in sides}
        new = values["new"]
        met = "-" if not new else ("yes" if t.met(statistics.median(new)) else "no")
        lines.append(f"| {t.path} | {t.unit} | {t.goal_text()} | "
                     + " | ".join(_fmt_side(t, values[side]) for side in sides) + f" | {met} |")
    return lines


def load_report(results: dict[str, list[Measured]]) -> list[str]:
    out = []
    for key, runs in results.items():
        cells = ", ".join(f"{m.load1:.2f}/{m.other_cpus:.2f}" for m in runs)
        out.append(f"  {key}: load average at start / other CPUs per run: {cells}")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.targets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="paired runs of each job (default 3)")
    p.add_argument("--baseline", default=BASELINE,
                   help=f"the commit to compare with (default {BASELINE}); 'none': only this "
                        "checkout")
    p.add_argument("--rows", help="comma list of jobs: " + ", ".join(j.name for j in JOBS))
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke check")
    p.add_argument("--json-out", help="also write every run's figures here")
    args = p.parse_args(argv)
    known = {j.name for j in JOBS}
    args.jobs = [j for j in JOBS if args.rows is None or j.name in args.rows.split(",")]
    if args.rows and not set(args.rows.split(",")) <= known:
        p.error(f"--rows: choose from {', '.join(sorted(known))}")
    if args.quick:
        args.runs = 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    sides = {"new": REPO}
    if args.baseline != "none":
        print(f"preparing the baseline {args.baseline} (compiled once, in {CACHE})...",
              flush=True)
        sides = {"old": prepare_baseline(args.baseline), "new": REPO}
    print(f"exactmesh performance targets: {args.runs} paired run(s) of "
          f"{', '.join(j.name for j in args.jobs)}; sides: "
          + ", ".join(f"{s} = {p}" for s, p in sides.items())
          + f"; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, list[Measured]] = {f"{j.name}/{s}": [] for j in args.jobs for s in sides}
    failed = []
    with tempfile.TemporaryDirectory(prefix="exactmesh-targets-") as tmp:
        for run in range(1, args.runs + 1):
            for job in args.jobs:
                order = list(sides) if run % 2 else list(reversed(sides))
                for side in order:
                    m = run_job(job, sides[side], args.quick, Path(tmp))
                    results[f"{job.name}/{side}"].append(m)
                    figs = ", ".join(f"{k} {v:,.2f}" for k, v in m.figures.items())
                    print(f"  run {run} {job.name:5} {side}: {figs or m.error} "
                          f"({m.seconds:.0f} s, load {m.load1:.2f}, other CPUs "
                          f"{m.other_cpus:.2f})", flush=True)
                    if m.error:
                        failed.append(f"{job.name}/{side} run {run}: {m.error}")
    print()
    print("\n".join(report(results, args.jobs, list(sides))))
    print()
    print("machine load per job (1-minute load average when it started / CPUs used by "
          "processes outside the benchmark while it ran):")
    print("\n".join(load_report(results)))
    print("commands: " + "; ".join(
        f"{j.name}: python -m {' '.join(a for a in j.argv if a != '{json}')}"
        .replace(" --json-out", "") for j in args.jobs))
    print(f"total {time.monotonic() - started:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {k: [m.__dict__ for m in v] for k, v in results.items()}, indent=1))
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

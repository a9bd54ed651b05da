"""Every benchmark in benchmarks/, run the way docs/benchmarks.md tells a user to, at a tiny size.

Each test starts `python -m benchmarks.X ...` as its own process (with this interpreter, so
the routers it starts come from the same environment), checks its exit status and that the
figures it prints are there and parse: messages/s, latency p50/p99 and the router's CPU per
message or delivery where that benchmark prints them. The sizes are too small for the
figures to mean anything; the point is that a change of a wire format, a log line or an API
that a benchmark depends on fails here instead of in a command in docs/benchmarks.md.

benchmarks/loadclient.py is covered by benchmarks.run, which starts its publishers and
subscribers; benchmarks/common.py by all of them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT


def run_benchmark(module: str, *args: str, timeout: float = 60.0) -> str:
    """Run `python -m benchmarks.<module> args`; its stdout, once it exited with status 0.

    The benchmark runs in its own session: if it overruns `timeout`, it is killed together
    with the routers and clients it started (by its process group, never by name)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", f"benchmarks.{module}", *args]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv[1:])} ran over {timeout} s\n--- stdout\n{out[-3000:]}\n"
                    f"--- stderr\n{err[-3000:]}")
    finally:
        # Anything it left running (it should leave nothing) goes with the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (
        f"{' '.join(argv[1:])} exited with {proc.returncode}\n--- stdout\n{out[-3000:]}\n"
        f"--- stderr\n{err[-3000:]}")
    return out


def num(cell: str) -> float:
    """A printed figure: '12,345', '5.71', '116%', '-0.2'. A '-' (not measured) fails."""
    try:
        return float(cell.replace(",", "").removesuffix("%"))
    except ValueError:
        raise AssertionError(f"not a figure: {cell!r}") from None


def table(out: str, first_header: str) -> list[dict[str, str]]:
    """The rows of every plain-text table whose header starts with `first_header`: header,
    a line of dashes per column (which gives the column spans), then rows up to a blank
    line. Footnote lines after a table come out as rows too; callers pick rows by name."""
    lines = out.splitlines()
    rows: list[dict[str, str]] = []
    for i, line in enumerate(lines[:-1]):
        if not line.startswith(first_header) or not lines[i + 1].startswith("---"):
            continue
        spans = [m.span() for m in re.finditer(r"-+", lines[i + 1])]
        names = [line[a:b].strip() for a, b in spans[:-1]] + [line[spans[-1][0]:].strip()]
        for row in lines[i + 2:]:
            if not row.strip():
                break
            cells = [row[a:b].strip() for a, b in spans[:-1]] + [row[spans[-1][0]:].strip()]
            rows.append(dict(zip(names, cells, strict=True)))
    assert rows, f"no table with header {first_header!r} in:\n{out}"
    return rows


def check_rate_and_latency(row: dict[str, str], rate: str, p50: str, p99: str) -> None:
    assert num(row[rate]) > 0, row
    assert 0 <= num(row[p50]) <= num(row[p99]), row


# ---------------------------------------------------------------- AMQP, one router and a line


def test_run() -> None:
    """The router benchmark (`make bench`): fan-out on one router and a line of two routers,
    with the lean load clients of benchmarks/loadclient.py."""
    out = run_benchmark("run", "--quick", "--count", "300", "--subscribers", "2",
                        "--line", "2")
    rows = {r["scenario"]: r for r in table(out, "scenario")}
    for name in ("1 pub -> 2 sub", "1 pub -> 1 sub, 2-router line"):
        row = rows[name]
        check_rate_and_latency(row, "msgs/s", "p50 ms", "p99 ms")
        # /proc CPU ticks are 10 ms: over 300 messages the router may show 0.
        assert num(row["rtr us/msg"]) >= 0 and num(row["rtr us/dlv"]) >= 0, row
        assert num(row["pub us/msg"]) >= 0 and num(row["sub us/msg"]) >= 0, row
    assert "every subscriber received every message exactly once" in out


def test_run_workers() -> None:
    """The same on `exactmesh router --workers 2`: router CPU summed over the workers."""
    out = run_benchmark("run", "--quick", "--count", "300", "--publishers", "2",
                        "--subscribers", "2", "--line", "0", "--workers", "2")
    row = {r["scenario"]: r for r in table(out, "scenario")}["2 pub -> 2 sub, 2 workers"]
    check_rate_and_latency(row, "msgs/s", "p50 ms", "p99 ms")
    assert num(row["rtr us/dlv"]) >= 0, row
    assert "every subscriber received every message exactly once" in out


def test_run_at_least_once() -> None:
    """benchmarks.run --guarantee at-least-once: the publishers ask for it on their links."""
    out = run_benchmark("run", "--quick", "--count", "300", "--subscribers", "1",
                        "--line", "0", "--guarantee", "at-least-once")
    row = {r["scenario"]: r for r in table(out, "scenario")}["1 pub -> 1 sub, at least once"]
    check_rate_and_latency(row, "msgs/s", "p50 ms", "p99 ms")
    assert "every subscriber received every message exactly once" in out


def test_sdk_throughput() -> None:
    out = run_benchmark("sdk_throughput", "--count", "300", "--runs", "1")
    rows = [r for r in table(out, "kind") if r["run"] == "1"]
    assert sorted(r["kind"] for r in rows) == ["lean", "proton", "sdk", "sdk-alo"], rows
    for row in rows:
        check_rate_and_latency(row, "msgs/s", "p50 ms", "p99 ms")
        assert num(row["rtr us/msg"]) >= 0, row
    ratio = re.search(r"^SDK / plain proton throughput, medians of all runs: (\S+)$", out, re.M)
    assert ratio and num(ratio[1]) > 0, out
    alo = re.search(r"^SDK at least once / plain proton throughput, medians of all runs: "
                    r"(\S+)$", out, re.M)
    assert alo and num(alo[1]) > 0, out
    assert "the subscriber received every message once" in out


def test_failover() -> None:
    """A router restarted under the subscriber, and one killed under the publisher (which
    resends what it held at the next router); the stream is short and slow."""
    out = run_benchmark("failover", "--runs", "1", "--scenarios", "sub-restart,pub-down",
                        "--warmup-s", "1.2", "--after-s", "1.5", "--rate", "300",
                        timeout=90)
    rows = [r for r in table(out, "scenario") if r["run"] == "median of 1"]
    assert sorted(r["scenario"] for r in rows) == ["pub-down", "sub-restart"], rows
    for row in rows:
        assert num(row["pre-kill msg/s"]) > 0, row
        for key in ("reattach s", "(a) first s", "(b) full s"):
            # Measured (a "-" would fail num), and 0.000 is a real value: a publisher whose
            # router is killed may be attached at the next one within the millisecond.
            assert 0 <= num(row[key]) < 30, row
        assert (row["lost"], row["dup"], row["in order"]) == ("0", "0", "yes"), row
    assert "target: (a) and (b) under" in out
    assert "exactly-once check: in every run the subscriber processed every message" in out


# ---------------------------------------------------------------- gossip


GOSSIP_ROW = re.compile(
    r"^\s*(?P<n>\d+)\s+(?P<links>\d+)\s+(?P<diam>\d+)  (?P<event>.+?)\s+"
    r"(?P<know>\d+ ms|\d+/\d+|no news)\s+(?P<quiet>\d+) ms\s+(?P<frames>\d+)  (?P<types>.*)$",
    re.M)


def test_gossip_convergence() -> None:
    """The simulated mesh, started by flooding; checks what docs/benchmarks.md and
    docs/mesh-protocol.md say of it: one attach is one flood of `2 x links - routers + 1`
    SUBS frames and every router knows it after as many hops as the farthest is away."""
    out = run_benchmark("gossip_convergence", "--routers", "20", "--flood-start")
    rows = {m["event"]: m for m in GOSSIP_ROW.finditer(out)}
    assert len(rows) == 5, out
    for m in rows.values():
        by_type = dict(kv.split("=") for kv in m["types"].split())
        assert sum(int(v) for v in by_type.values()) == int(m["frames"]), m[0]
    n, links = int(m["n"]), int(m["links"])
    start, attach, stop, back, digest = rows.values()
    assert start["event"].startswith("mesh start") and start["know"].endswith(" ms"), start[0]
    ecc = int(re.search(r"\(ecc (\d+)\)", attach["event"])[1])
    assert attach["know"] == f"{ecc} ms", attach[0]
    assert attach["types"] == f"SUBS={2 * links - n + 1}", attach[0]
    assert re.fullmatch(r"\d+ ms", stop["know"]) and re.fullmatch(r"\d+ ms", back["know"]), out
    assert digest["know"] == "no news" and digest["types"] == f"DIGEST={2 * links}", digest[0]
    assert "end state converged, every route checked against networkx" in out


def test_gossip_real() -> None:
    """Real routers in a line: depends on the routers' "knows subscriber" debug log line."""
    out = run_benchmark("gossip_real", "--routers", "3", "--rounds", "2")
    m = re.search(r"^\s+3\s+2\s+(\S+)\s+(\S+)\s+(\d+)$", out, re.M)
    assert m, out
    # Not bounded below by 0: log stamps are whole milliseconds, and the routers may log
    # before the client, which takes its stamp when its attach completes, is scheduled again.
    assert -1000 < num(m[1]) <= num(m[2]) < 1000 and int(m[3]) == 2, m[0]


# ---------------------------------------------------------------- MQTT


def mqtt_rows(out: str) -> dict[str, dict[str, str]]:
    header = next(line for line in out.splitlines() if line.startswith("| scenario |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    rows = {}
    for line in out.splitlines():
        if line.startswith("| QoS"):
            row = dict(zip(names, (c.strip() for c in line.strip("|").split("|")), strict=True))
            rows[f"{row['scenario']} {row['server']}"] = row
    return rows


def check_mqtt_row(row: dict[str, str]) -> None:
    for rate in ("delivered msgs/s", "at publisher msgs/s"):
        assert num(row[rate]) > 0, row
    assert 0 <= num(row["p50 ms"]) <= num(row["p99 ms"]), row
    for cpu in ("server CPU us/msg", "pub us/msg", "sub us/msg", "CPUs busy"):
        assert num(row[cpu]) >= 0, row


def test_mqtt_exactmesh() -> None:
    """The exactmesh half of the MQTT benchmark (`--server exactmesh` needs no broker)."""
    out = run_benchmark("mqtt", "--server", "exactmesh", "--qos", "1", "--qos", "2",
                        "--subs", "2", "--count", "300", "--repeat", "1")
    rows = mqtt_rows(out)
    assert sorted(rows) == ["QoS 1, 1 -> 2 exactmesh", "QoS 2, 1 -> 2 exactmesh"], out
    for row in rows.values():
        check_mqtt_row(row)
    assert "RESULT: every subscriber got every message (at QoS 2 exactly once)" in out


def test_mqtt_shared_group() -> None:
    """The shared-subscription scenario: subscribers as one group, each message at one."""
    out = run_benchmark("mqtt", "--server", "exactmesh", "--shared", "--qos", "2",
                        "--subs", "2", "--count", "300", "--repeat", "1")
    rows = mqtt_rows(out)
    assert sorted(rows) == ["QoS 2, 1 -> 2 shared exactmesh"], out
    check_mqtt_row(rows["QoS 2, 1 -> 2 shared exactmesh"])
    assert re.search(r"group members got \[\d+, \d+\] messages, 0 at two members", out), out
    assert "RESULT: every subscriber got every message (at QoS 2 exactly once)" in out


def test_secure() -> None:
    """benchmarks/secure.py: MQTT QoS 2 and AMQP, each plain, with a log-in and a 1,000-rule
    ACL, and with those over TLS; a row of figures for each, and the ratios."""
    if shutil.which("mosquitto_passwd") is None:
        pytest.skip("no mosquitto_passwd (Debian package mosquitto)")
    out = run_benchmark("secure", "--quick")
    rows = {}
    for line in out.splitlines():
        if line.startswith(("| MQTT", "| AMQP")):
            name, *cells = (c.strip() for c in line.strip("|").split("|"))
            rows[name] = cells
    setups = ("plain", "log-in + 1,000-rule ACL", "TLS + log-in + 1,000-rule ACL")
    assert sorted(rows) == sorted(f"{p}, 1 -> 1, {s}" for p in ("MQTT QoS 2", "AMQP")
                                  for s in setups), out
    for rate, p50, p99, cpu in rows.values():
        assert num(rate) > 0 and 0 <= num(p50) <= num(p99) and num(cpu) >= 0, rows
    ratio = r"\d+\.\d\dx msgs/s, \d+\.\d\dx CPU per message"
    for proto in ("MQTT QoS 2", "AMQP"):
        assert re.search(rf"^{proto}: log-in \+ ACL / plain {ratio}; TLS \+ log-in \+ ACL / "
                         rf"log-in \+ ACL {ratio}; TLS \+ log-in \+ ACL / plain {ratio}$",
                         out, re.M), out
    assert ("RESULT: every subscriber got every message (at QoS 2 exactly once; AMQP exactly "
            "once)") in out


def test_mqtt_next_to_mosquitto() -> None:
    """Both servers and their ratio, when the mosquitto broker is installed (Debian package
    `mosquitto`; `make test` installs only mosquitto-clients). Never installs it: the
    benchmark would, run as root without the broker."""
    if not (os.path.exists("/usr/sbin/mosquitto") or shutil.which("mosquitto")):
        pytest.skip("no mosquitto broker (apt-get install mosquitto)")
    out = run_benchmark("mqtt", "--qos", "2", "--subs", "1", "--count", "300", "--repeat", "1")
    rows = mqtt_rows(out)
    assert sorted(rows) == ["QoS 2, 1 -> 1 exactmesh", "QoS 2, 1 -> 1 mosquitto"], out
    for row in rows.values():
        check_mqtt_row(row)
    assert re.search(r"^QoS 2, 1 -> 1: exactmesh / mosquitto throughput \d+\.\d\dx delivered",
                     out, re.M), out
    assert "RESULT: every subscriber got every message (at QoS 2 exactly once)" in out


def test_mqtt_idle() -> None:
    out = run_benchmark("mqtt_idle", "--devices", "50", "--seconds", "1")
    m = re.search(r"^connected in (\S+) s; router CPU while idle: (\S+)% of one core; "
                  r"memory (\d+) MiB -> (\d+) MiB \((\S+) KiB per device\)$", out, re.M)
    assert m, out
    assert num(m[1]) >= 0 and num(m[2]) >= 0 and int(m[3]) > 0 and int(m[4]) > 0, m[0]
    num(m[5])


# ---------------------------------------------------------------- Spark


def test_spark() -> None:
    """Spark's rate source into one router: the session start and the first batch (the
    Python workers' start) take most of the 20-40 s this needs."""
    pytest.importorskip("pyspark", reason="pip install -e '.[spark]'")
    pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    out = run_benchmark("spark", "--batches", "2", "--warmup", "1", "--rows-per-batch", "200",
                        "--partitions", "1", "--master", "local[1]", timeout=180)
    rate = re.search(r"^  rows/s: (\S+)  \((\d+) rows in (\d+) batches", out, re.M)
    assert rate and num(rate[1]) > 0 and int(rate[2]) >= 200, out
    batch = re.search(r"^  batch time: median (\S+) s, max (\S+) s$", out, re.M)
    assert batch and 0 < num(batch[1]) <= num(batch[2]), out
    assert re.search(r"^  waiting for acceptance: \d+% of the batch time \(write\(\) in all: "
                     r"\d+%\)$", out, re.M), out
    assert re.search(r"^  subscriber: \d+ received for \d+ rows of finished batches, 0 of the "
                     r"first \d+ lost, 0 duplicated \(\S+ us of CPU per message\)$", out, re.M), out


# ---------------------------------------------------------------- relay store


def test_relay_store() -> None:
    """The relay store's cost per copy (benchmarks/relay_store.py), FULL only, a few hundred
    copies: every row printed and measured (figures are not compared: this is no timed test)."""
    out = run_benchmark("relay_store", "--count", "300", "--quick")
    rows = {int(r["per commit"]): r for r in table(out, "  sync")}
    assert set(rows) == {1, 16, 256}, out
    for r in rows.values():
        assert num(r["copies/s"]) > 0 and num(r["life us"]) >= num(r["write us"]) > 0, r


def test_relay_router() -> None:
    """A router with a relay store (benchmarks/relay_router.py): every row finishes and its
    subscriber (present, or the session back) gets every message; figures are printed."""
    out = run_benchmark("relay_router", "--quick")
    rows = {r["scenario"]: r for r in table(out, "scenario")}
    assert set(rows) == {"present, no store", "present, store", "absent, store"}, out
    for r in rows.values():
        assert num(r["msgs/s"]) > 0 and num(r["handed"]) == 300, r
    assert num(rows["absent, store"]["drain msg/s"]) > 0, out


def test_relay_absent() -> None:
    """A listener behind a relay away while two publishers go on (benchmarks/relay_absent.py):
    it finishes, and the listener gets every message once, in each publisher's order."""
    out = run_benchmark("relay_absent", "--quick")
    assert "the listener got all 600 once each, in each publisher's order" in out, out
    assert "absent:" in out and "hand-over when back:" in out, out


def test_relay_clients() -> None:
    """One relay and many MQTT devices (benchmarks/relay_clients.py): every row finishes
    and every device gets its messages once each, in order."""
    out = run_benchmark("relay_clients", "--quick")
    rows = {r["scenario"]: r for r in table(out, "scenario")}
    assert set(rows) == {"present, direct", "present, relay", "away, relay"}, out
    assert all(num(r["msgs/s"]) > 0 for r in rows.values()), out
    assert num(rows["away, relay"]["hand-over msg/s"]) > 0, out
    assert "every device got its messages once each, in order" in out


def test_targets() -> None:
    """`make bench` (benchmarks/targets.py) at a tiny size, this checkout only: the rows of
    its jobs are printed with a target, a figure and whether it is met."""
    out = run_benchmark("targets", "--quick", "--baseline", "none", "--rows", "amqp,sdk",
                        timeout=120)
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    names = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {r["path"] + ", " + r["figure"]: r for r in
            (dict(zip(names, [c.strip() for c in ln.strip("|").split("|")], strict=True))
             for ln in lines[1:])}
    for row in ("SDK Publisher + durable Subscriber, 1 -> 1, x plain proton msgs/s",
                "line of three routers, 1 -> 1, of one router's msgs/s",
                "AMQP 1 -> 4, router CPU, us/delivery"):
        assert row in rows, out
        assert num(rows[row]["new median (range)"]) > 0, out
        assert rows[row]["met"] in ("yes", "no"), out


def test_targets_baseline_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old side of `make bench`: the product of a commit, unpacked with git archive, with
    this checkout's benchmarks in place of its own."""
    from benchmarks import targets

    monkeypatch.setattr(targets, "CACHE", tmp_path)
    tree = targets.prepare_baseline("HEAD", build=False)
    assert (tree / "router" / "core" / "engine.py").exists()
    assert (tree / "benchmarks" / "targets.py").read_text() == \
        (ROOT / "benchmarks" / "targets.py").read_text()

"""A listener behind a relay goes away while publishers on other routers go on (docs/relay.md).

Run: `python -m benchmarks.relay_absent [--count 50000]` (`--quick`: a smoke run).

Routers A - B in a line, each with an MQTT port; a relay R (`exactmesh relay`) linked to B;
one listener, an SDK subscriber with `relay=R`. Two MQTT QoS 1 publishers (the MQTT
benchmark's paho client processes, 100-byte payloads, window 20), one at A and one at B,
each send `--count` messages at their full rate:

1. with the listener present and accepting (the baseline rate);
2. with the listener disconnected (`disconnect()`): each PUBACK comes once R has the copy
   on disk; the routers' and the relay's memory (RSS) before, right after, and after the
   listener came back;
3. the listener connects again: how fast R hands over what it stored, and a check that it
   got every message of phase 2 exactly once, in each publisher's order.

Printed: messages/s in both phases, the hand-over rate, RSS per process, and the bytes per
waiting delivery at the origins (RSS growth / messages waiting).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import free_port, kill_left
from benchmarks.mqtt import (
    READY_TIMEOUT_S,
    REPO,
    TOPIC,
    _env,
    _read_line,
    _spawn_client,
    stop,
    wait_port,
)
from benchmarks.relay_router import _rss_kib

SECRET = "relay-absent-bench"


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "router.cli", *argv], cwd=REPO,
                                env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


class Listener:
    """The SDK subscriber behind the relay, accepting on its own thread; it records
    (publisher, sequence number) of each benchmark message in arrival order."""

    def __init__(self, url: str, state_dir: str) -> None:
        from amqp_edge.client import Subscriber

        self.sub = Subscriber(topic_filter="#", relay=url, id="bench-listener",
                              state_dir=state_dir, prefetch=1000)
        self.got: list[tuple[str, int]] = []
        self.last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.sub.receive(timeout=0.1)
            except Exception:  # closed under us
                return
            if msg is None:
                continue
            if msg.topic == TOPIC:
                body = msg.body if isinstance(msg.body, bytes) else bytes(msg.body)
                self.got.append((str(msg.publisher), int.from_bytes(body[:8], "big")))
                self.last = time.monotonic()
            self.sub.accept(msg)

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.got) >= count

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sub.close()


def _publish(ports: list[int], tag: str, args: argparse.Namespace) -> float:
    """Both publishers at once; returns the sum of their rates (acked / their own time)."""
    pubs = [_spawn_client("pub", port, 1, args.count, f"{tag}-{i}", args)
            for i, port in enumerate(ports)]
    try:
        for p in pubs:
            if _read_line(p, READY_TIMEOUT_S) != "READY":
                raise RuntimeError("a publisher was not ready")
        for p in pubs:
            p.stdin.write("go\n")
            p.stdin.flush()
        rate = 0.0
        for p in pubs:
            result = json.loads(_read_line(p, args.max_seconds + 30) or "{}")
            if int(result.get("acked", 0)) != args.count:
                raise RuntimeError(f"a publisher finished with {result}")
            rate += args.count / result["elapsed_s"]
        return rate
    finally:
        kill_left(pubs)


def _in_order(got: list[tuple[str, int]], publishers: int, count: int) -> str:
    """'' if each publisher's messages came once each, in order; else what is wrong."""
    by_pub: dict[str, list[int]] = {}
    for pub, seq in got:
        by_pub.setdefault(pub, []).append(seq)
    if len(by_pub) != publishers:
        return f"messages from {len(by_pub)} publishers, expected {publishers}"
    for pub, seqs in by_pub.items():
        if seqs != list(range(len(seqs))) or len(seqs) != count:
            dups = len(seqs) - len(set(seqs))
            return f"{pub}: {len(seqs)} messages, {dups} duplicated, in order: " \
                   f"{seqs == sorted(seqs)}"
    return ""


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mqtt = {r: free_port() for r in "AB"}
        mesh = {r: free_port() for r in "AB"}
        amqp = {r: free_port() for r in "ABR"}
        common = ["--cluster-secret", SECRET, "--log-level", "warning"]
        procs = {
            "A": _spawn(["router", "--id", "A", "--amqp", f"127.0.0.1:{amqp['A']}", "--mqtt",
                         f"127.0.0.1:{mqtt['A']}", "--listen", f"127.0.0.1:{mesh['A']}",
                         *common], work / "A.log"),
            "B": _spawn(["router", "--id", "B", "--amqp", f"127.0.0.1:{amqp['B']}", "--mqtt",
                         f"127.0.0.1:{mqtt['B']}", "--listen", f"127.0.0.1:{mesh['B']}",
                         "--connect", f"127.0.0.1:{mesh['A']}", *common], work / "B.log"),
            "R": _spawn(["relay", "--id", "R", "--amqp", f"127.0.0.1:{amqp['R']}", "--mesh",
                         f"127.0.0.1:{mesh['B']}", "--store", str(work / "store"), *common],
                        work / "R.log"),
        }
        listener = None
        try:
            for r, p in procs.items():
                if not wait_port(amqp[r], p, READY_TIMEOUT_S):
                    raise RuntimeError(f"{r} did not start: {(work / f'{r}.log').read_text()}")
            listener = Listener(f"amqp://127.0.0.1:{amqp['R']}", str(work / "listener"))
            _wait_routed(mqtt["A"], listener)
            ports, total = [mqtt["A"], mqtt["B"]], 2 * args.count
            present = _publish(ports, "present", args)
            if not listener.wait(total, args.max_seconds):
                raise RuntimeError(f"the present listener got {len(listener.got)} of {total}")
            listener.got.clear()
            listener.sub.disconnect(timeout=10)
            rss = {r: [_rss_kib(p.pid)] for r, p in procs.items()}
            absent = _publish(ports, "absent", args)
            for r, p in procs.items():
                rss[r].append(_rss_kib(p.pid))
            t0 = time.monotonic()
            listener.sub.connect()
            ok = listener.wait(total, args.max_seconds + 60)
            drain = len(listener.got) / (listener.last - t0) if listener.last > t0 else 0.0
            for r, p in procs.items():
                rss[r].append(_rss_kib(p.pid))
            problem = "" if ok else f"the listener got {len(listener.got)} of {total}"
            problem = problem or _in_order(listener.got, 2, args.count)
            origin_growth = sum(rss[r][1] - rss[r][0] for r in "AB") * 1024
            return {"present": present, "absent": absent, "drain": drain, "rss": rss,
                    "bytes_waiting": origin_growth / total, "problem": problem,
                    "total": total}
        finally:
            if listener is not None:
                listener.close()
            for p in procs.values():
                stop(p)


def _wait_routed(port: int, listener: Listener) -> None:
    """Probe from A until a message reaches the listener: the relay's link is up and the
    listener's subscription is known across the mesh."""
    import paho.mqtt.client as mqtt

    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-probe")
    c.connect("127.0.0.1", port)
    c.loop_start()
    before = listener.sub.stats().get("accepted", 0)
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while listener.sub.stats().get("accepted", 0) == before:
            if time.monotonic() > deadline:
                raise RuntimeError("no probe reached the listener behind the relay")
            c.publish("bench/probe", b"probe", qos=1)
            time.sleep(0.2)
    finally:
        c.loop_stop()
        c.disconnect()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=50000, help="messages per publisher")
    ap.add_argument("--window", type=int, default=20, help="each publisher's QoS 1 window")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 300 per publisher")
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.max_seconds = 300, 30.0
    r = run(args)
    print(f"relay, absent listener: 2 MQTT QoS 1 publishers (at A and at B) x "
          f"{args.count:,} messages of 100 B, window {args.window}; listener behind R")
    print(f"  listener present: {r['present']:,.0f} msg/s   absent: {r['absent']:,.0f} msg/s"
          f"   hand-over when back: {r['drain']:,.0f} msg/s")
    for name, (before, after, back) in r["rss"].items():
        print(f"  RSS {name}: {before / 1024:,.1f} MiB before, {after / 1024:,.1f} after "
              f"{r['total']:,} waiting, {back / 1024:,.1f} after the hand-over")
    print(f"  origins' memory per waiting delivery: {r['bytes_waiting']:,.0f} B")
    if r["problem"]:
        print(f"FAILED: {r['problem']}")
        return 1
    print(f"  the listener got all {r['total']:,} once each, in each publisher's order")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long after a subscriber attaches do real routers know of it? (`python -m
benchmarks.gossip_real [--routers 3,5] [--rounds 5]`)

Starts N `exactmesh router` processes in a line on loopback, attaches a subscriber (proton's
BlockingConnection) at the last router, and measures, from the moment its attach completed,
until every router logged that it knows the subscriber: the window during which a message
published elsewhere is not yet owed to it (docs/guarantees.md). Also prints the gossip frames
that one attach costs in a line of N (a flood: one SUBS frame per link direction, N - 1).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from proton.utils import BlockingConnection

from benchmarks.common import free_port

KNOWS = re.compile(r"^(\S+ \S+) DEBUG exactmesh\.mesh: router (\S+): knows subscriber (\S+)@")




class Router:
    def __init__(self, rid: str, amqp: int, mesh: int, connect: int | None) -> None:
        exe = str(Path(sys.executable).with_name("exactmesh"))
        argv = [exe, "router", "--id", rid, "--amqp", f"127.0.0.1:{amqp}", "--listen",
                f"127.0.0.1:{mesh}", "--cluster-secret", "bench", "--log-level", "debug"]
        if connect is not None:
            argv += ["--connect", f"127.0.0.1:{connect}"]
        self.id, self.url = rid, f"127.0.0.1:{amqp}"
        self.knows: dict[str, float] = {}  # subscriber key -> wall time learned
        self.ready = threading.Event()
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "ready" in line:
                self.ready.set()
            m = KNOWS.match(line)
            if m:
                stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                self.knows[m.group(3)] = stamp

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.002)


def measure(n: int, rounds: int) -> list[float]:
    amqp = [free_port() for _ in range(n)]
    mesh = [free_port() for _ in range(n)]
    routers = [Router(f"R{i}", amqp[i], mesh[i], mesh[i - 1] if i else None) for i in range(n)]
    try:
        for r in routers:
            wait(r.ready.is_set, 15, f"{r.id} ready")
        # the line is up when the first router knows a probe subscriber on the last one
        worst: list[float] = []
        conn = BlockingConnection(routers[-1].url)
        for i in range(rounds + 1):
            key_name = f"probe{i}"
            receiver = conn.create_receiver("gossip/#", name=key_name)
            attached = time.time()
            key = f"{conn.conn.container}/{key_name}"
            wait(lambda key=key: all(key in r.knows for r in routers[:-1]), 20,
                 f"gossip of {key}")
            if i:  # round 0 also waits for the links to come up
                worst.append(max(r.knows[key] for r in routers[:-1]) - attached)
            receiver.close()
        conn.close()
        return worst
    finally:
        for r in routers:
            r.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--routers", default="3,5")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print(f"{'routers':>8} {'hops':>5} {'median ms':>10} {'max ms':>8} {'frames/attach':>14}")
    for n in [int(x) for x in args.routers.split(",")]:
        worst = [w * 1000 for w in measure(n, args.rounds)]
        print(f"{n:>8} {n - 1:>5} {statistics.median(worst):>10.1f} {max(worst):>8.1f} "
              f"{n - 1:>14}")
    print("(time from the attach completing at the last router of a line until every other "
          "router knew the subscriber; log timestamps have 1 ms resolution)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the relay's durable store (relay/store.py) costs per message.

Run: `python -m benchmarks.relay_store [--count 20000] [--payload 256]`.

For each durability setting (FULL: an fsync per commit; NORMAL: survives the process dying,
not a power cut) and each group-commit size, one process holds `--count` copies for 100
clients in turn (the write a relay makes before it may say "durably stored"), hands them
over, records each answer and passes it on (the row goes): the whole life of a copy at the
relay. It prints copies/s and microseconds of wall time and of this process's CPU per copy
for the write alone and for the whole life, and the file's size at its fullest.

    python -m benchmarks.relay_store                     # 20,000 copies of 256 bytes
    python -m benchmarks.relay_store --count 200 --quick # a smoke run (make test)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from relay.store import Inbound, RelayStore

CLIENTS = 100


def run(directory: Path, sync: str, group: int, count: int, payload: int) -> dict[str, float]:
    store = RelayStore(directory, f"bench-{sync}-{group}", synchronous=sync)
    body = b"x" * payload
    for c in range(CLIENTS):
        store.register(f"c{c}", 3600)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, count, group):
        with store.batch():
            for i in range(start, min(count, start + group)):
                store.hold(f"c{i % CLIENTS}", [Inbound(f"m{i}", "bench/t", body)])
    wall1, cpu1 = time.perf_counter(), time.process_time()
    size = sum(f.stat().st_size for f in directory.glob(f"relay-bench-{sync}-{group}.sqlite*"))
    for c in range(CLIENTS):
        client = f"c{c}"
        ids = [m.delivery_id for m in store.waiting(client, limit=count)]
        with store.batch():
            store.handed(client, ids)
        for start in range(0, len(ids), group):
            with store.batch():
                for d in ids[start:start + group]:
                    store.answered(client, d, "accepted")
                    store.passed_on(client, d, now=0.0)
    wall2, cpu2 = time.perf_counter(), time.process_time()
    assert store.held() == (0, 0), "copies left behind"
    store.close()
    return {"write_rate": count / (wall1 - wall0),
            "write_wall_us": (wall1 - wall0) / count * 1e6,
            "write_cpu_us": (cpu1 - cpu0) / count * 1e6,
            "life_wall_us": (wall2 - wall0) / count * 1e6,
            "life_cpu_us": (cpu2 - cpu0) / count * 1e6,
            "file_kib": size / 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=20000, help="copies per row")
    ap.add_argument("--payload", type=int, default=256, help="bytes per copy")
    ap.add_argument("--groups", default="1,16,256", help="copies per commit, one row each")
    ap.add_argument("--quick", action="store_true", help="FULL only: a smoke run")
    ap.add_argument("--dir", help="where the files go (default: a temporary directory; "
                    "fsync cost depends on the file system under it)")
    args = ap.parse_args(argv)
    groups = [int(g) for g in args.groups.split(",")]
    syncs = ["FULL"] if args.quick else ["FULL", "NORMAL"]
    print(f"relay store: {args.count:,} copies of {args.payload} B for {CLIENTS} clients, "
          f"SQLite WAL, {os.cpu_count()} cores")
    cols = [("sync", 6), ("per commit", 10), ("copies/s", 10), ("write us", 8),
            ("write cpu us", 12), ("life us", 8), ("life cpu us", 11), ("file KiB", 8)]
    print(" ".join(name.rjust(w) for name, w in cols))
    print(" ".join("-" * w for _, w in cols))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for sync in syncs:
            for group in groups:
                r = run(Path(tmp), sync, group, args.count, args.payload)
                cells = [sync, str(group), f"{r['write_rate']:,.0f}",
                         f"{r['write_wall_us']:.1f}", f"{r['write_cpu_us']:.1f}",
                         f"{r['life_wall_us']:.1f}", f"{r['life_cpu_us']:.1f}",
                         f"{r['file_kib']:,.0f}"]
                print(" ".join(c.rjust(w) for c, (_, w) in zip(cells, cols, strict=True)))
    print("\nwrite: holding a copy (the relay's 'durably stored'); life: hold, hand over, "
          "answer, pass on")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rows per second from a Spark streaming query into one router: `python -m benchmarks.spark`.

One `exactmesh router`; one AMQP subscriber on the topic (the lean client of
benchmarks/loadclient.py in its own process, auto-accepting, credit 1,000: a Python proton
receiver, ~55 us per message, would cap the figure near 18,000 rows/s); a Spark streaming
query in local mode (`--master`, default local[2]) reading Spark's `rate-micro-batch` source
(exactly `--rows-per-batch` rows per micro-batch in `--partitions` partitions, as fast as
the query goes), making each row a 94-byte body that carries its number (so the subscriber
checks each arrived once) and a `key` property, and writing it with `.format("exactmesh")`
(progress markers in the checkpoint, as by default).

Printed, over the micro-batches after the first `--warmup` (the first one includes the
Python workers' start):

- rows/s: rows published / the sum of those batches' durations (Spark's
  `triggerExecution`: the whole micro-batch, offsets and commit included);
- batch time: median and max per batch;
- waiting for acceptance: the share of the batch time a partition's write() spent blocked on
  the mesh's outcomes (from handing a chunk's rows to its publishers to the last outcome;
  the mean over partitions, from the sink's `statsFile`), and the share of the batch time
  spent in write() at all;
- a check that the subscriber got every row exactly once (exit 1 if not).

    python -m benchmarks.spark                        # 12 batches of 20,000 rows
    python -m benchmarks.spark --batches 6 --rows-per-batch 5000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import free_port, load_line
from benchmarks.loadclient import MARK

TOPIC = "bench/spark"


def start_subscriber(port: int, expect: int, deadline_s: float,
                     json_out: Path) -> subprocess.Popen:
    """The lean subscriber of benchmarks/loadclient.py in its own process (a Python proton
    receiver costs ~55 us per message and would cap the row at ~18,000 rows/s); returns once
    it attached."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.loadclient", "sub", "--url", f"127.0.0.1:{port}",
         "--filter", TOPIC, "--expect", str(expect), "--credit", "1000", "--check-seqs",
         "--deadline-s", str(deadline_s), "--linger-s", "1", "--json-out", str(json_out)],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("attached"):
            return proc
    raise SystemExit(f"the subscriber exited ({proc.wait()}) before it attached")


def start_router(port: int) -> subprocess.Popen:
    exe = str(Path(sys.executable).parent / "exactmesh")
    proc = subprocess.Popen([exe, "router", "--id", "A", "--amqp", f"127.0.0.1:{port}"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # "... ready: amqp ..." comes first (or EOF if it failed)
        if "ready" in line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    if proc.poll() is not None:
        raise SystemExit(f"the router exited with status {proc.returncode}")
    return proc




def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--rows-per-batch", type=int, default=20000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2, help="first batches not counted")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--rows-per-link", type=int, default=2000)
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from spark_connector import local_session

    print(f"benchmarks.spark: {args.batches} batches x {args.rows_per_batch} rows, "
          f"{args.partitions} partitions, {args.master}; {load_line()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="exactmesh-spark-bench-"))
    port = free_port()
    router = start_router(port)
    url = f"amqp://127.0.0.1:{port}"
    expect = args.batches * args.rows_per_batch
    deadline_s = 120 + args.batches * max(10.0, args.rows_per_batch / 500)
    sub_json = work / "sub.json"
    sub = start_subscriber(port, expect, deadline_s, sub_json)
    spark = None
    try:
        t0 = time.monotonic()
        spark = local_session(args.master, "exactmesh-bench", args.partitions)
        print(f"  spark session: {time.monotonic() - t0:.1f} s", flush=True)
        stats = work / "stats.jsonl"
        # The body: loadclient's marker, publisher 0 and the row number (big-endian), then
        # padding to 94 bytes; the subscriber checks every number arrived once.
        df = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", args.rows_per_batch)
              .option("numPartitions", args.partitions).load()
              .selectExpr(f"concat(unhex('{MARK.hex()}00000000'), "
                          "unhex(lpad(hex(value), 16, '0')), "
                          "CAST(repeat('x', 78) AS BINARY)) AS value",
                          "CAST(value % 100 AS STRING) AS key"))
        query = (df.writeStream.format("exactmesh").option("url", url).option("topic", TOPIC)
                 .option("window", str(args.window))
                 .option("rowsPerLink", str(args.rows_per_link))
                 .option("statsFile", str(stats))
                 .option("checkpointLocation", str(work / "chk"))
                 .trigger(processingTime="0 seconds").start())
        t1 = time.monotonic()
        deadline = t1 + deadline_s - 60
        while time.monotonic() < deadline:
            done = [pr for pr in query.recentProgress if pr["numInputRows"] > 0]
            if len(done) >= args.batches or query.exception() is not None:
                break
            query.awaitTermination(0.5)
        query.stop()
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        progress = [pr for pr in query.recentProgress if pr["numInputRows"] > 0]
        total = sum(pr["numInputRows"] for pr in progress)
        try:
            sub.wait(30)  # it stops by itself once it has `expect` rows, or at its deadline
        except subprocess.TimeoutExpired:
            sub.terminate()  # it reports what it has on SIGTERM
            sub.wait(10)
        got = json.loads(sub_json.read_text())
        counted = progress[args.warmup:]
        if not counted:
            print(f"only {len(progress)} batches ran", file=sys.stderr)
            return 1
        rows = sum(pr["numInputRows"] for pr in counted)
        secs = sum(pr["durationMs"]["triggerExecution"] for pr in counted) / 1000
        by_batch: dict[int, list[dict]] = {}
        for line in stats.read_text().splitlines():
            rec = json.loads(line)
            by_batch.setdefault(rec["batch"], []).append(rec)
        wait_share, write_share = [], []
        for pr in counted:
            recs = by_batch.get(pr["batchId"], [])
            batch_s = pr["durationMs"]["triggerExecution"] / 1000
            if recs and batch_s > 0:
                wait_share.append(statistics.mean(r["wait_seconds"] for r in recs) / batch_s)
                write_share.append(statistics.mean(r["seconds"] for r in recs) / batch_s)
        durations = [pr["durationMs"]["triggerExecution"] / 1000 for pr in counted]
        # rate-micro-batch numbers rows 0, 1, ... in batch order: the rows of the batches
        # that finished are 0 .. total - 1 (a batch cut short by the stop may add more).
        dupes = got["duplicates"]
        lost = got["missing_seqs"] if total >= expect else expect - total
        print(f"  first batch: {progress[0]['durationMs']['triggerExecution'] / 1000:.1f} s "
              f"({progress[0]['numInputRows']} rows)")
        print(f"  rows/s: {rows / secs:,.0f}  ({rows} rows in {len(counted)} batches, "
              f"{secs:.1f} s of batch time)")
        print(f"  batch time: median {statistics.median(durations):.2f} s, "
              f"max {max(durations):.2f} s")
        if wait_share:
            print(f"  waiting for acceptance: {statistics.mean(wait_share):.0%} of the batch "
                  f"time (write() in all: {statistics.mean(write_share):.0%})")
        print(f"  subscriber: {got['received']} received for {total} rows of finished "
              f"batches, {lost} of the first {expect} lost, {dupes} duplicated "
              f"({got['cpu_us_per_msg']:.1f} us of CPU per message)")
        print(f"  {load_line()}")
        return 0 if dupes == 0 and lost == 0 else 1
    finally:
        if spark is not None:
            spark.stop()
        if sub.poll() is None:
            sub.kill()
            sub.wait()
        router.terminate()
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

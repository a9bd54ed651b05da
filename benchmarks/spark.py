"""Rows per second from a Spark streaming query into one router: `python -m benchmarks.spark`.

One `exactmesh router`; one AMQP subscriber (a plain proton receiver in this process,
auto-accepting, prefetch 1,000) on the topic; a Spark streaming query in local mode
(`--master`, default local[2]) reading Spark's `rate-micro-batch` source (exactly
`--rows-per-batch` rows per micro-batch in `--partitions` partitions, as fast as the query
goes), making each row a ~90-byte JSON body, and writing it with `.format("exactmesh")`
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
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container

from benchmarks.common import free_port, load_line

TOPIC = "bench/spark"


class Counter(MessagingHandler):
    """Auto-accepting receiver that records each body's row number."""

    def __init__(self, url: str) -> None:
        super().__init__(prefetch=1000)
        self.url = url
        self.seen: list[int] = []
        self.ready = threading.Event()
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.receiver = event.container.create_receiver(conn, TOPIC, name="bench-counter")

    def on_link_opened(self, event: Any) -> None:
        self.ready.set()

    def on_message(self, event: Any) -> None:
        self.seen.append(json.loads(event.message.body)["n"])


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
    counter = Counter(url)
    container = Container(counter)
    io = threading.Thread(target=container.run, daemon=True)
    io.start()
    spark = None
    try:
        if not counter.ready.wait(15):
            print("the subscriber did not attach", file=sys.stderr)
            return 1
        t0 = time.monotonic()
        spark = local_session(args.master, "exactmesh-bench", args.partitions)
        print(f"  spark session: {time.monotonic() - t0:.1f} s", flush=True)
        stats = work / "stats.jsonl"
        df = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", args.rows_per_batch)
              .option("numPartitions", args.partitions).load()
              .selectExpr("to_json(named_struct('n', value, 'at', CAST(timestamp AS STRING), "
                          "'kind', 'benchmark-row')) AS value",
                          "CAST(value % 100 AS STRING) AS key"))
        query = (df.writeStream.format("exactmesh").option("url", url).option("topic", TOPIC)
                 .option("window", str(args.window))
                 .option("rowsPerLink", str(args.rows_per_link))
                 .option("statsFile", str(stats))
                 .option("checkpointLocation", str(work / "chk"))
                 .trigger(processingTime="0 seconds").start())
        t1 = time.monotonic()
        deadline = t1 + 60 + args.batches * max(10.0, args.rows_per_batch / 500)
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
        wait_deadline = time.monotonic() + 30
        while len(counter.seen) < total and time.monotonic() < wait_deadline:
            time.sleep(0.1)
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
        dupes = len(counter.seen) - len(set(counter.seen))
        lost = total - len({n for n in counter.seen if n < total})
        print(f"  first batch: {progress[0]['durationMs']['triggerExecution'] / 1000:.1f} s "
              f"({progress[0]['numInputRows']} rows)")
        print(f"  rows/s: {rows / secs:,.0f}  ({rows} rows in {len(counted)} batches, "
              f"{secs:.1f} s of batch time)")
        print(f"  batch time: median {statistics.median(durations):.2f} s, "
              f"max {max(durations):.2f} s")
        if wait_share:
            print(f"  waiting for acceptance: {statistics.mean(wait_share):.0%} of the batch "
                  f"time (write() in all: {statistics.mean(write_share):.0%})")
        print(f"  subscriber: {len(counter.seen)} received for {total} rows of finished "
              f"batches, {lost} of them lost, {dupes} duplicated")
        print(f"  {load_line()}")
        return 0 if dupes == 0 and lost == 0 else 1
    finally:
        if spark is not None:
            spark.stop()
        container.stop()
        io.join(5)
        router.terminate()
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

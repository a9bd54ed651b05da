"""The Spark agent: a Structured Streaming job in local mode that publishes a numbered stream
into the mesh through the project's data source (spark_connector/, docs/spark.md), run on a
client host like the other agents (tests/hosts/clients.py) and writing the same JSON lines.

    python -m tests.hosts.spark --id k1 --urls amqps://10.231.7.3:5671,... \\
        --topic devices/bed/commands/k1 --rate 5 --password-file FILE --ca CA --user ingest \\
        --work DIR

The source is Spark's `rate` with one partition and `--rate` rows a second: its offsets are
seconds since the query started, and batch b holds the rows whose `value` is in [start *
rate, end * rate), in order, one batch a second while Spark keeps up (on two busy cores a
batch may take a minute, and then carries a minute of rows). Each row's body is
`k1.INC.SEQ` with SEQ = value + 1 (INC: the query's run, see below). The sink is
`format("exactmesh")` over amqps with `tlsCA`, `tlsVerifyName=false`
(the certificates name IP addresses; docs/testbed.md), `user` and `passwordFile`, and a
checkpoint under `--work`.

The sink reports per batch, not per row: a batch commits only once the mesh accepted every
one of its rows (docs/spark.md). So the agent records, from the query's progress events
(a StreamingQueryListener; a progress event comes after the batch's commit):

- every row of a committed batch: `invoke` (at the batch's trigger time) and `ok`;
- every row of a batch that did not commit (the query failed: a row rejected, Spark's
  retries spent; or the agent was stopped during the batch): `invoke` and `fail`, naming
  every subscriber `in_doubt` (the rows before the rejected one were accepted, and the agent
  cannot tell which). The planned batches are read from the checkpoint's offset log.

After a failure the agent starts the query again with a new checkpoint (a new query id,
hence new identities: the rows of the failed run are not resent) and the next INC, whose
SEQ starts at 1 again; the checker orders receipts per (publisher, INC).

It builds its Spark session first (minutes on two busy cores), says `ready`, and starts its
query when stdin says `go` (the controller waits until every router knows every subscriber).
On `stop` (stdin) it waits up to `--flush-timeout` for the batch in progress to commit,
stops the query and reports its `stats`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.hosts.clients import emit


def _read_stdin(go: threading.Event, stop: threading.Event) -> None:
    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            elif line.strip() == "stop":
                break
        go.set()
        stop.set()

    threading.Thread(target=run, daemon=True).start()


def _end_offset(text: str | None) -> int:
    """An offset of the `rate` source: seconds since the query started (JSON `N`; a first
    batch's start offset is the text `None`)."""
    if not text or text.strip() in ("None", "null"):
        return 0
    value = json.loads(text)
    if isinstance(value, dict):  # (`rate-micro-batch`: {"offset": N, ...})
        value = value.get("offset", 0)
    return int(value)


def planned_end(checkpoint: Path, rate: int) -> int:
    """The end offset of the last batch the query planned (its offset log, written before
    the batch runs): rows below it may have been published."""
    offsets = checkpoint / "offsets"
    batches = [int(p.name) for p in offsets.glob("*") if p.name.isdigit()] if (
        offsets.is_dir()) else []
    if not batches:
        return 0
    lines = (offsets / str(max(batches))).read_text().splitlines()
    return _end_offset(lines[-1]) * rate if len(lines) >= 3 else 0


class Run:
    """One query (INC) and what has been recorded of it."""

    def __init__(self, inc: int, checkpoint: Path) -> None:
        self.inc, self.checkpoint = inc, checkpoint
        self.recorded = 0  # rows 1..recorded have an outcome in the history
        self.query: Any = None
        self.ended = False
        self.error: str | None = None


class Agent:
    def __init__(self, args: argparse.Namespace, spark: Any) -> None:
        self.args, self.spark = args, spark
        self.cond = threading.Condition()
        self.run: Run | None = None
        self.counts = {"rows_accepted": 0, "rows_failed": 0, "batches": 0, "queries": 0}
        self.rate = max(1, round(args.rate))  # rows per second (the source takes an integer)

    # Called on Spark's listener thread (an exception would only be logged by Spark: the
    # rows would go unrecorded, and the checker would call them unexpected).
    def progress(self, event: Any) -> None:
        try:
            self._progress(event)
        except Exception as err:
            emit("error", who=self.args.id, error=f"progress event: {type(err).__name__}: {err}")

    def _progress(self, event: Any) -> None:
        p = event.progress
        with self.cond:
            run = self.run
            if run is None or run.query is None or str(p.runId) != str(run.query.runId):
                return
            if not p.sources or p.numInputRows == 0:
                return
            start = _end_offset(p.sources[0].startOffset) * self.rate
            end = _end_offset(p.sources[0].endOffset) * self.rate
            at = _monotonic(p.timestamp)
            for seq in range(max(start, run.recorded) + 1, end + 1):
                emit("invoke", pub=self.args.id, inc=run.inc, seq=seq, at=at)
                emit("ok", pub=self.args.id, inc=run.inc, seq=seq)
            self.counts["rows_accepted"] += max(0, end - max(start, run.recorded))
            self.counts["batches"] += 1
            run.recorded = max(run.recorded, end)
            self.cond.notify_all()

    def terminated(self, event: Any) -> None:
        with self.cond:
            run = self.run
            if run is None or run.query is None or str(event.runId) != str(run.query.runId):
                return
            run.ended = True
            run.error = event.exception
            self.cond.notify_all()

    def fail_rest(self, run: Run, why: str) -> None:
        """Rows the query planned that never committed: failed, every subscriber in doubt."""
        with self.cond:
            end = planned_end(run.checkpoint, self.rate)
            now = time.monotonic()
            for seq in range(run.recorded + 1, end + 1):
                emit("invoke", pub=self.args.id, inc=run.inc, seq=seq, at=now)
                emit("fail", pub=self.args.id, inc=run.inc, seq=seq, cond="spark:batch-failed",
                     failed=self.args.subscribers, in_doubt=self.args.subscribers,
                     desc=why[:300])
            self.counts["rows_failed"] += max(0, end - run.recorded)
            run.recorded = max(run.recorded, end)

    def start(self, inc: int) -> Run:
        a = self.args
        run = Run(inc, Path(a.work) / f"checkpoint-{inc}")
        rows = (self.spark.readStream.format("rate")
                .option("rowsPerSecond", self.rate).option("numPartitions", 1)
                .load()
                .selectExpr(f"concat('{a.id}.{inc}.', CAST(value + 1 AS STRING)) AS value"))
        with self.cond:
            self.run = run
            run.query = (rows.writeStream.format("exactmesh")
                         .option("url", a.urls).option("topic", a.topic)
                         .option("tlsCA", a.ca).option("tlsVerifyName", "false")
                         .option("user", a.user).option("passwordFile", a.password_file)
                         .option("timeout", str(a.timeout))
                         .option("checkpointLocation", str(run.checkpoint))
                         .trigger(processingTime="1 second").start())
        self.counts["queries"] += 1
        emit("adv", who=a.id, kind="query-started", url=a.urls, detail=f"inc {inc}")
        return run


def _monotonic(timestamp: str) -> float:
    """A progress event's trigger time (ISO 8601, wall clock) on the monotonic clock."""
    wall = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    return time.monotonic() - (time.time() - wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.spark")
    parser.add_argument("--id", required=True)
    parser.add_argument("--urls", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, default=5.0, help="rows per second")
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--work", required=True, help="checkpoints and Spark's scratch")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--subscribers", default="",
                        help="comma-separated: named in doubt on a failed batch's rows")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="the sink's `timeout` option (outcomes of a partition)")
    parser.add_argument("--flush-timeout", type=float, default=60.0)
    # Given to every agent by the controller; the sink has its own (3 s with a log-in).
    parser.add_argument("--idle-timeout", type=float)
    parser.add_argument("--no-verify-name", action="store_true")
    args = parser.parse_args(argv)
    args.subscribers = [s for s in args.subscribers.split(",") if s]
    stop, go = threading.Event(), threading.Event()
    _read_stdin(go, stop)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    from spark_connector import register

    # Small: one task thread (3 attempts per task), the least driver memory Spark takes,
    # no UI; bound to loopback (the host's namespace has lo and its eth0 only).
    spark = (SparkSession.builder.master("local[1,3]").appName(f"testbed-{args.id}")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "512m")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.local.dir", str(work / "scratch"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    agent = Agent(args, spark)

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            agent.progress(event)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            agent.terminated(event)

    spark.streams.addListener(Listener())
    # The controller's stop wakes the waits below too.
    threading.Thread(target=lambda: (stop.wait(), _notify(agent)), daemon=True).start()
    emit("ready", who=args.id)
    go.wait()
    inc = 0
    try:
        while not stop.is_set():
            inc += 1
            run = agent.start(inc)
            with agent.cond:
                agent.cond.wait_for(lambda r=run: r.ended or stop.is_set())
            if run.ended:  # the query failed: its last batch's rows did not all go
                why = run.error or "the query ended"
                emit("adv", who=args.id, kind="query-failed", url=args.urls,
                     detail=why.splitlines()[0][:300])
                agent.fail_rest(run, f"Spark query {inc} failed: {why.splitlines()[0]}")
                continue
            # Stopping: let the batch in progress commit (up to the flush timeout), then stop.
            want = planned_end(run.checkpoint, agent.rate)
            with agent.cond:
                agent.cond.wait_for(lambda r=run, w=want: r.recorded >= w or r.ended,
                                    args.flush_timeout)
            run.query.stop()
            agent.fail_rest(run, "the agent stopped the query during this batch")
    except Exception as err:  # the session itself failed: nothing more is published
        emit("error", who=args.id, error=f"{type(err).__name__}: {err}"[:500])
        return 1
    finally:
        emit("stats", who=args.id, **agent.counts)
        spark.stop()
    return 0


def _notify(agent: Agent) -> None:
    with agent.cond:
        agent.cond.notify_all()


if __name__ == "__main__":
    sys.exit(main())

"""The `exactmesh` PySpark data source (Spark 4's Python Data Source API): a batch writer and
a streaming writer that publish rows into an exactmesh mesh exactly once.

    from spark_connector import register
    register(spark)
    (df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
       .writeStream.format("exactmesh")
       .option("url", "amqp://h1:5672,amqp://h2:5672").option("topic", "orders/eu")
       .option("checkpointLocation", "/chk/orders").start())

`write()` runs on the executors, once per partition per batch (empty partitions too), and
returns a commit message with counts only after the mesh accepted every row; `commit()` runs
on the driver, on a new writer object each batch. The identity scheme and the progress
markers are in `publish.py` and docs/spark.md.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .options import ColumnPlan, SinkOptions, parse_options, plan_columns
from .publish import PartitionId, append_stats, prune_markers, publish_partition

log = logging.getLogger("exactmesh.spark")

# Progress markers of this many most recent batches are kept: batch b's can go once batch
# b + 1 commits, since Spark records b's commit before it starts b + 1.
KEEP_BATCHES = 2


@dataclass
class ExactmeshCommit(WriterCommitMessage):
    """What one partition's write() reports to the driver."""

    query: str
    batch: int
    partition: int
    attempt: int
    rows: int
    accepted: int
    skipped_rows: int
    links: int
    seconds: float
    wait_seconds: float


class ExactmeshDataSource(DataSource):
    """`.format("exactmesh")`: write-only (batch and streaming). Options, a secured router's
    (TLS, a log-in) among them: see `spark_connector.options`."""

    @classmethod
    def name(cls) -> str:
        return "exactmesh"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return ExactmeshBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ExactmeshStreamWriter(dict(self.options), schema)


class _Writer:
    def __init__(self, options: dict, schema: StructType) -> None:
        self.opts: SinkOptions = parse_options(options)
        self.plan: ColumnPlan = plan_columns(schema.fieldNames(), self.opts)

    def _write(self, iterator: Iterator, query: str, batch: int) -> ExactmeshCommit:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        pid = PartitionId(query, batch, partition)
        result = publish_partition(iterator, self.plan, self.opts, pid)
        if self.opts.stats_file is not None:
            append_stats(self.opts.stats_file, {"query": query, "batch": batch,
                                                "partition": partition, "attempt": attempt,
                                                **result.as_dict()})
        return ExactmeshCommit(query, batch, partition, attempt, result.rows, result.accepted,
                               result.skipped_rows, result.links, result.seconds,
                               result.wait_seconds)

    def _summary(self, messages: list, batch: int) -> str:
        got = [m for m in messages if isinstance(m, ExactmeshCommit)]
        rows = sum(m.rows for m in got)
        skipped = sum(m.skipped_rows for m in got)
        return (f"batch {batch}: {rows} row(s) from {len(got)} partition(s) accepted by the "
                f"mesh ({skipped} of them before, by an earlier attempt: progress markers)")


class ExactmeshBatchWriter(_Writer, DataSourceWriter):
    """`df.write.format("exactmesh").save()`. The write's identity is option `id`, or a new
    name per write (then only Spark's task retries are deduplicated, not a rerun)."""

    def __init__(self, options: dict, schema: StructType) -> None:
        super().__init__(options, schema)
        self.run_id = self.opts.id or f"w{uuid.uuid4().hex[:16]}"

    def write(self, iterator: Iterator) -> ExactmeshCommit:
        return self._write(iterator, self.run_id, 0)

    def commit(self, messages: list) -> None:
        log.info("exactmesh write %s: %s", self.run_id, self._summary(messages, 0))

    def abort(self, messages: list) -> None:
        done = sum(1 for m in messages if isinstance(m, ExactmeshCommit))
        log.warning("exactmesh write %s aborted (%d partition(s) had been accepted in full; "
                    "rerun with the same option id to resend without duplicates)",
                    self.run_id, done)


class ExactmeshStreamWriter(_Writer, DataSourceStreamWriter):
    """`df.writeStream.format("exactmesh").start()`: identity from the query id (stable
    across restarts from the checkpoint) and the batch id."""

    def write(self, iterator: Iterator) -> ExactmeshCommit:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if query is None or batch is None:
            raise RuntimeError("exactmesh stream writer: the task has no streaming query or "
                               "batch id (sql.streaming.queryId, streaming.sql.batchId)")
        return self._write(iterator, str(query), int(batch))

    def commit(self, messages: list, batchId: int) -> None:
        log.info("exactmesh: %s", self._summary(messages, batchId))
        queries = {m.query for m in messages if isinstance(m, ExactmeshCommit)}
        for query in queries:
            prune_markers(self.opts.progress_dir, query, batchId - KEEP_BATCHES + 1)

    def abort(self, messages: list, batchId: int) -> None:
        done = sum(1 for m in messages if isinstance(m, ExactmeshCommit))
        log.warning("exactmesh: batch %d aborted; %d partition(s) had been accepted in full "
                    "(a replay resends them under the same identity: counted once)",
                    batchId, done)

"""The `exactmesh` PySpark data source in Spark local mode against real routers: streaming
queries publish every row once to every subscriber (one router; a three-router mesh, with a
topic column fanning out); a task failure injected on an executor is retried without
duplicates; a batch whose rows a subscriber rejects fails the query with an error naming the
topic and the subscriber; a batch replayed after its commit was lost, once the mesh has
forgotten its rows, counts once thanks to the progress markers; a batch write.

The subscribers are proton clients without a duplicate filter (tests.harness.Subscriber),
so what they count is what the mesh delivered. One Spark session serves the module
(`local[2,3]`: two task threads, a task may fail 3 times). The driver killed by SIGKILL is in
tests/test_spark_driver_kill.py."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RouterProcess, wait_for
from tests.harness import Subscriber as RawSubscriber
from tests.mesh_harness import start_clients, start_mesh, stop_clients

pyspark = pytest.importorskip("pyspark", reason="pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)",
                allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.utils import StreamingQueryException  # noqa: E402

from spark_connector import register  # noqa: E402

QUERY_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2,3]").appName("exactmesh-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "512m")
               # Small Arrow batches into the writer (so that it gets rows before a failing
               # one, test_a_task_failure_...) and plain Python UDFs (pandas is not needed).
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
               .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def drop_lines(folder: Path, name: str, lines: list[str]) -> None:
    """A text file appears in the folder at once (written aside, then renamed in)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines))
    os.replace(tmp, folder / name)


def run_available_now(writer: Any) -> Any:
    """Start a query that processes what is in its source and stops; wait for it."""
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination(QUERY_TIMEOUT)
    finally:
        if query.isActive:
            query.stop()
            raise AssertionError(f"query still running after {QUERY_TIMEOUT} s")
    return query


def exactly_once(got: list[Any], owed: list[Any], who: str) -> None:
    missing = set(owed) - set(got)
    dupes = len(got) - len(set(got))
    assert not missing and not dupes and len(got) == len(owed), (
        f"{who}: {len(missing)} lost (e.g. {sorted(missing)[:3]}), {dupes} duplicated, "
        f"{len(got)} received of {len(owed)}")


def test_stream_publishes_each_row_once_to_every_subscriber(spark: Any, tmp_path: Path) -> None:
    """Two files of 300 lines; a `topic` column splits them over two topics; two subscribers
    of both and one of one topic receive each of their rows once, with key and properties."""
    rows = [f"line-{i}" for i in range(600)]
    src = tmp_path / "in"
    drop_lines(src, "a.txt", rows[:300])
    drop_lines(src, "b.txt", rows[300:])
    with RouterProcess("A") as router:
        url = f"amqp://{router.url}"
        everything = [RawSubscriber(url, "st/#", name=f"all{i}", credit=500) for i in (1, 2)]
        odd = RawSubscriber(url, "st/odd", name="odd", credit=500)
        client = start_clients(*everything, odd)
        try:
            df = (spark.readStream.text(str(src))
                  .select(F.col("value"),
                          F.concat(F.lit("st/"), F.when(
                              F.substring_index("value", "-", -1).cast("int") % 2 == 0,
                              F.lit("even")).otherwise(F.lit("odd"))).alias("topic"),
                          F.substring_index("value", "-", -1).alias("key"),
                          F.length("value").alias("size")))
            query = run_available_now(
                df.writeStream.format("exactmesh").option("url", url)
                .option("properties", "size").option("ttl", "60")
                .option("checkpointLocation", str(tmp_path / "chk")))
            assert query.exception() is None
            for sub in everything:
                wait_for(lambda s=sub: len(s.received) >= 600, 30, f"600 rows at {sub.name}")
            wait_for(lambda: len(odd.received) >= 300, 30, "300 rows at odd")
            for sub in everything:
                exactly_once(sub.bodies(), rows, sub.name)
            exactly_once(odd.bodies(), rows[1::2], "odd")
            first = next(r for r in odd.received if r.body == "line-7")
            assert first.properties == {"key": "7", "size": 6} and first.address == "st/odd"
            markers = list((tmp_path / "chk" / "exactmesh-progress").rglob("*.done"))
            assert markers, "no progress markers were written"
        finally:
            stop_clients(client)


def test_stream_into_a_three_router_mesh(spark: Any, tmp_path: Path) -> None:
    """A - B - C: the query publishes at A (B second in its URL list); subscribers at B and
    at C receive each row once."""
    rows = [f"m-{i}" for i in range(400)]
    drop_lines(tmp_path / "in", "a.txt", rows)
    with start_mesh("line", 3) as mesh:
        mesh.wait_links_up()
        at_b = RawSubscriber(f"amqp://{mesh['B'].url}", "mesh/#", name="at-b", credit=500,
                             container_id="sub-b")
        at_c = RawSubscriber(f"amqp://{mesh['C'].url}", "mesh/#", name="at-c", credit=500,
                             container_id="sub-c")
        clients = [start_clients(at_b), start_clients(at_c)]
        try:
            mesh.wait_all_know({"B": [at_b], "C": [at_c]}, routers=["A"])
            query = run_available_now(
                spark.readStream.text(str(tmp_path / "in")).writeStream.format("exactmesh")
                .option("url", f"amqp://{mesh['A'].url},amqp://{mesh['B'].url}")
                .option("topic", "mesh/orders")
                .option("checkpointLocation", str(tmp_path / "chk")))
            assert query.exception() is None
            for sub in (at_b, at_c):
                wait_for(lambda s=sub: len(s.received) >= len(rows), 30, f"rows at {sub.name}")
                exactly_once(sub.bodies(), rows, sub.name)
        finally:
            stop_clients(*clients)


def test_a_task_failure_is_retried_without_duplicates(spark: Any, tmp_path: Path) -> None:
    """A UDF raises on the task's first attempt at row 450 -- once the writer has published
    (and the mesh accepted) rows before it, as the test sees at the subscriber. Spark runs
    the task again and the subscriber still gets each of the 600 rows once. (Rows of 1 KB,
    so that the UDF's output reaches the writer before the failing row: a Python UDF hands
    its results on in 64 KB batches.)

    What Spark does here: the failing UDF ends the writer's input cleanly, so the first
    attempt's write() returns having published the rows it got; its progress marker says
    how many, and the retry sends only the rest (tests/test_spark_units.py has the same
    retry counted once by the mesh alone, without markers)."""
    pad = "x" * 1000
    rows = [f"r-{i}-{pad}" for i in range(600)]
    drop_lines(tmp_path / "in", "a.txt", rows)
    go = tmp_path / "subscriber-has-rows"
    go_path = str(go)

    def flaky(value):  # no type hints: Spark would try to read them as a pandas UDF's
        import os as _os
        import time as _time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and value.startswith("r-450-"):
            deadline = _time.monotonic() + 30
            while not _os.path.exists(go_path) and _time.monotonic() < deadline:
                _time.sleep(0.05)  # bounded: the test says when rows were delivered
            raise RuntimeError("injected executor failure on attempt 0")
        return value

    with RouterProcess("A") as router:
        url = f"amqp://{router.url}"
        sub = RawSubscriber(url, "retry/#", name="counter", credit=700)
        client = start_clients(sub)
        try:
            query = (spark.readStream.text(str(tmp_path / "in"))
                     .select(F.udf(flaky, "string")("value").alias("value"))
                     .writeStream.format("exactmesh").option("url", url)
                     .option("topic", "retry/x").option("rowsPerLink", "100")
                     .option("checkpointLocation", str(tmp_path / "chk"))
                     .trigger(availableNow=True).start())
            wait_for(lambda: len(sub.received) >= 100 or not query.isActive, 60,
                     "rows published by the first attempt")
            before = len(sub.received)
            go.touch()
            query.awaitTermination(QUERY_TIMEOUT)
            assert query.exception() is None, query.exception()
            assert 100 <= before < 450, f"the first attempt published {before} rows"
            wait_for(lambda: len(sub.received) >= 600, 30, "every row")
            exactly_once(sub.bodies(), rows, "counter")
        finally:
            stop_clients(client)


def test_rejected_rows_fail_the_query_with_a_clear_error(spark: Any, tmp_path: Path) -> None:
    drop_lines(tmp_path / "in", "a.txt", ["ok-1", "bad-1", "ok-2"])
    with RouterProcess("A") as router:
        url = f"amqp://{router.url}"
        picky = RawSubscriber(url, "rej/#", name="picky-billing",
                              policy=lambda m, d: "reject" if "bad" in m.body else "accept")
        client = start_clients(picky)
        try:
            query = (spark.readStream.text(str(tmp_path / "in")).writeStream
                     .format("exactmesh").option("url", url).option("topic", "rej/orders")
                     .option("checkpointLocation", str(tmp_path / "chk"))
                     .trigger(availableNow=True).start())
            with pytest.raises(StreamingQueryException) as err:
                query.awaitTermination(QUERY_TIMEOUT)
            text = str(err.value)
            assert "topic 'rej/orders'" in text, text[:2000]
            assert "failed subscribers:" in text and "picky-billing" in text, text[:2000]
            assert not list((tmp_path / "chk").rglob("*.done")), "a failed batch left a marker"
        finally:
            stop_clients(client)


def test_a_batch_replayed_after_its_commit_was_lost_counts_once(spark: Any,
                                                              tmp_path: Path) -> None:
    """The hard case: every row of batch 0 was accepted, then the driver died before Spark
    recorded the commit (simulated: commits/0 removed from the checkpoint) and the mesh
    forgot the rows (a new router process). The restarted query replays batch 0; its
    progress markers make it publish nothing. Without markers (progressDir=none) the same
    replay publishes every row again: the window the mesh alone covers is its tombstones."""
    rows = [f"h-{i}" for i in range(200)]
    drop_lines(tmp_path / "in", "a.txt", rows)

    def run(url: str, chk: Path, *extra: tuple[str, str]) -> Any:
        writer = (spark.readStream.text(str(tmp_path / "in")).writeStream.format("exactmesh")
                  .option("url", url).option("topic", "hard/x")
                  .option("checkpointLocation", str(chk)))
        for name, value in extra:
            writer = writer.option(name, value)
        query = run_available_now(writer)
        assert query.exception() is None, query.exception()
        return query

    for label, extra, replayed in (("markers", (), 0),
                                   ("no-markers", (("progressDir", "none"),), len(rows))):
        chk = tmp_path / f"chk-{label}"
        with RouterProcess("A") as router:
            sub = RawSubscriber(f"amqp://{router.url}", "hard/#", name="first", credit=300)
            client = start_clients(sub)
            try:
                query = run(f"amqp://{router.url}", chk, *extra)
                wait_for(lambda s=sub: len(s.received) >= len(rows), 30, "the first run")
                exactly_once(sub.bodies(), rows, f"{label}: first run")
                query_id = str(query.id)
            finally:
                stop_clients(client)
        for name in ("0", ".0.crc"):  # the driver "died" before recording the commit
            (chk / "commits" / name).unlink(missing_ok=True)
        with RouterProcess("A") as router:  # and the mesh forgot batch 0
            sub = RawSubscriber(f"amqp://{router.url}", "hard/#", name="second", credit=300)
            client = start_clients(sub)
            try:
                query = run(f"amqp://{router.url}", chk, *extra)
                assert str(query.id) == query_id
                assert (chk / "commits" / "0").exists(), "batch 0 was not replayed"
                # A row published by the replay was accepted by this subscriber before the
                # batch could commit, so it has arrived by the time the query ended.
                assert len(sub.received) == replayed, f"{label}: {len(sub.received)} again"
            finally:
                stop_clients(client)


def test_bad_options_fail_the_query_with_a_clear_error(spark: Any, tmp_path: Path) -> None:
    drop_lines(tmp_path / "in", "a.txt", ["x"])
    """Checked when the query starts: the error says what to write instead."""
    cases = [({"url": "amqp://127.0.0.1:1", "topic": "t", "topc": "oops"},
              "unknown option(s) topc"),
             ({"topic": "t"}, "option url is required"),
             ({"url": "amqp://127.0.0.1:1"}, "needs a topic")]
    for options, says in cases:
        writer = spark.readStream.text(str(tmp_path / "in")).writeStream.format("exactmesh")
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(Exception, match=re.escape(says)):
            query = writer.option("checkpointLocation", str(tmp_path / "chk")).start()
            query.awaitTermination(QUERY_TIMEOUT)


def test_batch_write(spark: Any, tmp_path: Path) -> None:
    """`df.write.format("exactmesh").save()`; with the same option id a rerun (say, after a
    failed job) resends under the same identity and the mesh delivers nothing twice."""
    with RouterProcess("A") as router:
        url = f"amqp://{router.url}"
        sub = RawSubscriber(url, "batch/#", name="b", credit=300)
        client = start_clients(sub)
        try:
            df = spark.range(0, 150, numPartitions=3).selectExpr(
                "CAST(id AS STRING) AS value", "CAST(id % 5 AS STRING) AS key")
            for _ in range(2):
                (df.write.format("exactmesh").mode("append").option("url", url)
                 .option("topic", "batch/x").option("id", "nightly-2026-11-22").save())
            wait_for(lambda: len(sub.received) >= 150, 30, "150 rows")
            exactly_once(sub.bodies(), [str(i) for i in range(150)], "b")
        finally:
            stop_clients(client)

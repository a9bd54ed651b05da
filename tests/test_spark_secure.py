"""The `exactmesh` data source against a secured router (docs/security.md): TLS (`--amqps`,
trusting a throwaway CA from trustme) and a log-in (a password file made by mosquitto_passwd,
and an ACL file). A Spark driver in local mode -- a separate process, so that everything it
logs (Spark's JVM at INFO with every plan change logged, its Python workers, our driver-side
loggers at DEBUG) is captured -- runs a batch write of 50 rows with option `passwordFile`, a
streaming query of 20 rows with option `password`, and a batch write with a wrong
`password`. A proton subscriber (no duplicate filter), logged in as another user, gets each
of the 70 rows once; the wrong password fails its write within seconds (not the timeout)
with an error naming the router's refusal; and the password is in none of: the driver's
output, the plans Spark logged, its event log (what its UI's SQL tab and history server
show), the streaming query's explain() and progress, the checkpoint, the stats file, the
router's log (at debug level). Spark shows a batch write's options in its logical plans,
with the value of `password` redacted: the test checks that it did show them, redacted."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT, wait_for
from tests.harness import Subscriber as RawSubscriber
from tests.mesh_harness import start_clients, stop_clients

pytest.importorskip("pyspark", reason="pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
pytest.importorskip("trustme")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)",
                allow_module_level=True)
PASSWD = shutil.which("mosquitto_passwd")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                "(Debian package mosquitto)")

PASSWORD = "Spark wonder-land 7Q"  # with a space: passwordFile keeps all but the line end
WRONG = "not-it-X9k2"
READER = "reader's own 4Z"
ACL = """\
user spark
topic write orders/#
user reader
topic read orders/#
"""
BATCH, STREAM = [f"b-{i}" for i in range(50)], [f"s-{i}" for i in range(20)]
REDACTED = "*********(redacted)"  # what Spark writes for a redacted option's value


class SecureSubscriber(RawSubscriber):
    """tests.harness.Subscriber connecting with TLS and a SASL PLAIN log-in."""

    def __init__(self, url: str, topic_filter: str, name: str, credit: int,
                 **connect: Any) -> None:
        super().__init__(url, topic_filter, name=name, credit=credit, container_id=name)
        self.connect = connect

    def on_start(self, event: Any) -> None:
        event.container.container_id = self.container_id
        conn = event.container.connect(self.url, reconnect=False, handler=self, **self.connect)
        self.receiver = event.container.create_receiver(conn, self.filter, name=self.name)


def _driver(config_path: str) -> None:
    """The Spark driver process: `python -m tests.test_spark_secure CONFIG`."""
    import logging

    from pyspark.sql import SparkSession

    from spark_connector import register

    cfg = json.loads(Path(config_path).read_text())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("exactmesh", "proton"):  # ours and the SDK's, everything
        logging.getLogger(name).setLevel(logging.DEBUG)
    spark = (SparkSession.builder.master("local[2]").appName("exactmesh-secure")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
             # What the UI's SQL tab and the history server show: the event log, uncompressed.
             .config("spark.eventLog.enabled", "true")
             .config("spark.eventLog.dir", cfg["events"])
             .config("spark.eventLog.compress", "false")
             .config("spark.sql.ui.explainMode", "extended")  # logical plans too
             # Every plan Spark makes, with the write's options, into the log.
             .config("spark.sql.planChangeLog.level", "WARN")
             .getOrCreate())
    spark.sparkContext.setLogLevel("INFO")
    register(spark)
    common = {"url": cfg["url"], "user": "spark", "tlsCA": cfg["ca"], "tlsVerifyName": "false",
              "timeout": "60"}
    result: dict[str, Any] = {}
    batch = spark.range(0, 50, numPartitions=2).selectExpr(
        "concat('b-', CAST(id AS STRING)) AS value")
    (batch.write.format("exactmesh").mode("append").options(**common)
     .option("passwordFile", cfg["password_file"]).option("topic", "orders/batch")
     .option("statsFile", cfg["stats"]).save())
    query = (spark.readStream.text(cfg["input"]).writeStream.format("exactmesh")
             .options(**common).option("password", cfg["password"])
             .option("topic", "orders/stream").option("checkpointLocation", cfg["checkpoint"])
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    result["stream_error"] = None if query.exception() is None else str(query.exception())
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        query.explain(extended=True)
    result["explain"] = shown.getvalue()
    result["progress"] = [p.json for p in query.recentProgress]
    result["stream_text"] = f"{query!r} {query.name} {query.status}"
    started = time.monotonic()
    try:
        (batch.write.format("exactmesh").mode("append").options(**common)
         .option("password", cfg["wrong"]).option("topic", "orders/wrong").save())
        result["wrong_error"] = None
    except Exception as err:  # Spark's error, with the task's
        result["wrong_error"] = str(err)
    result["wrong_seconds"] = time.monotonic() - started
    Path(cfg["result"]).write_text(json.dumps(result))
    spark.stop()


def _files_containing(root: Path, text: str) -> list[str]:
    needle = text.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_spark_job_logs_in_over_tls_and_its_password_shows_nowhere(tmp_path: Path) -> None:
    from tests.test_amqp_tls import Tls
    from tests.test_spark_stream import drop_lines, exactly_once

    passwd, acl = tmp_path / "passwd", tmp_path / "acl"
    subprocess.run([PASSWD, "-c", "-b", str(passwd), "spark", PASSWORD], check=True)
    subprocess.run([PASSWD, "-b", str(passwd), "reader", READER], check=True)
    acl.write_text(ACL)
    (tmp_path / "tls").mkdir()
    tls = Tls(tmp_path / "tls", extra=("--password-file", str(passwd), "--acl-file", str(acl),
                                       "--log-level", "debug"))
    pw_file = tmp_path / "spark.pw"
    pw_file.write_text(PASSWORD + "\n")
    drop_lines(tmp_path / "in", "a.txt", STREAM)
    work = tmp_path / "driver"
    (work / "events").mkdir(parents=True)
    config = tmp_path / "driver.json"  # holds the password: the driver's input
    config.write_text(json.dumps({
        "url": tls.url, "ca": tls.trust, "password": PASSWORD, "password_file": str(pw_file),
        "wrong": WRONG, "input": str(tmp_path / "in"),
        "checkpoint": str(work / "chk"), "stats": str(work / "stats.jsonl"),
        "events": str(work / "events"), "result": str(work / "result.json")}))
    with tls.router as router:
        sub = SecureSubscriber(tls.url, "orders/#", "reader", 200, ssl_domain=tls.domain(),
                               user="reader", password=READER, allowed_mechs="PLAIN")
        client = start_clients(sub)
        try:
            with open(work / "driver.log", "wb") as out:
                driver = subprocess.run(
                    [sys.executable, "-m", "tests.test_spark_secure", str(config)], cwd=ROOT,
                    stdout=out, stderr=subprocess.STDOUT, timeout=150,
                    env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
            log = (work / "driver.log").read_text(errors="replace")
            assert driver.returncode == 0, log[-5000:]
            wait_for(lambda: len(sub.received) >= 70, 30, "the 70 rows at the subscriber")
            exactly_once(sub.bodies(), BATCH + STREAM, "reader")  # none of orders/wrong
        finally:
            stop_clients(client)
    result = json.loads((work / "result.json").read_text())
    assert result["stream_error"] is None, result["stream_error"]

    wrong = result["wrong_error"]
    assert wrong is not None, "the write with the wrong password succeeded"
    assert "refused the log-in of user 'spark'" in wrong, wrong[-3000:]
    assert "amqp:unauthorized-access" in wrong and "a wrong user or password" in wrong
    assert result["wrong_seconds"] < 40, "the refusal waited for the timeout (60 s)"
    assert any("SASL log-in refused" in line for line in router.log)

    # Spark did show the batch writes' options in the plans it logged, redacting the values
    # of keys that match spark.redaction.regex (`password`, `passwordFile`; and `url`, by
    # spark.sql.redaction.options.regex). A streaming write's plan shows no options.
    assert f"password={REDACTED}" in log, "no redacted password option in the plans logged"
    assert f"passwordFile={REDACTED}" in log and "user=spark" in log
    assert "WriteToMicroBatchDataSource exactmesh" in result["explain"] and result["progress"]
    events = "".join(p.read_text(errors="replace") for p in (work / "events").rglob("*")
                     if p.is_file())
    assert f"password={REDACTED}" in events  # explainMode extended: the logical plans
    for secret in (PASSWORD, WRONG):
        for text, where in ((log, "the driver's output"), (result["explain"], "explain()"),
                            (" ".join(result["progress"]), "the query's progress"),
                            (result["stream_text"], "the query's repr and status"),
                            (wrong, "the failed write's error"), (events, "the event log"),
                            ("".join(router.log), "the router's log")):
            assert secret not in text, f"the password is in {where}"
        found = _files_containing(work, secret)  # the checkpoint, the stats file, ...
        assert not found, f"the password is in {found}"
    assert (work / "stats.jsonl").read_text().count("\n") == 2  # one line per partition


if __name__ == "__main__":
    _driver(sys.argv[1])

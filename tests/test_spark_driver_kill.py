"""The example pipeline (examples/spark_pipeline.py, a separate Spark driver process) is
killed with SIGKILL in the middle of a micro-batch and run again from its checkpoint: an
AMQP subscriber and an MQTT subscriber on the other side still get each row once.

How the batch is caught in the middle: the AMQP subscriber holds the deliveries it gets
without answering, so the mesh cannot accept them and the batch cannot finish; once it holds
200, the driver's process group (the Python driver and its JVM; Spark's Python workers exit
when the JVM goes) is killed. The subscriber then accepts what it held -- the mesh's records
of those rows now have an outcome while their publisher is gone -- and the pipeline is
started again with the same checkpoint: Spark replays batch 0 with the same query id and
rows, the writer resends under the same identities, and the mesh answers what it already
has. The subscriber has no duplicate filter (tests.harness.Subscriber): it counts what the
mesh delivered."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT, RouterProcess, free_port, wait_for
from tests.harness import Subscriber as RawSubscriber
from tests.mesh_harness import start_clients, stop_clients

pytest.importorskip("pyspark", reason="pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
mqtt = pytest.importorskip("paho.mqtt.client")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)",
                allow_module_level=True)

N = 1200


class MqttCounter:
    """A paho MQTT 3.1.1 QoS 1 subscriber recording every payload it gets."""

    def __init__(self, port: int, topic: str) -> None:
        self.got: list[str] = []
        self.subscribed = threading.Event()
        self.lock = threading.Lock()
        self.c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                             protocol=mqtt.MQTTv311, client_id="spark-mqtt-counter")
        self.c.on_message = self._on_message
        self.c.on_subscribe = lambda *a: self.subscribed.set()
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        self.c.subscribe(topic, qos=1)
        assert self.subscribed.wait(10), "no SUBACK"

    def _on_message(self, c: Any, u: Any, m: Any) -> None:
        with self.lock:
            self.got.append(m.payload.decode())

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def pipeline(url: str, src: Path, chk: Path, log: Path, *more: str) -> subprocess.Popen:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.spark_pipeline", "--url", url,
             "--source", "folder", "--input", str(src), "--checkpoint", str(chk),
             "--topic-prefix", "kill", "--trigger", "0.5", "--master", "local[2]",
             "--option", "rowsPerLink=400", *more],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: the driver and its JVM


def bodies_by_order(bodies: list[str]) -> list[int]:
    import json

    return [json.loads(b)["order"] for b in bodies]


def test_driver_killed_mid_batch_and_restarted_from_checkpoint(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    lines = ["order,region,amount"] + [
        f"{i},{'eu' if i % 2 else 'us'},{1 + i % 50}.5" for i in range(N)]
    (tmp_path / "orders.tmp").write_text("\n".join(lines) + "\n")
    os.replace(tmp_path / "orders.tmp", src / "orders-0001.csv")
    chk, log = tmp_path / "chk", tmp_path / "pipeline.log"
    mqtt_port = free_port()
    holding = threading.Event()
    holding.set()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{mqtt_port}") as router:
        url = f"amqp://{router.url}"
        sub = RawSubscriber(url, "kill/#", name="billing", credit=2 * N,
                            policy=lambda m, d: "hold" if holding.is_set() else "accept")
        client = start_clients(sub)
        mq = MqttCounter(mqtt_port, "kill/#")
        proc = pipeline(url, src, chk, log)
        try:
            wait_for(lambda: len(sub.received) >= 200 or proc.poll() is not None, 120,
                     "the first micro-batch under way (200 deliveries held)")
            assert proc.poll() is None, log.read_text()[-3000:]
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
            proc.wait(10)
            assert not (chk / "commits" / "0").exists(), "batch 0 committed before the kill"
            holding.clear()
            client.call(lambda: sub.answer_held("accept"))
            proc = pipeline(url, src, chk, log, "--until-rows", str(N))
            wait_for(lambda: (len(sub.received) >= N and len(mq.got) >= N)
                     or proc.poll() is not None, 120, "every row after the restart")
            proc.wait(60)
            assert proc.returncode == 0, log.read_text()[-3000:]
            assert (chk / "commits" / "0").exists()
            for who, got in (("AMQP", bodies_by_order(sub.bodies())),
                             ("MQTT", bodies_by_order(mq.got))):
                dupes = len(got) - len(set(got))
                assert sorted(set(got)) == list(range(N)) and not dupes, (
                    f"{who}: {N - len(set(got))} lost, {dupes} duplicated")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            mq.stop()
            stop_clients(client)

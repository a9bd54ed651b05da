"""`format("exactmesh")` with no `register(spark)` call, after a plain install.

A fresh environment gets exactmesh from `pip install .` (no editable install, no path to
this checkout); its dependencies (pyspark, proton, ...) come from this environment's
site-packages through a path file, so nothing is downloaded. A Spark session started
there writes to a real router with `df.write.format("exactmesh")`: Spark 4 found the data
source in the installed module `pyspark_exactmesh` (pyspark's lookup_data_sources).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from amqp_edge.client import Subscriber

from .harness import ROOT, RouterProcess, wait_for

pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime (make test installs one)", allow_module_level=True)

SCRIPT = """
import sys
from pyspark.sql import SparkSession
import spark_connector
assert "{checkout}" not in spark_connector.__file__, spark_connector.__file__
spark = (SparkSession.builder.master("local[1]").appName("autoregister")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.createDataFrame([("one",), ("two",), ("three",)], ["body"])
df.write.format("exactmesh").option("url", "amqp://{url}").option("topic", "orders/eu") \\
    .option("id", "autoregister-1").mode("append").save()
spark.stop()
print("saved through", spark_connector.__file__)
"""


def fresh_environment(tmp_path: Path) -> Path:
    """A venv with exactmesh installed by `pip install .`; its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv),
                                                     "platbase": str(venv)}))
    build = tmp_path / "src"  # a copy: the build leaves nothing in this checkout
    shutil.copytree(ROOT, build, ignore=shutil.ignore_patterns(
        ".venv", ".git", ".bench", "build", "*.so", "__pycache__", ".pytest_cache",
        "node_modules"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(build)], check=True,
                   cwd=tmp_path, timeout=300)
    # The dependencies, from this environment (its own .pth files, such as the editable
    # install of this checkout, are not read from a path listed in a .pth file).
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin" / "python"


def test_format_exactmesh_works_after_pip_install_without_register(tmp_path: Path) -> None:
    python = fresh_environment(tmp_path)
    assert (python.parent.parent / "lib").exists()
    with RouterProcess("A") as router:
        sub = Subscriber(f"amqp://{router.url}", "orders/#", id="audit",
                         guarantee="at-least-once")
        try:
            sub.wait_attached(10)
            env = dict(os.environ, PYSPARK_PYTHON=str(python),
                       PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
            env.pop("PYTHONPATH", None)
            # The write returns once the subscriber accepted every row: receive meanwhile.
            job = subprocess.Popen([str(python), "-c", SCRIPT.format(
                url=router.url, checkout=str(ROOT))], cwd=tmp_path, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            bodies: list[str] = []

            def more() -> bool:
                msg = sub.receive(timeout=0.2)
                if msg is not None:
                    bodies.append(msg.body.decode() if isinstance(msg.body, bytes)
                                  else str(msg.body))
                    sub.accept(msg)
                return len(bodies) >= 3

            try:
                wait_for(more, 120, "the three rows")
                out, err = job.communicate(timeout=120)
            finally:
                if job.poll() is None:
                    job.kill()
                    job.communicate()
            assert job.returncode == 0, err[-3000:]
            assert f"saved through {tmp_path}" in out
            assert sorted(bodies) == ["one", "three", "two"]
        finally:
            sub.close()

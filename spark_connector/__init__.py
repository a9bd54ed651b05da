"""A PySpark data source named `exactmesh`: Spark streams (and batch writes) publish into an
exactmesh mesh exactly once. See docs/spark.md.

    from spark_connector import register
    register(spark)          # spark.dataSource.register(ExactmeshDataSource)
    df.writeStream.format("exactmesh").option("url", "amqp://127.0.0.1:5672") \\
      .option("topic", "orders/eu").option("checkpointLocation", "/chk").start()

Importing this package does not import pyspark; `register` and `ExactmeshDataSource` do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExactmeshDataSource", "local_session", "register"]


def register(spark: Any) -> None:
    """Register the `exactmesh` format with a SparkSession."""
    from .datasource import ExactmeshDataSource

    spark.dataSource.register(ExactmeshDataSource)


def local_session(master: str, app_name: str, partitions: int) -> Any:
    """A SparkSession for a job on one machine (the example pipeline, the benchmark): no web
    UI, `partitions` shuffle partitions, errors only in the log, `exactmesh` registered."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def __getattr__(name: str) -> Any:
    if name == "ExactmeshDataSource":
        from .datasource import ExactmeshDataSource

        return ExactmeshDataSource
    raise AttributeError(name)

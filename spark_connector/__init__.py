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

__all__ = ["ExactmeshDataSource", "register"]


def register(spark: Any) -> None:
    """Register the `exactmesh` format with a SparkSession."""
    from .datasource import ExactmeshDataSource

    spark.dataSource.register(ExactmeshDataSource)


def __getattr__(name: str) -> Any:
    if name == "ExactmeshDataSource":
        from .datasource import ExactmeshDataSource

        return ExactmeshDataSource
    raise AttributeError(name)

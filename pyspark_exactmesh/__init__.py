"""Spark's automatic registration of the `exactmesh` data source.

Spark 4 looks, when a session first needs a Python data source, through the installed
top-level modules named `pyspark_*` for a `DefaultSource` that is a `DataSource`, and
registers it under its `name()` (pyspark/sql/worker/lookup_data_sources.py). With exactmesh
installed (`pip install .`), `df.write.format("exactmesh")` and
`df.writeStream.format("exactmesh")` then work in any session without calling
`spark_connector.register(spark)` (which still works, and is needed with Spark 3). See
docs/spark.md.
"""

from __future__ import annotations

from spark_connector.datasource import ExactmeshDataSource as DefaultSource

__all__ = ["DefaultSource"]

"""An example streaming pipeline: read, transform, publish into an exactmesh mesh, exactly once.

    .venv/bin/python -m examples.spark_pipeline --url amqp://127.0.0.1:5672 \\
        --source rate --rows-per-second 20 --checkpoint /tmp/exactmesh-chk

Sources:

- `--source rate` (Spark's rate source): rows (timestamp, value); each becomes an "order"
  {"order": value, "amount": ..., "region": "eu" | "us", "at": timestamp}.
- `--source folder --input DIR`: CSV files dropped into DIR (header `order,region,amount`);
  each file is read once (the checkpoint remembers which), `--files-per-batch` per micro-batch.

Transform: rows with amount <= 0 are dropped; the topic is PREFIX/REGION (one stream fans out
to many topics through the `topic` column); `key` is the order number (an application
property, as is `region`); the body is the row as JSON.

Subscribers on the other side (README section in docs/spark.md):

    exactmesh sub --url amqp://127.0.0.1:5672 --topic 'orders/#' --id billing --state-dir /tmp/b
    mosquitto_sub -h 127.0.0.1 -p 1883 -t 'orders/#' -q 1 -v

Stop it with Ctrl-C (or kill it: rerunning with the same --checkpoint resumes, and what was
published before counts once). `--until-rows N` stops after N rows were published.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def build(spark, args: argparse.Namespace):
    from pyspark.sql import functions as F

    if args.source == "rate":
        raw = (spark.readStream.format("rate")
               .option("rowsPerSecond", args.rows_per_second)
               .option("numPartitions", args.partitions).load())
        orders = raw.select(
            F.col("value").alias("order"),
            F.when(F.col("value") % 2 == 0, F.lit("eu")).otherwise(F.lit("us")).alias("region"),
            ((F.col("value") * 37) % 1000 / 10.0).alias("amount"),
            F.col("timestamp").cast("string").alias("at"))
    else:
        orders = (spark.readStream.format("csv").option("header", "true")
                  .schema("order LONG, region STRING, amount DOUBLE")
                  .option("maxFilesPerTrigger", args.files_per_batch)
                  .load(args.input))
    out = (orders.where(F.col("amount") > 0)
           .select(F.concat_ws("/", F.lit(args.topic_prefix), F.col("region")).alias("topic"),
                   F.col("order").cast("string").alias("key"),
                   F.col("region"),
                   F.to_json(F.struct(*orders.columns)).alias("value")))
    writer = (out.writeStream.format("exactmesh")
              .option("url", args.url)
              .option("properties", "region")
              .option("checkpointLocation", args.checkpoint)
              .trigger(processingTime=f"{args.trigger} seconds"))
    for opt in args.option or []:
        name, _, value = opt.partition("=")
        writer = writer.option(name, value)
    return writer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="routers, amqp://HOST:PORT[,amqp://...]")
    p.add_argument("--source", choices=["rate", "folder"], default="rate")
    p.add_argument("--input", help="folder of CSV files (order,region,amount) for --source "
                   "folder")
    p.add_argument("--rows-per-second", type=int, default=20)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--files-per-batch", type=int, default=1)
    p.add_argument("--topic-prefix", default="orders")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it "
                   "to resume exactly once)")
    p.add_argument("--trigger", type=float, default=1.0, help="seconds between micro-batches")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--option", action="append", metavar="NAME=VALUE",
                   help="more options for the exactmesh sink (e.g. ttl=60)")
    p.add_argument("--until-rows", type=int, default=0,
                   help="stop after this many rows were published (0: run until stopped)")
    args = p.parse_args(argv)
    if args.source == "folder" and not args.input:
        p.error("--source folder needs --input DIR")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from spark_connector import local_session

    spark = local_session(args.master, "exactmesh-pipeline", args.partitions)
    query = build(spark, args).start()
    print(f"pipeline: query {query.id} started", flush=True)
    rows_by_batch: dict[int, int] = {}  # input rows of each finished micro-batch
    try:
        while query.isActive:
            query.awaitTermination(1.0)  # paces the loop
            for progress in query.recentProgress or []:
                rows_by_batch[progress["batchId"]] = progress["numInputRows"]
            if args.until_rows and sum(rows_by_batch.values()) >= args.until_rows:
                break
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        error = query.exception()
        spark.stop()
    if error is not None:
        print(f"pipeline: query failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

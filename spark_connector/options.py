"""The `exactmesh` data source's options and column mapping, checked with clear errors.

Nothing here imports pyspark: the checks run (and are tested) without a JVM.

    df.writeStream.format("exactmesh")
      .option("url", "amqp://h1:5672,amqp://h2:5672")   # required, failover order
      .option("topic", "orders/eu")       # or a `topic` column (a row's column wins)
      .option("properties", "region,amount")  # columns sent as application properties
      .option("ttl", "60")                # seconds
      .option("checkpointLocation", "/chk/orders")
      .start()

Columns: `value` (or `body`) is the message body (string or binary; other types are sent as
their text); `key`, if present, and the columns named in `properties` become application
properties; `topic`, if present and not null, is the row's topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from amqp_edge.client import parse_urls
from router.core.topics import TopicError, validate_topic

# Options this data source reads, by their lower-case name (Spark treats option names
# case-insensitively), with what each is for: the unknown-option error lists them.
KNOWN = {
    "url": "routers, amqp://HOST:PORT, comma-separated in failover order (required)",
    "topic": "the topic rows without a `topic` column value go to",
    "properties": "comma-separated columns sent as application properties",
    "ttl": "message time to live, seconds",
    "window": "messages one partition keeps unsettled per topic (1..256, default 256)",
    "timeout": "seconds a partition waits for the mesh's outcomes, or to reach a router "
               "(default 300)",
    "progressdir": "directory of the per-partition progress markers (default "
                   "CHECKPOINTLOCATION/exactmesh-progress; 'none' to keep none)",
    "id": "a stable name for a batch write: rerunning it with the same id and rows resends "
          "instead of duplicating (default: a new name per write)",
    "rowsperlink": "rows per publisher link (its resume declaration must fit one attach "
                   "frame; 1..2500, default 2000)",
    "statsfile": "a local file each partition's write appends one JSON line of counts and "
                 "timings to, per batch (diagnostics; benchmarks/spark.py reads it)",
    # Spark's own, passed to every sink:
    "checkpointlocation": "Spark's checkpoint directory (streaming)",
    "path": "(Spark's; unused)",
}
BODY_COLUMNS = ("value", "body")
KEY_COLUMN = "key"
TOPIC_COLUMN = "topic"
MAX_WINDOW = 256  # a router's default --publisher-window: more would only wait for credit
MAX_ROWS_PER_LINK = 2500  # 2,500 tags of up to 9 digits (11 bytes each) fit a 32 KiB attach
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class OptionError(ValueError):
    """An option or the DataFrame's columns do not fit the data source; says what to do."""


@dataclass(frozen=True)
class SinkOptions:
    urls: list[str]
    topic: str | None
    properties: tuple[str, ...] = ()
    ttl: float | None = None
    window: int = MAX_WINDOW
    timeout: float = 300.0
    progress_dir: str | None = None
    id: str | None = None
    rows_per_link: int = 2000
    extra: dict[str, str] = field(default_factory=dict)
    stats_file: str | None = None


def _number(name: str, text: str, kind: type, low: float, high: float | None = None) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise OptionError(f"option {name}={text!r} is not a "
                          f"{'whole number' if kind is int else 'number'}") from None
    if not low <= value or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise OptionError(f"option {name}={text!r} must be {bound}")
    return value


def _local_dir(location: str, what: str) -> str:
    """A directory the executors' Python processes can write with plain file operations."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return parts.path if parts.scheme else location
    if len(parts.scheme) == 1:  # a Windows drive letter
        return location
    raise OptionError(
        f"{what} {location!r} is not a local or mounted path ({parts.scheme}:// is not "
        "written by plain file operations): set option progressDir to a directory every "
        "executor can write (a shared mount), or progressDir=none to rely on the mesh's "
        "tombstones alone (docs/spark.md)")


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the options given to `.format("exactmesh")`; raises OptionError saying what is
    wrong and what to write instead."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in KNOWN)
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in KNOWN.items())
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for format 'exactmesh'; "
                          f"it knows {known}")
    if not opts.get("url"):
        raise OptionError("option url is required: the routers to publish to, "
                          "amqp://HOST:PORT, several separated by commas")
    try:
        urls = parse_urls(opts["url"])
    except ValueError as err:
        raise OptionError(f"option url: {err}") from None
    topic = opts.get("topic") or None
    if topic is not None:
        try:
            validate_topic(topic)
        except TopicError as err:
            raise OptionError(f"option topic={topic!r} is not a topic: {err}") from None
    props = tuple(p.strip() for p in opts.get("properties", "").split(",") if p.strip())
    ttl = _number("ttl", opts["ttl"], float, 0.001) if opts.get("ttl") else None
    window = int(_number("window", opts["window"], int, 1, MAX_WINDOW)) \
        if opts.get("window") else MAX_WINDOW
    timeout = _number("timeout", opts["timeout"], float, 0.1) if opts.get("timeout") else 300.0
    per_link = int(_number("rowsPerLink", opts["rowsperlink"], int, 1, MAX_ROWS_PER_LINK)) \
        if opts.get("rowsperlink") else 2000
    ident = opts.get("id") or None
    if ident is not None and not _NAME.match(ident):
        raise OptionError(f"option id={ident!r} must be 1 to 64 letters, digits or _.:-")
    progress = opts.get("progressdir") or None
    if progress is not None and progress.lower() == "none":
        progress = None
    elif progress is not None:
        progress = _local_dir(progress, "option progressDir")
    elif opts.get("checkpointlocation"):
        base = _local_dir(opts["checkpointlocation"], "checkpointLocation")
        progress = base.rstrip("/") + "/exactmesh-progress"
    extra = {k: v for k, v in opts.items() if k in ("checkpointlocation", "path")}
    stats = _local_dir(opts["statsfile"], "option statsFile") if opts.get("statsfile") else None
    return SinkOptions(urls, topic, props, ttl, window, timeout, progress, ident, per_link,
                       extra, stats)


@dataclass(frozen=True)
class ColumnPlan:
    """Where a row's message parts are: column positions in the DataFrame's schema."""

    body: int
    topic: int | None  # the `topic` column, if any
    properties: tuple[tuple[str, int], ...]  # (property name, column), `key` first


def plan_columns(columns: Sequence[str], options: SinkOptions) -> ColumnPlan:
    """Map the DataFrame's column names to the message; raises OptionError when there is no
    body column, no topic, or a property column that does not exist."""
    index = {name: i for i, name in enumerate(columns)}
    body = next((index[c] for c in BODY_COLUMNS if c in index), None)
    if body is None:
        raise OptionError(f"format 'exactmesh' needs a column named value (or body) for the "
                          f"message body; the columns are {', '.join(columns) or 'none'} "
                          "(e.g. .selectExpr(\"to_json(struct(*)) AS value\"))")
    topic = index.get(TOPIC_COLUMN)
    if topic is None and options.topic is None:
        raise OptionError("format 'exactmesh' needs a topic: set option topic, or give the "
                          "DataFrame a column named topic (one topic per row)")
    props: list[tuple[str, int]] = []
    if KEY_COLUMN in index:
        props.append((KEY_COLUMN, index[KEY_COLUMN]))
    for name in options.properties:
        if name not in index:
            raise OptionError(f"option properties names column {name!r}, which the DataFrame "
                              f"does not have (columns: {', '.join(columns)})")
        if name not in (n for n, _ in props):
            props.append((name, index[name]))
    return ColumnPlan(body, topic, tuple(props))

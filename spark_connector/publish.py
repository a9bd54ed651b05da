"""Publishing one Spark partition of one batch into the mesh, exactly once across retries.

Nothing here imports pyspark (the data source in `datasource.py` calls `publish_partition`
from the executors' `write()`), so it is tested without a JVM. docs/spark.md has the design.

Identity. Row `i` (0-based, in the partition's order) of partition `p` of batch `b` of query
`q` goes to topic `t` as delivery tag `str(i + 1)` on the publisher link of

    container-id  NAME = "spark-" q "-" b "-" p "-" (i // rowsPerLink) "-" sha1(t)[:10]
    link name     pub/NAME

so a task retried by Spark, or the same batch replayed after the driver restarted from its
checkpoint, sends every row again under the same identity and tag. Every publisher link
declares all its tags as resends in its attach (`exactmesh:resume`): the mesh answers those
it has records or tombstones of without delivering them again. A link carries at most
`rowsPerLink` rows, so its declaration fits one attach frame.

Progress markers. After each chunk of the partition was accepted, `PROGRESS/q/b/p.done`
records how many of the partition's first rows the mesh accepted (written atomically,
fsynced); a task that finds it reads those rows without sending them. That covers a replay
that comes after the mesh forgot the rows (a tombstone is kept for the last 65,536 deliveries
per router); the tombstones cover the short gap between an acceptance and the marker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proton import SSLException

from amqp_edge.advisory import CONNECTED, NO_RESPONSE, Advisory
from amqp_edge.client import (
    ClientError,
    Login,
    MemoryPublisherStore,
    Outcome,
    Publisher,
    encode_message,
)
from router.core.topics import TopicError, validate_topic

from .options import ColumnPlan, SinkOptions

log = logging.getLogger("exactmesh.spark")

CHUNKS_IN_FLIGHT = 2  # chunks of a partition on the wire at once (each up to rowsPerLink)
# A router answers a refused log-in after a second (to slow down guessing), and the SDK's
# default idle timeout (1 s) runs out first during the SASL exchange, hiding the refusal
# behind "local-idle-timeout expired". With a log-in, publishers wait this long instead.
LOGIN_IDLE_TIMEOUT = 3.0
REFUSED = "amqp:unauthorized-access"  # the condition of a refused log-in
# A refused log-in is a wrong user or password, which waiting does not cure, or a user over
# the router's --max-connections-per-user, which a connection closing elsewhere does: the
# client cannot tell them apart. A publisher refused for this long without attaching since
# fails its chunk, rather than retrying until the timeout.
LOGIN_REFUSED_GRACE = 5.0


class PublishError(RuntimeError):
    """Rows of a partition were not accepted by the mesh (names the topic, condition and the
    failed subscribers), or the mesh could not be reached in time."""


@dataclass(frozen=True)
class PartitionId:
    """Which rows these are: query (or batch write) id, batch id, partition id."""

    query: str
    batch: int
    partition: int

    def publisher_name(self, chunk: int, topic: str) -> str:
        digest = hashlib.sha1(topic.encode()).hexdigest()[:10]
        return f"spark-{self.query}-{self.batch}-{self.partition}-{chunk}-{digest}"


def marker_path(progress_dir: str, pid: PartitionId) -> str:
    return os.path.join(progress_dir, pid.query, str(pid.batch), f"{pid.partition}.done")


def read_marker(progress_dir: str | None, pid: PartitionId) -> dict | None:
    if progress_dir is None:
        return None
    try:
        with open(marker_path(progress_dir, pid), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise PublishError(f"cannot read the progress marker of batch {pid.batch} partition "
                           f"{pid.partition} in {progress_dir!r}: {err}") from err


def write_marker(progress_dir: str, pid: PartitionId, summary: dict) -> None:
    """Atomically: a temporary file, fsync, rename, fsync the directory."""
    path = marker_path(progress_dir, pid)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(summary, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def prune_markers(progress_dir: str | None, query: str, keep_from: int) -> int:
    """Delete the markers of batches before `keep_from`; returns how many batches went."""
    if progress_dir is None:
        return 0
    root = os.path.join(progress_dir, query)
    gone = 0
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(root):
            if name.isdigit() and int(name) < keep_from:
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                gone += 1
    return gone


def append_stats(path: str, record: dict) -> None:
    """One JSON line, appended in a single write (O_APPEND: lines of concurrent tasks do not
    interleave)."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _property_value(value: Any) -> Any:
    """AMQP application property values are simple types."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value)


def _body(value: Any) -> bytes | str:
    if isinstance(value, bytes | str):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if value is None:
        return b""
    return str(value)


@dataclass
class _Chunk:
    index: int
    by_topic: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    rows: int = 0  # rows to publish in it
    end: int = 0  # the partition's rows up to the end of this chunk


@dataclass
class PartitionResult:
    rows: int = 0  # rows the task read
    accepted: int = 0  # rows it published and the mesh accepted
    skipped_rows: int = 0  # rows a progress marker said were accepted before: not sent
    links: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0  # blocked on the mesh: from handing a chunk's rows to its
    # publishers until the last outcome

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def row_messages(rows: Iterable[Sequence[Any]], plan: ColumnPlan, opts: SinkOptions,
                 pid: PartitionId, skip: int = 0,
                 result: PartitionResult | None = None) -> Iterable[_Chunk]:
    """The partition's rows as chunks of at most `rowsPerLink` rows, each its messages by
    topic, encoded as their publisher sends them. The first `skip` rows are read and counted
    (in `result.rows`) but not sent; chunks with nothing to send are not yielded."""
    chunk = _Chunk(0)
    per = opts.rows_per_link
    checked: set[str] = set()
    for i, row in enumerate(rows):
        if result is not None:
            result.rows = i + 1
        c = i // per
        if c != chunk.index:
            if chunk.rows:
                yield chunk
            chunk = _Chunk(c)
        chunk.end = i + 1
        if i < skip:
            continue
        seq = i + 1
        topic = row[plan.topic] if plan.topic is not None else None
        topic = str(topic) if topic is not None else opts.topic
        if topic is None:
            raise PublishError(f"row {i} of batch {pid.batch} partition {pid.partition} has "
                               "a null topic column and no topic option is set")
        if topic not in checked:
            try:
                validate_topic(topic)
            except TopicError as err:
                raise PublishError(f"row {i} of batch {pid.batch} partition {pid.partition}: "
                                   f"{topic!r} is not a topic: {err}") from None
            checked.add(topic)
        props = {name: _property_value(row[col]) for name, col in plan.properties}
        payload = encode_message(pid.publisher_name(c, topic), topic, seq,
                                 _body(row[plan.body]), props or None, opts.ttl)
        chunk.by_topic.setdefault(topic, []).append((seq, payload))
        chunk.rows += 1
    if chunk.rows:
        yield chunk


def _failure_text(topic: str, failed: list[Outcome], pid: PartitionId) -> str:
    first = failed[0]
    subscribers: list[str] = []
    for o in failed:
        for who in (o.info or {}).get("failed", []) or []:
            if str(who) not in subscribers:
                subscribers.append(str(who))
    who = f"; failed subscribers: {', '.join(subscribers)}" if subscribers else ""
    return (f"exactmesh: {len(failed)} row(s) of batch {pid.batch} partition {pid.partition} "
            f"were not accepted for topic {topic!r}{who}. First: row {first.seq - 1}: "
            f"{first.condition}: {first.description}")


def publish_partition(rows: Iterable[Sequence[Any]], plan: ColumnPlan, opts: SinkOptions,
                      pid: PartitionId,
                      publisher_factory: Callable[..., Publisher] = Publisher) -> PartitionResult:
    """Publish the partition's rows and wait until the mesh accepted every one; raises
    PublishError naming the topic and the failed subscribers otherwise. Up to
    CHUNKS_IN_FLIGHT chunks are on the wire at once (the next chunk is read and sent while
    the mesh answers the one before); they are finished in order.

    With a progress directory, the marker records after each chunk how many of the
    partition's first rows the mesh accepted; a later attempt (a retried task, a replayed
    batch) reads those rows without sending them. A marker is only ever a true statement:
    an attempt whose input ended early (Spark ends a task's input cleanly when an upstream
    operator of the same task fails) records the rows it did publish, not the partition
    as done."""
    started = time.monotonic()
    marker = read_marker(opts.progress_dir, pid)
    done = int(marker.get("rows", 0)) if marker else 0
    result = PartitionResult()
    deadline = started + opts.timeout
    recorded = done
    inflight: deque[_InFlight] = deque()
    login = opts.login()

    def finish_oldest() -> None:
        nonlocal recorded
        oldest = inflight.popleft()
        waited = time.monotonic()
        oldest.finish(opts, pid, deadline, result)
        result.wait_seconds += time.monotonic() - waited
        if opts.progress_dir is not None:
            write_marker(opts.progress_dir, pid, {"rows": oldest.chunk.end, "at": time.time()})
            recorded = oldest.chunk.end

    try:
        for chunk in row_messages(rows, plan, opts, pid, skip=done, result=result):
            if len(inflight) >= CHUNKS_IN_FLIGHT:
                finish_oldest()
            inflight.append(_InFlight(chunk, opts, pid, deadline, result, publisher_factory,
                                      login))
        while inflight:
            finish_oldest()
    finally:
        for pending in inflight:
            pending.close()
    result.skipped_rows = min(done, result.rows)
    if done:
        log.info("batch %d partition %d of %s: %d row(s) accepted before (progress marker) "
                 "not sent again", pid.batch, pid.partition, pid.query, result.skipped_rows)
    if done > result.rows:
        log.warning("batch %d partition %d of %s: the progress marker says %d row(s) were "
                    "accepted, but this attempt read only %d: the input is not deterministic",
                    pid.batch, pid.partition, pid.query, done, result.rows)
    if opts.progress_dir is not None and result.rows > recorded:
        write_marker(opts.progress_dir, pid, {"rows": result.rows, "at": time.time()})
    result.seconds = time.monotonic() - started
    return result


class _InFlight:
    """One chunk on the wire: a publisher per topic, preloaded with its rows (declared as
    resends in the attach), collecting outcomes.

    A publisher whose log-in the router refuses (a wrong password or user, none where one is
    needed, or a user over --max-connections-per-user) goes on trying; refused for
    LOGIN_REFUSED_GRACE seconds without attaching, it is closed and the chunk fails naming
    the refusal, rather than after the timeout. Other connection failures (TLS among them)
    are retried until the timeout, whose error names the first of them."""

    def __init__(self, chunk: _Chunk, opts: SinkOptions, pid: PartitionId, deadline: float,
                 result: PartitionResult, factory: Callable[..., Publisher],
                 login: Login | None = None) -> None:
        self.chunk = chunk
        self.lock = threading.Lock()
        self.outcomes: dict[str, list[Outcome]] = {}
        self.pubs: list[tuple[str, Publisher]] = []
        self.failure: dict[str, str] = {}  # topic -> the first failure since it last attached
        self.refused: dict[str, str] = {}  # topic -> the refused log-in, while it lasts
        self.given_up: dict[str, str] = {}  # topic -> the refusal its publisher was closed for
        self.timers: list[threading.Timer] = []
        self.user = login.user if login is not None else None
        extra: dict[str, Any] = {}
        if login is not None:
            extra["login"] = login
            if login.user is not None:
                extra["idle_timeout"] = LOGIN_IDLE_TIMEOUT
        try:
            for topic, messages in chunk.by_topic.items():
                try:
                    pub = factory(opts.urls, topic, id=pid.publisher_name(chunk.index, topic),
                                  store=MemoryPublisherStore(messages), window=opts.window,
                                  connect_timeout=max(0.1, deadline - time.monotonic()),
                                  on_outcome=self._collector(topic),
                                  on_advisory=self._advisor(topic), **extra)
                except SSLException as err:  # proton could not load the TLS files here
                    raise PublishError(
                        f"exactmesh: cannot load the TLS files on this executor (tlsCA="
                        f"{opts.tls_ca!r}, tlsCert={opts.tls_cert!r}, tlsKey={opts.tls_key!r}): "
                        f"{err}; they must be readable PEM files at these paths on every "
                        "executor") from None
                with self.lock:
                    self.pubs.append((topic, pub))
                    late = topic in self.given_up  # given up on before it was registered
                if late:
                    pub.close()
                result.links += 1
        except BaseException:
            self.close()
            raise

    def _collector(self, topic: str) -> Callable[[int, Outcome], None]:
        def on_outcome(seq: int, outcome: Outcome) -> None:
            with self.lock:
                self.outcomes.setdefault(topic, []).append(outcome)
        return on_outcome

    def _advisor(self, topic: str) -> Callable[[Advisory], None]:
        """On the publisher's I/O thread (keep it short): remember why its connection failed
        (the SDK advises the first failure after each attach); a refused log-in starts the
        grace period, an attach ends it."""
        def on_advisory(advisory: Advisory) -> None:
            with self.lock:
                if advisory.kind == CONNECTED:
                    self.refused.pop(topic, None)
                    self.failure.pop(topic, None)
                    return
                if advisory.kind != NO_RESPONSE:
                    return
                self.failure[topic] = f"{advisory.url}: {advisory.detail}"
                if REFUSED not in advisory.detail or topic in self.refused:
                    return
                who = f"the log-in of user {self.user!r}" if self.user is not None \
                    else "a client without a log-in"
                self.refused[topic] = f"{advisory.url} refused {who} ({advisory.detail})"
                timer = threading.Timer(LOGIN_REFUSED_GRACE, self._give_up, (topic,))
                timer.daemon = True
                self.timers.append(timer)
                timer.start()
        return on_advisory

    def _give_up(self, topic: str) -> None:
        """On a timer's thread: still refused, and not attached since? Close the publisher,
        which wakes `finish`."""
        with self.lock:
            refused = self.refused.get(topic)
            if refused is None or topic in self.given_up:
                return
            self.given_up[topic] = refused
            pub = next((p for t, p in self.pubs if t == topic), None)
        if pub is not None:
            pub.close()

    def close(self) -> None:
        with self.lock:
            timers = list(self.timers)
        for timer in timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join(15)  # one that fired may be closing its publisher
        for _, pub in self.pubs:
            with contextlib.suppress(Exception):
                pub.close()

    def _refusal(self, topic: str, pid: PartitionId) -> PublishError | None:
        with self.lock:
            refused = self.given_up.get(topic)
        if refused is None:
            return None
        what = "a wrong user or password (check options user and passwordFile, or password, " \
            "against the router's password file), or more connections as this user than " \
            "the router's --max-connections-per-user: its log says which" \
            if self.user is not None else "set options user and passwordFile (or password)"
        return PublishError(f"exactmesh: router {refused}, for {LOGIN_REFUSED_GRACE:g} s: "
                            f"{what}; batch {pid.batch} partition {pid.partition}, topic "
                            f"{topic!r}")

    def finish(self, opts: SinkOptions, pid: PartitionId, deadline: float,
               result: PartitionResult) -> None:
        """Wait for every outcome, close, and raise PublishError if a row was not accepted."""
        try:
            for topic, pub in self.pubs:
                try:
                    pub.flush(timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    if not pub.attached:
                        with self.lock:
                            first = self.failure.get(topic)
                        why = f" (first failure: {first})" if first else ""
                        raise PublishError(
                            f"exactmesh: no exactmesh router reachable at "
                            f"{', '.join(opts.urls)} within the timeout of {opts.timeout:g} s "
                            f"(option timeout) for batch {pid.batch} partition "
                            f"{pid.partition}, topic {topic!r}{why}") from None
                    raise PublishError(
                        f"exactmesh: {pub.pending} row(s) of batch {pid.batch} partition "
                        f"{pid.partition} for topic {topic!r} had no outcome from the mesh "
                        f"within the timeout of {opts.timeout:g} s (option timeout)") from None
                except ClientError as err:
                    refusal = self._refusal(topic, pid)
                    if refusal is not None:
                        raise refusal from None
                    raise PublishError(f"exactmesh: batch {pid.batch} partition "
                                       f"{pid.partition}, topic {topic!r}: {err}") from err
        finally:
            self.close()
        for topic, _ in self.pubs:
            got = self.outcomes.get(topic, [])
            failed = sorted((o for o in got if o.state != "accepted"), key=lambda o: o.seq)
            if failed:
                raise PublishError(_failure_text(topic, failed, pid))
            result.accepted += len(got)

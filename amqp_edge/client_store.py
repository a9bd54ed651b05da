"""Durable client state for the exactly-once SDK (`amqp_edge.client`), in SQLite.

One database file per client identity in the state directory:

- ``publisher-<id>.sqlite``: the publisher's next sequence number and every message it holds
  without a final outcome (its encoded AMQP bytes), plus the ones that failed;
- ``subscriber-<id>.sqlite``: the tags of the deliveries the application accepted (or
  rejected), for duplicate suppression, the attach generation and a count of acceptances.

Durability choice: WAL journal with ``synchronous=NORMAL``. A commit is then durable against
the process dying at any point (SIGKILL, a crash, an exception): the next run finds every
committed row. It is not durable against the *machine* losing power before the next WAL
checkpoint: the last commits (up to the last checkpoint) may be lost. For a publisher that
means messages sent just before a power cut may be lost from its outbox; for a subscriber, a
duplicate of a message accepted just before the power cut may be shown again. Use
``synchronous="FULL"`` (constructor argument) for an fsync per commit if that matters more
than throughput.

A lock file (``fcntl.flock``) next to each database keeps two processes from using the same
identity and state directory at once: a second one fails at once with `StoreError` (the lock
goes away with the process, SIGKILL included).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class StoreError(Exception):
    """The state directory cannot be used (missing, not writable, locked, or belongs to a
    different stream). The message says what was wrong and what to do."""


def _file_stem(kind: str, name: str) -> str:
    """A file name for a client id: readable when the id is, unique in any case."""
    safe = _SAFE.sub("_", name)[:64]
    if safe != name:
        safe += "-" + hashlib.blake2b(name.encode(), digest_size=6).hexdigest()
    return f"{kind}-{safe}"


def check_state_dir(state_dir: str | os.PathLike[str], option: str = "--state-dir") -> Path:
    """Create `state_dir` if needed and check that it is a writable directory. `option` is
    the command-line option that names it, for the error message."""
    path = Path(state_dir)
    if path.exists() and not path.is_dir():
        raise StoreError(f"the state directory {str(path)!r} is not a directory; "
                         f"choose another {option}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create the state directory {str(path)!r}: {err.strerror}; "
                         f"create it or choose another {option}") from err
    if not os.access(path, os.W_OK | os.X_OK):
        raise StoreError(f"the state directory {str(path)!r} is not writable by this user; "
                         f"fix its permissions or choose another {option}")
    return path


class SqliteFile:
    """One SQLite database in WAL mode, shared by its owner's threads under a lock, with a lock
    file that keeps a second process off it. The SDK's stores and the relay's
    (relay/store.py) are each one of these."""

    def __init__(self, state_dir: str | os.PathLike[str], kind: str, name: str,
                 synchronous: str = "NORMAL", option: str = "--state-dir") -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous={synchronous!r}: use NORMAL or FULL")
        directory = check_state_dir(state_dir, option)
        stem = _file_stem(kind, name)
        self.path = directory / f"{stem}.sqlite"
        self._lock_file = open(directory / f"{stem}.lock", "a+")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StoreError(
                f"another process is using {kind} id {name!r} with the state directory "
                f"{str(directory)!r}; stop it, or use another id or {option}") from None
        try:
            self.conn = sqlite3.connect(self.path, check_same_thread=False,
                                        isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        except sqlite3.Error as err:
            self._lock_file.close()
            raise StoreError(f"cannot open {str(self.path)!r}: {err}; check the state "
                             "directory's permissions and free space") from err
        self.lock = threading.RLock()
        self._reader: sqlite3.Connection | None = None

    def reader(self) -> sqlite3.Connection:
        """A second connection for lookups from one other thread (the client's I/O thread):
        in WAL mode it reads committed data without waiting for the writer's lock."""
        if self._reader is None:
            self._reader = sqlite3.connect(self.path, check_same_thread=False,
                                           isolation_level=None)
        return self._reader

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def meta(self, key: str, default: object = None) -> object:
        with self.lock:
            row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if row is None else row[0]

    def close(self) -> None:
        with self.lock:
            with contextlib.suppress(sqlite3.Error):
                if self._reader is not None:
                    self._reader.close()
                self.conn.close()
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()


def _set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES(?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))


@dataclass(frozen=True, slots=True)
class StoredFailure:
    seq: int
    condition: str
    description: str
    at: float


class PublisherStore:
    """A publisher's outbox. Rows are inserted before their message is transmitted (in group
    commits), deleted when accepted (counted in ``accepted_total``), and kept with
    ``state='failed'`` when rejected."""

    def __init__(self, state_dir: str | os.PathLike[str], name: str, topic: str,
                 synchronous: str = "NORMAL") -> None:
        self.db = SqliteFile(state_dir, "publisher", name, synchronous)
        try:
            with self.db.transaction() as c:
                c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
                c.execute("CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY, "
                          "payload BLOB NOT NULL, state TEXT NOT NULL DEFAULT 'pending', "
                          "condition TEXT, description TEXT, at REAL)")
                if c.execute("SELECT value FROM meta WHERE key='topic'").fetchone() is None:
                    _set_meta(c, "schema", SCHEMA_VERSION)
                    _set_meta(c, "id", name)
                    _set_meta(c, "topic", topic)
                    _set_meta(c, "next_seq", 1)
                    _set_meta(c, "accepted_total", 0)
            stored_topic = self.db.meta("topic")
            if stored_topic != topic and self.pending_count() > 0:
                raise StoreError(
                    f"publisher {name!r} in this state directory still holds "
                    f"{self.pending_count()} message(s) for topic {stored_topic!r}, not "
                    f"{topic!r}; finish them with --topic {stored_topic}, or use another id "
                    "or state directory")
            if stored_topic != topic:
                with self.db.transaction() as c:
                    _set_meta(c, "topic", topic)
        except sqlite3.Error as err:
            self.db.close()
            raise StoreError(f"cannot use {str(self.db.path)!r}: {err}") from err
        except BaseException:
            self.db.close()
            raise

    def next_seq(self) -> int:
        with self.db.lock:
            row = self.db.conn.execute("SELECT max(seq) FROM outbox").fetchone()
        return max(int(self.db.meta("next_seq", 1)), (row[0] or 0) + 1)  # type: ignore[arg-type]

    def accepted_total(self) -> int:
        return int(self.db.meta("accepted_total", 0))  # type: ignore[arg-type]

    def pending_count(self) -> int:
        with self.db.lock:
            return self.db.conn.execute(
                "SELECT count(*) FROM outbox WHERE state='pending'").fetchone()[0]

    def pending(self) -> list[tuple[int, bytes]]:
        """Every message without an outcome, in sequence order."""
        with self.db.lock:
            return [(seq, bytes(payload)) for seq, payload in self.db.conn.execute(
                "SELECT seq, payload FROM outbox WHERE state='pending' ORDER BY seq")]

    def failures(self) -> list[StoredFailure]:
        with self.db.lock:
            return [StoredFailure(seq, cond or "", desc or "", at or 0.0)
                    for seq, cond, desc, at in self.db.conn.execute(
                        "SELECT seq, condition, description, at FROM outbox "
                        "WHERE state='failed' ORDER BY seq")]

    def clear_failures(self) -> int:
        with self.db.transaction() as c:
            return c.execute("DELETE FROM outbox WHERE state='failed'").rowcount

    def commit(
        self,
        inserts: Iterable[tuple[int, bytes]] = (),
        accepted: Iterable[int] = (),
        failed: Iterable[tuple[int, str, str]] = (),
        next_seq: int | None = None,
    ) -> None:
        """One group commit: new messages, accepted ones (deleted and counted), failed ones."""
        accepted = list(accepted)
        now = time.time()
        with self.db.transaction() as c:
            c.executemany("INSERT OR REPLACE INTO outbox(seq, payload) VALUES(?, ?)", inserts)
            if accepted:
                c.executemany("DELETE FROM outbox WHERE seq=?", [(s,) for s in accepted])
                c.execute("UPDATE meta SET value=value+? WHERE key='accepted_total'",
                          (len(accepted),))
            c.executemany("UPDATE outbox SET state='failed', condition=?, description=?, at=? "
                          "WHERE seq=?", [(cond, desc, now, s) for s, cond, desc in failed])
            if next_seq is not None:
                c.execute("UPDATE meta SET value=max(value, ?) WHERE key='next_seq'",
                          (next_seq,))

    def close(self) -> None:
        self.db.close()


class SubscriberStore:
    """A subscriber's processed deliveries (tag -> outcome, time), its attach generation and
    how many deliveries the application accepted in all (``accepted_total``)."""

    def __init__(self, state_dir: str | os.PathLike[str], name: str, topic_filter: str,
                 synchronous: str = "NORMAL") -> None:
        self.db = SqliteFile(state_dir, "subscriber", name, synchronous)
        try:
            with self.db.transaction() as c:
                c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
                c.execute("CREATE TABLE IF NOT EXISTS processed (tag TEXT PRIMARY KEY, "
                          "outcome TEXT NOT NULL, at REAL NOT NULL)")
                c.execute("CREATE INDEX IF NOT EXISTS processed_at ON processed(at)")
                if c.execute("SELECT value FROM meta WHERE key='gen'").fetchone() is None:
                    _set_meta(c, "schema", SCHEMA_VERSION)
                    _set_meta(c, "id", name)
                    _set_meta(c, "gen", 0)
                    _set_meta(c, "accepted_total", 0)
                _set_meta(c, "filter", topic_filter)
        except sqlite3.Error as err:
            self.db.close()
            raise StoreError(f"cannot use {str(self.db.path)!r}: {err}") from err

    def next_gen(self) -> int:
        """Increment and persist the attach generation; return the new value."""
        with self.db.transaction() as c:
            c.execute("UPDATE meta SET value=value+1 WHERE key='gen'")
            return int(c.execute("SELECT value FROM meta WHERE key='gen'").fetchone()[0])

    def accepted_total(self) -> int:
        return int(self.db.meta("accepted_total", 0))  # type: ignore[arg-type]

    def outcome_of(self, tag: str) -> str | None:
        """'accepted' or 'rejected' when the application already answered this tag. For one
        thread other than the writer's (it uses the reader connection)."""
        row = self.db.reader().execute("SELECT outcome FROM processed WHERE tag=?",
                                       (tag,)).fetchone()
        return None if row is None else row[0]

    def record(self, tag: str, outcome: str) -> bool:
        """Commit the application's answer for `tag`; False if it was recorded already."""
        return self.record_many([tag], outcome)[0]

    def record_many(self, tags: Sequence[str], outcome: str) -> list[bool]:
        """Commit the same answer for every tag in one transaction (a group commit); for each,
        whether it was new (False: recorded already, or earlier in `tags`)."""
        now = time.time()
        with self.db.transaction() as c:
            new = [bool(c.execute("INSERT OR IGNORE INTO processed(tag, outcome, at) "
                                  "VALUES(?, ?, ?)", (tag, outcome, now)).rowcount)
                   for tag in tags]
            if outcome == "accepted" and any(new):
                c.execute("UPDATE meta SET value=value+? WHERE key='accepted_total'",
                          (sum(new),))
        return new

    def recent_accepted(self, within: float, limit: int) -> list[tuple[str, float]]:
        """Tags accepted in the last `within` seconds, newest last, at most `limit`."""
        with self.db.lock:
            rows = self.db.conn.execute(
                "SELECT tag, at FROM processed WHERE outcome='accepted' AND at>=? "
                "ORDER BY at DESC LIMIT ?", (time.time() - within, limit)).fetchall()
        return [(t, a) for t, a in reversed(rows)]

    def prune(self, keep_seconds: float) -> int:
        """Forget answers older than `keep_seconds`: a duplicate of those is not caught."""
        with self.db.transaction() as c:
            return c.execute("DELETE FROM processed WHERE at<?",
                             (time.time() - keep_seconds,)).rowcount

    def close(self) -> None:
        self.db.close()

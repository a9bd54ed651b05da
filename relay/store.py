"""The relay's durable store: what a relay holds for the clients that designate it (seed 000).

One SQLite file per relay (``relay-<id>.sqlite`` in the store directory), WAL journal. Why
SQLite: it ships with Python (no new dependency), the SDK's own stores already use it
(`amqp_edge.client_store`, whose `SqliteFile` this reuses: lock file, WAL, error messages), a
commit is one `fsync` of the WAL in ``synchronous=FULL``, and many small tables with
secondary keys (per client, in order, by delivery id) are what it does well. LMDB would be
faster per write but needs a package and gives us no SQL for the status views.

What it holds, per client (see docs/relay.md for who holds which copy at each step):

- the **registration**: how long the client stays registered while away (the MQTT Session
  Expiry Interval, or the relay's per-client setting) and, while it is away, when that ends;
- its **subscriptions**, which the relay keeps in the mesh as a durable subscriber;
- **inbound copies**: messages the mesh delivered for the client, in arrival order, each
  ``stored`` (not yet handed over), ``handed`` (given to the client, its answer not known) or
  ``answered`` (the client accepted or rejected it; the answer is not yet passed on to the
  mesh). A row goes when its answer has been passed on; a delivery id seen again after that
  (a resend after a failover) is recognised from ``done`` and not stored twice;
- its **outbox**: messages it handed to the relay to publish, until their final outcome;
- **outcomes** that arrived while it was away, until it has taken them;
- **reply names**: a surrogate address the relay listens on for each reply-to the client
  used, and the original name to restore (reply-name substitution).

Durability: with ``synchronous="FULL"`` (the default here: "durably stored" is what an MQTT
publisher's PUBACK is told) a method returns after the commit is on disk; ``NORMAL`` survives
the process dying but may lose the last commits to a power cut. `batch()` groups many
changes into one commit, which is what makes the store cheap per message (benchmarks/
relay_store.py measures both).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from amqp_edge.client_store import SqliteFile, StoreError

__all__ = ["Inbound", "Outcome", "Registration", "RelayStore", "StoreError"]

SCHEMA_VERSION = 1
STORED, HANDED, ANSWERED = "stored", "handed", "answered"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE IF NOT EXISTS clients (client TEXT PRIMARY KEY, expiry REAL NOT NULL, "
    "away_until REAL)",
    "CREATE TABLE IF NOT EXISTS subscriptions (client TEXT NOT NULL, filter TEXT NOT NULL, "
    "qos INTEGER NOT NULL, PRIMARY KEY (client, filter))",
    # seq: arrival order, the order copies are handed over in (AUTOINCREMENT: never reused,
    # so a client's order survives deletes and restarts).
    "CREATE TABLE IF NOT EXISTS inbound (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "client TEXT NOT NULL, delivery_id TEXT NOT NULL, address TEXT NOT NULL, "
    "payload BLOB NOT NULL, state TEXT NOT NULL, answer TEXT, origin TEXT NOT NULL DEFAULT '', "
    "UNIQUE (client, delivery_id))",
    "CREATE INDEX IF NOT EXISTS inbound_by_client ON inbound (client, seq)",
    "CREATE INDEX IF NOT EXISTS inbound_by_id ON inbound (delivery_id)",
    "CREATE TABLE IF NOT EXISTS done (client TEXT NOT NULL, delivery_id TEXT NOT NULL, "
    "at REAL NOT NULL, PRIMARY KEY (client, delivery_id))",
    "CREATE TABLE IF NOT EXISTS outbox (client TEXT NOT NULL, tag BLOB NOT NULL, "
    "address TEXT NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (client, tag))",
    "CREATE TABLE IF NOT EXISTS outcomes (client TEXT NOT NULL, tag BLOB NOT NULL, "
    "state TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (client, tag))",
    "CREATE TABLE IF NOT EXISTS replies (surrogate TEXT PRIMARY KEY, client TEXT NOT NULL, "
    "original TEXT NOT NULL, UNIQUE (client, original))",
    # Durable AMQP subscriber links (a container id and link name, like an MQTT session's
    # client id), kept so that a restarted router or relay still owes them: `durable_links`.
    "CREATE TABLE IF NOT EXISTS durable_links (key TEXT PRIMARY KEY, container TEXT NOT NULL, "
    "name TEXT NOT NULL, filter TEXT NOT NULL, presettled INTEGER NOT NULL, "
    "timeout REAL NOT NULL, away_until REAL)",
)


@dataclass(frozen=True, slots=True)
class Registration:
    client: str
    expiry: float  # seconds it stays registered while away
    away_until: float | None  # None while connected


@dataclass(frozen=True, slots=True)
class DurableLink:
    """A durable AMQP subscriber link: who, what it subscribes, how long it is kept away."""

    container: str
    name: str
    filter: str
    presettled: bool
    timeout: float  # seconds it stays subscribed while away
    away_until: float | None = None  # wall-clock end of its registration; None while attached


@dataclass(frozen=True, slots=True)
class Inbound:
    """One copy held for a client."""

    delivery_id: str
    address: str
    payload: bytes
    state: str = STORED
    answer: str | None = None
    seq: int = 0
    origin: str = ""  # the router that answers its publisher, if not the store's own


@dataclass(frozen=True, slots=True)
class Outcome:
    """A final outcome of one of the client's own messages, kept until the client takes it."""

    tag: bytes
    state: str  # accepted, rejected, ...
    detail: str  # who failed and why, for the client's report


class RelayStore:
    """A relay's durable state. Every method is one transaction unless called inside
    `batch()`, which makes the whole block one."""

    def __init__(self, directory: str | os.PathLike[str], relay_id: str,
                 synchronous: str = "FULL") -> None:
        self.db = SqliteFile(directory, "relay", relay_id, synchronous, "--store")
        self._depth = 0
        try:
            with self._tx() as c:
                for statement in _SCHEMA:
                    c.execute(statement)
                c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('schema', ?)",
                          (SCHEMA_VERSION,))
            self._check_schema()
        except sqlite3.Error as err:
            self.db.close()
            raise StoreError(f"cannot use {str(self.db.path)!r} as a relay store: {err}; "
                             "check the directory's permissions and free space") from err
        except BaseException:
            self.db.close()
            raise

    def _check_schema(self) -> None:
        found = self.db.meta("schema")
        if found != SCHEMA_VERSION:
            raise StoreError(f"{str(self.db.path)!r} holds relay store version {found}, this "
                             f"exactmesh reads version {SCHEMA_VERSION}; run the exactmesh "
                             "that wrote it until its clients have drained, or use another "
                             "--store directory")

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ transactions

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One commit for everything inside: the way to store many copies cheaply."""
        with self._tx():
            yield

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.db.lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.db.conn
                finally:
                    self._depth -= 1
                return
            self._depth = 1
            try:
                with self.db.transaction() as conn:
                    yield conn
            finally:
                self._depth = 0

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self.db.lock:
            return self.db.conn.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ registrations

    def register(self, client: str, expiry: float) -> bool:
        """The client connected and asked to stay registered `expiry` seconds while away.
        Returns whether the relay already held state for it (MQTT's "session present")."""
        with self._tx() as c:
            known = c.execute("SELECT 1 FROM clients WHERE client=?", (client,)).fetchone()
            c.execute("INSERT INTO clients(client, expiry, away_until) VALUES(?, ?, NULL) "
                      "ON CONFLICT(client) DO UPDATE SET expiry=excluded.expiry, "
                      "away_until=NULL", (client, expiry))
        return known is not None

    def went_away(self, client: str, now: float) -> float | None:
        """The client disconnected at `now` (wall-clock seconds): when its registration ends,
        or None if it holds none."""
        with self._tx() as c:
            row = c.execute("SELECT expiry FROM clients WHERE client=?", (client,)).fetchone()
            if row is None:
                return None
            until = now + row[0]
            c.execute("UPDATE clients SET away_until=? WHERE client=?", (until, client))
        return until

    def registrations(self) -> list[Registration]:
        return [Registration(*r) for r in
                self._rows("SELECT client, expiry, away_until FROM clients ORDER BY client")]

    def expired(self, now: float) -> list[str]:
        """Clients away past their registration: the caller fails what is owed to them by
        name, then calls `drop`."""
        return [r[0] for r in self._rows(
            "SELECT client FROM clients WHERE away_until IS NOT NULL AND away_until <= ? "
            "ORDER BY away_until", (now,))]

    def drop(self, client: str) -> list[str]:
        """End a client's registration; returns the delivery ids it was still owed (each
        must be failed by name to its publisher)."""
        with self._tx() as c:
            owed = [r[0] for r in c.execute(
                "SELECT delivery_id FROM inbound WHERE client=? AND state!=? ORDER BY seq",
                (client, ANSWERED))]
            for table in ("clients", "subscriptions", "done", "outbox", "outcomes", "replies"):
                c.execute(f"DELETE FROM {table} WHERE client=?", (client,))
            c.execute("DELETE FROM inbound WHERE client=? AND state!=?", (client, ANSWERED))
        return owed

    # ------------------------------------------------------------------ durable AMQP links

    def keep_link(self, key: str, link: DurableLink) -> None:
        """A durable subscriber link attached (again): keep it, present."""
        with self._tx() as c:
            c.execute("INSERT OR REPLACE INTO durable_links VALUES(?, ?, ?, ?, ?, ?, NULL)",
                      (key, link.container, link.name, link.filter, int(link.presettled),
                       link.timeout))

    def link_away(self, key: str, now: float) -> None:
        """Its link went without closing at `now` (wall clock): kept for its timeout."""
        with self._tx() as c:
            c.execute("UPDATE durable_links SET away_until=?+timeout WHERE key=?", (now, key))

    def drop_link(self, key: str) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM durable_links WHERE key=?", (key,))

    def durable_links(self) -> list[DurableLink]:
        return [DurableLink(c, n, f, bool(p), t, a) for c, n, f, p, t, a in self._rows(
            "SELECT container, name, filter, presettled, timeout, away_until "
            "FROM durable_links ORDER BY key")]

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, client: str, topic_filter: str, qos: int = 1) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO subscriptions(client, filter, qos) VALUES(?, ?, ?) "
                      "ON CONFLICT(client, filter) DO UPDATE SET qos=excluded.qos",
                      (client, topic_filter, qos))

    def unsubscribe(self, client: str, topic_filter: str) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM subscriptions WHERE client=? AND filter=?",
                      (client, topic_filter))

    def subscriptions(self, client: str) -> dict[str, int]:
        return dict(self._rows("SELECT filter, qos FROM subscriptions WHERE client=? "
                               "ORDER BY filter", (client,)))

    # ------------------------------------------------------------------ inbound copies

    def hold(self, client: str, copies: Iterable[Inbound]) -> list[bool]:
        """Store copies the mesh delivered for `client`, in order. Returns, per copy, whether
        it is new: a delivery id already held, or answered and passed on, is not stored again
        (the mesh may resend after a failover), and its old answer stands."""
        fresh = []
        with self._tx() as c:
            for m in copies:
                if c.execute("SELECT 1 FROM done WHERE client=? AND delivery_id=?",
                             (client, m.delivery_id)).fetchone():
                    fresh.append(False)
                    continue
                cur = c.execute(
                    "INSERT OR IGNORE INTO inbound(client, delivery_id, address, payload, "
                    "state, origin) VALUES(?, ?, ?, ?, ?, ?)",
                    (client, m.delivery_id, m.address, m.payload, STORED, m.origin))
                fresh.append(cur.rowcount == 1)
        return fresh

    def waiting(self, client: str, limit: int = 1000, after_seq: int = 0) -> list[Inbound]:
        """Copies to hand over, in arrival order: stored ones and handed ones whose answer is
        not known (a client that reconnects gets those again; it recognises them itself)."""
        return [Inbound(d, a, p, s, None, q) for q, d, a, p, s in self._rows(
            "SELECT seq, delivery_id, address, payload, state FROM inbound WHERE client=? "
            "AND state IN (?, ?) AND seq>? ORDER BY seq LIMIT ?",
            (client, STORED, HANDED, after_seq, limit))]

    def handed(self, client: str, delivery_ids: Iterable[str]) -> None:
        with self._tx() as c:
            c.executemany("UPDATE inbound SET state=? WHERE client=? AND delivery_id=? AND "
                          "state=?", [(HANDED, client, d, STORED) for d in delivery_ids])

    def answered(self, client: str, delivery_id: str, answer: str) -> bool:
        """The client accepted (or rejected) a copy. Kept until `passed_on`: if the relay
        dies before the mesh heard it, the answer is passed on after the restart. Returns
        False for a copy the relay does not hold (already answered: a duplicate answer)."""
        with self._tx() as c:
            cur = c.execute("UPDATE inbound SET state=?, answer=? WHERE client=? AND "
                            "delivery_id=? AND state!=?",
                            (ANSWERED, answer, client, delivery_id, ANSWERED))
        return cur.rowcount == 1

    def unpassed(self, client: str | None = None) -> list[tuple[str, str, str]]:
        """Answers not yet passed on to the mesh, as (client, delivery_id, answer)."""
        sql = "SELECT client, delivery_id, answer FROM inbound WHERE state=?"
        args: tuple[Any, ...] = (ANSWERED,)
        if client is not None:
            sql, args = sql + " AND client=?", (ANSWERED, client)
        return [tuple(r) for r in self._rows(sql + " ORDER BY seq", args)]

    def passed_on(self, client: str, delivery_id: str, now: float) -> None:
        """The mesh has the client's answer: the copy goes, its id is remembered in `done`
        (until `forget_done`) so that a resend of it is not held again."""
        with self._tx() as c:
            c.execute("DELETE FROM inbound WHERE client=? AND delivery_id=?",
                      (client, delivery_id))
            c.execute("INSERT OR REPLACE INTO done(client, delivery_id, at) VALUES(?, ?, ?)",
                      (client, delivery_id, now))

    def forget_done(self, before: float) -> int:
        """Forget answered ids older than `before`: once the mesh can no longer resend them
        (its records and tombstones are gone), remembering them buys nothing."""
        with self._tx() as c:
            return c.execute("DELETE FROM done WHERE at<?", (before,)).rowcount

    def payload(self, delivery_id: str) -> bytes | None:
        """The body of a held copy, whichever client holds it (the same message)."""
        rows = self._rows("SELECT payload FROM inbound WHERE delivery_id=? LIMIT 1",
                          (delivery_id,))
        return bytes(rows[0][0]) if rows else None

    def restorable(self) -> list[tuple[str, str, str, str]]:
        """Every copy not yet answered, in arrival order, as (client, delivery_id, address,
        origin): what a restarted router owes its subscribers again."""
        return [tuple(r) for r in self._rows(
            "SELECT client, delivery_id, address, origin FROM inbound WHERE state!=? "
            "ORDER BY seq", (ANSWERED,))]

    def drop_copy(self, client: str, delivery_id: str) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM inbound WHERE client=? AND delivery_id=?",
                      (client, delivery_id))

    def drop_copies_of(self, client: str) -> int:
        """Drop every copy held for `client` (nobody is owed them any more)."""
        with self._tx() as c:
            return c.execute("DELETE FROM inbound WHERE client=?", (client,)).rowcount

    def forget_copies(self, delivery_ids: Iterable[str]) -> None:
        """Drop every client's copy of these deliveries: a router with a relay store holds
        copies for its own subscribers, and its engine says when a message is done."""
        with self._tx() as c:
            c.executemany("DELETE FROM inbound WHERE delivery_id=?",
                          [(d,) for d in delivery_ids])

    def held(self, client: str | None = None) -> tuple[int, int]:
        """(copies, payload bytes) held, for one client or the whole relay: what limits and
        metrics read."""
        sql = "SELECT count(*), coalesce(sum(length(payload)), 0) FROM inbound"
        args: tuple[Any, ...] = ()
        if client is not None:
            sql, args = sql + " WHERE client=?", (client,)
        n, size = self._rows(sql, args)[0]
        return int(n), int(size)

    # ------------------------------------------------------------------ outbox, outcomes

    def outbox_put(self, client: str, tag: bytes, address: str, payload: bytes) -> bool:
        """A message the client handed over to publish; False if that tag is already held
        (the client resent it on reconnect: it is the same message)."""
        with self._tx() as c:
            cur = c.execute("INSERT OR IGNORE INTO outbox(client, tag, address, payload) "
                            "VALUES(?, ?, ?, ?)", (client, tag, address, payload))
        return cur.rowcount == 1

    def outbox(self, client: str) -> list[tuple[bytes, str, bytes]]:
        return [tuple(r) for r in self._rows(
            "SELECT tag, address, payload FROM outbox WHERE client=? ORDER BY rowid",
            (client,))]

    def outcome(self, client: str, tag: bytes, state: str, detail: str = "") -> None:
        """The mesh's final outcome for one of the client's messages: the message leaves the
        outbox and the outcome waits for the client."""
        with self._tx() as c:
            c.execute("DELETE FROM outbox WHERE client=? AND tag=?", (client, tag))
            c.execute("INSERT OR REPLACE INTO outcomes(client, tag, state, detail) "
                      "VALUES(?, ?, ?, ?)", (client, tag, state, detail))

    def outcomes(self, client: str) -> list[Outcome]:
        return [Outcome(*r) for r in self._rows(
            "SELECT tag, state, detail FROM outcomes WHERE client=? ORDER BY rowid",
            (client,))]

    def outcomes_taken(self, client: str, tags: Iterable[bytes]) -> None:
        with self._tx() as c:
            c.executemany("DELETE FROM outcomes WHERE client=? AND tag=?",
                          [(client, t) for t in tags])

    # ------------------------------------------------------------------ reply names

    def surrogate(self, client: str, original: str, prefix: str = "relay") -> str:
        """The address replies to `original` are sent to instead: one the relay holds
        durably for the client, the same for the same name every time."""
        with self._tx() as c:
            row = c.execute("SELECT surrogate FROM replies WHERE client=? AND original=?",
                            (client, original)).fetchone()
            if row is not None:
                return str(row[0])
            name = f"{prefix}/reply/{uuid.uuid4().hex}"
            c.execute("INSERT INTO replies(surrogate, client, original) VALUES(?, ?, ?)",
                      (name, client, original))
        return name

    def original(self, surrogate: str) -> tuple[str, str] | None:
        """(client, original reply name) for a surrogate address, or None."""
        rows = self._rows("SELECT client, original FROM replies WHERE surrogate=?",
                          (surrogate,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

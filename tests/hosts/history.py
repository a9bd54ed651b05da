"""The history of a run, and the checker that judges it (Jepsen-style: from what clients saw).

`History.record(event)` takes the agents' JSON events (tests/hosts/clients.py) and the
nemesis' faults; everything is stamped with `time.monotonic()`, one clock for every
namespace. A message is `Key(pub, inc, seq)`; a subscriber is named by its SDK id (the
router calls it `ID/sub/ID@ROUTER`).

`check(history)` computes, for subscribers that are all owed every message (each subscribed
to every publisher's topic before the first publish, durable, never closed):

- lost: (message, subscriber) pairs the subscriber was owed and never processed. Owed: the
  publisher was told `accepted`, or a failure named it among `succeeded`, or there was no
  outcome at all;
- accepted_not_delivered: the lost pairs whose publisher was told `accepted`;
- duplicated: messages a subscriber's application was shown twice (processed twice), split
  by whether the second copy came with the same delivery tag (the SDK's filter missed it) or
  another; the copies the filter caught (`duplicates_suppressed`) are `raw_duplicates`;
- unexpected: messages received that no publisher sent;
- out_of_order: per subscriber and publisher run, first receipts whose sequence number is
  below one received before; `out_of_order_after_move` counts apart those whose message was
  in flight when its publisher failed over to another router, which docs/guarantees.md does
  not promise to order;
- failed_delivered_not_in_doubt: a subscriber processed a message whose failure named it
  failed for certain (allowed only in `in_doubt`: `failed_delivered_in_doubt` counts those);
- no_outcome: messages their publisher never got an outcome for;
- recovery: per fault, from its heal to the moment every subscriber had processed a message
  published after the heal.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple


class Key(NamedTuple):
    pub: str
    inc: int
    seq: int

    def __str__(self) -> str:
        return f"{self.pub}.{self.inc}.{self.seq}"


@dataclass
class Publish:
    key: Key
    at: float | None = None  # when send() was called
    outcome: str | None = None  # "ok", "fail" or None
    outcome_at: float | None = None
    cond: str | None = None
    failed: list[str] = field(default_factory=list)  # subscriber ids
    in_doubt: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    desc: str | None = None


@dataclass
class Receipt:
    sub: str
    key: Key | None  # None: a body that is not PUB.INC.SEQ
    at: float
    redelivered: bool
    delivery_count: int
    tag: str = ""


@dataclass
class Fault:
    kind: str
    targets: list[str]
    start: float
    heal: float | None = None
    healed: float | None = None  # when the heal was done (a restarted router is ready)
    settled: float | None = None  # when every message published before the heal had an outcome
    detail: str = ""


def sub_id(label: str) -> str:
    """`s1/sub/s1@B` (how routers name an SDK subscriber) -> `s1`."""
    return label.split("@", 1)[0].split("/", 1)[0]


class History:
    """Thread-safe: the agents' reader threads and the nemesis record into it."""

    def __init__(self, subscribers: Iterable[str] = ()) -> None:
        self.subscribers: list[str] = list(subscribers)
        self.publishes: dict[Key, Publish] = {}
        self.receipts: dict[str, list[Receipt]] = defaultdict(list)
        self.faults: list[Fault] = []
        self.stats: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.errors: list[dict[str, Any]] = []
        self.advisories: list[dict[str, Any]] = []
        # Publisher runs (pub, inc) killed without their outbox: no outcome will come.
        self.gone: set[tuple[str, int]] = set()
        self.started = time.monotonic()
        self.ended: float | None = None
        self._cond = threading.Condition()

    # ------------------------------------------------------------------ recording

    def record(self, event: dict[str, Any]) -> None:
        kind = event.get("e")
        with self._cond:
            if kind == "invoke":
                p = self._publish(event)
                p.at = event.get("at", event["t"])
            elif kind == "ok":
                p = self._publish(event)
                p.outcome, p.outcome_at = "ok", event["t"]
            elif kind == "fail":
                p = self._publish(event)
                p.outcome, p.outcome_at = "fail", event["t"]
                p.cond, p.desc = event.get("cond"), event.get("desc")
                p.failed = [sub_id(n) for n in event.get("failed", [])]
                p.in_doubt = [sub_id(n) for n in event.get("in_doubt", [])]
                p.succeeded = [sub_id(n) for n in event.get("succeeded", [])]
                p.pending = [sub_id(n) for n in event.get("pending", [])]
            elif kind == "recv":
                key = (Key(event["pub"], int(event["inc"]), int(event["seq"]))
                       if event.get("pub") else None)
                self.receipts[event["sub"]].append(Receipt(
                    event["sub"], key, event["t"], bool(event.get("red")),
                    int(event.get("dc") or 0), str(event.get("tag") or "")))
            elif kind == "stats":
                self.stats[event["who"]].append(event)
            elif kind == "error":
                self.errors.append(event)
            elif kind == "adv":
                self.advisories.append(event)
            self._cond.notify_all()

    def _publish(self, event: dict[str, Any]) -> Publish:
        key = Key(event["pub"], int(event["inc"]), int(event["seq"]))
        p = self.publishes.get(key)
        if p is None:
            p = self.publishes[key] = Publish(key)
        return p

    def forget_run(self, pub: str, inc: int) -> None:
        """Publisher run (pub, inc) is gone with its outbox: wait for none of its outcomes."""
        with self._cond:
            self.gone.add((pub, inc))
            self._cond.notify_all()

    def add_fault(self, fault: Fault) -> Fault:
        with self._cond:
            self.faults.append(fault)
            self._cond.notify_all()
        return fault

    # ------------------------------------------------------------------ waiting

    def wait(self, predicate: Callable[[History], bool], timeout: float, what: str) -> bool:
        """Wait (on the recording condition) until `predicate(self)`; False after `timeout`
        seconds. The predicate runs with the history's lock held."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def every_sub_got_one_published_after(self, t: float) -> bool:
        """Whether every subscriber processed a message published at or after `t`."""
        return all(self.first_after(sub, t) is not None for sub in self.subscribers)

    def recovery(self, heal: float) -> float | None:
        """Seconds from `heal` until every subscriber had processed a message published
        after it (None: not yet)."""
        with self._cond:
            got = [self.first_after(sub, heal) for sub in self.subscribers]
        return None if any(t is None for t in got) else max(got) - heal  # type: ignore

    def every_sub_got_from(self, pubs: Iterable[str]) -> bool:
        """Whether every subscriber processed a message of each of `pubs`."""
        wanted = set(pubs)
        return all(wanted <= {r.key.pub for r in self.receipts.get(sub, []) if r.key}
                   for sub in self.subscribers)

    def first_after(self, sub: str, t: float) -> float | None:
        """When `sub` first processed a message published at or after `t` (None: not yet).
        Receipts are in arrival order: only the tail from `t` on is read."""
        receipts = self.receipts.get(sub, [])
        i = len(receipts)
        while i > 0 and receipts[i - 1].at >= t:
            i -= 1
        for r in receipts[i:]:
            p = self.publishes.get(r.key) if r.key is not None else None
            if p is not None and p.at is not None and p.at >= t:
                return r.at
        return None

    def owed_all_processed(self) -> bool:
        """Whether every subscriber processed everything it is owed so far (the drain)."""
        processed = {s: {r.key for r in rs} for s, rs in self.receipts.items()}
        for p in self.publishes.values():
            for sub in owed_to(p, self.subscribers):
                if p.key not in processed.get(sub, set()):
                    return False
        return True

    def outcomes_before(self, t: float) -> bool:
        """Whether every message published before `t` by a publisher still running has its
        outcome (the publishers in `self.gone` are not waited for)."""
        return all(p.outcome is not None for p in self.publishes.values()
                   if p.at is not None and p.at < t and (p.key.pub, p.key.inc) not in self.gone)

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            return {
                "subscribers": self.subscribers,
                "publishes": [{**asdict(p), "key": str(p.key)} for p in
                              sorted(self.publishes.values(), key=lambda p: p.key)],
                "receipts": {s: [[str(r.key), round(r.at - self.started, 4), r.redelivered,
                                  r.delivery_count, r.tag] for r in rs]
                             for s, rs in self.receipts.items()},
                "faults": [asdict(f) for f in self.faults],
                "stats": dict(self.stats), "errors": self.errors,
                "advisories": self.advisories, "started": self.started,
            }


def owed_to(p: Publish, subscribers: Iterable[str]) -> list[str]:
    if p.outcome == "fail":
        return [s for s in subscribers if s in p.succeeded]
    return list(subscribers)  # accepted, or no outcome


# ====================================================================== the checker

VIOLATIONS = ("lost", "accepted_not_delivered", "duplicated", "unexpected", "out_of_order",
              "failed_delivered_not_in_doubt", "no_outcome", "unrecovered_faults",
              "client_errors")


@dataclass
class Report:
    scenario: str
    seed: int
    replay: str
    counts: dict[str, int]
    by_kind: dict[str, dict[str, Any]]
    faults: list[dict[str, Any]]
    examples: dict[str, list[str]]
    duration: float
    ok: bool = False
    json_path: str | None = None

    def summary(self) -> str:
        c = self.counts
        lines = [
            f"{self.scenario} seed {self.seed}: {'PASS' if self.ok else 'FAIL'} "
            f"({self.duration:.1f} s, {len(self.faults)} faults)",
            f"  published {c['published']} (accepted {c['accepted']}, failed {c['failed']}, "
            f"no outcome {c['no_outcome']}); processed {c['processed']} by "
            f"{c['subscribers']} subscribers",
            f"  lost {c['lost']}, accepted-not-delivered {c['accepted_not_delivered']}, "
            f"duplicated {c['duplicated']} (same tag {c['duplicated_same_tag']}, another tag "
            f"{c['duplicated_new_tag']}; raw, caught by the SDK: {c['raw_duplicates']}; "
            f"redeliveries shown: {c['redelivered_shown']}), unexpected {c['unexpected']}, "
            f"out of order {c['out_of_order']} (after a publisher moved, not promised: "
            f"{c['out_of_order_after_move']})",
            f"  failed but delivered: in doubt {c['failed_delivered_in_doubt']}, not in doubt "
            f"{c['failed_delivered_not_in_doubt']}; unrecovered faults "
            f"{c['unrecovered_faults']}; client errors {c['client_errors']}",
            "  fault kind         cycles  published  received  failed  lost  dup  "
            "recovery median / worst (s)",
        ]
        for kind, row in self.by_kind.items():
            rec = row["recovery"]
            med = "-" if rec["median"] is None else f"{rec['median']:.2f}"
            worst = "-" if rec["worst"] is None else f"{rec['worst']:.2f}"
            lines.append(f"  {kind:<17} {row['cycles']:>6} {row['published']:>10} "
                         f"{row['received']:>9} {row['failed']:>7} {row['lost']:>5} "
                         f"{row['duplicated']:>4}  {med} / {worst}")
        for name, items in self.examples.items():
            if items:
                lines.append(f"  e.g. {name}: {', '.join(items[:5])}")
        if not self.ok:
            lines.append(f"  replay: {self.replay}")
        if self.json_path:
            lines.append(f"  details: {self.json_path}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(history: History, scenario: str, seed: int, replay: str) -> Report:
    with history._cond:
        return _check(history, scenario, seed, replay)


def _check(h: History, scenario: str, seed: int, replay: str) -> Report:
    subs = h.subscribers
    examples: dict[str, list[str]] = defaultdict(list)
    counts: Counter[str] = Counter()
    processed: dict[str, set[Key]] = {}
    per_pair_dups: Counter[Key] = Counter()
    first_receipt_of: dict[tuple[str, Key], float] = {}
    for sub in subs:
        seen: set[Key] = set()
        tags: dict[Key, str] = {}
        last: dict[tuple[str, int], int] = {}
        for r in h.receipts.get(sub, []):
            counts["redelivered_shown"] += r.redelivered
            if r.key is None or r.key not in h.publishes:
                counts["unexpected"] += 1
                examples["unexpected"].append(f"{r.key}@{sub}")
                continue
            if r.key in seen:
                counts["duplicated"] += 1
                per_pair_dups[r.key] += 1
                same = r.tag == tags[r.key]
                counts["duplicated_same_tag" if same else "duplicated_new_tag"] += 1
                examples["duplicated"].append(
                    f"{r.key}@{sub} ({'same' if same else 'another'} delivery tag)")
                continue
            seen.add(r.key)
            tags[r.key] = r.tag
            first_receipt_of[(sub, r.key)] = r.at
            stream = (r.key.pub, r.key.inc)
            if r.key.seq < last.get(stream, 0):
                if moved(h, r.key):
                    counts["out_of_order_after_move"] += 1
                    examples["out_of_order_after_move"].append(
                        f"{r.key}@{sub} after seq {last[stream]}")
                else:
                    counts["out_of_order"] += 1
                    examples["out_of_order"].append(f"{r.key}@{sub} after seq {last[stream]}")
            last[stream] = max(last.get(stream, 0), r.key.seq)
        processed[sub] = seen
        counts["processed"] += len(seen)
    lost_by_key: Counter[Key] = Counter()
    for p in h.publishes.values():
        counts["published"] += 1
        if p.outcome == "ok":
            counts["accepted"] += 1
        elif p.outcome == "fail":
            counts["failed"] += 1
        else:
            counts["no_outcome"] += 1
            examples["no_outcome"].append(str(p.key))
        for sub in owed_to(p, subs):
            if p.key not in processed[sub]:
                counts["lost"] += 1
                lost_by_key[p.key] += 1
                examples["lost"].append(f"{p.key}@{sub}")
                if p.outcome == "ok":
                    counts["accepted_not_delivered"] += 1
                    examples["accepted_not_delivered"].append(f"{p.key}@{sub}")
        if p.outcome == "fail":
            for sub in p.failed:
                if sub in processed and p.key in processed[sub]:
                    if sub in p.in_doubt:
                        counts["failed_delivered_in_doubt"] += 1
                    else:
                        counts["failed_delivered_not_in_doubt"] += 1
                        examples["failed_delivered_not_in_doubt"].append(f"{p.key}@{sub}")
    counts["raw_duplicates"] = sum(
        int(s.get("duplicates_suppressed", 0)) for sub in subs for s in h.stats.get(sub, []))
    counts["subscribers"] = len(subs)
    counts["client_errors"] = len(h.errors)
    for e in h.errors:
        examples["client_errors"].append(f"{e.get('who')}: {e.get('error')}"[:200])
    faults = _fault_rows(h)
    counts["unrecovered_faults"] = sum(f["recovery"] is None for f in faults)
    by_kind = _by_kind(h, faults, processed, lost_by_key, per_pair_dups)
    end = h.ended or time.monotonic()
    for name in VIOLATIONS:
        counts.setdefault(name, 0)
    for name in ("accepted", "failed", "processed", "duplicated", "redelivered_shown",
                 "out_of_order_after_move", "duplicated_same_tag", "duplicated_new_tag",
                 "failed_delivered_in_doubt", "raw_duplicates", "published"):
        counts.setdefault(name, 0)
    report = Report(scenario, seed, replay, dict(counts), by_kind, faults,
                    {k: v[:20] for k, v in examples.items()}, end - h.started)
    report.ok = all(counts[name] == 0 for name in VIOLATIONS)
    return report


def moves(h: History, pub: str) -> list[float]:
    """When publisher `pub` attached to another router than the one it was attached to
    before (its `connected` advisories)."""
    out, last = [], None
    for a in h.advisories:
        if a.get("who") == pub and a.get("kind") == "connected":
            if last is not None and a.get("url") != last:
                out.append(a["t"])
            last = a.get("url")
    return out


def moved(h: History, late: Key) -> bool:
    """Whether `late`, received after a message published after it, was in flight when its
    publisher moved to another router: published before the move, and its outcome after it,
    or a failure that left subscribers pending (its copies still travel to them: a part
    failed early, say one behind an unreachable relay). Its copies at the old router and the
    publisher's resends at the new one are then two publications, which docs/guarantees.md
    does not order against each other ("messages it published at its old router and at its
    new one are not ordered against each other while both are in flight")."""
    p = h.publishes.get(late)
    if p is None or p.at is None:
        return False
    done = None if p.pending else p.outcome_at
    return any(p.at < t and (done is None or done > t) for t in moves(h, late.pub))


def _fault_rows(h: History) -> list[dict[str, Any]]:
    rows = []
    for f in h.faults:
        heal = f.heal if f.heal is not None else f.start
        recovery = h.recovery(heal)
        rows.append({**asdict(f), "start": f.start - h.started, "heal": heal - h.started,
                     "healed": None if f.healed is None else f.healed - h.started,
                "settled": None if f.settled is None else f.settled - h.started,
                     "recovery": recovery})
    return rows


def _by_kind(h: History, faults: list[dict[str, Any]], processed: dict[str, set[Key]],
             lost_by_key: Counter[Key], dups: Counter[Key]) -> dict[str, dict[str, Any]]:
    """Messages published from a fault's start to the next fault's start count for its kind
    (those before the first fault for `none`)."""
    starts = sorted((f["start"] + h.started, f["kind"]) for f in faults)
    rows: dict[str, dict[str, Any]] = {}

    def row(kind: str) -> dict[str, Any]:
        return rows.setdefault(kind, {"cycles": 0, "published": 0, "received": 0, "failed": 0,
                                      "lost": 0, "duplicated": 0, "recoveries": []})

    row("none")
    for f in faults:
        r = row(f["kind"])
        r["cycles"] += 1
        r["recoveries"].append(f["recovery"])
    for p in h.publishes.values():
        kind = "none"
        for start, k in starts:
            if p.at is not None and p.at >= start:
                kind = k
        r = row(kind)
        r["published"] += 1
        r["failed"] += p.outcome == "fail"
        r["received"] += sum(p.key in processed[s] for s in h.subscribers)
        r["lost"] += lost_by_key[p.key]
        r["duplicated"] += dups[p.key]
    for r in rows.values():
        done = [x for x in r.pop("recoveries") if x is not None]
        r["recovery"] = {"median": statistics.median(done) if done else None,
                         "worst": max(done) if done else None}
    return rows


def write_json(report: Report, history: History, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    report.json_path = str(path)
    path.write_text(json.dumps({"report": report.to_dict(), "history": history.snapshot()},
                               indent=1, default=str))

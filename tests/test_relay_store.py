"""The relay's durable store (relay/store.py) on real SQLite files: what it promises to a relay
that stops at any moment, and to a mesh that may deliver the same copy twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay.store import HANDED, STORED, Inbound, RelayStore, StoreError

REPO = Path(__file__).resolve().parent.parent


def copies(*ids: str) -> list[Inbound]:
    return [Inbound(i, "t/x", f"body-{i}".encode()) for i in ids]


@pytest.fixture
def store(tmp_path: Path):
    s = RelayStore(tmp_path, "r1")
    yield s
    s.close()


def test_a_registration_says_whether_the_relay_held_state_for_the_client(store):
    assert store.register("dev1", 3600.0) is False  # MQTT: session present = 0
    assert store.register("dev1", 60.0) is True  # session present = 1, expiry updated
    assert store.went_away("dev1", 1000.0) == 1060.0
    assert store.expired(1059.9) == []
    assert store.expired(1060.0) == ["dev1"]
    assert store.went_away("nobody", 1000.0) is None


def test_copies_are_handed_over_in_arrival_order_across_a_reopen(tmp_path: Path):
    s = RelayStore(tmp_path, "r1")
    s.register("c", 60)
    assert s.hold("c", copies("m3", "m1", "m2")) == [True, True, True]
    s.close()
    s = RelayStore(tmp_path, "r1")
    assert [m.delivery_id for m in s.waiting("c")] == ["m3", "m1", "m2"]
    assert s.waiting("c")[0].payload == b"body-m3"
    s.close()


def test_the_same_delivery_is_held_once_even_after_it_was_answered(store):
    """The mesh resends a copy after a failover: held again it would reach the client twice."""
    store.register("c", 60)
    assert store.hold("c", copies("a", "b")) == [True, True]
    assert store.hold("c", copies("a")) == [False]  # still held
    store.handed("c", ["a"])
    assert store.answered("c", "a", "accepted") is True
    assert store.answered("c", "a", "accepted") is False  # a duplicate answer changes nothing
    store.passed_on("c", "a", now=100.0)
    assert store.hold("c", copies("a")) == [False]  # answered and gone: still recognised
    assert [m.delivery_id for m in store.waiting("c")] == ["b"]
    assert store.forget_done(before=101.0) == 1


def test_a_copy_handed_over_but_not_answered_is_handed_over_again(store):
    """The client may have lost it with its connection: its answer is all that counts."""
    store.register("c", 60)
    store.hold("c", copies("a", "b", "c"))
    store.handed("c", ["a", "b"])
    store.answered("c", "a", "accepted")
    waiting = store.waiting("c")
    assert [(m.delivery_id, m.state) for m in waiting] == [("b", HANDED), ("c", STORED)]
    assert store.unpassed() == [("c", "a", "accepted")]
    assert store.unpassed("c") == [("c", "a", "accepted")]
    assert store.unpassed("other") == []


def test_dropping_a_registration_names_what_it_was_owed_and_keeps_unpassed_answers(store):
    """Its copies fail by name at its publishers; an answer it gave still reaches the mesh."""
    store.register("c", 60)
    store.subscribe("c", "t/#", 1)
    store.hold("c", copies("a", "b", "c"))
    store.answered("c", "a", "accepted")
    assert store.drop("c") == ["b", "c"]
    assert store.registrations() == []
    assert store.subscriptions("c") == {}
    assert store.unpassed() == [("c", "a", "accepted")]


def test_subscriptions_outbox_and_outcomes(store):
    store.register("c", 60)
    store.subscribe("c", "a/#", 1)
    store.subscribe("c", "a/#", 2)
    store.subscribe("c", "b", 0)
    store.unsubscribe("c", "b")
    assert store.subscriptions("c") == {"a/#": 2}
    assert store.outbox_put("c", b"t1", "x", b"p1") is True
    assert store.outbox_put("c", b"t1", "x", b"p1") is False  # resent on reconnect: same one
    store.outbox_put("c", b"t2", "x", b"p2")
    store.outcome("c", b"t1", "rejected", "app-B/sub1@B: rejected (bad order)")
    assert store.outbox("c") == [(b"t2", "x", b"p2")]
    assert [(o.tag, o.state) for o in store.outcomes("c")] == [(b"t1", "rejected")]
    store.outcomes_taken("c", [b"t1"])
    assert store.outcomes("c") == []


def test_reply_names_get_one_surrogate_each(store):
    a = store.surrogate("c", "replies/c")
    assert store.surrogate("c", "replies/c") == a
    assert store.surrogate("d", "replies/c") != a  # another client's reply name
    assert store.original(a) == ("c", "replies/c")
    assert store.original("nope") is None


def test_held_counts_copies_and_bytes(store):
    store.register("c", 60)
    store.register("d", 60)
    store.hold("c", copies("a", "b"))
    store.hold("d", copies("x"))
    assert store.held("c") == (2, len(b"body-a") + len(b"body-b"))
    assert store.held() == (3, 3 * len(b"body-a"))


def test_a_batch_is_one_commit(store):
    store.register("c", 60)
    with pytest.raises(RuntimeError), store.batch():
        store.hold("c", copies("a"))
        store.hold("c", copies("b"))
        raise RuntimeError("the relay failed half-way")
    assert store.waiting("c") == []  # neither: all or nothing
    with store.batch():
        store.hold("c", copies("a"))
        store.hold("c", copies("b"))
    assert len(store.waiting("c")) == 2


def test_a_second_process_cannot_open_the_same_store(tmp_path: Path):
    s = RelayStore(tmp_path, "r1")
    try:
        code = ("import sys; from relay.store import RelayStore, StoreError\n"
                "try:\n    RelayStore(sys.argv[1], 'r1')\n"
                "except StoreError as e:\n    print(e); sys.exit(3)\n")
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, cwd=REPO, timeout=30)
        assert p.returncode == 3, p.stderr
        assert "another process is using relay id 'r1'" in p.stdout
    finally:
        s.close()


def test_an_unusable_directory_is_a_clear_error(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="not a directory"):
        RelayStore(blocker, "r1")


WRITER = """
import sys
from relay.store import Inbound, RelayStore
s = RelayStore(sys.argv[1], "r1")
s.register("c", 3600)
for i in range(100000):
    with s.batch():
        s.hold("c", [Inbound(f"m{i}", "t", b"x" * 100)])
        if i >= 3:
            s.answered("c", f"m{i - 3}", "accepted")
    print(i, flush=True)  # after the commit: the relay would now acknowledge m{i}
"""


def test_what_was_committed_survives_sigkill_and_nothing_else_changes(tmp_path: Path):
    """A writer is SIGKILLed mid-stream: every copy it had reported stored is there once, in
    order, and every answer it had reported is still there to pass on."""
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=REPO,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    deadline = time.monotonic() + 60
    last = -1
    while last < 200 and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        last = int(line)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    assert last >= 200, "the writer did not get far enough to test anything"
    s = RelayStore(tmp_path, "r1")
    try:
        waiting = [m.delivery_id for m in s.waiting("c", limit=10**6)]
        answered = [d for _, d, _ in s.unpassed("c")]
        ids = answered + waiting
        n = len(ids)
        assert n >= last + 1, f"reported {last + 1} stored, found {n}"
        assert ids == [f"m{i}" for i in range(n)], "lost, duplicated or out of order"
        assert len(answered) >= last - 2  # answered up to m{last-3} before the kill
    finally:
        s.close()

"""The test bed's checker (tests/hosts/history.py) on hand-made histories: what it counts as
out of order, and what it leaves to a publisher's move (which docs/guarantees.md does not
order). The runs themselves are in tests/test_hosts.py."""

from __future__ import annotations

from tests.hosts.history import History, check


def _history(outcome: dict) -> History:
    """p1 publishes 1 at router A and 2 there too; it moves to B; the subscriber s1 gets 2
    (the resend at B) before 1 (the copy from A, still travelling)."""
    h = History(["s1"])
    t = h.started
    h.record({"e": "adv", "t": t, "who": "p1", "kind": "connected", "url": "A"})
    h.record({"e": "invoke", "t": t + 1, "pub": "p1", "inc": 1, "seq": 1})
    h.record({"e": "invoke", "t": t + 2, "pub": "p1", "inc": 1, "seq": 2})
    h.record({"t": t + 3, "pub": "p1", "inc": 1, "seq": 1, **outcome})
    h.record({"e": "adv", "t": t + 4, "who": "p1", "kind": "connected", "url": "B"})
    h.record({"e": "ok", "t": t + 6, "pub": "p1", "inc": 1, "seq": 2})
    for seq, at in ((2, 5), (1, 7)):
        h.record({"e": "recv", "t": t + at, "sub": "s1", "pub": "p1", "inc": 1, "seq": seq})
    h.ended = t + 8
    return h


def test_a_failure_that_left_subscribers_pending_is_in_flight_at_a_move() -> None:
    """Test bed, ring seed 34 with a relay: messages failed early (the relay's subscriber
    unreachable) while their copies to everyone else still travelled; the publisher moved
    and its resends overtook them. Not promised, and counted apart."""
    h = _history({"e": "fail", "failed": ["r1"], "in_doubt": ["r1"], "pending": ["s1"]})
    counts = check(h, "hand", 0, "").counts
    assert counts["out_of_order"] == 0 and counts["out_of_order_after_move"] == 1


def test_a_message_done_before_the_move_is_still_ordered() -> None:
    """The same receipts, but message 1 was accepted (every copy answered) before the move:
    a later message ahead of it is out of order, and nothing excuses it."""
    h = _history({"e": "ok"})
    counts = check(h, "hand", 0, "").counts
    assert counts["out_of_order"] == 1 and counts["out_of_order_after_move"] == 0

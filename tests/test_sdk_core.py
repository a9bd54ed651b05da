"""The SDK's decisions without proton, sockets or SQLite (amqp_edge.sdk_core): the publisher's
sequence numbers, window, credit, write-ahead commits, lost links and resume declarations,
outcomes and retries; the subscriber's credit, duplicate suppression, declarations and
answers; the reconnect policy. Each test drives a core by hand and asserts what it decides."""

from __future__ import annotations

import pytest

from amqp_edge.sdk_core import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    PRUNE_EVERY,
    RESUME_ACCEPTED_AGE,
    Answer,
    Incoming,
    MemoryPublisherStore,
    MemorySubscriberStore,
    Outcome,
    PublisherCore,
    Reaction,
    Reconnect,
    SubscriberCore,
    is_fatal,
)

# ====================================================================== publisher


def commit(core: PublisherCore, store: MemoryPublisherStore | None = None) -> list[Outcome]:
    """What the driver does at the end of a batch of events."""
    c = core.take_commit()
    if c is None:
        return []
    if store is not None:
        c.apply_to(store)
    return core.committed(c)


def sent(core: PublisherCore, credit: int) -> list[tuple[bytes, bool]]:
    return [(t.tag, t.resend) for t in core.transmit(credit)]


def test_a_message_goes_on_the_wire_only_after_its_commit() -> None:
    core = PublisherCore(window=10)
    core.attached()
    assert core.next_seq == 1
    assert core.publish(b"one") == 1 and core.publish(b"two") == 2
    assert core.next_seq == 3 and core.outstanding == 2
    assert core.transmit(10) == []  # not durable yet
    c = core.take_commit()
    assert c is not None
    assert c.inserts == [(1, b"one"), (2, b"two")] and c.next_seq == 3
    assert c.accepted == [] and c.failed == []
    assert core.take_commit() is None  # handed out once
    assert core.transmit(10) == []  # still not told it is durable
    assert core.committed(c) == []
    [t1, t2] = core.transmit(10)
    assert (t1.seq, t1.tag, t1.payload, t1.resend) == (1, b"1", b"one", False)
    assert (t2.seq, t2.tag, t2.payload, t2.resend) == (2, b"2", b"two", False)
    assert core.counts["sent"] == 2 and core.counts["resent"] == 0
    assert core.transmit(10) == []  # in flight: not sent twice


def test_credit_and_window_bound_what_is_sent() -> None:
    core = PublisherCore(window=3)
    for i in range(3):
        core.publish(f"m{i}".encode())
    assert not core.can_publish()  # 3 without an outcome: a send waits
    commit(core)
    assert core.transmit(5) == []  # not attached
    core.attached()
    assert sent(core, 2) == [(b"1", False), (b"2", False)]  # credit 2
    assert sent(core, 5) == [(b"3", False)]
    # the window counts messages in flight too: 3 on the wire, nothing more
    core.on_disposition(b"1", "accepted")
    assert commit(core) == [Outcome(1, "accepted")]
    assert core.can_publish() and core.outstanding == 2
    core.publish(b"m3")
    commit(core)
    assert sent(core, 5) == [(b"4", False)]


def test_outcomes_are_reported_after_their_commit_and_counted() -> None:
    store = MemoryPublisherStore()
    core = PublisherCore.from_store(store, window=10)
    core.attached()
    for i in range(3):
        core.publish(f"m{i}".encode())
    commit(core, store)
    core.transmit(10)
    assert core.on_disposition(b"2", "accepted") == Reaction(settle=True)
    assert core.on_disposition(b"1", "rejected", condition="exactmesh:delivery-failed",
                               description="s/sub/s@A did not answer",
                               info={"failed": ["s"]}) == Reaction(settle=True)
    assert core.on_disposition(b"3", None) == Reaction(settle=False)  # no outcome yet
    assert core.outstanding == 3  # nothing reported before the commit
    c = core.take_commit()
    assert c is not None and c.inserts == [] and c.accepted == [2]
    assert c.failed == [(1, "exactmesh:delivery-failed", "s/sub/s@A did not answer")]
    c.apply_to(store)
    assert core.committed(c) == [
        Outcome(2, "accepted"),
        Outcome(1, "rejected", "exactmesh:delivery-failed", "s/sub/s@A did not answer",
                {"failed": ["s"]}),
    ]
    assert core.outstanding == 1 and core.accepted_total == 1
    assert core.counts["accepted"] == 1 and core.counts["failed"] == 1
    assert store.pending() == [(3, b"m2")] and store.accepted_total() == 1
    assert [(f.seq, f.condition) for f in store.failures()] == [
        (1, "exactmesh:delivery-failed")]
    # a rejection without a condition
    core.on_disposition(b"3", "rejected")
    assert commit(core, store) == [Outcome(3, "rejected", "amqp:rejected", "", None)]
    assert not core.detach_on_close()  # nothing held: close the link


def test_a_tag_that_is_not_ours_is_settled_and_ignored() -> None:
    core = PublisherCore()
    assert core.on_disposition(b"x", "accepted") == Reaction(settle=True)
    assert core.take_commit() is None


def test_a_lost_link_puts_in_flight_messages_back_first_and_the_attach_declares_them() -> None:
    core = PublisherCore(window=10)
    for i in range(1, 6):
        core.publish(f"m{i}".encode())
    commit(core)
    core.attached()
    assert [t.seq for t in core.transmit(3)] == [1, 2, 3]
    core.on_disposition(b"2", "accepted")
    commit(core)
    core.link_lost()
    assert core.transmit(10) == []  # no link
    core.publish(b"m6")  # published while away: not durable, not declared
    assert core.declaration() == {"unsettled": [b"1", b"3", b"4", b"5"]}
    commit(core)
    assert core.declaration() == {"unsettled": [b"1", b"3", b"4", b"5", b"6"]}
    core.attached()
    # the declared ones first, in sequence order, same tags; 1 and 3 were sent before
    assert sent(core, 10) == [(b"1", True), (b"3", True), (b"4", False), (b"5", False),
                              (b"6", False)]
    assert core.counts["resent"] == 2 and core.counts["sent"] == 6
    assert core.detach_on_close()  # held without an outcome: detach, the router keeps them


def test_released_and_modified_are_resent_with_the_same_tag_after_the_retry_timer() -> None:
    core = PublisherCore(window=10, retry_delay=0.25)
    for i in range(1, 5):
        core.publish(f"m{i}".encode())
    commit(core)
    core.attached()
    core.transmit(10)
    assert core.on_disposition(b"1", "released") == Reaction(settle=True, retry_in=0.25)
    # the timer is armed: no second one
    assert core.on_disposition(b"2", "modified") == Reaction(settle=True)
    # settled by the router without an outcome counts as released
    assert core.on_disposition(b"3", None, settled=True) == Reaction(settle=True)
    assert core.counts["released"] == 3
    assert core.transmit(10) == []  # not before the timer
    core.on_disposition(b"3", "accepted")  # (a late outcome: 3 is done)
    commit(core)
    core.requeue()
    assert sent(core, 10) == [(b"1", True), (b"2", True)]  # 3 has its outcome: not again
    assert core.on_disposition(b"1", "released").retry_in == 0.25  # the timer fired: re-armed


def test_a_restarted_publisher_declares_and_resends_what_its_store_holds() -> None:
    store = MemoryPublisherStore()
    first = PublisherCore.from_store(store, window=10)
    first.attached()
    for i in range(1, 4):
        first.publish(f"m{i}".encode())
    commit(first, store)
    first.transmit(10)
    first.on_disposition(b"1", "accepted")
    commit(first, store)
    # the process dies; a new one finds the store
    again = PublisherCore.from_store(store, window=10)
    assert again.next_seq == 4 and again.outstanding == 2 and again.accepted_total == 1
    assert again.declaration() == {"unsettled": [b"2", b"3"]}
    again.attached()
    assert sent(again, 10) == [(b"2", True), (b"3", True)]  # loaded: maybe sent before
    assert again.publish(b"m4") == 4


def test_a_preloaded_memory_store_is_declared_in_sequence_order() -> None:
    store = MemoryPublisherStore([(7, b"g"), (3, b"c"), (5, b"e")])
    core = PublisherCore.from_store(store, window=2)
    assert core.next_seq == 8 and core.holding == 3
    assert core.declaration() == {"unsettled": [b"3", b"5", b"7"]}
    core.attached()
    assert [t.seq for t in core.transmit(10)] == [3, 5]  # window 2


def test_received_takes_a_message_out_of_the_window_until_its_outcome() -> None:
    """`received` (every copy owed is on a relay's disk, docs/relay.md): not an outcome, but
    the message leaves the window; its outcome still settles it."""
    core = PublisherCore(window=2)
    core.attached()
    core.publish(b"a")
    core.publish(b"b")
    commit(core)
    assert sent(core, 10) == [(b"1", False), (b"2", False)] and not core.can_publish()
    reaction = core.on_disposition(b"1", "received")
    assert reaction == Reaction(settle=False, wake=True) and core.waiting == 1
    assert core.can_publish() and core.outstanding == 2
    assert core.on_disposition(b"1", "received") == Reaction(settle=False)  # told again
    core.publish(b"c")
    commit(core)
    assert sent(core, 10) == [(b"3", False)]  # room on the wire too
    assert core.on_disposition(b"1", "accepted").settle
    assert commit(core) == [Outcome(1, "accepted")] and core.waiting == 0
    assert core.decided(b"1") and not core.decided(b"2")
    core.link_lost()  # resent on the next link, where the router says it again
    assert core.waiting == 0 and not core.can_publish()


def test_a_window_as_large_as_a_declaration_leaves_nothing_to_wait_beyond_it() -> None:
    """With DECLARE_MAX in the window already, `received` frees no place: the window is the
    only bound, as without relays (and publishing is not stopped altogether)."""
    from amqp_edge.sdk_core import DECLARE_MAX

    core = PublisherCore(window=DECLARE_MAX)
    core.attached()
    assert core.waiting_limit == 0 and core.can_publish()
    for i in range(DECLARE_MAX):
        core.publish(b"%d" % i)
    commit(core)
    sent(core, DECLARE_MAX)
    core.on_disposition(b"1", "received")
    assert not core.can_publish()


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window"):
        PublisherCore(window=0)


# ====================================================================== subscriber

T1, T2, T3 = "a" * 32, "b" * 32, "c" * 32


def attached_sub(prefetch: int = 8, **kw: object) -> SubscriberCore:
    core = SubscriberCore(prefetch=prefetch, **kw)  # type: ignore[arg-type]
    core.declaration(1, 0.0)
    core.attached()
    return core


def test_credit_is_topped_up_to_prefetch_in_steps_of_a_quarter() -> None:
    core = SubscriberCore(prefetch=8)
    assert core.credit_to_grant(0) == 0  # not attached
    assert core.declaration(1, 0.0) == {"unsettled": {}, "gen": 1}
    core.attached()
    assert core.credit_to_grant(0) == 8
    # two deliveries arrive (credit 8 -> 6) and are held: nothing to grant
    core.on_delivery(T1, "d1", b"p1", None)
    core.on_delivery(T2, "d2", b"p2", None)
    assert core.credit_to_grant(6) == 0
    # one answered: 1 to grant, under a quarter of 8: wait
    s = core.take()
    assert s is not None
    core.answer(s.tag, "accepted", 1.0, new=True, copy=s.copy)
    core.take_answers()
    assert core.credit_to_grant(6) == 0
    s = core.take()
    assert s is not None
    core.answer(s.tag, "accepted", 1.0, new=True, copy=s.copy)
    core.take_answers()
    assert core.credit_to_grant(6) == 2  # a quarter
    # with no credit left any amount is granted
    core.on_delivery(T3, "d3", b"p3", None)
    assert core.credit_to_grant(0) == 7


def test_a_new_delivery_is_shown_once_answered_and_the_answer_settles_it() -> None:
    core = attached_sub()
    assert core.on_delivery(T1, "d1", b"payload", None) == Incoming("show")
    assert core.queued == 1 and core.counts["received"] == 1
    shown = core.take()
    assert shown is not None and (shown.tag, shown.payload) == (T1, b"payload")
    assert core.take() is None
    assert SubscriberCore.must_record("accepted") and SubscriberCore.must_record("rejected")
    assert not SubscriberCore.must_record("released")
    with pytest.raises(ValueError, match="outcome"):
        SubscriberCore.must_record("maybe")
    assert core.answer(T1, "accepted", 5.0, new=True, copy=shown.copy) is False
    assert core.take_answers() == [Answer("d1", T1, "accepted")]
    assert core.take_answers() == []
    assert core.accepted_total == 1 and core.counts["accepted"] == 1
    # rejected: the condition defaults; released: not recorded, answered on the wire
    core.on_delivery(T2, "d2", b"p", None)
    core.on_delivery(T3, "d3", b"p", None)
    s2, s3 = core.take(), core.take()
    assert s2 is not None and s3 is not None
    core.answer(T2, "rejected", 6.0, new=True, copy=s2.copy, description="no")
    core.answer(T3, "released", 6.0, copy=s3.copy)
    assert core.take_answers() == [Answer("d2", T2, "rejected", "exactmesh:rejected", "no"),
                                   Answer("d3", T3, "released")]


def test_a_copy_of_an_answered_tag_is_answered_again_from_the_store_and_not_shown() -> None:
    core = attached_sub()
    assert core.on_delivery(T1, "d1", b"p", "accepted") == Incoming("answer", "accepted")
    assert core.on_delivery(T2, "d2", b"p", "rejected") == Incoming(
        "answer", "rejected", "exactmesh:rejected", "rejected before")
    assert core.queued == 0 and core.counts["duplicates_suppressed"] == 2
    assert core.counts["received"] == 0
    assert core.credit_to_grant(6) == 2  # settled at once: they hold no credit


def test_a_copy_of_a_held_message_is_bound_to_it_not_shown_twice() -> None:
    core = attached_sub()
    core.on_delivery(T1, "d1", b"p", None)
    shown = core.take()
    assert shown is not None
    # the router sends it again (it settled the first copy, e.g. a redelivery)
    assert core.on_delivery(T1, "d1b", b"p", None) == Incoming("bind", previous="d1")
    assert core.counts["duplicates_suppressed"] == 1 and core.queued == 0
    core.previous_settled()  # the driver saw d1 settled by the router
    assert core.credit_to_grant(7) == 0  # one live delivery (d1b)
    core.answer(T1, "accepted", 1.0, new=True, copy=shown.copy)
    assert core.take_answers() == [Answer("d1b", T1, "accepted")]  # the new copy answers
    # a copy of one still waiting in the inbox is bound too, shown once
    core.on_delivery(T2, "d2", b"p", None)
    assert core.on_delivery(T2, "d2b", b"p", None).kind == "bind"
    assert core.queued == 1


def test_a_lost_link_drops_what_was_not_taken_and_declares_both_kinds() -> None:
    store = MemorySubscriberStore(clock=lambda: 100.0)
    core = SubscriberCore.from_store(store, prefetch=8)
    assert core.declaration(store.next_gen(), 100.0) == {"unsettled": {}, "gen": 1}
    core.attached()
    for tag in (T1, T2, T3):
        core.on_delivery(tag, f"d-{tag[0]}", b"p", None)
    taken = core.take()  # T1: accepted
    assert taken is not None
    assert store.record(T1, "accepted")
    core.answer(T1, "accepted", 100.0, new=True, copy=taken.copy)  # queued for the wire
    held = core.take()  # T2: the application holds it; T3 waits in the inbox
    assert held is not None and held.tag == T2
    core.link_lost(101.0)
    assert core.take_answers() == []  # the queued answer goes nowhere: its link is gone
    assert core.queued == 0  # T3 dropped: the router sends it again
    assert core.credit_to_grant(0) == 0  # not attached
    declared = core.declaration(store.next_gen(), 102.0)
    assert declared == {"unsettled": {T1: "accepted", T2: "received", T3: "received"},
                        "gen": 2}
    # accepted ones first, then those dropped from the inbox, then those held
    assert list(declared["unsettled"]) == [T1, T3, T2]
    assert core.gen == 2
    core.attached()
    assert core.credit_to_grant(0) == 8  # nothing live on the new link
    # T3 comes again: shown (it was never taken); T2 comes again: bound to the held one
    assert core.on_delivery(T3, "d3b", b"p", None) == Incoming("show")
    assert core.on_delivery(T2, "d2b", b"p", None) == Incoming("bind", previous=None)
    core.answer(T2, "accepted", 103.0, new=True, copy=held.copy)
    assert core.take_answers() == [Answer("d2b", T2, "accepted")]
    # an answered one is no longer declared "received"; old declarations expire
    later = 101.0 + RESUME_ACCEPTED_AGE + 1
    assert core.declaration(3, later) == {"unsettled": {T2: "accepted"}, "gen": 3}


def test_an_answer_to_a_held_message_after_its_link_is_gone_sends_nothing() -> None:
    core = attached_sub()
    core.on_delivery(T1, "d1", b"p", None)
    shown = core.take()
    assert shown is not None
    core.link_lost(1.0)
    core.answer(T1, "accepted", 2.0, new=True, copy=shown.copy)
    assert core.take_answers() == []
    assert core.declaration(2, 3.0)["unsettled"] == {T1: "accepted"}


def test_an_answer_to_an_older_copy_than_the_one_held_sends_nothing() -> None:
    core = attached_sub()
    core.on_delivery(T1, "d1", b"p", None)
    first = core.take()
    assert first is not None
    core.answer(T1, "released", 1.0, copy=first.copy)
    core.take_answers()
    core.on_delivery(T1, "d1b", b"p", None)  # redelivered after the release: shown again
    second = core.take()
    assert second is not None and second.copy != first.copy
    core.answer(T1, "released", 2.0, copy=first.copy)  # the old one, again
    assert core.take_answers() == []
    core.answer(T1, "accepted", 3.0, new=True, copy=second.copy)
    assert core.take_answers() == [Answer("d1b", T1, "accepted")]


def test_the_declaration_keeps_the_newest_accepted_within_the_limits() -> None:
    recent = [(f"{i:032x}", float(i)) for i in range(10)]
    core = SubscriberCore(recent_accepted=recent, accepted_max=4, accepted_age=60.0)
    assert list(core.declaration(1, 65.0)["unsettled"]) == [f"{i:032x}" for i in (6, 7, 8, 9)]
    assert list(core.declaration(2, 68.5)["unsettled"]) == [f"{9:032x}"]


def test_the_store_is_pruned_every_so_many_acceptances() -> None:
    core = attached_sub()
    prunes = [core.answer(f"{i:032x}", "accepted", 0.0, new=True)
              for i in range(1, PRUNE_EVERY + 1)]
    assert prunes[-1] and not any(prunes[:-1])


def test_detach_on_close_only_when_durable() -> None:
    assert SubscriberCore(durable=True).detach_on_close()
    assert not SubscriberCore().detach_on_close()


def test_memory_subscriber_store() -> None:
    now = [10.0]
    store = MemorySubscriberStore(clock=lambda: now[0])
    assert store.next_gen() == 1 and store.next_gen() == 2
    assert store.record(T1, "accepted") and not store.record(T1, "rejected")
    now[0] = 20.0
    assert store.record(T2, "rejected") and store.record(T3, "accepted")
    assert store.outcome_of(T1) == "accepted" and store.outcome_of(T2) == "rejected"
    assert store.outcome_of("x") is None
    assert store.accepted_total() == 2
    assert store.recent_accepted(60.0, 10) == [(T1, 10.0), (T3, 20.0)]
    assert store.recent_accepted(5.0, 10) == [(T3, 20.0)]
    assert store.recent_accepted(60.0, 1) == [(T3, 20.0)]
    assert store.prune(5.0) == 1 and store.outcome_of(T1) is None
    assert store.accepted_total() == 2


# ====================================================================== reconnecting


def test_reconnect_goes_round_robin_with_a_doubling_backoff() -> None:
    r = Reconnect(["a", "b", "c"], None, now=0.0)
    assert [r.next_url() for _ in range(4)] == ["a", "b", "c", "a"]
    delays = [r.retry_in(0.0) for _ in range(7)]
    assert delays == [BACKOFF_MIN * 2 ** i for i in range(5)] + [BACKOFF_MAX] * 2
    r.attached()
    assert r.retry_in(0.0) == BACKOFF_MIN


def test_reconnect_gives_up_after_connect_timeout_without_an_attach() -> None:
    r = Reconnect(["a"], 2.0, now=10.0)
    assert r.retry_in(10.0) == BACKOFF_MIN
    assert r.retry_in(11.99) == pytest.approx(0.01)  # never past the deadline
    assert r.retry_in(12.0) is None
    # attached, then lost: the clock starts again from the loss
    r.attached()
    r.lost(True, now=50.0)
    assert r.retry_in(51.0) == BACKOFF_MIN
    r.lost(False, now=60.0)  # an attempt that never attached does not restart it
    assert r.retry_in(60.0) is None


def test_fatal_conditions() -> None:
    assert is_fatal("amqp:link:stolen") and is_fatal("amqp:unauthorized-access")
    assert not is_fatal("amqp:connection:forced") and not is_fatal(None)

"""Failover in the delivery engine, on engines wired together by hand (no mesh layer).

`Wire` carries the engines' mesh actions between them the way `mesh/meshnode.py` does, but
only when asked, so a test can lose what a crashed router never sent. The random versions of
these cases run in the deterministic simulation (router/sim); these pin down each rule.
"""

from __future__ import annotations

from router.core.actions import (
    ACCEPTED,
    CloseLink,
    Decide,
    Forget,
    Forward,
    Rejected,
    Send,
    Subscribed,
    Verdict,
)
from router.core.engine import Disposition, EngineConfig
from router.core.records import LinkIdentity, outgoing_tag
from tests.engine_driver import EngineDriver

PUB = LinkIdentity("shop", "pub/shop")
SUB = LinkIdentity("billing", "sub/billing")


class Wire:
    """Engines by router id, and what each produced for its own clients."""

    def __init__(self, *ids: str, **config: float) -> None:
        self.engines = {
            r: EngineDriver(EngineConfig(
                router_id=r, reconnect_timeout=config.get("reconnect", 30.0),
                resume_timeout=config.get("resume", 5.0)))
            for r in ids
        }
        self.client: dict[str, list] = {r: [] for r in ids}
        self.dead: set[str] = set()

    def __getitem__(self, r: str) -> EngineDriver:
        return self.engines[r]

    def pump(self, now: float = 0.0) -> None:
        """Deliver mesh actions until none are left; a dead router neither sends nor hears."""
        busy = True
        while busy:
            busy = False
            for src, engine in self.engines.items():
                for action in engine.take_actions():
                    busy = True
                    if src in self.dead:
                        continue
                    self._carry(src, action, now)

    def _carry(self, src: str, action: object, now: float) -> None:
        live = {r: e for r, e in self.engines.items() if r not in self.dead and r != src}
        if isinstance(action, Forward):
            for dst, keys in action.owed.items():
                if dst in live:
                    live[dst].remote_message(src, action.msg_id, action.address,
                                             action.payload, owed=keys, mode=action.mode,
                                             ttl_ms=action.ttl_ms, now=now,
                                             resend=action.resend, once=action.once)
        elif isinstance(action, Verdict):
            if action.origin in live:
                live[action.origin].peer_verdict(src, action.msg_id, action.accepted,
                                                 action.status, action.keys,
                                                 former=action.former)
        elif isinstance(action, Forget):
            for dst in action.routers:
                if dst in live:
                    live[dst].remote_forget(src, action.msg_id, action.accepted)
        elif isinstance(action, Subscribed):
            for e in live.values():
                if action.topic_filter is None:
                    e.remote_subscriber_removed(src, action.key)
                else:
                    e.remote_subscriber_added(src, action.key, action.topic_filter,
                                              action.gen, action.timeout, since=action.since)
        else:
            self.client[src].append(action)

    def crash(self, r: str, now: float = 0.0) -> None:
        """`r` dies with everything it held; the others hear it restarted (empty)."""
        self.dead.add(r)
        self.engines[r].take_actions()
        for other, e in self.engines.items():
            if other not in self.dead:
                e.peer_lost(r, f"was on router {r}, which restarted", restarted=True, now=now)
        self.pump(now)

    def take(self, r: str, kind: type) -> list:
        got = [a for a in self.client[r] if isinstance(a, kind)]
        self.client[r] = [a for a in self.client[r] if not isinstance(a, kind)]
        return got


def subscribe(w: Wire, r: str, link: int, *, gen: int = 0, declared: dict | None = None,
              warm: float | None = 10.0, now: float = 0.0, credit: int = 100) -> dict:
    view = w[r].attach_subscriber(link, SUB, "orders/#", warm_timeout=warm, gen=gen,
                                  declared=declared, now=now)
    w[r].subscriber_credit(link, credit)
    w.pump(now)
    return view


def publish(w: Wire, r: str, link: int, tags: list[bytes], now: float = 0.0) -> None:
    for tag in tags:
        w[r].message(link, tag, b"body " + tag, now=now)
    w.pump(now)


def accept(w: Wire, r: str, link: int, sends: list[Send], now: float = 0.0) -> None:
    for s in sends:
        w[r].copy_outcome(link, s.tag, Disposition.ACCEPTED, settled=True)
    w.pump(now)


def tag_of(tag: bytes) -> bytes:
    return outgoing_tag(PUB.container, PUB.name, tag)


def outcomes(w: Wire, r: str) -> dict[bytes, object]:
    return {d.tag: d.outcome for d in w.take(r, Decide)}


def test_a_subscriber_whose_router_dies_gets_the_rest_in_order_at_its_new_router() -> None:
    w = Wire("A", "B", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1", b"2", b"3", b"4"])
    first = w.take("C", Send)
    assert [s.tag for s in first] == [tag_of(t) for t in (b"1", b"2", b"3", b"4")]
    accept(w, "C", 1, first[:2])  # 1 and 2 accepted; 3 and 4 in the subscriber's hands
    assert set(outcomes(w, "A")) == {b"1", b"2"}
    w.crash("C", now=1.0)
    publish(w, "A", 9, [b"5"], now=1.5)  # while it is away: a warm subscriber is owed it
    # It reattaches at B: it held 3 (unanswered) and had accepted 4 just before the crash.
    view = subscribe(w, "B", 1, gen=2, now=2.0, declared={
        tag_of(b"3").decode(): "received", tag_of(b"4").decode(): "accepted"})
    assert sorted(view["placeholders"]) == sorted([tag_of(b"3").decode(), tag_of(b"4").decode()])
    again = w.take("B", Send)
    assert [s.tag for s in again] == [tag_of(b"3"), tag_of(b"5")], "4 was declared accepted"
    accept(w, "B", 1, again, now=2.1)
    assert set(outcomes(w, "A")) == {b"3", b"4", b"5"}
    publish(w, "A", 9, [b"6"], now=3.0)
    last = w.take("B", Send)
    assert [s.tag for s in last] == [tag_of(b"6")]
    accept(w, "B", 1, last, now=3.1)
    for tag in (b"1", b"2", b"3", b"4", b"5", b"6"):
        w["A"].publisher_settled(9, tag)
    w.pump(3.2)
    assert not w["A"].records and not w["B"].records, "nothing may be left behind"


def test_a_subscriber_that_does_not_reattach_in_time_fails_by_name() -> None:
    w = Wire("A", "C")
    subscribe(w, "C", 1, warm=2.0)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    w.crash("C", now=1.0)
    w["A"].tick(2.9)
    w.pump(2.9)
    assert outcomes(w, "A") == {}
    w["A"].tick(3.0)
    w.pump(3.0)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert outcome.info["failed"] == ["billing/sub/billing@C"]
    assert "did not reattach within 2 s after router C was lost" in outcome.description


def test_a_publisher_resuming_at_another_router_is_answered_without_a_second_delivery() -> None:
    w = Wire("A", "B", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1", b"2"])
    sent = w.take("C", Send)
    w.dead.add("A")  # A dies before C's verdicts leave
    accept(w, "C", 1, sent[:1])  # 1 accepted (its verdict to A is lost with A)
    w.dead.discard("A")
    w.crash("A", now=1.0)
    view = w["B"].attach_publisher(7, PUB, "orders/eu", "all", [b"1", b"2"])
    assert sorted(view["known"]) == []  # B itself never saw them
    w.pump(1.0)
    publish(w, "B", 7, [b"1", b"2"], now=1.1)
    assert w.take("C", Send) == [], "C had both: nothing goes to the subscriber again"
    assert outcomes(w, "B") == {b"1": ACCEPTED}
    accept(w, "C", 1, sent[1:], now=1.2)
    assert outcomes(w, "B") == {b"2": ACCEPTED}


def test_a_resend_of_a_forgotten_message_is_answered_from_its_tombstone() -> None:
    """The origin decided, the destinations forgot, and the origin died before the
    publisher heard: the resend must not reach the subscriber again."""
    w = Wire("A", "B", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    accept(w, "C", 1, w.take("C", Send))
    w["A"].publisher_settled(9, b"1")  # rcv-settle-mode first: the router settled at once
    w.pump()
    assert not w["C"].records and not w["A"].records
    w.crash("A", now=1.0)
    w["B"].attach_publisher(7, PUB, "orders/eu", "all", [b"1"])
    publish(w, "B", 7, [b"1"], now=1.1)
    assert w.take("C", Send) == []
    assert outcomes(w, "B") == {b"1": ACCEPTED}


def test_a_publisher_reconnecting_to_the_same_router_gets_the_outcome_it_missed() -> None:
    w = Wire("A")
    subscribe(w, "A", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    w["A"].detach_publisher(9, final=False, now=0.5)  # its connection dropped
    accept(w, "A", 1, w.take("A", Send), now=0.6)
    assert outcomes(w, "A") == {}  # nobody to tell yet
    w["A"].attach_publisher(10, PUB, "orders/eu", "all", [b"1"])
    publish(w, "A", 10, [b"1"], now=1.0)
    assert w.take("A", Send) == []
    assert outcomes(w, "A") == {b"1": ACCEPTED}
    w["A"].publisher_settled(10, b"1")
    w.pump()
    assert not w["A"].records


def test_a_vanished_publishers_messages_stop_being_tracked_after_reconnect_timeout() -> None:
    w = Wire("A", reconnect=2.0)
    subscribe(w, "A", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    w.take("A", Send)
    w["A"].detach_publisher(9, final=False, now=0.5)
    w["A"].tick(2.4)
    assert w["A"].records
    w["A"].tick(2.5)
    w.pump(2.5)
    assert w["A"].stats.deleted == 1


def test_placeholders_hold_newer_messages_until_fulfilled_or_resume_timeout() -> None:
    w = Wire("B", resume=1.0)
    subscribe(w, "B", 1, gen=3, declared={"f" * 32: "received"}, now=0.0)
    w["B"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "B", 9, [b"1"], now=0.1)
    assert w.take("B", Send) == [], "held behind the placeholder"
    w["B"].tick(1.0)
    w.pump(1.0)
    assert [s.tag for s in w.take("B", Send)] == [tag_of(b"1")]


def test_the_newest_attach_of_a_subscriber_wins_and_the_older_link_is_closed() -> None:
    w = Wire("A", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    assert len(w.take("C", Send)) == 1
    subscribe(w, "A", 5, gen=7)  # the same subscriber, attached again at A
    (closed,) = w.take("C", CloseLink)
    assert closed.link == 1 and closed.condition == "amqp:link:stolen"
    assert [s.tag for s in w.take("A", Send)] == [tag_of(b"1")]
    accept(w, "A", 5, [Send(5, tag_of(b"1"), b"", 0, False)])
    assert outcomes(w, "A") == {b"1": ACCEPTED}
    w["A"].publisher_settled(9, b"1")
    w.pump()
    assert not w["A"].records and not w["C"].records, "nothing may be left behind"


def test_a_subscriber_resuming_at_the_origin_with_a_delivery_it_accepted_decides_it() -> None:
    """Its router died after it accepted, before the verdict left: the origin learns of the
    acceptance from the resume declaration, and the record ends."""
    w = Wire("A", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    w.take("C", Send)
    w.crash("C", now=1.0)
    subscribe(w, "A", 2, gen=2, declared={tag_of(b"1").decode(): "accepted"}, now=1.5)
    assert w.take("A", Send) == []
    assert outcomes(w, "A") == {b"1": ACCEPTED}
    w["A"].publisher_settled(9, b"1")
    w.pump(1.6)
    assert not w["A"].records


def test_a_resend_is_owed_to_a_subscriber_that_moved_from_the_dead_router_too() -> None:
    """Publisher and one subscriber on C, another subscriber on B. C dies; both clients move
    to B. B's record of the message (owed to its own subscriber only) is adopted, and the
    moved subscriber is owed it as well: its copy died with C."""
    w = Wire("B", "C")
    other = LinkIdentity("eu", "sub/eu")
    w["B"].attach_subscriber(7, other, "orders/#", warm_timeout=10.0)
    w["B"].subscriber_credit(7, 100)
    subscribe(w, "C", 1)
    w["C"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "C", 9, [b"1"])
    assert len(w.take("C", Send)) == 1 and len(w.take("B", Send)) == 1
    w.crash("C", now=1.0)
    subscribe(w, "B", 2, gen=2, now=1.2)  # the moved subscriber, holding nothing
    w["B"].attach_publisher(10, PUB, "orders/eu", "all", [b"1"])
    publish(w, "B", 10, [b"1"], now=1.3)
    (again,) = w.take("B", Send)
    assert again.link == 2 and again.tag == tag_of(b"1")
    assert outcomes(w, "B") == {}, "not accepted before the moved subscriber accepts"
    accept(w, "B", 2, [again], now=1.4)
    assert outcomes(w, "B") == {}, "nor before the other one does"
    w["B"].copy_outcome(7, tag_of(b"1"), Disposition.ACCEPTED, settled=True)
    w.pump(1.5)
    assert outcomes(w, "B") == {b"1": ACCEPTED}


def test_a_destinations_tombstone_keeps_the_mesh_wide_outcome_not_its_own() -> None:
    w = Wire("A", "B", "C")
    subscribe(w, "C", 1)
    other = LinkIdentity("eu", "sub/eu")
    w["B"].attach_subscriber(7, other, "orders/#")
    w["B"].subscriber_credit(7, 100)
    w.pump()
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    w["B"].copy_outcome(7, tag_of(b"1"), Disposition.ACCEPTED, settled=True)
    (sent,) = w.take("C", Send)
    w["C"].copy_outcome(1, sent.tag, Disposition.REJECTED, settled=True)
    w.pump()
    (failed,) = outcomes(w, "A").values()
    assert isinstance(failed, Rejected)
    w["A"].publisher_settled(9, b"1")
    w.pump()
    w.crash("A", now=1.0)  # say the publisher never heard, and resends at B
    w["B"].attach_publisher(10, PUB, "orders/eu", "all", [b"1"])
    publish(w, "B", 10, [b"1"], now=1.1)
    (outcome,) = outcomes(w, "B").values()
    assert isinstance(outcome, Rejected), "B's own part was accepted; the message was not"


def test_a_subscriber_that_left_its_router_for_somewhere_the_origin_never_hears_of() -> None:
    """The subscriber moves from C to B, and leaves B too, while A hears only that it left C
    (a partition: gossip that B had it and lost it again never reaches A). C dropped its copy
    for the move; nobody else will answer A for it: after its timeout, it fails, named."""
    w = Wire("A", "B", "C", reconnect=3.0)
    subscribe(w, "C", 1, warm=None)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    assert len(w.take("C", Send)) == 1
    w["B"].attach_subscriber(2, SUB, "orders/#", gen=2, now=1.0)
    for action in w["B"].take_actions():  # only C hears of it
        if isinstance(action, Subscribed):
            w["C"].remote_subscriber_added("B", action.key, action.topic_filter, action.gen,
                                           action.timeout, now=1.0)
    w["A"].tick(1.0)
    w.pump(1.0)  # C drops its copy and tells the mesh the subscriber left it
    w["B"].detach_subscriber(2, now=1.5)
    w["B"].take_actions()
    w["A"].tick(3.9)
    w.pump(3.9)
    assert outcomes(w, "A") == {}
    w["A"].tick(4.0)
    w.pump(4.0)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert outcome.info["failed"] == ["billing/sub/billing@C"]
    assert "did not reattach within 3 s after leaving router C" in outcome.description


def test_a_record_a_stale_resend_took_over_still_answers_the_origin_it_had() -> None:
    """Failover seeds 12018241, 14001768: the publisher resumed at B, whose resend reached C
    first; D's older retarget (sent while the publisher was still at D) came after it. C
    cannot tell which is newer, so it answers both, and D forgetting the message without an
    outcome (its orphan timed out) does not withdraw what B still waits for."""
    w = Wire("B", "C", "D")
    subscribe(w, "C", 1)
    msg_id = tag_of(b"1").decode()
    owed = [SUB.key]
    w["C"].remote_message("B", msg_id, "orders/eu", b"body 1", owed=owed, mode="all",
                           ttl_ms=None, resend=True, now=1.0)
    w["C"].remote_message("D", msg_id, "orders/eu", b"body 1", owed=owed, mode="all",
                           ttl_ms=None, resend=True, now=1.1)
    (sent,) = [a for a in w["C"].take_actions() if isinstance(a, Send)]
    w["C"].remote_forget("D", msg_id, None, now=1.2)  # D's orphan gave up, no outcome
    assert w["C"].records, "still owed to the subscriber for B"
    w["C"].copy_outcome(1, sent.tag, Disposition.ACCEPTED, settled=True, now=1.3)
    verdicts = [a for a in w["C"].take_actions() if isinstance(a, Verdict)]
    assert sorted(v.origin for v in verdicts) == ["B", "D"]
    assert all(v.accepted and v.keys == owed for v in verdicts)
    assert not w["C"].records, "forgotten once answered: its current origin already forgot it"


def test_a_verdict_to_a_former_origin_does_not_take_the_record_from_the_publishers_router(
) -> None:
    """Failover seed 93498: the publisher resent at B (B's record, owed at A), then its
    connection to B dropped, unnoticed by B, and it resent at A. A took the record it held
    for B (B stays a former origin of it) and resent it to B, which yielded its record to A
    (it cannot tell which resend is newer). A's verdict on its own copy, told to B as a
    former origin, is no sign that A's resend was stale: B must not take the record back
    (and resend it to A, which would yield to B in turn), or the publisher, at A, hears
    nothing until B gives the record up and A sends B's subscriber its copy again."""
    w = Wire("A", "B")
    audit = LinkIdentity("audit", "sub/audit")
    subscribe(w, "B", 1)
    w["A"].attach_subscriber(2, audit, "orders/#", now=0.0)
    w["A"].subscriber_credit(2, 100)
    w.pump()
    w["B"].attach_publisher(10, PUB, "orders/eu", "all")
    publish(w, "B", 10, [b"1"], now=0.1)
    (to_b,), (to_a,) = w.take("B", Send), w.take("A", Send)
    w["A"].attach_publisher(13, PUB, "orders/eu", "all", [b"1"], now=1.0)
    publish(w, "A", 13, [b"1"], now=1.0)
    assert w.take("B", Send) == [] and w.take("A", Send) == [], "each copy went once"
    accept(w, "A", 2, [to_a], now=1.5)  # told to B too, as a former origin
    assert w["B"].find(to_b.tag.decode()).origin == "A", "B still answers A"
    assert w["A"].find(to_a.tag.decode()).origin is None, "A is still the origin"
    assert w.take("B", Send) == [] and w.take("A", Send) == []
    accept(w, "B", 1, [to_b], now=2.0)
    assert outcomes(w, "A") == {b"1": ACCEPTED}, "the publisher is told where it is"
    assert outcomes(w, "B") == {}


def test_an_attach_that_subscribes_afresh_is_not_sent_what_an_ended_subscription_was_owed(
) -> None:
    """Failover seed 55720: the warm subscriber at C stayed away past its timeout, so C failed
    2 for it, but that verdict was held up on its way to A. It subscribed afresh at C and got
    3, then moved to B. 2 was owed to the subscription that ended: A leaves it to C's verdict,
    resends B only 3 (2 would have come after 3), and 2 fails when that verdict comes."""
    w = Wire("A", "B", "C")
    carry = w._carry
    held: list[Verdict] = []

    def hold_verdicts_of_c(src: str, action: object, now: float) -> None:
        if src == "C" and isinstance(action, Verdict) and action.msg_id != tag_of(b"1").decode():
            held.append(action)
        else:
            carry(src, action, now)

    w._carry = hold_verdicts_of_c  # type: ignore[method-assign]
    subscribe(w, "C", 1, gen=1, warm=0.5)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    accept(w, "C", 1, w.take("C", Send))
    assert outcomes(w, "A") == {b"1": ACCEPTED}
    w["C"].detach_subscriber(1, final=False, now=1.0)
    publish(w, "A", 9, [b"2"], now=1.1)  # owed to it while it is away
    w["C"].tick(1.5)  # its timeout runs out: 2 fails at C
    w.pump(1.5)
    assert held and outcomes(w, "A") == {}
    subscribe(w, "C", 2, gen=2, warm=0.5, now=2.0)  # afresh: the old one ended
    assert outcomes(w, "A") == {}  # 2 waits for C's verdict on the ended subscription
    publish(w, "A", 9, [b"3"], now=2.1)
    assert [s.tag for s in w.take("C", Send)] == [tag_of(b"3")]
    w["B"].attach_subscriber(3, SUB, "orders/#", warm_timeout=0.5, gen=3, now=3.0)
    for action in w["B"].take_actions():
        if isinstance(action, Subscribed):
            assert action.since == 2  # it goes on with the subscription it had at C
            w["A"].remote_subscriber_added("B", action.key, action.topic_filter, action.gen,
                                           action.timeout, since=action.since, now=3.0)
    resends = [a for a in w["A"].take_actions() if isinstance(a, Forward)]
    assert [(f.msg_id, f.owed) for f in resends] == [(tag_of(b"3").decode(), {"B": [SUB.key]})]
    for verdict in held:  # C's verdict comes at last: 2 failed, named at C
        carry("C", verdict, 3.5)
    w.pump(3.5)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert outcome.info["failed"] == ["billing/sub/billing@C"]


def _ended_at_c_with_a_held_verdict(w: Wire) -> list[Verdict]:
    """A non-warm subscriber at C accepts 1, whose verdict is held up on its way to A; its
    connection drops (its subscription ends at C) and it attaches at C again, afresh."""
    carry = w._carry
    held: list[Verdict] = []

    def hold_verdicts_of_c(src: str, action: object, now: float) -> None:
        if src == "C" and isinstance(action, Verdict):
            held.append(action)
        else:
            carry(src, action, now)

    w._carry = hold_verdicts_of_c  # type: ignore[method-assign]
    subscribe(w, "C", 1, gen=1, warm=None)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "A", 9, [b"1"])
    accept(w, "C", 1, w.take("C", Send))
    w["C"].detach_subscriber(1, final=False, now=1.0)
    w.pump(1.0)
    w["A"].tick(2.0)  # (A's clock: gossip carries no time)
    subscribe(w, "C", 2, gen=2, warm=None, now=2.0)
    w._carry = carry  # type: ignore[method-assign]
    return held


def test_an_ended_subscriptions_part_waits_for_its_routers_verdict() -> None:
    """Failover seed f33945: A hears the fresh attach (`since` 2) before C's verdict that the
    ended subscription accepted 1. A neither fails 1 at once (naming a subscriber that
    processed it) nor resends it: it waits, and C's verdict decides it."""
    w = Wire("A", "C")
    held = _ended_at_c_with_a_held_verdict(w)
    assert held and outcomes(w, "A") == {}
    assert not [a for a in w["A"].take_actions() if isinstance(a, Forward)]
    (rec,) = w["A"].engine.records.values()
    assert rec.peers[SUB.key].ended == 2.0 + 30.0  # its deadline (`reconnect-timeout`)
    for verdict in held:
        w._carry("C", verdict, 2.5)
    w.pump(2.5)
    assert outcomes(w, "A") == {b"1": ACCEPTED}


def test_an_ended_subscriptions_part_fails_when_no_verdict_comes_in_time() -> None:
    """The verdict never comes (lost with the link, or dropped by C): the part fails, named,
    at its deadline, `reconnect-timeout` after A heard of the fresh attach."""
    w = Wire("A", "C", reconnect=8.0)
    assert _ended_at_c_with_a_held_verdict(w)
    w["A"].tick(9.9)
    w.pump(9.9)
    assert outcomes(w, "A") == {}
    w["A"].tick(10.0)
    w.pump(10.0)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert outcome.info["failed"] == ["billing/sub/billing@C"]
    assert "detached before accepting it" in str(outcome.info)


def test_an_ended_subscriptions_part_fails_when_its_router_is_lost() -> None:
    """The router that would answer for the ended subscription restarts: no verdict comes."""
    w = Wire("A", "C")
    assert _ended_at_c_with_a_held_verdict(w)
    w.crash("C", now=3.0)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert "detached before accepting it" in str(outcome.info)


def test_a_tombstone_that_answered_another_origins_resend_does_not_answer_the_publisher(
) -> None:
    """Failover seed 95188: B gave a message up (its publisher stayed away past
    reconnect-timeout) and forgot it accepted, leaving a tombstone at A. The publisher resent
    it at C, which took it as a new message, owed to a subscriber that attached at C since;
    A answered C for its own subscriber from the tombstone. C went silent, and the publisher
    resent it at A: the tombstone's 'accepted' (the older record's, which never owed the
    subscriber at C) must not answer it, and nor must an outcome come before C's part."""
    w = Wire("A", "B", "C", reconnect=1.0)
    subscribe(w, "A", 1)
    w["B"].attach_publisher(9, PUB, "orders/eu", "all")
    publish(w, "B", 9, [b"1"], now=0.1)
    w["B"].detach_publisher(9, final=False, now=0.2)  # its connection dropped
    accept(w, "A", 1, w.take("A", Send), now=0.3)
    late = LinkIdentity("late", "sub/late")
    w["C"].attach_subscriber(7, late, "orders/#", warm_timeout=10.0, now=0.4)
    w["C"].subscriber_credit(7, 100)
    w.pump(0.4)
    w["B"].tick(1.3)  # B gives it up: decided accepted, forgotten, A keeps a tombstone
    w.pump(1.3)
    assert not w["A"].records and not w["B"].records
    assert w["A"].remembered(tag_of(b"1").decode()) is ACCEPTED
    w["C"].attach_publisher(10, PUB, "orders/eu", "all", [b"1"])
    publish(w, "C", 10, [b"1"], now=1.4)
    assert [s.link for s in w.take("C", Send)] == [7]  # new at C: owed to the late one
    assert w.take("A", Send) == [], "A answered for its subscriber from the tombstone"
    assert outcomes(w, "C") == {}
    w.dead.add("C")  # C dies, unnoticed yet
    w["A"].attach_publisher(11, PUB, "orders/eu", "all", [b"1"])
    publish(w, "A", 11, [b"1"], now=1.6)
    assert w.take("A", Send) == [], "A's subscriber accepted it before"
    assert outcomes(w, "A") == {}, "not accepted before the subscriber at C answers"
    w.dead.discard("C")
    w.crash("C", now=2.0)
    w["A"].tick(12.1)  # the late subscriber stays away past its timeout
    w.pump(12.1)
    (outcome,) = outcomes(w, "A").values()
    assert isinstance(outcome, Rejected)
    assert outcome.info["failed"] == ["late/sub/late@C"]


def test_a_late_plain_copy_after_the_record_was_forgotten_is_not_delivered_again() -> None:
    """A plain forward from a message's first origin (B) is held up in the mesh; its
    publisher resumed at A and resent it, D delivered that resend, the subscriber accepted,
    and A and D forgot the record. B's forward then reaches D, which keeps only a tombstone:
    it answers B from that tombstone, and the subscriber does not get the message again."""
    w = Wire("A", "B", "D")
    subscribe(w, "D", 1)
    w["B"].attach_publisher(9, PUB, "orders/eu", "all")
    w["B"].message(9, b"1", b"body 1", now=0.1)
    held = [a for a in w["B"].take_actions() if isinstance(a, Forward)]
    assert len(held) == 1  # B's forward to D, held up behind a restarting hub, say
    w["B"].detach_publisher(9, final=False, now=0.2)  # its connection dropped
    w.pump(0.2)
    w["A"].attach_publisher(10, PUB, "orders/eu", "all", [b"1"])
    publish(w, "A", 10, [b"1"], now=0.3)
    (copy,) = w.take("D", Send)
    accept(w, "D", 1, [copy], now=0.4)
    assert outcomes(w, "A") == {b"1": ACCEPTED}
    w["A"].publisher_settled(10, b"1", now=0.5)
    w.pump(0.5)
    assert not w["A"].records and not w["D"].records
    w._carry("B", held[0], 0.6)  # the late plain copy
    w.pump(0.6)
    assert w.take("D", Send) == [], "delivered again after the subscriber accepted it"


# ---------------------------------------------------------------- at least once


def test_at_least_once_still_waits_for_every_subscriber_across_routers() -> None:
    """What at-least-once keeps: the publisher hears 'accepted' only when every subscriber,
    here and at other routers, accepted."""
    w = Wire("A", "C")
    subscribe(w, "A", 1)
    subscribe(w, "C", 2)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all", once=False)
    publish(w, "A", 9, [b"1"])
    accept(w, "A", 1, w.take("A", Send))
    assert outcomes(w, "A") == {}, "told before the subscriber at C accepted"
    accept(w, "C", 2, w.take("C", Send))
    assert outcomes(w, "A") == {b"1": ACCEPTED}


def test_a_resend_of_a_forgotten_at_least_once_message_is_delivered_again() -> None:
    """What at-least-once drops: the tombstone. The same story as the exactly-once test
    above (`..._is_answered_from_its_tombstone`): here the resend reaches the subscriber
    again, and the publisher hears 'accepted' once it accepted that copy too."""
    w = Wire("A", "B", "C")
    subscribe(w, "C", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all", once=False)
    publish(w, "A", 9, [b"1"])
    accept(w, "C", 1, w.take("C", Send))
    w["A"].publisher_settled(9, b"1")
    w.pump()
    assert not w["C"].records and not w["A"].records
    assert w["A"].remembered(tag_of(b"1").decode()) is None
    w.crash("A", now=1.0)
    w["B"].attach_publisher(7, PUB, "orders/eu", "all", [b"1"], once=False)
    publish(w, "B", 7, [b"1"], now=1.1)
    (again,) = w.take("C", Send)
    assert again.tag == tag_of(b"1")
    assert outcomes(w, "B") == {}
    accept(w, "C", 1, [again], now=1.2)
    assert outcomes(w, "B") == {b"1": ACCEPTED}


def test_a_late_plain_copy_of_an_at_least_once_message_is_delivered_again() -> None:
    """The destination keeps no tombstone of an at-least-once message either (the mesh
    carries the guarantee with the message: `Forward.once`)."""
    w = Wire("A", "D")
    subscribe(w, "D", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all", once=False)
    w["A"].message(9, b"1", b"body 1", now=0.1)
    (held,) = [a for a in w["A"].take_actions() if isinstance(a, Forward)]
    assert held.once is False
    w._carry("A", held, 0.1)
    w.pump(0.1)
    (copy,) = w.take("D", Send)
    accept(w, "D", 1, [copy], now=0.2)
    w["A"].publisher_settled(9, b"1", now=0.3)
    w.pump(0.3)
    assert not w["D"].records and w["D"].remembered(copy.tag.decode()) is None
    w._carry("A", held, 0.4)  # the same forward again, late
    w.pump(0.4)
    assert [s.tag for s in w.take("D", Send)] == [copy.tag]


def test_a_message_annotation_overrides_its_links_guarantee_both_ways() -> None:
    w = Wire("A")
    subscribe(w, "A", 1)
    w["A"].attach_publisher(9, PUB, "orders/eu", "all")  # exactly once
    w["A"].attach_publisher(8, LinkIdentity("shop", "pub/other"), "orders/eu", "all",
                            once=False)
    w["A"].message(9, b"1", b"x", guarantee="at-least-once")
    w["A"].message(8, b"2", b"y", guarantee="exactly-once")
    w["A"].message(9, b"3", b"z", guarantee="bogus")  # not a guarantee: the link's
    assert {r.pub_tag: r.once for r in w["A"].records.values()} == {
        b"1": False, b"2": True, b"3": True}

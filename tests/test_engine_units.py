"""Engine cases too specific for the random state machine to reach often."""

from __future__ import annotations

from typing import Any

from amqp_edge.sdk_core import Failure
from router.core import events as ev
from router.core.actions import ACCEPTED, CloseLink, Decide, Forward, Send
from router.core.engine import Disposition, EngineConfig
from router.core.records import IN_DOUBT, SOME, LinkIdentity, outgoing_tag
from tests.engine_driver import EngineDriver


def sends(engine: EngineDriver) -> list[Send]:
    return [a for a in engine.take_actions() if isinstance(a, Send)]


def test_a_reused_tag_while_the_older_message_is_still_owed_gets_a_distinct_tag() -> None:
    """AMQP lets a publisher reuse a tag once it settled. In mode `some` the older message is
    still owed to a slow subscriber then: the two must not share a tag on its link."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.attach_subscriber(1, LinkIdentity("c", "fast"), "t")
    e.attach_subscriber(2, LinkIdentity("c", "slow"), "t")
    e.subscriber_credit(1, 10)
    e.subscriber_credit(2, 10)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", SOME)
    e.take_actions()
    e.message(9, b"tag", b"first")
    first = sends(e)
    assert [s.link for s in first] == [1, 2]
    e.copy_outcome(1, first[0].tag, Disposition.ACCEPTED, settled=True)
    decided = [a for a in e.take_actions() if isinstance(a, Decide)]
    assert decided and decided[0].outcome is ACCEPTED
    e.publisher_settled(9, b"tag")  # settled: the tag may be used again
    e.message(9, b"tag", b"second")
    second = sends(e)
    assert [s.link for s in second] == [1, 2]
    assert second[0].tag != first[0].tag, "two unsettled copies would share a tag at 'slow'"
    assert first[0].tag == outgoing_tag("c", "pub", b"tag")  # the usual, deterministic tag
    # Each copy is answered on its own, and both records end.
    e.copy_outcome(2, first[1].tag, Disposition.ACCEPTED, settled=True)
    e.copy_outcome(1, second[0].tag, Disposition.ACCEPTED, settled=True)
    e.copy_outcome(2, second[1].tag, Disposition.ACCEPTED, settled=True)
    e.publisher_settled(9, b"tag")
    e.take_actions()
    assert not e.records


def warm_setup() -> EngineDriver:
    e = EngineDriver(EngineConfig(router_id="A", reconnect_timeout=30.0))
    e.attach_subscriber(1, LinkIdentity("app", "warm"), "t", warm_timeout=5.0)
    e.subscriber_credit(1, 10)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.take_actions()
    return e


def test_a_warm_subscriber_gets_what_it_missed_first_and_in_order_when_it_comes_back() -> None:
    e = warm_setup()
    e.message(9, b"1", b"m1")
    (in_doubt,) = sends(e)  # sent, never answered: in doubt when it goes away
    e.detach_subscriber(1, final=False, now=0.0)  # e.g. its connection dropped
    e.message(9, b"2", b"m2")
    e.message(9, b"3", b"m3")
    assert sends(e) == []  # nothing goes anywhere while it is away...
    assert not any(isinstance(a, Decide) for a in e.take_actions())  # ...and nobody is told
    e.attach_subscriber(7, LinkIdentity("app", "warm"), "t", warm_timeout=5.0)  # new link
    e.subscriber_credit(7, 10)
    back = sends(e)
    assert [(s.link, s.payload, s.attempt) for s in back] == [
        (7, b"m1", 1),  # the one in doubt again, as a redelivery, first
        (7, b"m2", 0),
        (7, b"m3", 0),
    ]
    assert back[0].tag == in_doubt.tag
    for s in back:
        e.copy_outcome(7, s.tag, Disposition.ACCEPTED, settled=True)
    decided = [a for a in e.take_actions() if isinstance(a, Decide)]
    assert [d.outcome for d in decided] == [ACCEPTED] * 3


def test_a_warm_subscriber_that_does_not_come_back_in_time_fails_naming_it() -> None:
    e = warm_setup()
    e.message(9, b"1", b"m1")
    sends(e)
    e.detach_subscriber(1, final=False, now=10.0)
    assert e.next_deadline() == 15.0
    e.tick(14.9)
    assert not any(isinstance(a, Decide) for a in e.take_actions())
    e.tick(15.0)
    (decided,) = [a for a in e.take_actions() if isinstance(a, Decide)]
    assert decided.outcome.condition == "exactmesh:delivery-failed"
    assert "app/warm@A did not come back within 5 s" in decided.outcome.description


def test_closing_the_link_ends_even_a_warm_subscription() -> None:
    e = warm_setup()
    e.message(9, b"1", b"m1")
    sends(e)
    e.detach_subscriber(1, final=True, now=0.0)
    (decided,) = [a for a in e.take_actions() if isinstance(a, Decide)]
    assert "detached before accepting it" in decided.outcome.description


def _failure(e: EngineDriver) -> Any:
    (decided,) = [a for a in e.take_actions() if isinstance(a, Decide)]
    assert decided.outcome.condition == "exactmesh:delivery-failed"
    return decided.outcome


def test_only_a_subscriber_that_said_no_fails_for_certain() -> None:
    """docs/guarantees.md, "Failed, or in doubt": one that rejected it said so; one that
    left with the message on its link may have processed it (its answer died with the link),
    and one that left before it was sent here may have got it through another router before
    it moved: both are in doubt."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.attach_subscriber(1, LinkIdentity("app", "sent"), "t")
    e.subscriber_credit(1, 10)
    e.attach_subscriber(2, LinkIdentity("app", "queued"), "t")  # no credit: never sent
    e.attach_subscriber(3, LinkIdentity("app", "rejects"), "t")
    e.subscriber_credit(3, 10)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", SOME)  # decided when all are done
    e.message(9, b"1", b"m1")
    to_3 = [s for s in sends(e) if s.link == 3]
    e.copy_outcome(3, to_3[0].tag, Disposition.REJECTED, settled=True)
    e.detach_subscriber(1)
    e.detach_subscriber(2)
    out = _failure(e)
    assert sorted(out.info["failed"]) == ["app/queued@A", "app/rejects@A", "app/sent@A"]
    assert sorted(out.info[IN_DOUBT]) == ["app/queued@A", "app/sent@A"]
    assert "In doubt (it may have processed the message; its answer was lost): " \
        in out.description
    assert sorted(Failure(1, out.condition, out.description).in_doubt) == [
        "app/queued@A", "app/sent@A"]


def test_a_remote_part_is_in_doubt_unless_its_router_says_it_failed_for_certain() -> None:
    """The origin gives up a router that had the message: in doubt (it may have been
    delivered and accepted, the verdict lost in the partition). A verdict passes on which of
    its router's subscribers are in doubt; the others failed for certain."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.remote_subscriber_added("B", "app/far", "t")
    e.remote_subscriber_added("C", "app/other", "t")
    e.remote_subscriber_added("C", "app/refuses", "t")
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", SOME)  # decided when all are done
    e.message(9, b"1", b"m1")
    (fwd,) = [a for a in e.take_actions() if isinstance(a, Forward)]
    e.peer_lost("B", "was on router B, unreachable for 30 s")
    assert not any(isinstance(a, Decide) for a in e.take_actions())  # C still pending
    failed = ["app/other@C", "app/refuses@C"]
    e.peer_verdict("C", fwd.msg_id, False, {"succeeded": [], "failed": failed, "pending": [],
                                            "reasons": dict.fromkeys(failed, "x"),
                                            IN_DOUBT: ["app/other@C"]})
    out = _failure(e)
    assert sorted(out.info[IN_DOUBT]) == ["app/far@B", "app/other@C"]


def test_a_late_verdict_resolves_a_part_in_doubt_after_the_record_is_forgotten() -> None:
    """Issue 18, item 4: the partition heals and the subscriber's router, which remembers
    what it decided, sends its verdict long after the publisher was told. The origin keeps
    failures with subscribers in doubt (router/core/doubts.py) and resolves each from what
    its router says: accepted (it processed the message) or not (it failed for certain
    there); one its router does not know either stays in doubt."""
    e = EngineDriver(EngineConfig(router_id="A"))
    for router, key in (("B", "app/got"), ("B", "app/missed"), ("C", "app/unsure")):
        e.remote_subscriber_added(router, key, "t")
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.message(9, b"1", b"m1")
    (fwd,) = [a for a in e.take_actions() if isinstance(a, Forward)]
    e.peer_lost("B", "was on router B, unreachable for 3 s")
    e.peer_lost("C", "was on router C, unreachable for 3 s")
    out = _failure(e)  # decided at B's loss (mode 'all'): C was pending then
    assert sorted(out.info[IN_DOUBT]) == ["app/got@B", "app/missed@B"]
    e.publisher_settled(9, b"1")
    e.take_actions()
    assert not e.records and e.engine.find(fwd.msg_id) is None
    doubt = e.engine.doubt(fwd.msg_id)
    assert doubt is not None and doubt.condition == out.condition
    assert doubt.still_in_doubt() == ["app/got@B", "app/missed@B", "app/unsure@C"]
    # B heals: one of its subscribers accepted, the other never got the message.
    e.peer_verdict("B", fwd.msg_id, False, {
        "succeeded": ["app/got@B"], "failed": ["app/missed@B"], "pending": [],
        "reasons": {"app/missed@B": "detached before accepting it"}})
    # C lost the answer too: its subscriber left with the copy on its link.
    e.peer_verdict("C", fwd.msg_id, False, {
        "succeeded": [], "failed": ["app/unsure@C"], "pending": [],
        "reasons": {"app/unsure@C": "left"}, IN_DOUBT: ["app/unsure@C"]})
    assert doubt.resolved == {
        "app/got@B": {"accepted": True, "router": "B", "reason": None},
        "app/missed@B": {"accepted": False, "router": "B",
                         "reason": "detached before accepting it"}}
    assert doubt.still_in_doubt() == ["app/unsure@C"]
    assert not e.take_actions()  # the publisher was told already: nothing more to do


def test_a_late_verdict_resolves_a_part_in_doubt_while_the_record_is_still_live() -> None:
    """The same late verdict, come before the publisher settled: the live record keeps the
    resolution (its status shows it), and the ledger entry made when it is forgotten starts
    from it, so the answer is not lost for having come early."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.remote_subscriber_added("B", "app/got", "t")
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.message(9, b"1", b"m1")
    (fwd,) = [a for a in e.take_actions() if isinstance(a, Forward)]
    e.peer_lost("B", "was on router B, unreachable for 3 s")
    assert _failure(e).info[IN_DOUBT] == ["app/got@B"]
    e.peer_verdict("B", fwd.msg_id, True, {})  # B heals: its subscriber had accepted it
    rec = e.engine.find(fwd.msg_id)
    assert rec is not None
    said = {"app/got@B": {"accepted": True, "router": "B", "reason": None}}
    assert rec.resolved == said
    assert not e.take_actions()  # the publisher's answer stands
    e.publisher_settled(9, b"1")
    e.take_actions()
    doubt = e.engine.doubt(fwd.msg_id)
    assert doubt is not None and doubt.resolved == said and doubt.still_in_doubt() == []


def test_doubts_are_bounded_and_kept_only_for_failures_with_someone_in_doubt() -> None:
    e = EngineDriver(EngineConfig(router_id="A", doubts_kept=2))
    e.remote_subscriber_added("B", "app/far", "t")
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    ids = []
    for n in range(3):
        tag = b"%d" % n
        e.message(9, tag, b"m")
        (fwd,) = [a for a in e.take_actions() if isinstance(a, Forward)]
        ids.append(fwd.msg_id)
        e.peer_verdict("B", fwd.msg_id, n == 0, {})  # the first accepted, the others failed
        e.publisher_settled(9, tag)
        e.take_actions()
    assert e.engine.doubt(ids[0]) is None  # accepted: nothing in doubt
    e.remote_subscriber_added("B", "app/far", "t")
    for n in range(3, 6):
        tag = b"%d" % n
        e.message(9, tag, b"m")
        (fwd,) = [a for a in e.take_actions() if isinstance(a, Forward)]
        ids.append(fwd.msg_id)
        e.peer_lost("B", "was on router B, unreachable for 3 s")
        e.publisher_settled(9, tag)
        e.take_actions()
        e.remote_subscriber_added("B", "app/far", "t")
    assert [e.engine.doubt(i) is not None for i in ids[3:]] == [False, True, True]


def test_a_withheld_copy_counts_as_accepted_and_gives_its_credit_back() -> None:
    """An edge that may not send a copy (its subscriber may not read the topic: the ACL,
    docs/security.md) withholds it: the publisher hears accepted, and the credit the copy
    took carries the next message."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.attach_subscriber(1, LinkIdentity("app", "wide"), "#")
    e.subscriber_credit(1, 1)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.message(9, b"1", b"secret", address="secret/x")
    e.message(9, b"2", b"news", address="news/x")
    (first,) = sends(e)
    e.handle(ev.CopyWithheld(e.now, 1, first.tag, first.settled))
    actions = e.take_actions()
    assert [a.tag for a in actions if isinstance(a, Decide) and a.outcome is ACCEPTED] == [b"1"]
    (second,) = [a for a in actions if isinstance(a, Send)]
    assert second.address == "news/x"


def test_a_router_joining_the_mesh_holds_guaranteed_messages_then_routes_them_in_order() -> None:
    """Between MeshJoining and MeshJoined, a message waits (counted in its publisher's
    window); then it goes to the subscribers known by then, the remote one the join taught
    included. A pre-settled message waits too, behind its publisher's earlier ones: passed
    on at once, it overtook them (simulator, failover seed 1342, with the join wait)."""
    e = EngineDriver(EngineConfig(router_id="B", publisher_window=6))
    e.handle(ev.MeshJoining(0.0))
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.take_actions()
    for i in range(4):
        e.message(9, b"%d" % i, b"m%d" % i)
    e.message(9, b"q", b"qos0", settled=True)
    assert e.joining() == 5
    assert not any(isinstance(a, Send | Forward | Decide) for a in e.take_actions())
    assert e.publishers[9].live == 5  # in the window: no more credit for them
    e.remote_subscriber_added("A", "app/far", "t")
    e.handle(ev.MeshJoined(1.0))
    fwd = [a for a in e.take_actions() if isinstance(a, Forward)]
    assert [f.payload for f in fwd] == [b"m0", b"m1", b"m2", b"m3", b"qos0"]
    assert e.joining() is None


def test_past_the_join_timeout_messages_fail_for_certain_until_the_router_joins() -> None:
    e = EngineDriver(EngineConfig(router_id="B"))
    e.handle(ev.MeshJoining(0.0))
    e.attach_subscriber(1, LinkIdentity("app", "near"), "t")
    e.subscriber_credit(1, 10)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.message(9, b"1", b"waited")
    e.message(9, b"q", b"qos0", settled=True)  # waits behind it, then goes as it would now
    e.take_actions()
    e.handle(ev.MeshJoinTimedOut(30.0, "not routed: because"))
    acts = e.take_actions()
    assert [a.payload for a in acts if isinstance(a, Send)] == [b"qos0"]  # at most once
    e.message(9, b"2", b"after")
    acts += e.take_actions()
    assert not any(isinstance(a, Send) and a.payload != b"qos0" for a in acts)  # nor these
    decided = [a for a in acts if isinstance(a, Decide)]
    assert [d.tag for d in decided] == [b"1", b"2"]
    assert all(d.outcome.description == "not routed: because" for d in decided)
    assert decided[0].outcome.condition == "exactmesh:delivery-failed"
    assert not Failure(1, decided[0].outcome.condition, decided[0].outcome.description).in_doubt
    e.handle(ev.MeshJoined(31.0))
    e.message(9, b"3", b"routed")
    assert [s.payload for s in sends(e)] == [b"routed"]


def test_a_late_transfer_on_a_link_its_publisher_gave_up_is_not_published_again() -> None:
    """The publisher gave up its silent connection here and resent through router B, which
    forwarded the message here; then the transfer it had written to the old connection
    arrives (the partition healed, or this router was paused with it in its socket buffer).
    It is the same message (identity, tag, body): the old link is closed as stolen, and
    nothing is published twice (test bed finding 2)."""
    e = EngineDriver(EngineConfig(router_id="A"))
    e.attach_subscriber(1, LinkIdentity("app", "sub"), "t")
    e.subscriber_credit(1, 10)
    e.attach_publisher(9, LinkIdentity("c", "pub"), "t", "all")
    e.take_actions()
    msg_id = outgoing_tag("c", "pub", b"7").decode()
    e.remote_message("B", msg_id, "t", b"m7", owed=["app/sub"], mode="all", ttl_ms=None)
    (first,) = sends(e)
    e.message(9, b"7", b"m7")  # late, on the link it gave up
    acts = e.take_actions()
    assert not any(isinstance(a, Send | Forward) for a in acts), acts
    (close,) = [a for a in acts if isinstance(a, CloseLink)]
    assert close.link == 9 and close.condition == "amqp:link:stolen"
    assert "through router B" in close.description
    # Another body under the same tag is another message (a tag reused): published, salted.
    e.attach_publisher(10, LinkIdentity("c", "pub"), "t", "all")
    e.message(10, b"7", b"other")
    (second,) = sends(e)
    assert second.tag != first.tag


def test_a_restarted_router_owes_the_warm_subscribers_of_its_previous_run() -> None:
    """A peer that holds our previous run's warm subscriber as away tells us (AwayLearned):
    what is published here meanwhile is owed to it and waits, and it gets it when it comes
    back here (test bed finding 6). The peer's side: `away_from` lists it."""
    peer = EngineDriver(EngineConfig(router_id="B"))
    peer.remote_subscriber_added("A", "m1/mqtt/t", "t", gen=1, timeout=600.0)
    peer.peer_lost("A", "was on router A, which restarted", restarted=True)
    (entry,) = peer.away_from("A")
    assert entry[0] == "m1/mqtt/t" and entry[1] == "t" and entry[2] == 600.0
    e = EngineDriver(EngineConfig(router_id="A"))  # A's new run
    e.handle(ev.AwayLearned(0.0, [entry]))
    e.attach_publisher(9, LinkIdentity("q1", "mqtt"), "t", "all")
    e.message(9, b"1", b"while it was away")
    assert not any(isinstance(a, Decide) for a in e.take_actions())  # owed: waits for it
    e.attach_subscriber(1, LinkIdentity("m1", "mqtt/t"), "t", warm_timeout=600.0)
    e.subscriber_credit(1, 10)
    assert [s.payload for s in sends(e)] == [b"while it was away"]

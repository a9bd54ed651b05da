"""The engine with a relay store (docs/relay.md), through its one entry point: a copy for a
warm subscriber that is away is stored (`Hold`, then `Held` once committed); a record whose
every pending copy is stored gives its publisher's window place back and drops its body; a
publisher whose acknowledgement counts stored copies (MQTT) is answered then, any other only
when the subscriber itself accepted. Invariants are checked after every event."""

from __future__ import annotations

from typing import Any

from router.core import events as ev
from router.core.actions import ACCEPTED, Credit, Decide, Hold, Send, Unhold
from router.core.engine import Disposition, EngineConfig
from router.core.records import LinkIdentity
from tests.engine_driver import EngineDriver

PUB, SUB = 9, 1


def setup(stored_enough: bool, window: int = 256, limit: int = 100_000,
          relay_store: bool = True) -> EngineDriver:
    e = EngineDriver(EngineConfig(router_id="A", publisher_window=window, check_invariants=True,
                                  relay_store=relay_store, relay_waiting_limit=limit))
    e.attach_subscriber(SUB, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(SUB, 10)
    e.handle(ev.PublisherAttached(0.0, PUB, LinkIdentity("p", "mqtt"), "t", "all", None,
                                  stored_enough))
    e.take_actions()
    e.detach_subscriber(SUB, final=False, now=1.0)  # away: its connection dropped
    return e


def of(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def store(e: EngineDriver, actions: list[Any]) -> list[Any]:
    """What the node loop does: commit the holds, then tell the engine."""
    holds = of(actions, Hold)
    e.handle(ev.Held(e.engine.now, [(h.sid, h.seq) for h in holds]))
    return e.take_actions()


def credit(actions: list[Any]) -> int:
    return sum(c.amount for c in of(actions, Credit))


def test_an_mqtt_publisher_is_answered_once_the_copy_is_stored_and_not_again() -> None:
    e = setup(stored_enough=True)
    e.message(PUB, b"1", b"m1")
    first = e.take_actions()
    (hold,) = of(first, Hold)
    assert (hold.key, hold.payload, hold.address) == ("dev/mqtt/t", b"m1", "t")
    assert of(first, Decide) == []  # not before the store committed it
    after = store(e, first)
    (decided,) = of(after, Decide)
    assert decided.outcome is ACCEPTED and decided.tag == b"1"
    rec = e.find(hold.msg_id)
    assert rec is not None and rec.payload == b"" and rec.released  # the body is in the store
    e.publisher_settled(PUB, b"1")  # QoS 1: PUBACK settles at once
    assert e.find(hold.msg_id) is rec, "a settled early answer must not withdraw the copy"
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 10)
    (send,) = of(e.take_actions(), Send)
    assert send.payload == b"" and send.tag.decode() == hold.msg_id  # read from the store
    e.copy_outcome(7, send.tag, Disposition.ACCEPTED, settled=True)
    done = e.take_actions()
    assert of(done, Decide) == [], "the publisher was answered already"
    assert [u.msg_id for u in of(done, Unhold)] == [hold.msg_id]
    assert e.find(hold.msg_id) is None
    assert e.stats.stored == 1 and e.stats.released == 1


def test_an_amqp_publisher_gets_its_window_back_but_its_outcome_only_on_acceptance() -> None:
    e = setup(stored_enough=False, window=4)
    for i in range(4):
        e.message(PUB, b"%d" % i, b"m%d" % i)
    after = store(e, e.take_actions())
    assert of(after, Decide) == []  # stored is not accepted
    assert credit(after) == 4  # but the four window places are back
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 10)
    sends = of(e.take_actions(), Send)
    assert len(sends) == 4
    for s in sends:
        e.copy_outcome(7, s.tag, Disposition.ACCEPTED, settled=True)
    decided = of(e.take_actions(), Decide)
    assert [d.tag for d in decided] == [b"0", b"1", b"2", b"3"]
    assert all(d.outcome is ACCEPTED for d in decided)


def test_without_a_store_the_publisher_waits_for_the_absent_subscriber() -> None:
    """The rule without a relay store, unchanged: the window fills and nothing is told."""
    e = setup(stored_enough=True, window=4, relay_store=False)
    for i in range(4):
        e.message(PUB, b"%d" % i, b"m%d" % i)
    actions = e.take_actions()
    assert of(actions, Hold) == [] and of(actions, Decide) == [] and credit(actions) == 0


def test_the_waiting_limit_brings_back_pressure_and_lets_go_as_room_comes() -> None:
    e = setup(stored_enough=True, window=10, limit=2)
    for i in range(3):
        e.message(PUB, b"%d" % i, b"m%d" % i)
    after = store(e, e.take_actions())
    assert [d.tag for d in of(after, Decide)] == [b"0", b"1"]  # the third waits for room
    for tag in (b"0", b"1"):
        e.publisher_settled(PUB, tag)
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 1)
    (first,) = of(e.take_actions(), Send)
    e.copy_outcome(7, first.tag, Disposition.ACCEPTED, settled=True)
    # m0 is done, so m2 is released: answered early (it is still queued for the client).
    assert [d.tag for d in of(e.take_actions(), Decide)] == [b"2"]


def test_a_registration_that_ends_fails_the_stored_copies_without_telling_mqtt_again() -> None:
    e = setup(stored_enough=True)
    e.message(PUB, b"1", b"m1")
    (hold,) = of(e.take_actions(), Hold)
    e.handle(ev.Held(1.0, [(hold.sid, hold.seq)]))
    assert len(of(e.take_actions(), Decide)) == 1
    e.publisher_settled(PUB, b"1")
    e.tick(1.0 + 3600.0)
    ended = e.take_actions()
    assert of(ended, Decide) == []  # MQTT was told PUBACK; the failure is counted
    assert e.stats.early_failed == 1
    assert [u.msg_id for u in of(ended, Unhold)] == [hold.msg_id]
    assert e.find(hold.msg_id) is None


def test_a_copy_stored_after_its_subscriber_came_back_is_sent_with_its_body() -> None:
    """The store's commit and the client's return race: the copy is sent from memory (the
    record was never released), and stored or not it counts once."""
    e = setup(stored_enough=True)
    e.message(PUB, b"1", b"m1")
    (hold,) = of(e.take_actions(), Hold)
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 10)
    (send,) = of(e.take_actions(), Send)
    assert send.payload == b"m1"
    e.handle(ev.Held(1.0, [(hold.sid, hold.seq)]))  # committed meanwhile: in doubt, SENT
    (early,) = of(e.take_actions(), Decide)
    e.copy_outcome(7, send.tag, Disposition.ACCEPTED, settled=True)
    assert of(e.take_actions(), Decide) == []
    assert early.outcome is ACCEPTED


def test_copies_in_doubt_when_the_subscriber_leaves_are_stored_too() -> None:
    e = setup(stored_enough=True)
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 10)
    e.take_actions()
    e.message(PUB, b"1", b"m1")
    assert len(of(e.take_actions(), Send)) == 1 and not e.take_actions()
    e.detach_subscriber(7, final=False, now=2.0)
    (hold,) = of(e.take_actions(), Hold)
    assert hold.payload == b"m1"
    assert len(of(store(e, [hold]), Decide)) == 1


def test_a_present_subscriber_with_its_window_full_gets_its_waiting_copies_stored() -> None:
    """The issue's deadlock: a client subscribed to its own topic with Receive Maximum 1
    publishes before acknowledging what it receives. Its window is full with its first
    message: that copy and every later one are stored, so each publish is answered, and the
    client can go on to acknowledge what it got."""
    e = setup(stored_enough=True)
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 1)  # its Receive Maximum
    e.take_actions()
    e.message(PUB, b"1", b"m1")
    first = e.take_actions()
    (sent,) = of(first, Send)
    assert [h.payload for h in of(first, Hold)] == [b"m1"]  # the window is full: stored
    assert [d.tag for d in of(store(e, first), Decide)] == [b"1"]
    e.message(PUB, b"2", b"m2")
    second = e.take_actions()
    assert of(second, Send) == []
    (hold,) = of(second, Hold)
    assert [d.tag for d in of(store(e, second), Decide)] == [b"2"]
    e.copy_outcome(7, sent.tag, Disposition.ACCEPTED, settled=True)
    e.subscriber_credit(7, 1)
    after = e.take_actions()
    assert of(after, Decide) == []  # answered already
    (send2,) = of(after, Send)
    assert send2.payload == b"" and send2.tag.decode() == hold.msg_id  # from the store
    e.publisher_settled(PUB, b"2")  # the PUBACK settled it (QoS 1)
    e.copy_outcome(7, send2.tag, Disposition.ACCEPTED, settled=True)
    assert [u.msg_id for u in of(e.take_actions(), Unhold)] == [hold.msg_id]


def test_a_present_subscriber_with_room_is_not_stored_for() -> None:
    """The common case costs no store write: copies to a subscriber with credit go out."""
    e = setup(stored_enough=True)
    e.attach_subscriber(7, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    e.subscriber_credit(7, 10)
    e.take_actions()
    for i in range(5):
        e.message(PUB, b"%d" % i, b"m")
    actions = e.take_actions()
    assert len(of(actions, Send)) == 5 and of(actions, Hold) == []


def test_a_copy_stored_at_another_router_counts_at_the_origin() -> None:
    """The subscriber is away from router B, whose store holds the copy: B tells the origin
    (StoredAt), whose MQTT publisher is answered and whose window place comes back; the
    body stays at the origin, whose own store does not have it."""
    from router.core.actions import Forward, StoredAt

    a = EngineDriver(EngineConfig(router_id="A", check_invariants=True, relay_store=True))
    a.remote_subscriber_added("B", "dev/mqtt/t", "t", 1, 3600.0)
    a.handle(ev.PublisherAttached(0.0, PUB, LinkIdentity("p", "mqtt"), "t", "all", None, True))
    a.take_actions()
    a.message(PUB, b"1", b"m1")
    (fwd,) = of(a.take_actions(), Forward)
    b = EngineDriver(EngineConfig(router_id="B", check_invariants=True, relay_store=True))
    b.attach_subscriber(SUB, LinkIdentity("dev", "mqtt/t"), "t", warm_timeout=3600.0)
    b.detach_subscriber(SUB, final=False, now=0.5)
    b.take_actions()
    b.remote_message("A", fwd.msg_id, "t", fwd.payload, owed=["dev/mqtt/t"], mode="all",
                     ttl_ms=None)
    told = of(store(b, b.take_actions()), StoredAt)
    assert [(t.origin, t.msg_id, t.keys) for t in told] == [("A", fwd.msg_id, ["dev/mqtt/t"])]
    a.handle(ev.PeerStored(1.0, "B", fwd.msg_id, ["dev/mqtt/t"]))
    (decided,) = of(a.take_actions(), Decide)
    assert decided.outcome is ACCEPTED
    rec = a.find(fwd.msg_id)
    assert rec is not None and rec.released and rec.payload == b"m1"  # not in A's store
    a.handle(ev.PeerStored(1.0, "C", fwd.msg_id, ["dev/mqtt/t"]))  # not owed there: ignored
    assert a.take_actions() == []

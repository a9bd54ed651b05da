"""Shared subscriptions in the delivery engine (router/core/groups.py): a group counts as one
subscriber for its publisher, each message goes to one member, and a member that leaves
without answering hands what it had to another member."""

from __future__ import annotations

from collections import Counter

import pytest

from router.core.actions import ACCEPTED, Decide, Forward, Send
from router.core.engine import Disposition, EngineConfig
from router.core.records import LinkIdentity, outgoing_tag
from router.core.topics import TopicError, split_shared
from tests.engine_driver import EngineDriver

GROUP = "$share/workers/jobs/#"


def _engine() -> EngineDriver:
    d = EngineDriver(EngineConfig(router_id="A", check_invariants=True))
    d.attach_publisher(1, LinkIdentity("pub", "p"), "jobs/a", "all")
    return d


def _sends(actions: list) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


def _decides(actions: list) -> list[Decide]:
    return [a for a in actions if isinstance(a, Decide)]


def test_split_shared() -> None:
    """MQTT-4.8.2-1, MQTT-4.8.2-2: `$share/`, a share name of at least one character with no
    '/', '+' or '#', then '/' and a valid filter."""
    assert split_shared("jobs/#") is None
    assert split_shared(GROUP) == ("workers", "jobs/#")
    for bad in ("$share//a", "$share/+/a", "$share/g", "$share/g/", "$share/g/a/#/b"):
        with pytest.raises(TopicError):
            split_shared(bad)


def test_each_message_goes_to_one_member_and_counts_once() -> None:
    d = _engine()
    for link in (10, 11, 12):
        d.attach_subscriber(link, LinkIdentity(f"m{link}", "s"), GROUP)
        d.subscriber_credit(link, 100)
    d.attach_subscriber(20, LinkIdentity("plain", "s"), "jobs/#")
    d.subscriber_credit(20, 100)
    d.take_actions()
    # Credit for the publisher: the engine grants its window on attach.
    for i in range(60):
        d.message(1, b"t%d" % i, b"x")
    sends = _sends(d.take_actions())
    per_link = Counter(s.link for s in sends)
    assert per_link[20] == 60  # a plain subscriber gets everything
    assert sum(per_link[m] for m in (10, 11, 12)) == 60  # the group gets each message once
    assert all(per_link[m] > 5 for m in (10, 11, 12))  # spread over its members
    for s in sends:
        d.copy_outcome(s.link, s.tag, Disposition.ACCEPTED, settled=True)
    decides = _decides(d.take_actions())
    assert len(decides) == 60 and all(x.outcome is ACCEPTED for x in decides)


def test_a_member_that_leaves_hands_its_messages_to_another() -> None:
    d = _engine()
    for link in (10, 11):
        d.attach_subscriber(link, LinkIdentity(f"m{link}", "s"), GROUP)
        d.subscriber_credit(link, 100)
    d.take_actions()
    for i in range(20):
        d.message(1, b"t%d" % i, b"x")
    sends = _sends(d.take_actions())
    to_10 = [s for s in sends if s.link == 10]
    assert to_10 and len(to_10) < 20
    for s in sends:
        if s.link == 11:
            d.copy_outcome(11, s.tag, Disposition.ACCEPTED, settled=True)
    d.take_actions()
    d.detach_subscriber(10)  # gone without answering
    again = _sends(d.take_actions())
    assert sorted(s.tag for s in again) == sorted(s.tag for s in to_10)
    assert {s.link for s in again} == {11}
    for s in again:
        d.copy_outcome(11, s.tag, Disposition.ACCEPTED, settled=True)
    decides = _decides(d.take_actions())
    assert len(decides) == len(to_10) and all(x.outcome is ACCEPTED for x in decides)


def test_a_rejection_is_the_groups_answer() -> None:
    """MQTT-4.8.2-6: a member's refusal (a PUBACK / PUBREC of 0x80 or more is a reject here)
    is not tried on another member."""
    d = _engine()
    for link in (10, 11):
        d.attach_subscriber(link, LinkIdentity(f"m{link}", "s"), GROUP)
        d.subscriber_credit(link, 100)
    d.take_actions()
    d.message(1, b"t", b"x")
    (s,) = _sends(d.take_actions())
    d.copy_outcome(s.link, s.tag, Disposition.REJECTED, settled=True)
    actions = d.take_actions()
    assert not _sends(actions)
    (decide,) = _decides(actions)
    assert decide.outcome is not ACCEPTED


def test_last_member_leaving_fails_the_message() -> None:
    d = _engine()
    d.attach_subscriber(10, LinkIdentity("m10", "s"), GROUP)
    d.subscriber_credit(10, 100)
    d.take_actions()
    d.message(1, b"t", b"x")
    d.take_actions()
    d.detach_subscriber(10)
    (decide,) = _decides(d.take_actions())
    assert decide.outcome is not ACCEPTED


def test_remote_members_are_chosen_and_replaced() -> None:
    d = _engine()
    d.remote_subscriber_added("B", "mb/s", GROUP)
    d.remote_subscriber_added("C", "mc/s", GROUP)
    d.take_actions()
    d.message(1, b"t", b"x")
    (fwd,) = [a for a in d.take_actions() if isinstance(a, Forward)]
    ((router, keys),) = fwd.owed.items()
    other = "C" if router == "B" else "B"
    d.peer_verdict(router, fwd.msg_id, False,
                   {"failed": [f"{keys[0]}@{router}"],
                    "reasons": {f"{keys[0]}@{router}": "detached before accepting it"}})
    actions = d.take_actions()
    assert not _decides(actions)
    (fwd2,) = [a for a in actions if isinstance(a, Forward)]
    assert list(fwd2.owed) == [other]
    d.peer_verdict(other, fwd.msg_id, True, {})
    (decide,) = _decides(d.take_actions())
    assert decide.outcome is ACCEPTED


QOS2 = 2  # the subscription options byte of an MQTT QoS 2 subscription


def test_qos2_member_in_doubt_is_not_replaced() -> None:
    """MQTT-4.8.2-5: a QoS 2 member whose session ended with a message sent and not answered
    may have processed it: no other member is sent it, and the publisher is told it failed.
    What it had not been sent yet goes to another member."""
    d = _engine()
    d.attach_subscriber(10, LinkIdentity("m10", "s"), GROUP, qos=QOS2)
    d.attach_subscriber(11, LinkIdentity("m11", "s"), GROUP, qos=QOS2)
    d.subscriber_credit(10, 1)
    d.take_actions()
    tags = []
    for i in range(40):
        d.message(1, b"t%d" % i, b"x")
        tags.append(b"t%d" % i)
    sent = _sends(d.take_actions())
    assert [s.link for s in sent] == [10]  # one sent to m10; m11 has no credit yet
    owed_10 = [r for r in d.engine.records.values()
               if any(c.sub.key == "m10/s" for c in r.copies.values())]
    assert len(owed_10) > 1  # one sent, the others queued behind it
    d.detach_subscriber(10)
    actions = d.take_actions()
    (failed,) = _decides(actions)
    assert failed.outcome is not ACCEPTED and "in doubt" in failed.outcome.description
    d.subscriber_credit(11, 100)
    again = _sends(d.take_actions())
    assert len(again) == 39  # every other message, the queued ones of m10 among them
    assert sent[0].tag not in {s.tag for s in again}


def test_qos2_member_that_comes_back_completes_the_delivery() -> None:
    """MQTT-4.8.2-4: a QoS 2 member with a persistent session whose connection broke gets the
    message it had in flight again when it reconnects; no other member is sent it."""
    d = _engine()
    d.attach_subscriber(10, LinkIdentity("m10", "s"), GROUP, warm_timeout=60, qos=QOS2)
    d.attach_subscriber(11, LinkIdentity("m11", "s"), GROUP, qos=QOS2)
    d.subscriber_credit(10, 1)
    d.take_actions()
    sends: list[Send] = []
    for i in range(20):  # until one is chosen for m10 (the choice is a hash of the id)
        d.message(1, b"t%d" % i, b"x")
        sends = _sends(d.take_actions())
        if sends:
            break
    (sent,) = sends
    assert sent.link == 10
    d.detach_subscriber(10, final=False)  # the connection broke: the session lives on
    d.subscriber_credit(11, 100)
    assert sent.tag not in {x.tag for x in _sends(d.take_actions())}
    d.attach_subscriber(12, LinkIdentity("m10", "s"), GROUP, warm_timeout=60, qos=QOS2)
    d.subscriber_credit(12, 10)
    again = _sends(d.take_actions())
    assert again[0].link == 12 and again[0].tag == sent.tag and again[0].attempt == 1


def test_a_warm_member_of_a_lost_router_is_chosen_only_when_nobody_is_attached() -> None:
    """A member with a persistent session at a router that restarted is away: new messages go
    to attached members; with none attached, one waits for it (its part has no router)."""
    d = _engine()
    d.remote_subscriber_added("B", "mb/s", GROUP, timeout=60.0)
    d.remote_subscriber_added("C", "mc/s", GROUP)
    d.peer_lost("B", "restarted", restarted=True)
    d.take_actions()
    for i in range(10):
        d.message(1, b"t%d" % i, b"x")
    owed = [list(a.owed) for a in d.take_actions() if isinstance(a, Forward)]
    assert owed == [["C"]] * 10
    d.remote_subscriber_removed("C", "mc/s")
    d.take_actions()
    d.message(1, b"later", b"x")
    rec = d.engine.find(outgoing_tag("pub", "p", b"later").decode())
    assert rec is not None and list(rec.peers) == ["mb/s"] and rec.peers["mb/s"].router is None

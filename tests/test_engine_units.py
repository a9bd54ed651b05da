"""Engine cases too specific for the random state machine to reach often."""

from __future__ import annotations

from router.actions import ACCEPTED, Decide, Send
from router.engine import Disposition, Engine, EngineConfig
from router.records import SOME, LinkIdentity, outgoing_tag


def sends(engine: Engine) -> list[Send]:
    return [a for a in engine.take_actions() if isinstance(a, Send)]


def test_a_reused_tag_while_the_older_message_is_still_owed_gets_a_distinct_tag() -> None:
    """AMQP lets a publisher reuse a tag once it settled. In mode `some` the older message is
    still owed to a slow subscriber then: the two must not share a tag on its link."""
    e = Engine(EngineConfig(router_id="A"))
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

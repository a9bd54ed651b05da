"""The delivery engine alone, driven by hypothesis through random interleavings of attach,
detach, publish, accept, reject, release, settle, credit and time passing.

A model of the clients plays publishers and subscribers from the actions the engine returns,
and checks after every step:
- a publisher is told `accepted` only when every subscriber that matched when its message
  arrived accepted it (mode all), or at least one did (mode some);
- each publisher delivery gets at most one outcome;
- no subscriber gets a copy twice except a redelivery it asked for (released/modified), and
  redeliveries carry the right attempt number;
- first deliveries from one publisher reach each subscriber in publish order;
- no subscriber gets a message published before it attached;
- once every client has answered and settled, the engine holds no record at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from router.core.actions import (
    Accepted,
    CloseLink,
    Credit,
    Decide,
    Rejected,
    Send,
    SettleCopy,
    Subscribed,
)
from router.core.engine import Disposition, EngineConfig
from router.core.records import ALL, SOME, LinkIdentity, outgoing_tag
from router.core.topics import matches
from tests.engine_driver import EngineDriver

TOPICS = ["a", "a/b", "b"]
FILTERS = ["a", "a/#", "+", "#", "a/+", "b", "c"]
WINDOW = 4
MAX_ATTEMPTS = 3
WARM_TIMEOUT = 5.0


@dataclass
class Msg:
    pub: int
    tag: bytes
    seq: int  # publish order on its link
    matched: frozenset[int]
    mode: str
    presettled: bool
    outcome: object = None
    accepted_by: set[int] = field(default_factory=set)
    released_by: dict[int, int] = field(default_factory=dict)  # sub -> releases so far


@dataclass
class SubModel:
    filter: str
    sid: int  # the engine's number for it: its first link, kept when a warm one comes back
    warm: bool = False
    away_until: float = 0.0  # while a warm subscriber is away: when the router gives up on it
    credit: int = 0
    unanswered: list[bytes] = field(default_factory=list)  # sent, not answered, in order
    sends: dict[bytes, int] = field(default_factory=dict)  # out tag -> copies received
    last_seq: dict[int, int] = field(default_factory=dict)  # pub link -> last first-delivery seq
    router_unsettled: set[bytes] = field(default_factory=set)


@dataclass
class PubModel:
    topic: str
    mode: str
    credit: int = 0
    next_tag: int = 0
    undecided: list[bytes] = field(default_factory=list)
    decided: list[bytes] = field(default_factory=list)  # outcome known, not settled yet


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = EngineDriver(
            EngineConfig(router_id="R", publisher_window=WINDOW, max_delivery_attempts=MAX_ATTEMPTS)
        )
        self.now = 0.0
        self.next_link = 1
        self.pubs: dict[int, PubModel] = {}
        self.subs: dict[int, SubModel] = {}
        self.msgs: dict[bytes, Msg] = {}  # by outgoing tag
        self.closed: list[CloseLink] = []
        self.away: dict[int, SubModel] = {}  # warm subscribers away, by sid

    # --------------------------------------------------------------- applying actions

    def apply(self) -> None:
        for action in self.engine.take_actions():
            if isinstance(action, Send):
                self.on_send(action)
            elif isinstance(action, SettleCopy):
                sub = self.subs.get(action.link)
                assert sub is not None, "SettleCopy for a detached subscriber"
                assert action.tag in sub.router_unsettled, "SettleCopy for a copy not unsettled"
                sub.router_unsettled.discard(action.tag)
                if action.tag in sub.unanswered:
                    sub.unanswered.remove(action.tag)  # withdrawn or expired under it
            elif isinstance(action, Decide):
                self.on_decide(action)
            elif isinstance(action, Credit):
                assert action.link in self.pubs, "credit for a detached publisher"
                assert action.amount > 0
                self.pubs[action.link].credit += action.amount
            elif isinstance(action, CloseLink):
                self.closed.append(action)
            elif not isinstance(action, Subscribed):
                raise AssertionError(f"a single router must not act toward others: {action}")
        assert not self.closed, f"engine closed a link: {self.closed}"

    def on_send(self, send: Send) -> None:
        sub = self.subs.get(send.link)
        assert sub is not None, "Send to a detached subscriber"
        assert sub.credit > 0, "Send without credit"
        sub.credit -= 1
        msg = self.msgs[send.tag]
        assert sub.sid in msg.matched, "a subscriber got a message it was not owed"
        copies = sub.sends.get(send.tag, 0)
        assert send.attempt == copies, "attempt number does not count earlier copies"
        assert copies == msg.released_by.get(sub.sid, 0), "duplicate not asked for"
        sub.sends[send.tag] = copies + 1
        if copies == 0:
            last = sub.last_seq.get(msg.pub, -1)
            assert msg.seq > last, "first deliveries out of publish order"
            sub.last_seq[msg.pub] = msg.seq
        assert send.settled == (msg.presettled), "pre-settled flag wrong"
        if not send.settled:
            sub.unanswered.append(send.tag)
            sub.router_unsettled.add(send.tag)

    def on_decide(self, decide: Decide) -> None:
        pub = self.pubs.get(decide.link)
        assert pub is not None, "outcome sent to a detached publisher"
        out = outgoing_tag("c", f"p{decide.link}", decide.tag)
        msg = self.msgs[out]
        assert msg.outcome is None, "two outcomes for one delivery"
        msg.outcome = decide.outcome
        if isinstance(decide.outcome, Accepted):
            if msg.mode == ALL:
                assert msg.matched <= msg.accepted_by, "accepted before all matched accepted"
            elif msg.matched:
                assert msg.matched & msg.accepted_by, "accepted before any accepted"
        else:
            assert isinstance(decide.outcome, Rejected)
        pub.undecided.remove(decide.tag)
        pub.decided.append(decide.tag)

    # --------------------------------------------------------------- rules

    @rule(topic=st.sampled_from(TOPICS), mode=st.sampled_from([ALL, SOME]))
    def attach_publisher(self, topic: str, mode: str) -> None:
        link = self.next_link
        self.next_link += 1
        self.pubs[link] = PubModel(topic, mode)
        self.engine.attach_publisher(link, LinkIdentity("c", f"p{link}"), topic, mode)
        self.apply()

    @rule(topic_filter=st.sampled_from(FILTERS), warm=st.booleans())
    def attach_subscriber(self, topic_filter: str, warm: bool) -> None:
        link = self.next_link
        self.next_link += 1
        self.subs[link] = SubModel(topic_filter, sid=link, warm=warm)
        self.engine.attach_subscriber(link, LinkIdentity("c", f"s{link}"), topic_filter,
                                      warm_timeout=WARM_TIMEOUT if warm else None)
        self.apply()

    @precondition(lambda self: any(s.warm for s in self.subs.values()))
    @rule(data=st.data())
    def warm_subscriber_goes_away(self, data) -> None:
        """Its link goes without closing: it stays subscribed; what it had in doubt is owed
        to it again, as a redelivery."""
        link = data.draw(st.sampled_from(sorted(k for k, s in self.subs.items() if s.warm)))
        sub = self.subs.pop(link)
        for tag in sub.unanswered:
            msg = self.msgs[tag]
            msg.released_by[sub.sid] = msg.released_by.get(sub.sid, 0) + 1
        sub.unanswered.clear()
        sub.router_unsettled.clear()
        sub.credit = 0
        sub.away_until = self.now + WARM_TIMEOUT
        self.away[sub.sid] = sub
        self.engine.detach_subscriber(link, final=False, now=self.now)
        self.apply()

    @precondition(lambda self: self.away)
    @rule(data=st.data())
    def warm_subscriber_comes_back(self, data) -> None:
        sid = data.draw(st.sampled_from(sorted(self.away)))
        self._come_back(sid)

    def _come_back(self, sid: int) -> None:
        sub = self.away.pop(sid)
        link = self.next_link
        self.next_link += 1
        self.subs[link] = sub
        self.engine.attach_subscriber(link, LinkIdentity("c", f"s{sid}"), sub.filter,
                                      warm_timeout=WARM_TIMEOUT)
        self.apply()

    @precondition(lambda self: self.subs)
    @rule(data=st.data(), amount=st.integers(1, 5))
    def grant(self, data: st.DataObject, amount: int) -> None:
        link = data.draw(st.sampled_from(sorted(self.subs)))
        sub = self.subs[link]
        sub.credit += amount
        self.engine.subscriber_credit(link, sub.credit)
        self.apply()

    @precondition(lambda self: any(p.credit for p in self.pubs.values()))
    @rule(
        data=st.data(),
        presettled=st.booleans(),
        override=st.sampled_from([None, ALL, SOME]),
        ttl=st.sampled_from([None, None, 1000, 5000]),
    )
    def publish(self, data, presettled: bool, override: str | None, ttl: int | None) -> None:
        link = data.draw(st.sampled_from(sorted(k for k, p in self.pubs.items() if p.credit)))
        pub = self.pubs[link]
        pub.credit -= 1
        tag = str(pub.next_tag).encode()
        pub.next_tag += 1
        out = outgoing_tag("c", f"p{link}", tag)
        owed = [*self.subs.values(), *self.away.values()]
        matched = frozenset(m.sid for m in owed if matches(m.filter, pub.topic))
        self.msgs[out] = Msg(link, tag, pub.next_tag, matched, override or pub.mode, presettled)
        if not presettled:
            pub.undecided.append(tag)
        self.engine.message(
            link, tag, b"body", settled=presettled, mode=override, ttl_ms=ttl, now=self.now
        )
        self.apply()

    @precondition(lambda self: any(s.unanswered for s in self.subs.values()))
    @rule(
        data=st.data(),
        disposition=st.sampled_from(
            [
                Disposition.ACCEPTED,
                Disposition.ACCEPTED,
                Disposition.ACCEPTED,
                Disposition.REJECTED,
                Disposition.RELEASED,
                Disposition.MODIFIED,
                Disposition.UNDELIVERABLE,
            ]
        ),
        settled=st.booleans(),
    )
    def answer(self, data, disposition: int, settled: bool) -> None:
        link = data.draw(st.sampled_from(sorted(k for k, s in self.subs.items() if s.unanswered)))
        sub = self.subs[link]
        tag = data.draw(st.sampled_from(sub.unanswered))
        sub.unanswered.remove(tag)
        msg = self.msgs[tag]
        if disposition == Disposition.ACCEPTED:
            msg.accepted_by.add(sub.sid)
        elif disposition in (Disposition.RELEASED, Disposition.MODIFIED):
            msg.released_by[sub.sid] = msg.released_by.get(sub.sid, 0) + 1
        if settled:
            sub.router_unsettled.discard(tag)
        self.engine.copy_outcome(link, tag, disposition, settled=settled, error="nope")
        self.apply()

    @precondition(lambda self: any(p.decided or p.undecided for p in self.pubs.values()))
    @rule(data=st.data(), early=st.booleans())
    def publisher_settles(self, data, early: bool) -> None:
        """Settle a decided delivery, or (early) an undecided one: the seed's DELETE."""
        link = data.draw(
            st.sampled_from(sorted(k for k, p in self.pubs.items() if p.decided or p.undecided))
        )
        pub = self.pubs[link]
        pool = pub.undecided if (early and pub.undecided) or not pub.decided else pub.decided
        tag = data.draw(st.sampled_from(pool))
        pool.remove(tag)
        self.engine.publisher_settled(link, tag)
        self.apply()

    @precondition(lambda self: self.pubs)
    @rule(data=st.data())
    def detach_publisher(self, data) -> None:
        link = data.draw(st.sampled_from(sorted(self.pubs)))
        self.engine.detach_publisher(link)
        self.apply()
        del self.pubs[link]

    @precondition(lambda self: self.subs)
    @rule(data=st.data())
    def detach_subscriber(self, data) -> None:
        link = data.draw(st.sampled_from(sorted(self.subs)))
        self.engine.detach_subscriber(link)
        del self.subs[link]
        self.apply()

    @rule(seconds=st.sampled_from([0.5, 2.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for sid in [sid for sid, s in self.away.items() if s.away_until <= self.now]:
            del self.away[sid]  # the router gives up on it: what it was owed fails
        self.engine.tick(self.now)
        self.apply()

    # --------------------------------------------------------------- invariants

    @invariant()
    def memory_bounded_by_window(self) -> None:
        for pub in self.engine.publishers.values():
            assert pub.live + pub.credit_out <= WINDOW

    def teardown(self) -> None:
        """Everyone answers and settles everything: nothing may be left in the engine."""
        for sid in sorted(self.away):
            self._come_back(sid)
        for _ in range(100):
            progressed = False
            for link, sub in self.subs.items():
                if sub.unanswered:
                    tag = sub.unanswered.pop(0)
                    self.msgs[tag].accepted_by.add(sub.sid)
                    sub.router_unsettled.discard(tag)
                    self.engine.copy_outcome(link, tag, Disposition.ACCEPTED, settled=True)
                    progressed = True
                if self.engine.has_queued(link):
                    sub.credit += 10
                    self.engine.subscriber_credit(link, sub.credit)
                    progressed = True
            for link, pub in self.pubs.items():
                while pub.decided:
                    self.engine.publisher_settled(link, pub.decided.pop())
                    progressed = True
            self.apply()
            if not progressed:
                break
        for pub in self.pubs.values():
            assert not pub.undecided, "a publisher delivery never got an outcome"
        assert not self.engine.records, "records left after everyone finished"
        for sub in self.subs.values():
            assert not sub.router_unsettled, "router never settled a copy"
        for pub in self.engine.publishers.values():
            assert pub.live == 0 and not pub.records


EngineMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_engine_stateful = EngineMachine.TestCase


@pytest.mark.slow
def test_engine_stateful_long() -> None:
    """The same machine with many more examples (EXACTMESH_LONG=1 make test)."""
    import os

    if not os.environ.get("EXACTMESH_LONG"):
        pytest.skip("set EXACTMESH_LONG=1 for the long run")
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        EngineMachine,
        settings=settings(max_examples=5000, stateful_step_count=120, deadline=None),
    )

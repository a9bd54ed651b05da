"""Shared subscriptions in the delivery engine, driven by hypothesis through random
interleavings: members attach and leave (closing, or a warm one going away and coming back,
or timing out), get credit, accept, reject or release; the publisher publishes and settles.

A model of the clients checks after every step:
- each message is decided at most once, and `accepted` only when exactly one member accepted
  it (the group is one subscriber);
- no member is sent a message another member accepted, nor while another member that was
  sent it is still attached and has not answered it;
- a message that a QoS 2 member was sent and did not answer, when its subscription ended,
  goes to nobody else (MQTT-4.8.2-5);
- once a member takes everything and time runs on, every message is decided and the engine
  holds no record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from router.core.actions import Accepted, Credit, Decide, Send
from router.core.engine import Disposition, EngineConfig
from router.core.records import ALL, LinkIdentity, outgoing_tag
from tests.engine_driver import EngineDriver

GROUP = "$share/g/jobs/#"
PUB = 1
WARM = 5.0


@dataclass
class Member:
    key: str
    qos2: bool
    warm: bool
    link: int | None
    held: dict[bytes, int] = field(default_factory=dict)  # tag -> attempt, sent, unanswered
    # Held when a link of it broke, not answered since: it may have processed them.
    doubt: set[bytes] = field(default_factory=set)
    away_since: float | None = None  # a warm member away: its session ends WARM s later


@dataclass
class Msg:
    tag: bytes  # the outgoing tag members see
    pub_tag: bytes = b""
    settled: bool = False
    accepted_by: set[str] = field(default_factory=set)
    sent_to: set[str] = field(default_factory=set)
    in_doubt: str | None = None  # a QoS 2 member that left holding it
    nobody: bool = False  # no member when it was published: accepted with no subscriber
    refused: bool = False  # a member rejected it: that is the group's answer
    releases: int = 0
    outcome: object = None


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = EngineDriver(EngineConfig(router_id="A", publisher_window=8,
                                           reconnect_timeout=WARM, check_invariants=True))
        self.d.attach_publisher(PUB, LinkIdentity("pub", "p"), "jobs/a", ALL)
        self.credit = 0
        self.next_link = 10
        self.members: dict[str, Member] = {}
        self.by_link: dict[int, Member] = {}
        self.msgs: dict[bytes, Msg] = {}  # by outgoing tag
        self.by_pub_tag: dict[bytes, Msg] = {}
        self.n = 0
        self.alone = False  # a member left and no other one is subscribed
        self.apply()

    # ------------------------------------------------------------------ the model

    def apply(self) -> None:
        for a in self.d.take_actions():
            if isinstance(a, Credit) and a.link == PUB:
                self.credit += a.amount
            elif isinstance(a, Send):
                self.on_send(a)
            elif isinstance(a, Decide):
                msg = self.by_pub_tag[a.tag]
                assert msg.outcome is None, f"{a.tag!r} decided twice"
                msg.outcome = a.outcome
                if type(a.outcome) is Accepted:
                    assert len(msg.accepted_by) == (0 if msg.nobody else 1), \
                        (a.tag, msg.accepted_by)
                else:
                    assert not msg.accepted_by, f"failed, but {msg.accepted_by} accepted it"
                    # A member leaving hands it to another: it fails only as the group's
                    # answer, in doubt, after many releases, or with no member left.
                    assert msg.refused or msg.in_doubt or msg.releases >= 5 or self.alone, \
                        f"{a.tag!r} failed though another member could take it: {a.outcome}"

    def on_send(self, send: Send) -> None:
        member = self.by_link[send.link]
        msg = self.msgs.setdefault(send.tag, Msg(send.tag))
        assert not msg.accepted_by, f"{member.key} sent {send.tag!r}, accepted already"
        assert msg.in_doubt is None, f"{member.key} sent {send.tag!r}, in doubt at {msg.in_doubt}"
        for other in self.members.values():
            if other is not member and other.link is not None:
                assert send.tag not in other.held, \
                    f"{send.tag!r} sent to {member.key} while {other.key} holds it"
        msg.sent_to.add(member.key)
        member.held[send.tag] = send.attempt

    def _lose(self, member: Member, ended: bool) -> None:
        """`member`'s link is gone; `ended`: its subscription too (not a warm one away)."""
        member.doubt.update(member.held)
        if ended and member.qos2:
            for tag in member.doubt:
                self.msgs[tag].in_doubt = member.key
        member.held.clear()
        if member.link is not None:
            del self.by_link[member.link]
        member.link = None
        if ended:
            del self.members[member.key]

    # ------------------------------------------------------------------ rules

    @rule(qos2=st.booleans(), warm=st.booleans())
    def attach(self, qos2: bool, warm: bool) -> None:
        key = f"m{self.next_link}/s"
        self._attach(Member(key, qos2, warm, None))

    def _attach(self, member: Member) -> None:
        member.away_since = None
        link = self.next_link
        self.next_link += 1
        member.link = link
        self.members[member.key] = member
        self.by_link[link] = member
        self.d.attach_subscriber(link, LinkIdentity(*member.key.split("/")), GROUP,
                                 warm_timeout=WARM if member.warm else None,
                                 qos=2 if member.qos2 else 1)
        self.apply()

    @precondition(lambda self: any(m.link for m in self.members.values()))
    @rule(data=st.data(), amount=st.integers(1, 4))
    def grant(self, data: st.DataObject, amount: int) -> None:
        member = data.draw(st.sampled_from([m for m in self.members.values() if m.link]))
        self.d.subscriber_credit(member.link, amount)
        self.apply()

    @precondition(lambda self: self.credit > 0)
    @rule()
    def publish(self) -> None:
        self.n += 1
        tag = b"t%d" % self.n
        self.credit -= 1
        msg = Msg(outgoing_tag("pub", "p", tag), tag, nobody=not self.members)
        self.msgs[msg.tag] = self.by_pub_tag[tag] = msg
        self.d.message(PUB, tag, b"x")
        self.apply()

    @precondition(lambda self: any(m.held and m.link for m in self.members.values()))
    @rule(data=st.data(), how=st.sampled_from(
        [Disposition.ACCEPTED] * 4 + [Disposition.REJECTED, Disposition.RELEASED]))
    def answer(self, data: st.DataObject, how: int) -> None:
        member = data.draw(st.sampled_from(
            [m for m in self.members.values() if m.held and m.link]))
        tag = data.draw(st.sampled_from(sorted(member.held)))
        del member.held[tag]
        member.doubt.discard(tag)
        if how == Disposition.ACCEPTED:
            self.msgs[tag].accepted_by.add(member.key)
        elif how == Disposition.REJECTED:
            self.msgs[tag].refused = True
        else:
            self.msgs[tag].releases += 1
        self.d.copy_outcome(member.link, tag, how, settled=True)
        self.apply()

    @precondition(lambda self: any(m.link for m in self.members.values()))
    @rule(data=st.data(), close=st.booleans())
    def leave(self, data: st.DataObject, close: bool) -> None:
        member = data.draw(st.sampled_from([m for m in self.members.values() if m.link]))
        link = member.link
        self._lose(member, ended=close or not member.warm)
        member.away_since = self.d.engine.now
        self.alone = not self.members
        self.d.detach_subscriber(link, final=close)
        self.apply()
        self.alone = False

    @precondition(lambda self: any(m.link is None for m in self.members.values()))
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from([m for m in self.members.values() if m.link is None]))
        self._attach(member)

    @rule(seconds=st.sampled_from([1.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        now = self.d.engine.now + seconds
        for m in list(self.members.values()):
            if m.away_since is not None and now >= m.away_since + WARM:
                self._lose(m, ended=True)  # its session expired
        self.alone = not any(m.link for m in self.members.values())
        self.d.tick(now)
        self.apply()
        self.alone = False

    @invariant()
    def publisher_settles_what_was_decided(self) -> None:
        for msg in self.by_pub_tag.values():
            if msg.outcome is not None and not msg.settled:
                msg.settled = True
                self.d.publisher_settled(PUB, msg.pub_tag)
        self.apply()

    def teardown(self) -> None:
        """A member that takes everything comes, time runs on: everything is decided."""
        drain = Member("drain/s", False, False, None)
        self._attach(drain)
        for _ in range(200):
            self.d.subscriber_credit(drain.link, 100)
            self.apply()
            for tag in list(drain.held):
                del drain.held[tag]
                self.msgs[tag].accepted_by.add(drain.key)
                self.d.copy_outcome(drain.link, tag, Disposition.ACCEPTED, settled=True)
            self.apply()
            for m in list(self.members.values()):
                if m is not drain and m.link is not None:
                    link = m.link
                    self._lose(m, ended=True)
                    self.d.detach_subscriber(link, final=True)
                    self.apply()  # (what it held may go to a member not closed yet)
            for m in list(self.members.values()):
                if m.link is None:
                    self._lose(m, ended=True)  # away: its session expires with this tick
            self.d.tick(self.d.engine.now + 2 * WARM)
            self.apply()
            self.publisher_settles_what_was_decided()
            if all(m.outcome is not None for m in self.by_pub_tag.values()) and not drain.held:
                break
        undecided = [t for t, m in self.by_pub_tag.items() if m.outcome is None]
        assert not undecided, f"never decided: {undecided}"
        assert not list(self.d.engine.iter_records()), "records left after everything settled"


GroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestGroups = GroupMachine.TestCase

"""Simulated clients that run the SDK's own state machines (`amqp_edge.sdk_core`).

A share of the simulator's publishers and subscribers (`Params.sdk`) are driven by
`PublisherCore` / `SubscriberCore` with in-memory stores, the code the SDK's `Publisher` and
`Subscriber` run below proton and SQLite: the cores decide the tags, what is sent and sent
again and in which order, what is declared on attach, what is answered from the store
without being shown to the application, and how much credit to grant. This module is their
driver in the simulator, as `amqp_edge.client` is on a real connection: engine actions in
(`Credit`, `Decide`, `Send`, `SettleCopy`), engine events out (`MessageArrived`,
`PublisherSettled`, `SubscriberCredit`, `CopyOutcome`), with the checker told what happened
as for the simulator's other clients.

Those other clients model what any AMQP client may do (pre-settled messages, settling
before the outcome, unsettled answers, modified outcomes); an SDK client does only what the
SDK does: unsettled messages settled on their outcome, answers settled at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqp_edge.sdk_core import (
    MemoryPublisherStore,
    MemorySubscriberStore,
    PublisherCore,
    SubscriberCore,
)
from router.core import events as ev
from router.core.actions import Accepted, Decide, Send
from router.core.engine import Disposition

from .checker import Violation

if TYPE_CHECKING:
    from .world import PubClient, SubClient, World

PUBLISHER_WINDOW = 100  # the SDK's default: messages without an outcome
# The SDK's answers, as the engine takes them.
DISPOSITIONS = {"accepted": Disposition.ACCEPTED, "rejected": Disposition.REJECTED,
                "released": Disposition.RELEASED}


class SdkPublisher:
    """A publisher's SDK state: its core and its store (which outlives its links)."""

    def __init__(self) -> None:
        self.core = PublisherCore(window=PUBLISHER_WINDOW)
        self.store = MemoryPublisherStore()

    def commit(self) -> None:
        """The SDK's group commit: the store first, then the core may act on it."""
        commit = self.core.take_commit()
        if commit is not None:
            commit.apply_to(self.store)
            self.core.committed(commit)


class SdkSubscriber:
    """A subscriber's SDK state: its core and its store of answers."""

    def __init__(self, world: World, prefetch: int) -> None:
        self.store = MemorySubscriberStore(lambda: world.now)
        self.core = SubscriberCore(prefetch=prefetch)


class SdkClients:
    """The World's half that drives SDK clients (mixed into `router.sim.world.World`)."""

    if TYPE_CHECKING:  # what the World provides
        rng: Any
        now: float
        checker: Any
        draining: bool
        moves: Any
        p: Any

        def after(self, delay: float, fn: Any, *args: Any) -> None: ...
        def log(self, what: str) -> None: ...
        def settle(self, r: Any) -> None: ...
        def publish(self, pub: PubClient, **kw: Any) -> Any: ...

    # -------------------------------------------------------------- publishers

    def sdk_publish(self, pub: PubClient) -> None:
        """The application sends one message: the core numbers it, the store keeps it, and
        it goes out when the core says so (now, if there is credit and nothing before it)."""
        sdk = pub.sdk
        assert sdk is not None
        self.publish(pub, presettled=False, ttl_ms=None, tag=str(sdk.core.next_seq).encode())

    def sdk_queued(self, pub: PubClient, payload: bytes) -> None:
        """`publish` made the message `payload`: into the core, committed, transmitted."""
        sdk = pub.sdk
        assert sdk is not None
        sdk.core.publish(payload)
        sdk.commit()
        self.sdk_transmit(pub, pub.epoch)

    def sdk_transmit(self, pub: PubClient, epoch: int) -> None:
        """Send what the core says to send within the link's credit: declared resends
        first, in order, then new messages."""
        sdk = pub.sdk
        if sdk is None or pub.detached or epoch != pub.epoch:
            return
        r = pub.router
        for t in sdk.core.transmit(pub.credit):
            msg = pub.undecided.get(t.tag)
            if msg is None:
                raise Violation(f"the SDK core of {pub.label} sent {t.tag!r}, which it has "
                                "an outcome for or never published")
            pub.credit -= 1
            if t.resend:
                local, remote, away = r.engine.matching(pub.topic)
                self.checker.on_resend(pub, msg, local, remote, away)
                self.moves["resent"] += 1
                self.log(f"resend {pub.label}#{msg.seq} {msg.id[:8]} owed now "
                         f"{sorted(msg.owed)} (SDK)")
            r.engine.handle(ev.MessageArrived(self.now, pub.link, t.tag, t.payload, False,
                                              None, None))
            self.settle(r)
            if pub.detached or epoch != pub.epoch:
                return  # lost meanwhile: the core puts what was in flight back

    def sdk_decided(self, pub: PubClient, action: Decide) -> bool:
        """The router's outcome for a delivery: the core records it (then the store) and
        says whether to settle it. Returns that."""
        sdk = pub.sdk
        assert sdk is not None
        outcome = action.outcome
        if isinstance(outcome, Accepted):
            reaction = sdk.core.on_disposition(action.tag, "accepted")
        else:
            reaction = sdk.core.on_disposition(
                action.tag, "rejected", condition=outcome.condition,
                description=outcome.description, info=outcome.info)
        sdk.commit()
        return reaction.settle

    def sdk_attach_resends(self, pub: PubClient) -> list[bytes]:
        """What the publisher declares on attaching again: the core's unsettled tags."""
        sdk = pub.sdk
        assert sdk is not None
        return sdk.core.declaration()["unsettled"]

    # -------------------------------------------------------------- subscribers

    def sdk_credit(self, sub: SubClient) -> int:
        """Credit to add now, as the SDK tops its window up (0: none)."""
        sdk = sub.sdk
        assert sdk is not None
        return sdk.core.credit_to_grant(sub.credit)

    def sdk_delivery(self, sub: SubClient, action: Send, msg: Any) -> None:
        """A copy arrived: new (shown to the application later), answered already (answered
        again from the store at once), or a copy of one the application holds (bound)."""
        sdk = sub.sdk
        assert sdk is not None
        tag = action.tag.decode()
        incoming = sdk.core.on_delivery(tag, (sub.link, action.tag), msg.id,
                                        sdk.store.outcome_of(tag))
        if not action.settled:  # a pre-settled copy is answered to nobody
            sub.router_unsettled[action.tag] = None
        if incoming.kind == "answer":
            self.checker.on_suppressed(sub, msg)
            sub.said.setdefault(msg.id, set()).add(DISPOSITIONS[incoming.outcome])
            self.log(f"{sub.label} answers {msg.id[:8]} {incoming.outcome} settled (again, "
                     "from its SDK store)")
            # Answered as the client reads it, after whatever else the router wrote with
            # this copy (say the settlement it relays right behind it), not in its midst.
            self.after(0.0, self._sdk_outcome, sub, action.tag,
                       DISPOSITIONS[incoming.outcome], sub.link)
        elif incoming.kind == "bind":
            if incoming.previous is not None and incoming.previous[1] not in \
                    sub.router_unsettled:
                sdk.core.previous_settled()
        else:
            sub.unanswered[action.tag] = (sub.copies[msg.id], sub.link, None)
            slow = self._sdk_slow(sub)
            delay = self.rng.uniform(0.2, 1.5) if slow else self.rng.uniform(0.001, 0.02)
            self.after(delay, self._sdk_take, sub)

    def _sdk_slow(self, sub: SubClient) -> bool:
        """A slow application is slow until the faults stop, as over AMQP (amqp.py `_slow`):
        then the clients are well-behaved. An SDK subscriber takes one message at a time, so
        a slow one behind what its publishers (MQTT devices too) published meanwhile would
        still be at it when `drain` ends, its publishers without their outcomes."""
        return sub.slow and not self.draining

    def _sdk_take(self, sub: SubClient) -> None:
        """The application takes the next message and answers it a little later."""
        sdk = sub.sdk
        assert sdk is not None
        if sub.gone:
            return
        shown = sdk.core.take()
        if shown is None:
            return  # dropped with a lost link before the application took it
        slow = self._sdk_slow(sub)
        delay = self.rng.uniform(0.2, 1.0) if slow else self.rng.uniform(0.0, 0.01)
        self.after(delay, self._sdk_answer, sub, shown)

    def _sdk_answer(self, sub: SubClient, shown: Any) -> None:
        sdk = sub.sdk
        assert sdk is not None
        if sub.gone:
            return
        msg = self.checker.msg_by_tag(shown.tag.encode())
        outcome = "accepted"
        if sub.flaky and not self.draining:
            outcome = self.rng.choices(["accepted", "rejected", "released"], [75, 10, 15])[0]
        new = sdk.store.record(shown.tag, outcome) if sdk.core.must_record(outcome) else False
        sdk.core.answer(shown.tag, outcome, self.now, new=new, copy=shown.copy)
        tag = shown.tag.encode()
        sub.unanswered.pop(tag, None)
        disposition = DISPOSITIONS[outcome]
        sub.said.setdefault(msg.id, set()).add(disposition)
        if outcome == "accepted":
            self.checker.on_processed(sub, msg)
            sub.answers[msg.id] = disposition
            sub.accepted_at[msg.id] = self.now
        elif outcome == "rejected":
            sub.answers[msg.id] = disposition
        else:
            sub.releases[msg.id] = sub.releases.get(msg.id, 0) + 1
        answers = sdk.core.take_answers()
        self.log(f"{sub.label} answers {msg.id[:8]} {outcome} settled (SDK)"
                 f"{'' if answers else ' but no delivery of it is live'}")
        if sub.wire is not None:
            sub.wire.side.answer(sub, answers)  # on its AMQP connection (router/sim/amqp.py)
            return
        for a in answers:
            link, wire_tag = a.delivery
            if link == sub.link and not sub.detached:
                self._sdk_outcome(sub, wire_tag, DISPOSITIONS[a.outcome], link)

    def _sdk_outcome(self, sub: SubClient, tag: bytes, disposition: int, link: int) -> None:
        """Put an answer on the wire, settled, unless the link it came on is gone or the
        router settled that copy already (then proton sends nothing for it)."""
        if link != sub.link or sub.detached:
            return
        if sub.router_unsettled.pop(tag, "gone") == "gone":
            return
        sub.router.engine.handle(ev.CopyOutcome(self.now, sub.link, tag, disposition, True,
                                                "the simulated SDK subscriber says no"))
        self.settle(sub.router)

    def sdk_lost(self, client: PubClient | SubClient) -> None:
        """The link is gone: the core forgets what was in flight on it (a subscriber's
        messages not taken yet are dropped: the router sends them again)."""
        if client.kind == "pub":
            pub: PubClient = client  # type: ignore[assignment]
            if pub.sdk is not None:
                pub.sdk.core.link_lost()
            return
        sub: SubClient = client  # type: ignore[assignment]
        if sub.sdk is None:
            return
        sub.sdk.core.link_lost(self.now)
        for tag in list(sub.unanswered):
            if not sub.sdk.core.holds(tag.decode()):
                del sub.unanswered[tag]

    def sdk_declaration(self, sub: SubClient) -> dict[str, str]:
        sdk = sub.sdk
        assert sdk is not None
        return sdk.core.declaration(sub.gen, self.now)["unsettled"]

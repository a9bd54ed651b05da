"""One AMQP 1.0 client connection: proton's engine fed with bytes, its events turned into
delivery-engine calls, and the engine's actions applied back onto proton.

No sockets here: `amqp_edge.server` reads bytes into `transport` and writes out what it has
pending. Control events (open, attach, detach, close) use proton's Python objects; the
per-message events (a transfer, a disposition, a flow) go through `amqp_edge.pn`.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from proton import (
    Collector,
    Condition,
    Connection,
    Delivery,
    Endpoint,
    Event,
    Link,
    Terminus,
    Transport,
    symbol,
)

from router.core import events as ev
from router.core.actions import (
    Accepted,
    CloseLink,
    Credit,
    Decide,
    Relayed,
    Send,
    SettleCopy,
)
from router.core.engine import Disposition
from router.core.message import (
    PROPERTY_TO,
    MalformedMessage,
    annotate,
    property_string,
    publisher_annotation,
    scan,
    with_redelivery,
)
from router.core.records import ALL, EXACTLY_ONCE, GUARANTEES, MODES, LinkIdentity
from router.core.topics import (
    SHARE_PREFIX,
    TopicError,
    split_shared,
    validate_filter,
    validate_topic,
)

from . import pn
from .expect import ExpectError, expected, pre_register
from .names import DYNAMIC_PREFIX, SHARED_GROUP
from .replies import REPLIES_SOURCE, reply_filter, restore_name, substitute
from .resume import ResumeError, answer, publisher_resends, subscriber_resume

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.amqp")

DELIVERY_MODE_PROPERTY = symbol("delivery-mode")
GUARANTEE_PROPERTY = symbol("guarantee")  # exactly-once (default) | at-least-once
INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED = "amqp:unauthorized-access"
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
DECODE_ERROR = "amqp:decode-error"
DETACH_FORCED = "amqp:link:detach-forced"
CONNECTION_FORCED = "amqp:connection:forced"
INTERNAL_ERROR = "amqp:internal-error"

_REMOTE_DISPOSITION = {
    pn.ACCEPTED: Disposition.ACCEPTED,
    pn.REJECTED: Disposition.REJECTED,
    pn.RELEASED: Disposition.RELEASED,
    pn.MODIFIED: Disposition.MODIFIED,
}


class LinkState:
    """What the edge keeps per attached client link."""

    __slots__ = (
        "annotation", "anonymous", "client", "deliveries", "durable", "id", "is_publisher",
        "label", "link", "ptr", "reads", "replies", "settle_first",
    )

    def __init__(self, link: Link, link_id: int, is_publisher: bool, label: str) -> None:
        self.link = link
        self.ptr = pn.impl(link)
        self.id = link_id
        self.is_publisher = is_publisher
        self.label = label
        self.durable = ""  # a durable subscriber's key, kept in the relay store if any
        self.client = ""  # the client's container-id
        self.replies = False  # a client's reply link at a relay (amqp_edge/replies.py)
        # A subscriber to a topic filter: with an ACL file each message is checked against
        # what the client may read (a dynamic or reply link gets only its own answers).
        self.reads = False
        # A publisher link with a null target (anonymous relay): each message names its topic
        # in its `to` property.
        self.anonymous = False
        # A publisher link in rcv-settle-mode first (AMQP 2.8.3, the clients' default): the
        # router settles when it sends the outcome. In mode second it leaves that to the
        # publisher, whose settlement it then relays (the seed design's scheme).
        self.settle_first = True
        # Unsettled deliveries by tag: a publisher's awaiting its settlement, or the copies
        # sent to a subscriber awaiting the router's settlement.
        self.deliveries: dict[bytes, Any] = {}
        # A publisher's messages carry its identity in their message-annotations, added here,
        # at the first router (the seed design): every router and subscriber can name it.
        self.annotation = b""


def dynamic_address(router_id: str) -> str:
    """A new address for a dynamic receiver (AMQP 3.5.3): unique mesh-wide, and plain topic
    characters, so that a publisher anywhere can send to it, as to any topic."""
    return f"{DYNAMIC_PREFIX}/{router_id}/{uuid.uuid4().hex}"


class AmqpConnection:
    def __init__(self, node: RuntimePort, peer: str, *, own_sasl: bool = False,
                 user: str | None = None) -> None:
        """`own_sasl`: the client logged in through the router's SASL exchange already
        (amqp_edge/sasl.py), as `user` (None: anonymous), and proton sees no SASL layer."""
        self.node = node
        self.user = user
        self.engine = node.engine
        self.peer = peer
        cfg = node.config
        self.max_message_size = cfg.max_message_size
        self.transport = Transport(Transport.SERVER)
        self.transport.idle_timeout = cfg.idle_timeout
        if not own_sasl:
            self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.container = f"exactmesh-{cfg.id}"
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self._collector = pn.impl(self.collector)
        self.links: dict[Any, LinkState] = {}  # by link pointer
        # A publisher's unsettled deliveries, by delivery pointer: seeing one again means
        # the publisher settled it (or changed its state).
        self.incoming: dict[Any, tuple[LinkState, bytes]] = {}
        self._drain_check: set[LinkState] = set()
        self.on_output: Any = None  # set by the server: wakes the writer
        self.peer_eof = False  # set by the server when the client closed its socket
        self._now = node.now()  # the clock, read once per batch of proton events

    # ------------------------------------------------------------------ events

    def process(self) -> None:
        """Handle every event proton has for us, then apply the engine's actions."""
        coll = self._collector
        peek, pop, etype = pn.collector_peek, pn.collector_pop, pn.event_type
        self._now = self.node.now()
        while True:
            ev = peek(coll)
            if not ev:
                break
            kind = etype(ev)
            try:
                if kind == pn.DELIVERY:
                    self._on_delivery(pn.event_delivery(ev))
                elif kind == pn.LINK_FLOW:
                    self._on_flow(pn.event_link(ev))
                else:
                    self._on_control(Event.wrap(ev))
            finally:
                pop(coll)
        self.node.flush()
        self._finish_drains()
        self._output()  # proton may have frames to send even when the engine did nothing

    def _on_control(self, event: Event) -> None:
        t = event.type
        if t == Event.CONNECTION_REMOTE_OPEN:
            if self.connection.state & Endpoint.LOCAL_UNINIT:
                self.connection.open()
        elif t == Event.SESSION_REMOTE_OPEN:
            if event.session.state & Endpoint.LOCAL_UNINIT:
                event.session.open()
        elif t == Event.LINK_REMOTE_OPEN:
            if event.link.state & Endpoint.LOCAL_UNINIT:
                self._on_attach(event.link)
        elif t in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
            # A closed link ends its subscription; a detach without close (AMQP 2.6.6)
            # leaves a warm (durable) subscriber subscribed, waiting for it to come back.
            self._on_detach(event.link, final=t == Event.LINK_REMOTE_CLOSE)
        elif t == Event.SESSION_REMOTE_CLOSE:
            for ls in [ls for ls in self.links.values() if ls.link.session == event.session]:
                self._forget(ls, final=False)
            event.session.close()
        elif t == Event.CONNECTION_REMOTE_CLOSE:
            self.connection.close()
        elif t == Event.TRANSPORT_ERROR:
            cond = self.transport.condition
            if cond is not None:
                log.warning("connection %s: %s: %s", self.peer, cond.name, cond.description)
        elif t == Event.TRANSPORT_TAIL_CLOSED:
            self._on_tail_closed()

    def _on_tail_closed(self) -> None:
        """proton stopped reading. It says why (TRANSPORT_ERROR, a condition) except in two
        cases, where python-qpid-proton 0.40 closes its input silently: a frame whose body is
        not an AMQP performative, and the socket closing in the middle of a frame. Without
        this the first went unlogged, got no close frame and held the socket open for the
        server's CLOSE_GRACE; the second went unlogged."""
        if self.transport.condition is not None or self.connection.state & Endpoint.REMOTE_CLOSED:
            return  # proton reported it, or the client closed the connection properly
        if self.peer_eof:
            log.warning("connection %s: the client closed its socket in the middle of a frame",
                        self.peer)
            return
        description = "a frame from the client could not be decoded as an AMQP performative"
        log.warning("connection %s: %s: %s", self.peer, DECODE_ERROR, description)
        self.connection.condition = Condition(DECODE_ERROR, description)
        self.connection.close()

    def _on_attach(self, link: Link) -> None:
        container = link.connection.remote_container or ""
        ident = LinkIdentity(container, link.name)
        try:
            if link.is_receiver:
                self._attach_publisher(link, ident)
            else:
                self._attach_subscriber(link, ident)
        except (TopicError, ResumeError, ExpectError) as err:
            self._refuse(link, INVALID_FIELD, str(err))

    def _attach_publisher(self, link: Link, ident: LinkIdentity) -> None:
        address = link.remote_target.address
        if link.remote_target.dynamic:
            self._refuse(link, NOT_IMPLEMENTED, "dynamic targets are not supported; "
                         "attach a sender whose target address is a topic")
            return
        anonymous = address is None  # anonymous relay: each message's `to` is its topic
        if not anonymous:
            validate_topic(address)
            if not self.node.policy.may_publish(self.user, ident.container, address):
                self._refuse(link, UNAUTHORIZED, f"not authorized to publish to {address!r} "
                             f"({self._whose_rules()})")
                return
        props = link.remote_properties or {}
        mode = str(props.get(DELIVERY_MODE_PROPERTY, ALL))
        if mode not in MODES:
            self._refuse(link, INVALID_FIELD, f"link property delivery-mode={mode!r} is not "
                         f"one of {', '.join(MODES)}")
            return
        guarantee = str(props.get(GUARANTEE_PROPERTY, EXACTLY_ONCE))
        if guarantee not in GUARANTEES:
            self._refuse(link, INVALID_FIELD, f"link property guarantee={guarantee!r} is not "
                         f"one of {', '.join(GUARANTEES)}")
            return
        resends = publisher_resends(props)
        pre_register(self.node, expected(props))  # before its first message is matched
        link.target.address = address
        link.source.copy(link.remote_source)
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.max_message_size = self.max_message_size
        ls = self._register(link, True, ident)
        ls.anonymous = anonymous
        ls.settle_first = link.remote_rcv_settle_mode != Link.RCV_SECOND
        ls.annotation = publisher_annotation(ident.key)
        view = self.engine.handle(
            ev.PublisherAttached(self._now, ls.id, ident, address or "", mode, resends,
                                 once=guarantee == EXACTLY_ONCE))
        if resends:
            link.properties = answer(view)
        link.open()
        log.debug("publisher %s attached to %s (mode %s, %d resends declared)", ls.label,
                  address or "no address (anonymous relay)", mode, len(resends))

    def _attach_subscriber(self, link: Link, ident: LinkIdentity) -> None:
        source = link.remote_source
        replies = source.address == REPLIES_SOURCE
        if replies:
            if self.node.relay_store is None:
                self._refuse(link, NOT_FOUND, f"{REPLIES_SOURCE} (the replies to a client's "
                             "requests) is kept by relays: attach it at your relay, or at a "
                             "router with --relay-store")
                return
            topic_filter = reply_filter(self.node.config.id, ident.container)
        elif source.dynamic:  # AMQP 3.5.3: the router names a node for this link alone
            topic_filter = dynamic_address(self.node.config.id)
            link.source.dynamic = True
        else:
            topic_filter = validate_filter(shared_filter(source.address or "",
                                                         link.remote_properties))
            shared = split_shared(topic_filter)
            inner = shared[1] if shared is not None else topic_filter
            if not self.node.policy.may_subscribe(self.user, ident.container, inner):
                self._refuse(link, UNAUTHORIZED, f"not authorized to read anything {inner!r} "
                             f"matches ({self._whose_rules()})")
                return
        declared, gen = subscriber_resume(link.remote_properties)
        presettled = link.remote_snd_settle_mode == Link.SND_SETTLED
        # A receiver that joined a shared group by link property sees its own address.
        shared_by_property = not (replies or source.dynamic) and topic_filter != source.address
        link.source.address = source.address if shared_by_property else topic_filter
        link.target.copy(link.remote_target)
        link.snd_settle_mode = Link.SND_SETTLED if presettled else Link.SND_UNSETTLED
        # A dynamic node lives as long as its link (expiry policy link-detach): never durable.
        warm_timeout = None if source.dynamic else self._warm_timeout(source, link)
        ls = self._register(link, False, ident)
        ls.replies = replies
        ls.reads = not (replies or source.dynamic)
        store = self.node.relay_store
        if warm_timeout is not None and store is not None:  # kept across a restart
            store.keep_link(ident.key, ident.container, ident.name, topic_filter, presettled,
                            warm_timeout)
            ls.durable = ident.key
        view = self.engine.handle(ev.SubscriberAttached(
            self._now, ls.id, ident, topic_filter, presettled=presettled,
            warm_timeout=warm_timeout, gen=gen, declared=declared))
        if declared or gen:
            link.properties = answer(view)
        link.open()
        log.debug("subscriber %s attached with filter %s (%d declared unsettled)", ls.label,
                  topic_filter, len(declared))

    def _whose_rules(self) -> str:
        who = "anonymous clients" if self.user is None else f"user {self.user!r}"
        return f"the ACL file's rules for {who}"

    def _warm_timeout(self, source: Terminus, link: Link) -> float | None:
        """A durable source terminus (AMQP 3.5.3) makes a warm subscriber: it stays subscribed
        for the terminus' timeout (or the router's reconnect-timeout) after its link goes
        without closing. Our answer echoes the durability and the timeout we will keep."""
        if source.durability == Terminus.NONDURABLE:
            return None
        timeout = float(source.timeout or self.engine.config.reconnect_timeout)
        link.source.durability = source.durability
        link.source.expiry_policy = source.expiry_policy
        link.source.timeout = int(timeout)
        return timeout

    def _register(self, link: Link, is_publisher: bool, ident: LinkIdentity) -> LinkState:
        link_id = self.node.new_link_id()
        ls = LinkState(link, link_id, is_publisher, ident.label(self.node.config.id))
        ls.client = ident.container
        self.links[ls.ptr] = ls
        self.node.register_link(link_id, self, ls)
        return ls

    def _refuse(self, link: Link, condition: str, description: str) -> None:
        """Refuse an attach: answer it, then detach at once with the reason (AMQP 2.6.3)."""
        log.warning("connection %s: refused link %r: %s", self.peer, link.name, description)
        link.open()
        link.condition = Condition(condition, description)
        link.close()

    def _on_detach(self, link: Link, final: bool) -> None:
        ls = self.links.get(pn.impl(link))
        if ls is not None:
            self._forget(ls, final=final)
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.close()

    def _forget(self, ls: LinkState, final: bool = True) -> None:
        """The link is gone: tell the engine, drop what we kept for it."""
        if self.links.pop(ls.ptr, None) is None:
            return
        log.debug("%s %s %s", "publisher" if ls.is_publisher else "subscriber", ls.label,
                  "closed its link" if final else "went away (link detached or lost)")
        self.node.forget_link(ls.id)
        if ls.is_publisher:
            for d in ls.deliveries.values():
                self.incoming.pop(d, None)
            self.engine.handle(ev.PublisherDetached(self.node.now(), ls.id, final))
        else:
            self.engine.handle(ev.SubscriberDetached(self.node.now(), ls.id, final))
            store = self.node.relay_store
            if ls.durable and store is not None:
                (store.drop_link if final else store.link_away)(ls.durable)
        ls.deliveries.clear()
        self._drain_check.discard(ls)

    def _on_delivery(self, d: Any) -> None:
        link = pn.delivery_link(d)
        ls = self.links.get(link)
        if ls is None:
            if pn.remote_settled(d):
                pn.settle(d)
            return
        if ls.is_publisher:
            self._on_publisher_delivery(ls, link, d)
        else:
            self._on_subscriber_disposition(ls, d)

    def _on_publisher_delivery(self, ls: LinkState, link: Any, d: Any) -> None:
        known = self.incoming.get(d)
        if known is not None:
            if pn.remote_settled(d):
                del self.incoming[d]
                ls.deliveries.pop(known[1], None)
                pn.settle(d)
                self.engine.handle(ev.PublisherSettled(self._now, ls.id, known[1]))
            return
        if d != pn.link_current(link):
            return  # an update to a delivery we already dealt with (refused, aborted)
        if pn.delivery_aborted(d):
            pn.settle(d)  # the sender gave up on it mid-transfer: nothing to deliver
            pn.link_advance(link)
            return
        size = pn.delivery_pending(d)
        if size > self.max_message_size:
            self._close_link(ls, SIZE_EXCEEDED, f"message of at least {size} bytes exceeds "
                             f"this router's max-message-size of {self.max_message_size} bytes; "
                             "send smaller messages or raise max-message-size")
            return
        if pn.delivery_partial(d):
            return  # more frames to come
        payload = pn.receive(link, size)
        tag = pn.tag(d)
        settled = bool(pn.remote_settled(d))
        pn.link_advance(link)
        if settled:
            pn.settle(d)
        else:
            self.incoming[d] = (ls, tag)
            ls.deliveries[tag] = d
        try:
            info = scan(payload)
        except MalformedMessage as err:
            # Logged like every other refusal, so that an operator can see who sends what.
            log.warning("connection %s: rejected a message from %s: not well-formed AMQP: %s",
                        self.peer, ls.label, err)
            self.engine.handle(ev.MessageRefused(
                self._now, ls.id, tag, DECODE_ERROR, f"message is not well-formed AMQP: {err}",
                settled))
            return
        if self.node.relay_store is not None:  # a request's reply-to: a surrogate
            try:  # (only bytes after the annotations change: `info` still holds)
                payload = substitute(self.node, ls.client, payload, info.annotations_end)
            except MalformedMessage as err:
                log.warning("connection %s: rejected a message from %s: %s", self.peer,
                            ls.label, err)
                self.engine.handle(ev.MessageRefused(
                    self._now, ls.id, tag, DECODE_ERROR,
                    f"message is not well-formed AMQP: {err}", settled))
                return
        address = None
        if ls.anonymous:
            address = self._addressed_to(ls, tag, payload, settled)
            if address is None:
                return
        payload = annotate(payload, info, ls.annotation)
        self.engine.handle(ev.MessageArrived(self._now, ls.id, tag, payload, settled,
                                             info.delivery_mode, info.ttl_ms, address,
                                             guarantee=info.guarantee))

    def _addressed_to(self, ls: LinkState, tag: bytes, payload: bytes,
                      settled: bool) -> str | None:
        """The topic of a message on an anonymous link: its `to` property (AMQP 3.2.4), which
        must be a topic name. None, with the message rejected, when it is not."""
        try:
            to = property_string(payload, PROPERTY_TO)
            if to is None:
                raise TopicError("a message on a link with no target address (anonymous relay) "
                                 "needs a `to` property naming its topic; set the message's "
                                 "address, or attach a sender whose target is the topic")
            topic = validate_topic(to)
            if not self.node.policy.may_publish(self.user, ls.client, topic):
                log.warning("connection %s: rejected a message from %s: not authorized to "
                            "publish to %r", self.peer, ls.label, topic)
                self.engine.handle(ev.MessageRefused(
                    self._now, ls.id, tag, UNAUTHORIZED, f"not authorized to publish to "
                    f"{topic!r} ({self._whose_rules()})", settled))
                return None
            return topic
        except (TopicError, MalformedMessage) as err:
            log.warning("connection %s: rejected a message from %s: %s", self.peer, ls.label,
                        err)
            self.engine.handle(ev.MessageRefused(self._now, ls.id, tag, INVALID_FIELD, str(err),
                                                 settled))
            return None

    def _on_subscriber_disposition(self, ls: LinkState, d: Any) -> None:
        state = pn.remote_state(d)
        settled = bool(pn.remote_settled(d))
        if not settled and state not in _REMOTE_DISPOSITION:
            return  # no outcome yet (received state, or nothing)
        tag = pn.tag(d)
        disposition = _REMOTE_DISPOSITION.get(state, Disposition.RELEASED)
        error = ""
        if state == pn.MODIFIED and pn.remote_undeliverable(d):
            disposition = Disposition.UNDELIVERABLE
        elif state == pn.REJECTED:
            error = pn.remote_error(d)
        if settled:
            # Settle our side before the engine answers: a redelivery reuses the tag.
            ls.deliveries.pop(tag, None)
            pn.settle(d)
        self.engine.handle(ev.CopyOutcome(self._now, ls.id, tag, disposition, settled, error))

    def _on_flow(self, link: Any) -> None:
        ls = self.links.get(link)
        if ls is None or ls.is_publisher:
            return
        if self.engine.actions_pending():
            # Sends the engine made for earlier events of this batch are not on the link
            # yet: proton's credit would count them as unused, and the engine's credit
            # (absolute) be too high by that many.
            self.node.flush()
        self.engine.handle(ev.SubscriberCredit(self._now, ls.id, pn.link_credit(link)))
        if pn.link_drain(link):
            self._drain_check.add(ls)

    def _finish_drains(self) -> None:
        """A subscriber asked to drain: once nothing is queued for it, give its credit back."""
        if not self._drain_check:
            return
        for ls in list(self._drain_check):
            if not self.engine.has_queued(ls.id):
                pn.link_drained(ls.ptr)
                self.engine.handle(
                    ev.SubscriberCredit(self._now, ls.id, pn.link_credit(ls.ptr)))
                self._drain_check.discard(ls)

    # ------------------------------------------------------------------ actions

    def apply(self, ls: LinkState, action: Any) -> None:
        """Carry out one engine action on one of this connection's links."""
        kind = type(action)
        if kind is Send:
            if ls.reads and self.node.policy.checks_reads and not self._may_read(ls, action):
                return
            payload = action.payload
            if ls.replies:  # the reply name the request carried, not the surrogate
                payload = restore_name(self.node, payload)
            if action.attempt:
                payload = with_redelivery(payload, action.attempt)
            d = pn.send(ls.ptr, action.tag, payload, action.settled)
            if not action.settled:
                ls.deliveries[action.tag] = d
        elif kind is SettleCopy:
            d = ls.deliveries.pop(action.tag, None)
            if d is not None:
                pn.settle(d)
        elif kind is Decide:
            d = ls.deliveries.get(action.tag)
            if d is not None:
                if type(action.outcome) is Accepted:
                    pn.accept(d)
                else:
                    self._reject(d, action.outcome)
                if ls.settle_first:
                    del ls.deliveries[action.tag]
                    self.incoming.pop(d, None)
                    pn.settle(d)
                    self.engine.handle(ev.PublisherSettled(self._now, ls.id, action.tag))
        elif kind is Credit:
            pn.link_flow(ls.ptr, action.amount)
        elif kind is Relayed:  # every copy owed is on a relay's disk; the outcome comes later
            d = ls.deliveries.get(action.tag)
            if d is not None:
                pn.received(d)
        elif kind is CloseLink:
            self._close_link(ls, action.condition, action.description)
        self._output()

    def _may_read(self, ls: LinkState, action: Send) -> bool:
        """Whether the ACL lets this client be sent the copy (a filter may be wider than what
        it may read: each message is checked, as mosquitto does). One it may not read is not
        sent and counts as accepted for its publisher; the credit it took goes back."""
        if self.node.policy.may_read(self.user, ls.client, action.address):
            return True
        log.debug("subscriber %s: not sent a message for %r (not authorized to read it)",
                  ls.label, action.address)
        self.engine.handle(ev.CopyWithheld(self._now, ls.id, action.tag, action.settled))
        return False

    def _reject(self, d: Any, outcome: Any) -> None:
        delivery = Delivery.wrap(d)
        info = {symbol(k): v for k, v in outcome.info.items()}
        delivery.local.condition = Condition(outcome.condition, outcome.description, info)
        delivery.update(Delivery.REJECTED)

    def _close_link(self, ls: LinkState, condition: str, description: str) -> None:
        log.warning("connection %s: closing link %s: %s", self.peer, ls.label, description)
        link = ls.link
        self._forget(ls)
        link.condition = Condition(condition, description)
        link.close()

    def shutdown(self, description: str) -> None:
        """Close every link and the connection, saying why (the router is stopping). The
        engine is not told: it stops with the router, and to the rest of the mesh this is
        the router going away, so its clients get the failover rules (they may resume
        elsewhere), not a close that would end warm subscriptions and fail their copies."""
        for ls in list(self.links.values()):
            link = ls.link
            self.links.pop(ls.ptr, None)
            self.node.forget_link(ls.id)
            link.condition = Condition(DETACH_FORCED, description)
            link.close()
        self.connection.condition = Condition(CONNECTION_FORCED, description)
        self.connection.close()
        self.node.flush()
        self._output()

    def abort(self, description: str) -> None:
        """An internal error on this connection: close it without harming the others."""
        try:
            for ls in list(self.links.values()):
                self._forget(ls, final=False)
            self.connection.condition = Condition(INTERNAL_ERROR, description)
            self.connection.close()
        finally:
            self.node.flush()
            self._output()

    def closed(self) -> None:
        """The socket is gone: every link of this connection detaches, without closing (so
        warm subscribers stay subscribed)."""
        for ls in list(self.links.values()):
            self._forget(ls, final=False)
        self.incoming.clear()
        self.node.flush()

    def _output(self) -> None:
        if self.on_output is not None:
            self.on_output()


def shared_filter(address: str, props: dict | None) -> str:
    """The filter a receiver subscribes with: its source address, in the shared group its
    link property `exactmesh:shared-group` names if it has one (`$share/GROUP/ADDRESS`)."""
    group = (props or {}).get(SHARED_GROUP)
    if group is None or address.startswith(SHARE_PREFIX):
        return address
    if not isinstance(group, str) or not group or any(c in group for c in "/+#"):
        raise TopicError(f"link property {SHARED_GROUP} must name the shared group: a "
                         f"non-empty string without '/', '+' or '#', not {group!r}")
    return f"{SHARE_PREFIX}{group}/{address}"

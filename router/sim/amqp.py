"""AMQP 1.0 wire clients in the simulated cluster: the SDK's state machines on a client-side
proton engine, talking to the real `amqp_edge.connection.AmqpConnection` at their router.

A share `Params.wire` of the SDK clients (router/sim/sdk.py: `PublisherCore` /
`SubscriberCore` with in-memory stores) do not hand their router's engine events: each
attach is a new AMQP connection. On the client's side, a proton `Connection` + `Transport` +
`Collector` (sans-IO, no reactor: driven as `amqp_edge.connection` drives proton) opens the
link as `amqp_edge.client` does, with the SDK's own helpers (`_Options`, `_dispose`,
`encode_message`): container id NAME, link `pub/NAME` or `sub/NAME`, the target or source
address, the core's declaration under `exactmesh:resume`, a durable source terminus with its
timeout for a warm subscriber, `delivery-mode` for a publisher in mode `some`; the
receiver-settle-mode is proton's default (first), as the SDK's. On the router's side an
`AmqpConnection` made on the router's `SimRuntime` (router/sim/mqtt.py) is fed the bytes and
drained as `amqp_edge.server` does (`transport.push` + `process()`; a writer that runs after
`on_output`, never inside the node loop's flush; `close_tail` and `closed()` when the client
closes its socket). Bytes go both ways over an in-order `Pipe` (mqtt.py), 0.5-5 ms per write,
a write now and then in two pieces.

Proton events on the client's side drive the cores as `amqp_edge.client` does:

- publisher: remote attach -> `core.attached()`; link flow (credit) -> `core.transmit(credit)`
  -> deliveries (tag b"SEQ", the SDK's `encode_message` for message SEQ); a remote
  disposition -> `core.on_disposition` -> settle, then the group commit. The application
  publishes within its window: within the link's credit while attached (as the simulator's
  other publishers), freely while it has no link (the messages wait in the core, declared
  and sent first on the next one).
- subscriber: remote attach -> `core.attached()`; every batch of events ends with the credit
  `core.credit_to_grant` asks for; a delivery -> `core.on_delivery` with the store's answer:
  answered again at once (from the store), bound to a copy the application holds, or shown
  to the application (`_take`, then `SdkClients._sdk_answer`), whose answers go out as
  dispositions, settled (`_dispose`). A slow application is slow until the faults stop.
  Each delivery must be the copy the router sent next on that connection, byte for byte.

The checker sees what it sees of the engine-event SDK clients. The engine actions on a wire
client's link are tapped where the connection registers the link (`AmqpTap`, a `TapConn`):
`on_credit`, `on_decide`, `on_send` (the sender's proton credit is the credit checked),
`on_settle_copy`, before the connection turns them into frames. The connection holds the
router's engine through `WireEngine`, which announces each publisher delivery just before the
engine takes it (`on_publish` the first time any router gets it, `on_resend` after), as
`World.publish` does for the simulator's own clients, and notes the copies the subscriber
settled. The application's side (`on_processed`, `on_suppressed`) is the SDK clients'.

Losing a link is what the real edge does: a crash or a dropped connection breaks the pipe
(everything in flight is lost); the client's core forgets its link (`link_lost`) and it
attaches again later on a new connection with its declaration; the router that lives calls
the old connection's `closed()` when it notices (after up to `notice` seconds: the server's
reader or writer failing), until then it may act on the old link (nowhere), or close it as
stolen when the client comes back to it. An outcome lost with a connection is told again to
the publisher's resend (from the record or its tombstone), and checked again. Closing for good
(churn) is the SDK's `close()`: the link detached (a publisher holding messages, a durable
subscriber) or closed, then the connection, then the socket.

Not modelled: heartbeats and idle timeouts (no `transport.tick`), proton's capacity limits
(nothing is held back), the SDK's reconnect backoff (the world's move delays instead).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from proton import Collector, Connection, Delivery, Endpoint, Event, Transport

from amqp_edge import pn
from amqp_edge.client import (
    DELIVERY_MODE_KEY,
    IDLE_TIMEOUT,
    RESUME_KEY,
    _dispose,
    _Options,
    encode_message,
)
from amqp_edge.connection import AmqpConnection
from router.core import events as ev
from router.core.actions import Accepted, CloseLink, Credit, Decide, Relayed, Send, SettleCopy
from router.core.message import annotate, publisher_annotation, scan, with_redelivery
from router.core.message import encode_message as encode_amqp
from router.core.records import ALL, LinkIdentity, outgoing_tag

from .checker import Violation
from .mqtt import Pipe, TapConn
from .sdk import DISPOSITIONS

if TYPE_CHECKING:
    from .world import PubClient, SimRouter, SubClient, World

    Client = PubClient | SubClient

_STATES = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
           Delivery.RELEASED: "released", Delivery.MODIFIED: "modified",
           Delivery.RECEIVED: "received"}


class WireClient:
    """A simulated client's AMQP side, across its connections: the current one (None while
    it has none), the ones it lost whose router has not noticed yet (by the link they had),
    and for a publisher the messages it made and the outcomes it received."""

    def __init__(self, side: AmqpSide, client: Client, name: str) -> None:
        self.side = side
        self.client = client
        self.name = name  # container id NAME; link pub/NAME or sub/NAME
        self.conn: WireConn | None = None
        self.lost: dict[int, WireConn] = {}
        self.messages: dict[int, bytes] = {}  # publisher: seq -> the AMQP message it sends
        self.got: dict[bytes, str] = {}  # publisher: tag -> the outcome that reached it
        self.publishing = False

    def engine_payload(self, text: bytes) -> bytes:
        """What the router's engine holds for the publisher's message `text` ("KEY#SEQ"):
        the message it sent, with the publisher annotation its first router adds."""
        message = self.messages[int(text.rpartition(b"#")[2])]
        return annotate(message, scan(message), publisher_annotation(self.client.key))


class WireConn:
    """One AMQP connection of a wire client: its proton engine, the pipe, and the router's
    `AmqpConnection` for it."""

    def __init__(self, side: AmqpSide, client: Client, router: SimRouter, n: int) -> None:
        wire = client.wire
        self.side = side
        self.client = client
        self.router = router
        self.pipe = Pipe(side.world.now)
        # The client's side, as proton's reactor sets up a connection (SASL ANONYMOUS).
        self.transport = Transport()
        self.transport.idle_timeout = IDLE_TIMEOUT  # advertised; nobody ticks (no heartbeats)
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.container = wire.name
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.link: Any = None
        self.declared: set[bytes] = set()  # publisher: the tags declared on this attach
        self.attached = False  # the router answered the attach
        self.closing = False  # the client closed it (for good)
        self.broken = False  # the pipe broke (a crash, a dropped connection)
        # The router's side, as `amqp_edge.server` makes it.
        self.node = router.mqtt_node
        assert self.node is not None
        self.server = AmqpConnection(self.node, f"sim:{wire.name}#{n}")  # type: ignore[arg-type]
        self.server.engine = WireEngine(side, self, router.engine)  # type: ignore[assignment]
        self.server.on_output = lambda: side.want_write(self)
        self.node.connections.add(self.server)
        self.node.taps[self.server] = self.tap
        self.server_closed = False
        self.write_due = False
        self.links: list[int] = []  # the engine links the router registered for it
        self.decided: set[tuple[int, bytes]] = set()  # (link, tag) the router decided
        # Subscriber: the copies the router sent on it, in order, as they must arrive.
        self.sent: deque[tuple[bytes, bytes]] = deque()

    @property
    def live(self) -> bool:
        """The client's current connection, usable: not closing, not broken."""
        return self.client.wire.conn is self and not self.broken and not self.closing

    def tap(self, link_id: int, link_state: Any) -> AmqpTap:
        """The router's connection registers a link: whose it is (the checker looks local
        subscribers up by link), and what the node loop holds for it."""
        c = self.client
        world = self.side.world
        want = f"{c.kind}/{c.wire.name}"
        if link_state.link.name != want or link_state.is_publisher != (c.kind == "pub"):
            raise Violation(f"{self.router.id} registered link {link_state.link.name!r} on the "
                            f"connection of {c.key}, which attached {want!r}")
        world.clients[link_id] = c  # type: ignore[assignment]
        if c.wire.conn is self:
            c.link = link_id
        self.links.append(link_id)
        return AmqpTap(self)


class AmqpTap(TapConn):
    """What the node loop holds for a wire client's link: the checker sees each engine action
    first (`AmqpSide.observe`), then the connection applies it (`TapConn`: the copies its own
    engine calls make meanwhile are noted with their records)."""

    def __init__(self, wc: WireConn) -> None:
        super().__init__(wc.side.world.mqtt, wc.router, wc.server, None)
        self.wc = wc

    def apply(self, link_state: Any, action: Any) -> None:
        self.wc.side.observe(self.wc, link_state, action)
        super().apply(link_state, action)


class WireEngine:
    """The engine as a wire client's `AmqpConnection` holds it: the router's (the simulator's
    `NotingEngine`, which notes the record of every copy), with the checker told of each
    publisher delivery just before the engine takes it, of each copy the subscriber settled,
    and of the links the router lets go. Everything else is the engine's own."""

    def __init__(self, side: AmqpSide, wc: WireConn, engine: Any) -> None:
        self._side = side
        self._wc = wc
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def handle(self, event: ev.Event) -> Any:
        kind = type(event)
        if kind is ev.MessageArrived:
            self._side.arrived(self._wc, event)  # type: ignore[arg-type]
        elif kind is ev.MessageRefused:
            raise Violation(f"{self._wc.router.id} refused a message of {self._wc.client.key}: "
                            f"{event.condition}: {event.description}")  # type: ignore[attr-defined]
        result = self._engine.handle(event)
        if kind is ev.CopyOutcome and event.settled:  # type: ignore[attr-defined]
            self._side.copy_settled(self._wc, event)  # type: ignore[arg-type]
        elif kind is ev.SubscriberDetached or kind is ev.PublisherDetached:
            self._side.forgotten(self._wc, event.link)  # type: ignore[attr-defined]
        return result


class AmqpSide:
    """The AMQP wire clients of a `World` (`world.amqp`)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.clients: list[Client] = []  # in order of first attach
        self.conns: list[WireConn] = []  # that may still have bytes in flight
        self._serial = itertools.count(1)
        self.counts = {"connections": 0, "bytes_up": 0, "bytes_down": 0, "noticed": 0,
                       "retold": 0, "retold_changed": 0, "declared_unseen": 0,
                       "outcomes": 0, "suppressed": 0}

    # ------------------------------------------------------------------ the world's calls

    def amqp_body(self, topic: str) -> Callable[[bytes], bytes] | None:
        """How a new publisher of the simulator's own encodes its payloads in a world with
        wire clients: as an AMQP message (a wire subscriber's router parses what it sends
        again, `with_redelivery`), with `to` as the SDK sends it. None without wire clients
        (raw bytes, as always)."""
        if self.world.p.wire <= 0:
            return None
        return lambda text: encode_amqp(text, to=topic)

    def make(self, c: Client) -> None:
        """`c` (an SDK client, not attached yet) talks AMQP: the SDK's identity, container id
        NAME and link pub/NAME or sub/NAME; a warm subscriber's timeout in whole seconds, as
        the SDK puts it on the terminus."""
        name = f"{c.ident.name}-{c.router.id}"
        c.ident = LinkIdentity(name, f"{c.kind}/{name}")
        c.key = c.ident.key
        c.label = c.ident.label(c.router.id)
        c.wire = wire = WireClient(self, c, name)
        if c.kind == "pub":
            c.body = wire.engine_payload  # type: ignore[union-attr]
        else:
            sub: SubClient = c  # type: ignore[assignment]
            if sub.warm is not None:
                sub.warm = float(max(1, round(sub.warm)))
            assert sub.sdk is not None
            sub.sdk.core.durable = sub.warm is not None  # `Subscriber(durable=...)`
        self.clients.append(c)

    def attach(self, c: Client, r: SimRouter) -> None:
        """`c` connects to `r` and attaches its link, with its core's declaration."""
        world = self.world
        wire = c.wire
        wc = WireConn(self, c, r, next(self._serial))
        wire.conn = wc
        self.conns.append(wc)
        self.counts["connections"] += 1
        conn = wc.connection
        conn.open()
        session = conn.session()
        session.open()
        core = c.sdk.core  # type: ignore[union-attr]
        if c.kind == "pub":
            pub: PubClient = c  # type: ignore[assignment]
            decl = core.declaration()
            wc.declared = set(decl["unsettled"])
            props: dict = {RESUME_KEY: decl}
            if pub.mode != ALL:
                props[DELIVERY_MODE_KEY] = pub.mode
            link = session.sender(f"pub/{wire.name}")
            link.target.address = pub.topic
            _Options(props).apply(link)
            what = f"resending {len(decl['unsettled'])}"
        else:
            sub: SubClient = c  # type: ignore[assignment]
            decl = core.declaration(sub.gen, world.now)
            link = session.receiver(f"sub/{wire.name}")
            link.source.address = sub.filter
            _Options({RESUME_KEY: decl}, durable=sub.warm is not None,
                     timeout=sub.warm).apply(link)
            unsettled = decl["unsettled"]
            what = (f"gen {sub.gen}, declares {len(unsettled)}: "
                    f"{sum(v == 'received' for v in unsettled.values())} received")
        link.open()
        wc.link = link
        world.log(f"{c.key} connects to {r.id} over AMQP ({what})")
        self._client_output(wc)
        if c.kind == "pub" and not wire.publishing:
            wire.publishing = True
            world.after(world.rng.expovariate(1 / c.rate), self._publish_loop, c)  # type: ignore[union-attr]

    def close(self, c: Client) -> None:
        """The application closes the client for good (the SDK's `close()`): it detaches its
        link (a publisher holding messages, a durable subscriber) or closes it, closes the
        connection, and the socket after the close frames."""
        wc = c.wire.conn
        if wc is None or not wc.live:
            return
        core = c.sdk.core  # type: ignore[union-attr]
        if c.kind == "pub":
            c.sdk.commit()  # type: ignore[union-attr]
        detach = core.detach_on_close()
        if detach:
            if c.kind == "sub":
                # Its router keeps it subscribed (warm) and matches it while it is away, as
                # for one that lost its link: not strict any more.
                c.strict = False  # type: ignore[union-attr]
            wc.link.detach()
        else:
            wc.link.close()
        wc.connection.close()
        wc.closing = True
        self.world.log(f"{c.label} {'detaches' if detach else 'closes'} its link and closes "
                       "its AMQP connection")
        self._client_output(wc)
        self._send(wc, "up", None)

    def lose(self, c: Client, why: str) -> bool:
        """`c`'s connection broke (its router crashed, or it dropped): nothing in flight
        arrives. Returns True if that is all (it was closing for good: now it is detached);
        else the world goes on as for any client that lost its link."""
        wc = c.wire.conn
        world = self.world
        if wc is not None:
            wc.broken = True
            wc.pipe.open = False
            for queue in wc.pipe.queue.values():
                queue.clear()
            c.wire.conn = None
            if not wc.router.dead and not wc.server_closed:
                c.wire.lost[c.link] = wc
            world.log(f"the AMQP connection of {c.key} to {wc.router.id} breaks ({why})")
        if c.gone:
            c.detached = True
            c.lost_links.add(c.link)
            if c.kind == "sub":
                c.router_unsettled.clear()  # type: ignore[union-attr]
            return True
        return False

    def router_notices(self, r: SimRouter, c: Client, link: int) -> None:
        """The router notices the broken connection (its reader or writer failed): the
        server calls `closed()`."""
        wc = c.wire.lost.pop(link, None)
        if wc is None or r.dead or wc.router is not r or wc.server_closed:
            return
        self.counts["noticed"] += 1
        self.world.log(f"{r.id} notices the AMQP connection of {c.key} (link {link}) is gone")
        self._close_server(wc)

    def unrouted(self, router: SimRouter, action: Any) -> bool:
        """An action for a link no connection holds any more: one of a wire client that left
        or lost it (its connection let the link go in the batch of events that made the
        action) goes nowhere, as on a real connection."""
        c = self.world.clients.get(action.link)
        if c is None or c.wire is None:
            return False
        if c.gone or c.detached or action.link != c.link or action.link in c.lost_links:
            self.world.moves["lost_actions"] += 1
            return True
        return False

    def quiet(self) -> bool:
        """No bytes in flight, and no publisher that lives holds a message without an
        outcome."""
        self.conns = [wc for wc in self.conns if not (wc.broken or wc.router.dead
                                                      or (wc.server_closed and wc.closing))]
        if any(wc.pipe.in_flight() for wc in self.conns):
            return False
        return not any(c.kind == "pub" and not c.gone and c.sdk.core.outstanding  # type: ignore[union-attr]
                       for c in self.clients)

    def final(self) -> None:
        """After draining: every wire client still there is attached, and every publisher's
        core has an outcome for everything it published."""
        problems = []
        for c in self.clients:
            if c.gone or c.detached:
                continue
            core = c.sdk.core  # type: ignore[union-attr]
            if not core.linked:
                problems.append(f"{c.label} is not attached (AMQP)")
            if c.kind == "pub" and core.outstanding:
                problems.append(f"{c.label}'s SDK core holds {core.outstanding} messages "
                                "without an outcome")
        if problems:
            raise Violation("after healing and draining (AMQP clients):\n  "
                            + "\n  ".join(problems[:12]))

    def summary(self) -> str:
        if not self.clients:
            return ""
        pubs = sum(c.kind == "pub" for c in self.clients)
        return (f"; AMQP {len(self.clients)} wire clients ({pubs} publishers), {self.counts}")

    # ------------------------------------------------------------------ the router's side

    def observe(self, wc: WireConn, link_state: Any, action: Any) -> None:
        """An engine action on a wire client's link, before the connection applies it: what
        the checker sees of it (as `World._to_client` for the simulator's own clients)."""
        world = self.world
        checker = world.checker
        c = wc.client
        kind = type(action)
        if kind is Send:
            noted = wc.router.sent_from.pop(id(action), None)
            rec = noted[1] if noted is not None and noted[0] is action else None
            if rec is not None:
                world._records_seen.setdefault(id(rec), rec)
        live = c.link == action.link and not c.detached and c.wire.conn is wc and not wc.broken
        if not live:
            world._lost_action(c, action)
            return
        if kind is CloseLink:
            raise Violation(f"{wc.router.id} closed {c.label}'s current link {action.link}: "
                            f"{action}")
        if c.kind == "pub":
            pub: PubClient = c  # type: ignore[assignment]
            if kind is Credit:
                checker.on_credit(pub, action.amount)
                pub.credit += action.amount
            elif kind is Decide:
                self._decided(wc, pub, action)
            elif kind is Relayed:  # the connection sets `received`; `_disposition` sees it
                if action.tag not in pub.undecided:
                    raise Violation(f"{pub.label} told {action.tag!r} is stored by relays "
                                    "after its outcome, or for nothing it published")
            else:
                raise Violation(f"{wc.router.id} sent {action} on publisher link {pub.label}")
            return
        sub: SubClient = c  # type: ignore[assignment]
        if kind is Send:
            # The credit the router's proton link has: the engine sends only within it.
            sub.credit = pn.link_credit(link_state.ptr)
            msg = checker.on_send(sub, action, rec)
            if not action.settled:
                sub.router_unsettled[action.tag] = None
            payload = action.payload
            wc.sent.append((action.tag, with_redelivery(payload, action.attempt)
                            if action.attempt else payload))
            world.log(f"{sub.label} gets {msg.pub.key}#{msg.seq} {msg.id[:8]} attempt "
                      f"{action.attempt}{' settled' if action.settled else ''} (AMQP)")
        elif kind is SettleCopy:
            checker.on_settle_copy(sub, action)
            del sub.router_unsettled[action.tag]
        else:
            raise Violation(f"{wc.router.id} sent {action} on subscriber link {sub.label}")

    def _decided(self, wc: WireConn, pub: PubClient, action: Decide) -> None:
        """The router decides a delivery of `pub`. A second outcome for one message is
        told only to a resend after the first was lost with its connection (it never reached
        the publisher): it is checked as the first was."""
        world = self.world
        checker = world.checker
        msg = pub.undecided.pop(action.tag, None)
        if msg is None:
            msg = checker.msgs.get(outgoing_tag(pub.ident.container, pub.ident.name,
                                                action.tag).decode())
            if msg is not None and msg.outcome is not None:
                if action.tag in pub.wire.got:
                    raise Violation(f"{wc.router.id} tells {pub.label} an outcome for {msg.id} "
                                    f"again, after it received {pub.wire.got[action.tag]}")
                if (action.link, action.tag) in wc.decided:
                    raise Violation(f"{wc.router.id} decides {msg.id} twice on link "
                                    f"{action.link} of {pub.label}")
                same = same_outcome(msg.outcome, action.outcome)
                self.counts["retold"] += 1
                self.counts["retold_changed"] += not same
                world.log(f"{pub.label} is told {msg.id[:8]} again, its first outcome lost "
                          f"with a connection{'' if same else f' (it was {msg.outcome})'}")
                msg.outcome = None
        wc.decided.add((action.link, action.tag))
        checker.on_decide(pub, action, msg)
        assert msg is not None
        world.log(f"{pub.label} told {str(action.outcome)[:160]} for #{msg.seq} {msg.id[:8]}")

    def arrived(self, wc: WireConn, event: ev.MessageArrived) -> None:
        """A publisher delivery, about to reach the engine: the first time any router gets it,
        the checker learns who its origin owes it (`on_publish`); after that it is a resend
        (`on_resend`), with who this router matches now. One the publisher declared on this
        attach that no router got before (lost in flight with a connection) is both: the
        router takes it as a resend and rebuilds who is owed."""
        world = self.world
        checker = world.checker
        c = world.clients.get(event.link)
        if c is None or c.wire is None or c.kind != "pub":
            raise Violation(f"{wc.router.id} got a message on link {event.link}, which no wire "
                            "publisher holds")
        pub: PubClient = c  # type: ignore[assignment]
        tag = event.tag
        seq = int(tag)
        if event.settled or event.mode is not None or event.ttl_ms is not None:
            raise Violation(f"{wc.router.id} took {pub.label}'s message {seq} as settled "
                            f"{event.settled}, mode {event.mode}, ttl {event.ttl_ms}")
        if event.payload != pub.payload(seq):
            raise Violation(f"{wc.router.id} made {event.payload!r} of {pub.label}'s message "
                            f"{seq}")
        msg_id = outgoing_tag(pub.ident.container, pub.ident.name, tag).decode()
        msg = checker.msgs.get(msg_id)
        local, remote, away = wc.router.engine.matching(pub.topic)
        if msg is None:
            msg = checker.on_publish(pub, tag, msg_id, pub.mode, False, local, remote, None)
            if msg.seq != seq:
                raise Violation(f"{pub.label}'s message {seq} reached a router first as its "
                                f"message #{msg.seq}")
            pub.published += 1
            if pub.detached:
                msg.publisher_gone = True  # it left right after sending it
            else:
                pub.undecided[tag] = msg
            world.log(f"publish {pub.label}#{seq} {msg_id[:8]} mode {msg.mode} owed "
                      f"{sorted(msg.owed)} (AMQP)")
            if tag not in wc.declared:
                return
            self.counts["declared_unseen"] += 1
            msg.rebuilt = True  # what its origin owes it is rebuilt: no record had it
        checker.on_resend(pub, msg, local, remote, away)
        world.moves["resent"] += 1
        world.log(f"resend {pub.label}#{msg.seq} {msg.id[:8]} owed now {sorted(msg.owed)} "
                  "(AMQP)")

    def copy_settled(self, wc: WireConn, event: ev.CopyOutcome) -> None:
        """The subscriber's settled answer reached the router: the copy is settled."""
        c = wc.client
        if c.kind == "sub" and c.link == event.link:
            c.router_unsettled.pop(event.tag, None)  # type: ignore[union-attr]

    def forgotten(self, wc: WireConn, link: int) -> None:
        """The router let a link of the connection go. A subscriber closing for good is
        detached now; the link of a client that still has it must not go."""
        c = wc.client
        if c.link != link or c.detached or c.wire.conn is not wc:
            return
        if not c.gone:
            raise Violation(f"{wc.router.id} let the link {link} of {c.label} go, which it "
                            "still has")
        c.detached = True
        if c.kind == "sub":
            c.router_unsettled.clear()  # type: ignore[union-attr]
        self.world.log(f"{wc.router.id} let {c.label}'s link go")

    def _close_server(self, wc: WireConn) -> None:
        """The server is done with the connection: `closed()`, as `amqp_edge.server` does."""
        if wc.server_closed:
            return
        wc.server_closed = True
        wc.node.connections.discard(wc.server)
        wc.node.taps.pop(wc.server, None)
        if not wc.router.dead:
            wc.server.closed()

    def want_write(self, wc: WireConn) -> None:
        """The connection has output (`on_output`): its writer runs next (never inside the
        node loop's flush, which may be applying actions right now)."""
        if not wc.write_due:
            wc.write_due = True
            self.world.after(0.0, self._writer, wc)

    def _writer(self, wc: WireConn) -> None:
        """`amqp_edge.server._writer`: what proton has pending goes out; once its output is
        closed, the server closes the socket."""
        wc.write_due = False
        if wc.router.dead or wc.server_closed:
            return
        transport = wc.server.transport
        while True:
            pending = transport.pending()
            if pending > 0:
                data = transport.peek(pending)
                transport.pop(pending)
                self.counts["bytes_down"] += len(data)
                if wc.pipe.open:
                    self._send(wc, "down", data)
                continue
            if pending < 0:
                if wc.pipe.open:
                    self._send(wc, "down", None)
                self._close_server(wc)
            return

    def _to_router(self, wc: WireConn, data: bytes, end: bool) -> None:
        """`amqp_edge.server._reader`: bytes into proton, then `process()`; the end of the
        stream (the client closed its socket): `close_tail`, `process()`, and the server
        lets the connection go."""
        if wc.router.dead or wc.server_closed:
            return
        conn = wc.server
        transport = conn.transport
        while data:
            cap = transport.capacity()
            if cap < 0:
                break  # proton closed its input (a protocol error or a close)
            if cap == 0:
                raise Violation(f"{wc.router.id}: proton takes no input from {wc.client.key}")
            transport.push(data[:cap])
            data = data[cap:]
            conn.process()
        if end:
            conn.peer_eof = True
            transport.close_tail()
            conn.process()
            self._close_server(wc)

    # ------------------------------------------------------------------ the pipe

    def _send(self, wc: WireConn, way: str, data: bytes | None) -> None:
        """Bytes (None: the end of the stream) on their way `up` (to the router) or `down`."""
        world = self.world
        rng = world.rng
        pipe = wc.pipe
        pieces: list[bytes | None] = [data]
        if data is not None and len(data) > 1 and rng.random() < 0.1:  # in two reads
            cut = rng.randrange(1, len(data))
            pieces = [data[:cut], data[cut:]]
        for piece in pieces:
            t = max(world.now + rng.uniform(0.0005, 0.005), pipe.last[way])
            pipe.last[way] = t
            pipe.queue[way].append((t, piece))
            world.at(t, self._arrive, wc, way)

    def _arrive(self, wc: WireConn, way: str) -> None:
        """Whatever has arrived by now is read at once."""
        queue = wc.pipe.queue[way]
        now = self.world.now
        data = b""
        end = False
        while queue and queue[0][0] <= now:
            piece = queue.popleft()[1]
            if piece is None:
                end = True
                break
            data += piece
        if not data and not end:
            return
        if way == "up":
            self._to_router(wc, data, end)
        else:
            self._to_client(wc, data, end)

    # ------------------------------------------------------------------ the client's side

    def _client_output(self, wc: WireConn) -> None:
        if wc.broken:
            return
        transport = wc.transport
        while True:
            pending = transport.pending()
            if pending <= 0:
                return
            data = transport.peek(pending)
            transport.pop(pending)
            self.counts["bytes_up"] += len(data)
            self._send(wc, "up", data)

    def _to_client(self, wc: WireConn, data: bytes, end: bool) -> None:
        if wc.broken or wc.closing:
            return  # it closed: nothing more is read
        transport = wc.transport
        while data:
            # What a socket read does: what fits proton's input buffer now, the rest once it
            # has handled that (many outcomes at once, say, can be more than one buffer).
            room = transport.capacity()
            if room <= 0:
                raise Violation(f"{wc.client.key}: its proton takes no more input "
                                f"({len(data)} bytes left)")
            transport.push(data[:room])
            data = data[room:]
            if data:
                self._client_events(wc)
                if wc.broken or wc.closing:
                    return
        if end:
            transport.close_tail()
        self._client_events(wc)
        if end and not wc.closing:
            raise Violation(f"{wc.router.id} closed the AMQP connection of {wc.client.key}")

    def _client_events(self, wc: WireConn) -> None:
        """What the SDK's I/O thread does with one batch of proton events; then, as at its
        REACTOR_QUIESCED, a subscriber tops its credit up, and the output goes."""
        c = wc.client
        collector = wc.collector
        while True:
            event = collector.peek()
            if event is None:
                break
            try:
                if not wc.live:
                    continue
                t = event.type
                if t == Event.LINK_REMOTE_OPEN:
                    self._attached(wc, event.link)
                elif t == Event.LINK_FLOW:
                    if c.kind == "pub":
                        self._transmit(c)  # type: ignore[arg-type]
                elif t == Event.DELIVERY:
                    if c.kind == "pub":
                        self._disposition(wc, c, event.delivery)  # type: ignore[arg-type]
                    else:
                        self._incoming(wc, c, event.delivery)  # type: ignore[arg-type]
                elif t in (Event.LINK_REMOTE_CLOSE, Event.LINK_REMOTE_DETACH):
                    raise Violation(f"{wc.router.id} {'refused' if not wc.attached else 'ended'} "
                                    f"the link of {c.label}: {why(event.link.remote_condition)}")
                elif t == Event.CONNECTION_REMOTE_CLOSE:
                    raise Violation(f"{wc.router.id} closed the AMQP connection of {c.key}: "
                                    f"{why(event.connection.remote_condition)}")
                elif t == Event.TRANSPORT_ERROR:
                    raise Violation(f"the AMQP connection of {c.key} to {wc.router.id} failed: "
                                    f"{why(event.transport.condition)}")
            finally:
                collector.pop()
        if c.kind == "sub" and wc.live:
            self._top_up(wc)
        self._client_output(wc)

    def _attached(self, wc: WireConn, link: Any) -> None:
        if link.state & Endpoint.REMOTE_CLOSED:
            return  # refused: the close follows
        c = wc.client
        wc.attached = True
        c.sdk.core.attached()  # type: ignore[union-attr]
        answer = (link.remote_properties or {}).get(RESUME_KEY) or {}
        known = answer.get("known", ()) if isinstance(answer, dict) else ()
        self.world.log(f"{c.label} attached over AMQP (link {c.link}; the router knows "
                       f"{len(known)} declared)")
        if c.kind == "pub":
            self._transmit(c)  # type: ignore[arg-type]

    # -- publishers

    def _publish_loop(self, pub: PubClient) -> None:
        """The application sends now and then while its window allows: within the link's
        credit, as the simulator's other publishers, or while it has no link (the messages
        wait in the core for the next one); not once the faults stopped."""
        world = self.world
        if pub.gone or world.draining:
            return
        sdk = pub.sdk
        assert sdk is not None
        wc = pub.wire.conn
        ready = wc is None or not wc.attached or wc.link.credit > 0
        if ready and sdk.core.next_seq <= world.p.messages and sdk.core.can_publish():
            self._publish(pub)
        world.after(world.rng.expovariate(1 / pub.rate), self._publish_loop, pub)

    def _publish(self, pub: PubClient) -> None:
        sdk = pub.sdk
        assert sdk is not None
        seq = sdk.core.next_seq
        message = encode_message(pub.wire.name, pub.topic, seq, f"{pub.key}#{seq}".encode())
        pub.wire.messages[seq] = message
        sdk.core.publish(message)
        sdk.commit()
        self.world.log(f"{pub.label} sends #{seq} (AMQP, {sdk.core.outstanding} without an "
                       "outcome)")
        self._transmit(pub)

    def _transmit(self, pub: PubClient) -> None:
        """`Publisher._transmit`: what the core says to send within the link's credit."""
        wc = pub.wire.conn
        if wc is None or not wc.live or not wc.attached:
            return
        link = wc.link
        sdk = pub.sdk
        assert sdk is not None
        for t in sdk.core.transmit(link.credit):
            link.delivery(str(t.seq))
            link.stream(t.payload)
            link.advance()
        self._client_output(wc)

    def _disposition(self, wc: WireConn, pub: PubClient, d: Any) -> None:
        """`Publisher.on_delivery`: the router's outcome for a delivery -> the core, settle,
        then the group commit. The outcome must be the one the checker saw decided."""
        sdk = pub.sdk
        assert sdk is not None
        if sdk.core.decided(d.tag):
            return  # reported again after its outcome (the client ignores it too)
        state = _STATES.get(d.remote_state)
        condition = description = info = None
        if state == "rejected":
            cond = d.remote.condition
            if cond is not None:
                condition, description = cond.name, cond.description
                info = dict(cond.info) if cond.info else None
        reaction = sdk.core.on_disposition(d.tag, state, settled=d.settled,
                                           condition=condition, description=description,
                                           info=info)
        if reaction.settle:
            d.settle()
        if reaction.retry_in is not None:
            self.world.after(reaction.retry_in, self._requeue, pub)
        sdk.commit()
        if state in ("accepted", "rejected"):
            self._check_outcome(pub, d.tag, state, condition, description)
        elif state == "received":  # on relays' disks: the outcome comes later
            self.world.log(f"{pub.label}: {d.tag!r} stored by relays")
            if reaction.wake:
                self.world.after(0.0, self._transmit, pub)
        elif state is not None or d.settled:
            self.world.log(f"{pub.label}: {d.tag!r} {state or 'settled without an outcome'}: "
                           "sent again later")

    def _requeue(self, pub: PubClient) -> None:
        sdk = pub.sdk
        assert sdk is not None
        sdk.core.requeue()
        self._transmit(pub)

    def _check_outcome(self, pub: PubClient, tag: Any, state: str, condition: str | None,
                       description: str | None) -> None:
        tag = tag.encode() if isinstance(tag, str) else bytes(tag)
        msg = self.world.checker.msgs.get(outgoing_tag(pub.ident.container, pub.ident.name,
                                                       tag).decode())
        if msg is None or msg.outcome is None:
            raise Violation(f"{pub.label} got {state} for {tag!r}, which no router decided")
        if tag in pub.wire.got:
            raise Violation(f"{pub.label} got {state} for {msg.id} after {pub.wire.got[tag]}")
        told = msg.outcome
        if isinstance(told, Accepted) != (state == "accepted") or (
                state == "rejected" and (condition != told.condition
                                         or (description or "") != told.description)):
            raise Violation(f"{pub.label} got {state} {condition} {description!r} for {msg.id}, "
                            f"decided {told}")
        pub.wire.got[tag] = state
        self.counts["outcomes"] += 1
        self.world.log(f"{pub.label} receives {state} for #{msg.seq} {msg.id[:8]} (AMQP)")

    # -- subscribers

    def _incoming(self, wc: WireConn, sub: SubClient, d: Any) -> None:
        """`Subscriber.on_delivery`: a whole delivery -> the core, with the store's answer."""
        if not d.readable or d.partial:
            return  # a disposition update, or more frames to come
        if d.aborted:
            d.settle()
            return
        world = self.world
        link = d.link
        data = link.recv(d.pending)
        link.advance()
        tag = d.tag.encode() if isinstance(d.tag, str) else bytes(d.tag)
        text = tag.decode()
        msg = world.checker.msg_by_tag(tag)
        sent = wc.sent.popleft() if wc.sent else None
        if sent != (tag, data):
            raise Violation(f"{sub.label} received {tag!r} {data!r}; its router sent "
                            f"{sent!r} next")
        sdk = sub.sdk
        assert sdk is not None
        incoming = sdk.core.on_delivery(text, d, data, sdk.store.outcome_of(text))
        if incoming.kind == "answer":
            self.counts["suppressed"] += 1
            world.checker.on_suppressed(sub, msg)
            sub.said.setdefault(msg.id, set()).add(DISPOSITIONS[incoming.outcome])
            world.log(f"{sub.label} answers {msg.id[:8]} {incoming.outcome} settled (again, "
                      "from its SDK store, AMQP)")
            _dispose(d, incoming.outcome, incoming.condition, incoming.description)
        elif incoming.kind == "bind":
            previous = incoming.previous
            if previous is not None and previous.settled:
                previous.settle()
                sdk.core.previous_settled()
            world.log(f"{sub.label} binds a copy of {msg.id[:8]} to the one it holds (AMQP)")
        else:
            sub.unanswered[tag] = (sub.copies[msg.id], sub.link, None)
            rng = world.rng
            delay = rng.uniform(0.2, 1.5) if self._slow(sub) else rng.uniform(0.001, 0.02)
            world.after(delay, self._take, sub)

    def _slow(self, sub: SubClient) -> bool:
        """A slow application is slow until the faults stop: then the clients are
        well-behaved (a slow one with a small prefetch, behind the messages its publishers
        stored meanwhile, would not be done within `drain`)."""
        return sub.slow and not self.world.draining

    def _take(self, sub: SubClient) -> None:
        """`SdkClients._sdk_take`: the application takes the next message and answers it a
        little later (`_sdk_answer`)."""
        sdk = sub.sdk
        assert sdk is not None
        if sub.gone:
            return
        shown = sdk.core.take()
        if shown is None:
            return  # dropped with a lost link before the application took it
        world = self.world
        delay = world.rng.uniform(0.2, 1.0) if self._slow(sub) else world.rng.uniform(0.0, 0.01)
        world.after(delay, world._sdk_answer, sub, shown)

    def answer(self, sub: SubClient, answers: list[Any]) -> None:
        """The application's answers (`SubscriberCore.take_answers`): dispositions, settled,
        on their deliveries (all on the current connection: a lost link drops them)."""
        for a in answers:
            _dispose(a.delivery, a.outcome, a.condition, a.description)
        wc = sub.wire.conn
        if wc is not None and wc.live:
            self._top_up(wc)
            self._client_output(wc)

    def _top_up(self, wc: WireConn) -> None:
        """`Subscriber._top_up`: the credit the core asks for."""
        if not wc.attached:
            return
        want = wc.client.sdk.core.credit_to_grant(wc.link.credit)  # type: ignore[union-attr]
        if want:
            wc.link.flow(want)


def same_outcome(a: Any, b: Any) -> bool:
    """Two outcomes a publisher could not tell apart."""
    if isinstance(a, Accepted) or isinstance(b, Accepted):
        return isinstance(a, Accepted) and isinstance(b, Accepted)
    return (a.condition, a.description) == (b.condition, b.description)


def why(cond: Any) -> str:
    """A proton condition, as a person reads it."""
    return f"{cond.name}: {cond.description}" if cond is not None else "no reason given"

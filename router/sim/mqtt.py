"""MQTT 5 devices in the simulated cluster, through the real MQTT session state machine.

Each router gets a `SimRuntime` (the `router.ports.RuntimePort` the MQTT edge runs against:
the simulated clock, the router's real engine, its node loop for link registration and
flushing, its mesh node) and one `MqttState` (sessions and the retained store), made when the
router starts and lost with it when it crashes. A device's connection is a real
`mqtt_edge.session.MqttConnection` at its router, fed bytes (`receive`) and drained
(`take_output`) as `mqtt_edge.server` does; the device at the other end is a model that
speaks real packets (`mqtt_edge.codec.encode`, and a client-role `Decoder`). Bytes go both
ways over an in-order `Pipe` after a small random delay (a write may arrive in two pieces,
and writes that arrive together are read at once, as a socket would).

- A publisher device connects (MQTT 5, clean start), publishes QoS 1 within the server's
  Receive Maximum (packet ids 1, 2, ... never reused, so every delivery id is new), sometimes
  with a message expiry (a ttl) and properties, and checks each PUBACK against the outcome
  the engine decided: a reason code below 0x80 for accepted, a failure code with the
  engine's description as reason string otherwise.
- A subscriber device connects with a small Receive Maximum, subscribes at QoS 1 to one or
  two filters (two subscriptions share the device's window), checks every PUBLISH (topic,
  payload, properties, QoS, DUP, packet ids not reused while in flight, no more in flight
  than its Receive Maximum, the delivery id property when it asked for it) and answers with
  PUBACK after a delay, some with 0x80 (a reject).

The checker sees MQTT devices as it sees AMQP clients (`MqttPub`, `MqttSub` have the fields
it reads): the engine actions on a device's links are tapped where the connection registers
them with the node loop (`TapConn`: the checker's `on_send` / `on_decide` / ... see the
engine's action first, then `MqttConnection.apply` turns it into packets), and a PUBLISH the
device decodes is matched to the `Send` it came from. A publisher's message is announced to
the checker (`on_publish`, with who the origin matches) when the session has handed it to
the engine, before the node loop applies anything that came of it. The MQTT session gets the
router's real `Engine`, not a wrapper (the compiled session accepts nothing else), so that
announcement is made from the bytes: the simulator knows which packets each delivery
completes, and the session holds back only PUBLISHes waiting for credit (`held`).

In this first slice devices never come back: they die with their router's crash (the dead
router keeps nothing), and a dropped connection (`drop_client`) is noticed by the router
after up to `notice` seconds (`MqttConnection.closed()`, as the server does). Churn ends a
device with DISCONNECT, or drops one of two subscriptions with UNSUBSCRIBE. No wills,
retained messages or persistent sessions yet.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqtt_edge import mapping
from mqtt_edge.codec import Decoder, ProtocolError, encode
from mqtt_edge.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from mqtt_edge.session import (
    DELIVERY_ID_PROPERTY,
    PUBLISHER_LINK,
    SUBSCRIBER_PREFIX,
    MqttConnection,
    MqttState,
    PubLink,
    SubLink,
    publish_tag,
    short_reason,
)
from router.config import HostPort, RouterConfig
from router.core.actions import Accepted, CloseLink, Credit, Decide, Send, SettleCopy
from router.core.engine import Disposition
from router.core.message import DATA, binary, encode_message
from router.core.records import ALL, LinkIdentity, outgoing_tag
from router.security.policy import Policy

from .checker import Violation

if TYPE_CHECKING:
    from .checker import Msg
    from .world import SimRouter, World

MQTT_5 = 5
REJECT = 0x80  # what a flaky subscriber device answers now and then (Unspecified error)
REJECT_TEXT = "the simulated MQTT device says no"
NO_MATCHING_SUBSCRIBERS = 0x10


def held_key(tag: bytes, pid: int | None) -> bytes:
    return b"%s/%d" % (tag, pid or 0)


class SimRuntime:
    """`router.ports.RuntimePort` for one simulated router (one instance: a restarted router
    gets a new one, and a new `MqttState`)."""

    def __init__(self, side: MqttSide, router: SimRouter) -> None:
        self.side = side
        self.world = world = side.world
        self.router = router
        p = world.p
        self.config = RouterConfig(
            id=router.id, amqp=HostPort("sim", 0), publisher_window=p.window,
            max_delivery_attempts=p.max_attempts, reconnect_timeout=p.reconnect_timeout,
            resume_timeout=p.resume_timeout, unreachable_timeout=p.unreachable_timeout,
            gossip_interval=p.gossip_interval)
        # The real engine: the compiled session takes nothing else. What the simulator's
        # NotingEngine does for other callers, `flush` and `TapConn` do for MQTT's calls.
        self.engine = router.engine.core
        self.connections: set[Any] = set()
        # Connections of another edge that tap their own links (router/sim/amqp.py): the
        # connection -> what the node loop holds for a link it registers, `make(link_id,
        # link_state)`. MQTT connections are not in it: `TapConn` with their device.
        self.taps: dict[Any, Callable[[int, Any], Any]] = {}
        self.stopping = False
        self.relay_store = None  # the simulated routers have no relay store (yet)
        self.policy = Policy()  # open: the simulator's devices need no credentials
        self.state = MqttState(self)  # after the mesh is attached: the retained store joins it

    @property
    def mesh(self) -> Any:
        return self.router.loop.mesh

    def now(self) -> float:
        return self.world.now

    def new_link_id(self) -> int:
        return next(self.world._link_ids)  # one id space with the simulator's own links

    def register_link(self, link_id: int, conn: Any, link_state: Any) -> None:
        make = self.taps.get(conn) if self.taps else None
        if make is not None:
            self.router.loop.register_link(link_id, make(link_id, link_state), link_state)
            return
        dev = self.side.by_conn.get(id(conn))
        if dev is not None:
            dev.registered(link_id, link_state)
        self.router.loop.register_link(link_id, TapConn(self.side, self.router, conn, dev),
                                       link_state)

    def forget_link(self, link_id: int) -> None:
        self.router.loop.forget_link(link_id)

    def flush(self) -> None:
        """After the session handed the engine events: announce the PUBLISHes it passed on,
        note the records of the copies sent, then what `World.settle` does."""
        if self.router.dead:
            return
        self.side.before_flush(self.router)
        self.world.settle(self.router)

    def mesh_output(self) -> None:
        self.router.loop.mesh_output()

    def attach_mesh(self, mesh: Any, send: Callable[[], None]) -> None:
        self.router.loop.attach_mesh(mesh, send)

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(self.router, fn)
        self.world.after(delay, timer.fire)
        return timer


class Timer:
    """A `call_later` handle: a scheduled simulator event that a cancel (or the router's
    crash) turns into nothing."""

    def __init__(self, router: SimRouter, fn: Callable[[], None]) -> None:
        self.router = router
        self.fn: Callable[[], None] | None = fn

    def cancel(self) -> None:
        self.fn = None

    def fire(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None and not self.router.dead:
            fn()


class TapConn:
    """What the node loop holds for a link an MQTT connection registered: the checker sees
    each engine action on it first, then the session applies it (and turns it into packets).
    Copies the session's own engine calls send meanwhile are noted with their record, as
    `NotingEngine` does for the simulator's calls."""

    def __init__(self, side: MqttSide, router: SimRouter, conn: Any,
                 dev: Device | None) -> None:
        self.side = side
        self.router = router
        self.conn = conn
        self.dev = dev

    def apply(self, link_state: Any, action: Any) -> None:
        if self.dev is not None:
            self.side.observe(self.dev, link_state, action)
        core = self.router.engine.core
        start = core.actions_pending()
        closing = self.dev is not None and self.conn.closing  # (dev None: any connection)
        self.conn.apply(link_state, action)
        self.side.note_sends(self.router, start)
        if self.dev is not None:
            self.dev.note_out()
        if self.dev is not None and type(action) is Credit:
            # PUBLISHes held for credit may have gone on now; if a DISCONNECT held behind
            # them closed the connection, all of them did (it is the device's last packet).
            self.side.announce(self.dev, closed_now=self.conn.closing and not closing)

    def shutdown(self, description: str) -> None:
        self.conn.shutdown(description)


class Pipe:
    """A TCP connection between a device and its router: bytes in order, each write after
    0.5-5 ms (later ones never before earlier ones); `open` goes False when it breaks (a
    crash, a dropped connection): nothing in flight arrives then."""

    def __init__(self, now: float) -> None:
        self.open = True
        self.last = {"up": now, "down": now}  # latest arrival scheduled, per direction
        # Bytes on their way, by arrival time; None: the end of the stream (a close).
        self.queue: dict[str, deque[tuple[float, bytes | None]]] = {"up": deque(),
                                                                    "down": deque()}
        # Client -> router: the end offset of each packet written, and what it was.
        self.sent_up = 0
        self.read_up = 0
        self.marks: deque[tuple[int, int, tuple]] = deque()  # (start, end, what)

    def in_flight(self) -> bool:
        return bool(self.queue["up"] or self.queue["down"])


class MqttClient:
    """What the world and the checker read of a client (the fields of `world.Client`), for
    one MQTT publisher or one subscription of a device. A device never comes back: it is
    never `away`, and once it lost its connection it is `gone`."""

    kind = ""
    mqtt = True

    def __init__(self, dev: Device, ident: LinkIdentity) -> None:
        self.device = dev
        self.router = dev.router
        self.link: int | None = None  # the engine link, once the session registers it
        self.ident = ident
        self.key = ident.key
        self.label = ident.label(dev.router.id)
        self.survivor = False
        self.detached = False
        self.away = False
        self.gone = False
        self.epoch = 0
        self.gen = 1
        self.history = [dev.router.id]
        self.moves = 0
        self.lost_links: set[int] = set()
        self.lost_at: float | None = None
        self.away_spans: list[tuple[float, float]] = []
        self.move_delay: float | None = None
        self.move_router: str | None = None


class MqttPub(MqttClient):
    kind = "pub"

    def __init__(self, dev: Device, topic: str, rate: float) -> None:
        super().__init__(dev, LinkIdentity(dev.client_id, PUBLISHER_LINK))
        self.topic = topic
        self.mode = ALL
        self.rate = rate
        self.credit = 0
        self.published = 0  # announced to the checker (the engine has them), in order
        self.undecided: dict[bytes, Msg] = {}  # by tag (the packet id), in publish order
        self.decided: dict[bytes, Msg] = {}  # never used: the session settles at once
        self.resend_queue: deque[bytes] = deque()
        self.payloads: dict[int, bytes] = {}  # seq -> the message the engine got
        self.sent_props: dict[int, Properties] = {}  # seq -> the PUBLISH's properties

    def text(self, seq: int) -> bytes:
        """The application payload of its message number `seq` (its packet id)."""
        return f"{self.key}#{seq}".encode()

    def payload(self, seq: int) -> bytes:
        """What the engine (and an AMQP subscriber) gets for message `seq`: the AMQP message
        the MQTT edge built from the PUBLISH."""
        return self.payloads[seq]


class MqttSub(MqttClient):
    kind = "sub"

    def __init__(self, dev: Device, topic_filter: str, flaky: bool, slow: bool) -> None:
        super().__init__(dev, LinkIdentity(dev.client_id, SUBSCRIBER_PREFIX + topic_filter))
        self.filter = topic_filter
        self.presettled = False  # QoS 1
        self.flaky = flaky
        self.slow = slow
        self.stalled = False
        self.warm: float | None = None
        self.strict = True
        self.credit = 1 << 30  # the window is the device's: it checks its Receive Maximum
        self.copies: dict[str, int] = {}
        self.releases: dict[str, int] = {}
        self.processed: dict[str, int] = {}
        self.answers: dict[str, int] = {}
        self.accepted_at: dict[str, float] = {}
        self.said: dict[str, set[int]] = {}
        self.last_seq: dict[str, tuple[int, tuple[str, int]]] = {}
        # Copies it holds unanswered, by tag and packet id (a router's second record of a
        # message may send another copy while it holds the first).
        self.unanswered: dict[bytes, tuple[int, int, int | None]] = {}
        self.router_unsettled: dict[bytes, None] = {}
        self.sources: dict[str, tuple[tuple[str, int, int], int]] = {}
        self.dup_ok: set[str] = set()
        self.lost_settled: set[str] = set()
        self.raw_duplicates = 0
        self.suppressed = 0


class Expected:
    """A copy the engine sent on one of a device's subscriptions, until its PUBLISH arrives:
    `live` when the checker saw it (its subscription was there), else it went to a
    subscription the device had left (the device acknowledges it without processing it)."""

    __slots__ = ("attempt", "live", "settled", "sub", "tag")

    def __init__(self, sub: MqttSub, tag: bytes, settled: bool, attempt: int,
                 live: bool) -> None:
        self.sub = sub
        self.tag = tag
        self.settled = settled
        self.attempt = attempt
        self.live = live


class Device:
    """One MQTT client connection: the device's side (the model) and the router's side (the
    real `MqttConnection`)."""

    def __init__(self, side: MqttSide, router: SimRouter, n: int, role: str) -> None:
        world = side.world
        self.side = side
        self.router = router
        self.role = role
        self.client_id = f"mq{n}-{router.id}"
        self.node: SimRuntime = router.mqtt_node
        self.conn = MqttConnection(self.node, f"sim:{self.client_id}", self.node.state)
        self.pipe = Pipe(world.now)
        self.decoder = Decoder(role="client", version=MQTT_5)
        self.pub: MqttPub | None = None
        self.subs: dict[str, MqttSub] = {}  # by filter
        self.connected = False  # CONNACK received
        self.receive_max = 0  # the server's (publisher) / the device's own (subscriber)
        self.closing = False  # the device sent DISCONNECT (or lost the connection)
        self.server_closed = False  # the router's side closed (`closed()` called)
        self.write_due = False
        self.stalled: deque[bytes | None] = deque()  # arrived while the session is paused
        self.delivery_ids = False
        self.next_pid = 1  # SUBSCRIBE / UNSUBSCRIBE packet ids
        self.pending: deque[int] = deque()  # PUBLISH pids the session got, not announced
        self.in_flight: dict[int, int] = {}  # publisher: pid -> seq, until its PUBACK
        self.sent = 0  # publisher: PUBLISHes written
        self.held: dict[int, Expected] = {}  # subscriber: QoS 1 pid -> its copy, until PUBACK
        self.expected: dict[str, list[Expected]] = {}  # msg id -> copies sent, not arrived
        # What the session wrote each QoS 1 packet id for, (filter, tag), as it noted it
        # (`session.out`): which subscription a PUBLISH belongs to (as if the device had
        # asked for subscription identifiers). A copy the engine sent may wait in the
        # session's backlog, and be dropped there when its subscription ends.
        self.out_map: dict[int, tuple[str, bytes]] = {}
        self.acks: dict[int, tuple[int, str]] = {}  # SUBSCRIBE/UNSUBSCRIBE pid -> (n, what)

    @property
    def clients(self) -> list[MqttClient]:
        return [self.pub] if self.pub is not None else list(self.subs.values())

    def note_out(self) -> None:
        """After the session ran: the packet ids it wrote PUBLISHes with."""
        session = self.conn.session
        if session is not None:
            for pid, (topic_filter, tag, _qos) in session.out.items():
                self.out_map[pid] = (topic_filter, tag)

    def registered(self, link_id: int, link_state: Any) -> None:
        """The session registered an engine link: which client of ours it is."""
        world = self.side.world
        if isinstance(link_state, PubLink) and self.pub is not None:
            self.pub.link = link_id
            world.clients[link_id] = self.pub  # type: ignore[assignment]
        elif isinstance(link_state, SubLink) and link_state.filter in self.subs:
            sub = self.subs[link_state.filter]
            sub.link = link_id
            world.clients[link_id] = sub  # type: ignore[assignment]


class MqttSide:
    """The MQTT devices of a `World`, and each router's MQTT runtime."""

    def __init__(self, world: World, topics: tuple[str, ...],
                 filters: tuple[str, ...]) -> None:
        self.world = world
        self.topics = topics  # the world's topics and filters, to draw from
        self.filters = filters
        # AMQP publishers send real AMQP messages when MQTT subscribers may get them (the edge
        # decodes what it delivers; `amqp_body`); otherwise raw bytes, as always.
        self.on = world.p.mqtt > 0
        self.devices: list[Device] = []
        self.by_conn: dict[int, Device] = {}  # id(MqttConnection) -> its device
        # Copies a device without delivery ids processed twice, as the checker allows (at
        # least once for it): reported in `summary`.
        self.duplicates = 0

    def amqp_body(self, topic: str) -> Callable[[bytes], bytes] | None:
        """How a new AMQP publisher to `topic` encodes its payloads: raw bytes in a world
        without MQTT (as always); else an AMQP message, with `to` as the SDK sends it, or
        (a share `bare`) a bare Data section."""
        if not self.on:
            return None
        p = self.world.p
        if p.bare > 0 and self.world.rng.random() < p.bare:
            return lambda text: DATA + binary(text)
        return lambda text: encode_message(text, to=topic)

    def start(self, router: SimRouter) -> SimRuntime:
        """A router starts: its MQTT runtime and state (empty: a crash lost the old ones)."""
        return SimRuntime(self, router)

    # ------------------------------------------------------------------ attaching

    def _device(self, role: str, router: str | None) -> Device | None:
        world = self.world
        r = world.routers[router] if router else world.routers[world.rng.choice(world._alive())]
        if r.dead:
            return None
        dev = Device(self, r, next(world._client_names), role)
        self.devices.append(dev)
        self.by_conn[id(dev.conn)] = dev
        dev.node.connections.add(dev.conn)
        dev.conn.on_output = lambda: self._want_write(dev)
        dev.conn.on_resume = lambda: world.after(0.0, self._resume, dev)
        return dev

    def attach_publisher(self, router: str | None = None, topic: str | None = None,
                         rate: float | None = None) -> MqttPub | None:
        """An MQTT 5 publisher device connects (clean start) and publishes QoS 1 to `topic`."""
        world = self.world
        rng = world.rng
        dev = self._device("pub", router)
        if dev is None:
            return None
        topic = topic or rng.choice(self.topics)
        rate = rate or rng.choice([0.02, 0.1, 0.3])
        pub = dev.pub = MqttPub(dev, topic, rate)
        world.all_clients.append(pub)  # type: ignore[arg-type]
        world.log(f"attach MQTT publisher {pub.label} topic {topic}")
        self._write(dev, encode(Connect(dev.client_id, MQTT_5, clean_start=True), MQTT_5),
                    ("connect",))
        return pub

    def attach_subscriber(self, router: str | None = None, filters: tuple[str, ...] = (),
                          good: bool = False, delivery_ids: bool | None = None,
                          receive_max: int | None = None) -> list[MqttSub]:
        """An MQTT 5 subscriber device connects (clean start, a small Receive Maximum) and
        subscribes at QoS 1 to one filter, or two (they share its window)."""
        world = self.world
        rng, p = world.rng, world.p
        dev = self._device("sub", router)
        if dev is None:
            return []
        if not filters:
            first = rng.choice(self.filters)
            second = rng.choice(self.filters) if rng.random() < 0.25 else first
            filters = (first,) if second == first else (first, second)
        dev.receive_max = receive_max or rng.randint(1, 5)
        dev.delivery_ids = rng.random() < 0.5 if delivery_ids is None else delivery_ids
        flaky = not good and rng.random() < p.flaky
        slow = not good and rng.random() < p.slow
        for f in filters:
            sub = dev.subs[f] = MqttSub(dev, f, flaky, slow)
            world.all_clients.append(sub)  # type: ignore[arg-type]
            world.checker.register_sub(sub)  # type: ignore[arg-type]
        world.log(f"attach MQTT subscriber {dev.client_id}@{dev.router.id} filters "
                  f"{list(filters)} receive-max {dev.receive_max}"
                  f"{' delivery-ids' if dev.delivery_ids else ''}{' flaky' if flaky else ''}"
                  f"{' slow' if slow else ''}")
        props = Properties(receive_maximum=dev.receive_max,
                           user_properties=((DELIVERY_ID_PROPERTY, "on"),)
                           if dev.delivery_ids else ())
        pid = self._pid(dev, len(filters), "SUBSCRIBE")
        # CONNECT and SUBSCRIBE in one write: a client need not wait for CONNACK.
        self._write(dev, encode(Connect(dev.client_id, MQTT_5, clean_start=True,
                                        properties=props), MQTT_5), ("connect",))
        self._write(dev, encode(Subscribe(pid, tuple(Subscription(f, 1) for f in filters)),
                                MQTT_5), ("subscribe",))
        return list(dev.subs.values())

    def _pid(self, dev: Device, n: int, what: str) -> int:
        pid = dev.next_pid
        dev.next_pid += 1
        dev.acks[pid] = (n, what)
        return pid

    # ------------------------------------------------------------------ leaving

    def detach(self, c: MqttClient) -> None:
        """The application closes: a publisher, or a subscriber device's last subscription,
        with DISCONNECT (normal); one of two subscriptions with UNSUBSCRIBE."""
        dev = c.device
        if c.gone or dev.closing:
            return
        world = self.world
        live = [s for s in dev.subs.values() if not s.gone]
        if isinstance(c, MqttSub) and len(live) > 1:
            world.log(f"MQTT {dev.client_id} unsubscribes {c.filter}")
            self._leave(c)
            self._write(dev, encode(Unsubscribe(self._pid(dev, 1, "UNSUBSCRIBE"), (c.filter,)),
                                    MQTT_5), ("unsubscribe", c))
            # What it holds of that subscription it acknowledges without processing: the
            # session keeps a packet id for each until then.
            for pid, e in sorted(dev.held.items()):
                if e.sub is c and e.live:
                    e.live = False
                    world.after(world.rng.uniform(0.0, 0.01), self._answer, dev, pid)
            return
        world.log(f"MQTT {dev.client_id} disconnects")
        for client in dev.clients:
            self._leave(client)
        dev.closing = True
        self._write(dev, encode(Disconnect(), MQTT_5), ("disconnect",))
        self._send(dev, "up", None)  # and closes its socket [MQTT-3.14.4-1]

    def _leave(self, c: MqttClient) -> None:
        """The application is done with `c`: it processes nothing more. A publisher is
        detached at once (as an AMQP one: outcomes for it go nowhere); a subscription only
        when its router has dropped it (`_dropped`): until then it is still owed messages."""
        c.gone = True
        if isinstance(c, MqttPub):
            c.detached = True
            for msg in c.undecided.values():
                msg.publisher_gone = True
            c.undecided.clear()
        else:
            self.world.checker.on_gone(c)  # type: ignore[arg-type]

    def _dropped(self, sub: MqttSub) -> None:
        """The router dropped the subscription (UNSUBSCRIBE, the connection closed): the
        engine lets its copies go."""
        sub.detached = True
        sub.router_unsettled.clear()

    def lose(self, c: MqttClient, why: str) -> None:
        """The device's connection broke (its router crashed, or it dropped): everything in
        flight is lost, and the device is gone for good (no MQTT survivors yet)."""
        dev = c.device
        if dev.pipe.open:
            dev.pipe.open = False
            dev.pipe.queue = {"up": deque(), "down": deque()}
            dev.closing = True
            self.world.log(f"MQTT {dev.client_id}@{dev.router.id} lost its connection ({why})")
        for client in dev.clients:
            if client.detached:
                continue
            if client.link is not None:
                client.lost_links.add(client.link)
            client.lost_at = self.world.now
            client.epoch += 1
            if not client.gone:
                self._leave(client)
            if isinstance(client, MqttSub):
                client.strict = False
                self._dropped(client)

    def router_notices(self, r: SimRouter, c: MqttClient) -> None:
        """The router notices the dropped connection: the server calls `closed()`."""
        dev = c.device
        if r.dead or dev.server_closed:
            return
        self.world.log(f"{r.id} notices the MQTT connection of {dev.client_id} is gone")
        self._close_server(dev)

    def _close_server(self, dev: Device) -> None:
        dev.pending.clear()  # held for credit, never passed on: the session drops them
        dev.server_closed = True
        dev.node.connections.discard(dev.conn)
        for sub in dev.subs.values():
            if not sub.detached:
                self._dropped(sub)
        dev.conn.closed()  # flushes

    # ------------------------------------------------------------------ the network

    def _write(self, dev: Device, data: bytes, what: tuple) -> None:
        """The device writes one packet toward its router."""
        pipe = dev.pipe
        if not pipe.open:
            return
        pipe.marks.append((pipe.sent_up, pipe.sent_up + len(data), what))
        pipe.sent_up += len(data)
        self._send(dev, "up", data)

    def _send(self, dev: Device, way: str, data: bytes | None) -> None:
        """Bytes (None: the end of the stream) on their way in direction `way`."""
        world = self.world
        rng = world.rng
        pipe = dev.pipe
        pieces: list[bytes | None] = [data]
        if data is not None and len(data) > 1 and rng.random() < 0.1:  # in two reads
            cut = rng.randrange(1, len(data))
            pieces = [data[:cut], data[cut:]]
        for piece in pieces:
            t = max(world.now + rng.uniform(0.0005, 0.005), pipe.last[way])
            pipe.last[way] = t
            pipe.queue[way].append((t, piece))
            world.at(t, self._arrive, dev, way)

    def _arrive(self, dev: Device, way: str) -> None:
        """Whatever has arrived by now is read at once."""
        world = self.world
        queue = dev.pipe.queue[way]
        data = b""
        end = False
        while queue and queue[0][0] <= world.now:
            piece = queue.popleft()[1]
            if piece is None:
                end = True
                break
            data += piece
        if way == "down":
            if data:
                self._to_device(dev, data)
            return
        if data:
            self._to_router(dev, data)
        if end:
            self._to_router(dev, None)

    def _to_router(self, dev: Device, data: bytes | None) -> None:
        """Bytes reach the router (None: the device closed its socket; the server calls
        `closed()`). A DISCONNECT is read on its own (split off what came with it): the
        session drops the PUBLISHes it holds for credit when it closes, and which of them it
        had passed on is known only before (`announce`)."""
        if dev.router.dead or dev.server_closed:
            return
        if dev.stalled or dev.conn.paused:  # the server does not read a paused connection
            dev.stalled.append(data)
            return
        if data is None:
            self.world.log(f"{dev.router.id}: the MQTT connection of {dev.client_id} is closed")
            self._close_server(dev)
            return
        start = dev.pipe.read_up
        cut = next((s - start for s, _e, what in dev.pipe.marks
                    if what[0] == "disconnect" and start < s < start + len(data)), None)
        if cut is not None:
            self._receive(dev, data[:cut])
            self._to_router(dev, data[cut:])
        else:
            self._receive(dev, data)

    def _receive(self, dev: Device, data: bytes) -> None:
        pipe = dev.pipe
        pipe.read_up += len(data)
        done = []
        while pipe.marks and pipe.marks[0][1] <= pipe.read_up:
            done.append(pipe.marks.popleft()[2])
        for what in done:
            if what[0] == "publish":
                dev.pending.append(what[1])
        conn = dev.conn
        conn.receive(data, self.world.now)
        dev.note_out()
        for what in done:
            if what[0] == "puback":
                what[1].router_unsettled.pop(what[2], None)  # the session settled it
            elif what[0] == "unsubscribe":
                self._dropped(what[1])
        if conn.closing:
            for sub in dev.subs.values():
                if not sub.detached:
                    self._dropped(sub)
            if not dev.server_closed:
                self._want_write(dev)

    def _resume(self, dev: Device) -> None:
        """The session took what it held: the server reads again."""
        while dev.stalled and not dev.conn.paused:
            data = dev.stalled.popleft()
            self._to_router(dev, data)

    def _want_write(self, dev: Device) -> None:
        """The session has output (`on_output`): the writer runs next (never inside the node
        loop's flush, which may be applying actions right now)."""
        if not dev.write_due:
            dev.write_due = True
            self.world.after(0.0, self._writer, dev)

    def _writer(self, dev: Device) -> None:
        dev.write_due = False
        if dev.router.dead or dev.server_closed:
            return
        conn = dev.conn
        data = conn.take_output()
        if data and dev.pipe.open:
            self._send(dev, "down", data)
        if not data and not conn.closing:
            return
        if conn.closing:
            # The server closes the socket once its last packets are written.
            if not dev.closing:
                self.world.log(f"{dev.router.id} closes the MQTT connection of "
                               f"{dev.client_id}")
            self._close_server(dev)
        else:
            conn.output_drained()

    def _to_device(self, dev: Device, data: bytes) -> None:
        if dev.closing:
            return  # it disconnected: nothing more is read
        try:
            packets = dev.decoder.receive(data)
        except ProtocolError as err:
            raise Violation(f"MQTT device {dev.client_id} cannot decode what "
                            f"{dev.router.id} sent: {err}") from None
        for packet in packets:
            if dev.closing:
                return
            self._on_packet(dev, packet)

    # ------------------------------------------------------------------ the device

    def _on_packet(self, dev: Device, p: Any) -> None:
        kind = type(p)
        who = f"MQTT {dev.role} {dev.client_id}@{dev.router.id}"
        if kind is ConnAck:
            if p.reason_code != 0 or p.session_present:
                raise Violation(f"{who}: CONNACK {p}")
            dev.connected = True
            if dev.role == "pub":
                dev.receive_max = p.properties.receive_maximum or 65535
                pub = dev.pub
                assert pub is not None
                self.world.after(self.world.rng.expovariate(1 / pub.rate), self._publish_loop,
                                 dev)
        elif kind is Publish:
            self._on_publish(dev, p, who)
        elif kind is PubAck:
            self._on_puback(dev, p, who)
        elif kind in (SubAck, UnsubAck):
            n, what = dev.acks.pop(p.packet_id, (0, ""))
            want = (1,) * n if kind is SubAck else (0,) * n
            if what != ("SUBSCRIBE" if kind is SubAck else "UNSUBSCRIBE") or \
                    tuple(p.reason_codes) != want:
                raise Violation(f"{who}: {p} answers {what or 'nothing'} (expected {want})")
        elif kind is Disconnect:
            raise Violation(f"{who}: the router disconnected it: reason 0x{p.reason_code:02X} "
                            f"{p.properties.reason_string or ''}")
        else:
            raise Violation(f"{who}: unexpected {p}")

    def _publish_loop(self, dev: Device) -> None:
        world = self.world
        pub = dev.pub
        assert pub is not None
        if pub.detached or world.draining:
            return
        if len(dev.in_flight) < dev.receive_max and dev.sent < world.p.messages:
            self._publish(dev, pub)
        world.after(world.rng.expovariate(1 / pub.rate), self._publish_loop, dev)

    def _publish(self, dev: Device, pub: MqttPub) -> None:
        world = self.world
        rng, p = world.rng, world.p
        dev.sent += 1
        seq = pid = dev.sent  # never reused: each delivery id is new
        expiry = rng.randint(1, 3) if rng.random() < p.ttl else None
        props = Properties(
            message_expiry_interval=expiry,
            content_type="text/plain" if rng.random() < 0.2 else None,
            user_properties=(("seq", str(seq)),) if rng.random() < 0.2 else ())
        pub.sent_props[seq] = props
        dev.in_flight[pid] = seq
        self._write(dev, encode(Publish(pub.topic, pub.text(seq), 1, packet_id=pid,
                                        properties=props), MQTT_5), ("publish", pid))

    def _on_puback(self, dev: Device, p: PubAck, who: str) -> None:
        pub = dev.pub
        if pub is None or p.packet_id not in dev.in_flight:
            raise Violation(f"{who}: PUBACK for packet id {p.packet_id}, not in flight")
        seq = dev.in_flight.pop(p.packet_id)
        msg = self.world.checker.by_seq.get((pub.key, seq))
        if msg is None or msg.outcome is None:
            raise Violation(f"{who}: PUBACK {p.packet_id} but the engine decided nothing")
        code = p.reason_code
        if isinstance(msg.outcome, Accepted):
            if code != 0:
                raise Violation(f"{who}: PUBACK 0x{code:02X} for accepted {msg.id}")
        elif code < REJECT and code != NO_MATCHING_SUBSCRIBERS:
            raise Violation(f"{who}: PUBACK 0x{code:02X} for {msg.id}, which failed: "
                            f"{msg.outcome}")
        elif p.properties.reason_string != short_reason(msg.outcome):
            raise Violation(f"{who}: PUBACK reason {p.properties.reason_string!r} for "
                            f"{msg.id}, which failed: {msg.outcome.description!r}")

    def _on_publish(self, dev: Device, p: Publish, who: str) -> None:
        world = self.world
        checker = world.checker
        try:
            key, _, seq = p.payload.decode().rpartition("#")
            msg = checker.by_seq[(key, int(seq))]
        except (ValueError, KeyError):
            raise Violation(f"{who}: a PUBLISH nobody published: {p}") from None
        waiting = dev.expected.get(msg.id, [])
        settled = p.qos == 0
        if settled:  # written as the engine sent it (never kept in the session's backlog)
            e = next((e for e in waiting if e.settled), None)
        else:
            topic_filter, tag = dev.out_map.get(p.packet_id or 0, ("", b""))
            if tag != msg.id.encode():
                raise Violation(f"{who}: PUBLISH of {msg.id} with packet id {p.packet_id}, "
                                f"which the session wrote for {tag!r}")
            e = next((e for e in waiting if not e.settled and e.sub.filter == topic_filter),
                     None)
        if e is None:
            raise Violation(f"{who}: PUBLISH of {msg.id} (QoS {p.qos}) that the engine never "
                            "sent it")
        waiting.remove(e)
        if not waiting:
            del dev.expected[msg.id]
        if p.topic != msg.pub.topic or p.retain or p.dup != (e.attempt > 0 and not settled):
            raise Violation(f"{who}: PUBLISH of {msg.id} (topic {msg.pub.topic!r}, attempt "
                            f"{e.attempt}) came as {p}")
        if p.qos not in (0, 1):
            raise Violation(f"{who}: a QoS {p.qos} PUBLISH on a QoS 1 subscription")
        users = p.properties.user_properties
        if dev.delivery_ids:
            if (DELIVERY_ID_PROPERTY, msg.id) not in users:
                raise Violation(f"{who}: PUBLISH of {msg.id} without its delivery id: {p}")
            users = tuple(u for u in users if u[0] != DELIVERY_ID_PROPERTY)
        elif any(u[0] == DELIVERY_ID_PROPERTY for u in users):
            raise Violation(f"{who}: a delivery id it did not ask for: {p}")
        sent = getattr(msg.pub, "sent_props", {}).get(msg.seq)
        if sent is not None and (users != sent.user_properties
                                 or p.properties.content_type != sent.content_type):
            raise Violation(f"{who}: PUBLISH of {msg.id} with properties {p.properties}, "
                            f"published with {sent}")
        if not settled:
            pid = p.packet_id
            assert pid is not None
            if pid in dev.held:
                raise Violation(f"{who}: packet id {pid} reused while still in flight")
            dev.held[pid] = e
            if len(dev.held) > dev.receive_max:
                raise Violation(f"{who}: {len(dev.held)} QoS 1 PUBLISHes in flight, more "
                                f"than its Receive Maximum {dev.receive_max}")
        sub = e.sub
        if not e.live or sub.gone:
            if not settled:  # a copy for a subscription it left: acknowledged, not processed
                world.after(world.rng.uniform(0.0, 0.01), self._answer, dev, p.packet_id)
            return
        world.log(f"MQTT {sub.label} gets {msg.pub.key}#{msg.seq} {msg.id[:8]} QoS {p.qos}"
                  f"{f' pid {p.packet_id}' if p.packet_id else ''}")
        if settled:
            if sub.processed.get(msg.id) and not dev.delivery_ids and \
                    (msg.id in sub.dup_ok or not sub.strict):
                self.duplicates += 1  # at least once (see `_answer`)
            elif sub.processed.get(msg.id):
                checker.on_suppressed(sub, msg)  # type: ignore[arg-type]
            else:
                checker.on_processed(sub, msg)  # type: ignore[arg-type]
                sub.accepted_at[msg.id] = world.now
            return
        sub.unanswered[held_key(e.tag, p.packet_id)] = (sub.copies.get(msg.id, 0),
                                                        sub.link or 0, None)
        rng = world.rng
        delay = rng.uniform(0.2, 1.5) if sub.slow else rng.uniform(0.001, 0.02)
        world.after(delay, self._answer, dev, p.packet_id)

    def _answer(self, dev: Device, pid: int) -> None:
        """PUBACK: processed (0x00) or refused (0x80); for a copy of a subscription it left,
        0x00 without processing."""
        world = self.world
        if dev.closing:
            return
        e = dev.held.pop(pid, None)
        if e is None:
            return
        sub = e.sub
        if not e.live or sub.gone:
            sub.unanswered.pop(held_key(e.tag, pid), None)
            self._write(dev, encode(PubAck(pid), MQTT_5), ("puback", sub, e.tag))
            return
        checker = world.checker
        msg = checker.msg_by_tag(e.tag)
        del sub.unanswered[held_key(e.tag, pid)]
        stored = sub.answers.get(msg.id)
        how = ""
        if stored is not None and dev.delivery_ids:
            # A copy of one it answered: the delivery id tells it (docs/mqtt.md), and it
            # answers again from its store without processing, as the SDK does.
            checker.on_suppressed(sub, msg)  # type: ignore[arg-type]
            reject = stored == Disposition.REJECTED
            how = " (again, from its store)"
        elif sub.processed.get(msg.id) and (msg.id in sub.dup_ok or not sub.strict):
            # Without delivery ids it cannot tell a copy the mesh may send again (a router's
            # second record after a late resend): at least once, it processes it again.
            self.duplicates += 1
            reject = False
            how = " (processed again: a duplicate it cannot tell)"
        else:
            reject = sub.flaky and not world.draining and world.rng.random() < 0.15
            if reject:
                sub.answers[msg.id] = Disposition.REJECTED
            else:
                checker.on_processed(sub, msg)  # type: ignore[arg-type]
                sub.answers[msg.id] = Disposition.ACCEPTED
                sub.accepted_at[msg.id] = world.now
        sub.said.setdefault(msg.id, set()).add(
            Disposition.REJECTED if reject else Disposition.ACCEPTED)
        packet = PubAck(pid, REJECT, Properties(reason_string=REJECT_TEXT)) if reject \
            else PubAck(pid)
        world.log(f"MQTT {sub.label} answers {msg.id[:8]} pid {pid} "
                  f"{'0x80 (rejects)' if reject else '0x00'}{how}")
        self._write(dev, encode(packet, MQTT_5), ("puback", sub, e.tag))

    # ------------------------------------------------------------------ the router's side

    def observe(self, dev: Device, link_state: Any, action: Any) -> None:
        """An engine action on one of the device's links, before the session applies it:
        what the checker sees of it (as `World._to_client` for an AMQP client)."""
        world = self.world
        checker = world.checker
        kind = type(action)
        if isinstance(link_state, PubLink):
            pub = dev.pub
            if pub is None:  # every connection has a publisher link; this device never uses it
                if kind is CloseLink and not dev.closing:
                    raise Violation(f"{dev.router.id} closed {dev.client_id}'s publisher "
                                    f"link: {action}")
                return
            live = not pub.detached and pub.link == action.link
            if not live:
                world.moves["lost_actions"] += 1
                return
            if kind is Decide:
                msg = pub.undecided.pop(action.tag, None)
                checker.on_decide(pub, action, msg)  # type: ignore[arg-type]
                assert msg is not None
                world.log(f"MQTT {pub.label} told {str(action.outcome)[:160]} for "
                          f"#{msg.seq} {msg.id[:8]}")
            elif kind is Credit:
                checker.on_credit(pub, action.amount)  # type: ignore[arg-type]
            elif kind is CloseLink:
                raise Violation(f"{dev.router.id} closed {pub.label}'s link: {action}")
            return
        sub = dev.subs.get(link_state.filter)
        live = sub is not None and not sub.detached and sub.link == action.link
        if kind is Send:
            noted = dev.router.sent_from.pop(id(action), None)
            rec = noted[1] if noted is not None and noted[0] is action else None
            if rec is not None:
                world._records_seen.setdefault(id(rec), rec)
            assert sub is not None
            if not live:
                world.moves["lost_actions"] += 1
                if action.settled:
                    checker.on_lost_settled(sub, action)  # type: ignore[arg-type]
            else:
                msg = checker.on_send(sub, action, rec)  # type: ignore[arg-type]
                if not action.settled:
                    sub.router_unsettled[action.tag] = None
            dev.expected.setdefault(action.tag.decode(), []).append(
                Expected(sub, action.tag, action.settled, action.attempt, live))
        elif kind is SettleCopy:
            if live:
                assert sub is not None
                checker.on_settle_copy(sub, action)  # type: ignore[arg-type]
                del sub.router_unsettled[action.tag]
        elif kind is CloseLink and live:
            raise Violation(f"{dev.router.id} closed {sub.label}'s link: {action}")  # type: ignore[union-attr]

    def unrouted(self, router: SimRouter, action: Any) -> bool:
        """An action for a link no connection holds: one of a device that left (its session
        let the link go in the step that made the action, say a DISCONNECT right behind a
        PUBLISH decided at once) goes nowhere, as for a real connection."""
        c = self.world.clients.get(action.link)
        if c is None or not c.mqtt or not (c.gone or c.detached):
            return False
        self.world.moves["lost_actions"] += 1
        return True

    def note_sends(self, router: SimRouter, start: int) -> None:
        """The records of the copies the engine made from `start` on (the session's own engine
        calls): what `NotingEngine.handle` notes for the simulator's."""
        core = router.engine.core
        for action in core.peek_actions(start):
            if type(action) is Send and id(action) not in router.sent_from:
                rec = router.engine.sent_record(action)
                if rec is not None:
                    router.sent_from[id(action)] = (action, rec)

    def before_flush(self, router: SimRouter) -> None:
        """A session calls the node's flush after handing the engine events: announce the
        PUBLISHes it passed on, and note the copies' records."""
        self.note_sends(router, 0)
        for dev in self.devices:
            if dev.pending and dev.router is router:
                self.announce(dev)

    def announce(self, dev: Device, closed_now: bool = False) -> None:
        """The session handed the engine these PUBLISHes (those not held for credit): the
        checker learns who the origin owes each, as `World.publish` tells it for an AMQP
        publisher (the engine's matching reads the same now as just before: nothing else
        happened in between)."""
        if not dev.pending:
            return
        if dev.conn.closing and not closed_now:
            # Closed by a DISCONNECT that was not held (so nothing was: it is read on its
            # own), or by `closed()`: the PUBLISHes still pending were held, and dropped.
            dev.pending.clear()
            return
        world = self.world
        pub = dev.pub
        assert pub is not None
        core = dev.router.engine.core
        held = {q.packet_id for q in dev.conn.held if type(q) is Publish}
        while dev.pending and dev.pending[0] not in held:
            pid = dev.pending.popleft()
            seq = pid
            tag = publish_tag(pid, pub.topic, pub.text(seq))
            msg_id = outgoing_tag(dev.client_id, PUBLISHER_LINK, tag).decode()
            sent = pub.sent_props[seq]
            # What the session hands the engine for this PUBLISH (the engine holds a record
            # of it, unless the connection closed in the same step and it was let go).
            payload = mapping.encode(pub.topic, pub.text(seq), 1, sent, dev.client_id)
            rec = core.find(msg_id)
            if rec is None and not closed_now:
                raise Violation(f"{dev.router.id} took PUBLISH {pid} of {pub.label} but holds "
                                "no record of it")
            if rec is not None and rec.payload != payload:
                raise Violation(f"{dev.router.id} made {mapping.decode(rec.payload)} of "
                                f"{pub.label}'s PUBLISH {pid}")
            d = mapping.decode(payload)
            if (d.topic, d.payload, d.qos) != (pub.topic, pub.text(seq), 1) or \
                    d.properties.content_type != sent.content_type or \
                    d.properties.user_properties != sent.user_properties:
                raise Violation(f"the MQTT mapping made {d} of {pub.label}'s PUBLISH {pid}")
            local, remote, _away = core.matching(pub.topic)
            expiry = sent.message_expiry_interval
            ttl_ms = expiry * 1000 if expiry else None
            msg = world.checker.on_publish(pub, tag, msg_id, ALL, False,  # type: ignore[arg-type]
                                           local, remote, ttl_ms)
            if msg.seq != seq:
                raise Violation(f"{pub.label}'s PUBLISH {pid} reached the engine as its "
                                f"message #{msg.seq}")
            pub.published += 1
            pub.payloads[seq] = payload
            if pub.detached:
                msg.publisher_gone = True  # it disconnected right after sending it
            else:
                pub.undecided[tag] = msg
            world.log(f"MQTT publish {pub.label}#{seq} {msg_id[:8]} owed {sorted(msg.owed)}"
                      f"{f' ttl {ttl_ms}' if ttl_ms else ''}")

    # ------------------------------------------------------------------ the end

    def summary(self) -> str:
        """For `World.summary` (empty without MQTT devices)."""
        if not self.devices:
            return ""
        pubs = sum(1 for d in self.devices if d.role == "pub")
        subs = sum(len(d.subs) for d in self.devices if d.role == "sub")
        return (f"; MQTT {len(self.devices)} devices ({pubs} publishers, {subs} "
                f"subscriptions), {self.duplicates} duplicates processed by devices without "
                "delivery ids")

    def quiet(self) -> bool:
        """No bytes in flight between a live device and its router."""
        return not any((dev.pipe.open and dev.pipe.in_flight()) or dev.stalled
                       for dev in self.devices if not dev.router.dead)

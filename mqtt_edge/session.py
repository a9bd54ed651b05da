"""One MQTT client connection and the session it carries, as a sans-IO state machine.

Bytes in (`receive`), bytes out (`take_output`), engine calls and the engine's actions
(`apply`) in between; `mqtt_edge.server` owns the socket. The mapping onto the mesh (see
docs/mqtt.md):

- The client's PUBLISHes go through one engine publisher link per connection, identity
  (client id, "mqtt"), each message with its own topic (`Engine.message(address=...)`). The
  delivery tag of a QoS 1/2 message is its packet id, so a PUBLISH resent with DUP=1 after a
  reconnect finds the record the mesh still has. QoS 0 is a pre-settled message.
- QoS 1 is answered with PUBACK, QoS 2 with PUBREC, only when the engine decides (every
  matched subscriber accepted, or the first failure); PUBREL settles the delivery
  (`publisher_settled`) and is answered with PUBCOMP.
- Each subscription is one engine subscriber, identity (client id, "mqtt/" + filter). A QoS 0
  subscription is a pre-settled subscriber; QoS 1 PUBACK and QoS 2 PUBCOMP mean accepted. The
  router sends PUBREL at once after PUBREC (it never takes a QoS 2 message back) and frees the
  packet id on PUBCOMP. The client's receive-maximum is the credit shared by its QoS 1/2
  subscriptions.
- A session with clean start off and an expiry (5.0), or clean session off (3.1.1), makes its
  subscriptions warm subscribers: what arrives while the client is away waits for it.
- A session lives at one router of the mesh; a CONNECT with clean start off elsewhere takes
  it over: the subscriptions are found in the mesh's gossip (each one's attach generation
  carries its QoS), attached here with a newer generation, and the old router closes the old
  connection when its links are stolen (docs/mqtt.md, "Sessions across routers").
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

from router.core import events as ev
from router.core.actions import Accepted, CloseLink, Credit, Decide, Rejected, Send, SettleCopy
from router.core.engine import NO_SUBSCRIBERS, Disposition
from router.core.events import NO_LOCAL
from router.core.failover import LINK_STOLEN
from router.core.records import ALL, IN_DOUBT, LinkIdentity
from router.core.topics import SHARE_PREFIX, split_shared
from router.security.policy import (
    BAD_CREDENTIALS,
    FAILED_LOG_IN_DELAY,
    NOT_AUTHORIZED,
    TOO_MANY,
    Refusal,
    shown,
)

from . import mapping, retained
from .codec import MQTT_5, PLAIN_ACK_SHIFT, Decoder, ProtocolError, encode, encode_plain_publish
from .packets import (
    EMPTY_PROPERTIES,
    ConnAck,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from .reason_codes import ReasonCode as RC
from .reason_codes import reason_name

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.mqtt")

PUBLISHER_LINK = "mqtt"
WILL_LINK = "mqtt-will"  # the publisher link a will message goes through
SUBSCRIBER_PREFIX = "mqtt/"
WINDOW_311 = 100  # in-flight QoS 1/2 messages toward a 3.1.1 client (it has no receive-maximum)
# Acknowledgements and pings are handled at once even while PUBLISHes wait for engine
# credit: a PUBREL behind them is what frees that credit (else a client keeping its whole
# receive-maximum in flight deadlocks).
NEVER_HELD = (int, PubAck, PubRec, PubRel, PubComp, PingReq)  # int: a plain acknowledgement
HELD_QOS0 = 64  # held packets beyond the receive maximum before the reader pauses
QOS0_CREDIT = 1000  # engine credit of a QoS 0 subscription, topped up as output drains
OUTPUT_HIGH = 256 * 1024  # bytes of unsent output above which QoS 0 credit is not topped up
REASON_STRING_MAX = 1000  # a DISCONNECT's Reason String (a protocol error's account)
ACK_REASON_MAX = 256  # a PUBACK's / PUBREC's (`short_reason`)
# Topic Aliases a client may use (CONNACK Topic Alias Maximum, MQTT 5 section 3.3.2.3.4): one
# small dict per connection.
TOPIC_ALIAS_MAX = 64
# An MQTT 5 client that sends this user property with value "on" in its CONNECT gets, on
# every PUBLISH the router sends it, the user property DELIVERY_ID_PROPERTY = the message's
# delivery id: the same on every router of the mesh for the same publisher message, so a
# device can drop a copy sent again after its router crashed (docs/mqtt.md).
DELIVERY_ID_PROPERTY = "exactmesh-delivery-id"
# A PUBACK / PUBREC / PUBREL / PUBCOMP with reason code 0 and no properties is four bytes in
# both versions (5.0 section 3.4.2.1: the code may be left out when it is 0): written
# directly, it skips building a packet object and the encoder on the per-message path.
_PACK_ACK = struct.Struct(">BBH").pack
_PUBACK, _PUBREC, _PUBREL, _PUBCOMP = 0x40, 0x50, 0x62, 0x70
# Plain ints (compiled comparisons) taken from the one definition of the packet types.
_T_PUBREC, _T_PUBREL, _T_PUBCOMP = (
    int(PacketType.PUBREC), int(PacketType.PUBREL), int(PacketType.PUBCOMP))
NEVER_EXPIRES = 0xFFFFFFFF
CONNECT_TIMEOUT = 10.0  # seconds a new connection has to send CONNECT


def publish_tag(pid: int, topic: str, payload: bytes) -> bytes:
    """The engine's tag for a QoS 1/2 PUBLISH: its packet id and a digest of its topic and
    payload. A resend of it (DUP=1) gets the same tag at any router, so the mesh counts it
    once after a failover. A later message that reuses the packet id (free again once
    acknowledged, and from 1 again in a new client process) gets another tag, so no router
    or subscriber takes it for the earlier one, unless it repeats its topic and payload too."""
    h = hashlib.blake2b(topic.encode(), digest_size=8)
    h.update(b"\x00")  # (a topic never holds U+0000: the boundary is unambiguous)
    h.update(payload)
    return pid.to_bytes(2, "big") + h.digest()


def short_reason(outcome: Rejected) -> str:
    """A failure as a PUBACK / PUBREC Reason String: short, for strict client parsers (at
    most `ACK_REASON_MAX` characters). It names the first subscriber that failed and why, how
    many others did, and the delivery id to ask the status query about; the router's log has
    the whole account (`_on_decide`). `MqttConnection._fit` leaves it out of a packet too
    large for the client (MQTT-3.1.2-24; MQTT-3.4.2-2 and its kin in each packet's section)."""
    info = outcome.info
    failed = info.get("failed") or []
    if not failed:
        text = outcome.description
    else:
        total = sum(len(info.get(k) or ()) for k in ("succeeded", "failed", "pending"))
        first = failed[0]
        why = (info.get("reasons") or {}).get(first, "failed")
        doubt = info.get(IN_DOUBT) or ()
        if first in doubt:  # it may have processed it: a retry could make it do so twice
            why = f"(in doubt) {why}"
        more = f" (and {len(failed) - 1} more" + (f", {len(doubt)} in doubt" if doubt else "") \
            + ")" if len(failed) > 1 else ""
        tail = f"{more}; delivery {info.get('delivery_id', '?')}: see the router's log"
        head = f"failed for {len(failed)} of {total} subscriber(s): {first} {why}"
        room = ACK_REASON_MAX - len(tail)
        text = (head if len(head) <= room else head[:room - 3] + "...") + tail
    if len(text) <= ACK_REASON_MAX:
        return text
    return text[:ACK_REASON_MAX - 3] + "..."


# CONNACK reason codes for the kinds of refused log-in (3.1.1: return codes 4, 5 and 3).
_REFUSAL_CODES = {BAD_CREDENTIALS: RC.BAD_USER_NAME_OR_PASSWORD,
                  NOT_AUTHORIZED: RC.NOT_AUTHORIZED, TOO_MANY: RC.QUOTA_EXCEEDED}


class MqttState:
    """What the MQTT edge keeps per router, across its connections: the sessions by client id
    and the retained store (wired to the mesh). `serve_mqtt` makes one and gives it to every
    connection; the runtime keeps none of it (router/ports.py)."""

    __slots__ = ("counts", "node", "pubrel_unknown", "retained", "sessions")

    def __init__(self, node: RuntimePort) -> None:
        self.node = node
        self.sessions: dict[str, SessionState] = {}
        self.retained = retained.attach(node)
        # PUBRELs for a packet id with no QoS 2 exchange here, completed with success
        # (`MqttConnection._pubrel`): counted, they show how often sessions move mid-exchange.
        self.pubrel_unknown = 0
        # Sessions created, resumed (here, or taken over from another router), taken over
        # by a newer connection, expired: counted for GET /metrics (docs/operations.md).
        self.counts = {"created": 0, "resumed": 0, "taken_over": 0, "expired": 0}


class SessionState:
    """What the server keeps of a client's session, across its connections while the session
    lasts (MQTT 5.0 section 4.1)."""

    __slots__ = (
        "client_id", "conn", "expires_at", "expiry", "failed_rec", "in_rec", "next_pid", "out",
        "out_rel",
        "persistent", "pid_by_copy", "rec_tags", "stored", "subs", "will", "will_timer",
    )

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.conn: MqttConnection | None = None
        self.persistent = False
        self.expiry = 0.0  # seconds the session outlives its connection
        self.expires_at: float | None = None
        # topic filter -> its options: granted QoS in bits 0-1, No Local in bit 2 (`NO_LOCAL`)
        self.subs: dict[str, int] = {}
        self.stored = False  # the relay store keeps it (`--relay-store`, `_keep_session`)
        # QoS 2 PUBLISHes from the client answered with PUBREC, waiting for PUBREL: pid ->
        # the reason code sent (a PUBLISH with the same pid is answered again, not delivered).
        self.in_rec: dict[int, int] = {}
        self.rec_tags: dict[int, bytes] = {}  # their engine tags (`publish_tag`), by pid
        # QoS 2 PUBLISHes answered with a failure PUBREC, which ends the exchange (5.0
        # section 4.3.3): pid -> (tag, reason code, properties). A client that lost that
        # PUBREC with its connection resends the PUBLISH (DUP=1) when it resumes the session;
        # it gets the same answer, not a second publication (test bed, --mqtt --relay
        # --spark seed 1: 208 copies shown twice). Forgotten at its PUBREL (a client that
        # ignores reason codes sends one) or when the pid carries another message.
        self.failed_rec: dict[int, tuple[bytes, int, Properties]] = {}
        # Outgoing QoS 1/2 PUBLISHes waiting for PUBACK / PUBREC: pid -> (filter, tag, qos).
        self.out: dict[int, tuple[str, bytes, int]] = {}
        # PUBREL sent, waiting for PUBCOMP: pid -> (filter, tag) of the copy it completes,
        # which is answered to the engine at PUBCOMP (`_pubcomp`).
        self.out_rel: dict[int, tuple[str, bytes]] = {}
        self.pid_by_copy: dict[tuple[str, bytes], int] = {}  # a resent copy keeps its pid
        self.next_pid = 1
        # A will waiting for its Will Delay Interval (5.0) while the client is away.
        self.will: Will | None = None
        self.will_timer: Any = None  # its handle (RuntimePort.call_later)

    def alloc_pid(self) -> int:
        pid = self.next_pid
        for _ in range(65535):
            if pid not in self.out and pid not in self.out_rel:
                break
            pid = pid % 65535 + 1
        else:
            raise RuntimeError("no free packet identifier")
        self.next_pid = pid % 65535 + 1
        return pid


class WillSender:
    """Publishes one will message through the engine, as a publisher link of its own with the
    client's identity (client id, "mqtt-will"): its connection is gone by then. A QoS 1/2
    will is an unsettled message; the link detaches when the engine decides it (nobody is
    left to tell the outcome to)."""

    _seq: ClassVar[int] = 0

    def __init__(self, state: MqttState, client_id: str, will: Will) -> None:
        self.node = node = state.node
        engine = node.engine
        WillSender._seq += 1
        self.link = link = node.new_link_id()
        self.pub = PubLink(link)
        node.register_link(link, self, self.pub)
        engine.handle(ev.PublisherAttached(node.now(), link, LinkIdentity(client_id, WILL_LINK),
                                           "mqtt", ALL, None, True))
        if will.retain:
            retained.retain(node, state.retained, will.topic, will.payload, will.qos,
                            will.properties)
        props = will.properties
        expiry = props.message_expiry_interval
        payload = mapping.encode(will.topic, will.payload, will.qos, props, client_id)
        log.info("mqtt client %r: publishing its will message (topic %r, QoS %d)",
                 client_id, will.topic, will.qos)
        engine.handle(ev.MessageArrived(node.now(), link, b"will:%d" % WillSender._seq, payload,
                                        settled=will.qos == 0,
                                        ttl_ms=expiry * 1000 if expiry else None,
                                        address=will.topic))
        if will.qos == 0:
            self._done()

    def _done(self) -> None:
        if self.pub is None:
            return
        self.pub = None  # type: ignore[assignment]
        self.node.forget_link(self.link)
        self.node.engine.handle(ev.PublisherDetached(self.node.now(), self.link, True))

    def apply(self, ls: Any, action: Any) -> None:
        kind = type(action)
        if kind is Decide:
            if type(action.outcome) is not Accepted:
                log.warning("mqtt will message (link %d): %s", self.link, action.outcome)
            self.node.engine.handle(ev.PublisherSettled(self.node.now(), self.link, action.tag))
            self._done()
        elif kind is CloseLink:
            self._done()

    def shutdown(self, description: str) -> None:
        self.node.forget_link(self.link)


class PubLink:
    """The engine publisher link of a connection."""

    __slots__ = ("credit", "id", "is_publisher")

    def __init__(self, link_id: int) -> None:
        self.id = link_id
        self.is_publisher = True
        self.credit = 0


class SubLink:
    """The engine subscriber link of one subscription."""

    __slots__ = ("filter", "id", "is_publisher", "q0_left", "qos")

    def __init__(self, link_id: int, topic_filter: str, qos: int) -> None:
        self.id = link_id
        self.is_publisher = False
        self.filter = topic_filter
        self.qos = qos
        self.q0_left = 0


class MqttConnection:
    def __init__(self, node: RuntimePort, peer: str, state: MqttState) -> None:
        self.node = node
        self.state = state
        self.engine = node.engine
        self.peer = peer
        cfg = node.config
        self.max_packet = max(64, cfg.max_message_size)
        self.decoder = Decoder(self.max_packet, plain_acks=True)  # acks as ints: _on_plain_ack
        self.version = 0
        self.out = bytearray()
        self.on_output: Any = None  # set by the server: wakes the writer
        self.on_resume: Any = None  # set by the server: the reader may read again
        # Set by the server: the keep-alive deadline may have moved earlier (CONNECT replaced
        # the connect deadline); packets heard only ever move it later.
        self.on_deadline: Any = None
        self.closing = False  # close the socket once the output is written
        self.connected = False  # CONNACK sent
        self.session: SessionState | None = None
        self.client_id = ""
        self.username: str | None = None  # as authenticated (router/security/policy.py)
        # Set by the TLS server: the common name of the client's verified certificate.
        self.cert_user: str | None = None
        self.keep_alive = 0.0
        self.last_heard = self._now = node.now()
        self.pub: PubLink | None = None
        self.subs: dict[str, SubLink] = {}
        self.held: deque[Any] = deque()  # packets waiting for publisher credit
        # Incoming QoS 1/2 PUBLISHes not answered yet: tag -> (pid, qos).
        self.awaiting: dict[bytes, tuple[int, int]] = {}
        self.receive_max = min(cfg.publisher_window, 65535)
        self.client_receive_max = WINDOW_311
        self.client_max_packet = 0
        self.problem_info = True
        self.backlog: deque[tuple[SubLink, Send]] = deque()
        self._credit_due = False  # packet ids came free: give credit after this batch
        self.delivery_ids = False  # DELIVERY_ID_PROPERTY asked for in CONNECT (5.0)
        self._q0_tag = 0
        self.aliases: dict[int, str] = {}  # the client's Topic Aliases: this connection's only
        self.will: Will | None = None  # published if the connection ends without DISCONNECT
        self.will_delay = 0.0  # its Will Delay Interval (5.0)
        # A refused log-in: the CONNACK that says so, sent FAILED_LOG_IN_DELAY after it (the
        # watchdog's deadline); what the client sends meanwhile is not read.
        self.refused: bytes | None = None

    # ---------------------------------------------------------------- input

    @property
    def paused(self) -> bool:
        """The reader must wait: more messages are held for publisher credit than the
        client may have unacknowledged (plus room for QoS 0), or the connection is closing.
        It keeps reading below that: the PUBRELs and acks that free credit come behind."""
        return len(self.held) >= self.receive_max + HELD_QOS0 or self.closing \
            or self.refused is not None

    def receive(self, data: bytes, now: float | None = None) -> None:
        """Bytes from the client; *now*: the router's clock, when the caller has read it."""
        if self.closing or self.refused is not None:
            return
        # One clock read per batch of packets at most: the engine's `now` for the PUBLISHes
        # in it (a trio clock read is a few Python calls; this is the per-message path).
        self.last_heard = self._now = self.node.now() if now is None else now
        try:
            packets = self.decoder.receive(data)
        except ProtocolError as err:
            for packet in err.packets:
                if not (self.closing or self.refused is not None):
                    self._dispatch(packet)
            if not (self.closing or self.refused is not None):
                self._codec_error(err)
            self._credit_now()
            self.node.flush()
            return
        for packet in packets:
            if self.closing or self.refused is not None:
                break
            if self.held and type(packet) not in NEVER_HELD:
                self.held.append(packet)  # after the PUBLISHes waiting for credit, in order
            else:
                self._dispatch(packet)
        self._credit_now()
        self.node.flush()
        self._output()

    def _dispatch(self, p: Any) -> None:
        kind = type(p)
        if kind is int:
            self._on_plain_ack(p)
        elif kind is Publish:
            self._on_publish(p)
        elif kind is PubAck:
            self._on_puback(p)
        elif kind is PubRec:
            self._on_pubrec(p)
        elif kind is PubRel:
            self._on_pubrel(p)
        elif kind is PubComp:
            self._on_pubcomp(p)
        elif kind is PingReq:
            self._send(PingResp())
        elif kind is Connect:
            self._on_connect(p)
        elif kind is Subscribe:
            self._on_subscribe(p)
        elif kind is Unsubscribe:
            self._on_unsubscribe(p)
        elif kind is Disconnect:
            self._on_disconnect(p)
        else:  # AUTH: no extended authentication here
            self._protocol_error(RC.PROTOCOL_ERROR, "AUTH was not asked for: this server "
                                 "offers no extended authentication")

    def _codec_error(self, err: ProtocolError) -> None:
        log.warning("mqtt connection %s%s: %s", self.peer, self._who(), err)
        reply = err.reply(connack_sent=self.connected, reason_string=True)
        if self.client_max_packet and len(reply) > self.client_max_packet:
            reply = err.reply(connack_sent=self.connected)  # MQTT-3.1.2-24: no Reason String
        self._close_with(reply)

    def _protocol_error(self, code: int, message: str) -> None:
        log.warning("mqtt connection %s%s: %s: %s", self.peer, self._who(), reason_name(code),
                    message)
        reply = b""
        if self.version == MQTT_5 and self.connected:
            reply = self._fit(Disconnect(code, Properties(
                reason_string=message[:REASON_STRING_MAX])), Disconnect(code))
        self._close_with(reply)

    def _admitted(self, c: Connect, client_id: str) -> bool:
        """Whether the policy lets this client in (docs/security.md); if not, it is answered
        with CONNACK 0x86 / 0x87 (3.1.1: return code 4 / 5) and closed. A will to a topic it
        may not publish to is refused here too: it could not be published later."""
        policy, cfg = self.node.policy, self.node.config
        # --tls-identity-as-username: the certificate names the user, as in mosquitto's
        # use_identity_as_username (the CONNECT's user name and password are not used).
        cert_user = self.cert_user if cfg.tls_identity_as_username else None
        username = c.username if cert_user is None else cert_user
        refusal = policy.authenticate(username, c.password, cert_user is not None) or \
            policy.admit_user(username, self.node.connections, cfg.max_connections_per_user)
        if refusal is None and c.will is not None and not policy.may_publish(
                username, client_id, c.will.topic):
            refusal = Refusal(NOT_AUTHORIZED, f"its will topic {c.will.topic!r} is not one it "
                              "may publish to (the ACL file)")
        if refusal is None:
            self.username = username
            return True
        code = _REFUSAL_CODES[refusal.kind]
        log.warning("mqtt connection %s (client %s): refused, %s: %s", self.peer,
                    shown(client_id), reason_name(code.value), refusal.detail)
        props = EMPTY_PROPERTIES
        if self.version == MQTT_5 and c.properties.request_problem_information != 0:
            props = Properties(reason_string=f"{refusal.kind}: {refusal.detail}"[:256])
        self.refused = encode(ConnAck(False, code.value, props), self.version)
        self.last_heard = self._now  # the answer is due FAILED_LOG_IN_DELAY from now
        if self.on_deadline is not None:
            self.on_deadline()  # the watchdog sends it (`keepalive_expired`)
        return False

    @property
    def user(self) -> str | None:
        """The user it logged in as (what `Policy.admit_user` counts)."""
        return self.username

    def _who(self) -> str:
        return f" (client {self.client_id!r})" if self.client_id else ""

    # ---------------------------------------------------------------- CONNECT

    def _on_connect(self, c: Connect) -> None:
        self.version = c.protocol_level
        v5 = self.version == MQTT_5
        props = c.properties
        client_id = c.client_id
        assigned = None
        if not client_id:
            client_id = assigned = "exactmesh-" + secrets.token_hex(8)
        self.client_id = client_id
        if not self._admitted(c, client_id):
            return
        self.keep_alive = float(c.keep_alive)
        if v5:
            if props.receive_maximum:
                self.client_receive_max = props.receive_maximum
            else:
                self.client_receive_max = 65535
            self.client_max_packet = props.maximum_packet_size or 0
            self.problem_info = props.request_problem_information != 0
            expiry = float(props.session_expiry_interval or 0)
            self.delivery_ids = (DELIVERY_ID_PROPERTY, "on") in props.user_properties
        else:
            expiry = 0.0 if c.clean_start else self.node.config.reconnect_timeout
        self.will = c.will
        if c.will is not None and v5:
            self.will_delay = float(c.will.properties.will_delay_interval or 0)
        now = self.node.now()
        registry = self.state.sessions
        self._sweep(registry, now)
        old = registry.get(client_id)
        if old is not None and old.conn is not None:
            old.conn.taken_over()
        # Subscriptions of this client id that the mesh places at another router (or away
        # from a lost one): the session lives there, and a local one is stale.
        elsewhere = self._mesh_session(client_id)
        if elsewhere and old is not None:
            if registry.get(client_id) is old:
                del registry[client_id]
            self._fire_pending_will(old)
            old = None
        present = False
        counts = self.state.counts
        if old is not None and not c.clean_start and old.persistent:
            session = old
            present = True
            counts["resumed"] += 1
            self._cancel_will(old)  # resumed before its Will Delay Interval ran out
        elif elsewhere and not c.clean_start:
            # Take the session over from the router that holds it (docs/mqtt.md, "Sessions
            # across routers"): attaching its subscriptions here with a newer generation
            # moves them, and that router closes the old connection.
            session = SessionState(client_id)
            session.subs.update(elsewhere)
            present = True
            counts["resumed"] += 1
        else:
            counts["created"] += 1
            if old is not None:
                self._end_session(old)
            if elsewhere:
                self._end_session(SessionState(client_id), elsewhere)
            session = SessionState(client_id)
        session.persistent = expiry > 0
        session.expiry = expiry
        session.expires_at = None
        session.conn = self
        registry[client_id] = session
        self.session = session
        cprops = EMPTY_PROPERTIES
        if v5:
            cprops = Properties(
                receive_maximum=self.receive_max if self.receive_max < 65535 else None,
                maximum_packet_size=self.max_packet,
                retain_available=1,
                wildcard_subscription_available=None,
                subscription_identifier_available=0,
                shared_subscription_available=1,
                topic_alias_maximum=TOPIC_ALIAS_MAX,
                assigned_client_identifier=assigned,
                server_keep_alive=None,
                user_properties=((DELIVERY_ID_PROPERTY, "on"),) if self.delivery_ids else (),
            )
        self._send(ConnAck(present, 0, cprops))
        self.connected = True
        if self.on_deadline is not None:
            self.on_deadline()
        log.debug("mqtt client %r connected from %s (MQTT %s, %s session, expiry %g s)",
                  client_id, self.peer, "5.0" if v5 else "3.1.1",
                  "resumed" if present else "new", expiry)
        link_id = self.node.new_link_id()
        self.pub = PubLink(link_id)
        self.node.register_link(link_id, self, self.pub)
        # stored_enough: PUBACK and PUBREC also count copies a relay store holds for an
        # absent subscriber (docs/relay.md), as an MQTT server's own store would.
        self.engine.handle(ev.PublisherAttached(
            self._now, link_id, LinkIdentity(client_id, PUBLISHER_LINK), "mqtt", ALL, None,
            True))
        for topic_filter, qos in session.subs.items():
            self._attach(topic_filter, qos)
        self._keep_session(session)
        # Resend what the client had not completed (MQTT 5.0 section 4.4): PUBRELs now;
        # the PUBLISHes come again from the warm subscribers' queues, with the same pids.
        for pid in sorted(session.out_rel):
            self._send(PubRel(pid))
        for pid, (topic_filter, _tag, _qos) in list(session.out.items()):
            if topic_filter not in self.subs:
                del session.out[pid]
        self._recredit()

    def _sweep(self, registry: dict[str, SessionState], now: float) -> None:
        """Forget sessions whose expiry passed while their clients were away."""
        gone = [s for s in registry.values()
                if s.conn is None and s.expires_at is not None and s.expires_at <= now]
        for s in gone:
            del registry[s.client_id]
            self.state.counts["expired"] += 1
            s.persistent = False
            self._keep_session(s)

    def _keep_session(self, session: SessionState) -> None:
        """With a relay store, a persistent session is kept there (its expiry and
        subscriptions) so that a restarted router still has it (mqtt_edge/persistence.py);
        one that is no longer persistent leaves it."""
        store = self.node.relay_store
        if store is None:
            return
        if session.persistent:
            store.save_session(session.client_id, session.expiry, dict(session.subs))
            session.stored = True
        elif session.stored:
            store.drop_session(session.client_id)
            session.stored = False

    def _end_session(self, session: SessionState, subs: dict[str, int] | None = None) -> None:
        """A clean start discards the old session: its warm subscriptions end (what they were
        owed fails, naming them). `subs`: the session's subscriptions at another router,
        which the attach here takes over (closing the connection there) and then ends. A will
        waiting for its delay is published now (the session ends)."""
        self._fire_pending_will(session)
        for topic_filter in list(subs if subs is not None else session.subs):
            link_id = self.node.new_link_id()
            ident = LinkIdentity(session.client_id, SUBSCRIBER_PREFIX + topic_filter)
            now = self.node.now()
            self.engine.handle(ev.SubscriberAttached(now, link_id, ident, topic_filter))
            self.engine.handle(ev.SubscriberDetached(now, link_id, True))
        session.subs.clear()
        session.persistent = False
        self._keep_session(session)

    def _mesh_session(self, client_id: str) -> dict[str, int]:
        """Topic filter -> options (as in `SessionState.subs`) of `client_id`'s subscriptions
        that the mesh places at another router, or that are away from a lost router (warm
        ones, waiting to reattach): its persistent session lives elsewhere. Scans the
        engine's view of remote subscribers (a CONNECT costs O(remote subscribers))."""
        prefix = client_id + "/" + SUBSCRIBER_PREFIX
        found: dict[str, int] = {}
        for key, topic_filter, qos in self.engine.warm_elsewhere(prefix):
            if key == prefix + topic_filter:
                found[topic_filter] = qos
        return found

    # ---------------------------------------------------------------- PUBLISH in

    def _on_publish(self, p: Publish) -> None:
        pub = self.pub
        assert pub is not None and self.session is not None
        props = p.properties
        expiry = None
        topic = p.topic
        if props is not EMPTY_PROPERTIES:  # (an absent property is a slow attribute miss)
            if props.topic_alias is not None:
                aliased = self._alias(props.topic_alias, topic)
                if aliased is None:
                    return  # closed with a protocol error
                topic = aliased
            expiry = props.message_expiry_interval
        policy = self.node.policy
        if not policy.open and not policy.may_publish(self.username, self.client_id, topic):
            self._forbidden_publish(p, topic)
            return
        qos = p.qos
        if qos == 0:
            self._q0_tag += 1
            tag = b"q0:%d" % self._q0_tag
        else:
            pid = p.packet_id
            tag = publish_tag(pid, topic, p.payload)  # type: ignore[arg-type]
            if tag in self.awaiting:
                return  # a resend of one we are still deciding: the answer will come
            code = self.session.in_rec.get(pid)  # type: ignore[arg-type]
            if code is not None and qos == 2:
                self._send(PubRec(pid, code))  # type: ignore[arg-type]
                return
            if self.session.failed_rec and self._failed_again(
                    p, pid, tag):  # type: ignore[arg-type]
                return
            if code is not None:
                del self.session.in_rec[pid]  # type: ignore[arg-type]
                self.session.rec_tags.pop(pid, None)  # type: ignore[arg-type]
            if len(self.awaiting) + len(self.session.in_rec) >= self.receive_max:
                self._protocol_error(RC.RECEIVE_MAXIMUM_EXCEEDED, f"more than "
                                     f"{self.receive_max} QoS 1/2 PUBLISHes unacknowledged")
                return
        if pub.credit <= 0:
            self.held.append(p)  # wait for the engine's credit; the reader pauses
            return
        pub.credit -= 1
        if p.retain:  # this router's store: kept (or cleared) as it arrives
            retained.retain(self.node, self.state.retained, topic, p.payload, qos, props)
        payload = mapping.encode(topic, p.payload, qos, props, self.client_id)
        if qos:
            self.awaiting[tag] = (p.packet_id, qos)  # type: ignore[assignment]
        self.engine.handle(ev.MessageArrived(self._now, pub.id, tag, payload, qos == 0, None,
                                             expiry * 1000 if expiry else None, topic, p.dup))

    def _failed_again(self, p: Publish, pid: int, tag: bytes) -> bool:
        """A resend (DUP=1) of a QoS 2 PUBLISH this session answered with a failure PUBREC
        gets that PUBREC again; any other PUBLISH with its pid is a new message."""
        failed = self.session.failed_rec.pop(pid, None)  # type: ignore[union-attr]
        if failed is None or not (p.dup and p.qos == 2 and failed[0] == tag):
            return False
        self.session.failed_rec[pid] = failed  # type: ignore[union-attr]
        _, code, props = failed
        self.out += self._fit(PubRec(pid, code, props), PubRec(pid, code))
        return True

    def _forbidden_publish(self, p: Publish, topic: str) -> None:
        """A PUBLISH to a topic the ACL file does not let this client publish to: 5.0 gets
        PUBACK / PUBREC 0x87 (a QoS 0 one is dropped: it has no answer); 3.1.1 cannot be told,
        so the connection is closed rather than acknowledged falsely (docs/security.md)."""
        why = f"not authorized to publish to {topic!r} (the ACL file)"
        if self.version != MQTT_5:
            log.warning("mqtt connection %s (client %r, MQTT 3.1.1): %s; closed, since 3.1.1 "
                        "cannot be told", self.peer, self.client_id, why)
            self._close_with(b"")
            return
        log.warning("mqtt connection %s (client %r): %s", self.peer, self.client_id, why)
        if p.qos == 0 or p.packet_id is None:
            return
        props = Properties(reason_string=why) if self.problem_info else EMPTY_PROPERTIES
        code = RC.NOT_AUTHORIZED.value
        ack = PubAck(p.packet_id, code, props) if p.qos == 1 else PubRec(p.packet_id, code, props)
        self.out += self._fit(ack, PubAck(p.packet_id, code) if p.qos == 1
                              else PubRec(p.packet_id, code))

    def _alias(self, alias: int, topic: str) -> str | None:
        """The topic a PUBLISH with Topic Alias `alias` goes to (MQTT 5 section 3.3.2.3.4):
        with a topic name, it is set (or replaced) for this connection only (MQTT-3.3.2-7);
        with an empty one, the one set before. None once the connection is closed for a bad
        alias. (0 never gets here: the decoder refuses it, MQTT-3.3.2-8.)"""
        if alias > TOPIC_ALIAS_MAX:
            self._protocol_error(RC.TOPIC_ALIAS_INVALID, f"Topic Alias {alias} is more than "
                                 f"the Topic Alias Maximum {TOPIC_ALIAS_MAX} this server gave "
                                 "in its CONNACK; use 1 to that")
            return None
        if topic:
            self.aliases[alias] = topic
            return topic
        known = self.aliases.get(alias)
        if known is None:
            self._protocol_error(RC.PROTOCOL_ERROR, f"Topic Alias {alias} has no topic on "
                                 "this connection yet: the first PUBLISH with an alias must "
                                 "carry the topic name too (section 3.3.2.3.4)")
        return known

    def _drain_held(self) -> None:
        self._now = self.node.now()  # outside `receive`: the clock has moved on
        while self.held and not self.closing:
            p = self.held[0]
            if type(p) is Publish and self.pub is not None and self.pub.credit <= 0:
                return
            self.held.popleft()
            self._dispatch(p)
        if not self.held and self.on_resume is not None:
            self.on_resume()

    def _on_decide(self, tag: bytes, outcome: Any) -> None:
        entry = self.awaiting.pop(tag, None)
        if entry is None or self.session is None:
            return
        pid, qos = entry
        code, text = 0, None
        if type(outcome) is not Accepted:
            if outcome.condition == NO_SUBSCRIBERS:
                code = RC.NO_MATCHING_SUBSCRIBERS.value
            else:
                code = RC.UNSPECIFIED_ERROR.value
            text = outcome.description
            if self.version != MQTT_5:
                # 3.1.1 cannot carry a failure in PUBACK / PUBREC (docs/mqtt.md): it is
                # acknowledged, and the failure goes to the log.
                log.warning("mqtt client %r (MQTT 3.1.1, which cannot be told): message "
                            "pid %d %s", self.client_id, pid, outcome)
                code = 0
        props = EMPTY_PROPERTIES
        if text and self.version == MQTT_5:
            log.info("mqtt client %r: message pid %d: %s", self.client_id, pid, outcome)
            if self.problem_info:
                props = Properties(reason_string=short_reason(outcome))
        if qos == 1:
            if code or props:
                self.out += self._fit(PubAck(pid, code, props), PubAck(pid, code))
            else:
                self.out += _PACK_ACK(_PUBACK, 2, pid)
            self.engine.handle(ev.PublisherSettled(
                self._now, self.pub.id, tag))  # type: ignore[union-attr]
        else:
            if code or props:
                self.out += self._fit(PubRec(pid, code, props), PubRec(pid, code))
            else:
                self.out += _PACK_ACK(_PUBREC, 2, pid)
            if code < 0x80:
                self.session.in_rec[pid] = code
                self.session.rec_tags[pid] = tag
            else:  # a failed QoS 2 exchange ends with the PUBREC (5.0 section 4.3.3)
                failed = self.session.failed_rec
                failed[pid] = (tag, code, props)
                if len(failed) > self.receive_max:  # (the oldest: long answered)
                    del failed[next(iter(failed))]
                self.engine.handle(ev.PublisherSettled(
                self._now, self.pub.id, tag))  # type: ignore[union-attr]

    def _on_pubrel(self, p: PubRel) -> None:
        self._pubrel(p.packet_id)

    def _pubrel(self, pid: int) -> None:
        assert self.session is not None
        code = self.session.in_rec.pop(pid, None)
        if code is None and self.session.failed_rec.pop(pid, None) is not None:
            # After a failure PUBREC, from a client that ignores reason codes (paho 2.2):
            # the exchange is over; complete it.
            self.out += _PACK_ACK(_PUBCOMP, 2, pid)
            return
        if code is None:
            # Not "Packet Identifier not found" (0x92), which clients report as a failed
            # publish: a client sends PUBREL only after a PUBREC with a success code, which
            # here means every matched subscriber accepted the message (or has it stored), so
            # the exchange succeeded, at another router the session was on before a failover
            # or before a restart. Completing it is the truthful answer (docs/mqtt.md).
            self.state.pubrel_unknown += 1
            log.info("mqtt client %r: PUBREL for packet id %d, which this router did not "
                     "answer with PUBREC (the session moved here, or the router restarted): "
                     "completed", self.client_id, pid)
            self.out += _PACK_ACK(_PUBCOMP, 2, pid)
            return
        tag = self.session.rec_tags.pop(pid, None)
        if self.pub is not None and tag is not None:
            self.engine.handle(ev.PublisherSettled(self._now, self.pub.id, tag))
        self.out += _PACK_ACK(_PUBCOMP, 2, pid)

    # ---------------------------------------------------------------- SUBSCRIBE

    def _on_subscribe(self, s: Subscribe) -> None:
        assert self.session is not None
        codes = []
        wanted = []  # (filter, granted QoS, Retain Handling, existed): for retained messages
        policy = self.node.policy
        for sub in s.subscriptions:
            f = sub.topic_filter
            if not policy.open and not self._may_subscribe(f):
                codes.append(RC.NOT_AUTHORIZED.value if self.version == MQTT_5 else 0x80)
                continue
            qos = sub.qos
            # The session keeps the options that outlive the SUBSCRIBE (the engine and the
            # mesh carry them too, for a restart or a takeover): QoS, and No Local.
            options = qos | (NO_LOCAL if sub.no_local and self.version == MQTT_5 else 0)
            old = self.subs.get(f)
            wanted.append((f, qos, sub.retain_handling if self.version == MQTT_5 else 0,
                           old is not None))
            if old is not None and self.session.subs.get(f) == options:
                codes.append(qos)
                continue
            if old is not None:
                self._detach(old, final=True)
            self.session.subs[f] = options
            self._attach(f, options)
            codes.append(qos)
        self._keep_session(self.session)
        self._send(SubAck(s.packet_id, tuple(codes)))
        for f, qos, handling, existed in wanted:
            if f.startswith(SHARE_PREFIX):
                continue  # retained messages are not sent to a shared subscription (4.8.2)
            if handling == 0 or (handling == 1 and not existed):
                self._send_retained(f, qos)
        self._recredit()

    def _may_subscribe(self, topic_filter: str) -> bool:
        """Whether the ACL file lets this client subscribe with `topic_filter` (a shared
        one's inner filter); a refusal is logged (SUBACK 0x87, 3.1.1: 0x80)."""
        shared = split_shared(topic_filter)
        inner = shared[1] if shared is not None else topic_filter
        if self.node.policy.may_subscribe(self.username, self.client_id, inner):
            return True
        log.warning("mqtt connection %s (client %r): not authorized to subscribe to %r (the "
                    "ACL file lets it read nothing it matches)", self.peer, self.client_id,
                    topic_filter)
        return False

    def _send_retained(self, topic_filter: str, sub_qos: int) -> None:
        """The retained messages matching a new subscription, straight from this router's
        store with RETAIN=1, after the SUBACK: best effort (not through the engine, nobody
        is told the outcome; a QoS 1/2 one takes a packet id of the client's receive window,
        and goes at QoS 0 when the window is full; not resent after a reconnect)."""
        session = self.session
        assert session is not None
        policy = self.node.policy
        for r, props in self.state.retained.matching(topic_filter, self.node.now()):
            if policy.checks_reads and not policy.may_read(self.username, self.client_id,
                                                           r.topic):
                continue  # a wide filter gets only what the client may read
            qos = min(sub_qos, r.qos)
            if qos and self._window() <= 0:
                qos = 0
            pid = session.alloc_pid() if qos else None
            try:
                raw = encode(Publish(r.topic, r.payload, qos, True, False, pid, props),
                             self.version)
            except ValueError as err:
                log.warning("mqtt client %r: retained message for %r not sent: %s",
                            self.client_id, r.topic, err)
                continue
            if self.client_max_packet and len(raw) > self.client_max_packet:
                log.warning("mqtt client %r: retained message for %r not sent: %d bytes, more "
                            "than the client's Maximum Packet Size", self.client_id, r.topic,
                            len(raw))
                continue
            if pid is not None:
                # No subscription under filter "": its ack frees the packet id, nothing more.
                session.out[pid] = ("", b"", qos)
            self.out += raw

    def _attach(self, topic_filter: str, options: int) -> None:
        """Attach one subscription to the engine; `options` as kept in `SessionState.subs`."""
        assert self.session is not None
        qos = options & 3
        link_id = self.node.new_link_id()
        sl = SubLink(link_id, topic_filter, qos)
        self.subs[topic_filter] = sl
        self.node.register_link(link_id, self, sl)
        warm = self.session.expiry if self.session.persistent else None
        if warm is not None and warm >= NEVER_EXPIRES:
            warm = float(NEVER_EXPIRES)
        self.engine.handle(ev.SubscriberAttached(
            self.node.now(), link_id,
            LinkIdentity(self.client_id, SUBSCRIBER_PREFIX + topic_filter), topic_filter,
            presettled=qos == 0, warm_timeout=warm, qos=options))
        if qos == 0:
            sl.q0_left = QOS0_CREDIT
            self.engine.handle(ev.SubscriberCredit(self._now, link_id, QOS0_CREDIT))

    def _detach(self, sl: SubLink, final: bool) -> None:
        self.subs.pop(sl.filter, None)
        self.node.forget_link(sl.id)
        self.engine.handle(ev.SubscriberDetached(self.node.now(), sl.id, final))
        if self.backlog:
            self.backlog = deque(e for e in self.backlog if e[0] is not sl)

    def _on_unsubscribe(self, u: Unsubscribe) -> None:
        assert self.session is not None
        codes = []
        for f in u.topic_filters:
            sl = self.subs.get(f)
            self.session.subs.pop(f, None)
            if sl is None:
                codes.append(RC.NO_SUBSCRIPTION_EXISTED.value)
            else:
                self._detach(sl, final=True)
                codes.append(0)
        self._keep_session(self.session)
        self._send(UnsubAck(u.packet_id, tuple(codes) if self.version == MQTT_5 else ()))

    # ---------------------------------------------------------------- PUBLISH out

    def _window(self) -> int:
        s = self.session
        used = len(s.out) + len(s.out_rel) if s is not None else 0
        return self.client_receive_max - used - len(self.backlog)

    def _recredit(self) -> None:
        """Give each QoS 1/2 subscription the room left in the client's receive window."""
        room = max(0, self._window())
        for sl in list(self.subs.values()):
            if sl.qos:
                self.engine.handle(ev.SubscriberCredit(self._now, sl.id, room))

    def _on_send(self, sl: SubLink, action: Send) -> None:
        if self.node.policy.checks_reads and not self._may_read(sl, action):
            return
        if action.settled:
            self._publish_out(sl, action, 0, None)
            if sl.qos:
                # A pre-settled copy to a QoS 1/2 subscription took a unit of its credit (the
                # receive window) but no packet id, so no ack will give it back: now does.
                self._credit_due = True
                return
            sl.q0_left -= 1
            if sl.q0_left < QOS0_CREDIT // 2 and len(self.out) < OUTPUT_HIGH:
                sl.q0_left = QOS0_CREDIT
                self.engine.handle(ev.SubscriberCredit(self._now, sl.id, QOS0_CREDIT))
            return
        if self.backlog or self._window() <= 0:
            self.backlog.append((sl, action))
            return
        self._send_unsettled(sl, action)

    def _may_read(self, sl: SubLink, action: Send) -> bool:
        """Whether the ACL lets this client be sent the copy (a filter may be wider than what
        it may read: each message is checked, as mosquitto does). One it may not read is not
        sent and counts as accepted for its publisher; the credit it took goes back."""
        if self.node.policy.may_read(self.username, self.client_id, action.address):
            return True
        log.debug("mqtt client %r: not sent a message for %r (not authorized to read it)",
                  self.client_id, action.address)
        self.engine.handle(ev.CopyWithheld(self._now, sl.id, action.tag, action.settled))
        return False

    def _send_unsettled(self, sl: SubLink, action: Send) -> None:
        session = self.session
        assert session is not None
        key = (sl.filter, action.tag)
        pid = session.pid_by_copy.get(key) if action.attempt else None
        if pid is not None and pid in session.out_rel:
            return  # past its PUBREC: the PUBREL went again on resume, PUBCOMP answers it
        if pid is None:
            pid = session.alloc_pid()
        qos = self._publish_out(sl, action, pid, None)
        if qos:
            session.out[pid] = (sl.filter, action.tag, qos)
            session.pid_by_copy[key] = pid

    def _publish_out(self, sl: SubLink, action: Send, pid: int, _: Any) -> int:
        """Send a copy as a PUBLISH; returns the QoS it went with (0: done already)."""
        try:
            d = mapping.decode(action.payload)
        except ValueError as err:
            self._fail_copy(sl, action, f"could not be turned into an MQTT PUBLISH ({err})")
            return 0
        # A message without `to` goes to the topic its publisher named (never the filter:
        # a wildcard is no topic name, MQTT-3.3.2-2).
        topic = d.topic or action.address
        qos = 0 if action.settled else min(sl.qos, d.qos)
        dup = action.attempt > 0 and qos > 0
        props = d.properties
        left = action.ttl_left_ms
        if left is not None and props and props.message_expiry_interval:
            # MQTT-3.3.2-6: the interval it was published with, less the time it waited here
            # (and in the relay store), in whole seconds rounded up.
            props = props.replace(message_expiry_interval=max(1, -(-left // 1000)))
        if self.delivery_ids:
            ids = ((DELIVERY_ID_PROPERTY, action.tag.decode()),)
            props = props.replace(user_properties=props.user_properties + ids) if props \
                else Properties(user_properties=ids)
        try:
            if props is EMPTY_PROPERTIES:
                raw = encode_plain_publish(topic, d.payload, qos, dup, pid,
                                           self.version == MQTT_5)
            else:
                raw = encode(Publish(topic, d.payload, qos, False, dup, pid if qos else None,
                                     props), self.version)
        except ValueError as err:
            self._fail_copy(sl, action, f"could not be encoded as an MQTT PUBLISH ({err})")
            return 0
        if self.client_max_packet and len(raw) > self.client_max_packet:
            self._fail_copy(sl, action, f"is {len(raw)} bytes as a PUBLISH, more than the "
                            f"client's Maximum Packet Size {self.client_max_packet}")
            return 0
        self.out += raw
        if qos == 0 and not action.settled:  # published at QoS 0 by an AMQP client
            self.engine.handle(
                ev.CopyOutcome(self._now, sl.id, action.tag, Disposition.ACCEPTED, True))
        return qos

    def _fail_copy(self, sl: SubLink, action: Send, why: str) -> None:
        log.warning("mqtt client %r: a message for subscription %r %s", self.client_id,
                    sl.filter, why)
        if not action.settled:
            self.engine.handle(ev.CopyOutcome(self._now, sl.id, action.tag,
                                              Disposition.UNDELIVERABLE, True, why))

    def _out_done(self, pid: int) -> tuple[SubLink | None, bytes] | None:
        session = self.session
        assert session is not None
        entry = session.out.pop(pid, None)
        if entry is None:
            return None
        topic_filter, tag, _ = entry
        session.pid_by_copy.pop((topic_filter, tag), None)
        return self.subs.get(topic_filter), tag

    def _on_plain_ack(self, packed: int) -> None:
        """A four-byte PUBACK / PUBREC / PUBREL / PUBCOMP, as the decoder hands it over."""
        ptype = packed >> PLAIN_ACK_SHIFT
        pid = packed & 0xFFFF
        if ptype == _T_PUBREC:
            self._pubrec(pid, 0, EMPTY_PROPERTIES)
        elif ptype == _T_PUBCOMP:
            self._pubcomp(pid)
        elif ptype == _T_PUBREL:
            self._pubrel(pid)
        else:
            self._puback(pid, 0, EMPTY_PROPERTIES)

    def _on_puback(self, p: PubAck) -> None:
        self._puback(p.packet_id, p.reason_code, p.properties)

    def _puback(self, pid: int, code: int, props: Properties) -> None:
        done = self._out_done(pid)
        if done is not None and done[0] is not None:
            self._answer(done[0], done[1], code, props)
        self._freed()

    def _on_pubrec(self, p: PubRec) -> None:
        self._pubrec(p.packet_id, p.reason_code, p.properties)

    def _pubrec(self, pid: int, code: int, props: Properties) -> None:
        session = self.session
        assert session is not None
        if code >= 0x80:  # refused: the exchange ends here (5.0 section 4.3.3)
            done = self._out_done(pid)
            if done is not None and done[0] is not None:
                self._answer(done[0], done[1], code, props)
            self._freed()
            return
        entry = session.out.pop(pid, None)
        if entry is None:
            if pid in session.out_rel:
                self._send(PubRel(pid))
            return
        # Accepted only at PUBCOMP: a client that hands the message to its application at
        # PUBREL (paho: "method B", 5.0 section 4.3.3) has not shown it yet, and a PUBREL
        # that dies with this router (a crash with its socket buffer unsent) leaves the
        # message in the client's session, never shown, while the mesh would count it
        # accepted and never send it again (test bed: 177 QoS 2 messages lost by a paho
        # subscriber whose router was SIGKILLed). Unanswered, the copy is sent again.
        session.out_rel[pid] = (entry[0], entry[1])
        self.out += _PACK_ACK(_PUBREL, 2, pid)
        self._freed()

    def _on_pubcomp(self, p: PubComp) -> None:
        self._pubcomp(p.packet_id)

    def _pubcomp(self, pid: int) -> None:
        session = self.session
        assert session is not None
        entry = session.out_rel.pop(pid, None)
        if entry is not None:
            topic_filter, tag = entry
            session.pid_by_copy.pop((topic_filter, tag), None)
            sl = self.subs.get(topic_filter)
            if sl is not None and tag:
                self._answer(sl, tag, 0, EMPTY_PROPERTIES)
        self._freed()

    def _answer(self, sl: SubLink, tag: bytes, code: int, props: Properties) -> None:
        if code < 0x80:
            self.engine.handle(ev.CopyOutcome(self._now, sl.id, tag, Disposition.ACCEPTED, True))
        else:
            why = f"MQTT reason code 0x{code:02X} {reason_name(code)}"
            if props.reason_string:
                why += f": {props.reason_string}"
            self.engine.handle(
                ev.CopyOutcome(self._now, sl.id, tag, Disposition.REJECTED, True, why))

    def _freed(self) -> None:
        """A packet id came free: send what waited for the window; the subscriptions get
        the room left as credit once the packets in hand are processed (`_credit_now`)."""
        while self.backlog and self._window() + len(self.backlog) > 0:
            sl, action = self.backlog.popleft()
            if sl.filter in self.subs:
                self._send_unsettled(sl, action)
        self._credit_due = True

    def _credit_now(self) -> None:
        if self._credit_due:
            self._credit_due = False
            self._recredit()

    def output_drained(self) -> None:
        """The writer sent everything: top up QoS 0 subscriptions that stopped for output."""
        topped = False
        for sl in self.subs.values():
            if sl.qos == 0 and sl.q0_left < QOS0_CREDIT // 2:
                sl.q0_left = QOS0_CREDIT
                self.engine.handle(ev.SubscriberCredit(self._now, sl.id, QOS0_CREDIT))
                topped = True
        if topped:
            self.node.flush()

    # ---------------------------------------------------------------- engine actions

    def apply(self, ls: Any, action: Any) -> None:
        kind = type(action)
        if kind is Send:
            self._on_send(ls, action)
        elif kind is Decide:
            self._on_decide(action.tag, action.outcome)
        elif kind is Credit:
            ls.credit += action.amount
            if self.held:
                self._drain_held()
        elif kind is SettleCopy:
            pass  # an MQTT PUBLISH cannot be taken back; its packet id frees on the ack
        elif kind is CloseLink:
            if action.condition == LINK_STOLEN and type(ls) is SubLink:
                self._stolen(ls)
            elif action.condition == LINK_STOLEN:
                # The device has since published through another router (its session lives
                # there): a late PUBLISH on this connection was not published again.
                if not self.closing:
                    self.taken_over()
            else:
                self._protocol_error(RC.IMPLEMENTATION_SPECIFIC_ERROR,
                                     f"{action.condition}: {action.description}")
        self._credit_now()
        self._output()

    # ---------------------------------------------------------------- ending

    def _on_disconnect(self, d: Disconnect) -> None:
        s = self.session
        new_expiry = d.properties.session_expiry_interval
        if s is not None and new_expiry is not None:
            if s.expiry == 0 and new_expiry > 0:
                self._protocol_error(RC.PROTOCOL_ERROR, "DISCONNECT set a Session Expiry "
                                     "Interval, but CONNECT had 0 (section 3.14.2.2.2)")
                return
            s.expiry = float(new_expiry)
            s.persistent = new_expiry > 0
        log.debug("mqtt client %r disconnected (%s)", self.client_id,
                  reason_name(d.reason_code))
        if d.reason_code != RC.DISCONNECT_WITH_WILL_MESSAGE:
            self.will = None  # a normal DISCONNECT discards the will
        self._close_with(b"")

    def keepalive_deadline(self) -> float | None:
        if self.refused is not None:
            return self.last_heard + FAILED_LOG_IN_DELAY
        if not self.connected:
            return self.last_heard + CONNECT_TIMEOUT
        if not self.keep_alive:
            return None
        return self.last_heard + 1.5 * self.keep_alive

    def keepalive_expired(self) -> None:
        if self.closing:
            return
        if self.refused is not None:  # a refused log-in, answered after the delay
            self._close_with(self.refused)
            return
        if not self.connected:
            log.warning("mqtt connection %s: no CONNECT within %g s; closing", self.peer,
                        CONNECT_TIMEOUT)
            self._close_with(b"")
            return
        self._protocol_error(RC.KEEP_ALIVE_TIMEOUT, f"nothing heard for 1.5 x the keep-alive "
                             f"of {self.keep_alive:g} s")
        self.node.flush()

    def _stolen(self, sl: SubLink) -> None:
        """A newer attach of one of this session's subscriptions at another router won (a
        connection with this client id there took the session over): the session lives
        there now. Close this connection as taken over and forget the session here."""
        self.subs.pop(sl.filter, None)  # the engine dropped it already
        self.node.forget_link(sl.id)
        s = self.session
        if not self.closing:
            self.taken_over()
        if s is not None:
            # The session resumed at the other router: a will waiting for its delay is
            # dropped (one with no delay went out when this connection closed).
            self._cancel_will(s)
            registry = self.state.sessions
            if registry.get(s.client_id) is s:
                del registry[s.client_id]
            s.persistent = False  # not here any more: it leaves this router's store
            self._keep_session(s)

    def taken_over(self) -> None:
        """Another connection with the same client id takes the session over."""
        log.info("mqtt client %r: session taken over by a new connection; closing %s",
                 self.client_id, self.peer)
        self.state.counts["taken_over"] += 1
        reply = b""
        if self.version == MQTT_5:
            reply = self._fit(Disconnect(RC.SESSION_TAKEN_OVER.value, Properties(
                reason_string="another connection with this client id took the session over")),
                Disconnect(RC.SESSION_TAKEN_OVER.value))
        self._close_with(reply)

    def _close_with(self, reply: bytes) -> None:
        """Send `reply`, detach from the engine, and have the server close the socket."""
        if reply:
            self.out += reply
        self.closing = True
        self._release()
        self._output()

    def _release(self) -> None:
        """Detach every link from the engine: a persistent session's subscriptions go warm
        and its undecided messages wait for a resend; otherwise both end."""
        s = self.session
        persistent = s is not None and s.persistent
        will, self.will = self.will, None
        if will is not None and s is not None:
            self._will(s, will, persistent)
        if self.pub is not None:
            pub, self.pub = self.pub, None
            if s is not None:
                for tag in list(s.rec_tags.values()):  # PUBREC sent: the outcome was given
                    self.engine.handle(ev.PublisherSettled(self._now, pub.id, tag))
                if not persistent:
                    s.in_rec.clear()
                    s.rec_tags.clear()
            self.node.forget_link(pub.id)
            self.engine.handle(
                ev.PublisherDetached(self.node.now(), pub.id, not persistent))
        for sl in list(self.subs.values()):
            self._detach(sl, final=not persistent)
        self.backlog.clear()
        self.held.clear()
        self.awaiting.clear()
        if s is not None and s.conn is self:
            s.conn = None
            registry = self.state.sessions
            if persistent:
                s.expires_at = self.node.now() + s.expiry
                store = self.node.relay_store
                if store is not None and s.stored:
                    store.session_away(s.client_id)
            else:
                self._keep_session(s)  # (a session that ends leaves the store)
                if registry.get(s.client_id) is s:
                    del registry[s.client_id]

    def _will(self, s: SessionState, will: Will, persistent: bool) -> None:
        """The connection ended without a normal DISCONNECT: publish the will now, or after
        its Will Delay Interval if the session outlives the connection that long (it is
        published when the session ends, whichever comes first; a resume cancels it)."""
        delay = min(self.will_delay, s.expiry) if persistent else 0.0
        self._cancel_will(s)
        if delay <= 0:
            WillSender(self.state, s.client_id, will)
            return
        node, state = self.node, self.state
        s.will = will

        def due() -> None:
            if s.will is will and s.conn is None:
                s.will = s.will_timer = None
                WillSender(state, s.client_id, will)
                node.flush()

        s.will_timer = node.call_later(delay, due)

    def _cancel_will(self, s: SessionState) -> None:
        if s.will_timer is not None:
            s.will_timer.cancel()
        s.will = s.will_timer = None

    def _fire_pending_will(self, s: SessionState) -> None:
        """The session ends: a will waiting for its delay goes out now."""
        will = s.will
        self._cancel_will(s)
        if will is not None:
            WillSender(self.state, s.client_id, will)

    def closed(self) -> None:
        """The socket is gone."""
        if not self.closing:
            log.debug("mqtt client %r (%s): connection lost", self.client_id, self.peer)
        self.closing = True
        self._release()
        self.node.flush()

    def shutdown(self, description: str) -> None:
        """The router is stopping: say so and close, without telling the engine (to the mesh
        this is the router going away)."""
        if self.version == MQTT_5 and self.connected:
            self.out += self._fit(Disconnect(RC.SERVER_SHUTTING_DOWN.value, Properties(
                reason_string=description[:REASON_STRING_MAX])),
                Disconnect(RC.SERVER_SHUTTING_DOWN.value))
        for ls in [self.pub, *self.subs.values()]:
            if ls is not None:
                self.node.forget_link(ls.id)
        self.pub = None
        self.subs.clear()
        if self.session is not None and self.session.conn is self:
            self.session.conn = None
        self.closing = True
        self._output()

    def abort(self, description: str) -> None:
        try:
            self._protocol_error(RC.IMPLEMENTATION_SPECIFIC_ERROR, description)
        finally:
            self._output()

    # ---------------------------------------------------------------- output

    def _send(self, packet: Any) -> None:
        self.out += encode(packet, self.version or 4)

    def _fit(self, packet: Any, bare: Any) -> bytes:
        """`packet` encoded, or `bare` (the same without its Reason String and User
        Properties) if `packet` is larger than the client's Maximum Packet Size: the server
        must leave those out rather than exceed it (MQTT-3.1.2-24, -25)."""
        raw = encode(packet, self.version or 4)
        if self.client_max_packet and len(raw) > self.client_max_packet:
            return encode(bare, self.version or 4)
        return raw

    def take_output(self) -> bytes:
        data = bytes(self.out)
        self.out.clear()
        return data

    def _output(self) -> None:
        if self.on_output is not None:
            self.on_output()

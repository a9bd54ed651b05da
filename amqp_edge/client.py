"""The exactly-once client SDK: a blocking `Publisher` and `Subscriber` for exactmesh routers.

    from amqp_edge.client import Publisher, Subscriber

    with Publisher(["amqp://127.0.0.1:5672"], topic="orders/eu", id="shop-1",
                   state_dir="/var/lib/shop") as pub:
        pub.send(b"order 1")
        pub.flush(timeout=30)

    with Subscriber(["amqp://127.0.0.1:5672"], "orders/#", id="billing",
                    state_dir="/var/lib/billing", durable=True, timeout=60) as sub:
        for msg in sub:
            handle(msg.body)
            sub.accept(msg)

Each client runs one python-qpid-proton `Container` in a background daemon thread (the *I/O
thread*); the application's calls reach it through a queue and an `EventInjector`. Group
commits to SQLite (`amqp_edge.client_store`) happen on the I/O thread once per batch of events
(proton's REACTOR_QUIESCED, i.e. before it waits for the sockets again), so a message is in the
database before it goes on the wire without one commit per message.

Identity: a publisher is container-id NAME with link `pub/NAME`; its delivery tags are the
ASCII decimal of a persisted sequence number (b"1", b"2", ...), never reused, and a message's
id is "NAME:seq". A subscriber is container-id NAME with link `sub/NAME`; it sees the router's
tags (32 hex characters, `router.core.records.outgoing_tag`). On reconnecting, both declare what
they hold in the link property `exactmesh:resume` (docs/resume-protocol.md).

What to send, declare, answer and count is decided by the sans-IO cores of
`amqp_edge.sdk_core` (`PublisherCore`, `SubscriberCore`, `Reconnect`); the classes here are
their drivers: proton events in, core calls under the client lock, proton operations and
store commits out.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proton import Condition, Delivery, Endpoint, Handler, Message, SSLDomain, Terminus, symbol
from proton.reactor import ApplicationEvent, EventInjector, LinkOption

from router.core import message
from router.core.topics import TopicError, validate_filter, validate_topic

from .advisory import CONNECTED, DISCONNECTED, NO_RESPONSE, Advisory, AdvisoryLog
from .client_store import PublisherStore, StoreError, SubscriberStore
from .container import LeanContainer
from .sdk_core import (  # noqa: F401 (re-exported: constants callers may read)
    ATTEMPT_TIMEOUT,
    BACKOFF_MAX,
    BACKOFF_MIN,
    FATAL_CONDITIONS,
    RESUME_ACCEPTED_AGE,
    RESUME_ACCEPTED_MAX,
    Failure,
    MemoryPublisherStore,
    MemorySubscriberStore,
    Outcome,
    PublisherCore,
    Reconnect,
    Shown,
    SubscriberCore,
    is_fatal,
)

__all__ = [
    "Advisory",
    "ClientClosed",
    "ClientError",
    "Failure",
    "Login",
    "MemoryPublisherStore",
    "Outcome",
    "Publisher",
    "ReceivedMessage",
    "RouterUnreachable",
    "StoreError",
    "Subscriber",
    "encode_message",
    "parse_urls",
]

log = logging.getLogger("exactmesh.client")

RESUME_KEY = symbol("exactmesh:resume")
DELIVERY_MODE_KEY = symbol("delivery-mode")
GUARANTEE_KEY = symbol("guarantee")
GUARANTEES = ("exactly-once", "at-least-once")  # docs/guarantees.md, "At least once"
# An at-least-once subscriber remembers this many answered tags, in memory, to drop repeats
# within one run of its process.
AT_LEAST_ONCE_MEMORY = 100_000
EXPECT_KEY = symbol("exactmesh:expect")  # pre-registration: amqp_edge/expect.py
# AMQP idle timeout the clients ask for: a router that hangs without closing its sockets (a
# frozen process, a dead host) is noticed within about twice this, and the client fails
# over. 1 s keeps that under 3 s (measured 2.06 s, benchmarks/failover.py --scenarios
# sub-freeze,pub-freeze); the price is an empty frame from the router every half second.
IDLE_TIMEOUT = 1.0
# A router answers a refused log-in after a second (to slow password guessing): a client
# logging in with a password waits at least this long for a silent router, so that the
# refusal, not its own idle timeout, is what it sees.
LOGIN_IDLE_TIMEOUT = 2.5
# A refused log-in is a wrong user name or password, which trying again does not cure, or a
# user over the router's --max-connections-per-user, which a connection closing elsewhere
# does (the client cannot tell them apart): refused for this long without attaching since,
# the client stops with a ClientError that says so.
LOGIN_REFUSED_GRACE = 5.0
REFUSED_LOG_IN = "amqp:unauthorized-access"  # the transport condition of a refused SASL log-in
CLOSE_WAIT = 2.0  # seconds `disconnect()` waits for the relay to answer its close


class ClientError(Exception):
    """The client cannot go on (a router refused its link, its state failed, ...)."""


class RouterUnreachable(ClientError):
    """No router in the URL list could be reached for `connect_timeout` seconds."""


class ClientClosed(ClientError):
    """The client was closed."""


@dataclass(frozen=True)
class Login:
    """How a client logs in to a router that asks for it (docs/security.md): a user name and
    password (SASL PLAIN), TLS trusting the CA in `ca` (use `amqps://` URLs), and a client
    certificate (`cert`, `key`) where the router asks for one. PLAIN goes only over TLS
    unless `plain_in_clear`; `verify_name` checks the router's certificate names its host."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    plain_in_clear: bool = False
    verify_name: bool = True

    def connect_options(self) -> dict[str, Any]:
        """Keywords for proton's `Container.connect`."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options.update(user=self.user, password=self.password or "",
                           allowed_mechs="PLAIN", allow_insecure_mechs=self.plain_in_clear)
        if self.ca or self.cert:
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            if self.ca:
                domain.set_trusted_ca_db(self.ca)
                domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if self.verify_name
                                               else SSLDomain.VERIFY_PEER)
            if self.cert:
                domain.set_credentials(self.cert, self.key or self.cert, None)
            options["ssl_domain"] = domain
        return options


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    """`amqp://host:port` or `host:port`, as a list or comma-separated; returns them as
    `amqp://host:port`. Raises ValueError saying which one is wrong and why."""
    items = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
    if not items or any(not u for u in items):
        raise ValueError("no router URL given: pass amqp://HOST:PORT (several separated by "
                         "commas)")
    out = []
    for url in items:
        text = url if "://" in url else f"amqp://{url}"
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as err:
            raise ValueError(f"bad router URL {url!r}: {err}; write amqp://HOST:PORT") from None
        if parts.scheme not in ("amqp", "amqps"):
            raise ValueError(f"bad router URL {url!r}: scheme {parts.scheme!r} is not amqp; "
                             "write amqp://HOST:PORT")
        if not parts.hostname:
            raise ValueError(f"bad router URL {url!r}: no host; write amqp://HOST:PORT")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"bad router URL {url!r}: a router URL has no path; "
                             "write amqp://HOST:PORT")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        out.append(f"{parts.scheme}://{host}:{port or 5672}")
    return out


def endpoints(urls: str | Sequence[str] | None, relay: str | None) -> str | Sequence[str]:
    """What a client connects to: its routers' URLs, or its relay's (`relay=URL`)."""
    if (urls is None) == (relay is None):
        raise ValueError("give the routers' URLs or relay=URL (one of them)")
    return relay if relay is not None else urls  # type: ignore[return-value]


def expectations(expect: dict[str, str], timeout: float) -> list[dict[str, Any]]:
    """`Publisher(expect=...)` as the exactmesh:expect property: listener -> filter, where a
    listener is an SDK subscriber's id or a full mesh key (container-id/link-name)."""
    if expect and not timeout > 0:
        raise ValueError("expect_timeout must be more than 0 seconds")
    out = []
    for listener, topic_filter in expect.items():
        try:
            validate_filter(topic_filter)
        except TopicError as err:
            raise ValueError(f"expect: bad topic filter {topic_filter!r} for {listener!r}: "
                             f"{err}") from None
        key = listener if "/" in listener else f"{listener}/sub/{listener}"
        out.append({"key": key, "filter": topic_filter, "timeout": float(timeout)})
    return out


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError(f"client id {name!r} must be a non-empty string of at most 200 "
                         "characters")
    return name


def _check_guarantee(guarantee: str) -> None:
    if guarantee not in GUARANTEES:
        raise ValueError(f"guarantee {guarantee!r} is not one of {', '.join(GUARANTEES)}")


class _Options(LinkOption):
    """Link properties (the resume declaration and others) and, for a durable subscriber, its
    source terminus, set before the link opens."""

    def __init__(self, properties: dict, durable: bool = False,
                 timeout: float | None = None) -> None:
        self.properties = properties
        self.durable = durable
        self.timeout = timeout

    def apply(self, link: Any) -> None:
        link.properties = self.properties
        if self.durable:
            link.source.durability = Terminus.DELIVERIES
            link.source.expiry_policy = Terminus.EXPIRE_NEVER
            link.source.timeout = int(self.timeout or 0)


def _abort_socket(transport: Any) -> None:
    """Make closing this connection's socket a reset (SO_LINGER 0): the kernel then drops
    what it had not delivered yet. A connection given up (the router went silent) may hold a
    transfer that has not reached the router; sent once the path heals, it would be taken for
    a new publication there while the client resends it elsewhere (test bed finding 2,
    docs/testbed.md). proton keeps the socket as its selectable's delegate."""
    sock = getattr(getattr(transport, "_selectable", None), "_delegate", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

class _Timer(Handler):
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()


class _ClientLoop(Handler):
    """What publishers and subscribers share: the I/O thread, reconnection to the next URL
    with backoff, the resume property on attach, and thread-safe wake-ups.

    Connection control for clients that are only sometimes connected (a laptop): with
    `autoconnect=False` it does not connect until `connect()`; `disconnect()` detaches
    cleanly and returns once it is safe to sever the network. Advisories (CONNECTED,
    DISCONNECTED, NO_RESPONSE: amqp_edge/advisory.py) come to `on_advisory(advisory)` on the
    I/O thread and to any reader of `advisories()`."""

    kind = "client"

    def __init__(self, urls: str | Sequence[str], name: str, *,
                 connect_timeout: float | None, idle_timeout: float,
                 on_advisory: Callable[[Advisory], None] | None = None,
                 autoconnect: bool = True, login: Login | None = None) -> None:
        self._urls = parse_urls(urls)
        self._login_options = login.connect_options() if login is not None else {}
        self._user = login.user if login is not None else None
        self._name = _check_name(name)
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout if self._user is None \
            else max(idle_timeout, LOGIN_IDLE_TIMEOUT)
        self._refused_since: float | None = None  # log-ins refused since the last attach
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._listeners: list[Callable[[], None]] = []
        # shared, under _lock
        self._error: BaseException | None = None
        self._closed = False
        self._attached = False
        self._attached_url: str | None = None
        self._wake_pending = False
        self._reconnects = 0
        self._advisories = AdvisoryLog()
        self._on_advisory = on_advisory
        # I/O thread only
        self._dial = Reconnect(self._urls, connect_timeout, time.monotonic())
        self._conn: Any = None
        self._link: Any = None
        self._incarnation = 0  # of the current connection and link
        self._last_error = "none yet"
        self._stopping = False
        self._reconnect_timer: Any = None
        self._online = autoconnect  # whether to be connected: connect() / disconnect()
        self._container = LeanContainer(self)
        self._container.container_id = self._name
        self._injector = EventInjector()
        self._container.selectable(self._injector)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"exactmesh-{self.kind}-{self._name}")

    # ------------------------------------------------------------------ any thread

    def _start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._container.run()
        except BaseException as exc:  # surfaced to the application by every call
            log.exception("%s %s: the I/O thread failed", self.kind, self._name)
            self._fail(ClientError(f"the client's I/O thread failed: {exc!r}"))

    def _wake(self) -> None:
        with self._lock:
            if self._wake_pending or self._closed:
                return
            self._wake_pending = True
        self._injector.trigger(ApplicationEvent("exactmesh_wake"))

    def _notify(self) -> None:
        """Call with _lock held: wake blocked callers and listeners (trio)."""
        self._cond.notify_all()
        for fn in self._listeners:
            fn()

    def _add_listener(self, fn: Callable[[], None]) -> None:
        """`fn` is called (from any thread, with the client's lock held; it must not block)
        whenever the client's state changes: an outcome, a message, an error, attach."""
        with self._lock:
            self._listeners.append(fn)

    def _remove_listener(self, fn: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(fn)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = exc
            self._notify()

    def _check(self) -> None:
        """Call with _lock held: raise the client's error, or ClientClosed."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ClientClosed(f"{self.kind} {self._name!r} is closed")

    def check(self) -> None:
        """Raise the client's error (e.g. RouterUnreachable), or ClientClosed; else nothing."""
        with self._lock:
            self._check()

    @property
    def attached(self) -> bool:
        return self._attached

    def wait_attached(self, timeout: float | None = None) -> str:
        """Block until the link is attached to a router; returns that router's URL. Raises
        TimeoutError, or the client's error (e.g. RouterUnreachable)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._attached:
                self._check()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{self.kind} {self._name!r} not attached to any of "
                                       f"{', '.join(self._urls)} after {timeout} s "
                                       f"(last error: {self._last_error})")
                self._cond.wait(remaining)
            return self._attached_url or ""

    # ------------------------------------------------------------------ connection control

    def connect(self) -> None:
        """Connect (again) after `disconnect()`, or after `autoconnect=False`. Returns at once;
        `wait_attached` or a CONNECTED advisory says when it is attached."""
        self.check()
        self._injector.trigger(ApplicationEvent("exactmesh_connect"))

    def disconnect(self, timeout: float | None = 10.0) -> Advisory:
        """Detach cleanly and close the connection, and stay disconnected until `connect()`;
        returns the DISCONNECTED advisory: from then on it is safe to sever the network.
        The client stays usable: a publisher's `send` keeps storing, for the next connect."""
        with self._cond:
            self._check()
            mark = self._advisories.next
        self._injector.trigger(ApplicationEvent("exactmesh_disconnect"))
        for advisory in self.advisories(timeout, since=mark):
            if advisory.kind == DISCONNECTED:
                return advisory
        raise TimeoutError(f"{self.kind} {self._name!r} not disconnected after {timeout} s")

    def advisories(self, timeout: float | None = None, *,
                   since: int = 0) -> Iterator[Advisory]:
        """The client's advisories (amqp_edge.advisory), those kept so far and then each as it
        comes; ends after `timeout` seconds without one, or when the client is closed."""
        number = since
        while True:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cond:
                items, next_number = self._advisories.since(number)
                while not items:
                    if self._closed:
                        return
                    if self._error is not None:
                        raise self._error
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    self._cond.wait(remaining)
                    items, next_number = self._advisories.since(number)
            number = next_number
            yield from items

    def _advisories_since(self, number: int) -> tuple[list[Advisory], int]:
        with self._lock:
            return self._advisories.since(number)

    def _advise(self, kind: str, url: str, detail: str = "") -> None:
        """I/O thread: record an advisory, wake readers, call the application's callback."""
        advisory = Advisory(kind, url, detail)
        with self._lock:
            if not self._advisories.add(advisory):
                return
            self._notify()
        log.info("%s %s: %s %s%s", self.kind, self._name, kind, url,
                 f" ({detail})" if detail else "")
        if self._on_advisory is not None:
            try:
                self._on_advisory(advisory)
            except Exception:
                log.exception("%s %s: on_advisory raised", self.kind, self._name)

    def close(self) -> None:
        """Detach and stop the I/O thread. Messages without an outcome stay in the state
        directory; nothing is flushed (call `flush` first for that)."""
        with self._lock:
            if self._closed:
                return
            self._wake_pending = True  # no more wake-ups: the injector is about to close
        if self._thread.is_alive():
            self._injector.trigger(ApplicationEvent("exactmesh_close"))
            self._thread.join(10)
        with self._lock:
            self._closed = True
            self._notify()
        with contextlib.suppress(Exception):
            self._injector.close()
        self._close_store()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ to override

    def _close_store(self) -> None:
        raise NotImplementedError

    def _open_link(self, conn: Any) -> Any:
        raise NotImplementedError

    def _on_attached(self, link: Any) -> None:
        pass

    def _on_link_lost(self) -> None:
        pass

    def _on_wake(self) -> None:
        pass

    def _on_quiesced(self) -> None:
        pass

    def _on_closing(self) -> None:
        pass

    def _detach_on_close(self) -> bool:
        """Detach (keep the subscription / resumable state at the router) rather than close."""
        return True

    # ------------------------------------------------------------------ I/O thread

    def on_reactor_init(self, event: Any) -> None:
        if self._online:
            self._connect()

    def on_exactmesh_connect(self, event: Any) -> None:
        if self._online or self._stopping:
            return
        self._online = True
        if self._conn is None and self._reconnect_timer is None:
            self._connect()

    def on_exactmesh_disconnect(self, event: Any) -> None:
        self._online = False
        if self._reconnect_timer is not None:
            self._reconnect_timer.cancel()
            self._reconnect_timer = None
        conn, link = self._conn, self._link
        if conn is None:
            self._advise(DISCONNECTED, "", "was not connected")
            return
        try:
            self._on_closing()  # a publisher's last commit
        except Exception:
            log.exception("%s %s: while disconnecting", self.kind, self._name)
        if link is not None and not link.state & Endpoint.LOCAL_CLOSED:
            link.detach()  # keep what the relay holds for us: a durable subscription stays
        conn.close()
        incarnation = self._incarnation
        # The relay answers the close at once; one that does not is dropped after this.
        self._container.schedule(CLOSE_WAIT, _Timer(lambda: self._close_expired(incarnation)))

    def _close_expired(self, incarnation: int) -> None:
        if incarnation == self._incarnation and not self._online and self._conn is not None:
            self._lost(self._conn, f"no answer to the close within {CLOSE_WAIT:g} s")

    def on_reactor_quiesced(self, event: Any) -> None:
        try:
            self._on_quiesced()
        except Exception as exc:
            log.exception("%s %s failed", self.kind, self._name)
            self._fail(exc if isinstance(exc, ClientError | StoreError)
                       else ClientError(f"{self.kind} {self._name!r} failed: {exc!r}"))
            self._drop_connection()

    def on_exactmesh_wake(self, event: Any) -> None:
        with self._lock:
            self._wake_pending = False
        self._on_wake()

    def on_exactmesh_close(self, event: Any) -> None:
        self._stopping = True
        if self._reconnect_timer is not None:
            self._reconnect_timer.cancel()
        try:
            self._on_closing()
        except Exception:
            log.exception("%s %s: while closing", self.kind, self._name)
        conn, link = self._conn, self._link
        self._conn = self._link = None
        with self._lock:
            self._attached = False
        if conn is None:
            self._container.stop()
            return
        if link is not None and not link.state & Endpoint.LOCAL_CLOSED:
            if self._detach_on_close():
                link.detach()
            else:
                link.close()
        conn.close()
        # Give the close frames up to a second to leave, then stop regardless.
        self._container.schedule(1.0, _Timer(self._container.stop))

    def _connect(self) -> None:
        self._reconnect_timer = None
        if self._stopping or self._error is not None or not self._online:
            return
        url = self._dial.next_url()
        self._incarnation += 1
        incarnation = self._incarnation
        log.debug("%s %s: connecting to %s", self.kind, self._name, url)
        parts = urlsplit(url)
        try:  # proton's connect raises from its event loop on a name it cannot resolve
            socket.getaddrinfo(parts.hostname, parts.port, 0, socket.SOCK_STREAM)
        except OSError as err:
            self._last_error = f"cannot resolve {parts.hostname!r}: {err}"
            self._conn = None
            self._advise(NO_RESPONSE, url, self._last_error)
            self._retry_later()
            return
        self._conn = self._container.connect(url, handler=self, reconnect=False,
                                             heartbeat=self._idle_timeout,
                                             **self._login_options)
        self._conn.exactmesh_incarnation = incarnation
        self._conn.exactmesh_url = url
        self._link = self._open_link(self._conn)
        self._container.schedule(ATTEMPT_TIMEOUT, _Timer(lambda: self._attempt_expired(
            incarnation)))

    def _attempt_expired(self, incarnation: int) -> None:
        if incarnation == self._incarnation and not self._attached and self._conn is not None:
            self._last_error = f"no attach from {self._conn.exactmesh_url} within " \
                               f"{ATTEMPT_TIMEOUT:g} s"
            self._lost(self._conn, self._last_error)

    def _current(self, conn: Any) -> bool:
        if conn is None or self._conn is None:
            return False
        try:
            return conn.exactmesh_incarnation == self._incarnation
        except AttributeError:
            return False

    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not self._current(event.connection) or link != self._link:
            return
        if link.state & Endpoint.REMOTE_CLOSED:
            return  # refused: the close follows
        answer = link.remote_properties or {}
        log.debug("%s %s attached to %s; router's resume answer: %r", self.kind, self._name,
                  event.connection.exactmesh_url, answer.get(RESUME_KEY))
        self._dial.attached()
        self._refused_since = None
        with self._lock:
            self._attached = True
            self._attached_url = event.connection.exactmesh_url
            self._notify()
        self._on_attached(link)
        self._advise(CONNECTED, event.connection.exactmesh_url)

    def on_link_remote_close(self, event: Any) -> None:
        self._link_gone(event)

    def on_link_remote_detach(self, event: Any) -> None:
        self._link_gone(event)

    def _link_gone(self, event: Any) -> None:
        link = event.link
        if not self._current(event.connection) or link != self._link:
            return
        cond = link.remote_condition
        where = event.connection.exactmesh_url
        if cond is not None and is_fatal(cond.name):
            self._fail(ClientError(f"router {where} refused {self.kind} link "
                                   f"{link.name!r}: {cond.name}: {cond.description}; "
                                   "not reconnecting"))
            self._drop_connection()
            return
        reason = f"{cond.name}: {cond.description}" if cond else "link detached"
        self._lost(event.connection, f"{where}: {reason}")

    def on_connection_remote_close(self, event: Any) -> None:
        if self._current(event.connection):
            cond = event.connection.remote_condition
            reason = f"{cond.name}: {cond.description}" if cond else "connection closed"
            self._lost(event.connection, f"{event.connection.exactmesh_url}: {reason}")

    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        if cond is not None and self._current(event.connection):
            _abort_socket(event.transport)
            self._last_error = f"{cond.name}: {cond.description}"
            if cond.name == REFUSED_LOG_IN:
                self._log_in_refused(event.connection.exactmesh_url, cond.description)

    def _log_in_refused(self, url: str, detail: str) -> None:
        """The router refused the log-in: fail once it has for LOGIN_REFUSED_GRACE."""
        now = time.monotonic()
        if self._refused_since is None:
            self._refused_since = now
        if now - self._refused_since < LOGIN_REFUSED_GRACE:
            return
        who = f"user {self._user!r}" if self._user is not None else "a client without a user"
        self._fail(ClientError(
            f"router {url} refused the log-in of {who} ({detail}) for "
            f"{LOGIN_REFUSED_GRACE:g} s: a wrong user name or password, no log-in where one "
            "is needed, or more connections as this user than the router's "
            "--max-connections-per-user (its log says which); not reconnecting"))
        self._drop_connection()

    def on_transport_closed(self, event: Any) -> None:
        if self._stopping and event.connection is not None \
                and getattr(event.connection, "exactmesh_incarnation", None) == self._incarnation:
            self._container.stop()
            return
        if self._current(event.connection):
            self._lost(event.connection, self._last_error)

    def _drop_connection(self) -> None:
        conn = self._conn
        self._conn = self._link = None
        with self._lock:
            self._attached = False
        self._on_link_lost()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _lost(self, conn: Any, reason: str) -> None:
        """The current connection or link is gone: reconnect to the next URL after a backoff."""
        if not self._current(conn):
            return
        self._last_error = reason
        was_attached = self._attached
        url = getattr(conn, "exactmesh_url", "")
        if self._online:
            _abort_socket(getattr(conn, "transport", None))
        self._drop_connection()
        if self._stopping:
            return
        if not self._online:  # disconnect(): the close went through (or timed out)
            self._advise(DISCONNECTED, url, "safe to sever the network")
            return
        self._advise(NO_RESPONSE, url, reason)
        self._dial.lost(was_attached, time.monotonic())
        if was_attached:
            log.info("%s %s lost its link (%s); reconnecting", self.kind, self._name, reason)
        with self._lock:
            self._reconnects += 1
            self._notify()
        self._retry_later()

    def _retry_later(self) -> None:
        delay = self._dial.retry_in(time.monotonic())
        if delay is None:
            self._fail(RouterUnreachable(
                f"no exactmesh router reachable at {', '.join(self._urls)} for "
                f"{self._connect_timeout:g} s (last error: {self._last_error}); start one "
                "or check the URLs"))
            return
        self._reconnect_timer = self._container.schedule(delay, _Timer(self._connect))


# ====================================================================== publisher


def encode_message(name: str, topic: str, seq: int, body: bytes | str,
                   properties: dict | None = None, ttl: float | None = None, *,
                   reply_to: str | None = None, correlation_id: Any = None) -> bytes:
    """The AMQP bytes a `Publisher` named `name` sends as message `seq` (id "NAME:seq",
    durable): what a `MemoryPublisherStore` is preloaded with. A request carries `reply_to`,
    a reply `correlation_id` (the request's message id)."""
    if not isinstance(body, bytes | str):
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if reply_to is not None or correlation_id is not None:  # requests and replies: proton's
        msg = Message(body=body, address=topic, id=f"{name}:{seq}", properties=properties,
                      durable=True, reply_to=reply_to, correlation_id=correlation_id)
        if ttl is not None:
            msg.ttl = ttl
        return msg.encode()
    try:  # the router's AMQP message codec (router/core/message.py), a few microseconds
        return message.encode_message(
            body, to=topic, message_id=f"{name}:{seq}", durable=True,
            ttl_ms=None if ttl is None else int(ttl * 1000),  # as proton rounds it
            application_properties=properties)
    except (message.Unsupported, TypeError):
        # A value of a type it does not write (a proton symbol, a uuid, ...; compiled, a
        # properties object that is not a dict): proton's encoder, as before.
        pass
    msg = Message(body=body, address=topic, id=f"{name}:{seq}", properties=properties,
                  durable=True)
    if ttl is not None:
        msg.ttl = ttl
    return msg.encode()


class Publisher(_ClientLoop):
    """Publishes to one topic with exactly-once resends across reconnects and restarts.

    - `send()` stores the message (group commit, before it is transmitted) and returns its
      sequence number; it blocks only while `window` messages are without an outcome.
    - At most `window` messages are unsettled on the wire; AMQP credit is honoured.
    - accepted: the row is deleted (and counted); rejected: the row is kept as failed
      (`failures()`); released/modified: resent later with the same tag.
    - After a lost connection it reconnects to the next URL (50 ms backoff doubling to 1 s,
      forever unless `connect_timeout`), declares what it holds in `exactmesh:resume` and
      resends it in order. A new Publisher on an existing state_dir resends what it finds.
    - `on_outcome(seq, outcome)` (optional) is called on the I/O thread after the outcome is
      committed; keep it short.
    - `store` (instead of `state_dir`): an outbox object such as `MemoryPublisherStore`, whose
      preloaded messages are declared and resent like those found in a state directory.
    - `relay=URL` instead of the routers' URLs: it publishes through that relay.
    - `expect={listener: filter}`: pre-registration (amqp_edge/expect.py): durable listeners
      it expects (SDK subscriber ids, or container-id/link-name keys) are owed its messages
      from its first attach on, before they ever attach, for `expect_timeout` seconds.
    - `disconnect()` / `connect()`, `advisories()` and `on_advisory`: see `_ClientLoop`.
      While disconnected, `send` still stores (until the window is full), for the next connect.
    - `guarantee="at-least-once"` (link property `guarantee`): an outcome still means every
      subscriber accepted, but the routers keep no tombstone of a message once it is done, so
      a resend after that (this publisher restarted after the mesh forgot the message, say)
      is delivered again. For subscribers that drop repeats themselves (docs/guarantees.md).
    """

    kind = "publisher"

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        topic: str = "",
        *,
        id: str,
        relay: str | None = None,
        state_dir: str | None = None,
        window: int = 100,
        on_outcome: Callable[[int, Outcome], None] | None = None,
        connect_timeout: float | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        mode: str | None = None,
        guarantee: str = "exactly-once",
        synchronous: str = "NORMAL",
        store: Any = None,
        on_advisory: Callable[[Advisory], None] | None = None,
        autoconnect: bool = True,
        expect: dict[str, str] | None = None,
        expect_timeout: float = 3600.0,
        login: Login | None = None,
    ) -> None:
        urls = endpoints(urls, relay)
        try:
            validate_topic(topic)
        except TopicError as err:
            raise ValueError(f"bad topic {topic!r}: {err}") from None
        if window < 1:
            raise ValueError("window must be at least 1")
        _check_guarantee(guarantee)
        parse_urls(urls)  # every argument is checked before the state directory is touched
        if (store is None) == (state_dir is None):
            raise ValueError("give a publisher either state_dir or store (not both)")
        if store is None:
            store = PublisherStore(state_dir, _check_name(id), topic, synchronous)
        else:
            _check_name(id)
        self._store = store
        super().__init__(urls, id, connect_timeout=connect_timeout, idle_timeout=idle_timeout,
                         on_advisory=on_advisory, autoconnect=autoconnect, login=login)
        self.topic = topic
        self.link_name = f"pub/{self._name}"
        self.window = window
        self._mode = mode
        self.guarantee = guarantee
        self._expect = expectations(expect or {}, expect_timeout)
        self._on_outcome = on_outcome
        # The publisher's decisions (amqp_edge.sdk_core). The application's thread publishes
        # into it under _lock; the I/O thread takes _lock only to commit (what the two
        # share: PublisherCore's "Threads") and calls the rest without it.
        self._core = PublisherCore.from_store(self._store, window=window)
        if self._core.holding:
            log.info("publisher %s: resending %d message(s) from %s", self._name,
                     self._core.holding, state_dir or "its store")
        self._start()

    # ------------------------------------------------------------------ application API

    @property
    def next_seq(self) -> int:
        """The sequence number the next `send` will get."""
        with self._lock:
            return self._core.next_seq

    @property
    def pending(self) -> int:
        """Messages sent (or loaded) without an outcome yet."""
        with self._lock:
            return self._core.outstanding

    def send(self, body: bytes | str, properties: dict | None = None, ttl: float | None = None,
             timeout: float | None = None, *, reply_to: str | None = None,
             correlation_id: Any = None) -> int:
        """Queue one message; returns its sequence number. Blocks while `window` messages are
        without an outcome (TimeoutError after `timeout` seconds if given). `reply_to` and
        `correlation_id`: for requests and replies (amqp_edge/request.py)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check()
                if self._core.can_publish():
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"the window of {self.window} stayed full for "
                                       f"{timeout} s")
                self._cond.wait(remaining)
            seq = self._enqueue(body, properties, ttl, reply_to, correlation_id)
        self._wake()
        return seq

    def wait_transmitted(self, timeout: float | None = None) -> bool:
        """Wait until every message without an outcome went on the wire of the current link
        (a cron job hands its messages to its relay, then `disconnect()`s; a later run
        collects their outcomes). False after `timeout` seconds, or if not attached."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._core.all_transmitted():
                self._check()
                remaining = None if deadline is None else deadline - time.monotonic()
                if not self._attached or (remaining is not None and remaining <= 0):
                    return False
                # The I/O thread transmits as credit comes without notifying: look again soon.
                self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))
            return True

    def try_send(self, body: bytes | str, properties: dict | None = None,
                 ttl: float | None = None) -> int | None:
        """`send` without blocking: None when the window is full."""
        with self._lock:
            self._check()
            if not self._core.can_publish():
                return None
            seq = self._enqueue(body, properties, ttl)
        self._wake()
        return seq

    def _enqueue(self, body: bytes | str, properties: dict | None, ttl: float | None,
                 reply_to: str | None = None, correlation_id: Any = None) -> int:
        """Call with _lock held."""
        payload = encode_message(self._name, self.topic, self._core.next_seq, body, properties,
                                 ttl, reply_to=reply_to, correlation_id=correlation_id)
        return self._core.publish(payload)

    def flush(self, timeout: float | None = None, *, stored: bool = False) -> None:
        """Wait until every message sent so far has a final outcome (accepted or failed);
        with `stored`, or is on relays' disks for absent listeners (`received`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._core.outstanding - (self._core.waiting if stored else 0):
                self._check()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{self._core.outstanding} message(s) of publisher "
                                       f"{self._name!r} still without an outcome after "
                                       f"{timeout} s")
                self._cond.wait(remaining)
            self._check()

    def failures(self) -> list[Failure]:
        """Every message that failed (kept in the state directory until clear_failures)."""
        return [Failure(f.seq, f.condition, f.description) for f in self._store.failures()]

    def clear_failures(self) -> int:
        return self._store.clear_failures()

    def stats(self) -> dict[str, Any]:
        """Counts for this run (sent, resent, accepted, failed, released), plus pending,
        accepted_total (all runs), next_seq, reconnects and the attached URL."""
        with self._lock:
            core = self._core
            return {**core.counts, "pending": core.outstanding,
                    "accepted_total": core.accepted_total, "next_seq": core.next_seq,
                    "reconnects": self._reconnects, "url": self._attached_url}

    def close(self, flush_timeout: float | None = None) -> None:
        """Detach and stop. Nothing is flushed unless `flush_timeout` is given (then it
        flushes first, raising TimeoutError after closing if messages are still pending);
        messages without an outcome stay in the state directory for the next run."""
        try:
            if flush_timeout is not None:
                self.flush(flush_timeout)
        finally:
            super().close()

    def _close_store(self) -> None:
        self._store.close()

    def _detach_on_close(self) -> bool:
        return self._core.detach_on_close()

    # ------------------------------------------------------------------ I/O thread

    def _open_link(self, conn: Any) -> Any:
        props: dict = {RESUME_KEY: self._core.declaration()}
        if self._mode is not None:
            props[DELIVERY_MODE_KEY] = self._mode
        if self.guarantee != "exactly-once":
            props[GUARANTEE_KEY] = self.guarantee
        if self._expect:
            props[EXPECT_KEY] = self._expect
        return self._container.create_sender(conn, self.topic, name=self.link_name,
                                             options=_Options(props))

    def _on_attached(self, link: Any) -> None:
        self._core.attached()
        self._transmit()

    def _on_link_lost(self) -> None:
        self._core.link_lost()

    def _on_wake(self) -> None:
        pass  # the work is done at quiesce, once per batch of events

    def _on_closing(self) -> None:
        self._commit()

    def _on_quiesced(self) -> None:
        self._commit()
        self._transmit()

    def _commit(self) -> None:
        """One group commit of what the core has for the store; then what it unblocks: new
        messages may go on the wire, outcomes are reported."""
        with self._lock:
            commit = self._core.take_commit()
        if commit is None:
            return
        commit.apply_to(self._store)
        with self._lock:
            outcomes = self._core.committed(commit)
            if outcomes:
                self._notify()
        if outcomes and self._on_outcome is not None:
            for o in outcomes:
                try:
                    self._on_outcome(o.seq, o)
                except Exception:
                    log.exception("publisher %s: on_outcome raised", self._name)

    def _transmit(self) -> None:
        link = self._link
        if link is None:
            return
        for t in self._core.transmit(link.credit):
            link.delivery(str(t.seq))
            link.stream(t.payload)
            link.advance()

    def on_link_flow(self, event: Any) -> None:
        if event.link == self._link and self._current(event.connection):
            self._transmit()

    def on_delivery(self, event: Any) -> None:
        d = event.delivery
        if not self._current(event.connection) or d.link != self._link or not d.updated \
                or self._core.decided(d.tag):
            return
        state = d.remote_state
        condition = description = info = None
        if state == Delivery.ACCEPTED:
            name: str | None = "accepted"
        elif state == Delivery.REJECTED:
            name = "rejected"
            cond = d.remote.condition
            if cond is not None:
                condition, description = cond.name, cond.description
                info = dict(cond.info) if cond.info else None
        elif state == Delivery.RELEASED:
            name = "released"
        elif state == Delivery.MODIFIED:
            name = "modified"
        elif state == Delivery.RECEIVED:
            name = "received"  # on relays' disks: not an outcome (docs/relay.md)
        else:
            name = None
        reaction = self._core.on_disposition(d.tag, name, settled=d.settled,
                                             condition=condition, description=description,
                                             info=info)
        if reaction.settle:
            d.settle()
        if reaction.retry_in is not None:
            self._container.schedule(reaction.retry_in, _Timer(self._requeue))
        if reaction.wake:  # it left the window: a blocked send may go on, and more go out
            with self._lock:
                self._notify()
            self._transmit()

    def _requeue(self) -> None:
        self._core.requeue()
        self._transmit()


# ====================================================================== subscriber


@dataclass(eq=False)
class ReceivedMessage:
    """One message as the application sees it. `tag` is the router's delivery tag (32 hex
    characters: the same for the same publisher message on any router)."""

    body: Any
    topic: str | None
    message_id: Any
    tag: str
    redelivered: bool
    properties: dict | None
    delivery_count: int = 0
    annotations: dict | None = None
    reply_to: str | None = None  # a request's reply address
    correlation_id: Any = None  # a reply's: the request's message id
    _copy: int = field(default=0, repr=False)  # SubscriberCore's serial (Shown.copy)

    @property
    def publisher(self) -> str | None:
        """Who published it: `container-id/link-name`, as its first router annotated it."""
        value = (self.annotations or {}).get("x-opt-exactmesh-publisher")
        return str(value) if value is not None else None


def _redelivered(msg: Message) -> bool:
    if msg.delivery_count:
        return True
    annotations = msg.annotations or {}
    return any("redeliver" in str(key) and value for key, value in annotations.items())


class Subscriber(_ClientLoop):
    """Receives from a topic filter; shows the application each delivery tag once.

    - `durable=True`: a durable source terminus (unsettled-state, never expires, `timeout`
      seconds): the router keeps the subscription while the client is away that long.
    - `prefetch`: the credit window (messages received and not yet answered).
    - `accept(msg)` commits the tag to the state directory, then accepts and settles. A
      delivery whose tag was already answered is answered the same way silently
      (`stats()["duplicates_suppressed"]`). Answers are kept `keep_processed` seconds (24 h);
      a duplicate older than that is not caught.
    - On a lost connection, messages received but not answered are dropped locally (a durable
      subscription gets them again); it reconnects to the next URL and declares, in
      `exactmesh:resume`, those as "received" and recently accepted ones as "accepted", with a
      new attach generation.
    - `relay=URL` instead of the routers' URLs: it listens through that relay
      (`exactmesh relay`, docs/relay.md), always durable; while it is away the relay keeps
      what arrives for it for its registration (`timeout`, or the relay's `--registration`).
    - `disconnect()` / `connect()`, `advisories()` and `on_advisory`: see `_ClientLoop`.
    - `guarantee="at-least-once"`: no `state_dir` and no disk write per message; the answers
      it gave are kept in memory (the last 100,000), so a repeat within one run of the process
      is still dropped, but after a restart the application may see again what it accepted
      before. For applications that drop repeats themselves (by `message_id`, say).
    """

    kind = "subscriber"

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        topic_filter: str = "",
        *,
        id: str,
        state_dir: str | None = None,
        relay: str | None = None,
        durable: bool = False,
        guarantee: str = "exactly-once",
        timeout: float | None = None,
        prefetch: int = 100,
        keep_processed: float = 24 * 3600.0,
        connect_timeout: float | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        synchronous: str = "NORMAL",
        on_advisory: Callable[[Advisory], None] | None = None,
        autoconnect: bool = True,
        link_name: str | None = None,
        login: Login | None = None,
    ) -> None:
        urls = endpoints(urls, relay)
        durable = durable or relay is not None  # a relay's client is registered there
        try:
            validate_filter(topic_filter)
        except TopicError as err:
            raise ValueError(f"bad topic filter {topic_filter!r}: {err}") from None
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        _check_guarantee(guarantee)
        parse_urls(urls)
        self.guarantee = guarantee
        self._store: Any
        if guarantee == "at-least-once":  # nothing on disk: repeats dropped within a run only
            _check_name(id)
            self._store = MemorySubscriberStore(time.time, limit=AT_LEAST_ONCE_MEMORY)
        elif state_dir is None:
            raise ValueError("an exactly-once subscriber needs state_dir, where it records "
                             "what it processed; or give guarantee='at-least-once'")
        else:
            self._store = SubscriberStore(state_dir, _check_name(id), topic_filter,
                                          synchronous)
        super().__init__(urls, id, connect_timeout=connect_timeout, idle_timeout=idle_timeout,
                         on_advisory=on_advisory, autoconnect=autoconnect, login=login)
        self.topic_filter = topic_filter
        self.link_name = link_name or f"sub/{self._name}"
        self.durable = durable
        self.timeout = timeout
        self.prefetch = prefetch
        self.keep_processed = keep_processed
        self._store.prune(keep_processed)
        # The subscriber's decisions (amqp_edge.sdk_core), under _lock: the application's
        # thread takes messages and answers them, the I/O thread does the rest.
        self._core = SubscriberCore.from_store(self._store, prefetch=prefetch, durable=durable)
        self._start()

    # ------------------------------------------------------------------ application API

    def receive(self, timeout: float | None = None) -> ReceivedMessage | None:
        """The next message, or None after `timeout` seconds without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check()
                shown = self._core.take()
                if shown is not None:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
        return _received(shown)

    def try_receive(self) -> ReceivedMessage | None:
        with self._lock:
            self._check()
            shown = self._core.take()
        return None if shown is None else _received(shown)

    def receive_many(self, max_count: int = 100,
                     timeout: float | None = None) -> list[ReceivedMessage]:
        """Up to `max_count` messages in arrival order: waits up to `timeout` seconds for the
        first (then returns [] if none came), then takes the ones already here without
        waiting. Answer them with `accept_many` for one commit per batch."""
        if max_count < 1:
            raise ValueError("max_count must be at least 1")
        first = self.receive(timeout)
        if first is None:
            return []
        shown: list[Shown] = []
        with self._lock:
            while len(shown) < max_count - 1 and (one := self._core.take()) is not None:
                shown.append(one)
        return [first, *(_received(s) for s in shown)]

    def __iter__(self) -> Iterator[ReceivedMessage]:
        while True:
            try:
                msg = self.receive()
            except ClientClosed:
                return
            if msg is not None:
                yield msg

    def accept(self, msg: ReceivedMessage) -> None:
        """Record `msg` as processed (committed), then accept and settle it."""
        self._answer([msg], "accepted", None, None)

    def accept_many(self, msgs: Sequence[ReceivedMessage]) -> None:
        """`accept` for a batch: one commit records all of them (then each is accepted and
        settled), so a batch costs about what one message does. When it returns, every one
        is as processed as after `accept`: a copy of any of them that comes later, on any
        router, after a crash or a restart, is suppressed."""
        if msgs:
            self._answer(msgs, "accepted", None, None)

    def reject(self, msg: ReceivedMessage, description: str | None = None,
               condition: str = "exactmesh:rejected") -> None:
        """Refuse `msg` (recorded: a duplicate of it is rejected again, silently). The
        publisher is told, with `description`."""
        self._answer([msg], "rejected", condition, description)

    def release(self, msg: ReceivedMessage) -> None:
        """Give `msg` back: the router delivers it again (delivery_count raised)."""
        self._answer([msg], "released", None, None)

    def _answer(self, msgs: Sequence[ReceivedMessage], outcome: str, condition: str | None,
                description: str | None) -> None:
        with self._lock:
            self._check()
        # Committed before the dispositions are queued: a copy that comes later is suppressed.
        new = self._store.record_many([m.tag for m in msgs], outcome) \
            if SubscriberCore.must_record(outcome) else [False] * len(msgs)
        now, prune = time.time(), False
        with self._lock:
            for msg, fresh in zip(msgs, new, strict=True):
                prune |= self._core.answer(msg.tag, outcome, now, new=fresh, copy=msg._copy,
                                           condition=condition, description=description)
        self._wake()
        if prune:
            self._store.prune(self.keep_processed)

    def stats(self) -> dict[str, Any]:
        """Counts for this run (received, duplicates_suppressed, accepted, rejected,
        released), plus accepted_total (all runs), queued, gen, reconnects and the URL."""
        with self._lock:
            core = self._core
            return {**core.counts, "accepted_total": core.accepted_total,
                    "queued": core.queued, "gen": core.gen,
                    "reconnects": self._reconnects, "url": self._attached_url}

    @property
    def accepted_total(self) -> int:
        """Messages this subscriber id accepted in all runs (persisted)."""
        with self._lock:
            return self._core.accepted_total

    def _close_store(self) -> None:
        self._store.close()

    def _detach_on_close(self) -> bool:
        return self._core.detach_on_close()  # a durable subscription stays (warm)

    # ------------------------------------------------------------------ I/O thread

    def _open_link(self, conn: Any) -> Any:
        gen = self._store.next_gen()
        with self._lock:
            props = {RESUME_KEY: self._core.declaration(gen, time.time())}
        return self._container.create_receiver(
            conn, self.topic_filter, name=self.link_name,
            options=_Options(props, durable=self.durable, timeout=self.timeout))

    def _on_attached(self, link: Any) -> None:
        with self._lock:
            self._core.attached()
        self._top_up(link)

    def _on_link_lost(self) -> None:
        with self._lock:
            self._core.link_lost(time.time())

    def _top_up(self, link: Any) -> None:
        with self._lock:
            want = self._core.credit_to_grant(link.credit)
        if want:
            link.flow(want)

    def _on_quiesced(self) -> None:
        link = self._link
        if link is not None:
            self._top_up(link)

    def _on_wake(self) -> None:
        with self._lock:
            answers = self._core.take_answers()
        if self._conn is None:
            return  # closing: the router sends them again (or they are suppressed)
        for a in answers:
            _dispose(a.delivery, a.outcome, a.condition, a.description)

    def on_delivery(self, event: Any) -> None:
        d = event.delivery
        link = d.link
        if not self._current(event.connection) or link != self._link:
            return
        if not d.readable or d.partial:
            return  # a disposition update, or more frames to come
        if d.aborted:
            d.settle()
            return
        data = link.recv(d.pending)
        link.advance()
        tag = d.tag
        answered = self._store.outcome_of(tag)
        with self._lock:
            incoming = self._core.on_delivery(tag, d, data, answered)
            if incoming.kind == "show":
                self._notify()
        if incoming.kind == "answer":  # answered before: again, from the store, not shown
            _dispose(d, incoming.outcome, incoming.condition, incoming.description)
        elif incoming.kind == "bind":
            previous = incoming.previous
            if previous is not None and previous.settled:
                previous.settle()
                with self._lock:
                    self._core.previous_settled()


def _dispose(d: Any, outcome: str | None, condition: str | None,
             description: str | None) -> None:
    """Answer delivery `d` with `outcome` and settle it."""
    if outcome == "accepted":
        d.update(Delivery.ACCEPTED)
    elif outcome == "rejected":
        d.local.condition = Condition(condition or "exactmesh:rejected", description)
        d.update(Delivery.REJECTED)
    else:
        d.update(Delivery.RELEASED)
    d.settle()


def _received(shown: Shown) -> ReceivedMessage:
    """The application's view of a message the core handed out (decoded here, on the
    application's thread)."""
    msg = Message()
    msg.decode(shown.payload)
    body = msg.body
    if isinstance(body, memoryview | bytearray):
        body = bytes(body)  # proton decodes binary as a memoryview
    return ReceivedMessage(
        body=body, topic=msg.address, message_id=msg.id, tag=shown.tag,
        redelivered=_redelivered(msg), properties=msg.properties,
        delivery_count=msg.delivery_count or 0, annotations=msg.annotations,
        reply_to=msg.reply_to, correlation_id=msg.correlation_id, _copy=shown.copy)

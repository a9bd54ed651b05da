"""Real routers and real clients for the process-level tests.

`RouterProcess` runs `exactmesh router` as a separate process on a free loopback port and
stops it by its PID. `ClientThread` runs a python-qpid-proton `Container` (proton's own
client) in a thread; `call(fn)` runs `fn` on that thread, since proton objects belong to it.
`Subscriber` and `Publisher` are proton `MessagingHandler`s that record everything they see,
so a test can count ids and order against what each publisher was told.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from proton import Delivery, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector, LinkOption

ROOT = Path(__file__).resolve().parent.parent
EXACTMESH = str(Path(sys.executable).parent / "exactmesh")


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `condition` until it is truthy, or fail after `timeout` seconds saying `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on now, and never one this process handed out before:
    the kernel may give the same free port to two bind(0) calls in a row, and a test that
    asks for several ports (a mesh: AMQP, mesh and MQTT ports) would then start two routers
    on one port."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh loopback port in 100 tries")


class RouterProcess:
    def __init__(self, router_id: str = "A", *extra: str, config: Path | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()  # a restart passes the port it had
        self.url = f"127.0.0.1:{self.port}"
        args = [EXACTMESH, "router", "--id", router_id, "--amqp", self.url, *extra]
        if config is not None:
            args += ["--config", str(config)]
        self.log: list[str] = []
        self.proc = subprocess.Popen(
            args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        wait_for(lambda: any("ready" in line for line in self.log) or self.proc.poll() is not None,
                 15, "the router's ready line")
        if self.proc.poll() is not None:
            raise RuntimeError(f"router exited: {''.join(self.log)}")

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def logged(self, text: str) -> bool:
        """Whether a line of the router's log so far contains `text`."""
        return any(text in line for line in list(self.log))

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode

    def __enter__(self) -> RouterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClientThread:
    """A proton Container on its own thread, with a thread-safe way to run code on it."""

    # Every thread still running: a failed test may skip its stop(), and a proton Container
    # still running when the interpreter exits can abort it (tests/conftest.py stops these).
    live: ClassVar[set[ClientThread]] = set()

    def __init__(self, *handlers: MessagingHandler) -> None:
        self._calls: queue.Queue[tuple[Callable[[], Any], queue.Queue]] = queue.Queue()
        self._injector = EventInjector()
        self.container = Container(_Dispatcher(self, handlers))
        self.container.selectable(self._injector)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        ClientThread.live.add(self)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.container.run()
        except BaseException as exc:  # surfaced to the test by stop()
            self.error = exc

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        reply: queue.Queue = queue.Queue()
        self._calls.put((fn, reply))
        self._injector.trigger(ApplicationEvent("call"))
        ok, value = reply.get(timeout=timeout)
        if not ok:
            raise value
        return value

    def _on_call(self) -> None:
        while True:
            try:
                fn, reply = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                reply.put((True, fn()))
            except BaseException as exc:
                reply.put((False, exc))

    def stop(self) -> None:
        def close_all() -> None:
            self.container.stop()

        ClientThread.live.discard(self)

        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                self.call(close_all, timeout=5)
            self._injector.close()
            self.thread.join(10)
        if self.error is not None:
            raise self.error


class _Dispatcher(MessagingHandler):
    """Routes the injector's `call` events; container-level events go to every handler."""

    def __init__(self, owner: ClientThread, handlers: tuple[MessagingHandler, ...]):
        super().__init__()
        self.owner = owner
        self.clients = handlers  # not `handlers`: MessagingHandler dispatches to that list

    def on_start(self, event: Any) -> None:
        for h in self.clients:
            h.on_start(event)

    def on_call(self, event: Any) -> None:
        self.owner._on_call()


@dataclass
class Received:
    body: Any
    tag: bytes
    delivery_count: int
    first_acquirer: bool
    address: str | None
    annotations: dict | None
    properties: dict | None


@dataclass
class Outcome:
    state: str  # accepted / rejected / released / modified / settled
    condition: str | None = None
    description: str | None = None
    info: dict | None = None
    at: float = 0.0


class Subscriber(MessagingHandler):
    """Receives on `topic_filter`. `policy(message, delivery)` returns 'accept', 'reject',
    'release', 'modify', 'undeliverable' or 'hold' (keep it unanswered: `answer_held`)."""

    def __init__(
        self,
        url: str,
        topic_filter: str,
        name: str = "sub",
        credit: int = 100,
        policy: Callable[[Message, Delivery], str] | None = None,
        container_id: str | None = None,
        options: Any = None,
    ) -> None:
        super().__init__(prefetch=credit, auto_accept=False, auto_settle=True)
        self.url, self.filter, self.name = url, topic_filter, name
        self.policy = policy or (lambda m, d: "accept")
        self.container_id = container_id
        self.options = options
        self.received: list[Received] = []
        self.held: list[Delivery] = []
        self.opened = threading.Event()
        self.closed_condition: Any = None
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        if self.container_id:
            event.container.container_id = self.container_id
        conn = event.container.connect(self.url, reconnect=False, handler=self)
        self.receiver = event.container.create_receiver(
            conn, self.filter, name=self.name, options=self.options
        )

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.opened.set()

    def on_link_error(self, event: Any) -> None:
        self.closed_condition = event.link.remote_condition
        self.opened.set()

    def on_message(self, event: Any) -> None:
        m, d = event.message, event.delivery
        self.received.append(
            Received(m.body, d.tag.encode() if isinstance(d.tag, str) else bytes(d.tag),
                     m.delivery_count, m.first_acquirer, m.address, m.annotations, m.properties)
        )
        action = self.policy(m, d)
        self._answer(d, action)

    def _answer(self, d: Delivery, action: str) -> None:
        if action == "accept":
            self.accept(d)
        elif action == "reject":
            self.reject(d)
        elif action == "release":
            self.release(d, delivered=False)
        elif action == "modify":
            self.release(d, delivered=True)
        elif action == "undeliverable":
            d.local.failed = True
            d.local.undeliverable = True
            d.update(Delivery.MODIFIED)
            d.settle()
        elif action == "hold":
            self.held.append(d)
        else:
            raise ValueError(action)

    def answer_held(self, action: str = "accept") -> int:
        """Run on the client thread: answer every held delivery."""
        n = len(self.held)
        for d in self.held:
            self._answer(d, action)
        self.held.clear()
        return n

    def bodies(self) -> list[Any]:
        return [r.body for r in self.received]


class Publisher(MessagingHandler):
    """Sends `messages` on one link to `address`, at most `window` unsettled at a time, and
    records each outcome by message index."""

    def __init__(
        self,
        url: str,
        address: str,
        messages: list[Message],
        window: int = 50,
        name: str | None = None,
        properties: dict | None = None,
        presettled: bool = False,
    ) -> None:
        super().__init__(auto_settle=True)
        self.url, self.address, self.messages, self.window = url, address, messages, window
        self.name = name
        self.properties = properties
        self.presettled = presettled
        self.outcomes: dict[int, Outcome] = {}
        self.sent_at: dict[int, float] = {}
        self._tags: dict[Any, int] = {}
        self.next = 0
        self.link_error: Any = None
        self.sender: Any = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False, handler=self)
        opts = []
        if self.properties:
            opts.append(_LinkProperties(self.properties))
        if self.presettled:
            from proton.reactor import AtMostOnce

            opts.append(AtMostOnce())
        self.sender = event.container.create_sender(
            conn, self.address, name=self.name, options=opts or None
        )

    def on_sendable(self, event: Any) -> None:
        self.pump()

    def pump(self) -> None:
        sender = self.sender
        while (
            self.next < len(self.messages)
            and sender.credit > 0
            and self.next - len(self.outcomes) < self.window
        ):
            i = self.next
            self.next += 1
            self.sent_at[i] = time.monotonic()
            d = sender.send(self.messages[i])
            self._tags[d] = i
            if self.presettled:
                self.outcomes[i] = Outcome("presettled", at=time.monotonic())

    def _record(self, event: Any, state: str) -> None:
        i = self._tags.pop(event.delivery, None)
        if i is None:
            return
        cond = event.delivery.remote.condition
        self.outcomes[i] = Outcome(
            state,
            cond.name if cond else None,
            cond.description if cond else None,
            dict(cond.info) if cond and cond.info else None,
            time.monotonic(),
        )
        self.pump()

    def on_accepted(self, event: Any) -> None:
        self._record(event, "accepted")

    def on_rejected(self, event: Any) -> None:
        self._record(event, "rejected")

    def on_released(self, event: Any) -> None:
        self._record(event, "released" if not event.delivery.remote.failed else "modified")

    def on_link_error(self, event: Any) -> None:
        self.link_error = event.link.remote_condition

    def states(self) -> list[str | None]:
        return [self.outcomes[i].state if i in self.outcomes else None
                for i in range(len(self.messages))]


class _LinkProperties(LinkOption):
    def __init__(self, properties: dict) -> None:
        self.properties = {symbol(k): v for k, v in properties.items()}

    def apply(self, link: Any) -> None:
        link.properties = self.properties


def numbered(n: int, prefix: str = "m", **kw: Any) -> list[Message]:
    """Messages whose bodies say who sent them and in what order."""
    return [Message(body=f"{prefix}{i}", **kw) for i in range(n)]


@dataclass
class Tally:
    """Counts a subscriber's received bodies against what it was owed."""

    owed: list[Any]
    got: list[Any] = field(default_factory=list)

    def check_exactly_once_in_order(self) -> None:
        missing = [b for b in self.owed if b not in set(self.got)]
        dupes = [b for b in set(self.got) if self.got.count(b) > 1]
        assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
        assert not dupes, f"{len(dupes)} duplicated, e.g. {dupes[:5]}"
        assert self.got == self.owed, "received out of publish order"

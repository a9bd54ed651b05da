"""Meshes of real routers for the process-level mesh tests.

`start_mesh(topology, n)` starts `n` routers (ids A, B, C, ...) as separate processes, wired
as a line, ring, star or full mesh, every one on 127.0.0.1 with its own AMQP and mesh ports.
A link named in `proxied` runs through a `tests.proxy.Proxy`, so a test can cut and restore
that one TCP connection. `MeshRouter.kill()` is a SIGKILL by PID; `restart()` brings the
router back on the same AMQP and mesh ports with the same options (a new incarnation).

Nothing here sleeps to synchronise: a test waits for what a router logs. Routers run at log
level debug, where gossip logs `router X: knows subscriber CONTAINER/LINK@R (filter F)`;
`Mesh.wait_knows` waits for that line (with a deadline) before a test publishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from typing import Any

from proton import Message

from tests.harness import (
    EXACTMESH,
    ROOT,
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    free_port,
    wait_for,
)
from tests.proxy import Proxy

SECRET = "s3cret"
HEARTBEAT = "1"
TOPOLOGIES = ("line", "ring", "star", "full")
READY_TIMEOUT = 15.0


def router_ids(n: int) -> list[str]:
    if not 1 <= n <= 26:
        raise ValueError("between 1 and 26 routers")
    return [chr(ord("A") + i) for i in range(n)]


def edges(topology: str, n: int) -> list[tuple[int, int]]:
    """The links of a topology as (connecting router, listening router) index pairs. Every
    router connects only to routers started before it, so nobody waits on a connect backoff
    at start-up."""
    if topology == "line":
        return [(i, i - 1) for i in range(1, n)]
    if topology == "ring":
        if n < 3:
            raise ValueError("a ring needs at least 3 routers")
        return [(i, i - 1) for i in range(1, n)] + [(n - 1, 0)]
    if topology == "star":
        return [(i, 0) for i in range(1, n)]
    if topology == "full":
        return [(i, j) for i in range(1, n) for j in range(i)]
    raise ValueError(f"topology {topology!r} is not one of {TOPOLOGIES}")


def link_key(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


class MeshRouter(RouterProcess):
    """A router of a mesh: `RouterProcess` with fixed ports, so that it can be restarted on
    the same ones. `log` is the current process's stderr; earlier runs are in `old_logs`."""

    def __init__(
        self,
        router_id: str,
        mesh_port: int,
        connect: Iterable[int],
        *extra: str,
        amqp_port: int | None = None,
        log_level: str = "debug",
        wait: bool = True,
    ) -> None:
        # RouterProcess.__init__ picks its own AMQP port and spawns at once; this class keeps
        # the ports, so it spawns itself (same fields, so stop() and rss_kib() work as is).
        self.id = router_id
        self.mesh_port = mesh_port
        self.connect_ports = list(connect)
        self.extra = extra
        self.log_level = log_level
        self.port = amqp_port or free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.old_logs: list[list[str]] = []
        self.log: list[str] = []
        self.starts = 0
        self._spawn()
        if wait:
            self.wait_ready()

    def args(self) -> list[str]:
        args = [EXACTMESH, "router", "--id", self.id, "--amqp", self.url,
                "--listen", f"127.0.0.1:{self.mesh_port}",
                "--cluster-secret", SECRET, "--heartbeat", HEARTBEAT,
                "--log-level", self.log_level]
        for port in self.connect_ports:
            args += ["--connect", f"127.0.0.1:{port}"]
        return args + list(self.extra)

    def _spawn(self) -> None:
        if self.starts:
            self.old_logs.append(self.log)
        self.starts += 1
        self.log = []
        self.proc = subprocess.Popen(
            self.args(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        # Bound to this run's list, so a late line of a killed run never lands in the new log.
        log, proc = self.log, self.proc
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        wait_for(lambda: self.logged("ready") or self.proc.poll() is not None, timeout,
                 f"router {self.id}'s ready line")
        if self.proc.poll() is not None:
            self._reader.join(5)
            raise RuntimeError(f"router {self.id} exited: {''.join(self.log)}")

    # ---------------------------------------------------------------- the log

    def logged(self, text: str, since: int = 0) -> bool:
        log = self.log
        return any(text in log[i] for i in range(since, len(log)))

    def wait_logged(self, text: str, timeout: float = 10.0, since: int = 0) -> None:
        wait_for(lambda: self.logged(text, since), timeout, f"router {self.id} to log {text!r}")

    def link_up_line(self, peer: str) -> str:
        return f"router {self.id}: link to {peer} up"

    def link_down_line(self, peer: str) -> str:
        return f"router {self.id}: link to {peer} down"

    # ---------------------------------------------------------------- life

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL by PID: no goodbye to peers or clients, as in a crash."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def restart(self, wait: bool = True) -> None:
        """Start again on the same AMQP and mesh ports with the same options (the previous
        run must be over: `kill()` or `stop()` first)."""
        if self.proc.poll() is None:
            raise RuntimeError(f"router {self.id} is still running")
        self._spawn()
        if wait:
            self.wait_ready()

    def tail(self, n: int = 30) -> str:
        return "".join(self.log[-n:])


class Mesh:
    """Routers by id, the proxies on proxied links, and ways to wait on the mesh."""

    def __init__(self, routers: dict[str, MeshRouter], proxies: dict[frozenset[str], Proxy],
                 links: list[tuple[str, str]]) -> None:
        self.routers = routers
        self.proxies = proxies
        self.links = links  # (connecting router, listening router)

    def __getitem__(self, router_id: str) -> MeshRouter:
        return self.routers[router_id]

    def __iter__(self):
        return iter(self.routers.values())

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def proxy(self, a: str, b: str) -> Proxy:
        """The proxy on the link between routers `a` and `b` (started with it in `proxied`)."""
        return self.proxies[link_key(a, b)]

    def neighbours(self, router_id: str) -> list[str]:
        return sorted({b for a, b in self.links if a == router_id}
                      | {a for a, b in self.links if b == router_id})

    def wait_links_up(self, timeout: float = 15.0) -> None:
        """Every router logged every one of its links up (in its current run)."""
        for r in self.routers.values():
            if not r.alive:
                continue
            for peer in self.neighbours(r.id):
                if self.routers[peer].alive:
                    r.wait_logged(r.link_up_line(peer), timeout)

    def wait_knows(self, router_id: str, sub: Subscriber, at: str, timeout: float = 10.0) -> None:
        """Wait until gossip told `router_id` about subscriber `sub` attached at router `at`."""
        line = knows_line(router_id, sub, at)
        self.routers[router_id].wait_logged(line, timeout)

    def wait_all_know(self, subs: dict[str, list[Subscriber]], routers: Iterable[str] | None = None,
                      timeout: float = 15.0) -> None:
        """Wait until every router in `routers` (default: all running ones) knows every
        subscriber of `subs` ({router where attached: [subscribers]}) attached elsewhere."""
        names = list(routers) if routers is not None else [
            r.id for r in self.routers.values() if r.alive]
        deadline = time.monotonic() + timeout
        for x in names:
            for at, group in subs.items():
                if at == x:
                    continue
                for sub in group:
                    left = max(0.1, deadline - time.monotonic())
                    self.wait_knows(x, sub, at, left)

    def stop(self) -> None:
        """SIGTERM every router by PID (all at once: each takes a moment to say goodbye),
        SIGKILL any that does not stop, then stop the proxies."""

        def stop_one(r: MeshRouter) -> None:
            try:
                r.stop()
            except Exception:
                r.kill()

        threads = [threading.Thread(target=stop_one, args=(r,), daemon=True)
                   for r in self.routers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for p in self.proxies.values():
            p.stop()

    def logs(self, n: int = 40) -> str:
        return "\n".join(f"--- router {r.id} ---\n{r.tail(n)}" for r in self.routers.values())


def start_mesh(
    topology: str,
    n: int,
    *,
    proxied: Iterable[tuple[str, str]] = (),
    extra: dict[str, list[str]] | None = None,
    common: Iterable[str] = (),
) -> Mesh:
    """Start `n` routers (A, B, ...) in `topology`, each with `common` options and its own
    `extra[id]`; links named in `proxied` (pairs of ids) go through a Proxy. Returns once every
    router said it is ready (links come up on their own; see `Mesh.wait_links_up`)."""
    ids = router_ids(n)
    mesh_ports = [free_port() for _ in ids]
    pairs = edges(topology, n)
    wanted = {link_key(a, b) for a, b in proxied}
    known = {link_key(ids[i], ids[j]) for i, j in pairs}
    if wanted - known:
        raise ValueError(f"no such link(s) in a {topology} of {n}: {wanted - known}")
    proxies: dict[frozenset[str], Proxy] = {}
    connect: dict[int, list[int]] = {i: [] for i in range(n)}
    for i, j in pairs:
        key = link_key(ids[i], ids[j])
        if key in wanted:
            proxies[key] = Proxy("127.0.0.1", mesh_ports[j])
            connect[i].append(proxies[key].port)
        else:
            connect[i].append(mesh_ports[j])
    extra = extra or {}
    routers: dict[str, MeshRouter] = {}
    try:
        for i, rid in enumerate(ids):
            routers[rid] = MeshRouter(rid, mesh_ports[i], connect[i], *common,
                                      *extra.get(rid, []), wait=False)
        for r in routers.values():
            r.wait_ready()
    except BaseException:
        for r in routers.values():
            r.kill()
        for p in proxies.values():
            p.stop()
        raise
    return Mesh(routers, proxies, [(ids[i], ids[j]) for i, j in pairs])


# -------------------------------------------------------------------- clients


def sub_key(sub: Subscriber) -> str:
    """`container/link` of a subscriber (it must be given an explicit container_id)."""
    if not sub.container_id:
        raise ValueError(f"subscriber {sub.name} needs an explicit container_id")
    return f"{sub.container_id}/{sub.name}"


def sub_label(sub: Subscriber, router_id: str) -> str:
    """How routers name the subscriber: `container/link@router`."""
    return f"{sub_key(sub)}@{router_id}"


def knows_line(router_id: str, sub: Subscriber, at: str) -> str:
    return f"router {router_id}: knows subscriber {sub_label(sub, at)} (filter {sub.filter})"


def start_clients(*handlers: Any, timeout: float = 10.0) -> ClientThread:
    """Run `handlers` on one client thread; wait until every Subscriber among them attached."""
    client = ClientThread(*handlers)
    for h in handlers:
        if isinstance(h, Subscriber):
            assert h.opened.wait(timeout), f"subscriber {h.name} did not attach"
            assert h.closed_condition is None, (
                f"subscriber {h.name} refused: {h.closed_condition}")
    return client


def holding_subscriber(url: str, container_id: str,
                       topic_filter: str = "orders/#") -> tuple[Subscriber, ClientThread]:
    """A subscriber that leaves every copy unanswered until `answer_held`, attached on a
    client thread of its own: what it gets stays undecided (a stuck delivery)."""
    holder = Subscriber(url, topic_filter, policy=lambda m, d: "hold", container_id=container_id)
    return holder, start_clients(holder)


def publish_one(url: str, topic: str = "orders/eu") -> tuple[Publisher, ClientThread]:
    """One message to `topic`, from a publisher on a client thread of its own."""
    pub = Publisher(url, topic, [Message(body="m1")])
    return pub, start_clients(pub)


def wait_outcomes(pub: Publisher, timeout: float = 30.0) -> None:
    wait_for(lambda: len(pub.outcomes) == len(pub.messages), timeout,
             f"outcomes for all {len(pub.messages)} messages to {pub.address}")


def stop_clients(*clients: ClientThread) -> None:
    errors = []
    for c in clients:
        try:
            c.stop()
        except BaseException as exc:  # stop every one, then report
            errors.append(exc)
    if errors:
        raise errors[0]

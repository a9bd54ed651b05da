"""`exactmesh router --workers N`: N router processes on one host, for more than one core.

A router is one Python process, so one core. With `--workers N` the command becomes a
supervisor of N routers (workers), each a whole router of the mesh:

- they share the client ports (`--amqp`, `--mqtt`, their TLS twins) and the peer port
  (`--listen`): each opens its own socket with SO_REUSEPORT (router/listeners.py) and the
  kernel spreads new connections over them;
- they form a mesh of their own over loopback: worker k listens on a loopback socket of
  its own, which the supervisor opens and holds (so a worker started again has the same
  port), and connects to every worker before it, so the mesh's guarantees hold between
  them as between any routers. Each also connects to the `--connect` peers;
- worker k is router `ID.k`; its status endpoint is at the `--http` (`--https`) port plus
  k; its relay store, if any, is the folder `worker-k` in `--relay-store`.

The supervisor forwards SIGTERM, SIGINT and SIGHUP to the workers, and starts again a worker
that exits on its own (a crash, SIGKILL): its clients reconnect, to any worker, and resume as
after any router's failure. A worker that exits with status 2 (a bad option, a port in use)
stops them all with that status. docs/operations.md has what this gives and what it does not.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from . import listeners, logs
from .config import HostPort, RouterConfig

log = logging.getLogger("exactmesh.workers")

EXIT_USAGE = 2
RESTART_DELAY = 0.5  # seconds before a worker that exited is started again; doubles
RESTART_DELAY_MAX = 10.0  # ... when it keeps exiting within STABLE seconds, up to this
STABLE = 30.0
STOP_GRACE = 10.0  # seconds the workers get to shut down before SIGKILL
POLL = 0.2  # seconds between looks at the workers (and at a stop signal)

RunRouter = Callable[[RouterConfig], int]


def worker_id(config: RouterConfig, k: int) -> str:
    return f"{config.id}.{k}"


def worker_configs(config: RouterConfig, socks: list[socket.socket]) -> list[RouterConfig]:
    """Each worker's configuration: the shared one, with its own id, loopback listener,
    status port and relay store, and links to the workers before it."""
    ports = [s.getsockname()[1] for s in socks]
    secret = config.cluster_secret
    if not (secret or config.cluster_secret_file):
        # Workers alone on this host (no --listen, no --connect): their links need a
        # secret like any peer link, but only they share it.
        secret = secrets.token_hex(32)
    out = []
    for k, port in enumerate(ports):
        siblings = tuple(HostPort("127.0.0.1", p) for p in ports[:k])
        out.append(dataclasses.replace(
            config, id=worker_id(config, k), workers=1, cluster_secret=secret,
            worker_listen=HostPort("127.0.0.1", port), worker_listen_fd=socks[k].fileno(),
            connect=config.connect + siblings,
            http=_plus(config.http, k), https=_plus(config.https, k),
            relay_store=os.path.join(config.relay_store, f"worker-{k}")
            if config.relay_store else "",
        ))
    return out


def _plus(where: HostPort | None, k: int) -> HostPort | None:
    if where is None or where.port == 0:
        return where
    return HostPort(where.host, where.port + k)


def loopback_listeners(n: int) -> list[socket.socket]:
    """A listening loopback socket for each worker's links with the others. The supervisor
    keeps them open for as long as it runs and each worker inherits its own, so a worker
    started again listens on the same port and no other process can take it meanwhile
    (connections that come while it is down wait in the backlog)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(socket.SOMAXCONN)
        socks.append(s)
    return socks


class Supervisor:
    """Starts the workers, starts again those that exit, stops them all on a signal."""

    def __init__(self, configs: list[RouterConfig], run: RunRouter) -> None:
        self.configs = configs
        self.run_router = run
        self.procs: dict[int, Any] = {}
        self.started: dict[int, float] = {}
        self.delay = dict.fromkeys(range(len(configs)), RESTART_DELAY)
        self.due: dict[int, float] = {}  # workers waiting to be started again, and when
        self.stop_signal: int | None = None
        # fork: a worker starts from this process's state (the configuration, the compiled
        # modules' guard) without pickling it; this process runs no threads and no trio.
        self.context = multiprocessing.get_context("fork")

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal)
                    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            for k in range(len(self.configs)):
                self._start(k)
            return self._watch()
        finally:
            self._stop_all()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP:  # reload the password, ACL and TLS files: each worker
            for proc in self.procs.values():
                if proc.pid is not None and proc.exitcode is None:
                    os.kill(proc.pid, signal.SIGHUP)
            return
        self.stop_signal = signum

    def _start(self, k: int) -> None:
        proc = self.context.Process(target=_worker_main, args=(self.configs[k], self.run_router),
                                    name=self.configs[k].id)
        proc.start()
        self.procs[k] = proc
        self.started[k] = time.monotonic()
        log.info("worker %s started, pid %d", self.configs[k].id, proc.pid)

    def _watch(self) -> int:
        while self.stop_signal is None:
            multiprocessing.connection.wait(
                [p.sentinel for p in self.procs.values() if p.exitcode is None], POLL)
            now = time.monotonic()
            for k, proc in list(self.procs.items()):
                if k in self.due or proc.exitcode is None:
                    continue
                if proc.exitcode == EXIT_USAGE:
                    log.error("worker %s could not start (status 2, its error above); "
                              "stopping every worker", self.configs[k].id)
                    return EXIT_USAGE
                self._schedule(k, proc, now)
            for k, when in list(self.due.items()):
                if now >= when:
                    del self.due[k]
                    self._start(k)
        log.info("%s received: stopping %d workers", signal.Signals(self.stop_signal).name,
                 len(self.procs))
        return 0

    def _schedule(self, k: int, proc: Any, now: float) -> None:
        """A worker exited on its own: start it again after a delay that grows while it
        keeps exiting soon after each start."""
        if now - self.started[k] >= STABLE:
            self.delay[k] = RESTART_DELAY
        how = f"status {proc.exitcode}" if proc.exitcode >= 0 \
            else signal.Signals(-proc.exitcode).name
        log.warning("worker %s (pid %d) exited (%s); starting it again in %.1f s",
                    self.configs[k].id, proc.pid, how, self.delay[k])
        self.due[k] = now + self.delay[k]
        self.delay[k] = min(self.delay[k] * 2, RESTART_DELAY_MAX)

    def _stop_all(self) -> None:
        alive = [p for p in self.procs.values() if p.exitcode is None]
        for proc in alive:
            os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in alive:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                log.warning("worker %s did not stop within %g s: killed", proc.name,
                            STOP_GRACE)
                proc.kill()
                proc.join(5)


def _worker_main(config: RouterConfig, run: RunRouter) -> None:
    """A worker process: the router's own signal handling, ports shared, then the router."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    listeners.share_ports()
    sys.exit(run(config))


def run_workers(config: RouterConfig, run: RunRouter) -> int:
    """`exactmesh router --workers N` (N > 1): supervise N routers until a stop signal."""
    logs.configure(config.log_level, config.log_format, config.id)
    if config.relay_store and os.path.isdir(config.relay_store):  # else: the store's error
        for k in range(config.workers):
            os.makedirs(os.path.join(config.relay_store, f"worker-{k}"), exist_ok=True)
    socks = loopback_listeners(config.workers)
    configs = worker_configs(config, socks)
    log.info("exactmesh router %s: %d workers (%s), sharing their ports", config.id,
             config.workers, ", ".join(c.id for c in configs))
    try:
        return Supervisor(configs, run).run()
    finally:
        for s in socks:
            s.close()

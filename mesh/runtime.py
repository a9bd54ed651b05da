"""The mesh at run time: peer links (trio, `mesh.peers`) wired to the sans-IO `MeshNode`.

Every callback from the peer links runs to completion in the router's single trio thread:
hand the event to the mesh node, apply whatever the engine then wants done (deliveries to
local clients through the edges), and send the frames the mesh node produced.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

import trio

from router.config import ListenError, RouterConfig

from .frames import FrameError
from .meshnode import MeshNode
from .peers import PeerLink, PeerManager, PeerSettings

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.mesh")

FRAME_OVERHEAD = 64 * 1024  # room in a frame beyond the message itself


class MeshRuntime:
    def __init__(self, node: RuntimePort, config: RouterConfig) -> None:
        self.node = node
        self.config = config
        # A fresh incarnation at every start, and a larger one than the last: "newer wins"
        # everywhere, so a restart must never come back with a smaller number.
        self.inc = time.time_ns() // 1000
        self.mesh = MeshNode(
            config.id,
            self.inc,
            node.engine,
            unreachable_timeout=config.unreachable_timeout,
            gossip_interval=config.gossip_interval,
        )
        where = config.https or config.http  # advertised for `exactmesh stat --mesh`
        if where is not None:
            scheme = "https" if config.https is not None else "http"
            self.mesh.topology.http = f"{scheme}://{where}"
        tls = config.peer_tls()  # (server side, client side), or None: plain TCP
        settings = PeerSettings(
            router_id=config.id,
            inc=self.inc,
            cluster=config.cluster,
            secret=config.secret(),
            heartbeat=config.heartbeat,
            max_frame=config.max_message_size + FRAME_OVERHEAD,
            tls_server=tls[0] if tls else None,
            tls_client=tls[1] if tls else None,
        )
        self.peers = PeerManager(settings, self._on_up, self._on_frame, self._on_down)
        # Bytes each up link carried, for GET /stat (router/runtime/stat.py) and the console.
        self.mesh.link_bytes = lambda: {peer: (link.bytes_sent, link.bytes_received)
                                        for peer, link in self.peers.links().items()}
        self._wake = trio.Event()
        node.attach_mesh(self.mesh, self.output)  # the runtime's port (router/ports.py)
        join = config.join_timeout
        if join is None:
            join = config.unreachable_timeout
        # A router that connects to peers knows it belongs to a mesh: it waits, and past the
        # timeout fails what waited. One that only listens cannot tell its first start (nobody
        # to hear yet) from a restart cut off: it waits as long for a peer to link, then serves
        # the subscribers it knows (test bed, ring seed 31: a listen-only router restarted and
        # accepted an MQTT device's messages before its peers had linked back). A relay
        # (uplinks) is away as a matter of course.
        # A worker of `--workers` (router/workers.py) is in a mesh with its host's other
        # workers: it waits to hear them as any router waits to hear its peers.
        listens = config.listen or config.worker_listen
        if join > 0 and (config.connect or (listens and not config.uplinks)):
            self.mesh.start_joining(node.now(), join, alone_after=not config.connect)

    # ---------------------------------------------------------------- callbacks

    def _on_up(self, link: PeerLink) -> None:
        log.info("router %s: link to %s up", self.config.id, link.peer)
        self.mesh.link_up(link.peer, link.peer_inc, self.config.cost_to(link.peer),
                          self.node.now())
        self._settle()

    def _on_frame(self, link: PeerLink, frame: dict) -> None:
        try:
            self.mesh.on_frame(link.peer, frame, self.node.now())
        except (ValueError, KeyError, TypeError) as err:
            # A frame that passed the framing checks but makes no sense: only this link suffers.
            link.close(f"protocol error in a {frame.get('t')} frame: {err}")
        self._settle()

    def _on_down(self, link: PeerLink, reason: str) -> None:
        log.info("router %s: link to %s down: %s", self.config.id, link.peer, reason)
        self.mesh.link_down(link.peer, self.node.now())
        self._settle()

    def _settle(self) -> None:
        self.node.flush()  # engine actions: deliveries to local clients, more mesh actions
        self.output()
        self._wake.set()  # the deadline may have moved

    def output(self) -> None:
        links = self.peers.links()
        for peer, frame in self.mesh.take_frames():
            link = links.get(peer)
            if link is None:
                continue  # it just went down: the transfer layer resends what mattered
            try:
                link.send(frame)
            except FrameError as err:
                # A frame we cannot send (e.g. larger than the frame limit): a bug or a
                # misconfiguration, never a reason to stop the router.
                log.error("router %s: cannot send a %s frame to %s: %s", self.config.id,
                          frame.get("t"), peer, err)

    # ---------------------------------------------------------------- running

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        async with trio.open_nursery() as nursery:
            if cfg.listen is not None:
                try:
                    await nursery.start(self.peers.listen, cfg.listen.host, cfg.listen.port)
                except OSError as err:
                    raise ListenError("listen", cfg.listen, "peer routers", err) from err
            if cfg.worker_listen_fd >= 0:  # the socket the supervisor holds for us
                await nursery.start(self.peers.listen_on, cfg.worker_listen_fd)
            elif cfg.worker_listen is not None:
                try:
                    await nursery.start(self.peers.listen, cfg.worker_listen.host,
                                        cfg.worker_listen.port)
                except OSError as err:
                    raise ListenError("workers", cfg.worker_listen,
                                      "the other workers of this host", err) from err
            for target in cfg.connect:
                nursery.start_soon(self.peers.connect, target.host, target.port)
            if cfg.uplinks:
                nursery.start_soon(self.peers.connect_one,
                                   [(t.host, t.port) for t in cfg.uplinks])
            nursery.start_soon(self._timer)
            task_status.started()

    async def _timer(self) -> None:
        while True:
            deadline = self.mesh.next_deadline()
            with trio.move_on_at(deadline if deadline is not None else math.inf):
                await self._wake.wait()
            self._wake = trio.Event()
            now = self.node.now()
            if deadline is not None and now >= deadline:
                self.mesh.tick(now)
                self.node.flush()
                self.output()

    def close(self, reason: str) -> None:
        self.peers.close_all(reason)

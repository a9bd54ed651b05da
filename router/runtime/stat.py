"""`GET /stat`: one router's view for `exactmesh stat` (router/stat_cli.py), as JSON.

General counters, client connections and links, the mesh as this router routes it (next hop
and cost per router, and the status endpoint each advertises), subscriptions per router, and
the deliveries in flight with the stuck ones and who they wait for. Read in one go between
two awaits, so it is a consistent snapshot.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.ports import RuntimePort as Node

MAX_LISTED = 1000  # links, subscriptions per router and stuck deliveries listed at most


def stat(node: Node) -> dict[str, Any]:
    engine = node.engine
    now = node.now()
    stuck = engine.stuck(node.config.stuck_after, now)
    return {
        "router": node.config.id,
        "pid": os.getpid(),
        "counters": dataclasses.asdict(engine.stats),
        "gauges": engine.gauges(),
        "refusals": dict(node.policy.refusals),
        "connections": _connections(node),
        "links": _links(node)[:MAX_LISTED],
        "routers": _routers(node),
        "graph": _graph(node),
        "subscriptions": {r: [{"key": k, "filter": f} for k, f in subs[:MAX_LISTED]]
                          for r, subs in sorted(engine.subscriptions().items())},
        "stuck_after": node.config.stuck_after,
        "stuck": [{"id": r.id, "address": r.address, "waited_s": round(now - r.born, 3),
                   "origin": r.origin or node.config.id,
                   "pending": r.status()["pending"]} for r in stuck[:MAX_LISTED]],
    }


def _connections(node: Node) -> list[dict[str, Any]]:
    out = []
    for conn in node.connections:
        kind = type(conn).__name__.lower()
        out.append({"protocol": "mqtt" if "mqtt" in kind else "amqp",
                    "peer": getattr(conn, "peer", None), "user": getattr(conn, "user", None)})
    return sorted(out, key=lambda c: (c["protocol"], str(c["peer"])))


def _links(node: Node) -> list[dict[str, Any]]:
    engine = node.engine
    window = engine.config.publisher_window
    links: list[dict[str, Any]] = []
    for pub in engine.publishers.values():
        links.append({"role": "publisher", "label": pub.label, "address": pub.address,
                      "mode": pub.mode, "once": pub.once, "in_router": pub.live,
                      "at_window": pub.live >= window})
    for sub in engine.subscribers.values():
        links.append({"role": "subscriber", "label": sub.label, "filter": sub.filter,
                      "credit": sub.credit, "queued": len(sub.queue),
                      "unsettled": len(sub.inflight), "warm": bool(sub.warm_timeout)})
    return links


def _graph(node: Node) -> dict[str, Any]:
    """The whole mesh as this router knows it from the link-state announcements: every
    router, and every link with its cost and whether both ends report it up."""
    mesh: Any = node.mesh
    if mesh is None:
        return {"routers": [node.config.id], "links": []}
    topology = mesh.topology
    reachable = topology.reachable()
    routers = [{"id": r, "reachable": r == node.config.id or r in reachable}
               for r in sorted(topology.known() | {node.config.id})]
    return {"routers": routers,
            "links": [{"a": a, "b": b, "cost": cost, "up": up}
                      for a, b, cost, up in topology.links()]}


def _routers(node: Node) -> dict[str, Any]:
    mesh: Any = node.mesh
    if mesh is None:
        return {}
    topology = mesh.topology
    out = {node.config.id: {"next_hop": None, "cost": 0, "http": topology.http or None}}
    for router, (hop, cost) in sorted(topology.routes().items()):
        out[router] = {"next_hop": hop, "cost": cost, "http": topology.advertised(router, "http")}
        if router in mesh.peers_seen:  # a peer of ours: is the direct link up?
            out[router]["link_up"] = router in mesh.neighbors
    for peer, (sent, received) in mesh.link_bytes().items():
        if peer in out:
            out[peer]["bytes_sent"], out[peer]["bytes_received"] = sent, received
    for router in sorted((mesh.peers_seen | topology.known()) - out.keys()):
        out[router] = {"next_hop": None, "cost": None, "reachable": False,
                       "http": topology.advertised(router, "http")}
        if router in mesh.peers_seen:
            out[router]["link_up"] = False
    return out

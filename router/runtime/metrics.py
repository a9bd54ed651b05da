"""`GET /metrics`: the router's state in Prometheus's text format, with prometheus-client.

Nothing is counted per message for this: a scrape reads what the engine, the mesh and the
node keep anyway (the engine's counters, its records, the mesh's links and channels), so a
router that nobody scrapes pays nothing. Every name, its type and what it means are in
docs/operations.md; the names follow Prometheus's conventions (a `_total` suffix for
counters, base units: seconds, bytes) and the families of skupper-router's `qdr_*` metrics.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from router.ports import RuntimePort as Node  # what the edges see of it, too

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# EngineStats field -> (metric name without `exactmesh_` and `_total`, help text)
ENGINE_COUNTERS = {
    "received": ("deliveries_received", "Messages that arrived: from publishers here, and "
                 "from other routers for subscribers here."),
    "delivered": ("deliveries_delivered", "Copies sent to subscribers here, redeliveries "
                  "included."),
    "redelivered": ("deliveries_redelivered", "Copies sent again to a subscriber here (it "
                    "released or modified one, or its link broke)."),
    "accepted": ("deliveries_accepted", "Publisher deliveries here decided accepted (every "
                 "owed subscriber accepted; mode some: one did)."),
    "rejected": ("deliveries_rejected", "Publisher deliveries here decided failed "
                 "(exactmesh:delivery-failed and the other refusals)."),
    "expired": ("deliveries_expired", "Deliveries whose ttl ran out before every subscriber "
                "accepted."),
    "deleted": ("deliveries_deleted", "Deliveries their publisher settled before an outcome "
                "(no longer tracked)."),
    "resent": ("deliveries_resent", "Copies resent to a subscriber's new router (failover, "
               "moves)."),
    "adopted": ("deliveries_adopted", "Publisher resends the mesh already had, answered "
                "without delivering again."),
    "stored": ("relay_stored", "Copies the relay store took for warm subscribers away."),
    "delayed_1s": ("deliveries_delayed_1s", "Publisher deliveries decided more than 1 s "
                   "after they arrived."),
    "delayed_10s": ("deliveries_delayed_10s", "Publisher deliveries decided more than 10 s "
                    "after they arrived."),
    "copies_accepted": ("copies_accepted", "Copies subscribers here accepted."),
    "copies_rejected": ("copies_rejected", "Copies subscribers here rejected."),
    "copies_released": ("copies_released", "Copies subscribers here released (sent again)."),
    "copies_modified": ("copies_modified", "Copies subscribers here modified (sent again, or "
                        "undeliverable here)."),
    "presettled_dropped": ("presettled_dropped", "Pre-settled (at most once) copies not sent "
                           "to a matched subscriber that was away."),
}

# Engine.gauges() key -> (metric name without `exactmesh_`, help text)
ENGINE_GAUGES = {
    "records": ("records_in_flight", "Delivery records the router holds (not yet "
                "forgotten)."),
    "warm_away": ("warm_subscribers_away", "Warm (durable) subscribers that are away and "
                  "still owed what arrives."),
    "subscribers_blocked": ("subscribers_blocked_on_credit", "Subscriber links with copies "
                            "waiting and no credit."),
    "publishers_at_window": ("publishers_at_window", "Publisher links with their whole "
                             "publisher-window in the router (held back)."),
    "relay_waiting": ("relay_waiting", "Deliveries waiting on relays' stores for warm "
                      "subscribers away."),
    "tombstones": ("tombstones", "Outcomes of finished deliveries kept to answer resends."),
}


class RouterCollector(Collector):
    """Reads one router's state at scrape time."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._engine()
        yield from self._topics()
        yield from self._clients()
        yield from self._mesh()

    def _engine(self) -> Iterator[Metric]:
        engine = self.node.engine
        stats = engine.stats
        for field, (name, text) in ENGINE_COUNTERS.items():
            yield CounterMetricFamily(f"exactmesh_{name}", text, value=getattr(stats, field))
        for key, value in engine.gauges().items():
            name, text = ENGINE_GAUGES[key]
            yield GaugeMetricFamily(f"exactmesh_{name}", text, value=value)
        after = self.node.config.stuck_after
        stuck = engine.stuck(after, self.node.now())
        yield GaugeMetricFamily(
            "exactmesh_deliveries_stuck", f"Deliveries undecided for more than {after:g} s "
            "(stuck-after; the log names who they wait for).", value=len(stuck))

    def _topics(self) -> Iterator[Metric]:
        counts = self.node.engine.topic_counts()
        if not counts:
            return
        family = CounterMetricFamily(
            "exactmesh_topic_messages", "Publisher deliveries here per topic: received, "
            "accepted, rejected (--topic-metrics N topics; the rest as (other)).",
            labels=["topic", "event"])
        for topic, row in sorted(counts.items()):
            for event, n in zip(("received", "accepted", "rejected"), row, strict=True):
                family.add_metric([topic, event], n)
        yield family

    def _clients(self) -> Iterator[Metric]:
        node = self.node
        conns = GaugeMetricFamily("exactmesh_connections", "Client connections, by protocol.",
                                  labels=["protocol"])
        by_protocol = Counter(_protocol(c) for c in node.connections)
        for protocol in ("amqp", "mqtt"):
            conns.add_metric([protocol], by_protocol.get(protocol, 0))
        yield conns
        links = GaugeMetricFamily("exactmesh_links", "Client links, by role.", labels=["role"])
        links.add_metric(["publisher"], len(node.engine.publishers))
        links.add_metric(["subscriber"], len(node.engine.subscribers))
        yield links
        refusals = CounterMetricFamily(
            "exactmesh_auth_refusals", "Clients and requests refused by the security policy "
            "(docs/security.md), by kind.", labels=["kind"])
        for kind, n in sorted(node.policy.refusals.items()):
            refusals.add_metric([kind], n)
        yield refusals
        mqtt = getattr(node, "mqtt_state", None)
        if mqtt is not None:
            sessions = CounterMetricFamily(
                "exactmesh_mqtt_sessions", "MQTT sessions created, resumed (here, or taken "
                "over from another router), taken over by a newer connection, expired.",
                labels=["event"])
            for event, n in mqtt.counts.items():
                sessions.add_metric([event], n)
            yield sessions
            yield GaugeMetricFamily("exactmesh_mqtt_sessions_live", "MQTT sessions this router "
                                    "holds, connected or away.", value=len(mqtt.sessions))
            yield GaugeMetricFamily("exactmesh_mqtt_retained_messages", "Retained messages "
                                    "this router holds (every router holds them all).",
                                    value=len(mqtt.retained))

    def _mesh(self) -> Iterator[Metric]:
        mesh: Any = self.node.mesh
        if mesh is None:
            return
        up = GaugeMetricFamily("exactmesh_peer_link_up", "1 while the link to this peer router "
                               "is up, 0 after it went down.", labels=["peer"])
        for peer in sorted(mesh.peers_seen):
            up.add_metric([peer], 1 if peer in mesh.neighbors else 0)
        yield up
        reachable = GaugeMetricFamily("exactmesh_routers_reachable", "Other routers this one "
                                      "can reach through the mesh now.")
        reachable.add_metric([], len(mesh.topology.reachable() - {mesh.me}))
        yield reachable
        rtt = GaugeMetricFamily("exactmesh_peer_rtt_seconds", "Smoothed round-trip time of "
                                "the reliable channel to each router (mesh acknowledgements).",
                                labels=["router"])
        unacked = GaugeMetricFamily("exactmesh_peer_unacknowledged_items", "Mesh items sent to "
                                    "each router and not yet acknowledged.", labels=["router"])
        queued = GaugeMetricFamily("exactmesh_peer_queued_items", "Mesh items waiting for "
                                   "window room toward each router.", labels=["router"])
        for router, (srtt, n_unacked, n_queued) in sorted(mesh.transfer.channels().items()):
            if srtt is not None:
                rtt.add_metric([router], srtt)
            unacked.add_metric([router], n_unacked)
            queued.add_metric([router], n_queued)
        yield rtt
        yield unacked
        yield queued
        again = CounterMetricFamily("exactmesh_peer_retransmissions", "Mesh items sent again "
                                    "to each router (no acknowledgement in time).",
                                    labels=["router"])
        for router, n in sorted(mesh.transfer.retransmissions.items()):
            again.add_metric([router], n)
        yield again
        yield CounterMetricFamily("exactmesh_gossip_subscription_changes", "Subscriptions at "
                                  "other routers added or removed, as gossip told this one.",
                                  value=mesh.sub_changes)


def _protocol(conn: object) -> str:
    name = type(conn).__name__.lower()
    return "mqtt" if "mqtt" in name else "amqp" if "amqp" in name else "other"


# A registry of its own per router (tests run several in one process), made at its first
# scrape: this router's state and the process's CPU, memory and file descriptors.
_registries: weakref.WeakKeyDictionary[Any, CollectorRegistry] = weakref.WeakKeyDictionary()


def scrape(node: Node) -> bytes:
    """The text of `GET /metrics` for this router."""
    registry = _registries.get(node)
    if registry is None:
        registry = _registries[node] = CollectorRegistry(auto_describe=False)
        registry.register(RouterCollector(node))
        ProcessCollector(registry=registry)
    return generate_latest(registry)

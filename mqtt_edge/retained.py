"""Retained messages (docs/mqtt.md, "Will and retained messages"): the last retained PUBLISH
per topic, bounded by a count and a total size (the oldest is dropped first, with a log
line). An empty retained payload clears the topic. The MQTT edge keeps one per router
(`attach(node)`, in `mqtt_edge.session.MqttState`), so it outlives connections; not persisted.

Every router of a mesh keeps a copy of the whole store: a retained PUBLISH (or its clearing)
is stamped where a device sent it (wall-clock time, router id, a counter) and shared with
every reachable router over the mesh's reliable channel (`mesh/meshnode.py`, item "retain");
a router that becomes reachable is sent the entries that originated here. For each topic the
entry with the newest stamp wins, so every router converges on the same value. A clearing is
kept as an empty entry (counted against the bounds) so that an older value arriving late
does not come back.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.core.topics import matches

from .packets import EMPTY_PROPERTIES, Properties

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.mqtt")

MAX_COUNT = 10_000  # retained topics per router
MAX_BYTES = 64 * 1024 * 1024  # total topic + payload bytes per router


Stamp = tuple[float, str, int]  # (wall-clock seconds, router id, counter): newest wins


@dataclass(slots=True)
class Retained:
    topic: str
    payload: bytes  # empty: the topic was cleared (kept so an older value cannot come back)
    qos: int
    properties: Properties
    expires_at: float | None  # from the Message Expiry Interval, on this router's clock
    stamp: Stamp = (0.0, "", 0)

    @property
    def size(self) -> int:
        return len(self.topic.encode()) + len(self.payload)

    @property
    def origin(self) -> str:
        return self.stamp[1]

    def wire(self, now: float) -> list[Any] | None:
        """The mesh item for this entry (None when it expired): the expiry goes as the
        interval left, since routers' monotonic clocks differ."""
        props = self.properties_at(now) if self.payload else self.properties
        if props is None:
            return None
        return [RETAIN_ITEM, self.topic, self.payload, self.qos, _props_out(props),
                list(self.stamp)]

    def properties_at(self, now: float) -> Properties | None:
        """The properties to send it with at `now` (the expiry interval counts down), or None
        when it has expired."""
        if self.expires_at is None:
            return self.properties
        left = int(self.expires_at - now)
        if left <= 0:
            return None
        values = dict(self.properties.items())
        values["message_expiry_interval"] = left
        return Properties(**values)


RETAIN_ITEM = "retain"  # the mesh item's kind (mesh/meshnode.py)


_NOT_SHARED = frozenset({"subscription_identifiers", "topic_alias"})  # per connection


def _props_out(props: Properties) -> dict[str, Any]:
    return {k: [list(pair) for pair in v] if k == "user_properties" else v
            for k, v in props.items() if k not in _NOT_SHARED}


def _props_in(values: dict[str, Any]) -> Properties:
    if "user_properties" in values:
        values = dict(values, user_properties=tuple(map(tuple, values["user_properties"])))
    return Properties(**values)


class RetainedStore:
    def __init__(self, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES,
                 router: str = "") -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.router = router
        self.bytes = 0
        self._by_topic: OrderedDict[str, Retained] = OrderedDict()
        self._counter = 0
        self._last_wall = 0.0

    def __len__(self) -> int:
        return sum(1 for r in self._by_topic.values() if r.payload)

    def get(self, topic: str) -> Retained | None:
        r = self._by_topic.get(topic)
        return r if r is not None and r.payload else None

    def put(self, topic: str, payload: bytes, qos: int,
            properties: Properties = EMPTY_PROPERTIES, now: float = 0.0,
            wall: float = 0.0) -> Retained | None:
        """A PUBLISH with RETAIN to `topic` from a device of this router: keep it (replacing
        the topic's last one), or, with an empty payload, clear the topic. Returns the new
        entry, to share with the other routers (None if it could not be kept)."""
        # Stamps from this router only grow, even if the wall clock steps back.
        self._last_wall = max(wall, self._last_wall)
        self._counter += 1
        expiry = properties.message_expiry_interval
        r = Retained(topic, payload, qos, properties if payload else EMPTY_PROPERTIES,
                     now + expiry if expiry and payload else None,
                     (self._last_wall, self.router, self._counter))
        return r if self._keep(r) else None

    def merge(self, item: list[Any], now: float) -> bool:
        """An entry shared by another router (`Retained.wire`): kept if its stamp is newer
        than what this router has for the topic. Returns whether it was kept."""
        _, topic, payload, qos, props, stamp = item
        stamp = (float(stamp[0]), str(stamp[1]), int(stamp[2]))
        old = self._by_topic.get(topic)
        if old is not None and old.stamp >= stamp:
            return False
        if stamp[1] != self.router:  # our own entries' clock stays ahead of what we stamp
            self._last_wall = max(self._last_wall, stamp[0])
        properties = _props_in(props)
        expiry = properties.message_expiry_interval if payload else None
        return self._keep(Retained(topic, bytes(payload), int(qos), properties,
                                   now + expiry if expiry else None, stamp))

    def for_router(self, router: str, reachable: set[str], now: float) -> list[list[Any]]:
        """The mesh items to send `router`, which just became reachable (it may have
        restarted with an empty store): the entries that originated here, and those whose
        origin cannot send them itself (it is that router, or unreachable). Several routers
        may send the same entry; the stamp makes the second one a no-op."""
        items = (r.wire(now) for r in self._by_topic.values()
                 if r.origin in (self.router, router) or r.origin not in reachable)
        return [i for i in items if i is not None]

    def _keep(self, r: Retained) -> bool:
        if r.size > self.max_bytes:
            log.warning("mqtt: retained message for topic %r (%d bytes) is larger than the "
                        "store (%d bytes); not kept", r.topic, r.size, self.max_bytes)
            return False
        old = self._by_topic.pop(r.topic, None)
        if old is not None:
            self.bytes -= old.size
        self._by_topic[r.topic] = r
        self.bytes += r.size
        while len(self._by_topic) > self.max_count or self.bytes > self.max_bytes:
            _, dropped = self._by_topic.popitem(last=False)
            self.bytes -= dropped.size
            if dropped.payload:
                log.warning("mqtt: retained store full (%d messages, %d bytes at most): "
                            "dropped the oldest, for topic %r", self.max_count,
                            self.max_bytes, dropped.topic)
        return True

    def matching(self, topic_filter: str, now: float) -> list[tuple[Retained, Properties]]:
        """The retained messages whose topic matches `topic_filter`, oldest first, with the
        properties to send them with; expired ones are dropped. O(retained topics), by the
        router's one topic matcher (router.core.topics; topic and filter were validated when
        they came in, so it raises nothing here)."""
        found = []
        expired = []
        for topic, r in self._by_topic.items():
            if r.payload and matches(topic_filter, topic):
                props = r.properties_at(now)
                if props is None:
                    expired.append(topic)
                else:
                    found.append((r, props))
        for topic in expired:
            self.bytes -= self._by_topic.pop(topic).size
        return found


def attach(node: RuntimePort) -> RetainedStore:
    """A retained store for this router, registered with the mesh when there is one (the
    runtime attaches the mesh before it starts the edges)."""
    s = RetainedStore(router=node.config.id)
    mesh = node.mesh
    if mesh is not None:
        mesh.attach_retained(lambda src, item: _merged(node, s, src, item),
                             lambda router, reachable: s.for_router(router, reachable,
                                                                    node.now()))
    return s


def _merged(node: RuntimePort, s: RetainedStore, src: str, item: list[Any]) -> None:
    kept = s.merge(item, node.now())
    log.debug("router %s: retained message for %r from router %s %s", node.config.id, item[1],
              src, "kept" if kept else "older than ours, ignored")


def retain(node: RuntimePort, s: RetainedStore, topic: str, payload: bytes, qos: int,
           properties: Properties) -> None:
    """A device of this router published `topic` with RETAIN: keep it in `s` and share it with
    every router of the mesh."""
    entry = s.put(topic, payload, qos, properties, node.now(), time.time())
    mesh = node.mesh
    if entry is None or mesh is None:
        return
    item = entry.wire(node.now())
    if item is not None:
        mesh.share_retained(item, node.now())
        node.mesh_output()

"""Retained messages of one router (docs/mqtt.md, "Will and retained messages"): the last
retained PUBLISH per topic that reached this router from one of its devices, bounded by a
count and a total size (the oldest is dropped first, with a log line). An empty retained
payload clears the topic. Kept on the node (`store(node)`), so it outlives connections; not
persisted, not shared with other routers.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .packets import EMPTY_PROPERTIES, Properties

log = logging.getLogger("exactmesh.mqtt")

MAX_COUNT = 10_000  # retained topics per router
MAX_BYTES = 64 * 1024 * 1024  # total topic + payload bytes per router


@dataclass(slots=True)
class Retained:
    topic: str
    payload: bytes
    qos: int
    properties: Properties
    expires_at: float | None  # from the Message Expiry Interval

    @property
    def size(self) -> int:
        return len(self.topic.encode()) + len(self.payload)

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


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic filter matching (5.0 section 4.7), with the rule that a filter starting
    with a wildcard does not match a topic starting with '$'."""
    if topic.startswith("$") and topic_filter[:1] in ("#", "+"):
        return False
    fparts = topic_filter.split("/")
    tparts = topic.split("/")
    for i, f in enumerate(fparts):
        if f == "#":
            return True
        if i >= len(tparts):
            return False
        if f != "+" and f != tparts[i]:
            return False
    return len(fparts) == len(tparts)


class RetainedStore:
    def __init__(self, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.bytes = 0
        self._by_topic: OrderedDict[str, Retained] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_topic)

    def get(self, topic: str) -> Retained | None:
        return self._by_topic.get(topic)

    def put(self, topic: str, payload: bytes, qos: int,
            properties: Properties = EMPTY_PROPERTIES, now: float = 0.0) -> None:
        """A PUBLISH with RETAIN to `topic`: keep it (replacing the topic's last one), or, with
        an empty payload, clear the topic."""
        old = self._by_topic.pop(topic, None)
        if old is not None:
            self.bytes -= old.size
        if not payload:
            return
        expiry = properties.message_expiry_interval
        r = Retained(topic, payload, qos, properties, now + expiry if expiry else None)
        if r.size > self.max_bytes:
            log.warning("mqtt: retained message for topic %r (%d bytes) is larger than the "
                        "store (%d bytes); not kept", topic, r.size, self.max_bytes)
            return
        self._by_topic[topic] = r
        self.bytes += r.size
        while len(self._by_topic) > self.max_count or self.bytes > self.max_bytes:
            _, dropped = self._by_topic.popitem(last=False)
            self.bytes -= dropped.size
            log.warning("mqtt: retained store full (%d messages, %d bytes at most): dropped "
                        "the oldest, for topic %r", self.max_count, self.max_bytes,
                        dropped.topic)

    def matching(self, topic_filter: str, now: float) -> list[tuple[Retained, Properties]]:
        """The retained messages whose topic matches `topic_filter`, oldest first, with the
        properties to send them with; expired ones are dropped. O(retained topics)."""
        found = []
        expired = []
        for topic, r in self._by_topic.items():
            if topic_matches(topic_filter, topic):
                props = r.properties_at(now)
                if props is None:
                    expired.append(topic)
                else:
                    found.append((r, props))
        for topic in expired:
            self.bytes -= self._by_topic.pop(topic).size
        return found


def store(node: Any) -> RetainedStore:
    """The router's retained store (kept on the node)."""
    s = getattr(node, "mqtt_retained", None)
    if s is None:
        s = node.mqtt_retained = RetainedStore()
    return s

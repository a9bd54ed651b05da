"""Pre-registration (seed 000; docs/relay.md, "Pre-registration"): a publisher names the
durable listeners it expects, with a time limit, before they ever attach.

    link property exactmesh:expect = [{"key": "laptop/sub/laptop", "filter": "lap/#",
                                       "timeout": 3600}, ...]

`key` is the listener's mesh key, container-id "/" link name (an SDK subscriber with id X is
"X/sub/X"); `filter` what it will subscribe to; `timeout` how long, in seconds, it is
expected. A listener the mesh does not know yet becomes a warm subscriber, away, here at
the publisher's router: from then on messages are owed to it, count in mode `all`, are kept
for it (in the relay store, if the router has one), and fail by name when its time runs
out. When it attaches, anywhere in the mesh, it is a warm subscriber coming back: it gets
what it is owed first, in order. A listener the mesh knows already is left as it is.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from router.core.records import LinkIdentity
from router.core.topics import TopicError, validate_filter

from .persistence import subscribe_away

if TYPE_CHECKING:
    from router.ports import RuntimePort

log = logging.getLogger("exactmesh.amqp")

EXPECT_PROPERTY = "exactmesh:expect"
MAX_EXPECTED = 100  # listeners one attach may name
MAX_TIMEOUT = 30 * 86_400.0  # a month


class ExpectError(ValueError):
    """A malformed exactmesh:expect property: the attach is refused with this text."""


def expected(props: dict | None) -> list[tuple[LinkIdentity, str, float]]:
    """The (listener, filter, timeout) a publisher's attach names; [] if none."""
    value = None
    for k, v in (props or {}).items():
        if str(k) == EXPECT_PROPERTY:
            value = v
    if value is None:
        return []
    if not isinstance(value, list | tuple) or len(value) > MAX_EXPECTED:
        raise ExpectError(f"{EXPECT_PROPERTY} must be a list of at most {MAX_EXPECTED} maps "
                          "{key, filter, timeout}")
    return [_entry(item) for item in value]


def _entry(item: Any) -> tuple[LinkIdentity, str, float]:
    if not isinstance(item, dict):
        raise ExpectError(f"{EXPECT_PROPERTY}: {item!r} is not a map {{key, filter, timeout}}")
    entry = {str(k): v for k, v in item.items()}
    key, topic_filter, timeout = entry.get("key"), entry.get("filter"), entry.get("timeout")
    if not isinstance(key, str) or "/" not in key.strip("/"):
        raise ExpectError(f"{EXPECT_PROPERTY}: key {key!r} is not container-id/link-name "
                          "(an SDK subscriber with id X is X/sub/X)")
    try:
        validate_filter(str(topic_filter or ""))
    except TopicError as err:
        raise ExpectError(f"{EXPECT_PROPERTY}: filter {topic_filter!r}: {err}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not 0 < timeout <= MAX_TIMEOUT:
        raise ExpectError(f"{EXPECT_PROPERTY}: timeout {timeout!r} must be a number of "
                          f"seconds, more than 0 and at most {MAX_TIMEOUT:g}")
    container, name = key.split("/", 1)
    return LinkIdentity(container, name), str(topic_filter), float(timeout)


def pre_register(node: RuntimePort, listeners: list[tuple[LinkIdentity, str, float]]) -> None:
    """Make each listener the mesh does not know a warm subscriber away, here."""
    for ident, topic_filter, timeout in listeners:
        if node.engine.knows_subscriber(ident.key):
            continue
        subscribe_away(node, ident, topic_filter, False, timeout, keep=True)
        log.info("listener %s pre-registered for %s, expected within %g s", ident.key,
                 topic_filter, timeout)

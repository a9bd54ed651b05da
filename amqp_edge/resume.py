"""The resume extension carried in attach link properties (docs/resume-protocol.md).

Proton cannot put AMQP's `unsettled` map on an attach, so a client that resumes a link says
what it holds under the link property `exactmesh:resume`, and the router answers under the
same key in its own attach:

- a sender (publisher): `{"unsettled": [tag, ...]}`, the tags it will send again; the answer
  is `{"known": [tag, ...]}`, those the router holds records of;
- a receiver (subscriber): `{"unsettled": {delivery-tag: "accepted" | "received"}, "gen": n}`;
  the answer is `{"known": {delivery-tag: "accepted" | "unsettled"}, "placeholders": [...]}`.
"""

from __future__ import annotations

from typing import Any

from proton import symbol

RESUME_PROPERTY = symbol("exactmesh:resume")
MAX_DECLARED = 65536  # more than any window: a bigger declaration is a mistake
STATES = ("accepted", "received")


class ResumeError(ValueError):
    """The client's resume property is malformed; the message says how."""


def _declaration(props: dict | None) -> dict | None:
    value = (props or {}).get(RESUME_PROPERTY)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ResumeError(f"link property {RESUME_PROPERTY} must be a map, not "
                          f"{type(value).__name__}; see docs/resume-protocol.md")
    return value


def publisher_resends(props: dict | None) -> list[bytes]:
    """The tags a resuming publisher declared it will send again."""
    value = _declaration(props)
    if value is None:
        return []
    tags = value.get("unsettled", [])
    if not isinstance(tags, list | tuple) or len(tags) > MAX_DECLARED:
        raise ResumeError(f"{RESUME_PROPERTY} 'unsettled' must be a list of at most "
                          f"{MAX_DECLARED} delivery tags")
    out = []
    for tag in tags:
        if isinstance(tag, str):
            tag = tag.encode()
        elif isinstance(tag, memoryview | bytearray):  # proton decodes binary as memoryview
            tag = bytes(tag)
        if not isinstance(tag, bytes) or not 0 < len(tag) <= 32:
            raise ResumeError(f"{RESUME_PROPERTY} 'unsettled' holds {tag!r}, which is not a "
                              "delivery tag (1 to 32 bytes)")
        out.append(bytes(tag))
    return out


def subscriber_resume(props: dict | None) -> tuple[dict[str, str], int]:
    """A resuming subscriber's declared deliveries (id -> state) and attach generation."""
    value = _declaration(props)
    if value is None:
        return {}, 0
    declared = value.get("unsettled", {})
    gen = value.get("gen", 0)
    if not isinstance(declared, dict) or len(declared) > MAX_DECLARED:
        raise ResumeError(f"{RESUME_PROPERTY} 'unsettled' must be a map of at most "
                          f"{MAX_DECLARED} delivery tags to 'accepted' or 'received'")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        raise ResumeError(f"{RESUME_PROPERTY} 'gen' must be a non-negative integer, not {gen!r}")
    out: dict[str, str] = {}
    for tag, state in declared.items():
        if isinstance(tag, bytes | memoryview | bytearray):
            tag = bytes(tag).decode("ascii", "replace")
        if not isinstance(tag, str) or str(state) not in STATES:
            raise ResumeError(f"{RESUME_PROPERTY} 'unsettled' entry {tag!r}: {state!r} must "
                              "map a delivery tag to 'accepted' or 'received'")
        out[str(tag)] = str(state)
    return out, int(gen)


def answer(view: dict[str, Any]) -> dict:
    """The router's attach properties carrying its view."""
    return {RESUME_PROPERTY: view}

"""Subscription gossip (docs/mesh-protocol.md, section Subscription gossip). Sans-IO.

Each router is the only writer of its own subscription table and floods every change as a
`SUBS` delta; the others keep copies, versioned `(inc, ver)` per origin. `Gossip.on_subs`
turns received frames into `SubChange` / `RouterRestarted` events for the engine.

Decisions the protocol page leaves open:

- Every table starts at `ver` 0 and empty, in every incarnation. Hence a delta with `ver` 1
  applies onto "nothing held" and onto any older incarnation (their `ver` 0 is the empty table):
  a restarted router's first attach spreads as a delta instead of a PULL at every hop.
- A gap answers with a PULL once per origin until a full table for that origin arrives (or a
  frame for it applies): a burst of deltas behind one gap would otherwise cost a PULL and a
  full table each, quadratic in the burst. If that full table is lost, anti-entropy (DIGEST)
  still repairs the copy; the suppression only saves bandwidth.
- Frames about ourselves from others are ignored; one claiming a newer `(inc, ver)` than ours
  must not exist and is counted in `foreign_self_claims`.
- Events for one frame come in this order: `RouterRestarted` (if the incarnation changed),
  then every `removed`, then every `added`. A re-attach of a key with different fields is a
  `removed` of the old `RemoteSub` and an `added` of the new one; identical re-adds are silent,
  except across a restart, where every old entry is `removed` and every new one `added`.
- A malformed frame raises `ValueError` (the caller treats it as a protocol error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RemoteSub:
    """A subscriber attached at `router`; `key` is `container/link`. `gen` is its attach
    generation (the newest attach of a key wins when two routers claim it, say after a move
    that gossip has not finished telling); `timeout` how long a warm subscriber stays
    subscribed while away (0: not warm); `qos` an MQTT subscription's options (granted QoS in
    bits 0-1, No Local in bit 2: router/core/events.py `NO_LOCAL`), which a router taking
    the device's session over needs (0 for AMQP subscribers); `since` the
    generation its subscription started afresh at (0: not known, from an older router)."""

    router: str
    key: str
    filter: str
    container: str
    link: str
    gen: int = 0
    timeout: float = 0.0
    qos: int = 0
    since: int = 0


@dataclass(frozen=True)
class SubChange:
    kind: str  # "added" | "removed"
    sub: RemoteSub


@dataclass(frozen=True)
class RouterRestarted:
    """`router` came back as incarnation `inc`: every subscriber it had before is gone."""

    router: str
    inc: int


Event = SubChange | RouterRestarted


def _sub_fields(sub: RemoteSub) -> list[Any]:
    return [sub.filter, sub.container, sub.link, sub.gen, sub.timeout, sub.qos, sub.since]


def _check_subs(frame: dict[str, Any]) -> None:
    """Raise ValueError unless `frame` is a well-formed SUBS frame."""
    origin, add, remove = frame.get("origin"), frame.get("add"), frame.get("remove")
    if frame.get("t") != "SUBS" or not isinstance(origin, str):
        raise ValueError(f"not a SUBS frame: {frame!r}")
    for name in ("inc", "ver"):
        value = frame.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"SUBS from {origin!r}: bad {name} {value!r}")
    if not isinstance(frame.get("full"), bool):
        raise ValueError(f"SUBS from {origin!r}: full is not a bool")
    if not isinstance(add, dict) or not isinstance(remove, list | tuple):
        raise ValueError(f"SUBS from {origin!r}: add must be a map and remove a list")
    for key, fields in add.items():
        # Five fields from a router before the QoS was gossiped (its QoS counts as 0), six
        # from one before `since` was (not known: 0).
        if not (isinstance(key, str) and isinstance(fields, list | tuple)
                and len(fields) in (5, 6, 7) and all(isinstance(f, str) for f in fields[:3])
                and isinstance(fields[3], int) and not isinstance(fields[3], bool)
                and isinstance(fields[4], int | float) and not isinstance(fields[4], bool)
                and fields[3] >= 0 and fields[4] >= 0
                and (len(fields) == 5 or (type(fields[5]) is int and 0 <= fields[5] <= 7))
                and (len(fields) < 7 or (type(fields[6]) is int and fields[6] >= 0))):
            raise ValueError(f"SUBS from {origin!r}: bad entry {key!r}: {fields!r}")
    if not all(isinstance(key, str) for key in remove):
        raise ValueError(f"SUBS from {origin!r}: remove holds a non-string key")


class Gossip:
    """Our own subscription table plus the newest copy we hold of every other origin's."""

    def __init__(self, me: str, inc: int) -> None:
        self.me = me
        self.inc = inc
        self._tables: dict[str, dict[str, RemoteSub]] = {me: {}}
        self._vers: dict[str, tuple[int, int]] = {me: (inc, 0)}
        self._pulling: set[str] = set()  # origins with a gap PULL outstanding
        self.foreign_self_claims = 0

    # -- our own table -------------------------------------------------------------------------

    def local_attach(
        self, key: str, topic_filter: str, container: str, link: str, gen: int = 0,
        timeout: float = 0.0, qos: int = 0, since: int = 0,
    ) -> dict[str, Any]:
        """Add (or replace) a local subscriber; returns the SUBS delta frame to flood."""
        sub = RemoteSub(self.me, key, topic_filter, container, link, gen, timeout, qos, since)
        self._tables[self.me][key] = sub
        return self._bump_own(add={key: _sub_fields(sub)}, remove=[])

    def local_detach(self, key: str) -> dict[str, Any] | None:
        """Remove a local subscriber; returns the SUBS delta to flood, None if it was unknown."""
        if self._tables[self.me].pop(key, None) is None:
            return None
        return self._bump_own(add={}, remove=[key])

    def _bump_own(self, add: dict[str, list[Any]], remove: list[str]) -> dict[str, Any]:
        inc, ver = self._vers[self.me]
        self._vers[self.me] = (inc, ver + 1)
        return {"t": "SUBS", "origin": self.me, "inc": inc, "ver": ver + 1, "full": False,
                "add": add, "remove": remove}

    # -- copies of remote tables ---------------------------------------------------------------

    def on_subs(
        self, frame: dict[str, Any]
    ) -> tuple[list[Event], bool, dict[str, Any] | None]:
        """Apply a SUBS frame from a neighbour.

        Returns (events for the engine, whether to re-flood the frame to the other neighbours,
        a PULL frame to send back to the sender on a gap or None).
        """
        _check_subs(frame)
        origin, inc, ver = frame["origin"], frame["inc"], frame["ver"]
        if origin == self.me:
            if (inc, ver) > self._vers[self.me]:
                self.foreign_self_claims += 1
            return [], False, None
        held = self._vers.get(origin)
        if frame["full"]:
            if held is not None and (inc, ver) <= held:
                # Whatever we pulled for has arrived or been overtaken; a later gap may pull again.
                self._pulling.discard(origin)
                return [], False, None
            new = {key: RemoteSub(origin, key, *fields) for key, fields in frame["add"].items()}
            return self._replace(origin, inc, ver, new), True, None
        if held is not None and (inc, ver) <= held:
            return [], False, None  # a duplicate or an overtaken delta
        if ver == 1 and (held is None or held[0] < inc):
            base: dict[str, RemoteSub] = {}  # every incarnation's ver 0 is the empty table
        elif held is not None and held == (inc, ver - 1):
            base = self._tables[origin]
        else:
            if origin in self._pulling:
                return [], False, None
            self._pulling.add(origin)
            return [], False, {"t": "PULL", "origins": [origin]}
        new = dict(base)
        for key in frame["remove"]:
            new.pop(key, None)
        for key, fields in frame["add"].items():
            new[key] = RemoteSub(origin, key, *fields)
        return self._replace(origin, inc, ver, new), True, None

    def _replace(
        self, origin: str, inc: int, ver: int, new: dict[str, RemoteSub]
    ) -> list[Event]:
        """Install `new` as origin's table at (inc, ver) and return the events that make it so."""
        held = self._vers.get(origin)
        old = self._tables.get(origin, {})
        events: list[Event] = []
        if held is not None and held[0] < inc:
            # A restart: every entry of the new run is a new attach, even one that reads the
            # same as before (a device back with the same generation, which the new run could
            # not know was taken). The engine has put the old run's subscribers away on the
            # restart; without the "added", one that came back identical stayed away until its
            # timeout and was then forgotten, so messages went out owed to nobody there.
            events.append(RouterRestarted(origin, inc))
            events += [SubChange("removed", sub) for sub in old.values()]
            events += [SubChange("added", sub) for sub in new.values()]
        else:
            events += [SubChange("removed", sub) for key, sub in old.items()
                       if new.get(key) != sub]
            events += [SubChange("added", sub) for key, sub in new.items()
                       if old.get(key) != sub]
        self._tables[origin] = new
        self._vers[origin] = (inc, ver)
        self._pulling.discard(origin)
        return events

    # -- queries -------------------------------------------------------------------------------

    def full(self, origin: str) -> dict[str, Any] | None:
        """A full SUBS frame for an origin we hold (ours included), None if we hold none."""
        held = self._vers.get(origin)
        if held is None:
            return None
        return {"t": "SUBS", "origin": origin, "inc": held[0], "ver": held[1], "full": True,
                "add": {k: _sub_fields(s) for k, s in self._tables[origin].items()},
                "remove": []}

    def versions(self) -> dict[str, tuple[int, int]]:
        """origin -> (inc, ver) of every table we hold, ours included (for DIGEST frames)."""
        return dict(self._vers)

    def table(self, origin: str) -> dict[str, RemoteSub]:
        """A copy of origin's table (key -> subscriber); empty if we hold none."""
        return dict(self._tables.get(origin, {}))

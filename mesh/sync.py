"""Anti-entropy between neighbours (docs/mesh-protocol.md, section Subscription gossip). Sans-IO.

Flooding spreads changes fast but loses them when a link is down or a frame is dropped;
anti-entropy repairs everything else. Every `gossip-interval` and when a link comes up, a
router sends its `DIGEST {entries: {origin: [inc, lsa_ver, subs_ver]}}`; the neighbour answers
with the LSA / full SUBS it holds newer, and one `PULL` for what it lacks or holds older. The
frames that come back go through `Topology.on_lsa` / `Gossip.on_subs` like any other, so what
they repair is re-flooded from there.

Decisions the protocol page leaves open:

- One digest entry carries one `inc` for both halves. While the LSA and the SUBS table of an
  origin are of different incarnations (a restart half heard of), the entry carries the newer
  `inc` and `-1` for the half that is older or missing: "nothing of this incarnation".
- `on_digest` sends only the halves that are newer on our side (the other half would be ignored
  as not newer anyway); `on_pull` sends both halves, since a PULL does not say which it needs.
- We never PULL our own origin: we are its only writer.
"""

from __future__ import annotations

from typing import Any

from mesh.gossip import Gossip
from mesh.topology import Topology

Version = tuple[int, int]


def _check_entry(origin: object, entry: object) -> tuple[int, int, int]:
    # `type(v) is int` rather than isinstance: bool is an int subclass and is not a version.
    if (isinstance(origin, str) and isinstance(entry, list | tuple) and len(entry) == 3
            and type(entry[0]) is int and type(entry[1]) is int and type(entry[2]) is int):
        return entry[0], entry[1], entry[2]
    raise ValueError(f"DIGEST: bad entry {origin!r}: {entry!r}")


def _newer(a: Version | None, b: Version | None) -> bool:
    """True if `a` is newer than `b` (anything is newer than nothing)."""
    return a is not None and (b is None or a > b)


class MeshSync:
    """Builds DIGEST frames and answers a neighbour's DIGEST and PULL frames."""

    def __init__(self, topology: Topology, gossip: Gossip) -> None:
        if topology.me != gossip.me:
            raise ValueError("topology and gossip belong to different routers")
        self.topology = topology
        self.gossip = gossip

    def _entries(self) -> dict[str, list[int]]:
        """Our digest entries, origin -> [inc, lsa_ver, subs_ver] (-1: none of that inc)."""
        lsas, subs = self.topology.versions(), self.gossip.versions()
        entries: dict[str, list[int]] = {}
        for origin, (inc, ver) in lsas.items():
            held = subs.get(origin)
            if held is None or held[0] < inc:
                entries[origin] = [inc, ver, -1]
            elif held[0] == inc:
                entries[origin] = [inc, ver, held[1]]
            else:
                entries[origin] = [held[0], -1, held[1]]
        for origin, (inc, ver) in subs.items():
            if origin not in lsas:
                entries[origin] = [inc, -1, ver]
        return entries

    def digest(self) -> dict[str, Any]:
        entries = self._entries()
        return {"t": "DIGEST", "entries": {o: entries[o] for o in sorted(entries)}}

    def on_digest(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """Frames to send back to the neighbour whose DIGEST this is.

        For every origin where we are newer: our LSA and/or full SUBS (whichever half is newer).
        Last, one PULL listing origins where the neighbour is newer or that we lack (if any).
        Raises ValueError on a malformed frame.
        """
        entries = frame.get("entries")
        if frame.get("t") != "DIGEST" or not isinstance(entries, dict):
            raise ValueError(f"not a DIGEST frame: {frame!r}")
        mine = self._entries()
        theirs: dict[str, tuple[Version | None, Version | None]] = {}
        differ = [o for o in mine if o not in entries]
        for origin, entry in entries.items():
            inc, lsa_ver, subs_ver = _check_entry(origin, entry)
            # Equal entries (the steady state, nearly every origin) have nothing to repair.
            if mine.get(origin) != [inc, lsa_ver, subs_ver]:
                differ.append(origin)
                theirs[origin] = ((inc, lsa_ver) if lsa_ver >= 0 else None,
                                  (inc, subs_ver) if subs_ver >= 0 else None)
        out: list[dict[str, Any]] = []
        pull: list[str] = []
        lsas, subs = self.topology.versions(), self.gossip.versions()
        for origin in sorted(differ):
            our_lsa, our_subs = lsas.get(origin), subs.get(origin)
            their_lsa, their_subs = theirs.get(origin, (None, None))
            if _newer(our_lsa, their_lsa):
                out.append(self._lsa(origin))
            if _newer(our_subs, their_subs):
                out.append(self._full(origin))
            if origin != self.topology.me and (
                _newer(their_lsa, our_lsa) or _newer(their_subs, our_subs)
            ):
                pull.append(origin)
        if pull:
            out.append({"t": "PULL", "origins": pull})
        return out

    def on_pull(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """Our LSA and full SUBS for each requested origin we hold (unknown ones are skipped)."""
        origins = frame.get("origins")
        if frame.get("t") != "PULL" or not isinstance(origins, list | tuple):
            raise ValueError(f"not a PULL frame: {frame!r}")
        out: list[dict[str, Any]] = []
        for origin in dict.fromkeys(origins):  # de-duplicated, order kept
            if not isinstance(origin, str):
                raise ValueError(f"PULL: bad origin {origin!r}")
            lsa, subs = self.topology.lsa(origin), self.gossip.full(origin)
            out += [f for f in (lsa, subs) if f is not None]
        return out

    def _lsa(self, origin: str) -> dict[str, Any]:
        frame = self.topology.lsa(origin)
        assert frame is not None  # we only ask for halves we hold
        return frame

    def _full(self, origin: str) -> dict[str, Any]:
        frame = self.gossip.full(origin)
        assert frame is not None
        return frame

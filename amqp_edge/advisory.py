"""Advisories: what a client tells its application about its connection (docs/relay.md,
"Advisories"; seed 000). A laptop's program learns from them when it may close its lid.

- `CONNECTED`: attached to its relay (or router); `url` says which.
- `DISCONNECTED`: after `disconnect()`, the link is detached and the connection closed
  cleanly: the relay knows the client is away and keeps what arrives for it. Safe to sever
  the network. Nothing the client holds is lost either way (its store keeps its outbox and
  its answers); a clean disconnect only spares the relay the idle timeout before it stores.
- `NO_RESPONSE`: the relay did not answer (an attempt failed, or the link was lost without
  `disconnect()`); the client goes on trying. Once per streak: the next is after a
  `CONNECTED`.

A client keeps the last `KEEP` advisories for `advisories()` readers, and calls its
`on_advisory` callback (on its I/O thread: keep it short) with each.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

CONNECTED = "connected"
DISCONNECTED = "disconnected"
NO_RESPONSE = "no-response"
KEEP = 1000


@dataclass(frozen=True, slots=True)
class Advisory:
    kind: str  # CONNECTED, DISCONNECTED or NO_RESPONSE
    url: str  # the relay or router it concerns
    detail: str = ""  # why, in words
    at: float = field(default_factory=time.time)  # wall clock

    @property
    def safe_to_sever(self) -> bool:
        return self.kind == DISCONNECTED


class AdvisoryLog:
    """The advisories so far, numbered; readers keep the number of the next they want.
    The caller holds its client's lock around every method."""

    def __init__(self) -> None:
        self._items: deque[Advisory] = deque(maxlen=KEEP)
        self.next = 0  # the number the next advisory gets
        self.silent = False  # NO_RESPONSE said since the last CONNECTED

    def add(self, advisory: Advisory) -> bool:
        """Record it; False for a NO_RESPONSE within a streak (not recorded)."""
        if advisory.kind == NO_RESPONSE:
            if self.silent:
                return False
            self.silent = True
        elif advisory.kind == CONNECTED:
            self.silent = False
        self._items.append(advisory)
        self.next += 1
        return True

    def since(self, number: int) -> tuple[list[Advisory], int]:
        """The advisories from `number` on that are still kept, and the next number."""
        first = self.next - len(self._items)
        skip = max(0, number - first)
        return list(self._items)[skip:], self.next

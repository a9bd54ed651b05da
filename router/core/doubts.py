"""Failed messages with subscribers in doubt, kept after their records are forgotten, so that
the status query can say what became of those subscribers once their routers answer.

A part fails *in doubt* when its subscriber may have processed the message but the answer
was lost: the origin gave its router up in a partition, say (docs/guarantees.md, "Failed,
or in doubt"). The subscriber's router remembers what it decided and sends its verdict when
the path heals (`mesh/meshnode.py`, owed verdicts), long after the origin told its publisher
and forgot the record. This ledger is where that late verdict lands: the in-doubt part is
*resolved* as accepted (the subscriber processed it: sending it again would make it process
it twice) or not accepted (its router says it refused it, for certain). A router with no
record of the message cannot say either (its subscriber may have moved and got it
elsewhere, or the router restarted since): such a part stays in doubt.

Only the origin keeps entries, only for failures that name someone in doubt, and at most
`limit` of them (`EngineConfig.doubts_kept`), oldest dropped first. Not on the per-message
path: nothing here runs for a message that succeeds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .records import IN_DOUBT


@dataclass
class Doubt:
    """What the publisher was told about message `id`, and what has been learned since."""

    id: str
    address: str
    mode: str
    publisher: str | None
    condition: str
    description: str
    info: dict[str, Any]  # its record's last status: succeeded, failed, reasons, in_doubt
    # label -> {"accepted": bool, "router": who said so, "reason": why not (None if accepted)}
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)

    def still_in_doubt(self) -> list[str]:
        return [label for label in self.info.get(IN_DOUBT, ()) if label not in self.resolved]


class Doubts:
    """A bounded ledger of `Doubt`s by delivery id."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_id: OrderedDict[str, Doubt] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Doubt]:
        return iter(self._by_id.values())

    def get(self, msg_id: str) -> Doubt | None:
        return self._by_id.get(msg_id)

    def keep(self, doubt: Doubt) -> None:
        if self.limit <= 0:
            return
        self._by_id[doubt.id] = doubt
        self._by_id.move_to_end(doubt.id)
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)

    def resolve(self, router: str, msg_id: str, accepted: bool, status: dict[str, Any],
                keys: list[str] | None) -> list[str]:
        """Router `router`'s late verdict on `msg_id` for its subscribers `keys` (all it was
        owed if None): resolve those of them still in doubt. Returns the labels resolved."""
        doubt = self._by_id.get(msg_id)
        if doubt is None:
            return []
        return resolve(doubt.still_in_doubt(), doubt.resolved, router, accepted, status, keys)


def resolve(in_doubt: list[str], resolved: dict[str, dict[str, Any]], router: str,
            accepted: bool, status: dict[str, Any], keys: list[str] | None) -> list[str]:
    """Resolve, into `resolved`, the labels of `in_doubt` that router `router`'s verdict
    (`accepted`, its record's `status`, for its subscribers `keys`, all if None) answers for:
    a record that is forgotten (`Doubts`) or still live (`Record.resolved`). Returns them."""
    suffix = f"@{router}"
    wanted = None if keys is None else {f"{key}{suffix}" for key in keys}
    succeeded = status.get("succeeded", ())
    failed = status.get("failed", ())
    unsure = status.get(IN_DOUBT, ())
    reasons = status.get("reasons", {})
    done = []
    for label in in_doubt:
        if label in resolved or not label.endswith(suffix) or (
                wanted is not None and label not in wanted):
            continue
        if (accepted and not status) or label in succeeded:
            resolved[label] = {"accepted": True, "router": router, "reason": None}
        elif label in failed and label not in unsure:
            resolved[label] = {"accepted": False, "router": router,
                               "reason": reasons.get(label, "failed")}
        else:
            continue  # its router does not know either (it lost the answer too)
        done.append(label)
    return done

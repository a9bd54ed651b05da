"""Small helpers the benchmark commands share."""

from __future__ import annotations

import json
import os
from typing import Any


def load_line() -> str:
    """The machine's load average, for a benchmark's header and footer: figures taken while
    something else runs are not comparable."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def write_json(path: str, report: dict[str, Any]) -> None:
    """Write a client's report atomically: the parent may read it as soon as it appears."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)

"""Small helpers the benchmark commands share."""

from __future__ import annotations

import json
import os
import socket
from typing import Any


def load_line() -> str:
    """The machine's load average, for a benchmark's header and footer: figures taken while
    something else runs are not comparable."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on now, and never one this process handed out before:
    the kernel may give the same free port to two bind(0) calls in a row, and a benchmark that
    asks for a router's AMQP and mesh ports one after the other would then start it on one
    port twice ("Address already in use")."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh loopback port in 100 tries")


def write_json(path: str, report: dict[str, Any]) -> None:
    """Write a client's report atomically: the parent may read it as soon as it appears."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)


def figure(value: Any, fmt: str = "{:,.0f}") -> str:
    """A table cell: '-' for what was not measured."""
    return "-" if value is None else fmt.format(value)


def print_table(cols: list[tuple[str, int]], rows: list[list[str]]) -> None:
    """A plain-text table: header, a line of dashes per column, then the rows; the first
    column left-aligned, the figures right-aligned (what tests/test_benchmarks_smoke.py
    reads back)."""
    def line(cells: list[str]) -> str:
        return " ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, (_, w)) in enumerate(zip(cells, cols, strict=True)))

    print(line([name for name, _ in cols]))
    print(" ".join("-" * w for _, w in cols))
    for cells in rows:
        print(line(cells))


def kill_left(procs: Any) -> None:
    """Kill (by PID) the client processes still running, and reap them."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(3)

"""The router's log lines: text for people, or JSON lines for log shippers (`--log-format`).

One JSON object per line, with the fields a shipper indexes: `time` (ISO 8601, UTC, with
milliseconds), `level`, `logger`, `router` (the router id), `message`, and `exception` when
there is a traceback. Standard library only, so every command may use it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def __init__(self, router: str) -> None:
        super().__init__()
        self.router = router

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "router": self.router,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: str, fmt: str, router: str) -> None:
    """Log to stderr at `level`, as `fmt` says ("text" or "json")."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(router) if fmt == "json"
                         else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

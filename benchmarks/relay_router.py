"""A router with a relay store (`--relay-store`, docs/relay.md), MQTT QoS 1, 100-byte payloads.

Run: `python -m benchmarks.relay_router [--count 20000]` (`--quick`: a smoke run).

Rows, each on a fresh router (the publisher and the present subscriber are the MQTT
benchmark's paho client processes, benchmarks/mqtt.py):

- `present, no store`: one subscriber that keeps up; the router without a store (direct);
- `present, store`: the same with a store (it costs nothing while the subscriber has room);
- `absent, store`: the subscriber is a persistent session that went offline; each PUBACK
  comes once the copy is on disk. Without a store this row stops after one window.

Printed per row: messages/s at the publisher (first publish to last PUBACK), PUBACK latency
p50/p99, router CPU microseconds per message, and for the absent row the router's memory per
waiting delivery (RSS growth over the run / messages) and, when the session comes back, how
fast the stored messages are handed over (one paho client in this process).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import figure, kill_left, print_table
from benchmarks.mqtt import (
    READY_TIMEOUT_S,
    TOPIC,
    Exactmesh,
    _read_line,
    _spawn_client,
    proc_cpu_s,
)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Session:
    """A persistent MQTT 5 session (paho, in this process)."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.got = 0
        self.last = 0.0
        self.ready = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-session",
                             protocol=mqtt.MQTTv5)
        self.c.on_connect = lambda *a: self.ready.set()
        self.c.on_subscribe = lambda *a: self.ready.set()
        self.c.on_message = self._on_message
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        props.ReceiveMaximum = 1000
        self.c.connect("127.0.0.1", port, clean_start=False, properties=props)
        self.c.loop_start()
        if not self.ready.wait(READY_TIMEOUT_S):
            raise RuntimeError("the session got no CONNACK")

    def _on_message(self, *_: Any) -> None:
        self.got += 1
        self.last = time.monotonic()

    def subscribe(self) -> None:
        self.ready.clear()
        self.c.subscribe(TOPIC, qos=1)
        if not self.ready.wait(READY_TIMEOUT_S):
            raise RuntimeError("the session got no SUBACK")

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def run_row(name: str, args: argparse.Namespace, store: bool, absent: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--relay-store", f"{tmp}/relay"] if store else []
        server = Exactmesh(Path(tmp), extra)
        server.start()
        assert server.proc is not None
        pid = server.proc.pid
        clients = []
        try:
            if absent:
                s = Session(server.port)
                s.subscribe()
                s.close()
            else:
                sub = _spawn_client("sub", server.port, 1, args.count, f"{name}-sub", args)
                clients.append(sub)
                if _read_line(sub, READY_TIMEOUT_S) != "READY":
                    raise RuntimeError("subscriber not ready")
            pub = _spawn_client("pub", server.port, 1, args.count, f"{name}-pub", args)
            clients.append(pub)
            if _read_line(pub, READY_TIMEOUT_S) != "READY":
                raise RuntimeError("publisher not ready")
            cpu0, rss0 = proc_cpu_s(pid), _rss_kib(pid)
            pub.stdin.write("go\n")
            pub.stdin.flush()
            result = json.loads(_read_line(pub, args.max_seconds + 20) or "{}")
            cpu = proc_cpu_s(pid) - cpu0
            acked = int(result.get("acked", 0))
            row = {"name": name, "acked": acked,
                   "rate": acked / result["elapsed_s"] if result.get("elapsed_s") else 0.0,
                   "p50": result.get("p50_ms"), "p99": result.get("p99_ms"),
                   "cpu_us": cpu / acked * 1e6 if acked else None}
            if absent:
                row["bytes_waiting"] = (_rss_kib(pid) - rss0) * 1024 / acked if acked else None
                back = Session(server.port)
                t0 = time.monotonic()
                deadline = t0 + args.max_seconds + 20
                while back.got < acked and time.monotonic() < deadline:
                    time.sleep(0.01)
                row["drain"] = back.got / (back.last - t0) if back.got and back.last > t0 \
                    else 0.0
                row["handed"] = back.got
                back.close()
            else:
                sub.stdin.write(f"{acked}\n")
                sub.stdin.flush()
                got = json.loads(_read_line(sub, 30) or "{}")
                row["handed"] = got.get("distinct", 0)
            return row
        finally:
            kill_left(clients)
            server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--window", type=int, default=20, help="the publisher's QoS 1 window")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 300 messages")
    args = ap.parse_args(argv)
    if args.quick:
        args.count, args.max_seconds = 300, 20.0
    rows = [run_row("present, no store", args, store=False, absent=False),
            run_row("present, store", args, store=True, absent=False),
            run_row("absent, store", args, store=True, absent=True)]
    print(f"router with a relay store: {args.count:,} QoS 1 messages of 100 B, publisher "
          f"window {args.window}")
    cols = [("scenario", 18), ("msgs/s", 8), ("p50 ms", 7), ("p99 ms", 7), ("cpu us/msg", 10),
            ("handed", 7), ("B/waiting", 9), ("drain msg/s", 11)]
    f = figure
    print_table(cols, [[r["name"], f(r["rate"]), f(r["p50"], "{:.2f}"), f(r["p99"], "{:.2f}"),
                        f(r["cpu_us"]), f(r["handed"]), f(r.get("bytes_waiting")),
                        f(r.get("drain"))] for r in rows])
    ok = all(r["acked"] == args.count and r["handed"] == r["acked"] for r in rows)
    if not ok:
        print("FAILED: a row did not finish, or its subscriber did not get every message")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

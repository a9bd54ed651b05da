"""One relay serving many MQTT devices, next to the same devices on a router directly
(docs/relay.md).

Run: `python -m benchmarks.relay_clients [--devices 1000 --messages 20000]` (`--quick`: a
smoke run).

A router A and a relay R (`exactmesh relay`, with a store) linked to it. N devices (raw
sockets, MQTT 3.1.1, persistent sessions, client ids dev-0 ...) each subscribe at QoS 1 to
their own topic `fleet/I`; one paho publisher at A sends M messages round the devices' topics
(100-byte payloads, QoS 1, window 20). Rows:

- `present, direct`: the devices connected to A and taking their messages;
- `present, relay`: the same devices connected to R instead;
- `away, relay`: the devices gone (persistent sessions at R): each PUBACK once R has the copy
  on disk; then they come back and take what R stored.

Printed per row: messages/s at the publisher (first publish to last PUBACK), CPU
microseconds per message of A and of R, and for the away row the memory per waiting delivery
at A (the origin) and at R, R's CPU per stored message (its store write included) and the
hand-over rate. Every device must get its messages once each, in order.
"""

from __future__ import annotations

import argparse
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import figure, free_port, print_table
from benchmarks.mqtt import READY_TIMEOUT_S, proc_cpu_s, stop, wait_port
from benchmarks.relay_absent import _spawn
from benchmarks.relay_router import _rss_kib
from mqtt_edge.codec import encode
from mqtt_edge.packets import Connect

SECRET = "relay-clients-bench"
PAYLOAD = 100


class Fleet:
    """N devices on raw sockets, driven from one thread with a selector."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.socks: list[socket.socket] = []
        self.got: list[list[int]] = [[] for _ in range(n)]

    def connect(self, port: int) -> None:
        self.socks = []
        for i in range(self.n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(encode(Connect(f"dev-{i}", 4, False, 600), 4))
            self.socks.append(s)
        for s in self.socks:
            if _read_exactly(s, 4)[0] != 0x20:
                raise RuntimeError("a device got no CONNACK")

    def subscribe(self) -> None:
        for i, s in enumerate(self.socks):
            topic = f"fleet/{i}".encode()
            body = b"\x00\x01" + len(topic).to_bytes(2, "big") + topic + b"\x01"
            s.sendall(bytes((0x82, len(body))) + body)
        for s in self.socks:
            if _read_exactly(s, 5)[0] != 0x90:
                raise RuntimeError("a device got no SUBACK")

    def leave(self) -> None:
        for s in self.socks:
            s.sendall(b"\xe0\x00")  # DISCONNECT: the persistent session stays
            s.close()
        self.socks = []

    def take(self, count: int, timeout: float, stop_event: threading.Event | None = None
             ) -> float:
        """Read PUBLISHes (answering PUBACK) until `count` arrived; returns when the last
        did (monotonic), or raises after `timeout`."""
        sel = selectors.DefaultSelector()
        bufs = [bytearray() for _ in self.socks]
        for i, s in enumerate(self.socks):
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
        total, last = sum(map(len, self.got)), 0.0
        deadline = time.monotonic() + timeout
        try:
            while total < count:
                if time.monotonic() > deadline or (stop_event and stop_event.is_set()):
                    raise RuntimeError(f"the devices got {total} of {count} messages")
                for key, _ in sel.select(0.2):
                    i = key.data
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        raise RuntimeError(f"dev-{i} lost its connection")
                    bufs[i] += data
                    total += self._packets(i, bufs[i])
                    last = time.monotonic()
        finally:
            sel.close()
            for s in self.socks:
                s.setblocking(True)
        return last

    def _packets(self, i: int, buf: bytearray) -> int:
        taken = 0
        while len(buf) >= 2:
            length, shift, pos = 0, 0, 1
            while True:
                if pos >= len(buf):
                    return taken
                b = buf[pos]
                length |= (b & 0x7F) << shift
                shift += 7
                pos += 1
                if not b & 0x80:
                    break
            if len(buf) < pos + length:
                return taken
            first, body = buf[0], bytes(buf[pos:pos + length])
            del buf[:pos + length]
            if first >> 4 != 3:
                continue
            tlen = int.from_bytes(body[:2], "big")
            pid = body[2 + tlen:4 + tlen]
            self.got[i].append(int.from_bytes(body[4 + tlen:12 + tlen], "big"))
            self.socks[i].sendall(b"\x40\x02" + pid)
            taken += 1
        return taken


def _read_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise RuntimeError("the server closed a device's connection")
        out += chunk
    return out


def publish(port: int, devices: int, messages: int, window: int, timeout: float) -> float:
    """Messages 0..M-1 round the devices' topics at QoS 1; returns messages/s."""
    import paho.mqtt.client as mqtt

    done = threading.Event()
    acked = [0]
    sem = threading.Semaphore(window)

    def on_publish(*_: Any) -> None:
        acked[0] += 1
        sem.release()
        if acked[0] == messages:
            done.set()

    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"fleet-pub-{time.time_ns()}")
    c.on_publish = on_publish
    c.max_inflight_messages_set(window)
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        t0 = time.monotonic()
        for k in range(messages):
            if not sem.acquire(timeout=timeout):
                raise RuntimeError(f"the publisher's window stayed full ({acked[0]} acked)")
            c.publish(f"fleet/{k % devices}", k.to_bytes(8, "big").ljust(PAYLOAD, b"."), qos=1)
        if not done.wait(timeout):
            raise RuntimeError(f"{acked[0]} of {messages} acknowledged")
        return messages / (time.monotonic() - t0)
    finally:
        c.loop_stop()
        c.disconnect()


def _check(fleet: Fleet, devices: int, messages: int) -> None:
    for i, seqs in enumerate(fleet.got):
        want = list(range(i, messages, devices))
        if seqs != want:
            raise RuntimeError(f"dev-{i} got {len(seqs)} messages, {len(want)} expected, "
                               f"in order and once each: {seqs == sorted(set(seqs))}")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mq = {r: free_port() for r in "AR"}
        amqp = {r: free_port() for r in "AR"}
        mesh_a = free_port()
        common = ["--cluster-secret", SECRET, "--log-level", "warning"]
        procs = {
            "A": _spawn(["router", "--id", "A", "--amqp", f"127.0.0.1:{amqp['A']}", "--mqtt",
                         f"127.0.0.1:{mq['A']}", "--listen", f"127.0.0.1:{mesh_a}", *common],
                        work / "A.log"),
            "R": _spawn(["relay", "--id", "R", "--amqp", f"127.0.0.1:{amqp['R']}", "--mqtt",
                         f"127.0.0.1:{mq['R']}", "--mesh", f"127.0.0.1:{mesh_a}", "--store",
                         str(work / "store"), *common], work / "R.log"),
        }
        try:
            for r, p in procs.items():
                if not wait_port(mq[r], p, READY_TIMEOUT_S):
                    raise RuntimeError(f"{r} did not start: {(work / f'{r}.log').read_text()}")
            return [_present(procs, mq["A"], mq["A"], "present, direct", args),
                    _present(procs, mq["R"], mq["A"], "present, relay", args),
                    _away(procs, mq["R"], mq["A"], args)]
        finally:
            for p in procs.values():
                stop(p)


def _cpu(procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, float]:
    return {r: proc_cpu_s(p.pid) for r, p in procs.items()}


def _present(procs: dict[str, subprocess.Popen[bytes]], at: int, pub_port: int, name: str,
             args: argparse.Namespace) -> dict[str, Any]:
    fleet = Fleet(args.devices)
    fleet.connect(at)
    fleet.subscribe()
    wait_routed(at, pub_port)
    stop_event = threading.Event()
    result: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: result.update(
        last=fleet.take(args.messages, args.max_seconds, stop_event)), daemon=True)
    cpu0 = _cpu(procs)
    reader.start()
    try:
        rate = publish(pub_port, args.devices, args.messages, args.window, args.max_seconds)
    finally:
        reader.join(args.max_seconds)
        stop_event.set()
    cpu = {r: (c - cpu0[r]) / args.messages * 1e6 for r, c in _cpu(procs).items()}
    _check(fleet, args.devices, args.messages)
    fleet.leave()
    _forget_sessions(at, args.devices)
    return {"name": name, "rate": rate, "cpu_a": cpu["A"], "cpu_r": cpu["R"]}


def _away(procs: dict[str, subprocess.Popen[bytes]], at: int, pub_port: int,
          args: argparse.Namespace) -> dict[str, Any]:
    fleet = Fleet(args.devices)
    fleet.connect(at)
    fleet.subscribe()
    fleet.leave()
    wait_routed(at, pub_port)
    rss0 = {r: _rss_kib(p.pid) for r, p in procs.items()}
    cpu0 = _cpu(procs)
    rate = publish(pub_port, args.devices, args.messages, args.window, args.max_seconds)
    cpu = {r: (c - cpu0[r]) / args.messages * 1e6 for r, c in _cpu(procs).items()}
    grown = {r: (_rss_kib(p.pid) - rss0[r]) * 1024 / args.messages for r, p in procs.items()}
    t0 = time.monotonic()
    fleet.connect(at)
    last = fleet.take(args.messages, args.max_seconds + 60)
    _check(fleet, args.devices, args.messages)
    fleet.leave()
    return {"name": "away, relay", "rate": rate, "cpu_a": cpu["A"], "cpu_r": cpu["R"],
            "bytes_a": grown["A"], "bytes_r": grown["R"],
            "drain": args.messages / (last - t0) if last > t0 else 0.0}


def wait_routed(sub_port: int, pub_port: int) -> None:
    """The devices' subscriptions are known where the publisher is: a probe subscribed
    after them at the devices' server gets a probe published at the publisher's (gossip
    keeps a link's order)."""
    import paho.mqtt.client as mqtt

    got = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fleet-probe-sub")
    sub.on_message = lambda *_: got.set()
    sub.connect("127.0.0.1", sub_port)
    sub.loop_start()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fleet-probe-pub")
    pub.connect("127.0.0.1", pub_port)
    pub.loop_start()
    try:
        sub.subscribe("probe/fleet", qos=0)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not got.wait(0.2):
            if time.monotonic() > deadline:
                raise RuntimeError("no probe crossed from the publisher to the devices")
            pub.publish("probe/fleet", b"probe", qos=0)
    finally:
        for c in (sub, pub):
            c.loop_stop()
            c.disconnect()


def _forget_sessions(port: int, n: int) -> None:
    """End the persistent sessions (a clean connect of each id), so the next row starts
    without them."""
    for i in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(encode(Connect(f"dev-{i}", 4, True, 60), 4))
            _read_exactly(s, 4)
            s.sendall(b"\xe0\x00")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--window", type=int, default=20, help="the publisher's QoS 1 window")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 50 devices, 500 msgs")
    args = ap.parse_args(argv)
    if args.quick:
        args.devices, args.messages, args.max_seconds = 50, 500, 30.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if 2 * args.devices + 64 > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * args.devices + 64), hard))
    rows = run(args)
    print(f"one relay, {args.devices:,} MQTT devices (persistent sessions, one topic each), "
          f"{args.messages:,} QoS 1 messages of {PAYLOAD} B from one publisher at router A, "
          f"window {args.window}")
    cols = [("scenario", 16), ("msgs/s", 8), ("A us/msg", 9), ("R us/msg", 9),
            ("A B/waiting", 11), ("R B/waiting", 11), ("hand-over msg/s", 15)]
    f = figure
    print_table(cols, [[r["name"], f(r["rate"]), f(r["cpu_a"]), f(r["cpu_r"]),
                        f(r.get("bytes_a")), f(r.get("bytes_r")), f(r.get("drain"))]
                       for r in rows])
    print("\nevery device got its messages once each, in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())

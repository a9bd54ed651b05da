"""Lean AMQP 1.0 load clients for the exactmesh benchmark.

Run as separate processes so that client CPU never competes with the runner:

    python -m benchmarks.loadclient pub --url 127.0.0.1:5672 --topic bench/t --count 10000
    python -m benchmarks.loadclient sub --url 127.0.0.1:5672 --filter 'bench/#' --expect 10000

proton's Container/BlockingConnection spend 100-220 us of CPU per message, which would
make the client the bottleneck. So these clients drive proton's engine themselves over a
plain non-blocking socket, and on the per-message path call proton's cffi module
directly (no Python wrapper objects per delivery, one flush per batch of events).

Each message body carries a marker, the publisher id and a sequence number, so a
subscriber can check exactly-once delivery end to end (independent of how the router
numbers its delivery tags).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

import proton
from cproton_ffi import ffi, lib

# Body layout: MARK | pub id (u32) | seq (u64) | padding. Subscribers find MARK with
# bytes.find, which survives any re-encoding of the message header by the router.
MARK = b"EXMB"
KEY_LEN = 12  # pub id + seq
IO_CHUNK = 65536
RECV_BUF = 1 << 20  # one delivery must fit; 1 MiB is far above the benchmark's sizes

PN_DELIVERY = lib.PN_DELIVERY
PN_LINK_REMOTE_OPEN = lib.PN_LINK_REMOTE_OPEN
PN_ACCEPTED = lib.PN_ACCEPTED
OUTCOMES = {
    lib.PN_ACCEPTED: "accepted",
    lib.PN_REJECTED: "rejected",
    lib.PN_RELEASED: "released",
    lib.PN_MODIFIED: "modified",
}
# Events after which the peer will not talk to us any more.
FATAL_EVENTS = {
    lib.PN_LINK_REMOTE_CLOSE,
    lib.PN_LINK_REMOTE_DETACH,
    lib.PN_SESSION_REMOTE_CLOSE,
    lib.PN_CONNECTION_REMOTE_CLOSE,
    lib.PN_TRANSPORT_ERROR,
    lib.PN_TRANSPORT_CLOSED,
}

_stop_requested = False


def _on_sigterm(_signum: int, _frame: Any) -> None:
    # The runner sends SIGTERM to collect a partial report; finish the loop, then report.
    global _stop_requested
    _stop_requested = True


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def parse_hostport(url: str) -> tuple[str, int]:
    url = url.removeprefix("amqp://")
    host, _, port = url.rpartition(":")
    return host or "127.0.0.1", int(port or 5672)


def quantiles_us(samples_ns: list[int], points: int = 1001) -> list[float]:
    """`points` evenly spaced quantiles (0..1); the runner pools these across publishers."""
    if not samples_ns:
        return []
    s = sorted(samples_ns)
    last = len(s) - 1
    return [s[round(i * last / (points - 1))] / 1000.0 for i in range(points)]


class Engine:
    """One AMQP connection: a proton engine pumped by hand over a non-blocking socket."""

    def __init__(self, url: str, container_id: str, sasl: bool) -> None:
        host, port = parse_hostport(url)
        self.conn = proton.Connection()
        self.conn.container = container_id
        self.conn.hostname = host
        self.collector = proton.Collector()
        self.conn.collect(self.collector)
        self.transport = proton.Transport()
        if sasl:
            self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.transport.bind(self.conn)
        self.t = self.transport._impl
        self.coll = self.collector._impl
        self.sock = socket.create_connection((host, port), timeout=10)
        # Nagle would hold back small dispositions and inflate latency.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self._want_write = False
        self.tail_closed = False
        self.head_closed = False
        self._rbuf = bytearray(IO_CHUNK)
        self._rbuf_c = ffi.from_buffer(self._rbuf)
        self._wbuf = bytearray(IO_CHUNK)
        self._wbuf_c = ffi.from_buffer(self._wbuf)
        self._wview = memoryview(self._wbuf)
        self._stdin_cb: Any = None
        self.conn.open()

    def watch_stdin(self, callback: Any) -> None:
        self.sel.register(sys.stdin.fileno(), selectors.EVENT_READ, callback)
        self._stdin_cb = callback

    def unwatch_stdin(self) -> None:
        if self._stdin_cb is not None:
            self.sel.unregister(sys.stdin.fileno())
            self._stdin_cb = None

    @property
    def closed(self) -> bool:
        return self.tail_closed and self.head_closed

    def flush(self) -> None:
        """Write what the engine has produced until the socket would block."""
        t = self.t
        while not self.head_closed:
            pending = lib.pn_transport_pending(t)
            if pending < 0:
                self.head_closed = True
                break
            if pending == 0:
                break
            n = lib.pn_transport_peek(t, self._wbuf_c, min(pending, IO_CHUNK))
            try:
                sent = self.sock.send(self._wview[:n])
            except BlockingIOError:
                break
            except OSError:
                lib.pn_transport_close_head(t)
                self.head_closed = True
                break
            lib.pn_transport_pop(t, sent)
        self._set_write_interest(lib.pn_transport_pending(t) > 0 and not self.head_closed)

    def _set_write_interest(self, want: bool) -> None:
        # Only touch epoll when interest changes; a syscall per loop costs measurable CPU.
        if want != self._want_write:
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.sel.modify(self.sock, mask)
            self._want_write = want

    def read(self) -> None:
        t = self.t
        cap = lib.pn_transport_capacity(t)
        if cap < 0:
            self.tail_closed = True
            return
        if cap == 0:
            return
        try:
            n = self.sock.recv_into(self._rbuf, min(cap, IO_CHUNK))
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if n == 0:
            lib.pn_transport_close_tail(t)
            self.tail_closed = True
            return
        lib.pn_transport_push(t, self._rbuf_c, n)

    def pump(self, timeout: float) -> None:
        """Flush output, wait up to `timeout` for input, feed it to the engine."""
        self.flush()
        lib.pn_transport_tick(self.t, int(time.monotonic() * 1000))
        for key, mask in self.sel.select(timeout):
            if key.fileobj is self.sock:
                if mask & selectors.EVENT_READ:
                    self.read()
            elif key.data is not None:
                key.data()

    def close(self, deadline_s: float = 2.0) -> None:
        """Close politely so the peer sees our last dispositions, but never wait long."""
        self.conn.close()
        end = time.monotonic() + deadline_s
        while not self.closed and time.monotonic() < end:
            self.pump(0.05)
            self.discard_events()
        self.sock.close()
        self.sel.close()

    def discard_events(self) -> None:
        while lib.pn_collector_peek(self.coll):
            lib.pn_collector_pop(self.coll)

    def describe_close(self, ev: Any) -> str:
        """Human-readable reason for a fatal event (control path, so wrappers are fine)."""
        event = proton.Event.wrap(ev)
        parts = [str(event.type)]
        for obj in (event.link, event.session, event.connection):
            cond = getattr(obj, "remote_condition", None)
            if cond is not None:
                parts.append(f"{cond.name}: {cond.description}")
                break
        cond = getattr(event.transport, "condition", None)
        if cond is not None:
            parts.append(f"transport {cond.name}: {cond.description}")
        return " ".join(parts)


class Publisher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.eng = Engine(args.url, f"bench-pub-{args.pub_id}-{os.getpid()}", args.sasl)
        ssn = self.eng.conn.session()
        ssn.open()
        self.link = ssn.sender(f"bench-pub-{args.pub_id}")
        self.link.target.address = args.topic
        self.link.snd_settle_mode = proton.Link.SND_UNSETTLED
        self.link.rcv_settle_mode = proton.Link.RCV_FIRST
        if args.guarantee:  # docs/guarantees.md, "At least once"
            self.link.properties = {proton.symbol("guarantee"): args.guarantee}
        self.link.open()
        self.link_c = self.link._impl
        body = MARK + struct.pack(">IQ", args.pub_id, 0)
        body += b"x" * max(0, args.size - len(body))
        # Encode once; per message only the sequence number is patched in place.
        self.msg = bytearray(proton.Message(body=body).encode())
        self.seq_offset = self.msg.find(MARK) + 8
        self.msg_c = ffi.from_buffer(self.msg)
        self.tag = bytearray(8)
        self.tag_c = ffi.from_buffer(self.tag)
        self.inflight: dict[Any, int] = {}  # delivery pointer -> send time (ns)
        self.counts = {name: 0 for name in (*OUTCOMES.values(), "other")}
        self.latencies_ns: list[int] = []
        self.sent = 0
        self.max_in_flight = 0
        self.outcomes = 0
        self.attached = False
        self.go = not args.wait_go
        self.error = ""

    def _on_stdin(self) -> None:
        # Any input (or EOF) from the runner means "start sending now".
        os.read(sys.stdin.fileno(), 4096)
        self.go = True
        self.eng.unwatch_stdin()

    def drain(self) -> None:
        """Handle every queued event; the caller flushes once afterwards."""
        coll = self.eng.coll
        now = time.perf_counter_ns()
        while ev := lib.pn_collector_peek(coll):
            ty = lib.pn_event_type(ev)
            if ty == PN_DELIVERY:
                self._on_delivery(lib.pn_event_delivery(ev), now)
            elif ty == PN_LINK_REMOTE_OPEN:
                self.attached = True
            elif ty in FATAL_EVENTS and not self.error:
                self.error = self.eng.describe_close(ev)
            lib.pn_collector_pop(coll)

    def _on_delivery(self, d: Any, now: int) -> None:
        if not lib.pn_delivery_updated(d):
            return
        state = lib.pn_delivery_remote_state(d)
        if state == PN_ACCEPTED:
            self.counts["accepted"] += 1
            self.latencies_ns.append(now - self.inflight.pop(d))
        elif state in OUTCOMES:
            self.counts[OUTCOMES[state]] += 1
            self.inflight.pop(d, None)
        elif lib.pn_delivery_settled(d):
            self.counts["other"] += 1
            self.inflight.pop(d, None)
        else:
            return  # non-terminal state (e.g. received): a later event brings the outcome
        self.outcomes += 1
        lib.pn_delivery_settle(d)

    def send_batch(self) -> None:
        """Fill the window as far as link credit allows."""
        room = min(
            lib.pn_link_credit(self.link_c),
            self.args.window - len(self.inflight),
            self.args.count - self.sent,
        )
        if room <= 0:
            return
        link, msg_c, size = self.link_c, self.msg_c, len(self.msg)
        tag_struct = (8, self.tag_c)
        now = time.perf_counter_ns()  # all of the batch leaves in the same flush
        for seq in range(self.sent, self.sent + room):
            struct.pack_into(">Q", self.tag, 0, seq)
            struct.pack_into(">Q", self.msg, self.seq_offset, seq)
            d = lib.pn_delivery(link, tag_struct)
            lib.pn_link_send(link, msg_c, size)
            lib.pn_link_advance(link)
            self.inflight[d] = now
        self.sent += room
        # The router's credit may cap the window below --window; report what really flew.
        self.max_in_flight = max(self.max_in_flight, len(self.inflight))

    def wait_attached(self, deadline: float) -> None:
        while not self.attached and not self.error and time.monotonic() < deadline:
            self.eng.pump(0.1)
            self.drain()
        if not self.attached and not self.error:
            self.error = "timed out waiting for the link to attach"

    def run(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.args.deadline_s
        self.wait_attached(deadline)
        if self.args.wait_go and not self.error:
            print("attached", flush=True)
            self.eng.watch_stdin(self._on_stdin)
        while not self.go and not self.error and not _stop_requested:
            if time.monotonic() > deadline:
                self.error = "timed out waiting for go"
            self.eng.pump(0.1)
            self.drain()
        cpu0, wall0, t0 = cpu_seconds(), time.time(), time.perf_counter()
        self._main_loop(deadline)
        elapsed = time.perf_counter() - t0
        if self.args.wait_go:
            print("done", flush=True)  # ends the runner's measurement window
        report = self._report(elapsed, cpu_seconds() - cpu0, wall0)
        self.eng.close()
        return report

    def _main_loop(self, deadline: float) -> None:
        eng, count = self.eng, self.args.count
        while self.outcomes < count and not self.error and not _stop_requested:
            self.send_batch()
            eng.pump(0.2)
            self.drain()
            if eng.closed and not self.error:
                self.error = "connection closed"
            if time.monotonic() > deadline:
                self.error = self.error or f"deadline {self.args.deadline_s}s reached"
        eng.flush()  # the settles of the last outcomes

    def _report(self, elapsed: float, cpu: float, wall0: float) -> dict[str, Any]:
        lat = sorted(self.latencies_ns)
        q = quantiles_us(lat)
        acc = self.counts["accepted"]
        return {
            "role": "pub",
            "pub_id": self.args.pub_id,
            "topic": self.args.topic,
            "sent": self.sent,
            **self.counts,
            "unsettled_at_end": len(self.inflight),
            "max_in_flight": self.max_in_flight,
            "start_wall": wall0,
            "end_wall": wall0 + elapsed,
            "elapsed_s": elapsed,
            "msgs_per_s": acc / elapsed if elapsed > 0 else 0.0,
            "latency_us": {"p50": q[500], "p99": q[990], "max": q[-1]} if q else {},
            "latency_quantiles_us": q,
            "cpu_s": cpu,
            "cpu_us_per_msg": cpu * 1e6 / max(1, self.outcomes),
            "cpu_total_s": cpu_seconds(),
            "error": self.error,
        }


class Subscriber:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.eng = Engine(args.url, f"bench-sub-{os.getpid()}", args.sasl)
        ssn = self.eng.conn.session()
        ssn.open()
        self.link = ssn.receiver(f"bench-sub-{os.getpid()}")
        self.link.source.address = args.filter
        self.link.open()
        self.link_c = self.link._impl
        self.buf = bytearray(RECV_BUF)
        self.buf_c = ffi.from_buffer(self.buf)
        self.seen: set[bytes] = set()
        self.received = 0
        self.duplicates = 0
        self.unparsed = 0
        self.unflowed = 0  # credit used since the last top-up
        self.attached = False
        self.cpu0 = cpu_seconds()
        self.done_at: float | None = None
        self.first_wall = 0.0
        self.last_wall = 0.0
        self.error = ""

    def drain(self) -> None:
        coll = self.eng.coll
        while ev := lib.pn_collector_peek(coll):
            ty = lib.pn_event_type(ev)
            if ty == PN_DELIVERY:
                self._on_delivery(lib.pn_event_delivery(ev))
            elif ty == PN_LINK_REMOTE_OPEN and not self.attached:
                self._on_attached()
            elif ty in FATAL_EVENTS and not self.error:
                self.error = self.eng.describe_close(ev)
            lib.pn_collector_pop(coll)

    def _on_attached(self) -> None:
        self.attached = True
        self.cpu0 = cpu_seconds()  # exclude interpreter start-up and connection set-up
        lib.pn_link_flow(self.link_c, self.args.credit)
        print("attached", flush=True)

    def _on_delivery(self, d: Any) -> None:
        if not lib.pn_delivery_readable(d) or lib.pn_delivery_partial(d):
            return  # the rest of a multi-frame message is still on its way
        link = lib.pn_delivery_link(d)
        n = lib.pn_link_recv(link, self.buf_c, RECV_BUF)
        lib.pn_link_advance(link)
        self._count(d, n)
        lib.pn_delivery_update(d, PN_ACCEPTED)
        lib.pn_delivery_settle(d)
        self.unflowed += 1
        # Top up in batches: one flow frame per half window, not one per message.
        if self.unflowed * 2 >= self.args.credit:
            lib.pn_link_flow(link, self.unflowed)
            self.unflowed = 0

    def _count(self, d: Any, n: int) -> None:
        self.received += 1
        i = self.buf.find(MARK, 0, max(n, 0))
        if i >= 0:
            key = bytes(self.buf[i + 4 : i + 4 + KEY_LEN])
        else:
            self.unparsed += 1  # fall back to the delivery tag
            tag = lib.pn_delivery_tag(d)
            key = b"tag:" + bytes(ffi.buffer(tag.start, tag.size))
        if key in self.seen:
            self.duplicates += 1
        else:
            self.seen.add(key)

    def run(self) -> dict[str, Any]:
        signal.signal(signal.SIGTERM, _on_sigterm)
        deadline = time.monotonic() + self.args.deadline_s
        while not self.error and not _stop_requested and time.monotonic() < deadline:
            before = self.received
            self.eng.pump(0.2)
            self.drain()
            if self.received != before:
                self._note_progress(before)
            if self.eng.closed and not self.error:
                self.error = "connection closed"
            if self.done_at is not None and time.monotonic() >= self.done_at:
                break
        self.eng.flush()  # the dispositions of the last deliveries
        report = self._report(cpu_seconds() - self.cpu0)
        self.eng.close()
        return report

    def _note_progress(self, before: int) -> None:
        now = time.time()
        if before == 0:
            self.first_wall = now
        self.last_wall = now
        if self.done_at is None and len(self.seen) >= self.args.expect:
            # Linger briefly so that duplicates sent right after the last message are seen.
            self.done_at = time.monotonic() + self.args.linger_s

    def _missing_seqs(self) -> int:
        """How many of publisher 0's sequence numbers 0 .. expect - 1 never arrived (for a
        source that numbers its messages itself: benchmarks/spark.py)."""
        return sum(1 for seq in range(self.args.expect)
                   if struct.pack(">IQ", 0, seq) not in self.seen)

    def _report(self, cpu: float) -> dict[str, Any]:
        error = self.error
        if not error and len(self.seen) < self.args.expect:
            error = "stopped early" if _stop_requested else "deadline reached"
        return {
            "role": "sub",
            "filter": self.args.filter,
            "expect": self.args.expect,
            "received": self.received,
            "distinct": len(self.seen),
            "duplicates": self.duplicates,
            "missing": max(0, self.args.expect - len(self.seen)),
            **({"missing_seqs": self._missing_seqs()} if self.args.check_seqs else {}),
            "unparsed": self.unparsed,
            "first_wall": self.first_wall,
            "last_wall": self.last_wall,
            "elapsed_s": max(0.0, self.last_wall - self.first_wall),
            "cpu_s": cpu,
            "cpu_us_per_msg": cpu * 1e6 / max(1, self.received),
            "cpu_total_s": cpu_seconds(),
            "error": error,
        }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadclient", description=__doc__)
    sp = p.add_subparsers(dest="role", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", required=True, help="host:port of the router")
    common.add_argument("--json-out", help="write the JSON report here (default: stdout)")
    common.add_argument("--deadline-s", type=float, default=120.0)
    # The router's proton transport expects a SASL layer (ANONYMOUS); --no-sasl is for
    # peers that speak bare AMQP.
    common.add_argument("--no-sasl", dest="sasl", action="store_false", help="skip SASL")
    pub = sp.add_parser("pub", parents=[common])
    pub.add_argument("--topic", required=True)
    pub.add_argument("--count", type=int, required=True)
    pub.add_argument("--window", type=int, default=200, help="max unsettled deliveries")
    pub.add_argument("--size", type=int, default=100, help="message body bytes")
    pub.add_argument("--pub-id", type=int, default=0)
    pub.add_argument("--guarantee", choices=["exactly-once", "at-least-once"],
                     help="the link property guarantee (default: none sent, exactly once)")
    pub.add_argument(
        "--wait-go", action="store_true", help="print 'attached', then wait for a stdin line"
    )
    sub = sp.add_parser("sub", parents=[common])
    sub.add_argument("--filter", required=True)
    sub.add_argument("--credit", type=int, default=500)
    sub.add_argument("--expect", type=int, required=True)
    sub.add_argument("--linger-s", type=float, default=0.3)
    sub.add_argument("--check-seqs", action="store_true",
                     help="also report missing_seqs: publisher 0's numbers 0 .. expect - 1 "
                          "not received")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    client = Publisher(args) if args.role == "pub" else Subscriber(args)
    report = client.run()
    text = json.dumps(report)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text)
    else:
        print(text, flush=True)
    return 0 if not report["error"] else 1


if __name__ == "__main__":
    sys.exit(main())

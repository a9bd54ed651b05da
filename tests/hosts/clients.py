"""Client agents: one SDK publisher or subscriber per process, run inside a client host.

    python -m tests.hosts.clients pub --id p1 --urls amqps://10.231.7.1:5671,... \\
        --topic devices/bed/commands/p1 --rate 20 --state-dir DIR --ca CA --user ingest
    python -m tests.hosts.clients sub --id s1 --urls ... --filter 'devices/#' --state-dir DIR

The password comes in the environment (XM_PASSWORD). Each agent writes one JSON object a
line to stdout, stamped with `time.monotonic()` (one clock for every namespace of the
machine), which the controller turns into the history (tests/hosts/history.py):

- publisher: `invoke` (pub, inc, seq), then `ok` or `fail` (cond, failed, in_doubt, desc);
- subscriber: `recv` (sub, pub, inc, seq, red: the SDK's redelivered flag, dc, and the
  router's delivery tag);
- both: `adv` (the SDK's advisories: connected, disconnected, no response), `ready`,
  and `stats` (the SDK's counts) when it stops; `error` if it cannot go on.

A message body is `PUB.INC.SEQ`: INC (the publisher's incarnation, from `--inc`) tells apart
two runs of a publisher that start their sequence numbers again (an in-memory store).
The agent stops when its stdin says `stop` (or closes): a publisher stops sending, flushes
for `--flush-timeout` seconds and reports its stats; a subscriber reports its stats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from amqp_edge.client import (
    Advisory,
    ClientError,
    Failure,
    Login,
    MemoryPublisherStore,
    Outcome,
    Publisher,
    Subscriber,
)

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"e": event, "t": time.monotonic(), **fields}, default=str)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def body_of(pub: str, inc: int, seq: int) -> str:
    return f"{pub}.{inc}.{seq}"


def parse_body(body: Any) -> tuple[str, int, int] | None:
    text = body.decode() if isinstance(body, bytes) else str(body)
    parts = text.rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def _stop_on_stdin(stop: threading.Event) -> None:
    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=run, daemon=True).start()


def _login(args: argparse.Namespace) -> Login | None:
    if not args.user and not args.ca:
        return None
    return Login(args.user, os.environ.get("XM_PASSWORD"), ca=args.ca,
                 verify_name=not args.no_verify_name)


def _advisory(who: str) -> Any:
    def on_advisory(a: Advisory) -> None:
        emit("adv", who=who, kind=a.kind, url=a.url, detail=a.detail)

    return on_advisory


def _idle(args: argparse.Namespace) -> dict[str, float]:
    return {} if args.idle_timeout is None else {"idle_timeout": args.idle_timeout}


def _names(info: dict | None, key: str) -> list[str]:
    value = (info or {}).get(key) or []
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def run_publisher(args: argparse.Namespace) -> int:
    stop = threading.Event()
    _stop_on_stdin(stop)
    name, inc = args.id, args.inc

    def on_outcome(seq: int, outcome: Outcome) -> None:
        if outcome.state == "accepted":
            emit("ok", pub=name, inc=inc, seq=seq)
            return
        info = {str(k): v for k, v in (outcome.info or {}).items()}
        failure = Failure(seq, outcome.condition or "", outcome.description or "")
        in_doubt = sorted(set(failure.in_doubt) | set(_names(info, "in_doubt")))
        emit("fail", pub=name, inc=inc, seq=seq, cond=outcome.condition,
             failed=_names(info, "failed"), in_doubt=in_doubt,
             succeeded=_names(info, "succeeded"), pending=_names(info, "pending"),
             desc=outcome.description)

    store = MemoryPublisherStore() if args.memory else None
    pub = Publisher(args.urls.split(","), args.topic, id=name,
                    state_dir=None if args.memory else args.state_dir, store=store,
                    window=args.window, on_outcome=on_outcome, login=_login(args),
                    on_advisory=_advisory(name), **_idle(args))
    emit("ready", who=name)
    period = 1.0 / args.rate
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            # The load's pace (not a synchronisation): one message every `period` seconds.
            if stop.wait(max(0.0, next_at - time.monotonic())):
                break
            next_at += period
            seq = pub.next_seq
            invoked = time.monotonic()
            try:
                got = pub.send(body_of(name, inc, seq), timeout=0.5)
            except TimeoutError:
                next_at = time.monotonic()  # the window is full: no burst once it opens
                continue
            emit("invoke", pub=name, inc=inc, seq=got, at=invoked)
        try:
            pub.flush(timeout=args.flush_timeout)
        except TimeoutError as err:
            emit("error", who=name, error=str(err))
        emit("stats", who=name, **pub.stats(), failures=len(pub.failures()))
    except ClientError as err:
        emit("error", who=name, error=f"{type(err).__name__}: {err}")
        return 1
    finally:
        pub.close()
    return 0


def run_subscriber(args: argparse.Namespace) -> int:
    stop = threading.Event()
    _stop_on_stdin(stop)
    name = args.id
    sub = Subscriber(args.urls.split(","), args.filter, id=name, state_dir=args.state_dir,
                     durable=True, timeout=args.timeout, login=_login(args),
                     on_advisory=_advisory(name), **_idle(args))
    emit("ready", who=name)
    try:
        while not stop.is_set():
            msg = sub.receive(timeout=0.1)
            if msg is None:
                continue
            key = parse_body(msg.body)
            if key is None:
                emit("recv", sub=name, pub=None, inc=0, seq=0, red=msg.redelivered,
                     dc=msg.delivery_count, body=str(msg.body)[:80])
            else:
                emit("recv", sub=name, pub=key[0], inc=key[1], seq=key[2],
                     red=msg.redelivered, dc=msg.delivery_count, tag=msg.tag)
            sub.accept(msg)
        emit("stats", who=name, **sub.stats())
    except ClientError as err:
        emit("error", who=name, error=f"{type(err).__name__}: {err}")
        return 1
    finally:
        sub.close()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.clients")
    parser.add_argument("role", choices=["pub", "sub"])
    parser.add_argument("--id", required=True)
    parser.add_argument("--urls", required=True, help="comma-separated amqp(s)://HOST:PORT")
    parser.add_argument("--topic", default="")
    parser.add_argument("--filter", default="#")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--memory", action="store_true",
                        help="publisher: an in-memory outbox (nothing survives a restart)")
    parser.add_argument("--inc", type=int, default=1, help="publisher incarnation")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second")
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--flush-timeout", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="subscriber: how long the router keeps it while away")
    parser.add_argument("--idle-timeout", type=float,
                        help="AMQP idle timeout: how long a silent router is waited for before "
                             "failing over (default: the SDK's)")
    parser.add_argument("--ca")
    parser.add_argument("--user")
    parser.add_argument("--no-verify-name", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_publisher(args) if args.role == "pub" else run_subscriber(args)


if __name__ == "__main__":
    sys.exit(main())

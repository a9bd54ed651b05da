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
- a subscriber behind a relay (`--relay URL`) that goes away now and then (`--away-every
  S --away-for S`: `disconnect()`, then `connect()`): advisories `away` and `back` too;
- both: `adv` (the SDK's advisories: connected, disconnected, no response), `ready`,
  and `stats` (the SDK's counts) when it stops; `error` if it cannot go on.

A message body is `PUB.INC.SEQ`: INC (the publisher's incarnation, from `--inc`) tells apart
two runs of a publisher that start their sequence numbers again (an in-memory store).
The agent stops when its stdin says `stop` (or closes): a publisher stops sending, flushes
for `--flush-timeout` seconds and reports its stats; a subscriber reports its stats.

`mqtt-pub` and `mqtt-sub` are the same with paho-mqtt (MQTT 5 over TLS, QoS 2, a session that
outlives the connection: clean start off, session expiry 600 s) on one router, `--mqtt
HOST:PORT`. A publisher's outcome is its PUBREC's reason code: `ok` below 0x80, else `fail`
with the reason string (which names at most one subscriber, so no names are recorded); a
subscriber is shown a QoS 2 message at PUBREL (paho) and asks for the mesh's delivery ids
(`exactmesh-delivery-id`), by which it shows a message once and counts the copies it drops
(`duplicates_suppressed`), as the SDK does.
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
DELIVERY_ID = "exactmesh-delivery-id"  # the MQTT user property (docs/mqtt.md)


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
    relay = args.relay or None
    sub = Subscriber(None if relay else args.urls.split(","), args.filter, id=name,
                     relay=relay, state_dir=args.state_dir, durable=True,
                     timeout=args.timeout, login=_login(args), on_advisory=_advisory(name),
                     **_idle(args))
    emit("ready", who=name)
    # A sometimes-connected listener (`--away-every`, behind a relay): the load's pattern,
    # not a synchronisation. It goes away cleanly (disconnect) and comes back (connect).
    back_at = None
    away_at = time.monotonic() + args.away_every if args.away_every else None
    try:
        while not stop.is_set():
            now = time.monotonic()
            if away_at is not None and now >= away_at:
                sub.disconnect()
                emit("adv", who=name, kind="away", url=relay, detail="disconnect() returned")
                away_at, back_at = None, now + args.away_for
            if back_at is not None:
                if stop.wait(max(0.0, back_at - time.monotonic())):
                    break
                sub.connect()
                emit("adv", who=name, kind="back", url=relay, detail="connect()")
                back_at, away_at = None, time.monotonic() + args.away_every
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


def _paho(args: argparse.Namespace, who: str, on_connect: Any = None,
          on_pubrec: Any = None, delivery_ids: bool = False, on_disconnect: Any = None) -> Any:
    """A paho client for this agent, connecting in the background and reconnecting on its
    own (every 0.1-1 s), with its session kept by the router across connections.
    `on_pubrec(mid, reason, properties)` sees every PUBREC: paho 2.2 ignores a PUBREC's
    reason code (it sends PUBREL all the same and reports the PUBCOMP's success)."""
    import ssl

    import paho.mqtt.client as mqtt
    from paho.mqtt import _packet
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    class Client(mqtt.Client):
        def _handle_pubrec(self) -> Any:
            if on_pubrec is not None:
                got = _packet.decode_pubrec(self._in_packet["command"],
                                            self._in_packet["packet"], self._protocol)
                on_pubrec(got.mid, got.reason, got.properties)
            return super()._handle_pubrec()

    c = Client(CallbackAPIVersion.VERSION2, client_id=who, protocol=mqtt.MQTTv5)
    c.tls_set(ca_certs=args.ca, cert_reqs=ssl.CERT_REQUIRED)
    c.tls_insecure_set(True)  # the chain is checked; the certificate names no IP address
    c.username_pw_set(args.user, os.environ.get("XM_PASSWORD"))
    c.reconnect_delay_set(0.1, 1.0)
    c.max_inflight_messages_set(args.window)

    def connected(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        emit("adv", who=who, kind="connected" if not rc.is_failure else "refused",
             url=args.mqtt, detail=str(rc))
        if on_connect is not None and not rc.is_failure:
            on_connect(client)

    def disconnected(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        emit("adv", who=who, kind="disconnected", url=args.mqtt, detail=str(rc))
        if on_disconnect is not None:
            on_disconnect(client)

    c.on_connect, c.on_disconnect = connected, disconnected
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    if delivery_ids:  # docs/mqtt.md: the same id for a message on every router of the mesh
        props.UserProperty = [(DELIVERY_ID, "on")]
    host, _, port = args.mqtt.rpartition(":")
    c.connect_async(host, int(port), keepalive=5, clean_start=False, properties=props)
    c.loop_start()
    return c


def run_mqtt_publisher(args: argparse.Namespace) -> int:
    stop = threading.Event()
    _stop_on_stdin(stop)
    name, inc = args.id, args.inc
    lock = threading.Condition()
    by_mid: dict[int, int] = {}
    refused: dict[int, tuple[Any, Any]] = {}  # mid -> the failed PUBREC's (reason, properties)
    counts = {"sent": 0, "accepted": 0, "failed": 0}

    def on_pubrec(mid: int, rc: Any, props: Any) -> None:
        if rc.is_failure:
            with lock:
                refused[mid] = (rc, props)

    early: dict[int, tuple[Any, Any]] = {}  # outcomes that came before publish() returned

    def on_publish(client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with lock:
            seq = by_mid.pop(mid, None)
            rc, props = refused.pop(mid, (rc, props))
            if seq is None:
                early[mid] = (rc, props)
                return
            lock.notify_all()
        outcome(seq, rc, props)

    def outcome(seq: int, rc: Any, props: Any) -> None:
        if not rc.is_failure:
            counts["accepted"] += 1
            emit("ok", pub=name, inc=inc, seq=seq)
        else:
            counts["failed"] += 1
            reason = getattr(props, "ReasonString", None) if props is not None else None
            emit("fail", pub=name, inc=inc, seq=seq, cond=str(rc), desc=reason or str(rc))

    lost = [0, 0]  # connections lost, and how many of those the publishing loop has seen

    def disconnected(client: Any) -> None:
        lost[0] += 1

    c = _paho(args, name, on_disconnect=disconnected, on_pubrec=on_pubrec)
    c.on_publish = on_publish
    emit("ready", who=name)
    period, next_at, seq = 1.0 / args.rate, time.monotonic(), 0
    while not stop.is_set():
        # The load's pace (not a synchronisation): one message every `period` seconds.
        if stop.wait(max(0.0, next_at - time.monotonic())):
            break
        next_at += period
        with lock:
            busy = len(by_mid) >= args.window
            if lost[0] != lost[1]:
                # A connection was lost: paho resends what was in flight on it once it has
                # reconnected, and a new message could overtake those resends (paho says it
                # is connected before it calls on_connect and resends), so none goes until
                # they are done. Counted at the disconnect, which paho reports before it
                # reconnects: seen at the new connection, it came too late (seed 31).
                busy = busy or bool(by_mid)
                if not busy:
                    lost[1] = lost[0]
        # The window is full, or paho is not connected (it would queue the message and send
        # its queue after the in-flight ones on reconnect, out of order): no burst once it
        # opens.
        if busy or not c.is_connected():
            next_at = time.monotonic()
            continue
        seq += 1
        invoked = time.monotonic()
        # Not under `lock`: paho calls on_publish holding its own lock (a lock-order deadlock).
        info = c.publish(args.topic, body_of(name, inc, seq), qos=2)
        counts["sent"] += 1
        emit("invoke", pub=name, inc=inc, seq=seq, at=invoked)
        with lock:
            came = early.pop(info.mid, None)
            if came is None:
                by_mid[info.mid] = seq
        if came is not None:
            outcome(seq, *came)
    with lock:
        lock.wait_for(lambda: not by_mid, args.flush_timeout)
        left = len(by_mid)
    if left:
        emit("error", who=name, error=f"{left} messages without an outcome after the flush")
    emit("stats", who=name, **counts)
    c.disconnect()
    c.loop_stop()
    return 0


def run_mqtt_subscriber(args: argparse.Namespace) -> int:
    stop = threading.Event()
    _stop_on_stdin(stop)
    name = args.id
    counts = {"received": 0, "duplicates_suppressed": 0}
    seen: set[str] = set()  # delivery ids shown to the application

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        counts["received"] += 1
        props = dict(getattr(msg.properties, "UserProperty", None) or [])
        delivery_id = props.get(DELIVERY_ID, "")
        if delivery_id and delivery_id in seen:
            # A copy the mesh sent again (its first went before a router crash): what the
            # delivery id is for (exactly once for an MQTT device that asks).
            counts["duplicates_suppressed"] += 1
            return
        if delivery_id:
            seen.add(delivery_id)
        key = parse_body(msg.payload)
        if key is None:
            emit("recv", sub=name, pub=None, inc=0, seq=0, red=bool(msg.dup), dc=0,
                 body=str(msg.payload)[:80])
        else:
            emit("recv", sub=name, pub=key[0], inc=key[1], seq=key[2], red=bool(msg.dup),
                 dc=0, tag=delivery_id)

    c = _paho(args, name, on_connect=lambda client: client.subscribe(args.filter, qos=2),
              delivery_ids=True)
    c.on_message = on_message
    emit("ready", who=name)
    stop.wait()
    emit("stats", who=name, **counts)
    c.disconnect()
    c.loop_stop()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.clients")
    parser.add_argument("role", choices=["pub", "sub", "mqtt-pub", "mqtt-sub"])
    parser.add_argument("--id", required=True)
    parser.add_argument("--urls", default="", help="comma-separated amqp(s)://HOST:PORT")
    parser.add_argument("--mqtt", default="", help="mqtt-pub, mqtt-sub: HOST:PORT (TLS)")
    parser.add_argument("--topic", default="")
    parser.add_argument("--filter", default="#")
    parser.add_argument("--state-dir", default="")
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
    parser.add_argument("--relay", default="",
                        help="subscriber: listen through this relay (amqp(s)://HOST:PORT)")
    parser.add_argument("--away-every", type=float, default=0.0,
                        help="subscriber: disconnect after this many seconds connected ...")
    parser.add_argument("--away-for", type=float, default=2.0,
                        help="... and connect again after this many seconds away")
    parser.add_argument("--ca")
    parser.add_argument("--user")
    parser.add_argument("--no-verify-name", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = {"pub": run_publisher, "sub": run_subscriber, "mqtt-pub": run_mqtt_publisher,
           "mqtt-sub": run_mqtt_subscriber}[args.role]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

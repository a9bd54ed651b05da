"""`exactmesh pub` and `exactmesh sub`: the exactly-once client SDK (amqp_edge.client) as
commands.

    exactmesh pub --url amqp://h1:5672,amqp://h2:5672 --topic T --id NAME --state-dir DIR \\
                  [--count N | lines from stdin] [--window W] [--ttl S] [--timeout S]
                  [--relay URL instead of --url] [--handover]
    exactmesh sub --url ... --topic FILTER --id NAME --state-dir DIR [--durable --timeout S] \\
                  [--count N] [--idle-exit S]

`pub --count N` publishes the bodies "NAME-1" .. "NAME-N" in all, across runs: a rerun with
the same id and state directory resends what had no outcome and continues from the persisted
sequence number. Without --count each line of stdin is one message. It prints a one-line JSON
summary to stdout ({"sent", "accepted", "failed", "resent"}: sent, accepted and resent count
this run; failed counts every failure kept in the state directory, each also printed to
stderr as "seq condition description") and exits 0 when every message was accepted, 1 when
some failed.

`sub` prints one JSON object per message per line (topic, message_id, tag, redelivered,
publisher, body;
a body that is not UTF-8 is base64 with "body_base64": true), flushing each line before it
accepts the message. `--count N` exits after N messages in all, across runs; `--idle-exit S`
after S seconds without one. Reruns with the same id and state directory resume, showing no
message twice. It says on stderr when it is subscribed.

Exit status 2: a bad argument (URL, topic, state directory, ...), one line saying what to do.
Exit status 3: no router reachable within --timeout (pub) / --connect-timeout (sub).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    return value


def _common(p: argparse.ArgumentParser, what: str) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", metavar="URL[,URL...]",
                       help="routers to use, in failover order: amqp://HOST:PORT, "
                       "comma-separated")
    where.add_argument("--relay", metavar="URL",
                       help="a relay to use instead (exactmesh relay, docs/relay.md): a "
                       "subscriber is registered there, durable")
    p.add_argument("--id", required=True, metavar="NAME",
                   help=f"this {what}'s stable name (AMQP container-id); reuse it to resume")
    p.add_argument("--state-dir", required=True, metavar="DIR",
                   help="where its durable state lives (created if missing); reuse it to resume")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   default="warning", help="client log level on stderr (default warning)")
    login = p.add_argument_group("logging in (docs/security.md)")
    login.add_argument("--user", help="log in as this user (SASL PLAIN); the password comes "
                       f"from the environment variable {PASSWORD_ENV}, never the command line")
    login.add_argument("--tls-ca", metavar="FILE",
                       help="use TLS (amqps:// URLs) and trust the router certificates this "
                       "CA signed")
    login.add_argument("--tls-cert", metavar="FILE", help="a client certificate (PEM chain)")
    login.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    login.add_argument("--plain-in-clear", action="store_true",
                       help="send the password without TLS (the router must allow it)")


PASSWORD_ENV = "EXACTMESH_PASSWORD"


def _login(args: argparse.Namespace) -> Any:
    """The SDK's Login from the options, or None when none was given."""
    from amqp_edge.client import Login

    if not (args.user or args.tls_ca or args.tls_cert):
        return None
    return Login(args.user, os.environ.get(PASSWORD_ENV) if args.user else None,
                 ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key,
                 plain_in_clear=args.plain_in_clear)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `pub` and `sub` on the `exactmesh` command's subparsers."""
    p = sub.add_parser(
        "pub", help="publish messages exactly once (resumable)",
        description="Publish to one topic with the exactly-once SDK. With --count N it "
        "publishes the bodies NAME-1..NAME-N in all, across runs; otherwise one message per "
        "line of stdin. Exit 0: all accepted; 1: some failed; 2: bad arguments; 3: no router "
        "reachable.")
    _common(p, "publisher")
    p.add_argument("--topic", required=True, help="the topic to publish to (no wildcards)")
    p.add_argument("--count", type=_non_negative_int, metavar="N",
                   help="publish NAME-<seq> bodies up to sequence number N (in all runs)")
    p.add_argument("--window", type=_positive_int, default=100, metavar="W",
                   help="messages without an outcome at a time (default 100)")
    p.add_argument("--ttl", type=_seconds, metavar="S", help="message time to live, seconds")
    p.add_argument("--timeout", type=_seconds, default=60.0, metavar="S",
                   help="give up (exit 3) when no router was reachable this long (default 60)")
    p.add_argument("--handover", action="store_true",
                   help="do not wait for every outcome: exit once the messages are sent, "
                   "the outcomes that come within --collect seconds are taken, and the "
                   "connection is closed cleanly; a later run with the same id and state "
                   "directory collects the rest (a cron job through a relay)")
    p.add_argument("--collect", type=_seconds, default=1.0, metavar="S",
                   help="with --handover: how long to take outcomes before leaving "
                   "(default 1)")

    s = sub.add_parser(
        "sub", help="receive messages exactly once (resumable), one JSON line each",
        description="Subscribe to a topic filter with the exactly-once SDK and print one JSON "
        "object per message (topic, message_id, tag, redelivered, body), accepting each after "
        "printing it. Exit 0 when done (--count, --idle-exit); 2: bad arguments; 3: no router "
        "reachable.")
    _common(s, "subscriber")
    s.add_argument("--topic", required=True, metavar="FILTER",
                   help="topic filter, with + (one level) and # (the rest) wildcards")
    s.add_argument("--durable", action="store_true",
                   help="the router keeps the subscription while this client is away")
    s.add_argument("--timeout", type=_seconds, metavar="S",
                   help="with --durable: how long the router keeps it (default: router's "
                   "reconnect-timeout)")
    s.add_argument("--count", type=_non_negative_int, metavar="N",
                   help="exit after N messages in all (across runs)")
    s.add_argument("--idle-exit", type=_seconds, metavar="S",
                   help="exit after S seconds without a message")
    s.add_argument("--prefetch", type=_positive_int, default=100, metavar="N",
                   help="credit window (default 100)")
    s.add_argument("--connect-timeout", type=_seconds, default=60.0, metavar="S",
                   help="give up (exit 3) when no router was reachable this long (default 60)")

    r = sub.add_parser(
        "request", help="send a request and print its reply (through a relay)",
        description="Send one request with the SDK's Requester and print its reply as one "
        "JSON line. The reply waits at the relay if it comes after --timeout (or after this "
        "command ended): `--collect` with the same id and state directory prints it later. "
        "Exit 0: a reply; 4: none yet; 2: bad arguments; 3: no relay reachable.")
    _common(r, "requester")
    r.add_argument("--topic", required=True, help="where to send the request")
    r.add_argument("--body", help="the request's body (default: stdin)")
    r.add_argument("--timeout", type=_seconds, default=30.0, metavar="S",
                   help="how long to wait for the reply (default 30)")
    r.add_argument("--collect", action="store_true",
                   help="send nothing: print the replies that came for earlier requests")


def _error(text: str) -> None:
    print(f"exactmesh: error: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """SIGTERM ends the command like Ctrl-C: the client closes (state is durable anyway)."""
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread (tests calling main() from a thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with _terminate_cleanly():
        try:
            runner = {"pub": run_pub, "sub": run_sub, "request": run_request}[args.command]
            return _exit_status(runner, args)
        except KeyboardInterrupt:
            return 130


def _exit_status(runner: Any, args: argparse.Namespace) -> int:
    """Run one command; a client error ends it with one line and its exit status (the
    command's `finally` closed the client first)."""
    from amqp_edge.client import ClientError, RouterUnreachable

    try:
        return runner(args)
    except (RouterUnreachable, TimeoutError) as err:
        _error(str(err))
        return EXIT_UNREACHABLE
    except ClientError as err:
        _error(str(err))
        return EXIT_USAGE


def _open(kind: str, args: argparse.Namespace) -> Any:
    """The client, or an error line and None."""
    from amqp_edge.client import Publisher, Subscriber, parse_urls
    from amqp_edge.client_store import StoreError

    try:
        urls = None if args.relay else parse_urls(args.url)
        if kind == "pub":
            return Publisher(urls, args.topic, id=args.id, state_dir=args.state_dir,
                             relay=args.relay, window=args.window,
                             connect_timeout=args.timeout, login=_login(args))
        if args.timeout is not None and not (args.durable or args.relay):
            raise ValueError("--timeout applies to a durable subscription: add --durable")
        return Subscriber(urls, args.topic, id=args.id, state_dir=args.state_dir,
                          relay=args.relay, durable=args.durable, timeout=args.timeout,
                          prefetch=args.prefetch, connect_timeout=args.connect_timeout,
                          login=_login(args))
    except (ValueError, StoreError) as err:
        _error(str(err))
        return None


def _lines() -> Iterator[bytes | str]:
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n").rstrip(b"\r")
        try:
            yield line.decode()
        except UnicodeDecodeError:
            yield line


def run_pub(args: argparse.Namespace) -> int:

    pub = _open("pub", args)
    if pub is None:
        return EXIT_USAGE
    try:
        if args.count is not None:
            while pub.next_seq <= args.count:
                expected = pub.next_seq
                seq = pub.send(f"{args.id}-{expected}", ttl=args.ttl)
                assert seq == expected, (seq, expected)
        else:
            for line in _lines():
                pub.send(line, ttl=args.ttl)
        if args.handover:
            _hand_over(pub, args.timeout, args.collect)
        else:
            pub.flush()
    finally:
        stats = pub.stats()
        failures = pub.failures()
        pub.close()
    for f in failures:
        print(f"{f.seq} {f.condition} {f.description}", file=sys.stderr)
    out = {"sent": stats["sent"], "accepted": stats["accepted"], "failed": len(failures),
           "resent": stats["resent"]}
    if args.handover:  # what a later run collects the outcomes of
        out["pending"] = stats["pending"]
    print(json.dumps(out), flush=True)
    return EXIT_FAILED if failures else EXIT_OK


def _hand_over(pub: Any, timeout: float, collect: float) -> None:
    """Wait until every message without an outcome went on the wire (if the relay is not
    there, the state directory keeps them for the next run), take the outcomes that come
    within `collect` seconds (those of an earlier run's messages come at once if the relay
    has them), then disconnect cleanly."""
    with contextlib.suppress(TimeoutError):  # unreachable: the next run sends them
        pub.wait_attached(timeout)
        pub.wait_transmitted(timeout)
        pub.flush(timeout=collect)
    pub.disconnect(timeout=10)


EXIT_NO_REPLY = 4


def run_request(args: argparse.Namespace) -> int:
    from amqp_edge.client import parse_urls
    from amqp_edge.client_store import StoreError
    from amqp_edge.request import Requester

    try:
        urls = None if args.relay else parse_urls(args.url)
        req = Requester(urls, args.topic, id=args.id, state_dir=args.state_dir,
                        relay=args.relay, connect_timeout=args.timeout,
                        login=_login(args))
    except (ValueError, StoreError) as err:
        _error(str(err))
        return EXIT_USAGE
    try:
        if args.collect:
            got = [message_json(m) for m in req.replies(timeout=args.timeout)]
            for line in got:
                print(line, flush=True)
            return EXIT_OK if got else EXIT_NO_REPLY
        body = args.body if args.body is not None else sys.stdin.read()
        request_id = req.send_request(body)
        reply = req.reply_for(request_id, args.timeout)
        if reply is None:
            _error(f"no reply to {request_id} within {args.timeout:g} s; it will wait at the "
                   "relay: run again with --collect and the same --id and --state-dir")
            return EXIT_NO_REPLY
        print(message_json(reply), flush=True)
        return EXIT_OK
    finally:
        req.close()


def message_json(msg: Any) -> str:
    """One message as the JSON line `exactmesh sub` prints."""
    out: dict[str, Any] = {
        "topic": msg.topic,
        "message_id": msg.message_id if isinstance(msg.message_id, str | int | None)
        else str(msg.message_id),
        "tag": msg.tag,
        "redelivered": msg.redelivered,
        "publisher": msg.publisher,
    }
    if msg.correlation_id is not None:  # a reply: the request it answers
        out["correlation_id"] = str(msg.correlation_id)
    body = msg.body
    if isinstance(body, bytes):
        try:
            out["body"] = body.decode()
        except UnicodeDecodeError:
            out["body"] = base64.b64encode(body).decode()
            out["body_base64"] = True
    else:
        out["body"] = body
    return json.dumps(out, default=str)


def run_sub(args: argparse.Namespace) -> int:

    sub = _open("sub", args)
    if sub is None:
        return EXIT_USAGE
    try:
        if args.count is not None and sub.accepted_total >= args.count:
            return EXIT_OK
        # The client gives up by itself after --connect-timeout (RouterUnreachable, naming
        # the URLs); waiting exactly as long raced with that and could end with a vaguer
        # TimeoutError first. One more attempt's time is the backstop.
        from amqp_edge.client import ATTEMPT_TIMEOUT

        where = sub.wait_attached(None if args.connect_timeout is None
                                  else args.connect_timeout + ATTEMPT_TIMEOUT)
        print(f"exactmesh sub: subscribed to {args.topic!r} as {args.id!r} at {where}",
              file=sys.stderr, flush=True)
        while args.count is None or sub.accepted_total < args.count:
            msg = sub.receive(timeout=args.idle_exit)
            if msg is None:
                break  # --idle-exit
            try:
                sys.stdout.write(message_json(msg) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                sub.release(msg)
                return EXIT_OK
            sub.accept(msg)
        return EXIT_OK
    finally:
        sub.close()

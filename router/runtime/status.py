"""The router's status endpoint: the seed's STATUS query over HTTP, as JSON.

    GET /deliveries/{id}   who succeeded, failed and is still pending for one delivery
    GET /deliveries        the deliveries this router tracks now (oldest first, at most 1000)
    GET /deliveries?message-id=M      one delivery, found by the message-id its publisher set
    GET /deliveries?publisher=C&link=L&tag=T   ... by its publisher's container, link and tag
    GET /health            clients, live records and the engine's counters
    GET /metrics           all of it for Prometheus (router/runtime/metrics.py)
    GET /stat              counters, clients, links, routes, subscriptions, stuck deliveries
                           (router/runtime/stat.py; `exactmesh stat`)
    GET /console           the web console: a page that shows /stat live (console.html)

It runs in the router's own trio task tree and reads the engine directly: between two awaits
nothing else runs, so each answer is a consistent snapshot without any locking. HTTP is parsed
by h11 (sans-IO); each connection carries one request and is then closed, and a request must
arrive whole, within a size bound and a deadline, so a slow or hostile client costs one task
for a few seconds and a few kilobytes at most. There is no authentication, and the answers
name clients: bind it to loopback or a management network.

`fetch` is the client side, used by `exactmesh status`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import ssl
import urllib.error
import urllib.request
from functools import partial
from http import HTTPStatus
from http.client import HTTPException
from importlib import resources
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qs, unquote

import h11
import trio
from proton import Message

from router.config import HostPort
from router.core.actions import Accepted, Outcome
from router.core.doubts import Doubt
from router.core.records import IN_DOUBT, Record, outgoing_tag
from router.listeners import open_ssl_over_tcp_listeners, open_tcp_listeners
from router.security.gate import tls_handshake

from . import metrics, stat

if TYPE_CHECKING:
    from router.ports import RuntimePort as Node  # only what the edges see of it, too

log = logging.getLogger("exactmesh.status")

ENDPOINTS = ["GET /deliveries/{id}", "GET /deliveries", "GET /health", "GET /metrics",
             "GET /stat", "GET /console"]
MAX_REQUEST_HEAD = 8192  # bytes of request line and headers; a status GET needs a few hundred
READ_DEADLINE = 5.0  # seconds for the whole request to arrive
WRITE_DEADLINE = 5.0  # seconds to send the answer and see the client close
LIST_LIMIT = 1000  # deliveries listed by GET /deliveries
HEX_ID = re.compile(r"[0-9a-f]{32}")
NOT_TRACKED = ("delivery {} is not tracked here: it was settled and forgotten, never seen, "
               "or is tracked by its origin router")

JsonBody = dict[str, Any]


class Raw(NamedTuple):
    """An answer that is not JSON: the Prometheus text of /metrics, the console's page."""

    data: bytes
    content_type: str


class Answer(NamedTuple):
    status: int
    body: JsonBody | Raw
    head_only: bool = False  # a HEAD request: the same headers, no body


class StatusError(Exception):
    """The client could not get an answer from a router's status endpoint."""


# ------------------------------------------------------------------ the server


async def serve_status(
    node: Node, where: HostPort, *, tls: ssl.SSLContext | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the status endpoint at `where`; over TLS with the server context `tls`."""
    listeners: Any
    if tls is None:
        listeners = await open_tcp_listeners(where.port, where.host)
    else:
        listeners = await open_ssl_over_tcp_listeners(
            where.port, tls, where.host, https_compatible=True)
    task_status.started(listeners)
    await trio.serve_listeners(partial(_serve_connection, node), listeners)


async def _serve_connection(node: Node, stream: trio.abc.Stream) -> None:
    if isinstance(stream, trio.SSLStream):
        peer = "{}:{}".format(*stream.transport_stream.socket.getpeername()[:2])
        if not await tls_handshake(stream, peer, log):
            await trio.aclose_forcefully(stream)
            return
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
    try:
        answer = await _answer(node, conn, stream)
        if answer is not None:
            with trio.move_on_after(WRITE_DEADLINE):
                await stream.send_all(_response(conn, answer))
                await _close_gracefully(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away: nobody is left to answer
    except Exception:  # one request must never take the router down
        log.exception("status endpoint: a request failed")
    finally:
        with trio.move_on_after(0.5) as scope:
            scope.shield = True
            await stream.aclose()


async def _answer(
    node: Node, conn: h11.Connection, stream: trio.abc.Stream
) -> Answer | None:
    """Read one request and work out the answer; None if the client sent nothing at all."""
    try:
        with trio.fail_after(READ_DEADLINE):
            request = await _read_request(conn, stream)
    except trio.TooSlowError:
        return Answer(408, {"error": f"the request did not arrive whole within "
                                     f"{READ_DEADLINE:g} s (the request line and headers end "
                                     "with an empty line)"})
    except h11.RemoteProtocolError as err:
        return Answer(*_protocol_error(err))
    if request is None:
        return None
    method = request.method.decode("ascii")
    try:
        status, body = route(node, method, request.target.decode("ascii"))
    except Exception:
        log.exception("status endpoint: answering %r failed", request.target)
        status, body = 500, {"error": "internal error in the router; see its log"}
    return Answer(status, body, head_only=method == "HEAD")


async def _read_request(conn: h11.Connection, stream: trio.abc.Stream) -> h11.Request | None:
    room = MAX_REQUEST_HEAD  # read no more than this, so the bound is exact
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Request):
            return event  # a body, if any, is ignored: no endpoint takes one
        if isinstance(event, h11.ConnectionClosed):
            return None
        if room == 0:
            raise h11.RemoteProtocolError("request head too long", error_status_hint=431)
        # NEED_DATA; an empty read is the client's EOF, which h11 turns into an error
        # when a request was begun.
        data = await stream.receive_some(min(room, 4096))
        room -= len(data)
        conn.receive_data(data)


def _protocol_error(err: h11.RemoteProtocolError) -> tuple[int, JsonBody]:
    """h11's complaint, in words that tell the client what to fix."""
    text = str(err)
    if err.error_status_hint == 431:
        return 431, {"error": f"the request line and headers exceed {MAX_REQUEST_HEAD} bytes"}
    if text.startswith("illegal request line"):
        why = "malformed request line; send e.g. 'GET /health HTTP/1.1'"
    elif "unexpectedly closed" in text:
        why = ("the connection was closed before the request ended "
               "(the request line and headers end with an empty line)")
    else:
        why = f"malformed HTTP request: {text}"
    return 400, {"error": why}


def _response(conn: h11.Connection, answer: Answer) -> bytes:
    if isinstance(answer.body, Raw):
        data, kind = answer.body
    else:
        data, kind = (json.dumps(answer.body, default=str) + "\n").encode(), "application/json"
    headers = [("Content-Type", kind), ("Content-Length", str(len(data))),
               ("Connection", "close")]
    if answer.status == 405:
        headers.append(("Allow", "GET, HEAD"))
    events: list[Any] = [h11.Response(status_code=answer.status, headers=headers,
                                      reason=HTTPStatus(answer.status).phrase.encode())]
    if not answer.head_only:
        events.append(h11.Data(data=data))
    events.append(h11.EndOfMessage())
    return b"".join(conn.send(e) or b"" for e in events)


async def _close_gracefully(stream: Any) -> None:
    """Half-close and wait for the client to close: closing with unread input would reset
    the connection, and the client could lose the answer. (TLS has no half-close: its
    close_notify, sent by `aclose`, ends the answer.)"""
    if isinstance(stream, trio.SSLStream):
        return
    await stream.send_eof()
    while await stream.receive_some(4096):
        pass


# ------------------------------------------------------------------ the answers


def route(node: Node, method: str, target: str) -> tuple[int, JsonBody | Raw]:
    path, _, query = target.partition("?")
    path = unquote(path)
    if method not in ("GET", "HEAD"):
        return 405, {"error": f"method {method} is not allowed: the status endpoint answers GET "
                              "(and HEAD)", "endpoints": ENDPOINTS}
    if path == "/health":
        return 200, health(node)
    if path == "/metrics":
        return 200, Raw(metrics.scrape(node), metrics.CONTENT_TYPE)
    if path in ("/console", "/"):
        return 200, Raw(_console(), "text/html; charset=utf-8")
    if path == "/stat":
        return 200, stat.stat(node)
    if path == "/deliveries" and query:
        return find_delivery(node, parse_qs(query))
    if path == "/deliveries":
        return 200, deliveries(node)
    if path.startswith("/deliveries/"):
        return delivery(node, path.removeprefix("/deliveries/"))
    return 404, {"error": f"no endpoint {path!r}; the endpoints are {', '.join(ENDPOINTS)}",
                 "endpoints": ENDPOINTS}


@functools.cache
def _console() -> bytes:
    return resources.files("router.runtime").joinpath("console.html").read_bytes()


def find_delivery(node: Node, query: dict[str, list[str]]) -> tuple[int, JsonBody]:
    """A delivery named by what its publisher knows: its message-id (any router that holds a
    record of it answers: the origin, or a destination with subscribers of it), or its
    identity and own tag (from which every router computes the delivery id)."""
    one = {k: v[-1] for k, v in query.items()}
    if "message-id" in one:
        wanted = one["message-id"]
        for rec in node.engine.iter_records():
            if _message_id(rec.payload) == wanted:
                return delivery(node, rec.id)
        return 404, {"error": f"router {node.config.id} tracks no delivery with message-id "
                              f"{wanted!r} now (it may be finished, or this router never "
                              "had it: ask the publisher's router)",
                     "router": node.config.id, "message_id": wanted}
    if {"publisher", "link", "tag"} <= one.keys():
        tag = outgoing_tag(one["publisher"], one["link"], one["tag"].encode()).decode()
        return delivery(node, tag)
    return 400, {"error": "ask by ?message-id=ID, or by ?publisher=CONTAINER&link=LINK&tag=TAG "
                          "(the publisher's container-id, link name and delivery tag)"}


def _message_id(payload: bytes) -> str | None:
    """The message-id of an encoded message (AMQP 3.2.4), as text; None if it has none or
    cannot be read. Decoded on request only: the router never reads it per message."""
    if not payload:
        return None
    try:
        msg = Message()
        msg.decode(payload)
    except Exception:
        return None
    return None if msg.id is None else str(msg.id)


def delivery(node: Node, delivery_id: str) -> tuple[int, JsonBody]:
    router = node.config.id
    key = delivery_id.lower()
    rec = node.engine.find(key)
    if rec is not None:
        return 200, delivery_status(router, rec)
    doubt = node.engine.doubt(key)
    if doubt is not None:
        return 200, doubt_status(router, doubt)
    if not HEX_ID.fullmatch(key):
        return 400, {"error": f"delivery id {delivery_id!r} is not 32 hexadecimal characters; "
                              "use the delivery tag a subscriber received, or an id listed by "
                              "GET /deliveries"}
    return 404, {"error": NOT_TRACKED.format(key), "router": router, "id": key}


def delivery_status(router: str, rec: Record) -> JsonBody:
    """The STATUS answer for one record: the merge `Record.status` makes of local copies and
    (at the origin router) other routers' verdicts."""
    status = rec.status()
    resolved = dict(rec.resolved or {})
    return {
        "router": router,
        "id": rec.id,
        "address": rec.address,
        "mode": rec.mode,
        "outcome": outcome_json(rec.outcome),
        "succeeded": status["succeeded"],
        "failed": status["failed"],
        "pending": status["pending"],
        "reasons": status["reasons"],
        "in_doubt": [label for label in status.get(IN_DOUBT, []) if label not in resolved],
        "resolved": resolved,
        "origin": rec.origin or router,
        "publisher": rec.publisher.label if rec.publisher is not None else None,
        "forgotten": False,
    }


def doubt_status(router: str, doubt: Doubt) -> JsonBody:
    """The STATUS answer for a failed message of ours whose record is forgotten, kept because
    subscribers were in doubt: `in_doubt` lists those still in doubt, `resolved` what their
    routers said of the others since (docs/guarantees.md, "Failed, or in doubt")."""
    info = doubt.info
    return {
        "router": router,
        "id": doubt.id,
        "address": doubt.address,
        "mode": doubt.mode,
        "outcome": {"condition": doubt.condition, "description": doubt.description},
        "succeeded": info["succeeded"],
        "failed": info["failed"],
        "pending": info["pending"],
        "reasons": info["reasons"],
        "in_doubt": doubt.still_in_doubt(),
        "resolved": doubt.resolved,
        "origin": router,
        "publisher": doubt.publisher,
        "forgotten": True,
    }


def outcome_json(outcome: Outcome | None) -> str | JsonBody | None:
    """None while undecided, "accepted", or the failure's condition and description."""
    if outcome is None:
        return None
    if isinstance(outcome, Accepted):
        return "accepted"
    return {"condition": outcome.condition, "description": outcome.description}


def deliveries(node: Node) -> JsonBody:
    router = node.config.id
    listed = []
    for rec in islice(node.engine.iter_records(), LIST_LIMIT):  # oldest first: the stuck ones
        status = rec.status()
        listed.append({"id": rec.id, "address": rec.address, "mode": rec.mode,
                       "origin": rec.origin or router, "succeeded": len(status["succeeded"]),
                       "failed": len(status["failed"]), "pending": len(status["pending"])})
    total = len(node.engine.records)
    return {"router": router, "total": total, "truncated": total > len(listed),
            "deliveries": listed}


def health(node: Node) -> JsonBody:
    engine = node.engine
    # pid: a worker of --workers is one process among several at the same ports.
    return {"router": node.config.id, "pid": os.getpid(), "publishers": len(engine.publishers),
            "subscribers": len(engine.subscribers), "records": len(engine.records),
            # Just started, waiting to hear the mesh's subscriptions (`join-timeout`): how
            # many guaranteed messages wait for that; null once joined.
            "joining": engine.joining(),
            "stats": dataclasses.asdict(engine.stats),
            # Clients refused by the security policy, by kind (docs/security.md).
            "refusals": dict(node.policy.refusals)}


# ------------------------------------------------------------------ the client


def fetch(where: HostPort, path: str, timeout: float = 10.0,
          tls: ssl.SSLContext | None = None) -> tuple[int, JsonBody]:
    """GET `path` from the status endpoint at `where` (over HTTPS with the client context
    `tls`): (HTTP status, JSON body). Raises `StatusError` naming the address when there is
    no JSON answer."""
    host = f"[{where.host}]" if ":" in where.host else where.host
    url = f"{'https' if tls is not None else 'http'}://{host}:{where.port}{path}"
    # No proxies: the endpoint is addressed directly, whatever http_proxy says.
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    if tls is not None:
        handlers.append(urllib.request.HTTPSHandler(context=tls))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, _json_body(resp.read(), url)
    except urllib.error.HTTPError as err:  # 4xx/5xx still carry our JSON answer
        with err:
            return err.code, _json_body(err.read(), url)
    except urllib.error.URLError as err:
        raise StatusError(f"cannot reach the status endpoint at {url}: {err.reason}") from None
    except (OSError, HTTPException) as err:
        raise StatusError(f"cannot reach the status endpoint at {url}: {err}") from None


def _json_body(data: bytes, url: str) -> JsonBody:
    try:
        body = json.loads(data)
    except ValueError:
        raise StatusError(f"{url} did not answer JSON; is it an exactmesh router's --http "
                          "address?") from None
    if not isinstance(body, dict):
        raise StatusError(f"{url} answered JSON that is not an object")
    return body

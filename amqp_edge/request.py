"""Requests and replies through a relay (seed 000; docs/relay.md, "Requests and replies").

    with Requester(topic="prices/quote", relay="amqp://relay:5800", id="alice-quotes",
                   state_dir=d) as req:
        reply = req.request(b"EURUSD", timeout=30)        # None if none came in time
        ...
        req.disconnect()                                  # away; a reply waits at the relay
        ...
        for reply in req.replies(timeout=5):              # later, in this run or the next
            print(reply.correlation_id, reply.body)

A request goes out with `reply-to` set to the requester's reply name (`replies/ID` unless
given); the relay replaces that with a surrogate it holds durably for the requester, and
hands each reply back with its `to` set to the reply name again (amqp_edge/replies.py). The
requester receives on its `replies` link (source `$replies`), durably: a reply sent while it
was away, or after its process ended, comes when it is back. A reply's `correlation_id` is
the request's message id ("ID:seq", what `send_request` returns).

A responder answers with `reply(msg, body, ...)`: a message to `msg.reply_to` carrying
`correlation_id = msg.message_id`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from .client import MemoryPublisherStore, Publisher, ReceivedMessage, Subscriber
from .names import REPLIES_LINK, REPLIES_SOURCE

__all__ = ["Requester", "reply"]


class Requester:
    def __init__(self, urls: str | Sequence[str] | None = None, topic: str = "", *, id: str,
                 state_dir: str, relay: str | None = None, reply_name: str | None = None,
                 **options: Any) -> None:
        self.id = id
        self.reply_name = reply_name or f"replies/{id}"
        self._replies = Subscriber(urls, REPLIES_SOURCE, id=id, state_dir=state_dir,
                                   relay=relay, durable=True, link_name=REPLIES_LINK, **options)
        try:
            self._pub = Publisher(urls, topic, id=id, state_dir=state_dir, relay=relay,
                                  **options)
        except BaseException:
            self._replies.close()
            raise
        self._kept: dict[str, ReceivedMessage] = {}  # replies taken, not asked for yet

    def send_request(self, body: bytes | str, properties: dict | None = None) -> str:
        """Send one request; returns its message id, which its reply's correlation_id is."""
        seq = self._pub.send(body, properties, reply_to=self.reply_name)
        return f"{self.id}:{seq}"

    def request(self, body: bytes | str, timeout: float | None = None,
                properties: dict | None = None) -> ReceivedMessage | None:
        """Send a request and wait for its reply (None after `timeout` seconds: it may still
        come, through `replies()` or `reply_for()`)."""
        return self.reply_for(self.send_request(body, properties), timeout)

    def reply_for(self, request_id: str, timeout: float | None = None) -> ReceivedMessage | None:
        """The reply to request `request_id`, waiting up to `timeout` seconds; replies to
        other requests that come meanwhile are kept for `replies()` and `reply_for()`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while request_id not in self._kept:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            msg = self._replies.receive(remaining)
            if msg is None:
                return None
            self._take(msg)
        return self._kept.pop(request_id)

    def replies(self, timeout: float | None = None) -> Iterator[ReceivedMessage]:
        """Every reply kept, then each as it comes, until `timeout` seconds pass without one."""
        while self._kept:
            yield self._kept.pop(next(iter(self._kept)))
        while (msg := self._replies.receive(timeout)) is not None:
            self._replies.accept(msg)
            yield msg

    def _take(self, msg: ReceivedMessage) -> None:
        self._replies.accept(msg)  # taken: the store has it, the relay may forget it
        self._kept[str(msg.correlation_id)] = msg

    def connect(self) -> None:
        self._replies.connect()
        self._pub.connect()

    def disconnect(self, timeout: float | None = 10.0) -> None:
        """Detach both links cleanly: replies wait at the relay."""
        self._pub.disconnect(timeout)
        self._replies.disconnect(timeout)

    def close(self) -> None:
        try:
            self._pub.close()
        finally:
            self._replies.close()

    def __enter__(self) -> Requester:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reply(request: ReceivedMessage, body: bytes | str, *, urls: str | Sequence[str] | None = None,
          relay: str | None = None, id: str, timeout: float = 30.0,
          properties: dict | None = None) -> None:
    """Answer `request` (a message with a reply_to): one message to its reply address with
    correlation_id = its message id. Returns once the requester accepted it or its relay has
    it on disk for an absent requester (TimeoutError after `timeout` seconds)."""
    if not request.reply_to:
        raise ValueError("the message has no reply_to: it is not a request")
    with Publisher(urls, request.reply_to, id=id, relay=relay,
                   store=MemoryPublisherStore()) as pub:
        pub.send(body, properties, correlation_id=request.message_id)
        pub.flush(timeout, stored=True)

"""The engine's unit tests drive it through its one entry point, `Engine.handle`, in the call
shapes they were written in: `d.message(link, tag, payload, now=1.0)` builds a
`MessageArrived` and hands it to the real engine. An event without a `now` happens at the
engine's current time. Everything else (take_actions, records, find, ...) is the engine's own.
"""

from __future__ import annotations

from typing import Any

from router.core import events as ev
from router.core.engine import Engine, EngineConfig
from router.core.records import LinkIdentity


class EngineDriver:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.engine = Engine(config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def _t(self, now: float | None) -> float:
        return self.engine.now if now is None else now

    def attach_publisher(self, link: int, ident: LinkIdentity, address: str, mode: str,
                         resends: list[bytes] | None = None, *, now: float | None = None,
                         once: bool = True) -> Any:
        return self.engine.handle(
            ev.PublisherAttached(self._t(now), link, ident, address, mode, resends, once=once))

    def detach_publisher(self, link: int, *, final: bool = True,
                         now: float | None = None) -> None:
        self.engine.handle(ev.PublisherDetached(self._t(now), link, final))

    def attach_subscriber(self, link: int, ident: LinkIdentity, topic_filter: str,
                          presettled: bool = False, warm_timeout: float | None = None, *,
                          gen: int = 0, declared: dict[str, str] | None = None,
                          now: float | None = None, qos: int = 0) -> Any:
        return self.engine.handle(ev.SubscriberAttached(
            self._t(now), link, ident, topic_filter, presettled, warm_timeout, gen, declared,
            qos))

    def detach_subscriber(self, link: int, *, final: bool = True,
                          now: float | None = None) -> None:
        self.engine.handle(ev.SubscriberDetached(self._t(now), link, final))

    def subscriber_credit(self, link: int, credit: int, *, now: float | None = None) -> None:
        self.engine.handle(ev.SubscriberCredit(self._t(now), link, credit))

    def message(self, link: int, tag: bytes, payload: bytes, *, settled: bool = False,
                mode: str | None = None, ttl_ms: int | None = None, now: float | None = None,
                address: str | None = None, resend: bool = False,
                guarantee: str | None = None) -> None:
        self.engine.handle(ev.MessageArrived(self._t(now), link, tag, payload, settled, mode,
                                             ttl_ms, address, resend, guarantee))

    def refuse_message(self, link: int, tag: bytes, condition: str, description: str, *,
                       settled: bool, now: float | None = None) -> None:
        self.engine.handle(
            ev.MessageRefused(self._t(now), link, tag, condition, description, settled))

    def copy_outcome(self, link: int, tag: bytes, disposition: int, *, settled: bool,
                     error: str = "", now: float | None = None) -> None:
        self.engine.handle(
            ev.CopyOutcome(self._t(now), link, tag, disposition, settled, error))

    def publisher_settled(self, link: int, tag: bytes, *, now: float | None = None) -> None:
        self.engine.handle(ev.PublisherSettled(self._t(now), link, tag))

    def tick(self, now: float) -> None:
        self.engine.handle(ev.TimePassed(now))

    def remote_message(self, origin: str, msg_id: str, address: str, payload: bytes, *,
                       owed: list[str], mode: str, ttl_ms: int | None,
                       now: float | None = None, resend: bool = False,
                       once: bool = True) -> None:
        self.engine.handle(ev.RemoteMessage(self._t(now), origin, msg_id, address, payload,
                                            owed, mode, ttl_ms, resend, once=once))

    def peer_verdict(self, router: str, msg_id: str, accepted: bool, status: dict[str, Any],
                     keys: list[str] | None = None, *, now: float | None = None,
                     former: bool = False) -> None:
        self.engine.handle(
            ev.PeerVerdict(self._t(now), router, msg_id, accepted, status, keys, former))

    def remote_forget(self, origin: str, msg_id: str, accepted: bool | None = None, *,
                      now: float | None = None) -> None:
        self.engine.handle(ev.RemoteForget(self._t(now), origin, msg_id, accepted))

    def remote_subscriber_added(self, router: str, key: str, topic_filter: str, gen: int = 0,
                                timeout: float = 0.0, *, now: float | None = None,
                                qos: int = 0, since: int = 0) -> None:
        self.engine.handle(ev.RemoteSubscriberAdded(self._t(now), router, key, topic_filter,
                                                    gen, timeout, qos, since))

    def remote_subscriber_removed(self, router: str, key: str, *,
                                  now: float | None = None) -> None:
        self.engine.handle(ev.RemoteSubscriberRemoved(self._t(now), router, key))

    def peer_lost(self, router: str, reason: str, *, restarted: bool = False,
                  now: float | None = None) -> None:
        self.engine.handle(ev.PeerLost(self._t(now), router, reason, restarted))

"""Warm subscribers on one router, with proton's own client: a receiver whose source terminus
is durable stays subscribed while it is away; the publisher is held until it comes back and
accepts, or until its timeout fails it by name."""

from __future__ import annotations

import time
from typing import Any

from proton import Terminus
from proton.reactor import LinkOption

from tests.harness import (
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    Tally,
    numbered,
    wait_for,
)


class Durable(LinkOption):
    """A durable source terminus (unsettled-state, never expires) with a timeout."""

    def __init__(self, timeout: int = 0) -> None:
        self.timeout = timeout

    def apply(self, link: Any) -> None:
        link.source.durability = Terminus.DELIVERIES
        link.source.expiry_policy = Terminus.EXPIRE_NEVER
        link.source.timeout = self.timeout

    def test(self, link: Any) -> bool:
        return link.is_receiver


def warm(url: str, timeout: int = 0) -> Subscriber:
    return Subscriber(url, "w/#", "audit", container_id="warm-app", options=Durable(timeout))


def go_away(client: ClientThread, sub: Subscriber) -> None:
    """Its connection closes without closing the link (as when a process restarts)."""
    client.call(lambda: sub.receiver.connection.close())
    client.stop()


def test_a_warm_subscriber_gets_what_it_missed_first_and_in_order() -> None:
    with RouterProcess("A") as router:
        w = warm(router.url)
        other = Subscriber(router.url, "w/#", "other")
        wc, oc = ClientThread(w), ClientThread(other)
        assert w.opened.wait(10) and other.opened.wait(10)
        before = Publisher(router.url, "w/x", numbered(5, "b"))
        bc = ClientThread(before)
        wait_for(lambda: len(before.outcomes) == 5, 10, "the first five accepted")
        go_away(wc, w)
        missed = Publisher(router.url, "w/x", numbered(5, "m"))
        mc = ClientThread(missed)
        wait_for(lambda: len(other.received) == 10, 10, "the other subscriber to get all")
        time.sleep(0.3)  # a window in which nothing may happen
        assert missed.outcomes == {}, "a publisher was accepted while a warm subscriber was away"
        back = warm(router.url)
        backc = ClientThread(back)
        wait_for(lambda: len(missed.outcomes) == 5, 10, "the held messages to be accepted")
        assert missed.states() == ["accepted"] * 5
        Tally([f"m{i}" for i in range(5)], back.bodies()).check_exactly_once_in_order()
        assert all(r.delivery_count == 0 for r in back.received)  # none was in doubt
        for c in (oc, bc, mc, backc):
            c.stop()


def test_a_warm_subscriber_that_does_not_come_back_fails_by_name_after_its_timeout() -> None:
    with RouterProcess("A") as router:
        w = warm(router.url, timeout=1)
        wc = ClientThread(w)
        assert w.opened.wait(10)
        go_away(wc, w)
        gone_at = time.monotonic()
        pub = Publisher(router.url, "w/x", numbered(2))
        pc = ClientThread(pub)
        wait_for(lambda: len(pub.outcomes) == 2, 10, "outcomes after the timeout")
        waited = time.monotonic() - gone_at
        assert 0.9 <= waited < 3.0, f"failed after {waited:.2f} s with a 1 s timeout"
        for out in pub.outcomes.values():
            assert out.condition == "exactmesh:delivery-failed"
            assert "warm-app/audit@A did not come back within 1 s" in out.description
        pc.stop()


def test_closing_the_link_ends_a_warm_subscription_at_once() -> None:
    with RouterProcess("A") as router:
        w = warm(router.url)
        wc = ClientThread(w)
        assert w.opened.wait(10)
        wc.call(lambda: w.receiver.close())
        wait_for(lambda: wc.call(lambda: w.receiver.state & w.receiver.REMOTE_CLOSED), 5,
                 "the router to close the link")
        pub = Publisher(router.url, "w/x", numbered(1))
        pc = ClientThread(pub)
        wait_for(lambda: pub.outcomes, 5, "an outcome")
        assert pub.states() == ["accepted"]  # nobody subscribes any more: policy accept
        wc.stop()
        pc.stop()


def test_the_router_reconnect_timeout_applies_when_the_terminus_sets_none() -> None:
    with RouterProcess("A", "--reconnect-timeout", "1") as router:
        w = warm(router.url)  # durable, no timeout of its own
        wc = ClientThread(w)
        assert w.opened.wait(10)
        go_away(wc, w)
        pub = Publisher(router.url, "w/x", numbered(1))
        pc = ClientThread(pub)
        wait_for(lambda: pub.outcomes, 10, "the outcome after the router's timeout")
        assert "did not come back within 1 s" in pub.outcomes[0].description
        pc.stop()

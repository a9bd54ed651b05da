"""One router, real proton clients over loopback: the delivery semantics of the first issue.

Every exactly-once claim is checked by counting what each subscriber received (bodies, order)
against what each publisher was told.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from proton import Message, symbol

from tests.harness import (
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    Tally,
    numbered,
    wait_for,
)


@pytest.fixture
def router() -> Iterator[RouterProcess]:
    with RouterProcess("A") as r:
        yield r


def start_subscribers(*subs: Subscriber) -> ClientThread:
    client = ClientThread(*subs)
    for s in subs:
        assert s.opened.wait(10), f"subscriber {s.name} did not attach"
    return client


def run_publisher(pub: Publisher, timeout: float = 30.0) -> ClientThread:
    client = ClientThread(pub)
    wait_for(lambda: len(pub.outcomes) == len(pub.messages), timeout,
             f"outcomes for all {len(pub.messages)} messages of {pub.address}")
    return client


def test_fanout_with_overlapping_wildcards_is_exactly_once_in_order(router):
    url = router.url
    subs = {
        "all": Subscriber(url, "orders/#", "all"),
        "paris": Subscriber(url, "orders/+/paris", "paris"),
        "eu-paris": Subscriber(url, "orders/eu/paris", "eu-paris"),
        "us": Subscriber(url, "orders/us/+", "us"),
        "none": Subscriber(url, "payments/#", "none"),
    }
    clients = [start_subscribers(*subs.values())]
    eu = Publisher(url, "orders/eu/paris", numbered(300, "eu"), window=40)
    us = Publisher(url, "orders/us/nyc", numbered(200, "us"), window=40)
    clients += [run_publisher(eu), run_publisher(us)]
    assert eu.states() == ["accepted"] * 300
    assert us.states() == ["accepted"] * 200
    eu_bodies, us_bodies = [m.body for m in eu.messages], [m.body for m in us.messages]
    wait_for(lambda: len(subs["all"].received) == 500, 10, "orders/# to get 500")
    got_all = subs["all"].bodies()
    # Two publishers interleave; each publisher's stream must be whole and in order.
    Tally(eu_bodies, [b for b in got_all if b.startswith("eu")]).check_exactly_once_in_order()
    Tally(us_bodies, [b for b in got_all if b.startswith("us")]).check_exactly_once_in_order()
    Tally(eu_bodies, subs["paris"].bodies()).check_exactly_once_in_order()
    Tally(eu_bodies, subs["eu-paris"].bodies()).check_exactly_once_in_order()
    Tally(us_bodies, subs["us"].bodies()).check_exactly_once_in_order()
    assert subs["none"].received == []
    for c in clients:
        c.stop()


def test_withheld_disposition_holds_the_publisher_until_that_subscriber_accepts(router):
    fast = Subscriber(router.url, "t/#", "fast")
    slow = Subscriber(router.url, "t/#", "slow", policy=lambda m, d: "hold")
    subs = start_subscribers(fast, slow)
    pub = Publisher(router.url, "t/x", numbered(1))
    pubc = ClientThread(pub)
    wait_for(lambda: fast.received and slow.held, 10, "both subscribers to get the message")
    # The fast subscriber accepted and the slow one holds: the publisher must stay unanswered.
    time.sleep(0.3)  # a window in which nothing may happen, not a synchronisation
    assert pub.outcomes == {}, "publisher was answered before every subscriber accepted"
    accepted_at = time.monotonic()
    subs.call(slow.answer_held)
    wait_for(lambda: pub.outcomes, 5, "the publisher's outcome")
    assert pub.outcomes[0].state == "accepted"
    delay = pub.outcomes[0].at - accepted_at
    assert delay < 0.1, f"publisher accepted {delay * 1000:.1f} ms after the last subscriber"
    subs.stop()
    pubc.stop()


def test_rejecting_subscriber_fails_the_publisher_naming_it(router):
    ok = Subscriber(router.url, "r/#", "ok", container_id="app-ok")
    bad = Subscriber(router.url, "r/#", "bad", container_id="app-bad",
                     policy=lambda m, d: "reject")
    subs = start_subscribers(ok, bad)
    pub = Publisher(router.url, "r/1", numbered(3))
    pubc = run_publisher(pub)
    for outcome in pub.outcomes.values():
        assert outcome.state == "rejected"
        assert outcome.condition == "exactmesh:delivery-failed"
        assert "app-bad/bad@A" in outcome.description and "rejected" in outcome.description
        info = outcome.info
        assert info[symbol("failed")] == ["app-bad/bad@A"]
        assert info[symbol("succeeded")] + info[symbol("pending")] == ["app-ok/ok@A"]
    subs.stop()
    pubc.stop()


def test_released_and_modified_are_redelivered_with_delivery_count(router):
    def release_first(m: Message, d) -> str:
        return "release" if m.delivery_count == 0 else "accept"

    def modify_twice(m: Message, d) -> str:
        return "modify" if m.delivery_count < 2 else "accept"

    rel = Subscriber(router.url, "d/#", "rel", policy=release_first)
    mod = Subscriber(router.url, "d/#", "mod", policy=modify_twice)
    subs = start_subscribers(rel, mod)
    pub = Publisher(router.url, "d/1", numbered(5), window=1)
    pubc = run_publisher(pub)
    assert pub.states() == ["accepted"] * 5
    assert [(r.body, r.delivery_count) for r in rel.received] == [
        (f"m{i}", n) for i in range(5) for n in (0, 1)
    ]
    assert [(r.body, r.delivery_count) for r in mod.received] == [
        (f"m{i}", n) for i in range(5) for n in (0, 1, 2)
    ]
    assert all(not r.first_acquirer for r in rel.received if r.delivery_count)
    subs.stop()
    pubc.stop()


def test_too_many_releases_fail_that_subscriber():
    with RouterProcess("A", "--max-delivery-attempts", "3") as router:
        sub = Subscriber(router.url, "e/#", "picky", policy=lambda m, d: "release")
        subs = start_subscribers(sub)
        pub = Publisher(router.url, "e/1", numbered(1))
        pubc = run_publisher(pub)
        assert len(sub.received) == 3
        out = pub.outcomes[0]
        assert out.state == "rejected" and out.condition == "exactmesh:delivery-failed"
        assert "released it 3 times" in out.description
        subs.stop()
        pubc.stop()


def test_undeliverable_here_fails_at_once(router):
    sub = Subscriber(router.url, "u/#", "never", policy=lambda m, d: "undeliverable")
    subs = start_subscribers(sub)
    pub = Publisher(router.url, "u/1", numbered(1))
    pubc = run_publisher(pub)
    assert len(sub.received) == 1
    assert pub.outcomes[0].condition == "exactmesh:delivery-failed"
    assert "undeliverable" in pub.outcomes[0].description
    subs.stop()
    pubc.stop()


def test_ttl_running_out_fails_the_subscriber_that_held_it(router):
    holder = Subscriber(router.url, "ttl/#", "holder", policy=lambda m, d: "hold")
    starved = Subscriber(router.url, "ttl/#", "starved", credit=0)  # never grants credit
    subs = start_subscribers(holder, starved)
    pub = Publisher(router.url, "ttl/1", numbered(1, ttl=0.3))
    started = time.monotonic()
    pubc = run_publisher(pub, timeout=10)
    elapsed = time.monotonic() - started
    out = pub.outcomes[0]
    assert out.state == "rejected" and out.condition == "exactmesh:delivery-failed"
    assert "ttl" in out.description
    assert sorted(out.info[symbol("failed")]) == sorted([holder_label(holder),
                                                        holder_label(starved)])
    assert 0.25 <= elapsed < 2.0, f"ttl of 0.3 s took {elapsed:.2f} s to fail"
    subs.stop()
    pubc.stop()


def holder_label(sub: Subscriber) -> str:
    cid = sub.receiver.connection.container if sub.receiver else ""
    return f"{cid}/{sub.name}@A"


def test_delivery_mode_some_from_link_property_and_message_annotation(router):
    fast = Subscriber(router.url, "s/#", "fast")
    slow = Subscriber(router.url, "s/#", "slow", policy=lambda m, d: "hold")
    subs = start_subscribers(fast, slow)
    # mode from the link property: one acceptance is enough
    some = Publisher(router.url, "s/1", numbered(3, "p"), properties={"delivery-mode": "some"})
    somec = run_publisher(some)
    assert some.states() == ["accepted"] * 3
    # the message annotation wins over the link's mode, both ways
    mixed = [
        Message(body="all-on-some", annotations={symbol("x-opt-delivery-mode"): "all"}),
    ]
    held = Publisher(router.url, "s/2", mixed, properties={"delivery-mode": "some"})
    heldc = ClientThread(held)
    wait_for(lambda: any(r.body == "all-on-some" for r in slow.received), 10, "held copy")
    time.sleep(0.3)  # a window in which nothing may happen
    assert held.outcomes == {}, "annotation x-opt-delivery-mode=all was ignored"
    annotated = [Message(body="some-on-all", annotations={symbol("x-opt-delivery-mode"): "some"})]
    quick = Publisher(router.url, "s/3", annotated)
    quickc = run_publisher(quick)
    assert quick.states() == ["accepted"]
    subs.call(slow.answer_held)
    wait_for(lambda: held.outcomes, 5, "held outcome after the slow subscriber accepted")
    assert held.states() == ["accepted"]
    for c in (subs, somec, heldc, quickc):
        c.stop()


def test_no_subscribers_policy():
    with RouterProcess("A") as router:
        pub = Publisher(router.url, "nobody/here", numbered(2))
        c = run_publisher(pub)
        assert pub.states() == ["accepted", "accepted"]
        c.stop()
    with RouterProcess("A", "--no-subscribers", "reject") as router:
        pub = Publisher(router.url, "nobody/here", numbered(2))
        c = run_publisher(pub)
        assert pub.states() == ["rejected", "rejected"]
        assert pub.outcomes[0].condition == "exactmesh:no-subscribers"
        assert "nobody/here" in pub.outcomes[0].description
        c.stop()


def test_presettled_messages_are_delivered_at_most_once(router):
    sub = Subscriber(router.url, "ps/#", "ps")
    subs = start_subscribers(sub)
    pub = Publisher(router.url, "ps/1", numbered(50), presettled=True)
    pubc = ClientThread(pub)
    wait_for(lambda: len(sub.received) == 50, 10, "50 pre-settled messages")
    Tally([m.body for m in pub.messages], sub.bodies()).check_exactly_once_in_order()
    subs.stop()
    pubc.stop()


def test_publisher_settling_early_stops_tracking(router):
    """The seed's DELETE: a publisher that settles before an outcome stops the tracking; the
    router settles the copies it sent and sends no more of that message."""
    holder = Subscriber(router.url, "del/#", "holder", policy=lambda m, d: "hold")
    starved = Subscriber(router.url, "del/#", "starved", credit=0)
    subs = start_subscribers(holder, starved)
    pub = Publisher(router.url, "del/1", numbered(1))
    pubc = ClientThread(pub)
    wait_for(lambda: holder.held, 10, "the held copy")

    def settle_unanswered() -> int:
        n = 0
        for d in list(pub._tags):
            d.settle()
            n += 1
        return n

    assert pubc.call(settle_unanswered) == 1
    wait_for(lambda: subs.call(lambda: holder.held[0].settled), 5,
             "the router to settle the held copy")
    subs.call(lambda: starved.receiver.flow(10))
    # A later message still flows to both: the starved subscriber never gets the deleted one.
    follow = Publisher(router.url, "del/1", [Message(body="after")])
    followc = ClientThread(follow)
    wait_for(lambda: starved.received, 5, "the follow-up message")
    assert [r.body for r in starved.received] == ["after"]
    wait_for(lambda: len(holder.received) == 2, 5, "the holder to get the follow-up too")
    subs.call(lambda: holder.answer_held("accept"))
    wait_for(lambda: follow.outcomes, 5, "outcome of the follow-up")
    for c in (subs, pubc, followc):
        c.stop()


def test_stalled_subscriber_holds_back_publishers_with_bounded_memory():
    window = 64
    with RouterProcess("A", "--publisher-window", str(window)) as router:
        stalled = Subscriber(router.url, "big/#", "stalled", credit=0)
        ok = Subscriber(router.url, "big/#", "ok")
        subs = start_subscribers(stalled, ok)
        body = b"x" * 20_000
        msgs = [Message(body=body, properties={"i": i}) for i in range(2000)]
        pub = Publisher(router.url, "big/1", msgs, window=2000)
        rss_before = router.rss_kib()
        pubc = ClientThread(pub)
        wait_for(lambda: len(ok.received) >= window, 10, "the window to fill")
        time.sleep(0.5)  # a window in which the publisher must not get further
        assert pub.next <= window + 1, f"publisher sent {pub.next} with a window of {window}"
        assert pub.outcomes == {}
        growth_mib = (router.rss_kib() - rss_before) / 1024
        assert growth_mib < 40, f"router grew {growth_mib:.0f} MiB with a stalled subscriber"
        # Unstall: everything completes, exactly once, in order, for both.
        subs.call(lambda: stalled.receiver.flow(100_000))
        wait_for(lambda: len(pub.outcomes) == len(msgs), 60, "all outcomes after unstalling")
        assert set(pub.states()) == {"accepted"}
        owed = list(range(2000))
        Tally(owed, [r.properties["i"] for r in stalled.received]).check_exactly_once_in_order()
        Tally(owed, [r.properties["i"] for r in ok.received]).check_exactly_once_in_order()
        subs.stop()
        pubc.stop()

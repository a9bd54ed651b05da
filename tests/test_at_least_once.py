"""At-least-once delivery (docs/guarantees.md, "At least once"), over real sockets with the
SDK and with proton's own client.

What it keeps: a publisher hears "accepted" only when every subscriber accepted, here and
at other routers. What it drops: the mesh's tombstone of a finished message, so a publisher
that resends a message the mesh already finished gets it delivered again, where an
exactly-once one is answered from the tombstone. The same story is told both ways below, so
the difference is what the tests show.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from proton import Message

from amqp_edge.client import MemoryPublisherStore, Publisher, Subscriber, encode_message
from router.config import HostPort
from router.runtime.status import fetch

from .harness import Publisher as ProtonPublisher
from .harness import RouterProcess, free_port, wait_for
from .harness import Subscriber as ProtonSubscriber
from .mesh_harness import start_clients, start_mesh, stop_clients

TOPIC = "orders/eu"


class Router(RouterProcess):
    def __init__(self) -> None:
        self.http = free_port()
        super().__init__("A", "--http", f"127.0.0.1:{self.http}")

    def health(self, what: str) -> int:
        return fetch(HostPort("127.0.0.1", self.http), "/health")[1][what]


def received(sub: Subscriber, want: int, timeout: float = 10.0) -> list[str]:
    """Receive and accept until `want` messages came (or `timeout`); their ids in order."""
    ids: list[str] = []

    def more() -> bool:
        msg = sub.receive(timeout=0.1)
        if msg is not None:
            ids.append(str(msg.message_id))
            sub.accept(msg)
        return len(ids) >= want

    wait_for(more, timeout, f"{want} messages")
    return ids


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_resend_after_the_mesh_finished_a_message(guarantee: str, tmp_path: Path) -> None:
    with Router() as router:
        url = f"amqp://{router.url}"
        sub = Subscriber(url, "orders/#", id="billing", guarantee="at-least-once")
        try:
            wait_for(lambda: router.health("subscribers") == 1, 10, "the subscriber")
            pub = Publisher(url, TOPIC, id="shop", store=MemoryPublisherStore(),
                            guarantee=guarantee)
            pub.send("order 1")
            assert received(sub, 1) == ["shop:1"]
            pub.flush(timeout=10)
            pub.close()
            wait_for(lambda: router.health("records") == 0, 10, "the router to forget the message")
            # The publisher comes back holding message 1 without its outcome (it crashed
            # before it could note it, say): it declares and resends it.
            again = Publisher(url, TOPIC, id="shop", guarantee=guarantee,
                              store=MemoryPublisherStore([(1, encode_message(
                                  "shop", TOPIC, 1, "order 1"))]))
            again.flush(timeout=10)  # either way, the publisher hears "accepted"
            assert again.failures() == [] and again.stats()["accepted_total"] == 1
            again.close()
            # The router delivered it again only at least once; the subscriber, which
            # remembers in memory what it answered in this run, dropped that repeat itself.
            assert sub.receive(timeout=0.2) is None
            repeats = 0 if guarantee == "exactly-once" else 1
            assert sub.stats()["duplicates_suppressed"] == repeats
        finally:
            sub.close()


def test_an_at_least_once_publisher_still_waits_for_every_subscriber_in_a_mesh() -> None:
    """Proton's own client publishes at least once (link property `guarantee`) through a line
    A - B; the outcome comes only after the subscribers at both routers accepted."""
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        hold = lambda m, d: "hold"  # noqa: E731 (answered below, one router at a time)
        near = ProtonSubscriber(mesh["A"].url, "orders/#", policy=hold, container_id="near")
        far = ProtonSubscriber(mesh["B"].url, "orders/#", policy=hold, container_id="far")
        clients = start_clients(near, far)
        try:
            mesh["A"].wait_logged("knows subscriber far/sub@B", 15)
            pub = ProtonPublisher(mesh["A"].url, TOPIC, [Message(body="m1", id="m1")],
                                  properties={"guarantee": "at-least-once"})
            pub_client = start_clients(pub)
            wait_for(lambda: len(near.held) == 1 and len(far.held) == 1, 10, "both copies")
            clients.call(lambda: near.answer_held("accept"))
            with pytest.raises(AssertionError):
                wait_for(lambda: pub.outcomes, 0.5, "an outcome before B's subscriber")
            clients.call(lambda: far.answer_held("accept"))
            wait_for(lambda: pub.outcomes, 10, "the outcome")
            assert pub.states() == ["accepted"]
            stop_clients(pub_client)
        finally:
            stop_clients(clients)


def test_a_bad_guarantee_is_refused_with_a_clear_error() -> None:
    with Router() as router:
        pub = ProtonPublisher(router.url, TOPIC, [Message(body="m1")],
                              properties={"guarantee": "at-most-twice"})
        client = start_clients(pub)
        try:
            wait_for(lambda: pub.link_error, 10, "the refusal")
            assert pub.link_error.name == "amqp:invalid-field"
            assert "guarantee='at-most-twice' is not one of exactly-once, at-least-once" in \
                pub.link_error.description
        finally:
            stop_clients(client)
    with pytest.raises(ValueError, match="guarantee 'sometimes' is not one of"):
        Subscriber("amqp://127.0.0.1:1", "t", id="x", guarantee="sometimes")
    with pytest.raises(ValueError, match="needs state_dir"):
        Subscriber("amqp://127.0.0.1:1", "t", id="x")


def test_the_trio_client_publishes_and_subscribes_at_least_once(tmp_path: Path) -> None:
    import trio

    from amqp_edge.trio_client import open_publisher, open_subscriber

    with Router() as router:
        url = f"amqp://{router.url}"

        async def main() -> list[str]:
            got: list[str] = []
            async with open_subscriber(url, "orders/#", id="billing",
                                       guarantee="at-least-once") as sub:
                await trio.to_thread.run_sync(lambda: wait_for(
                    lambda: router.health("subscribers") == 1, 10, "the subscriber"))
                async with open_publisher(url, topic=TOPIC, id="shop",
                                          state_dir=str(tmp_path / "pub"),
                                          guarantee="at-least-once") as pub:
                    for i in range(10):
                        await pub.send(f"order {i}")
                    with trio.fail_after(10):
                        async for msg in sub:
                            got.append(str(msg.message_id))
                            await sub.accept(msg)
                            if len(got) == 10:
                                break
                        await pub.flush()
            return got

        assert trio.run(main) == [f"shop:{i}" for i in range(1, 11)]

"""`GET /metrics` (router/runtime/metrics.py; names in docs/operations.md), scraped from real
routers during a real stream and real failures: the counters move as documented.

The scrape is parsed with prometheus-client's own parser, so what is checked is what
Prometheus would read.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from proton import ConnectionException
from proton.utils import BlockingConnection

from amqp_edge.client import Publisher, Subscriber

from .harness import RouterProcess, free_port, wait_for
from .mesh_harness import holding_subscriber, publish_one, start_mesh, stop_clients


def scrape(http: int) -> tuple[dict[tuple[str, tuple], float], str]:
    """Every sample by (name, sorted labels), and the Content-Type."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5) as resp:
        kind = resp.headers["Content-Type"]
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, kind


def value(http: int, name: str, **labels: str) -> float:
    return scrape(http)[0].get((name, tuple(sorted(labels.items()))), 0.0)


class Router(RouterProcess):
    def __init__(self, *extra: str) -> None:
        self.http = free_port()
        super().__init__("A", "--http", f"127.0.0.1:{self.http}", *extra)


def test_a_stream_moves_the_delivery_counters_and_gauges(tmp_path: Path) -> None:
    with Router() as router:
        samples, kind = scrape(router.http)
        assert kind.startswith("text/plain; version=0.0.4")
        assert samples[("exactmesh_deliveries_received_total", ())] == 0
        assert samples[("process_resident_memory_bytes", ())] > 0
        url = f"amqp://{router.url}"
        sub = Subscriber(url, "orders/#", id="billing", guarantee="at-least-once")
        pub = Publisher(url, "orders/eu", id="shop", state_dir=str(tmp_path / "p"))
        try:
            wait_for(lambda: value(router.http, "exactmesh_links", role="subscriber") == 1
                     and value(router.http, "exactmesh_links", role="publisher") == 1, 10,
                     "both links")
            assert value(router.http, "exactmesh_connections", protocol="amqp") == 2
            for i in range(50):
                pub.send(f"order {i}")
            got = 0
            while got < 50:
                msg = sub.receive(timeout=10)
                assert msg is not None
                sub.accept(msg)
                got += 1
            pub.flush(timeout=10)
            wait_for(lambda: value(router.http, "exactmesh_records_in_flight") == 0, 10,
                     "the records forgotten")
            samples, _ = scrape(router.http)
            for name in ("received", "delivered", "accepted"):
                assert samples[(f"exactmesh_deliveries_{name}_total", ())] == 50, name
            assert samples[("exactmesh_deliveries_rejected_total", ())] == 0
            assert samples[("exactmesh_copies_accepted_total", ())] == 50
            assert samples[("exactmesh_copies_released_total", ())] == 0
            assert samples[("exactmesh_tombstones", ())] == 50
            assert samples[("exactmesh_deliveries_stuck", ())] == 0
        finally:
            pub.close()
            sub.close()
        wait_for(lambda: value(router.http, "exactmesh_connections", protocol="amqp") == 0, 10,
                 "the connections gone")


def test_a_stuck_subscriber_shows_as_stuck_delayed_and_logged() -> None:
    """A subscriber that holds its copy unanswered: the delivery is stuck after
    `stuck-after`, logged naming that subscriber, and counted as delayed once decided."""
    with Router("--stuck-after", "0.5") as router:
        holder, clients = holding_subscriber(router.url, "slowpoke")
        try:
            wait_for(lambda: value(router.http, "exactmesh_links", role="subscriber") == 1, 10,
                     "the subscriber")
            published = time.monotonic()
            pub, pub_client = publish_one(router.url)
            wait_for(lambda: value(router.http, "exactmesh_deliveries_stuck") == 1, 10,
                     "the delivery stuck")
            wait_for(lambda: router.logged("waiting for slowpoke/sub@A"), 10, "the warning")
            assert router.logged("undecided for")
            assert value(router.http, "exactmesh_deliveries_delayed_1s_total") == 0
            # Held past 1 s (the clock is the condition here: delayed means "decided late").
            wait_for(lambda: time.monotonic() - published > 1.2, 5, "a second of waiting")
            clients.call(lambda: holder.answer_held("release"))  # it comes back...
            wait_for(lambda: len(holder.held) == 1, 10, "the copy again")
            clients.call(lambda: holder.answer_held("accept"))  # ... and is accepted
            wait_for(lambda: pub.outcomes, 10, "the outcome")
            samples, _ = scrape(router.http)
            assert samples[("exactmesh_copies_released_total", ())] == 1
            assert samples[("exactmesh_copies_accepted_total", ())] == 1
            assert samples[("exactmesh_deliveries_redelivered_total", ())] == 1
            assert samples[("exactmesh_deliveries_delayed_1s_total", ())] == 1
            assert samples[("exactmesh_deliveries_delayed_10s_total", ())] == 0
            assert samples[("exactmesh_deliveries_stuck", ())] == 0
            stop_clients(pub_client)
        finally:
            stop_clients(clients)


def test_a_killed_peer_shows_its_link_down_within_seconds() -> None:
    http = free_port()
    with start_mesh("line", 2, extra={"A": ["--http", f"127.0.0.1:{http}"]}) as mesh:
        mesh.wait_links_up()
        wait_for(lambda: value(http, "exactmesh_peer_link_up", peer="B") == 1, 10, "B up")
        assert value(http, "exactmesh_routers_reachable") == 1
        mesh["B"].kill()
        wait_for(lambda: value(http, "exactmesh_peer_link_up", peer="B") == 0, 5,
                 "B's link down")
        assert value(http, "exactmesh_routers_reachable") == 0


PASSWD = shutil.which("mosquitto_passwd")


@pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed (Debian package "
                    "mosquitto)")
def test_a_refused_login_is_counted_by_kind(tmp_path: Path) -> None:
    pw = tmp_path / "passwd"
    subprocess.run([PASSWD, "-c", "-b", str(pw), "alice", "wonder land"], check=True)
    with Router("--password-file", str(pw), "--allow-plain-without-tls") as router:
        assert scrape(router.http)[0].get(("exactmesh_auth_refusals_total", ())) is None
        with pytest.raises(ConnectionException):
            BlockingConnection(router.url, timeout=10, user="alice", password="wrong",
                               allowed_mechs="PLAIN", allow_insecure_mechs=True)
        samples, _ = scrape(router.http)
        refused = {dict(labels)["kind"]: n for (name, labels), n in samples.items()
                   if name == "exactmesh_auth_refusals_total"}
        assert sum(refused.values()) == 1, refused


def test_log_format_json_writes_one_object_per_line_with_the_router_id() -> None:
    """--log-format json: every line a shipper reads is one JSON object, the stuck-delivery
    warning among them with its level and router."""
    import json

    with Router("--log-format", "json", "--stuck-after", "0.3") as router:
        holder, clients = holding_subscriber(router.url, "slowpoke")
        try:
            wait_for(lambda: value(router.http, "exactmesh_links", role="subscriber") == 1, 10,
                     "the subscriber")
            _, pub_client = publish_one(router.url)
            wait_for(lambda: router.logged("waiting for slowpoke/sub@A"), 10, "the warning")
            clients.call(lambda: holder.answer_held("accept"))
            stop_clients(pub_client)
        finally:
            stop_clients(clients)
    lines = [json.loads(line) for line in router.log if line.strip()]
    assert lines and all(set(x) >= {"time", "level", "logger", "router", "message"}
                         for x in lines)
    assert all(x["router"] == "A" and x["time"].endswith("Z") for x in lines)
    (stuck,) = [x for x in lines if "undecided for" in x["message"]]
    assert stuck["level"] == "warning" and stuck["logger"] == "exactmesh.router"
    assert any(x["message"].startswith("exactmesh router A ready") for x in lines)


def test_mqtt_sessions_and_retained_messages_are_counted() -> None:
    """A persistent session created, resumed after its client went away, taken over by a
    second connection with the same client id; a retained message held."""
    from .test_mqtt_edge import Mq

    mqtt_port = free_port()
    with Router("--mqtt", f"127.0.0.1:{mqtt_port}") as router:
        def sessions(event: str) -> float:
            return value(router.http, "exactmesh_mqtt_sessions_total", event=event)

        first = Mq(mqtt_port, "sensor-1", clean=False, expiry=60)
        first.subscribe("sensors/#", 1)
        assert sessions("created") == 1
        first.stop()
        again = Mq(mqtt_port, "sensor-1", clean=False, expiry=60)
        assert again.session_present and sessions("resumed") == 1
        thief = Mq(mqtt_port, "sensor-1", clean=False, expiry=60)
        wait_for(lambda: sessions("taken_over") == 1, 10, "the takeover counted")
        assert value(router.http, "exactmesh_mqtt_sessions_live") == 1
        thief.c.publish("sensors/t1", b"21.5", 1, retain=True)
        wait_for(lambda: value(router.http, "exactmesh_mqtt_retained_messages") == 1, 10,
                 "the retained message")
        assert value(router.http, "exactmesh_connections", protocol="mqtt") == 1
        thief.stop()
        again.c.loop_stop()


def test_per_topic_counters_only_on_request_and_within_their_limit(tmp_path: Path) -> None:
    with Router("--topic-metrics", "2") as router:
        url = f"amqp://{router.url}"
        pubs = [Publisher(url, f"orders/{t}", id=f"p{t}", state_dir=str(tmp_path / t))
                for t in ("eu", "us", "asia")]
        try:
            for n, pub in enumerate(pubs, start=1):
                for i in range(n):
                    pub.send(f"m{i}")
                pub.flush(timeout=10)  # nobody subscribes: accepted (no-subscribers accept)
        finally:
            for pub in pubs:
                pub.close()
        samples, _ = scrape(router.http)
        topics = {(dict(labels)["topic"], dict(labels)["event"]): n
                  for (name, labels), n in samples.items()
                  if name == "exactmesh_topic_messages_total"}
        assert topics == {("orders/eu", "received"): 1, ("orders/eu", "accepted"): 1,
                          ("orders/eu", "rejected"): 0, ("orders/us", "received"): 2,
                          ("orders/us", "accepted"): 2, ("orders/us", "rejected"): 0,
                          ("(other)", "received"): 3, ("(other)", "accepted"): 3,
                          ("(other)", "rejected"): 0}
    with Router() as router:  # off by default
        assert not any(name == "exactmesh_topic_messages_total"
                       for name, _ in scrape(router.http)[0])

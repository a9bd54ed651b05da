"""--max-connections and --max-connections-per-host (docs/security.md): a connection beyond
the limit is closed at once with a log line, counted in /health, and the clients already
served go on; a freed place is taken again."""

from __future__ import annotations

import socket

from tests.harness import RouterProcess, free_port, wait_for
from tests.test_mqtt_edge import V5, Mq
from tests.test_status import get


def _closed(port: int, wait: float = 5.0) -> bool:
    """Whether a new connection is closed by the router within `wait` seconds (one that
    stays open that long was admitted)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(wait)
        try:
            return s.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def test_connections_beyond_the_limit_are_closed_and_the_others_go_on() -> None:
    mqtt, http = free_port(), free_port()
    with RouterProcess("L", "--mqtt", f"127.0.0.1:{mqtt}", "--http", f"127.0.0.1:{http}",
                       "--max-connections", "2") as router:
        a = Mq(mqtt, "first", V5)
        b = Mq(mqtt, "second", V5)
        b.subscribe("lim/#", 1)
        assert _closed(mqtt)  # the third, MQTT
        assert _closed(int(router.url.rpartition(":")[2]))  # the third, AMQP
        wait_for(lambda: sum("--max-connections" in line for line in router.log) >= 2, 10,
                 "both refusals logged")
        mid = a.publish("lim/t", b"still served", 1)
        wait_for(lambda: mid in a.acks and b.payloads() == [b"still served"], 10, "delivery")
        _, health = get(http, "/health")
        assert health["refusals"]["max-connections"] >= 2
        a.stop()
        wait_for(lambda: not _closed(mqtt, 0.5), 10, "a place freed")
        b.stop()


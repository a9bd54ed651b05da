"""MQTT 5 request and response (section 4.10) between paho clients, on one router and across
three, with a requester that goes away before the response is sent.

The requester names a Response Topic and Correlation Data on its request (MQTT-3.3.2.3.5,
3.3.2.3.6); the server passes both on unaltered to the responder (MQTT-3.3.2-15,
MQTT-3.3.2-16), which publishes its response to that topic with the same Correlation Data.
A requester with a persistent session, subscribed to its response topic, gets the response
when it comes back: its router's relay store keeps the copy for the session (docs/relay.md,
"Requests and replies": an MQTT session's own subscription is what an AMQP client's reply-name
substitution gives it, so no substitution is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import free_port, wait_for
from tests.mesh_harness import start_mesh
from tests.test_mqtt_edge import V5, Mq

IDS = ("A", "B", "C")


@pytest.mark.parametrize("where", ["one router", "three routers"])
def test_a_response_reaches_a_requester_that_went_away(tmp_path: Path, where: str) -> None:
    ports = {r: free_port() for r in IDS}
    mesh = start_mesh("line", 3, extra={r: [
        "--mqtt", f"127.0.0.1:{ports[r]}", "--relay-store", str(tmp_path / r),
        "--log-level", "debug"] for r in IDS})
    at_requester, at_responder = ("A", "A") if where == "one router" else ("C", "A")
    try:
        mesh.wait_links_up(timeout=30.0)
        responder = Mq(ports[at_responder], "quoter", V5)
        responder.subscribe("svc/quote", 1)
        requester = Mq(ports[at_requester], "alice", V5, clean=False, expiry=3600)
        requester.subscribe("replies/alice", 1)
        if at_requester != at_responder:
            for r, key in ((at_requester, "quoter/mqtt/svc/quote@A"),
                           (at_responder, "alice/mqtt/replies/alice@C")):
                mesh[r].wait_logged(f"router {r}: knows subscriber {key}")
        mid = requester.publish("svc/quote", b"EURUSD", 1, ResponseTopic="replies/alice",
                                CorrelationData=b"req-1")
        wait_for(lambda: mid in requester.acks, 20, "the PUBACK for the request")
        requester.stop()  # gone before the response is sent
        wait_for(lambda: len(responder.got) == 1, 20, "the request at the responder")
        topic, body, _, props = responder.got[0]
        assert (topic, body) == ("svc/quote", b"EURUSD")
        # MQTT-3.3.2-15, MQTT-3.3.2-16: both properties reach the responder unaltered.
        assert (props.ResponseTopic, props.CorrelationData) == ("replies/alice", b"req-1")
        answer = responder.publish(props.ResponseTopic, b"answer to " + body, 1,
                                   CorrelationData=props.CorrelationData)
        wait_for(lambda: answer in responder.acks, 20,
                 "the PUBACK for the response: its copy for alice is stored")
        back = Mq(ports[at_requester], "alice", V5, clean=False, expiry=3600)
        assert back.session_present
        wait_for(lambda: len(back.got) >= 1, 20, "the response, kept while alice was away")
        (topic, body, _, props), = back.got
        assert (topic, body) == ("replies/alice", b"answer to EURUSD")
        assert props.CorrelationData == b"req-1"
        responder.stop()
        back.stop()
    finally:
        mesh.stop()

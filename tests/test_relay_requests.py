"""Requests and replies through a relay, with reply-name substitution (seed 000;
amqp_edge/replies.py, amqp_edge/request.py, docs/relay.md): the request leaves the relay with
a surrogate reply address the relay holds durably; the reply comes back with the requester's
own reply name; and a requester that disconnected before the reply was sent, even one whose
process ended, gets it when it comes back.

Real router and relay processes and the client SDK; every wait has a deadline."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from amqp_edge.client import ReceivedMessage, Subscriber
from amqp_edge.request import Requester, reply

from .harness import wait_for
from .mesh_harness import start_mesh
from .test_relay_agent import RelayProcess


class Responder:
    """Takes requests at router A and hands them to the test, which answers when it likes."""

    def __init__(self, url: str, state_dir: str) -> None:
        self.url = url
        self.sub = Subscriber(url, "quotes/#", id="quoter", state_dir=state_dir)
        self.requests: queue.Queue[ReceivedMessage] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.sub.receive(timeout=0.1)
            if msg is not None:
                self.sub.accept(msg)
                self.requests.put(msg)

    def answer(self, msg: ReceivedMessage, body: str) -> None:
        reply(msg, body, urls=self.url, id="quoter-replies")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sub.close()


def test_a_request_and_its_reply_through_a_relay(tmp_path: Path) -> None:
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        responder = Responder(f"amqp://{mesh['A'].url}", str(tmp_path / "responder"))
        try:
            relay.wait_logged("link to B up", 15)
            relay.wait_logged("router R: knows subscriber quoter/sub/quoter@A", 15)
            with Requester(topic="quotes/eur", relay=f"amqp://{relay.url}", id="alice",
                           state_dir=str(tmp_path / "alice")) as req:
                req._replies.wait_attached(10)
                mesh["A"].wait_logged("knows subscriber alice/replies@R", 15)
                threading.Thread(target=lambda: _answer_one(responder), daemon=True).start()
                got = req.request("EURUSD", timeout=20)
                assert got is not None, "no reply"
                assert got.body == "1.05 for EURUSD"
                assert got.topic == "replies/alice", "the reply name the request carried"
                assert str(got.correlation_id).startswith("alice:")
        finally:
            responder.close()
            relay.stop()


def _answer_one(responder: Responder) -> None:
    msg = responder.requests.get(timeout=20)
    assert msg.reply_to and msg.reply_to.startswith("_relay/R/"), msg.reply_to
    responder.answer(msg, f"1.05 for {msg.body}")


def test_a_requester_away_when_the_reply_is_sent_gets_it_when_back(tmp_path: Path) -> None:
    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        responder = Responder(f"amqp://{mesh['A'].url}", str(tmp_path / "responder"))
        url, state = f"amqp://{relay.url}", str(tmp_path / "alice")
        try:
            relay.wait_logged("link to B up", 15)
            relay.wait_logged("router R: knows subscriber quoter/sub/quoter@A", 15)
            first = Requester(topic="quotes/usd", relay=url, id="alice", state_dir=state)
            first._replies.wait_attached(10)
            request_id = first.send_request("USDJPY")
            request = responder.requests.get(timeout=20)
            first.disconnect()
            first.close()  # the requester's process ends before the reply is sent
            responder.answer(request, "150 for USDJPY")  # returns once R has it on disk
            with Requester(topic="quotes/usd", relay=url, id="alice", state_dir=state) as again:
                got = again.reply_for(request_id, timeout=20)
                assert got is not None, "the reply did not wait for the requester"
                assert (got.body, got.topic) == ("150 for USDJPY", "replies/alice")
                assert list(again.replies(timeout=1)) == [], "one reply, once"
        finally:
            responder.close()
            relay.stop()


def test_replies_need_a_relay(tmp_path: Path) -> None:
    from .harness import RouterProcess

    with RouterProcess("A") as r, Requester(f"amqp://{r.url}", "quotes/x", id="nobody",
                                            state_dir=str(tmp_path)) as req:
        wait_for(lambda: req._replies._error is not None, 10, "the refusal")
        assert "is kept by relays" in str(req._replies._error)


def test_exactmesh_request_and_collect(tmp_path: Path) -> None:
    """`exactmesh request` gives up after --timeout saying how to collect the reply later;
    `exactmesh request --collect` with the same id prints it once it came."""
    import json
    import subprocess

    from .harness import EXACTMESH

    with start_mesh("line", 2) as mesh:
        mesh.wait_links_up()
        relay = RelayProcess("R", [mesh["B"].mesh_port], tmp_path / "relay")
        responder = Responder(f"amqp://{mesh['A'].url}", str(tmp_path / "responder"))
        base = [EXACTMESH, "request", "--relay", f"amqp://{relay.url}", "--topic",
                "quotes/cli", "--id", "bob", "--state-dir", str(tmp_path / "bob")]
        try:
            relay.wait_logged("link to B up", 15)
            relay.wait_logged("router R: knows subscriber quoter/sub/quoter@A", 15)
            first = subprocess.run([*base, "--body", "GBPUSD", "--timeout", "1"],
                                   capture_output=True, text=True, timeout=60)
            assert first.returncode == 4, first.stderr
            assert "run again with --collect" in first.stderr
            responder.answer(responder.requests.get(timeout=20), "1.27")
            later = subprocess.run([*base, "--collect", "--timeout", "5"],
                                   capture_output=True, text=True, timeout=60)
            assert later.returncode == 0, later.stderr
            out = json.loads(later.stdout)
            assert out["body"] == "1.27" and out["topic"] == "replies/bob"
            assert out["correlation_id"] == "bob:1"
        finally:
            responder.close()
            relay.stop()

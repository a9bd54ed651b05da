"""The status endpoint (`--http`) and `exactmesh status`: the seed's STATUS query.

Real router processes and real proton clients over loopback. A delivery id is found the way
a user finds it: it is the delivery tag the subscriber received. Tests wait on conditions
with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from proton import symbol

from router.core.engine import EngineConfig
from router.core.records import LinkIdentity, outgoing_tag
from router.runtime.status import READ_DEADLINE
from tests.engine_driver import EngineDriver
from tests.harness import (
    EXACTMESH,
    ROOT,
    ClientThread,
    Publisher,
    RouterProcess,
    Subscriber,
    free_port,
    numbered,
    wait_for,
)
from tests.mesh_harness import start_clients, start_mesh, stop_clients, sub_label, wait_outcomes

DELIVERY_FAILED = "exactmesh:delivery-failed"


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET `path`; checks the answer is JSON saying so, on a connection the router closes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.getheader("Content-Type") == "application/json"
        assert resp.getheader("Connection") == "close"
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def raw(port: int, data: bytes, *, half_close: bool = True) -> tuple[int, dict[str, Any]]:
    """Send `data` as it is (then EOF unless told otherwise) and parse the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_DEADLINE + 5) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_answer(s)


def read_answer(s: socket.socket) -> tuple[int, dict[str, Any]]:
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)


def exactmesh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXACTMESH, *args], capture_output=True, text=True, timeout=20,
                          cwd=ROOT)


def status_cli(port: int, *args: str) -> tuple[int, dict[str, Any] | None]:
    result = exactmesh("status", *args, "--http", f"127.0.0.1:{port}")
    return result.returncode, json.loads(result.stdout) if result.stdout else None


@pytest.fixture
def router() -> Iterator[RouterProcess]:
    port = free_port()
    with RouterProcess("A", "--http", f"127.0.0.1:{port}") as r:
        r.http_port = port  # type: ignore[attr-defined]
        assert any(f"http 127.0.0.1:{port}" in line for line in r.log), r.log
        yield r


def held(url: str, name: str = "held") -> Subscriber:
    return Subscriber(url, "orders/#", name, container_id="app", policy=lambda m, d: "hold")


def delivery_id(sub: Subscriber) -> str:
    """What the subscriber was given as the delivery tag: the delivery id."""
    wait_for(lambda: sub.received, 10, f"subscriber {sub.name} to get the message")
    tag = sub.received[0].tag
    assert len(tag) == 32
    return tag.decode()


# ------------------------------------------------------------------ one router


def test_held_subscriber_is_pending_and_accepting_one_succeeded(router: RouterProcess) -> None:
    port = router.http_port  # type: ignore[attr-defined]
    slow = held(router.url)
    fast = Subscriber(router.url, "orders/#", "fast", container_id="app")
    subc = start_clients(slow, fast)
    pub = Publisher(router.url, "orders/eu", numbered(1), name="shop")
    pubc = ClientThread(pub)
    did = delivery_id(slow)
    assert delivery_id(fast) == did  # every subscriber sees the same id
    wait_for(lambda: get(port, f"/deliveries/{did}")[1].get("succeeded"), 10,
             "the fast subscriber's accept to reach the router")

    code, body = get(port, f"/deliveries/{did}")
    assert code == 200
    assert body["router"] == "A" and body["id"] == did and body["origin"] == "A"
    assert body["address"] == "orders/eu" and body["mode"] == "all"
    assert body["outcome"] is None
    assert body["succeeded"] == ["app/fast@A"]
    assert body["pending"] == ["app/held@A"]
    assert body["failed"] == [] and body["reasons"] == {}
    assert body["publisher"].endswith("/shop@A")
    rc, cli_body = status_cli(port, "delivery", did)
    assert rc == 0 and cli_body == body

    code, listing = get(port, "/deliveries")
    assert code == 200 and listing["total"] == 1 and not listing["truncated"]
    assert listing["deliveries"] == [{"id": did, "address": "orders/eu", "mode": "all",
                                      "origin": "A", "succeeded": 1, "failed": 0,
                                      "pending": 1}]
    code, health = get(port, "/health")
    assert code == 200
    assert (health["router"], health["publishers"], health["subscribers"],
            health["records"]) == ("A", 1, 2, 1)
    assert health["stats"]["received"] == 1 and health["stats"]["delivered"] == 2

    assert subc.call(slow.answer_held) == 1
    wait_for(lambda: pub.outcomes, 10, "the publisher's outcome")
    assert pub.states() == ["accepted"]
    # The publisher settles on its outcome; then the router forgets the record.
    wait_for(lambda: get(port, f"/deliveries/{did}")[0] == 404, 10, "the record to go")
    code, body = get(port, f"/deliveries/{did}")
    assert body["error"] == (f"delivery {did} is not tracked here: it was settled and "
                             "forgotten, never seen, or is tracked by its origin router")
    rc, cli_body = status_cli(port, "delivery", did)
    assert rc == 1 and cli_body is not None and cli_body["error"] == body["error"]
    stop_clients(subc, pubc)


def test_rejecting_subscriber_is_failed_with_its_reason_while_the_record_lives(
    router: RouterProcess,
) -> None:
    port = router.http_port  # type: ignore[attr-defined]
    holder = held(router.url)
    refuser = Subscriber(router.url, "orders/#", "refuser", container_id="app",
                         policy=lambda m, d: "reject")
    subc = start_clients(holder, refuser)
    pub = Publisher(router.url, "orders/us", numbered(1))
    pubc = ClientThread(pub)
    did = delivery_id(holder)
    # Mode all: the rejection decides at once and the publisher settles, but the holder
    # still owes an answer, so the record stays and says who failed and why.
    wait_for(lambda: pub.outcomes, 10, "the publisher's outcome")
    assert pub.states() == ["rejected"]
    code, body = get(port, f"/deliveries/{did}")
    assert code == 200
    assert body["failed"] == ["app/refuser@A"]
    assert body["reasons"] == {"app/refuser@A": "rejected it"}
    assert body["pending"] == ["app/held@A"] and body["succeeded"] == []
    assert body["outcome"]["condition"] == DELIVERY_FAILED
    assert "app/refuser@A rejected it" in body["outcome"]["description"]
    assert subc.call(holder.answer_held) == 1
    wait_for(lambda: get(port, f"/deliveries/{did}")[0] == 404, 10, "the record to go")
    stop_clients(subc, pubc)


def test_bad_requests_get_clear_errors_and_the_router_keeps_serving(
    router: RouterProcess,
) -> None:
    port = router.http_port  # type: ignore[attr-defined]
    # A request that never ends: opened first, its answer is read last (after the deadline).
    stalled = socket.create_connection(("127.0.0.1", port), timeout=READ_DEADLINE + 5)
    stalled.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")

    code, body = raw(port, b"GARBAGE\r\n\r\n")
    assert code == 400 and "malformed request line" in body["error"]
    code, body = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n")  # then EOF: no empty line
    assert code == 400 and "closed before the request ended" in body["error"]
    code, body = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 10_000 + b"\r\n\r\n")
    assert code == 431 and "exceed 8192 bytes" in body["error"]
    code, body = raw(port, b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert code == 405 and "answers GET" in body["error"]
    code, body = get(port, "/nothing-here")
    assert code == 404 and "'/nothing-here'" in body["error"]
    assert body["endpoints"] == ["GET /deliveries/{id}", "GET /deliveries", "GET /health",
                                 "GET /metrics", "GET /stat", "GET /console"]
    code, body = get(port, "/deliveries/not-an-id")
    assert code == 400 and "32 hexadecimal characters" in body["error"]

    with stalled:
        code, body = read_answer(stalled)
    assert code == 408 and f"within {READ_DEADLINE:g} s" in body["error"]

    assert get(port, "/health")[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("HEAD", "/health")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b""  # HEAD: the headers alone
    conn.close()
    pub = Publisher(router.url, "nobody/listens", numbered(2))
    pubc = ClientThread(pub)
    wait_for(lambda: len(pub.outcomes) == 2, 10, "AMQP outcomes after the bad requests")
    assert pub.states() == ["accepted", "accepted"]
    pubc.stop()


def test_status_command_usage_errors_and_unreachable_router() -> None:
    port = free_port()  # nobody listens there
    result = exactmesh("status", "health", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"exactmesh: error: cannot reach the status endpoint at http://127.0.0.1:{port}/health:"
        " [Errno 111] Connection refused"]
    result = exactmesh("status", "deliveries", "--http", "nowhere")
    assert result.returncode == 2
    assert result.stderr.strip() == ("exactmesh: error: --http: 'nowhere' is not HOST:PORT "
                                     "(for example 127.0.0.1:5672)")
    assert exactmesh("status", "delivery", "--http", f"127.0.0.1:{port}").returncode == 2


def test_http_port_in_use_names_the_http_option() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = exactmesh("router", "--id", "A", "--amqp", f"127.0.0.1:{free_port()}",
                           "--http", f"127.0.0.1:{port}")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"exactmesh: error: cannot listen on 127.0.0.1:{port} for HTTP")
    assert "in use" in line and "--http" in line


# ------------------------------------------------------------------ a mesh


def test_origin_router_lists_a_held_subscriber_on_another_router_as_pending() -> None:
    http_a, http_c = free_port(), free_port()
    extra = {"A": ["--http", f"127.0.0.1:{http_a}"], "C": ["--http", f"127.0.0.1:{http_c}"]}
    with start_mesh("line", 3, extra=extra) as mesh:
        holder = Subscriber(mesh["C"].url, "orders/#", "held", container_id="app-c",
                            policy=lambda m, d: "hold")
        subc = start_clients(holder)
        mesh.wait_knows("A", holder, "C")
        pub = Publisher(mesh["A"].url, "orders/eu", numbered(1), name="shop")
        pubc = ClientThread(pub)
        did = delivery_id(holder)
        label = sub_label(holder, "C")
        code, body = get(http_a, f"/deliveries/{did}")
        assert code == 200, body
        assert (body["router"], body["origin"], body["pending"]) == ("A", "A", [label])
        assert body["publisher"].endswith("/shop@A") and body["outcome"] is None
        # C tracks its own part of A's message under the same id.
        code, body = get(http_c, f"/deliveries/{did}")
        assert code == 200, body
        assert (body["router"], body["origin"], body["pending"]) == ("C", "A", [label])
        assert subc.call(holder.answer_held) == 1
        wait_for(lambda: pub.outcomes, 10, "the publisher's outcome")
        assert pub.states() == ["accepted"]
        wait_for(lambda: get(http_a, f"/deliveries/{did}")[0] == 404, 10, "A to forget it")
        stop_clients(subc, pubc)


# ------------------------------------------------------------------ the engine's id index


def test_engine_finds_records_by_id_when_a_tag_is_reused() -> None:
    """A tag reused while an earlier message with it is still queued gives the newer message
    an id of its own (the tag its subscribers see), so both can be asked for."""
    eng = EngineDriver(EngineConfig(router_id="A"))
    ident = LinkIdentity("c", "p")
    did = outgoing_tag("c", "p", b"x").decode()
    eng.attach_publisher(1, ident, "t", "all")
    eng.attach_subscriber(3, LinkIdentity("c", "s"), "t")  # no credit: copies wait
    eng.message(1, b"x", b"one", settled=True)
    eng.message(1, b"x", b"two", settled=True)
    one = eng.find(did)
    assert one is not None and one.payload == b"one"
    two = next(r for r in eng.records.values() if r.payload == b"two")
    assert two.id != did and eng.find(two.id) is two
    eng.subscriber_credit(3, 2)  # both go, in order, and are forgotten
    assert eng.find(did) is None and eng.find(two.id) is None and not eng.records
    assert not eng._by_id and not eng._id_clashes


# ------------------------------------------------------------------ in doubt, then resolved


def test_parts_in_doubt_after_a_partition_are_resolved_once_it_heals() -> None:
    """Issue 18, item 4 (docs/guarantees.md, "Failed, or in doubt"). B, the subscriber's
    router, is cut off from A, the origin, for longer than A's unreachable-timeout, and the
    subscriber accepts what it holds while the link is cut: A fails those messages naming
    it in doubt (it may have processed them; the answers were lost), and what is published
    while B is given up too. Once the link heals, B's verdicts come through and A's status
    query resolves the parts of the 30 it held: accepted. The rest never reached B, which
    therefore cannot say what its subscriber did with them: they stay in doubt."""
    http_a = free_port()
    extra = {"A": ["--http", f"127.0.0.1:{http_a}", "--unreachable-timeout", "2"]}
    with start_mesh("line", 2, extra=extra, proxied=[("A", "B")]) as mesh:
        sub = Subscriber(mesh["B"].url, "doubt/#", "sub", container_id="app-b",
                         policy=lambda m, d: "hold")
        subc = start_clients(sub)
        mesh.wait_knows("A", sub, "B")
        label = sub_label(sub, "B")
        pub = Publisher(mesh["A"].url, "doubt/x", numbered(80), window=30)
        pubc = ClientThread(pub)
        wait_for(lambda: len(sub.held) >= 30, 15, "the publisher's window of 30 held at B")
        since = len(mesh["A"].log)
        proxy = mesh.proxy("A", "B")
        proxy.cut()
        assert subc.call(lambda: sub.answer_held("accept")) == 30  # answers that cannot reach A
        mesh["A"].wait_logged("router B unreachable for", 15, since)
        wait_outcomes(pub, 30)
        proxy.restore()
        mesh["A"].wait_logged("router B reachable again", 15, since)
        ids = {}
        for i, o in pub.outcomes.items():
            assert o.state == "rejected", (i, o)
            assert o.info.get(symbol("in_doubt")) == [label], (i, o.info)
            ids[i] = o.info[symbol("delivery_id")]

        def resolved() -> dict[int, dict[str, Any]]:
            out = {}
            for i in range(30):
                code, body = get(http_a, f"/deliveries/{ids[i]}")
                assert code == 200 and body["forgotten"], body
                if body["in_doubt"]:
                    return {}
                out[i] = body["resolved"][label]
            return out

        answers = wait_for(resolved, 20, "A to resolve the 30 parts in doubt")
        assert all(r["accepted"] and r["router"] == "B" for r in answers.values()), answers
        assert sub.bodies() == [m.body for m in pub.messages[:30]]
        for i in range(30, 80):  # never at B: B cannot say, so they stay in doubt
            code, body = get(http_a, f"/deliveries/{ids[i]}")
            assert (code, body["in_doubt"], body["resolved"]) == (200, [label], {}), body
        stop_clients(subc, pubc)

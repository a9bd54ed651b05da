"""Two third-party JavaScript clients against real routers: MQTT.js (npm `mqtt`) for No Local,
Topic Aliases and shared subscriptions, rhea (npm `rhea`, AMQP 1.0) for the anonymous relay,
dynamic receivers and shared groups joined by link property.

Each client is a Node script in tests/js/ run as a child process: the test writes commands to
its stdin and reads one JSON event a line from its stdout. The versions are pinned by
tests/js/package-lock.json; `make test` installs them (`npm ci`), and without them (or
without node) these tests skip. Nothing sleeps to synchronise: every wait is on an event or a
router log line, with a deadline, and every process is stopped by its PID."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RouterProcess, free_port, wait_for
from tests.mesh_harness import Mesh, start_mesh

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")
SCRIPT_TIMEOUT_MS = 40_000  # a script exits by itself after this, whatever the test does


def _missing() -> str | None:
    """Why the JavaScript clients cannot run here, or None when they can."""
    if NODE is None:
        return "node is not installed (make test installs nodejs and npm when it can)"
    for package in ("mqtt", "rhea"):
        if not (JS / "node_modules" / package).is_dir():
            return (f"tests/js/node_modules/{package} is missing: run `make test`, or "
                    "`cd tests/js && npm ci`")
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


class JsClient:
    """A client script as a child process: `send` writes a command line to its stdin; its
    stdout's JSON lines are collected in `events` by a reader thread."""

    def __init__(self, script: str, *args: str) -> None:
        assert NODE is not None
        cmd = [NODE, str(JS / script), *args, "--timeout-ms", str(SCRIPT_TIMEOUT_MS)]
        self.name = " ".join(args)
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                     cwd=JS)
        self._readers = [threading.Thread(target=self._read_events, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._readers:
            t.start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except json.JSONDecodeError:  # kept, so that a failure shows it
                self.events.append({"event": "unparsed", "line": line})

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send(self, op: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """The events of type `kind` whose fields equal `match`."""
        return [e for e in list(self.events)
                if e["event"] == kind and all(e.get(k) == v for k, v in match.items())]

    def wait(self, kind: str, n: int = 1, timeout: float = 15.0,
             **match: Any) -> list[dict[str, Any]]:
        """Wait for at least `n` events of `kind` matching `match`; fail at once, with the
        script's output, if it exits first."""
        def enough() -> list[dict[str, Any]] | None:
            got = self.of(kind, **match)
            if len(got) >= n:
                return got
            if self.proc.poll() is not None and not self._readers[0].is_alive():
                raise AssertionError(f"{self.name} exited before {n} {kind} events:\n"
                                     f"{self.tail()}")
            return None

        try:
            return wait_for(enough, timeout, f"{n} {kind} events {match} from {self.name}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def tail(self, n: int = 15) -> str:
        return "".join(json.dumps(e) + "\n" for e in self.events[-n:]) + "".join(self.stderr)

    def stop(self) -> None:
        """Ask the script to close its connection and exit; kill it (by PID) if it does not."""
        if self.proc.poll() is None:
            try:
                self.send("end")
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        for t in self._readers:
            t.join(5)


Clients = Callable[..., JsClient]


@pytest.fixture
def js() -> Iterator[Clients]:
    """Starts client scripts for one test (`js("mqtt", port, id)`, `js("rhea", url, id)`),
    and stops every one of them afterwards, also when the test failed half-way."""
    started: list[JsClient] = []

    def start(kind: str, where: int | str, name: str, *flags: str) -> JsClient:
        if kind == "mqtt":
            c = JsClient("mqtt_client.js", "--port", str(where), "--id", name, *flags)
            started.append(c)
            c.wait("connect")
        elif kind == "rhea":
            port = str(where).rsplit(":", 1)[1]
            c = JsClient("rhea_client.js", "--port", port, "--container", name, *flags)
            started.append(c)
            c.wait("connection_open")
        else:
            raise ValueError(f"no client script for {kind!r}")
        return c

    yield start
    for c in started:
        c.stop()


@pytest.fixture
def router() -> Iterator[RouterProcess]:
    """One router with an MQTT listener; `router.mqtt` is its port."""
    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}") as r:
        r.mqtt = port  # type: ignore[attr-defined]
        yield r


@pytest.fixture
def mesh() -> Iterator[Mesh]:
    """Three routers in a line A - B - C, each with an MQTT listener (`mesh.mqtt[id]`). One
    mesh per test (about a second to start): the tests of shared groups use the same group."""
    ports = {r: free_port() for r in "ABC"}
    m = start_mesh("line", 3, extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}"] for r in "ABC"})
    m.mqtt = ports  # type: ignore[attr-defined]
    try:
        m.wait_links_up(timeout=30.0)  # generous: three routers start on one loaded core
        yield m
    finally:
        m.stop()


def subscribe(client: JsClient, topic_filter: str, qos: int = 1, **opts: Any) -> None:
    client.send("subscribe", filter=topic_filter, qos=qos, **opts)
    [suback] = client.wait("suback", filter=topic_filter)
    assert suback["error"] is None and suback["granted"][0]["qos"] == qos, suback


def payloads(client: JsClient) -> list[str]:
    return [e["payload"] for e in client.of("message")]


def bodies(client: JsClient, receiver: str) -> list[str]:
    return [e["body"] for e in client.of("message", receiver=receiver)]


def open_link(client: JsClient, op: str, name: str, **fields: Any) -> dict[str, Any]:
    """Attach a receiver or sender and return its open event (the router's answer)."""
    client.send(op, name=name, **fields)
    opened = "receiver_open" if op == "receiver" else "sender_open"
    wait_for(lambda: client.of(opened, name=name) or client.of("link_error", name=name), 10,
             f"{op} {name} attached")
    assert not client.of("link_error", name=name), client.tail()
    return client.of(opened, name=name)[0]


def assert_all_succeeded(acks: list[dict[str, Any]]) -> None:
    failed = [a for a in acks if a["error"] or a["reason_code"] >= 0x80]
    assert not failed, f"{len(failed)} publishes failed, e.g. {failed[:3]}"


# ------------------------------------------------------------------ MQTT.js, one router


def test_mqttjs_no_local(router: RouterProcess, js: Clients) -> None:
    """MQTT-3.8.3-3: with No Local set, the server does not forward a client its own
    publications. `me` (No Local on nl/#) publishes, then `other` does: `me` gets only
    `other`'s message. Its own could not arrive later: the router sends a QoS 1 PUBACK only
    once every matched subscriber accepted the message. `other`'s plain subscription on the
    same filter gets everything, its own messages included: No Local is per subscription."""
    port = router.mqtt  # type: ignore[attr-defined]
    me, other = js("mqtt", port, "nl-me"), js("mqtt", port, "nl-other")
    subscribe(me, "nl/#", nl=True)
    subscribe(other, "nl/#")
    me.send("publish", topic="nl/t", payload="mine {i}", qos=1, count=3)
    assert_all_succeeded(me.wait("puback", 3))
    other.send("publish", topic="nl/t", payload="theirs", qos=1)
    assert_all_succeeded(other.wait("puback"))
    me.wait("message", payload="theirs")
    assert payloads(me) == ["theirs"]
    other.wait("message", 4)
    assert payloads(other) == ["mine 0", "mine 1", "mine 2", "theirs"]


def alias_plan() -> list[str]:
    """Topics in an order that makes MQTT.js's automatic aliases do everything section
    3.3.2.3.4 allows: set an alias with the topic, use it alone (empty topic), and, past the
    server's Topic Alias Maximum (64), bind an alias used before to another topic."""
    first = [f"ta/dev/{i}/telemetry" for i in range(10)]
    more = [f"ta/dev/{i}/telemetry" for i in range(10, 80)]
    return first * 3 + more + first


def test_mqttjs_topic_aliases(router: RouterProcess, js: Clients) -> None:
    """MQTT 5 section 3.3.2.3.4 (Topic Alias) and MQTT-3.3.2-12: MQTT.js with
    `autoAssignTopicAlias` sends a topic once with its alias and then the alias alone, and
    re-binds aliases once it used all the CONNACK allows. Every message reaches the
    subscriber with its real topic, in order, and every PUBACK is a success."""
    port = router.mqtt  # type: ignore[attr-defined]
    sub = js("mqtt", port, "ta-sub")
    subscribe(sub, "ta/#")
    pub = js("mqtt", port, "ta-pub", "--auto-assign-topic-alias")
    most = pub.of("connect")[0]["properties"]["topicAliasMaximum"]
    plan = alias_plan()
    for i, topic in enumerate(plan):
        pub.send("publish", topic=topic, payload=f"{i} {topic}", qos=1)
    assert_all_succeeded(pub.wait("puback", len(plan)))
    got = sub.wait("message", len(plan))
    assert [(m["topic"], m["payload"]) for m in got] == [
        (t, f"{i} {t}") for i, t in enumerate(plan)]
    sent = pub.of("sent")
    assert all(s["alias"] is not None and 1 <= s["alias"] <= most for s in sent), sent[:3]
    # rounds 2 and 3 of the first ten topics: 20 PUBLISHes with the alias alone
    assert sum(s["topic"] == "" for s in sent) >= 20, "MQTT.js did not send aliases alone"
    bound: dict[int, set[str]] = {}
    for s in sent:
        if s["topic"]:
            bound.setdefault(s["alias"], set()).add(s["topic"])
    assert any(len(topics) > 1 for topics in bound.values()), "no alias was re-bound"


# ------------------------------------------------------------------ across three routers


def knows(mesh: Mesh, at: str, key: str, where: str) -> None:
    """Wait until router `at` learned from gossip of subscriber `key` attached at `where`
    (MQTT keys are CLIENT/mqtt/FILTER, AMQP ones CONTAINER/LINK)."""
    mesh[at].wait_logged(f"router {at}: knows subscriber {key}@{where}", timeout=15)


def test_mqttjs_shared_subscription_across_routers(mesh: Mesh, js: Clients) -> None:
    """MQTT 5 section 4.8.2 (shared subscriptions): two MQTT.js members of `$share/g/jobs/#`,
    at B and at C, and an MQTT.js publisher at A sending 100 QoS 1 messages. Each message
    arrives at exactly one member, none is lost, and every PUBACK is a success."""
    ports, group, n = mesh.mqtt, "$share/g/jobs/#", 100  # type: ignore[attr-defined]
    members = {r: js("mqtt", ports[r], f"js-member-{r}") for r in "BC"}
    for r, m in members.items():
        subscribe(m, group)
        knows(mesh, "A", f"js-member-{r}/mqtt/{group}", r)
    pub = js("mqtt", ports["A"], "js-jobs-pub")
    pub.send("publish", topic="jobs/{i}", payload="job {i}", qos=1, count=n)
    assert_all_succeeded(pub.wait("puback", n, timeout=30))
    wait_for(lambda: sum(len(m.of("message")) for m in members.values()) >= n, 15,
             "every job at a member")
    got = Counter(p for m in members.values() for p in payloads(m))
    assert set(got) == {f"job {i}" for i in range(n)}, "a job no member got"
    assert not [p for p, k in got.items() if k > 1], "a job went to both members"
    assert all(payloads(m) for m in members.values()), "one member got every job"


def test_rhea_anonymous_relay_across_routers(mesh: Mesh, js: Clients) -> None:
    """AMQP 1.0 sections 3.5.4 and 3.2.4 (anonymous relay): a rhea sender at A whose target
    has no address sends each message with `to` set; the rhea subscriber at C, two routers
    away, gets each one with its topic, and each is accepted."""
    sub = js("rhea", mesh["C"].url, "relay-sub")
    open_link(sub, "receiver", "relay-in", address="relay/#")
    knows(mesh, "A", "relay-sub/relay-in", "C")
    pub = js("rhea", mesh["A"].url, "relay-pub")
    assert open_link(pub, "sender", "anon", address=None)["address"] is None  # echoed null
    pub.send("send", sender="anon", count=5, message={"to": "relay/{i}", "body": "r{i}"})
    outcomes = pub.wait("outcome", 5)
    assert [o["state"] for o in outcomes] == ["accepted"] * 5, outcomes
    got = sub.wait("message", 5, receiver="relay-in")
    assert [(m["to"], m["body"]) for m in got] == [(f"relay/{i}", f"r{i}") for i in range(5)]


def test_rhea_dynamic_receiver_gets_replies_across_routers(mesh: Mesh, js: Clients) -> None:
    """AMQP 1.0 section 3.5.3 (dynamic source): a rhea requester at C opens a receiver with
    `source: {dynamic: true}` and gets an address the router named; it sends requests with
    that `reply_to` through an anonymous sender. A rhea responder at A answers each on its
    own anonymous sender, `to` = the request's `reply_to`: every reply reaches the dynamic
    receiver, with its correlation id."""
    responder = js("rhea", mesh["A"].url, "js-responder")
    open_link(responder, "sender", "replies-out", address=None)
    open_link(responder, "receiver", "svc-in", address="svc/js-echo", reply_with="replies-out")
    requester = js("rhea", mesh["C"].url, "js-requester")
    reply_to = open_link(requester, "receiver", "replies", dynamic=True)["address"]
    assert reply_to and reply_to.startswith("_dynamic/C/"), reply_to
    open_link(requester, "sender", "requests", address=None)
    knows(mesh, "C", "js-responder/svc-in", "A")
    mesh["A"].wait_logged(f"router A: knows subscriber js-requester/replies@C (filter {reply_to})")
    requester.send("send", sender="requests", count=3, message={
        "to": "svc/js-echo", "body": "ping {i}", "reply_to": reply_to,
        "correlation_id": "c{i}"})
    replies = requester.wait("message", 3, receiver="replies")
    assert [(r["body"], r["correlation_id"]) for r in replies] == [
        (f"echo ping {i}", f"c{i}") for i in range(3)]
    assert [o["state"] for o in responder.wait("outcome", 3)] == ["accepted"] * 3
    assert [o["state"] for o in requester.wait("outcome", 3)] == ["accepted"] * 3


def test_rhea_shared_group_by_link_property_across_routers(mesh: Mesh, js: Clients) -> None:
    """docs/mqtt.md "Shared subscriptions" (MQTT 5 section 4.8.2, for AMQP): rhea receivers
    on `jobs/#` with the link property `exactmesh:shared-group` = `g`, at B and at C, are one
    group; a rhea sender at A sends 100 messages to `jobs/amqp`: each reaches exactly one of
    them, and each is accepted."""
    n, group = 100, {"exactmesh:shared-group": "g"}
    members = {r: js("rhea", mesh[r].url, f"grp-{r}") for r in "BC"}
    for r, m in members.items():
        open_link(m, "receiver", "w", address="jobs/#", properties=group)
        knows(mesh, "A", f"grp-{r}/w", r)
    pub = js("rhea", mesh["A"].url, "grp-pub")
    open_link(pub, "sender", "jobs", address="jobs/amqp")
    pub.send("send", sender="jobs", count=n, message={"body": "task {i}"})
    outcomes = pub.wait("outcome", n, timeout=30)
    assert Counter(o["state"] for o in outcomes) == {"accepted": n}, outcomes[:3]
    wait_for(lambda: sum(len(m.of("message")) for m in members.values()) >= n, 15,
             "every message at a member")
    got = Counter(b for m in members.values() for b in bodies(m, "w"))
    assert set(got) == {f"task {i}" for i in range(n)}, "a message no member got"
    assert not [b for b, k in got.items() if k > 1], "a message went to both members"
    assert all(bodies(m, "w") for m in members.values()), "one member got every message"

"""The MQTT edge with Debian's mosquitto_pub / mosquitto_sub (MQTT 3.1.1 with -V mqttv311
and 5.0 with -V mqttv5), together with paho-mqtt and proton (AMQP) clients in one topic
space, against one router and across a line of three (issue 5).

`make test` installs Debian's mosquitto-clients when mosquitto_pub is missing; without it
(no apt) these tests skip. Every process is stopped by its PID; every wait is on a condition
with a deadline (a mosquitto_sub tells it subscribed on its -d output, routers of a mesh log
what gossip told them); no sleeps to synchronize.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
from typing import Any

import pytest
from proton import Message

from tests.harness import ClientThread, Publisher, RouterProcess, Subscriber, free_port, wait_for
from tests.mesh_harness import knows_line, start_mesh
from tests.test_mqtt_edge import V5, V311, Mq

MOSQUITTO_PUB = shutil.which("mosquitto_pub")
MOSQUITTO_SUB = shutil.which("mosquitto_sub")
STDBUF = shutil.which("stdbuf")  # coreutils: line-buffers mosquitto_sub's piped stdout

pytestmark = pytest.mark.skipif(
    not (MOSQUITTO_PUB and MOSQUITTO_SUB),
    reason="mosquitto_pub / mosquitto_sub not found: `make test` installs Debian's "
    "mosquitto-clients, which needs apt (apt-get install mosquitto-clients)",
)

VERSIONS = {"3.1.1": "mqttv311", "5.0": "mqttv5"}
WAIT = 60.0  # bound on any one wait for messages (one shared core)


def _stop(proc: subprocess.Popen) -> None:
    """Stop one process we started, by its PID."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class MosqSub:
    """A mosquitto_sub process; `messages` holds (qos, topic, payload) as they arrive."""

    def __init__(self, port: int, client_id: str, topic_filter: str, qos: int, version: str,
                 count: int | None = None) -> None:
        args = [MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(port), "-V", version,
                "-i", client_id, "-q", str(qos), "-t", topic_filter, "-d",
                "-F", "MSG %q %t %p"]
        if count is not None:
            args += ["-C", str(count)]
        if STDBUF:
            args = [STDBUF, "-oL", *args]
        self.client_id, self.filter = client_id, topic_filter
        self.lines: list[str] = []
        self.messages: list[tuple[int, str, str]] = []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            wait_for(lambda: any(line.startswith("Subscribed (mid") for line in self.lines)
                     or self.proc.poll() is not None, 15, f"{client_id}'s SUBACK")
            assert self.proc.poll() is None, f"mosquitto_sub exited: {''.join(self.lines)}"
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("MSG "):
                _, qos, topic, payload = line.rstrip("\n").split(" ", 3)
                self.messages.append((int(qos), topic, payload))

    def payloads(self) -> list[str]:
        return [m[2] for m in self.messages]

    def wait_count(self, n: int, timeout: float = WAIT) -> None:
        wait_for(lambda: len(self.messages) >= n, timeout,
                 f"{self.client_id}: {n} messages (has {len(self.messages)})")

    def wait_exit(self, timeout: float = WAIT) -> None:
        """With -C N: mosquitto_sub exits by itself after its N messages."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.client_id} still running after {timeout}s with "
                                 f"{len(self.messages)} messages") from None
        self._reader.join(5)
        assert self.proc.returncode == 0, "".join(self.lines[-20:])

    def stop(self) -> None:
        _stop(self.proc)
        self._reader.join(5)


class MosqPub:
    """A mosquitto_pub process sending one message per line of `lines` (-l)."""

    def __init__(self, port: int, client_id: str, topic: str, qos: int, version: str,
                 lines: list[str]) -> None:
        args = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-V", version,
                "-i", client_id, "-q", str(qos), "-t", topic, "-l", "-d"]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(f"{line}\n" for line in lines))
        self.proc.stdin.close()
        self.proc.stdin = None  # written and closed: communicate() only reads
        self.qos, self.n = qos, len(lines)
        self.out = ""

    def wait(self, timeout: float = WAIT) -> None:
        """It exits 0 once every message was acknowledged (PUBACK / PUBREC, as counted in
        its -d output). At QoS 2 the PUBREC is the mesh's acceptance; PUBCOMPs are not
        counted, because mosquitto_pub -l disconnects as soon as its *last* message
        completes, and an earlier one may still be between PUBREC and PUBCOMP then."""
        try:
            self.out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
            out, _ = self.proc.communicate()
            raise AssertionError(f"mosquitto_pub still running after {timeout}s; its last "
                                 f"output:\n{out[-1500:]}") from None
        assert self.proc.returncode == 0, self.out[-2000:]
        ack = {1: "received PUBACK", 2: "received PUBREC"}.get(self.qos)
        if ack:
            mids = set(re.findall(ack + r" \(Mid: (\d+)", self.out))
            assert len(mids) == self.n, self.out[-2000:]
            assert "RC:0)" in self.out and not any(
                "received PUB" in line and "RC:" in line and "RC:0)" not in line
                for line in self.out.splitlines()
            ), "a failure reason code"

    def stop(self) -> None:
        _stop(self.proc)


def mosq_pub_one(port: int, topic: str, payload: str, qos: int, version: str) -> None:
    subprocess.run([MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-V", version,
                    "-q", str(qos), "-t", topic, "-m", payload], check=True, timeout=WAIT,
                   stdin=subprocess.DEVNULL, capture_output=True)


def check_exactly_once_per_publisher(got: list[str], owed: dict[str, list[str]]) -> None:
    """Every owed payload exactly once, each publisher's in its order (payloads are
    `PREFIX-i`; publishers interleave)."""
    all_owed = [p for ps in owed.values() for p in ps]
    missing = sorted(set(all_owed) - set(got))
    dupes = sorted({p for p in got if got.count(p) > 1})
    extra = sorted(set(got) - set(all_owed))
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert not dupes, f"{len(dupes)} duplicated, e.g. {dupes[:5]}"
    assert not extra, f"{len(extra)} not owed, e.g. {extra[:5]}"
    for prefix, ps in owed.items():
        mine = [p for p in got if p.startswith(prefix + "-")]
        assert mine == ps, f"publisher {prefix}: out of order"


def _as_text(body: Any) -> str:
    return bytes(body).decode() if isinstance(body, bytes | memoryview) else str(body)


def _recording(texts: list[str]) -> Any:
    """A Subscriber policy that copies each body as text when it arrives (a Data body is a
    memoryview into proton's buffer, only valid then) and accepts it."""
    def policy(m: Message, d: Any) -> str:
        texts.append(_as_text(m.body))
        return "accept"
    return policy


@pytest.fixture(scope="module")
def router() -> Any:
    port = free_port()
    with RouterProcess("A", "--mqtt", f"127.0.0.1:{port}") as r:
        r.mqtt_port = port  # type: ignore[attr-defined]
        yield r
        assert r.proc.poll() is None, "the router died"
        assert "Traceback" not in "".join(r.log), "".join(r.log)[-3000:]


@contextlib.contextmanager
def stopping(*things: Any) -> Any:
    try:
        yield
    finally:
        for t in things:
            with contextlib.suppress(Exception):
                t.stop()


# ------------------------------------------------------------------------ one router


@pytest.mark.parametrize("version", list(VERSIONS), ids=list(VERSIONS))
def test_mosquitto_qos_0_1_2_wildcards_exactly_once(router: Any, version: str) -> None:
    """mosquitto_sub at QoS 0, 1 and 2 on wildcard filters, mosquitto_pub -l at QoS 2: the
    QoS 1 and 2 subscribers get every message once, in order, at their QoS; the QoS 0 one at
    most once, in order; a topic a filter does not match is not delivered to it."""
    v, t, port = VERSIONS[version], f"w{version.replace('.', '')}", router.mqtt_port
    n = 200  # below the router's Receive Maximum (256): see the xfail test below
    q0 = MosqSub(port, f"{t}-q0", f"{t}/+/x", 0, v)
    q1 = MosqSub(port, f"{t}-q1", f"{t}/+/x", 1, v)
    q2 = MosqSub(port, f"{t}-q2", f"{t}/#", 2, v, count=n + 1)
    with stopping(q0, q1, q2):
        # not matched by +/x: only the # subscriber gets it (it is accepted by then: PUBCOMP)
        mosq_pub_one(port, f"{t}/a/y", "y", 2, v)
        pub = MosqPub(port, f"{t}-pub", f"{t}/a/x", 2, v, [f"m-{i}" for i in range(n)])
        with stopping(pub):
            pub.wait()
        owed = [f"m-{i}" for i in range(n)]
        q2.wait_exit()
        q1.wait_count(n)
        assert q2.messages[0] == (2, f"{t}/a/y", "y")
        assert q2.payloads()[1:] == owed and {m[0] for m in q2.messages[1:]} == {2}
        assert q1.payloads() == owed and {m[0] for m in q1.messages} == {1}
        got0 = q0.payloads()
        assert got0 == owed[: len(got0)], "QoS 0: duplicated or out of order"
        assert {m[0] for m in q0.messages} <= {0}
        # QoS 0 and QoS 1 publishes reach a QoS 1 subscriber at min(sub, message) QoS
        mosq_pub_one(port, f"{t}/b/x", "q0", 0, v)
        mosq_pub_one(port, f"{t}/b/x", "q1", 1, v)
        q1.wait_count(n + 2)
        assert q1.messages[n:] == [(0, f"{t}/b/x", "q0"), (1, f"{t}/b/x", "q1")]


def test_mosquitto_v5_qos2_publisher_beyond_receive_maximum(router: Any) -> None:
    """mosquitto_pub -V mqttv5 keeps up to the CONNACK's Receive Maximum (256) QoS 2
    messages in flight; 600 messages must all complete (PUBCOMP) and arrive once, in order."""
    port, n = router.mqtt_port, 600
    sub = MosqSub(port, "rm-sub", "rm/#", 2, "mqttv5", count=n)
    with stopping(sub):
        pub = MosqPub(port, "rm-pub", "rm/t", 2, "mqttv5", [f"m-{i}" for i in range(n)])
        with stopping(pub):
            pub.wait(10)
        sub.wait_exit(10)
        assert sub.payloads() == [f"m-{i}" for i in range(n)]


def test_mosquitto_qos2_exactly_once_three_publishers_two_versions(router: Any) -> None:
    """Three mosquitto_pub processes (3.1.1, 5.0, 5.0) at QoS 2 at once, two mosquitto_sub
    (3.1.1 and 5.0) at QoS 2: each subscriber counts every message exactly once, each
    publisher's in order, and every publisher got every PUBCOMP with success."""
    port, n = router.mqtt_port, 200
    subs = [MosqSub(port, "eo-s311", "eo/#", 2, "mqttv311", count=3 * n),
            MosqSub(port, "eo-s5", "eo/+/+", 2, "mqttv5", count=3 * n)]
    with stopping(*subs):
        owed = {f"p{k}": [f"p{k}-{i}" for i in range(n)] for k in range(3)}
        versions = ["mqttv311", "mqttv5", "mqttv5"]
        pubs = [MosqPub(port, f"eo-p{k}", f"eo/p{k}/t", 2, versions[k], owed[f"p{k}"])
                for k in range(3)]
        with stopping(*pubs):
            for p in pubs:
                p.wait()
        for s in subs:
            s.wait_exit()
            check_exactly_once_per_publisher(s.payloads(), owed)
            assert {m[0] for m in s.messages} == {2}


def test_mosquitto_paho_and_amqp_in_one_topic_space(router: Any) -> None:
    """mosquitto (3.1.1), paho (5.0 and 3.1.1) and AMQP clients publish into and subscribe
    to one topic space: every subscriber gets every publisher's messages exactly once, in
    each publisher's order, and every publisher is told accepted."""
    port, n = router.mqtt_port, 100
    msub = MosqSub(port, "mix-mosq", "mix/#", 2, "mqttv5")
    psub = Mq(port, "mix-paho", V311)
    atexts: list[str] = []
    asub = Subscriber(router.url, "mix/+/t", name="mix-amqp", credit=50,
                      policy=_recording(atexts))
    client = ClientThread(asub)
    with stopping(msub, psub, client):
        psub.subscribe("mix/+/t", 2)
        assert asub.opened.wait(10) and asub.closed_condition is None
        owed = {name: [f"{name}-{i}" for i in range(n)] for name in ("mosq", "paho", "amqp")}
        ppub = Mq(port, "mix-pahopub", V5)
        apub = Publisher(router.url, "mix/a/t", [Message(body=b) for b in owed["amqp"]],
                         window=20)
        apub_client = ClientThread(apub)
        with stopping(ppub, apub_client):
            mpub = MosqPub(port, "mix-mosqpub", "mix/m/t", 2, "mqttv311", owed["mosq"])
            with stopping(mpub):
                for b in owed["paho"]:
                    ppub.publish("mix/p/t", b.encode(), 1)
                mpub.wait()
            wait_for(lambda: len(ppub.acks) == n, WAIT, "the paho publisher's PUBACKs")
            assert all(rc.value == 0 for rc, _ in ppub.acks.values()), ppub.acks
            wait_for(lambda: len(apub.outcomes) == n, WAIT, "the AMQP publisher's outcomes")
            assert set(apub.states()) == {"accepted"}, apub.states()
        total = 3 * n
        msub.wait_count(total)
        wait_for(lambda: len(psub.got) >= total, WAIT, "the paho subscriber's messages")
        wait_for(lambda: len(asub.received) >= total, WAIT, "the AMQP subscriber's messages")
        check_exactly_once_per_publisher(msub.payloads(), owed)
        check_exactly_once_per_publisher([p.decode() for p in psub.payloads()], owed)
        check_exactly_once_per_publisher(atexts, owed)
        # topics as published, whichever protocol published them
        assert {m[1] for m in msub.messages} == {"mix/m/t", "mix/p/t", "mix/a/t"}
        assert {g[0] for g in psub.got} == {"mix/m/t", "mix/p/t", "mix/a/t"}


# ------------------------------------------------------------------------ three routers


def test_mosquitto_paho_amqp_across_three_routers() -> None:
    """A line A - B - C, --mqtt on each. Subscribers: mosquitto_sub 5.0 QoS 2 on C,
    mosquitto_sub 3.1.1 QoS 1 on B, paho 3.1.1 QoS 2 on A, AMQP on C. Publishers:
    mosquitto_pub 5.0 QoS 2 on A, mosquitto_pub 3.1.1 QoS 2 on C, AMQP on B. Once gossip told
    every publishing router about every subscriber, each subscriber gets each publisher's
    messages exactly once and in order; every publisher is told accepted."""
    ids = ("A", "B", "C")
    ports = {r: free_port() for r in ids}
    mesh = start_mesh("line", 3, extra={r: ["--mqtt", f"127.0.0.1:{ports[r]}"] for r in ids})
    with contextlib.ExitStack() as stack:
        stack.callback(mesh.stop)
        mesh.wait_links_up(timeout=30.0)
        n = 150
        filters = {"ms-c": "x/#", "ms-b": "x/+/t", "pa-a": "x/#"}
        where = {"ms-c": "C", "ms-b": "B", "pa-a": "A"}
        sc = MosqSub(ports["C"], "ms-c", filters["ms-c"], 2, "mqttv5")
        stack.callback(sc.stop)
        sb = MosqSub(ports["B"], "ms-b", filters["ms-b"], 1, "mqttv311")
        stack.callback(sb.stop)
        pa = Mq(ports["A"], "pa-a", V311)
        stack.callback(pa.stop)
        pa.subscribe(filters["pa-a"], 2)
        atexts: list[str] = []
        asub = Subscriber(mesh["C"].url, "x/#", name="am-sub", credit=50,
                          container_id="am-c", policy=_recording(atexts))
        aclient = ClientThread(asub)
        stack.callback(aclient.stop)
        assert asub.opened.wait(10) and asub.closed_condition is None
        # wait until each publishing router (A, B, C) knows every subscriber elsewhere
        for at in ids:
            for cid, f in filters.items():
                if where[cid] != at:
                    mesh[at].wait_logged(
                        f"router {at}: knows subscriber {cid}/mqtt/{f}@{where[cid]}", 30)
            if at != "C":
                mesh[at].wait_logged(knows_line(at, asub, "C"), 30)
        owed = {name: [f"{name}-{i}" for i in range(n)] for name in ("ma", "mc", "ab")}
        apub = Publisher(mesh["B"].url, "x/b/t", [Message(body=b) for b in owed["ab"]],
                         window=20)
        apub_client = ClientThread(apub)
        stack.callback(apub_client.stop)
        pubs = [MosqPub(ports["A"], "pub-a", "x/a/t", 2, "mqttv5", owed["ma"]),
                MosqPub(ports["C"], "pub-c", "x/c/t", 2, "mqttv311", owed["mc"])]
        for p in pubs:
            stack.callback(p.stop)
        for p in pubs:
            p.wait(90)
        wait_for(lambda: len(apub.outcomes) == n, 90, "the AMQP publisher's outcomes")
        assert set(apub.states()) == {"accepted"}, apub.states()
        total = 3 * n
        for s in (sc, sb):
            s.wait_count(total, 90)
        wait_for(lambda: len(pa.got) >= total, 90, "the paho subscriber's messages")
        wait_for(lambda: len(asub.received) >= total, 90, "the AMQP subscriber's messages")
        check_exactly_once_per_publisher(sc.payloads(), owed)
        check_exactly_once_per_publisher(sb.payloads(), owed)
        check_exactly_once_per_publisher([p.decode() for p in pa.payloads()], owed)
        check_exactly_once_per_publisher(atexts, owed)
        assert {m[0] for m in sc.messages} == {2} and {m[0] for m in sb.messages} == {1}
        for r in mesh:
            assert r.alive, f"router {r.id} died"
            assert "Traceback" not in "".join(r.log), r.tail(60)

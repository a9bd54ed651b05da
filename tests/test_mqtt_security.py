"""MQTT clients against a router with a password file (made by mosquitto_passwd) and an ACL
file, in mosquitto's formats (docs/security.md): paho 3.1.1 and 5.0 and mosquitto_pub.

What is allowed flows exactly once; each refusal gets the documented answer (CONNACK 0x86 /
0x87, 3.1.1 return codes 4 / 5; PUBACK 0x87 or, in 3.1.1, a closed connection; SUBACK 0x87 /
0x80) while the other clients go on. SIGHUP reads the files again; a broken file is refused
and the rules in force stay. Every wait is on a condition with a deadline."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from router.security.policy import BAD_CREDENTIALS, FAILED_LOG_IN_DELAY, NOT_AUTHORIZED
from tests.harness import RouterProcess, free_port, wait_for
from tests.test_mqtt_edge import V5, V311
from tests.test_status import get

PASSWD = shutil.which("mosquitto_passwd")
MOSQUITTO_PUB = shutil.which("mosquitto_pub")
pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd is not installed "
                                "(Debian package mosquitto)")

USERS = {"alice": "wonder land", "bob": "builder"}
ACL = """\
# alice owns her tree and reads the news
user alice
topic readwrite alice/#
topic read news/#

# bob writes the news
user bob
topic write news/today

# every device its own tree, whoever logs in with that client id
pattern readwrite devices/%c/#
"""


class Client:
    """A paho client that records its CONNACK, acknowledgements and messages."""

    def __init__(self, port: int, client_id: str, version: int, user: str | None,
                 password: str | None) -> None:
        kw: dict[str, Any] = {"clean_session": True} if version == V311 else {}
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=version, **kw)
        if user is not None:
            self.c.username_pw_set(user, password)
        self.connack: Any = None
        self.acks: dict[int, Any] = {}
        self.subacks: list[Any] = []
        self.got: list[tuple[str, bytes]] = []
        self.disconnected = False
        self.c.on_connect = lambda c, u, f, rc, p=None: setattr(self, "connack", rc)
        self.c.on_publish = lambda c, u, mid, rc, p: self.acks.__setitem__(mid, rc)
        self.c.on_subscribe = lambda c, u, mid, rcs, p: self.subacks.append(rcs)
        self.c.on_message = lambda c, u, m: self.got.append((m.topic, m.payload))
        self.c.on_disconnect = lambda *a: setattr(self, "disconnected", True)
        self.c.connect("127.0.0.1", port, 30)
        self.c.loop_start()
        wait_for(lambda: self.connack is not None or self.disconnected, 10,
                 f"an answer to {client_id}'s CONNECT")

    def subscribe(self, topic_filter: str) -> Any:
        n = len(self.subacks)
        self.c.subscribe(topic_filter, 1)
        wait_for(lambda: len(self.subacks) > n, 10, f"SUBACK for {topic_filter}")
        return self.subacks[-1][0]

    def publish(self, topic: str, payload: bytes) -> int:
        return self.c.publish(topic, payload, 1).mid

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


@pytest.fixture
def secured(tmp_path: Path) -> Any:
    pw = tmp_path / "passwd"
    for user, password in USERS.items():
        subprocess.run([PASSWD, *([] if pw.exists() else ["-c"]), "-b", str(pw), user,
                        password], check=True, capture_output=True)
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    port, http = free_port(), free_port()
    with RouterProcess("S", "--mqtt", f"127.0.0.1:{port}", "--password-file", str(pw),
                       "--acl-file", str(acl), "--http", f"127.0.0.1:{http}") as router:
        router.mqtt = port
        router.http = http
        router.acl = acl
        yield router


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_wrong_password_unknown_user_and_anonymous_are_refused(secured: Any,
                                                                version: int) -> None:
    """MQTT-3.1.4-2: a CONNECT that fails authentication is answered (5.0: 0x86 Bad User Name
    or Password, 0x87 Not Authorized; 3.1.1: return codes 4 and 5) and closed."""
    port = secured.mqtt
    # (paho reports a 3.1.1 return code as its 5.0 reason code: 4 as 0x86, 5 as 0x87)
    bad, anonymous = 0x86, 0x87
    for user, password, code in (("alice", "Tr0ub4dor-guess", bad), ("mallory", "x", bad),
                                 (None, None, anonymous)):
        c = Client(port, f"c-{user}", version, user, password)
        wait_for(lambda c=c: c.disconnected, 10, "the refused connection closed")
        assert c.connack is not None and c.connack.value == code, (user, c.connack)
        c.c.loop_stop()
    ok = Client(port, "c-alice", version, "alice", USERS["alice"])
    assert ok.connack.value == 0
    ok.stop()
    _, health = get(secured.http, "/health")
    assert health["refusals"][BAD_CREDENTIALS] >= 2 and health["refusals"][NOT_AUTHORIZED] >= 1
    wait_for(lambda: any("refused, 0x86 Bad user name or password" in line and "mallory" in line
                         for line in secured.log), 5, "the refusal's log line")
    assert not any(USERS["alice"] in line or "Tr0ub4dor" in line for line in secured.log), \
        "a password in the log"


def test_a_refused_log_in_is_answered_after_a_delay_while_others_go_on(secured: Any) -> None:
    """Each refused CONNECT waits FAILED_LOG_IN_DELAY for its CONNACK (it slows password
    guessing), without holding up anyone else: a good client's stream flows meanwhile."""
    port = secured.mqtt
    alice = Client(port, "alice-d", V5, "alice", USERS["alice"])
    alice.subscribe("alice/#")
    started = time.monotonic()
    guesses = [Guess(port, f"guess-{i}") for i in range(10)]
    mids = [alice.publish("alice/x", b"%d" % i) for i in range(20)]
    wait_for(lambda: all(m in alice.acks for m in mids) and len(alice.got) == 20, 10,
             "alice's 20 messages")
    flowed = time.monotonic() - started
    wait_for(lambda: all(g.answered is not None for g in guesses), 10, "ten refusals")
    assert all(g.code == 0x86 for g in guesses), [g.code for g in guesses]
    assert min(g.answered for g in guesses) - started >= FAILED_LOG_IN_DELAY * 0.9
    assert flowed < FAILED_LOG_IN_DELAY, "the refusals' delay held up alice's stream"
    alice.stop()


class Guess:
    """A paho 5.0 client with a wrong password: when its CONNACK came, and its code."""

    def __init__(self, port: int, client_id: str) -> None:
        self.answered: float | None = None
        self.code: int | None = None
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=V5)
        self.c.username_pw_set("alice", "a guess")
        self.c.on_connect = self._connack
        self.c.connect_async("127.0.0.1", port, 30)
        self.c.loop_start()

    def _connack(self, c: Any, u: Any, f: Any, rc: Any, p: Any = None) -> None:
        self.code = rc.value
        self.answered = time.monotonic()
        c.disconnect()
        c.loop_stop()


def test_what_is_allowed_flows_and_forbidden_publishes_get_0x87(secured: Any) -> None:
    port = secured.mqtt
    alice = Client(port, "alice-1", V5, "alice", USERS["alice"])
    assert alice.subscribe("news/#") == 1
    bob = Client(port, "bob-1", V5, "bob", USERS["bob"])
    mids = [bob.publish("news/today", b"n%d" % i) for i in range(50)]
    wait_for(lambda: all(m in bob.acks for m in mids), 10, "bob's PUBACKs")
    assert all(bob.acks[m].value == 0 for m in mids)
    wait_for(lambda: len(alice.got) == 50, 10, "alice's news")
    assert [p for _, p in alice.got] == [b"n%d" % i for i in range(50)]
    forbidden = bob.publish("alice/secret", b"no")
    wait_for(lambda: forbidden in bob.acks, 10, "the refusal")
    assert bob.acks[forbidden].value == 0x87
    later = bob.publish("news/today", b"still fine")
    wait_for(lambda: later in bob.acks and len(alice.got) == 51, 10, "bob going on")
    assert ("alice/secret", b"no") not in alice.got
    alice.stop()
    bob.stop()


def test_a_forbidden_publish_closes_a_3_1_1_connection(secured: Any) -> None:
    """3.1.1 has no negative PUBACK: the connection is closed rather than acknowledged
    falsely; other clients go on."""
    port = secured.mqtt
    alice = Client(port, "alice-2", V5, "alice", USERS["alice"])
    alice.subscribe("alice/#")
    bob = Client(port, "bob-2", V311, "bob", USERS["bob"])
    mid = bob.publish("alice/inbox", b"forbidden")
    wait_for(lambda: bob.disconnected, 10, "the 3.1.1 connection closed")
    assert mid not in bob.acks
    own = alice.publish("alice/inbox", b"mine")
    wait_for(lambda: own in alice.acks and alice.got == [("alice/inbox", b"mine")], 10,
             "alice's own message, and only it")
    alice.stop()


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_forbidden_subscriptions_are_refused_in_suback(secured: Any, version: int) -> None:
    port = secured.mqtt
    bob = Client(port, f"bob-s{version}", version, "bob", USERS["bob"])
    code = bob.subscribe("news/#")  # bob may write the news, not read it
    assert (code.value if version == V5 else code) == (0x87 if version == V5 else 0x80)
    bob.stop()


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_a_wildcard_wider_than_what_the_user_may_read_gets_only_what_it_may_read(
        secured: Any, version: int) -> None:
    """alice may read news/# and alice/#: her `#` is granted and each message is checked at
    delivery, as mosquitto does (docs/security.md). She gets bob's news, not a device's
    telemetry; the device's publish is still acknowledged (nobody who may read it missed
    it), and its own subscription gets it. A filter she may read nothing of is refused."""
    port = secured.mqtt
    alice = Client(port, f"alice-w{version}", version, "alice", USERS["alice"])
    assert alice.subscribe("#") == 1
    assert alice.subscribe("+/today") == 1
    refused = alice.subscribe("bob/#")
    assert (refused.value if version == V5 else refused) == (0x87 if version == V5 else 0x80)
    dev = Client(port, "dev9", V5, "bob", USERS["bob"])
    assert dev.subscribe("devices/dev9/#") == 1
    bob = Client(port, f"bob-w{version}", V5, "bob", USERS["bob"])
    news = [bob.publish("news/today", b"news %d" % i) for i in range(5)]
    temps = [dev.publish("devices/dev9/temp", b"t %d" % i) for i in range(5)]
    wait_for(lambda: all(m in bob.acks for m in news) and all(m in dev.acks for m in temps),
             10, "ten answers")
    assert [bob.acks[m].value for m in news] + [dev.acks[m].value for m in temps] == [0] * 10
    wait_for(lambda: len(alice.got) == 10 and len(dev.got) == 5, 10, "every copy owed")
    # Each news message matches both of alice's filters: two copies, in order per filter.
    assert sorted(alice.got) == sorted([("news/today", b"news %d" % i) for i in range(5)] * 2)
    assert dev.got == [("devices/dev9/temp", b"t %d" % i) for i in range(5)]
    _, health = get(secured.http, "/health")
    assert health["refusals"]["read"] >= 5
    for c in (alice, dev, bob):
        c.stop()


def test_patterns_give_each_device_its_own_tree(secured: Any) -> None:
    port = secured.mqtt
    dev = Client(port, "dev7", V5, "bob", USERS["bob"])
    assert dev.subscribe("devices/dev7/#") == 1
    own = dev.publish("devices/dev7/temp", b"21")
    other = dev.publish("devices/dev8/temp", b"99")
    wait_for(lambda: own in dev.acks and other in dev.acks, 10, "both answers")
    assert dev.acks[own].value == 0 and dev.acks[other].value == 0x87
    wait_for(lambda: dev.got == [("devices/dev7/temp", b"21")], 10, "its own message")
    dev.stop()


@pytest.mark.skipif(MOSQUITTO_PUB is None, reason="mosquitto_pub is not installed")
def test_mosquitto_pub_logs_in_with_a_user_and_password(secured: Any) -> None:
    port = secured.mqtt
    alice = Client(port, "alice-3", V5, "alice", USERS["alice"])
    alice.subscribe("news/#")
    base = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", "news/today",
            "-u", "bob"]
    ok = subprocess.run([*base, "-P", USERS["bob"], "-m", "from mosquitto_pub"],
                        capture_output=True, text=True, timeout=20)
    assert ok.returncode == 0, ok.stderr
    wait_for(lambda: alice.got == [("news/today", b"from mosquitto_pub")], 10, "the message")
    bad = subprocess.run([*base, "-P", "nope", "-m", "x"], capture_output=True, text=True,
                         timeout=20)
    assert (bad.returncode != 0 and "not authori" in (bad.stderr + bad.stdout).lower()) or \
        "bad user" in (bad.stderr + bad.stdout).lower(), (bad.stdout, bad.stderr)
    alice.stop()


def test_sighup_reads_the_acl_again_and_keeps_the_rules_of_a_broken_file(secured: Any) -> None:
    port = secured.mqtt
    secured.acl.write_text(ACL + "frobnicate all/#\n")  # line 12: no such keyword
    secured.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any("SIGHUP" in line and "rules in force stay" in line
                         for line in secured.log), 10, "the refusal of the broken file")
    assert any("line 12" in line for line in secured.log if "SIGHUP" in line), secured.log[-3:]
    bob = Client(port, "bob-h", V5, "bob", USERS["bob"])
    mid = bob.publish("news/today", b"old rules")
    wait_for(lambda: mid in bob.acks, 10, "the answer under the old rules")
    assert bob.acks[mid].value == 0
    secured.acl.write_text(ACL.replace("topic write news/today", "topic write news/tomorrow"))
    secured.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any("files read again" in line for line in secured.log), 10, "the reload")
    mid = bob.publish("news/today", b"new rules")
    wait_for(lambda: mid in bob.acks, 10, "the answer under the new rules")
    assert bob.acks[mid].value == 0x87
    bob.stop()


def test_after_sighup_each_delivery_follows_the_new_read_rules(secured: Any) -> None:
    """Subscriptions made before a SIGHUP stay, but what they are sent is checked against
    the rules in force at delivery: alice loses the news the moment her grant goes."""
    port = secured.mqtt
    alice = Client(port, "alice-r", V5, "alice", USERS["alice"])
    assert alice.subscribe("news/#") == 1
    bob = Client(port, "bob-r", V5, "bob", USERS["bob"])
    first = bob.publish("news/today", b"before")
    wait_for(lambda: alice.got == [("news/today", b"before")], 10, "the news under old rules")
    secured.acl.write_text(ACL.replace("topic read news/#\n", ""))
    secured.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any("files read again" in line for line in secured.log), 10, "the reload")
    later = bob.publish("news/today", b"after")
    wait_for(lambda: first in bob.acks and later in bob.acks, 10, "both answers")
    assert bob.acks[later].value == 0
    assert alice.got == [("news/today", b"before")]
    alice.stop()
    bob.stop()

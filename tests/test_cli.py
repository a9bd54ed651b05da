"""The `exactmesh` command: configuration errors, the TOML file, SIGTERM and the demo.

Each run is a real `exactmesh` process; a router's behaviour is checked with real proton
clients over loopback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from proton import Message

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


def run_exactmesh(*args: str, timeout: float = 15.0) -> subprocess.CompletedProcess:
    return subprocess.run([EXACTMESH, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The run failed with status 2 and said why in exactly one line."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    assert lines[0].startswith("exactmesh: error: "), lines[0]
    return lines[0]


def toml(tmp_path: Path, text: str, name: str = "router.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------ refusing to start


def test_unknown_option_in_config_file(tmp_path):
    cfg = toml(tmp_path, 'id = "A"\namqp = "127.0.0.1:5672"\nmax-mesage-size = 10\n')
    line = one_error_line(run_exactmesh("router", "--config", str(cfg)))
    assert "unknown option 'max-mesage-size'" in line
    assert "max-message-size" in line  # the known options are listed


@pytest.mark.parametrize("where", ["file", "flag"])
def test_bad_value_names_the_option(tmp_path, where):
    if where == "file":
        cfg = toml(tmp_path, "[router]\npublisher-window = -1\n")
        args = ["--config", str(cfg)]
    else:
        args = ["--publisher-window", "-1"]
    line = one_error_line(run_exactmesh("router", "--id", "A", "--amqp", "127.0.0.1:5672",
                                        *args))
    assert "publisher-window: -1 is not allowed" in line
    assert "positive" in line


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nowhere.toml"
    line = one_error_line(run_exactmesh("router", "--config", str(missing), "--id", "A",
                                        "--amqp", "127.0.0.1:5672"))
    assert str(missing) in line and "does not exist" in line


def test_invalid_toml(tmp_path):
    cfg = toml(tmp_path, '[router]\nid = "A\n')
    line = one_error_line(run_exactmesh("router", "--config", str(cfg),
                                        "--amqp", "127.0.0.1:5672"))
    assert str(cfg) in line and "is not valid TOML" in line
    assert "line 2" in line  # where the problem is


def test_missing_id():
    line = one_error_line(run_exactmesh("router", "--amqp", "127.0.0.1:5672"))
    assert "'id' is required" in line and "--id" in line


def test_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(run_exactmesh("router", "--id", "A", "--amqp",
                                            f"127.0.0.1:{port}"))
    assert f"127.0.0.1:{port}" in line
    assert "in use" in line and "--amqp" in line


# ------------------------------------------------------------------ the TOML file


class FileRouter(RouterProcess):
    """A router started with `--config` alone: its id and address come from the file."""

    def __init__(self, config: Path, port: int) -> None:
        self.port = port
        self.url = f"127.0.0.1:{port}"
        self.log: list[str] = []
        self.proc = subprocess.Popen([EXACTMESH, "router", "--config", str(config)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, cwd=ROOT)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        wait_for(lambda: any("ready" in line for line in self.log)
                 or self.proc.poll() is not None, 15, "the router's ready line")
        assert self.proc.poll() is None, f"router exited: {''.join(self.log)}"


def publish_to_nobody(router: RouterProcess) -> list:
    pub = Publisher(router.url, "nobody/here", numbered(2))
    client = ClientThread(pub)
    wait_for(lambda: len(pub.outcomes) == 2, 10, "outcomes of messages nobody subscribes to")
    client.stop()
    return [pub.outcomes[i] for i in range(2)]


def test_config_file_top_level_keys_are_honoured(tmp_path):
    port = free_port()
    cfg = toml(tmp_path, f'id = "F"\namqp = "127.0.0.1:{port}"\nno-subscribers = "reject"\n'
                         'log-level = "debug"\n')
    with FileRouter(cfg, port) as router:
        assert any(f"router F ready: amqp 127.0.0.1:{port}" in line for line in router.log)
        outcomes = publish_to_nobody(router)
        assert [o.state for o in outcomes] == ["rejected", "rejected"]
        assert outcomes[0].condition == "exactmesh:no-subscribers"
        # log-level = "debug" from the file: the attach is logged at debug level
        wait_for(lambda: any("DEBUG" in line and "attached to nobody/here" in line
                             for line in router.log), 5, "the debug line of the attach")


def test_config_file_router_table_is_honoured_and_flags_win(tmp_path):
    cfg = toml(tmp_path, '[router]\nid = "T"\nno-subscribers = "reject"\n'
                         "max-message-size = 1000\n")
    with RouterProcess("A", config=cfg) as router:
        # --id A (given by RouterProcess) wins over the file's id "T"
        assert any("router A ready" in line for line in router.log)
        outcomes = publish_to_nobody(router)
        assert [o.state for o in outcomes] == ["rejected", "rejected"]
        assert outcomes[0].condition == "exactmesh:no-subscribers"
    with RouterProcess("A", "--no-subscribers", "accept", config=cfg) as router:
        outcomes = publish_to_nobody(router)
        assert [o.state for o in outcomes] == ["accepted", "accepted"]
        # The flag overrode one option; the file's others still hold.
        big = Publisher(router.url, "nobody/big", [Message(body=b"x" * 5000)])
        client = ClientThread(big)
        wait_for(lambda: big.link_error, 10, "the oversized message to close its link")
        client.stop()
        assert big.link_error.name == "amqp:link:message-size-exceeded"
        assert "max-message-size of 1000 bytes" in big.link_error.description


# ------------------------------------------------------------------ SIGTERM


def test_sigterm_detaches_clients_and_exits_zero():
    router = RouterProcess("A")
    try:
        sub = Subscriber(router.url, "term/#", "term-sub",
                         policy=lambda m, d: "hold" if m.body == "m3" else "accept")
        subc = ClientThread(sub)
        assert sub.opened.wait(10)
        pub = Publisher(router.url, "term/x", numbered(4))
        pubc = ClientThread(pub)
        wait_for(lambda: len(pub.outcomes) == 3 and sub.held, 10,
                 "three accepted and one held message")
        started = time.monotonic()
        os.kill(router.proc.pid, signal.SIGTERM)
        status = router.proc.wait(10)
        took = time.monotonic() - started
        assert status == 0, "".join(router.log)
        assert took < 3.0, f"the router took {took:.2f}s to stop"
        wait_for(lambda: sub.closed_condition and pub.link_error, 5,
                 "both clients to see their links detached")
        for cond in (sub.closed_condition, pub.link_error):
            assert cond.name == "amqp:link:detach-forced"
            assert "router A is shutting down" in cond.description
            assert "reattach to another router" in cond.description
        router.stop()
        assert any("SIGTERM received, shutting down" in line for line in router.log)
        pubc.stop()
        subc.stop()
    finally:
        router.stop()


# ------------------------------------------------------------------ the demo


def test_demo_runs_and_reports_success():
    result = run_exactmesh("demo", "--messages", "300", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RESULT: every subscriber" in result.stdout
    assert "killed with SIGKILL mid-stream" in result.stdout
    # every publisher row: 300 sent, 300 accepted, 0 failed
    assert result.stdout.count("   300       300       0") == 3, result.stdout
    # the MQTT device at B: owed paris' and berlin's 600, processed 600, 0 dup, 0 lost
    device = next(line for line in result.stdout.splitlines() if line.startswith("sensor-b"))
    assert device.split()[-6:] == ["600", "600", "0", "0", "yes", "-"], device
    # the relay store part (router/demo_relay.py): acknowledged while away, kept across SIGKILL
    assert "300 QoS 1 messages acknowledged in" in result.stdout, result.stdout
    assert ("device back: session present True, 300 messages, 0 duplicated, in order: OK"
            in result.stdout), result.stdout


def test_secure_demo_logs_every_client_in_and_reports_the_refusals():
    """`exactmesh demo --secure` (router/demo_secure.py): TLS for clients and peers, users and
    rules; the same exactly-once report, and what the rules forbid refused."""
    result = run_exactmesh("demo", "--secure", "--messages", "200", timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "routers: A (amqps://127.0.0.1:" in out and "killed with SIGKILL mid-stream" in out
    assert "RESULT: every subscriber" in out and "every forbidden action was refused" in out
    assert out.count("   200       200       0") == 3, out  # every publisher row
    device = next(line for line in out.splitlines() if line.startswith("sensor-b"))
    assert device.split()[-6:] == ["400", "400", "0", "0", "yes", "-"], device
    refused = [line for line in out.splitlines() if line.startswith("refused as expected: ")]
    assert len(refused) == 3, out
    assert "wrong password" in refused[0] and "log-in refused" in refused[0]
    assert "payments/refunds" in refused[1] and "amqp:unauthorized-access" in refused[1]
    assert "PUBACK 0x87" in refused[2]
    assert "NOT REFUSED" not in out
    assert ("device back: session present True, 200 messages, 0 duplicated, in order: OK"
            in out), out


def test_a_router_process_collects_young_garbage_less_often() -> None:
    """`exactmesh router` raises the collector's first threshold and freezes what start-up
    loaded (router/cli.py: GC_THRESHOLD_0); the other thresholds stay as they were."""
    import gc

    from router import cli

    before = gc.get_threshold()
    try:
        cli.tune_gc()
        assert gc.get_threshold() == (cli.GC_THRESHOLD_0, *before[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_cluster_secret_file_others_can_read_is_refused(tmp_path):
    """Whoever reads the secret can join the cluster: a file readable by other users stops
    the router at start, with the fix in the message (docs/security.md)."""
    secret = tmp_path / "cluster.secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    line = one_error_line(run_exactmesh(
        "router", "--id", "A", "--amqp", "127.0.0.1:0", "--listen", "127.0.0.1:0",
        "--cluster-secret-file", str(secret)))
    assert "can be read by other users" in line and f"chmod o-rwx {secret}" in line
    secret.chmod(0o640)
    from router.config import build

    config = build({}, {"id": "A", "amqp": "127.0.0.1:0", "listen": "127.0.0.1:0",
                        "cluster-secret-file": str(secret)})
    assert config.secret() == b"s3cret"


def test_peer_tls_required_refuses_a_router_with_peers_and_no_tls():
    line = one_error_line(run_exactmesh(
        "router", "--id", "A", "--amqp", "127.0.0.1:0", "--listen", "127.0.0.1:0",
        "--cluster-secret", "x" * 32, "--peer-tls-required"))
    assert "peer-tls-required" in line and "peer-tls-cert" in line

"""The processes and waits `exactmesh demo` uses in both of its parts (router/demo.py,
router/demo_relay.py): a router process on fixed ports, so that it can be killed and
restarted, and bounded waits on conditions."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .demo_secure import Secure

SECRET = "demo-secret"


class Router:
    """One `exactmesh router` process on fixed ports, so that it can be restarted.

    With `secure` (`exactmesh demo --secure`, router/demo_secure.py) it runs secured: `mqtt`
    is then its MQTT-over-TLS port, `url` the amqps:// URL of a TLS listener on another free
    port, and the plain AMQP listener, which the configuration requires, is used by no client."""

    def __init__(self, name: str, amqp: int, mesh: int, connect: int | None,
                 mqtt: int, *extra: str, secure: Secure | None = None) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "exactmesh")
        self.args = [exe, "router", "--id", name, "--amqp", f"127.0.0.1:{amqp}",
                     "--listen", f"127.0.0.1:{mesh}"]
        if secure is None:
            self.args += ["--cluster-secret", SECRET, "--mqtt", f"127.0.0.1:{mqtt}"]
            self.url = f"amqp://127.0.0.1:{amqp}"
        else:
            (amqps,) = free_ports(1)
            self.args += secure.router_flags(name, amqps, mqtt)
            self.url = f"amqps://127.0.0.1:{amqps}"
        self.args += ["--log-level", "debug", *extra]
        self.mqtt_port = mqtt
        if connect is not None:
            self.args += ["--connect", f"127.0.0.1:{connect}"]
        self.name = name
        self.lines: list[str] = []
        self.start()

    def start(self) -> None:
        self.lines = []
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=die_with_parent)
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, lines: list[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    def ready(self) -> bool:
        return any(" ready" in line for line in self.lines)

    def knows(self) -> int:
        return sum("knows subscriber" in line for line in self.lines)

    def kill(self) -> None:
        """SIGKILL by PID, as in a crash: no goodbye to peers or clients."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)


def die_with_parent() -> None:
    """In the router's process before exec: SIGKILL it if the demo dies (say, killed by a
    timeout) so that no router outlives it (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: the demo's own cleanup still stops them


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.01)

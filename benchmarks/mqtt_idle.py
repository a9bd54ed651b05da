"""What idle MQTT devices cost a router: CPU and memory with N connected, silent devices.

    python -m benchmarks.mqtt_idle                    # 2,000 devices, keep-alive 60 s, 10 s
    python -m benchmarks.mqtt_idle --devices 5000 --seconds 20

Most MQTT devices are connected and quiet most of the time; a router must cost next to
nothing for them. This starts one exactmesh router (`--mqtt` on a free loopback port),
connects the devices (raw sockets, MQTT 3.1.1 CONNECT, clean session, the given keep-alive;
each waits for its CONNACK), then measures the router's CPU (utime + stime from /proc) over
the window, and its resident memory before and after the devices connected. The devices
send nothing in the window: keep-alive pings are due only after it. The router is stopped by
PID; the devices' sockets close with this process.
"""

from __future__ import annotations

import argparse
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import load_line
from benchmarks.mqtt import Exactmesh, proc_cpu_s
from mqtt_edge.codec import encode
from mqtt_edge.packets import Connect

CONNACK = 0x20


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def connect_devices(port: int, n: int, keep_alive: int) -> list[socket.socket]:
    devices = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(encode(Connect(f"idle-{i}", 4, True, keep_alive), 4))
        devices.append(s)
    for s in devices:
        first = s.recv(4)
        if not first or first[0] != CONNACK:
            raise RuntimeError(f"a device got {first!r}, not a CONNACK")
    return devices


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=2000, help="idle devices (default 2000)")
    ap.add_argument("--keep-alive", type=int, default=60, help="their keep-alive, s (60)")
    ap.add_argument("--seconds", type=float, default=10.0, help="window measured (10)")
    args = ap.parse_args(argv)
    if not 0 < args.seconds < args.keep_alive:
        ap.error("--seconds must be positive and shorter than --keep-alive")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if args.devices + 64 > soft:
        if args.devices + 64 > hard:
            ap.error(f"--devices {args.devices} needs more open files than this shell allows "
                     f"({hard}); raise `ulimit -n` or ask for fewer")
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.devices + 64, hard))
    print(f"exactmesh router, {args.devices:,} idle MQTT devices (keep-alive "
          f"{args.keep_alive} s), {args.seconds:g} s measured; {load_line()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mqtt-idle-") as tmp:
        router = Exactmesh(Path(tmp), [])
        router.start()
        try:
            assert router.proc is not None
            pid = router.proc.pid
            rss0 = rss_mib(pid)
            t0 = time.monotonic()
            devices = connect_devices(router.port, args.devices, args.keep_alive)
            took = time.monotonic() - t0
            rss1 = rss_mib(pid)
            cpu0, w0 = proc_cpu_s(pid), time.monotonic()
            time.sleep(args.seconds)  # the window measured: the devices stay silent
            cpu1, w1 = proc_cpu_s(pid), time.monotonic()
            for s in devices:
                s.close()
        finally:
            router.stop()
    share = (cpu1 - cpu0) / (w1 - w0) * 100
    print(f"connected in {took:.1f} s; router CPU while idle: {share:.2f}% of one core; "
          f"memory {rss0:.0f} MiB -> {rss1:.0f} MiB "
          f"({(rss1 - rss0) * 1024 / args.devices:.1f} KiB per device)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

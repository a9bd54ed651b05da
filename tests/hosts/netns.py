"""Hosts made of Linux network namespaces, wired to one switch, always torn down.

`Testbed(["r1", "r2", "c1"])` makes, for a run whose prefix is `xm<pid>n<k>`:

- a namespace `PREFIX-sw` (the switch) holding a bridge `br0`;
- per host a namespace `PREFIX-NAME` whose `eth0` is one end of a veth pair; the other end,
  named NAME, is a port of the bridge in the switch namespace (the pair is created there
  with its peer straight in the host: nothing is ever added to the caller's namespace);
- addresses 10.231.RUN.(1..N)/24, RUN taken from the pid (the switch is private to the run,
  so two runs never see each other's addresses anyway), loopback up in every host;
- an nftables table `inet xmbed` in every host with a set `blocked` of source addresses its
  input hook drops: `block(src, dst)` cuts one direction, `unblock` heals it; and a set
  `lossy` whose packets it drops at random, LOSS_PERCENT of them (`numgen random`, in the
  kernel: `impair(src, dst)` / `unimpair`), since this kernel has no netem.

Processes run with `ip netns exec NS ARGV` (which execs ARGV: the PID is the program's) in a
session and process group of their own, and are signalled by process group. `close()` kills
every group, then whatever else is still inside the namespaces (`ip netns pids`), and deletes
the namespaces (their veths and bridge go with them). It runs from the context manager, from
an atexit hook, and from SIGTERM / SIGHUP handlers; `cleanup_stale()` removes what a run that
was killed with SIGKILL left behind, once its pid is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

NAME_RE = re.compile(r"^xm(\d+)n(\d+)-")
SWITCH = "sw"
# The share of packets a lossy link drops (`impair`): TCP retransmits them; enough loss to
# miss heartbeats now and then, so links flap as on a bad line.
LOSS_PERCENT = 20
# A slow host (`slow`): its link shaped to this rate each way with a token bucket (tbf, which
# this kernel has where it lacks netem), queueing up to SLOW_LATENCY of packets before it
# drops: the delay of a congested link, which grows with the load and reaches SLOW_LATENCY.
SLOW_RATE, SLOW_BURST, SLOW_LATENCY = "256kbit", "16kb", "1000ms"
TABLE = "xmbed"
_counter = itertools.count(1)
_live: set[Testbed] = set()
_live_lock = threading.Lock()
_handlers_installed = False


class NetnsError(RuntimeError):
    """Namespaces cannot be made here; the message says what is missing."""


def _run(argv: Sequence[str], *, check: bool = True, input: str | None = None,
         timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, input=input,
                          timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()}")
    return done


def check_prerequisites() -> None:
    """Raise NetnsError saying what is missing: root, `ip` (iproute2), `nft` (nftables)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)")
    if shutil.which("ip") is None:
        missing.append("the `ip` command (Debian package iproute2)")
    if shutil.which("nft") is None:
        missing.append("the `nft` command (Debian package nftables), used for partitions")
    if missing:
        raise NetnsError("the namespace test bed needs " + ", ".join(missing))


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def namespaces() -> list[str]:
    """Every named network namespace (`ip netns list`)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def pids_in(ns: str) -> list[int]:
    out = _run(["ip", "netns", "pids", ns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_and_wait(pids: Iterable[int], deadline: float) -> None:
    """SIGKILL `pids` and wait (through pidfds, until `deadline`) for them to be gone."""
    fds = []
    for pid in pids:
        try:
            fds.append((pid, os.pidfd_open(pid)))
        except ProcessLookupError:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid, fd in fds:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # a child of ours: reap it
        finally:
            os.close(fd)


def _delete_namespaces(names: Iterable[str], timeout: float = 10.0) -> None:
    """Kill every process inside `names`, then delete them."""
    names = list(names)
    deadline = time.monotonic() + timeout
    for ns in names:
        _kill_and_wait(pids_in(ns), deadline)
    for ns in names:
        _run(["ip", "netns", "delete", ns], check=False)


def cleanup_stale() -> list[str]:
    """Delete namespaces (and root-namespace links) named `xm<pid>n<k>-...` whose pid is no
    longer running: what a run killed with SIGKILL left. Returns the names removed."""
    stale = [ns for ns in namespaces()
             if (m := NAME_RE.match(ns)) and not pid_alive(int(m.group(1)))]
    # The switch last: its veth ends go with the hosts' namespaces anyway.
    stale.sort(key=lambda ns: ns.endswith(f"-{SWITCH}"))
    _delete_namespaces(stale)
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if (m := NAME_RE.match(name)) and not pid_alive(int(m.group(1))):
                _run(["ip", "link", "delete", name], check=False)
                stale.append(name)
    return stale


def processes_with(text: str) -> list[int]:
    """PIDs whose command line contains `text` (a run's prefix is in every path it uses)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


@dataclass
class Host:
    name: str
    ns: str
    address: str


@dataclass
class Proc:
    """A process started in a host, the leader of its own process group."""

    host: Host
    argv: list[str]
    popen: subprocess.Popen[str]
    label: str
    stopped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the whole process group (the PGID is the leader's pid)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self, timeout: float = 10.0) -> int:
        """SIGKILL the process group and wait for the leader."""
        self.signal(signal.SIGKILL)
        return self.popen.wait(timeout)


class Testbed:
    """N hosts on one switch. Use as a context manager; `close()` is idempotent."""

    def __init__(self, names: Sequence[str], prefix: str | None = None,
                 subnet_byte: int | None = None) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError("host names must be unique and at least one")
        if len(names) > 250:
            raise ValueError("at most 250 hosts")
        for name in names:
            if not re.fullmatch(r"[a-z][a-z0-9]{0,10}", name) or name == SWITCH:
                raise ValueError(f"bad host name {name!r}: a-z0-9, at most 11 characters")
        self.prefix = prefix or f"xm{os.getpid()}n{next(_counter)}"
        if not NAME_RE.match(self.prefix + "-"):
            raise ValueError(f"prefix {self.prefix!r} is not of the form xm<pid>n<k>")
        run = (subnet_byte if subnet_byte is not None
               else (os.getpid() + int(self.prefix.rsplit("n", 1)[1])) % 254 + 1)
        self.subnet = f"10.231.{run}"
        self.hosts: dict[str, Host] = {
            name: Host(name, f"{self.prefix}-{name}", f"{self.subnet}.{i + 1}")
            for i, name in enumerate(names)}
        self.switch = f"{self.prefix}-{SWITCH}"
        self.procs: list[Proc] = []
        self._lock = threading.Lock()
        self._made: list[str] = []
        self._closed = False

    # ------------------------------------------------------------------ life

    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        check_prerequisites()
        cleanup_stale()
        _install_handlers()
        with _live_lock:
            _live.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        self._add_ns(self.switch)
        self._ip(self.switch, "link", "add", "br0", "type", "bridge")
        self._ip(self.switch, "link", "set", "br0", "up")
        self._ip(self.switch, "link", "set", "lo", "up")
        for host in self.hosts.values():
            self._add_ns(host.ns)
            self._ip(self.switch, "link", "add", host.name, "type", "veth", "peer", "name",
                     "eth0", "netns", host.ns)
            self._ip(self.switch, "link", "set", host.name, "master", "br0", "up")
            self._ip(host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            self._ip(host.ns, "link", "set", "eth0", "up")
            self._ip(host.ns, "link", "set", "lo", "up")
            _run(["ip", "netns", "exec", host.ns, "nft", "-f", "-"], input=(
                f"table inet {TABLE} {{\n"
                "  set blocked { type ipv4_addr; }\n"
                "  set lossy { type ipv4_addr; }\n"
                "  chain input { type filter hook input priority 0; policy accept;\n"
                "    ip saddr @blocked drop;\n"
                f"    ip saddr @lossy numgen random mod 100 < {LOSS_PERCENT} drop; }}\n"
                "}\n"))

    def _add_ns(self, ns: str) -> None:
        try:
            _run(["ip", "netns", "add", ns])
        except NetnsError as err:
            raise NetnsError(f"cannot create network namespace {ns}: {err}") from None
        self._made.append(ns)

    def _ip(self, ns: str, *args: str) -> None:
        _run(["ip", "-n", ns, *args])

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + 10
        for proc in list(self.procs):
            if proc.alive():
                proc.signal(signal.SIGCONT)  # a stopped group dies on SIGKILL too; be sure
                proc.signal(signal.SIGKILL)
        for proc in list(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
        hosts = [ns for ns in self._made if ns != self.switch]
        _delete_namespaces(hosts + [ns for ns in self._made if ns == self.switch])
        with _live_lock:
            _live.discard(self)

    def leftovers(self) -> list[str]:
        """Namespaces of this run still present (empty after close)."""
        return [ns for ns in namespaces() if ns.startswith(self.prefix + "-")]

    # ------------------------------------------------------------------ processes

    def spawn(self, host: str, argv: Sequence[str], *, label: str = "",
              stdout: IO[str] | int | None = subprocess.DEVNULL,
              stderr: IO[str] | int | None = subprocess.PIPE,
              stdin: IO[str] | int | None = subprocess.DEVNULL,
              env: dict[str, str] | None = None, cwd: str | None = None) -> Proc:
        """Run `argv` inside `host`, the leader of a new process group."""
        if self._closed:
            raise RuntimeError("the test bed is closed")
        h = self.hosts[host]
        popen = subprocess.Popen(["ip", "netns", "exec", h.ns, *argv], stdout=stdout,
                                 stderr=stderr, stdin=stdin, text=True, env=env, cwd=cwd,
                                 start_new_session=True)
        proc = Proc(h, list(argv), popen, label or f"{host}:{argv[0]}")
        self.procs.append(proc)
        return proc

    # ------------------------------------------------------------------ faults

    def block(self, src: str, dst: str) -> None:
        """Drop every packet from `src` arriving at `dst` (one direction)."""
        self._nft(dst, "add", self.hosts[src].address)

    def unblock(self, src: str, dst: str) -> None:
        self._nft(dst, "delete", self.hosts[src].address)

    def blocked(self, dst: str) -> list[str]:
        """Addresses `dst` drops packets from now."""
        out = _run(["ip", "netns", "exec", self.hosts[dst].ns, "nft", "list", "set", "inet",
                    TABLE, "blocked"]).stdout
        m = re.search(r"elements = \{([^}]*)\}", out)
        return [a.strip() for a in m.group(1).split(",")] if m else []

    def impair(self, src: str, dst: str) -> None:
        """Drop LOSS_PERCENT of the packets from `src` arriving at `dst`, at random."""
        self._nft(dst, "add", self.hosts[src].address, "lossy")

    def unimpair(self, src: str, dst: str) -> None:
        self._nft(dst, "delete", self.hosts[src].address, "lossy")

    def slow(self, host: str) -> None:
        """Shape `host`'s link both ways (tbf on its eth0 and on the switch's end of it)."""
        for ns, dev in self._link_ends(host):
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                  SLOW_RATE, "burst", SLOW_BURST, "latency", SLOW_LATENCY])

    def unslow(self, host: str) -> None:
        for ns, dev in self._link_ends(host):
            _run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)

    def _link_ends(self, host: str) -> list[tuple[str, str]]:
        h = self.hosts[host]
        return [(h.ns, "eth0"), (self.switch, h.name)]

    def _nft(self, host: str, verb: str, address: str, nft_set: str = "blocked") -> None:
        _run(["ip", "netns", "exec", self.hosts[host].ns, "nft", verb, "element", "inet",
              TABLE, nft_set, f"{{ {address} }}"])


def close_all() -> None:
    """Close every test bed of this process (the atexit hook and signal handlers)."""
    with _live_lock:
        beds = list(_live)
    for bed in beds:
        with contextlib.suppress(Exception):
            bed.close()


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(close_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)
        signal.signal(sig, _make_handler(sig, previous))


def _make_handler(sig: int, previous: Any) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        close_all()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    return handler

"""Routers on namespace hosts, started the way deploy/README.md tells an operator to.

`make_etc(dir, ids, addresses)` makes what `/etc/exactmesh` holds in the guide: the cluster
secret (mode 600), each router's TLS certificate and key (tls/ID.crt, tls/ID.key, issued by a
cluster CA from trustme for the host's address), `tls/cluster-ca.crt`, `tls/clients-ca.crt`,
`passwd` (mosquitto's `$7$` format, written with `router.security.passwords.hash_password`)
and the ACL (`acl` next to the templates, else deploy/three-routers-secure/acl).

`render(template, ...)` turns one of the guide's TOML files (deploy/three-routers-secure/A.toml
and its siblings, or an operator's own) into this host's: client and peer listeners on the
host's address (the plain `amqp` listener stays where the template puts it: on loopback),
`connect` pointing at the peers' hosts, `/etc/exactmesh/...` paths moved to the run's
directory, and a few overrides (`unreachable-timeout`, `log-level`).

`RouterHost` runs `ip netns exec NS exactmesh router --config FILE`: the unit file's
ExecStart (deploy/exactmesh@.service), in the host's namespace, as its own process group.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trustme

from router.security.passwords import hash_password
from tests.hosts.netns import Proc, Testbed

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "three-routers-secure"
EXACTMESH = str(Path(sys.executable).parent / "exactmesh")
ETC = "/etc/exactmesh/"
ADDRESSED = ("amqps", "mqtts", "listen", "mqtt", "http", "https")


class LogLines:
    """Lines of a process's output, appended by a reader thread; waits on a condition."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.closed = False

    def append(self, line: str) -> None:
        with self._cond:
            self.lines.append(line)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def has(self, text: str, since: int = 0) -> bool:
        with self._cond:
            return any(text in line for line in self.lines[since:])

    def wait(self, predicate: Callable[[list[str]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.closed and not predicate(self.lines)):
                    tail = "".join(self.lines[-15:])
                    state = "the process ended" if self.closed else f"{timeout:g} s passed"
                    raise TimeoutError(f"waiting for {what}: {state}; last lines:\n{tail}")
                self._cond.wait(remaining)


def pump(stream: Any, sink: Callable[[str], None], done: Callable[[], None]) -> threading.Thread:
    """A daemon thread feeding each line of `stream` to `sink`, then calling `done`."""

    def run() -> None:
        try:
            for line in stream:
                sink(line)
        finally:
            done()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# ---------------------------------------------------------------------- /etc/exactmesh


def make_etc(etc: Path, ids: Sequence[str], addresses: Mapping[str, str],
             users: Mapping[str, str], acl: Path | None = None) -> dict[str, Path]:
    """Write the guide's /etc/exactmesh into `etc`: {path in the guide: path here}."""
    cluster_ca, clients_ca = trustme.CA(), trustme.CA()
    tls = etc / "tls"
    tls.mkdir(parents=True)
    for r in ids:
        issued = cluster_ca.issue_cert(addresses[r], f"{r.lower()}.routers.test")
        (tls / f"{r}.crt").write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(tls / f"{r}.key"))
        (tls / f"{r}.key").chmod(0o600)
    cluster_ca.cert_pem.write_to_path(str(tls / "cluster-ca.crt"))
    clients_ca.cert_pem.write_to_path(str(tls / "clients-ca.crt"))
    secret = etc / "cluster.secret"
    secret.write_text("a long random secret of the test bed\n")
    secret.chmod(0o600)
    (etc / "passwd").write_text("".join(f"{user}:{hash_password(password)}\n"
                                        for user, password in users.items()))
    shutil.copy(acl if acl is not None and acl.exists() else DEPLOY / "acl", etc / "acl")
    return {ETC + str(p.relative_to(etc)): p for p in etc.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------- TOML


def load_templates(directory: Path) -> list[dict[str, Any]]:
    """The `[router]` tables of every *.toml in `directory`, by file name."""
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise FileNotFoundError(f"no *.toml router configuration in {directory}")
    return [tomllib.loads(f.read_text())["router"] for f in files]


def _host_port(value: str) -> tuple[str, str]:
    host, _, port = value.rpartition(":")
    return host, port


def render(template: Mapping[str, Any], *, router_id: str, address: str,
           connect: Sequence[str], files: Mapping[str, Path],
           overrides: Mapping[str, Any]) -> dict[str, Any]:
    """This host's `[router]` table from `template` (see the module's doc)."""
    table: dict[str, Any] = {}
    own = str(template.get("id", router_id))
    for key, value in template.items():
        if key in ADDRESSED and isinstance(value, str):
            value = f"{address}:{_host_port(value)[1]}"
        elif isinstance(value, str) and value.startswith(ETC):
            # A template used for another router (more hosts than files): its own files.
            value = value.replace(f"{ETC}tls/{own}.", f"{ETC}tls/{router_id}.")
            if value not in files:
                raise FileNotFoundError(f"{key} = {value!r}: the test bed makes only "
                                        f"{', '.join(sorted(files))}")
            value = str(files[value])
        table[key] = value
    table["id"] = router_id
    if connect:
        table["connect"] = list(connect)
    else:
        table.pop("connect", None)
    table.update(overrides)
    return table


def to_toml(table: Mapping[str, Any], comment: str = "") -> str:
    """A `[router]` table as TOML (strings, numbers, booleans, lists, inline tables)."""
    lines = [f"# {line}" for line in comment.splitlines()] + ["[router]"]
    lines += [f"{key} = {_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


# ---------------------------------------------------------------------- processes


class RouterHost:
    """One router on one host: start, SIGKILL and restart, SIGSTOP and SIGCONT."""

    def __init__(self, bed: Testbed, host: str, router_id: str, config: Path,
                 log_dir: Path) -> None:
        self.bed, self.host, self.id, self.config = bed, host, router_id, config
        self.address = bed.hosts[host].address
        self.log_dir = log_dir
        self.proc: Proc | None = None
        self.log = LogLines()
        self.starts = 0

    def argv(self) -> list[str]:
        return [EXACTMESH, "router", "--config", str(self.config)]

    def start(self, timeout: float = 20.0) -> None:
        """Start (again) and wait for its `ready` line."""
        if self.proc is not None and self.proc.alive():
            raise RuntimeError(f"router {self.id} is running")
        self.starts += 1
        self.log = log = LogLines()
        out = open(self.log_dir / f"router-{self.id}-{self.starts}.log", "w")  # noqa: SIM115
        self.proc = self.bed.spawn(self.host, self.argv(), label=f"router {self.id}",
                                   stderr=subprocess.PIPE, cwd=str(ROOT))

        def sink(line: str) -> None:
            log.append(line)
            out.write(line)

        def done() -> None:
            out.close()
            log.close()

        pump(self.proc.popen.stderr, sink, done)
        log.wait(lambda lines: any(" ready: " in line for line in lines), timeout,
                 f"router {self.id}'s ready line")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.signal(signal.SIGCONT)

    def wait_knows(self, subscribers: list[str], timeout: float = 15.0) -> None:
        """Wait until this run of the router knows every SDK subscriber in `subscribers`
        (by id): from gossip (`knows subscriber ID/sub/ID@R`) or attached here."""
        # (MQTT subscribers, m1...: their own router logs no attach line; the join rule,
        # docs/guarantees.md "Partitions", covers a router that does not know them yet.)
        # (r1, behind the relay, is an SDK subscriber too: `knows subscriber r1/sub/r1@R`.)
        keys = [f"{s}/sub/{s}" for s in subscribers if s[0] in "sr"]

        def knows(lines: list[str]) -> bool:
            return all(any(f"knows subscriber {k}@" in line
                           or f"subscriber {k}@{self.id} attached" in line for line in lines)
                       for k in keys)

        self.log.wait(knows, timeout, f"router {self.id} to know {', '.join(subscribers)}")

    def wait_logged(self, text: str, timeout: float = 15.0) -> None:
        self.log.wait(lambda lines: any(text in line for line in lines), timeout,
                      f"router {self.id} to log {text!r}")


class RelayHost(RouterHost):
    """`exactmesh relay` on a client host (docs/relay.md): started, waited for and signalled
    like a router, from its command line (a relay takes flags, not a TOML file)."""

    def __init__(self, bed: Testbed, host: str, relay_id: str, argv: list[str],
                 log_dir: Path) -> None:
        super().__init__(bed, host, relay_id, Path(), log_dir)
        self._argv = argv

    def argv(self) -> list[str]:
        return [EXACTMESH, "relay", *self._argv]

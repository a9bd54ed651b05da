"""Scenarios: build the hosts, start routers and clients, run the nemesis, check, tear down.

Hosts: router hosts r1..rN (routers A, B, C, ... from the TOML templates, deploy/three-
routers-secure by default) and client hosts c1..cN. Client host ci runs publisher pi (user
`ingest`, topic devices/bed/commands/pi) and subscriber si (user `operator`, filter
devices/#, durable, with a state directory), both over amqps, their routers' URLs ordered
from ri outwards. Every subscriber is owed every message: publishers start only once every
router knows every subscriber.

Options for long runs (docs/testbed.md, "The clients"): `--relay` adds a secured relay agent
on c1 (`exactmesh relay`, docs/relay.md) with a durable, sometimes connected SDK subscriber
r1 behind it; `--spark` adds a Spark Structured Streaming job in local mode on the last
client host publishing a numbered stream (k1) through the exactmesh data source
(tests/hosts/spark.py).

- `line3`: the guarantee under kill, pause, partition, one-way partition and isolation;
  every check must come out 0.
- `broken`: the same, but publisher p1 keeps its outbox in memory (no state directory) and
  the nemesis also SIGKILLs it and starts it again (`pubkill`): a fault the guarantee does
  not cover, which the checker must report (the new run reuses sequence numbers, so its
  messages are taken for copies of the old ones, and what the old run had in flight has no
  outcome).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.hosts.history import History, Report, check, write_json
from tests.hosts.nemesis import KINDS, Layout, Nemesis, Plan, schedule
from tests.hosts.netns import Proc, Testbed
from tests.hosts.routers import (
    ROOT,
    RelayHost,
    RouterHost,
    load_templates,
    make_etc,
    pump,
    render,
    to_toml,
)

USERS = {"ingest": "ingest password", "operator": "operator password"}
FILTER = "devices/#"
SCENARIOS = ("line3", "broken", "failover", "restart-isolated")
# Clients in `line3` wait this long for a silent router before failing over: longer than any
# fault, so that a pause or a cut is ridden out on the same connection (a killed router still
# makes them fail over at once). `failover` keeps the SDK's default (1 s; 2.5 s logged in).
RIDE_OUT = 8.0
# `--relay`: the relay agent on client host c1 (its id in the mesh, its listeners' ports) and
# the subscriber behind it, away `RELAY_AWAY[1]` seconds every `RELAY_AWAY[0]` seconds.
RELAY_ID, RELAY_AMQP, RELAY_AMQPS = "R1", 5800, 5801
RELAY_SUB = "r1"
RELAY_AWAY = (10.0, 2.0)
# `--spark`: the Spark stream's publisher name (bodies k1.INC.SEQ), on the last client host.
SPARK_PUB = "k1"
# Spark's session and first batch take minutes on 2 busy cores (about 4 with a load of 30).
SPARK_START = 600.0


@dataclass
class Options:
    scenario: str = "line3"
    seed: int = 1
    cycles: int = 2
    routers: int = 3
    rate: float = 20.0
    kinds: tuple[str, ...] = KINDS
    templates: Path = ROOT / "deploy" / "three-routers-secure"
    topology: str | None = None  # None: the templates' own `connect` lines (if one a router)
    unreachable_timeout: float = 3.0
    client_idle_timeout: float | None = RIDE_OUT
    out: Path = ROOT / "build" / "testbed"
    recovery_timeout: float = 30.0
    drain_timeout: float = 30.0
    quiet: bool = False
    # MQTT clients too: on every client host a paho subscriber (m1, ...) and publisher (q1,
    # ...) over MQTT 5 with TLS and a log-in, QoS 2, on the host's own router.
    mqtt: bool = False
    # A relay agent on c1 with a durable, sometimes connected SDK subscriber r1 behind it.
    relay: bool = False
    # A Spark Structured Streaming job (local mode) on the last client host publishing
    # `spark_rate` rows a second through the exactmesh data source (publisher k1).
    spark: bool = False
    spark_rate: float = 5.0
    # Filled by the scenario.
    memory_publishers: set[str] = field(default_factory=set)
    extra_kinds: tuple[str, ...] = ()

    def replay(self) -> str:
        """The command line that runs this schedule again."""
        words = [f"python -m tests.hosts {self.scenario} --seed {self.seed} --cycles "
                 f"{self.cycles} --hosts {self.routers}"]
        default = Options()
        if tuple(self.kinds) != default.kinds:
            words.append(f"--kinds {','.join(self.kinds)}")
        if self.rate != default.rate:
            words.append(f"--rate {self.rate:g}")
        if self.topology is not None:
            words.append(f"--topology {self.topology}")
        if self.mqtt:
            words.append("--mqtt")
        if self.relay:
            words.append("--relay")
        if self.spark:
            words.append("--spark")
            if self.spark_rate != default.spark_rate:
                words.append(f"--spark-rate {self.spark_rate:g}")
        if self.templates != default.templates:
            words.append(f"--templates {self.templates}")
        if self.unreachable_timeout != default.unreachable_timeout:
            words.append(f"--unreachable-timeout {self.unreachable_timeout:g}")
        return " ".join(words)


def edges(topology: str, n: int) -> list[tuple[int, int]]:
    """(dialling router, listening router) index pairs, as tests/mesh_harness.py wires them."""
    if topology == "line":
        return [(i, i - 1) for i in range(1, n)]
    if topology == "ring":
        return [(i, i - 1) for i in range(1, n)] + ([(n - 1, 0)] if n > 2 else [])
    if topology == "star":
        return [(i, 0) for i in range(1, n)]
    if topology == "full":
        return [(i, j) for i in range(1, n) for j in range(i)]
    raise ValueError(f"topology {topology!r}: line, ring, star or full")


class World:
    """The routers and client agents of one run, on one test bed."""

    def __init__(self, bed: Testbed, run_dir: Path, options: Options,
                 history: History, log: Callable[[str], None]) -> None:
        self.bed, self.dir, self.options, self.history, self.log = (
            bed, run_dir, options, history, log)
        self.n = options.routers
        self.router_hosts = [f"r{i + 1}" for i in range(self.n)]
        self.client_hosts = [f"c{i + 1}" for i in range(self.n)]
        self.routers: dict[str, RouterHost] = {}
        self.links: list[tuple[str, str]] = []
        self.clients: dict[str, Proc] = {}
        self.incarnation: dict[str, int] = {}
        self.logs = run_dir / "logs"
        self.logs.mkdir()
        self.files: dict[str, Path] = {}
        self.relay: RelayHost | None = None
        self.ready: set[str] = set()  # agents that said `ready`
        self.ended: set[str] = set()  # agents whose output ended
        self.ready_cond = threading.Condition()

    # ------------------------------------------------------------------ routers

    def configure(self) -> None:
        templates = load_templates(self.options.templates)
        ids = [str(t["id"]) for t in templates][: self.n]
        ids += [chr(ord("A") + i) for i in range(len(ids), self.n)]
        address = {r: self.bed.hosts[h].address for r, h in zip(ids, self.router_hosts,
                                                                 strict=True)}
        relay = {RELAY_ID: self.bed.hosts[self.client_hosts[0]].address} if (
            self.options.relay) else {}  # the relay's certificate too, from the cluster CA
        self.files = make_etc(self.dir / "etc", [*ids, *relay], {**address, **relay}, USERS,
                              self.options.templates / "acl")
        listen_port = {r: str(templates[min(i, len(templates) - 1)]["listen"]).rpartition(":")[2]
                       for i, r in enumerate(ids)}
        connect: dict[str, list[str]] = {r: [] for r in ids}
        if self.options.topology is None and len(templates) >= self.n:
            by_listen = {str(t.get("listen")): r for r, t in zip(ids, templates, strict=False)}
            for r, t in zip(ids, templates, strict=False):
                for target in t.get("connect", []):
                    peer = by_listen.get(target)
                    if peer is None:  # a router of the templates beyond --hosts
                        continue
                    connect[r].append(f"{address[peer]}:{listen_port[peer]}")
                    self.links.append((self._host(r, ids), self._host(peer, ids)))
        else:
            for i, j in edges(self.options.topology or "line", self.n):
                peer = ids[j]
                connect[ids[i]].append(f"{address[peer]}:{listen_port[peer]}")
                self.links.append((self.router_hosts[i], self.router_hosts[j]))
        for i, r in enumerate(ids):
            template = templates[min(i, len(templates) - 1)]
            table = render(template, router_id=r, address=address[r], connect=connect[r],
                           files=self.files, overrides={
                               "unreachable-timeout": self.options.unreachable_timeout,
                               "log-level": "debug"})
            path = self.dir / f"{r}.toml"
            path.write_text(to_toml(table, f"router {r} on host {self.router_hosts[i]}, "
                                           f"from {self.options.templates}"))
            self.routers[self.router_hosts[i]] = RouterHost(self.bed, self.router_hosts[i], r,
                                                            path, self.logs)

    def _host(self, router_id: str, ids: list[str]) -> str:
        return self.router_hosts[ids.index(router_id)]

    def start_routers(self) -> None:
        for router in self.routers.values():  # in order: each dials routers started before
            router.start()
        for a, b in self.links:
            ra, rb = self.routers[a], self.routers[b]
            ra.wait_logged(f"router {ra.id}: link to {rb.id} up", 30)
            rb.wait_logged(f"router {rb.id}: link to {ra.id} up", 30)

    def urls(self, index: int) -> str:
        """amqps URLs of the routers, from client host `index`'s own router outwards."""
        out = []
        for j in self._outwards(index):
            router = self.routers[self.router_hosts[j]]
            port = _port(router.config, "amqps")
            out.append(f"amqps://{router.address}:{port}")
        return ",".join(out)

    def _outwards(self, index: int) -> list[int]:
        return sorted(range(self.n), key=lambda j: (abs(j - index), j))

    # ------------------------------------------------------------------ the relay

    def start_relay(self, timeout: float = 30.0) -> None:
        """`exactmesh relay` on client host c1, as docs/relay.md ("A secured relay") starts
        one: linked to the routers' mesh listeners (`listen`), from c1's router outwards;
        client security and peer TLS from router A's file (the same cluster, secret, CAs,
        password file and ACL), its own certificate for c1's address from the cluster CA; its
        store in the run's directory. The plain AMQP listener stays on loopback."""
        host = self.client_hosts[0]
        address = self.bed.hosts[host].address
        tables = {h: tomllib.loads(r.config.read_text())["router"]
                  for h, r in self.routers.items()}
        first = tables[self.router_hosts[0]]
        mesh = [str(tables[self.router_hosts[j]]["listen"]) for j in self._outwards(0)]
        cert = str(self.files[f"/etc/exactmesh/tls/{RELAY_ID}.crt"])
        key = str(self.files[f"/etc/exactmesh/tls/{RELAY_ID}.key"])
        argv = ["--id", RELAY_ID, "--mesh", ",".join(mesh),
                "--amqp", f"127.0.0.1:{RELAY_AMQP}", "--amqps", f"{address}:{RELAY_AMQPS}",
                "--store", str(self.dir / "relay-store"), "--log-level", "debug",
                "--tls-cert", cert, "--tls-key", key,
                "--peer-tls-cert", cert, "--peer-tls-key", key]
        for option in ("cluster", "cluster-secret-file", "tls-ca", "tls-client-cert",
                       "password-file", "acl-file", "max-connections",
                       "max-connections-per-host", "max-connections-per-user", "peer-tls-ca"):
            if option in first:
                argv += [f"--{option}", str(first[option])]
        if first.get("peer-tls-required"):
            argv.append("--peer-tls-required")
        self.relay = RelayHost(self.bed, host, RELAY_ID, argv, self.logs)
        self.relay.start(timeout)
        self.relay.wait_logged(f"link to {self.routers[self.router_hosts[0]].id} up", timeout)

    def start_relay_subscriber(self) -> None:
        address = self.bed.hosts[self.client_hosts[0]].address
        self._agent(self.client_hosts[0], RELAY_SUB,
                    ["sub", "--relay", f"amqps://{address}:{RELAY_AMQPS}", "--filter", FILTER,
                     "--state-dir", str(self.dir / "state" / RELAY_SUB),
                     "--away-every", str(RELAY_AWAY[0]), "--away-for", str(RELAY_AWAY[1])],
                    "operator")

    # ------------------------------------------------------------------ Spark

    def start_spark(self) -> None:
        """The Spark job (tests/hosts/spark.py) on the last client host, publishing to
        devices/bed/commands/k1 as `ingest` over amqps (its password in a file, option
        `passwordFile`), to its own router only: the sink's publishers cannot report a move
        to another router to the history, and after a move the order of the messages in
        flight is not promised (docs/guarantees.md), so the checker could not tell a move
        from a reordering (seen: a partition's publisher that left C for B by its 3 s idle
        timeout, 110 rows reordered at s3). It builds its session and waits for `go`
        (`go_spark`) to start its query."""
        i = self.n - 1
        secret = self.dir / "spark.pw"
        secret.write_text(USERS["ingest"] + "\n")
        secret.chmod(0o600)
        self._agent(self.client_hosts[i], SPARK_PUB,
                    ["--urls", self.urls(i).split(",")[0],
                     "--topic", f"devices/bed/commands/{SPARK_PUB}",
                     "--rate", f"{self.options.spark_rate:g}", "--password-file", str(secret),
                     "--work", str(self.dir / "spark"),
                     "--subscribers", ",".join(self.history.subscribers)],
                    "ingest", module="tests.hosts.spark")

    def go_spark(self, timeout: float) -> None:
        """Wait (with a deadline) until the Spark agent's session is up, then start its query."""
        proc = self.clients[SPARK_PUB]
        with self.ready_cond:
            if not self.ready_cond.wait_for(
                    lambda: SPARK_PUB in self.ready or SPARK_PUB in self.ended, timeout):
                raise TimeoutError(f"the Spark agent was not ready within {timeout:g} s")
        if SPARK_PUB not in self.ready:
            raise RuntimeError(f"the Spark agent ended: see {self.logs}/{SPARK_PUB}-1.err")
        stdin = proc.popen.stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.flush()

    # ------------------------------------------------------------------ clients

    def _agent(self, host: str, name: str, argv: list[str], user: str,
               module: str = "tests.hosts.clients") -> Proc:
        env = dict(os.environ, XM_PASSWORD=USERS[user], PYTHONUNBUFFERED="1")
        if self.options.client_idle_timeout is not None:
            argv = [*argv, "--idle-timeout", str(self.options.client_idle_timeout)]
        err = open(self.logs / f"{name}-{self.incarnation.get(name, 1)}.err", "w")  # noqa: SIM115
        proc = self.bed.spawn(host, [sys.executable, "-m", module, *argv,
                                     "--id", name, "--user", user, "--no-verify-name",
                                     "--ca", str(self.files["/etc/exactmesh/tls/cluster-ca.crt"])],
                              label=name, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                              stderr=err, env=env, cwd=str(ROOT))
        err.close()
        history = self.history

        def sink(line: str) -> None:
            try:
                event = json.loads(line)
            except ValueError:
                return
            if event.get("e") == "ready":
                with self.ready_cond:
                    self.ready.add(str(event.get("who")))
                    self.ready_cond.notify_all()
            history.record(event)

        def done() -> None:  # its output ended: whoever waits for its `ready` stops waiting
            with self.ready_cond:
                self.ended.add(name)
                self.ready_cond.notify_all()

        pump(proc.popen.stdout, sink, done)
        self.clients[name] = proc
        return proc

    def start_subscriber(self, i: int) -> None:
        name = f"s{i + 1}"
        self._agent(self.client_hosts[i], name,
                    ["sub", "--urls", self.urls(i), "--filter", FILTER,
                     "--state-dir", str(self.dir / "state" / name)], "operator")

    def start_publisher(self, i: int) -> None:
        name = f"p{i + 1}"
        inc = self.incarnation[name] = self.incarnation.get(name, 0) + 1
        memory = ["--memory"] if name in self.options.memory_publishers else []
        self._agent(self.client_hosts[i], name,
                    ["pub", "--urls", self.urls(i), "--topic", f"devices/bed/commands/{name}",
                     "--rate", str(self.options.rate), "--inc", str(inc),
                     "--state-dir", str(self.dir / "state" / name), *memory], "ingest")

    def start_mqtt_subscriber(self, i: int) -> None:
        self._agent(self.client_hosts[i], f"m{i + 1}",
                    ["mqtt-sub", "--mqtt", self.mqtt_address(i), "--filter", FILTER],
                    "operator")

    def start_mqtt_publisher(self, i: int) -> None:
        name = f"q{i + 1}"
        inc = self.incarnation[name] = self.incarnation.get(name, 0) + 1
        self._agent(self.client_hosts[i], name,
                    ["mqtt-pub", "--mqtt", self.mqtt_address(i), "--inc", str(inc),
                     "--topic", f"devices/bed/commands/{name}", "--rate", str(self.options.rate)],
                    "ingest")

    def mqtt_address(self, i: int) -> str:
        router = self.routers[self.router_hosts[i]]
        return f"{router.address}:{_port(router.config, 'mqtts')}"

    def wait_subscribers_known(self, timeout: float = 30.0) -> None:
        keys = [(i, f"s{i + 1}/sub/s{i + 1}") for i in range(self.n)]
        if self.options.mqtt:
            keys += [(i, f"m{i + 1}/mqtt/{FILTER}") for i in range(self.n)]
        for i, key in keys:
            home = self.routers[self.router_hosts[i]]
            for host, router in self.routers.items():
                if host != self.router_hosts[i]:
                    router.wait_logged(f"router {router.id}: knows subscriber {key}@{home.id}",
                                       timeout)
        if self.options.relay:  # r1's home is the relay: every router learns it by gossip
            for router in self.routers.values():
                router.wait_logged(f"router {router.id}: knows subscriber "
                                   f"{RELAY_SUB}/sub/{RELAY_SUB}@{RELAY_ID}", timeout)

    def stop_agents(self, names: list[str], timeout: float) -> None:
        """Tell each agent to stop (a publisher flushes first); wait for every one, up to
        `timeout` seconds in all, then SIGKILL those still running."""
        for name in names:
            stdin = self.clients[name].popen.stdin
            if stdin is not None:
                try:
                    stdin.write("stop\n")
                    stdin.flush()
                    stdin.close()
                except (BrokenPipeError, ValueError):
                    pass
        deadline = time.monotonic() + timeout
        for name in names:
            proc = self.clients[name]
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"{name} did not stop within {timeout:g} s: SIGKILL")
                proc.kill()

    # ------------------------------------------------------------------ extra faults

    def kill_publisher(self, plan: Plan) -> Callable[[], None]:
        """`pubkill`: SIGKILL a publisher's process group; the heal starts it again."""
        name = plan.targets[0]
        self.clients[name].kill()
        if name in self.options.memory_publishers:
            self.history.forget_run(name, self.incarnation[name])
        return lambda: self.start_publisher(int(name[1:]) - 1)


def _port(config: Path, key: str) -> str:
    table = tomllib.loads(config.read_text())["router"]
    if key not in table:
        raise ValueError(f"{config}: the test bed's clients connect over {key}; set it")
    return str(table[key]).rpartition(":")[2]


def prepare(options: Options) -> Options:
    """The scenario's settings on top of the command line's."""
    if options.scenario == "broken":
        options.memory_publishers = {"p1"}
        options.extra_kinds = ("pubkill",)
        # What it lost never comes: do not wait long for it.
        options.drain_timeout = min(options.drain_timeout, 8.0)
    elif options.scenario == "failover":
        options.client_idle_timeout = None
    elif options.scenario == "restart-isolated":
        options.kinds = ("restart-isolated",)
        options.drain_timeout = min(options.drain_timeout, 8.0)
    elif options.scenario != "line3":
        raise ValueError(f"unknown scenario {options.scenario!r}: {', '.join(SCENARIOS)}")
    return options


Hook = Callable[[str, "World"], Any]


def run(options: Options, hook: Hook | None = None) -> Report:
    """Build, run, check and tear down one scenario; returns the checker's report (its JSON
    file written under `options.out`). `hook(stage, world)` is called at the stages
    "hosts", "routers", "clients" and "faults" (tests use it to learn the prefix, or to
    fail on purpose: the hosts are torn down all the same)."""
    replay = options.replay()
    options = prepare(options)
    log: Callable[[str], None] = (lambda s: None) if options.quiet else (
        lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", flush=True))
    n = options.routers
    history = History([f"s{i + 1}" for i in range(n)] +
                      ([f"m{i + 1}" for i in range(n)] if options.mqtt else []) +
                      ([RELAY_SUB] if options.relay else []))
    hosts = [f"r{i + 1}" for i in range(n)] + [f"c{i + 1}" for i in range(n)]
    run_name = ""
    with Testbed(hosts) as bed:
        run_name = f"{options.scenario}-seed{options.seed}-{bed.prefix}"
        run_dir = Path(tempfile.mkdtemp(prefix=f"{bed.prefix}-"))
        try:
            world = World(bed, run_dir, options, history, log)
            _play(world, options, history, log, hook or (lambda stage, w: None))
        finally:
            history.ended = time.monotonic()
            bed.close()
            report = check(history, options.scenario, options.seed, replay)
            shutil.copytree(run_dir / "logs", options.out / run_name, dirs_exist_ok=True)
            shutil.rmtree(run_dir, ignore_errors=True)
            write_json(report, history, options.out / f"{run_name}.json")
    log(report.summary())
    return report


def _play(world: World, options: Options, history: History, log: Callable[[str], None],
          hook: Hook) -> None:
    bed, n = world.bed, options.routers
    log(f"hosts {', '.join(f'{h.name}={h.address}' for h in bed.hosts.values())} "
        f"(prefix {bed.prefix})")
    hook("hosts", world)
    world.configure()
    world.start_routers()
    log(f"routers up: {', '.join(r.id for r in world.routers.values())}")
    hook("routers", world)
    if options.spark:  # its session takes long to build: meanwhile, the rest starts
        world.start_spark()
    if options.relay:
        world.start_relay()
        log(f"relay {RELAY_ID} up on {world.client_hosts[0]}")
        world.start_relay_subscriber()
    for i in range(n):
        world.start_subscriber(i)
        if options.mqtt:
            world.start_mqtt_subscriber(i)
    world.wait_subscribers_known()
    for i in range(n):
        world.start_publisher(i)
        if options.mqtt:
            world.start_mqtt_publisher(i)
    if options.spark:
        world.go_spark(SPARK_START)
    pubs = [f"p{i + 1}" for i in range(n)] + ([f"q{i + 1}" for i in range(n)]
                                               if options.mqtt else [])
    pubs += [SPARK_PUB] if options.spark else []
    first = SPARK_START if options.spark else 30.0
    if not history.wait(lambda h: h.every_sub_got_from(pubs), first, "the first messages"):
        raise TimeoutError(f"the first messages did not reach every subscriber within "
                           f"{first:g} s")
    log("clients up; every subscriber receives")
    hook("clients", world)
    layout = Layout(world.router_hosts, dict(zip(world.router_hosts, world.client_hosts,
                                                 strict=True)), world.links)
    kinds = tuple(options.kinds) + options.extra_kinds
    plans = schedule(options.seed, options.cycles, layout, kinds,
                     {"pubkill": [(p,) for p in sorted(options.memory_publishers)]})
    nemesis = Nemesis(bed, world.routers, history, options.recovery_timeout, world.links)
    nemesis.actions["pubkill"] = world.kill_publisher
    nemesis.run(plans, log)
    hook("faults", world)
    # (The Spark agent lets its batch in progress commit, then stops its query and session.)
    world.stop_agents(pubs, 180 if options.spark else 90)
    history.wait(lambda h: h.owed_all_processed(), options.drain_timeout, "the drain")
    world.stop_agents(history.subscribers, 30)
    log("clients stopped")

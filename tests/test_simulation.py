"""Whole-cluster deterministic simulation (router/sim): many routers, a faulty network, clients.

Every run derives from one seed and checks the delivery properties continuously and after
draining (router/sim/checker.py). A failure prints its parameters and a replay command:

    exactmesh sim --spec 'seed=…,routers=…,…'       (or python -m router.sim '…')
    EXACTMESH_SIM_SPEC='seed=…,…' .venv/bin/python -m pytest -q tests/test_simulation.py -k replay

(`-v` after the spec prints the whole trace.) Any run that once failed goes into REGRESSIONS
below, to stay there for good. A replay is exact against the same code (the failure prints a
digest of router/core, router/sim, mesh and mqtt_edge), in any process, whatever its
PYTHONHASHSEED (a
test at the end compares every trace line and frame of the same seeds under several).
`exactmesh sim --seeds A-B` runs ranges of seeds from the command line (tested at the end).

- `test_random_simulations`: hypothesis draws a seed plus router count (2-6), topology, fault
  rates, restarts and windows; EXACTMESH_SIM_EXAMPLES runs (default 500).
- `test_long_random_simulations` / `test_long_seed_sweep` (@slow, EXACTMESH_LONG=1): thousands
  more (EXACTMESH_SIM_LONG_EXAMPLES, EXACTMESH_SIM_START / EXACTMESH_SIM_SEEDS).
- fixed scenarios: no faults, heavy drop/dup/reorder, a partition healed within the unreachable
  timeout, one that outlasts it, and a router restart.

Failover (clients that survive their router's crash or their connection's drop, and attach
again with their identity, the next generation and their resume declaration):

- `test_failover_simulations`: `Params.failover_from_seed` for EXACTMESH_SIM_FAILOVER seeds
  (default 500, seeds 1000-1499): survivors, warm subscribers and their timeouts,
  dropped connections, reconnect-timeout, crashes, partitions, minus OPEN_BUGS_OFF (set
  EXACTMESH_SIM_ALL_FAULTS=1 to keep everything in). A failure prints the full spec.
- `test_long_failover_seed_sweep` (@slow, EXACTMESH_LONG=1): EXACTMESH_SIM_FAILOVER_SEEDS
  (default 10000) from EXACTMESH_SIM_FAILOVER_START, all failures at once.
- fixed scenarios: a warm subscriber whose router crashed gets what it missed elsewhere, in
  order; one that stays away fails by name after its timeout; a publisher whose connection
  dropped resends without duplicates; a subscriber moves after a dropped connection (and the
  router that noticed late closes the old link as stolen).
- `test_sdk_client_simulations`: failover seeds with every client run by the SDK's state
  machines (router/sim/sdk.py; `Params.sdk`, a share of them in every failover seed).
- AMQP wire clients (router/sim/amqp.py; `Params.wire`: SDK clients whose cores talk AMQP to
  the router's real AmqpConnection): `test_wire_client_simulations` runs 100 failover seeds
  with every client one of them, `test_wire_and_engine_clients_together` 50 with
  half of the SDK clients; a fixed run without faults, and the two dropped-connection
  scenarios below, also run with them (`amqp`). Every failover seed draws its share
  (none, half or all of the SDK clients).
- REGRESSIONS: every run that ever failed, which must pass for good (a newly found failing
  run is fixed, then added there; nothing here is xfail).

MQTT (router/sim/mqtt.py: MQTT 5 devices speaking real packets to the real MQTT session,
`mqtt_edge.session.MqttConnection`, at each router, mixed with AMQP clients; `Params.mqtt`):

- `test_mqtt_simulations`: `Params.mqtt_from_seed` (the failover workload with devices) for
  EXACTMESH_SIM_MQTT seeds (default 150, from EXACTMESH_SIM_MQTT_FROM=0), minus
  MQTT_OPEN_BUGS_OFF: the MQTT edge bugs these runs found that are still open (none now;
  the two found so far are fixed, each with a fixed scenario below).
- `test_long_mqtt_seed_sweep` (@slow, EXACTMESH_LONG=1): EXACTMESH_SIM_MQTT_SEEDS (default
  5000) from EXACTMESH_SIM_MQTT_START.
- fixed scenarios: MQTT and AMQP publishers and subscribers on three routers without faults
  (exactly once, in order, every PUBACK, drained); a subscriber device whose connection drops
  and whose router notices late (the failures name it, the publisher device reads them in
  PUBACK 0x80); devices that die with their router.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.core.actions import Accepted, Rejected
from router.core.engine import DELIVERY_FAILED
from router.core.records import ALL
from router.sim.world import DOWN_DETECT, TOPOLOGIES, Params, SimFailure, World, run

LONG = bool(os.environ.get("EXACTMESH_LONG"))

# ------------------------------------------------------------------------ random runs


@st.composite
def sim_params(draw: st.DrawFn) -> Params:
    timeout = draw(st.sampled_from([2.0, 3.0, 5.0]))
    return Params(
        seed=draw(st.integers(0, 2**32 - 1)),
        routers=draw(st.integers(2, 6)),
        topology=draw(st.sampled_from(TOPOLOGIES)),
        drop=draw(st.sampled_from([0.0, 0.01, 0.05, 0.2])),
        dup=draw(st.sampled_from([0.0, 0.02, 0.1])),
        reorder=draw(st.sampled_from([0.0, 0.1, 0.5])),
        partitions=draw(st.integers(0, 3)),
        partition_max=draw(st.sampled_from([1.0, 0.6 * timeout, 1.5 * timeout, 2.5 * timeout])),
        unreachable_timeout=timeout,
        publishers=draw(st.integers(1, 4)),
        subscribers=draw(st.integers(1, 5)),
        churn=draw(st.sampled_from([0.0, 0.5, 2.0])),
        flaky=draw(st.sampled_from([0.0, 0.3, 1.0])),
        ttl=draw(st.sampled_from([0.0, 0.1, 0.5])),
        restarts=draw(st.sampled_from([0, 0, 1, 2])),
        transfer_window=draw(st.sampled_from([2, 8, 4096])),
    )


@settings(max_examples=int(os.environ.get("EXACTMESH_SIM_EXAMPLES", "500")), deadline=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(sim_params())
def test_random_simulations(params: Params) -> None:
    run(params)


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="set EXACTMESH_LONG=1 for the long run")
def test_long_random_simulations() -> None:
    examples = int(os.environ.get("EXACTMESH_SIM_LONG_EXAMPLES", "3000"))
    settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
             print_blob=True)(given(sim_params())(test_random_simulations.hypothesis.inner_test))()


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="set EXACTMESH_LONG=1 for the long run")
def test_long_seed_sweep() -> None:
    """Seeds START.. START+N with every parameter drawn from the seed; all failures at once."""
    start = int(os.environ.get("EXACTMESH_SIM_START", "0"))
    count = int(os.environ.get("EXACTMESH_SIM_SEEDS", "3000"))
    failures = []
    for seed in range(start, start + count):
        try:
            run(Params.from_seed(seed))
        except SimFailure as failure:
            failures.append(f"seed {seed}: {failure.what.splitlines()[0][:200]}")
    assert not failures, f"{len(failures)} of {count} seeds failed:\n" + "\n".join(failures)


# ------------------------------------------------------------------------ failover runs

# Clients that survive their router's crash or their connection's drop and attach again
# (router/sim/world.py, "survivors"). Parts of that workload still hit router bugs that are
# open (each entry says which); the CI runs leave those parts out until they are fixed, then
# the entry goes. EXACTMESH_SIM_ALL_FAULTS=1 keeps everything in (to check a fix).
OPEN_BUGS_OFF: dict[str, object] = {}  # every failover fault is on: none is known to fail
ALL_FAULTS = bool(os.environ.get("EXACTMESH_SIM_ALL_FAULTS"))


def failover_params(seed: int) -> Params:
    """The failover workload for `seed` (Params.failover_from_seed), minus OPEN_BUGS_OFF."""
    params = Params.failover_from_seed(seed)
    return params if ALL_FAULTS else dataclasses.replace(params, **OPEN_BUGS_OFF)


def failed_seed(seed: int, failure: SimFailure) -> str:
    """One line per failed seed in a sweep's report: what broke, then its replay spec."""
    return f"seed {seed}: {failure.what.splitlines()[0][:200]}\n    {failure.params.spec()}"


def assert_sweep_clean(params_of: Callable[[int], Params], env: str, default: int) -> None:
    """Seeds EXACTMESH_SIM_<env>_START .. + EXACTMESH_SIM_<env>_SEEDS of a workload
    (`params_of(seed)`): every run, then all failures at once, each with its replay spec."""
    start = int(os.environ.get(f"EXACTMESH_SIM_{env}_START", "0"))
    count = int(os.environ.get(f"EXACTMESH_SIM_{env}_SEEDS", str(default)))
    failures = []
    for seed in range(start, start + count):
        try:
            run(params_of(seed))
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
    assert not failures, f"{len(failures)} of {count} seeds failed:\n" + "\n".join(failures)


def test_failover_simulations() -> None:
    """EXACTMESH_SIM_FAILOVER (default 500) failover seeds from EXACTMESH_SIM_FAILOVER_FROM
    (default 500), the same ones every run; all failures at once. The long sweep goes
    through many more."""
    start = int(os.environ.get("EXACTMESH_SIM_FAILOVER_FROM", "1000"))
    count = int(os.environ.get("EXACTMESH_SIM_FAILOVER", "500"))
    failures = []
    for seed in range(start, start + count):
        try:
            run(failover_params(seed))
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
    assert not failures, f"{len(failures)} of {count} seeds failed:\n" + "\n".join(failures)


def test_sdk_client_simulations() -> None:
    """Every client run by the SDK's own state machines (`Params.sdk=1`, router/sim/sdk.py:
    amqp_edge.sdk_core's PublisherCore and SubscriberCore with in-memory stores), on 150
    failover seeds: what the SDK declares, resends and suppresses keeps exactly once through
    crashes, moves and dropped connections. Proves the SDK clients did run and move."""
    failures, resent, sdk_lines = [], 0, 0
    for seed in range(5000, 5150):
        params = dataclasses.replace(failover_params(seed), sdk=1.0)
        try:
            world = run(params)
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
            continue
        resent += world.moves["resent"]
        sdk_lines += sum(getattr(c, "sdk", None) is not None for c in world.all_clients)
    assert not failures, f"{len(failures)} of 150 seeds failed:\n" + "\n".join(failures)
    assert sdk_lines > 300 and resent > 150, (sdk_lines, resent)


# AMQP wire clients (router/sim/amqp.py): SDK clients whose cores talk to the router's real
# AmqpConnection over AMQP. Every failover seed draws a share of them (`Params.wire`); these
# runs make them all of the clients.
WIRE_SEEDS = range(1000, 1100)


def wire_params(seed: int) -> Params:
    """The failover workload for `seed` with every client an SDK client over AMQP."""
    return dataclasses.replace(failover_params(seed), sdk=1.0, wire=1.0, mqtt=0.0)


def test_wire_client_simulations() -> None:
    """Every client an SDK client talking AMQP to the router's real AmqpConnection
    (`Params.wire=1`, router/sim/amqp.py), on 200 failover seeds with every fault: crashes
    and dropped connections break connections with frames in flight, routers notice late
    and close stolen links, publishers declare and resend on new connections, outcomes lost
    with a connection are told again. Proves the wire clients did run, move and resend."""
    failures = []
    counts: dict[str, int] = {}
    for seed in WIRE_SEEDS:
        try:
            world = run(wire_params(seed))
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
            continue
        assert all(c.wire is not None for c in world.all_clients)
        for name, n in [*world.amqp.counts.items(), *world.moves.items()]:
            counts[name] = counts.get(name, 0) + n
    assert not failures, f"{len(failures)} of {len(WIRE_SEEDS)} seeds failed:\n" + \
        "\n".join(failures)
    assert counts["connections"] > 750 and counts["reattached"] > 200, counts
    assert counts["noticed"] > 100 and counts["stolen"] > 5 and counts["resent"] > 150, counts
    assert counts["declared_unseen"] > 50 and counts["outcomes"] > 2500, counts


def test_wire_and_engine_clients_together() -> None:
    """Half of the SDK clients over AMQP (`wire=0.5`, the SDK's share as each failover seed
    draws it), beside the simulator's other clients: their messages (AMQP messages then, as
    the router parses what it sends again) and the wire clients' meet at both ends."""
    failures, wire = [], 0
    for seed in range(3000, 3050):
        try:
            world = run(dataclasses.replace(failover_params(seed), wire=0.5))
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
            continue
        wire += len(world.amqp.clients)
    assert not failures, f"{len(failures)} of 50 seeds failed:\n" + "\n".join(failures)
    assert wire > 50, wire


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="set EXACTMESH_LONG=1 for the long run")
def test_long_failover_seed_sweep() -> None:
    """Failover seeds START.. START+N (EXACTMESH_SIM_FAILOVER_START / _SEEDS); all failures
    at once."""
    assert_sweep_clean(failover_params, "FAILOVER", 10000)


@pytest.mark.skipif(not os.environ.get("EXACTMESH_SIM_SPEC"), reason="EXACTMESH_SIM_SPEC unset")
def test_replay_spec() -> None:
    """Replay one run under pytest: EXACTMESH_SIM_SPEC='seed=…,…' (or a bare seed)."""
    run(Params.parse(os.environ["EXACTMESH_SIM_SPEC"]))


# ------------------------------------------------------------------------ regressions

# Every run that once failed, as printed by the failure (full parameters, so that changing a
# default never changes what an entry means). Comment: what broke, in which code.
REGRESSIONS = [
    # Not drained: a slow SDK subscriber stayed slow after the faults stopped (the same as
    # 4243; router/sim/sdk.py _sdk_slow, a model bug).
    "seed=59089,routers=3,topology=full,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=4,subscribers=3,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=1,notice=2.0,move_max=1.5,move_to=any,warm=0.5,"
    "warm_min=0.5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,"
    "sdk=1.0,wire=0.0,mqtt=0.0,bare=0.0",
    # An SDK subscriber answered a copy from its store while the router's batch was still
    # being applied, ahead of the settlement the router had written behind the copy
    # (router/sim/sdk.py answers as the client reads it: a model bug).
    "seed=34875,routers=5,topology=line,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=3,subscribers=3,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,"
    "sdk=0.5,wire=0.0,mqtt=0.0,bare=0.0",
    "seed=46218,routers=5,topology=line,drop=0.05,dup=0.0,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=1,subscribers=3,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0,"
    "sdk=1.0,wire=0.0,mqtt=0.3,bare=0.0",
    # A subscriber that was not warm accepted #12 at C; its connection dropped (its
    # subscription ended at C) and it attached at C again, afresh (`since` 2), while C's
    # verdict on #12 was still on its way to origin B: B failed #12 for it at once, naming a
    # subscriber that had processed it. A part owed to an ended subscription now waits for
    # the verdict of its router, up to `reconnect-timeout` (failover.py _end_earlier,
    # _tick_failover).
    "seed=33945,routers=3,topology=star,drop=0.05,dup=0.0,reorder=0.1,"
    "partitions=2,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=2,subscribers=5,messages=15,churn=0.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0,"
    "sdk=0.5,wire=0.0,mqtt=0.0,bare=0.5",
    # The same hole as 55720 with the publisher staying put: a warm subscriber's timeout ran
    # out at B during a partition (B failed #5 and #6, its verdicts held up in retransmit
    # backoff), it subscribed afresh at B, got #7-#10, and moved to A after B crashed: A resent
    # #5 and #6 after #10. Fixed by the `since` generation (failover.py _end_earlier).
    "seed=96236,routers=2,topology=random,drop=0.05,dup=0.0,reorder=0.1,partitions=1,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=2,subscribers=3,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=1.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,"
    "sdk=0.0,mqtt=0.0,bare=0.0",
    # A subscriber attached twice at one router within its resume-timeout, declaring accepted
    # what its first attach had declared received: the hold counted those still, with no
    # placeholder left to end it, and it got nothing more (failover.py _resume counts a
    # redeclared placeholder once; invariants.py checks the hold against the placeholders).
    "seed=38544,routers=4,topology=random,drop=0.0,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=1,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A stale resend took a record its publisher had been told the outcome of, the record
    # was reclaimed and decided again: two outcomes for one tag on the publisher's link
    # (failover.py _reclaim, _answer_released: an outcome told before is not told again).
    "seed=98641,routers=5,topology=star,drop=0.05,dup=0.02,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=1,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A publisher's resend that was new at the router it resumed at (its old origin had
    # decided it when the ttl ran out; the outcome was lost) queued behind copies of its later
    # messages the old origin had sent there: #7, #8, then #6 (engine.py _queue_before).
    "seed=30711,routers=4,topology=star,drop=0.0,dup=0.0,reorder=0.1,partitions=2,"
    "partition_min=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=2,"
    "restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=2,subscribers=4,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A record published here, taken by the publisher's resend at another router and taken
    # back by its resend here, was numbered anew each time: after a later message that had
    # stayed here, so a move resent that one first (failover.py _adopt keeps the number).
    "seed=40618,routers=2,topology=full,drop=0.05,dup=0.0,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # Copies a subscriber got from its router's own orphans (their publisher had resumed
    # elsewhere, its resends not there yet) were taken for the new router's: old and new
    # router are not ordered while both are in flight (checker.py: the record's router).
    "seed=48607,routers=4,topology=random,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=4,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=1,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # The publisher moved C -> A -> C (A cut off, then crashed) and resent #5 at C; a
    # subscriber got #8, published at C before the moves, first: the first limit of order
    # (guarantees.md: its old and its new router), which the checker applied only between
    # two different routers (checker.py Checker.stint: a move away and back counts).
    "seed=62494,routers=3,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=2,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (C -> A -> C, A crashed; C's orphan #3, resent there, after C's own #4..#8)
    "seed=94592,routers=3,topology=random,drop=0.0,dup=0.0,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # The publisher came back after reconnect-timeout: its resends are new publications
    # (second limit of order), but the forget of its origin's give-up was still on its way
    # to a router whose record the checker took for one the mesh still held (checker.py
    # on_resend `given_up`).
    "seed=98877,routers=5,topology=line,drop=0.05,dup=0.02,reorder=0.0,partitions=2,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=4,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # The origin let a destination's record go without an outcome while a copy was still
    # queued there; the publisher's resend there made a second record and a second copy after
    # the first was accepted (failover.py _resend_from_publisher takes the live record).
    "seed=77443,routers=5,topology=full,drop=0.01,dup=0.02,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=2,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A resend from another origin adopted the stand-in record that only held a tombstone's
    # outcome for the publisher to settle: its subscriber got a copy with an empty body, and
    # again (failover.py _carrier: such a record carries nothing and is not adopted).
    "seed=73438,routers=4,topology=ring,drop=0.05,dup=0.0,reorder=0.0,partitions=2,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=3,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A resend found a live, settled record of the message at the destination and a second
    # record was made beside it: two copies under one tag to one subscriber (caught by the
    # invariant checks; failover.py _owed_beside leaves those keys to the live record).
    "seed=15817,routers=4,topology=random,drop=0.0,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=2,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (_owed_beside)
    "seed=66045,routers=4,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # Once OPEN_BUGS (first deliveries out of publish order after moves, or after a publisher
    # resumed at its first router, 0..3999 sweep): they passed again after changes that moved
    # their runs off the failing path (06e1bcd and later), before the order fixes; kept as
    # regressions all the same.
    "seed=2077,routers=4,topology=ring,drop=0.0,dup=0.0,reorder=0.1,partitions=1,partition_mi"
    "n=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=3,restart_inc=higher,unreach"
    "able_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,"
    "messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled="
    "0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_"
    "attempts=3,survivors=0.8,pub_survivors=0.0,drop_client=4,notice=0.0,move_max=1.5,move_to"
    "=any,warm=0.0,warm_min=0.5,warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare"
    "=1.0",
    # first deliveries out of publish order after a publisher resumed at its first router
    "seed=210,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.1,partitions=0,partition_min"
    "=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=2,restart_inc=higher,unreacha"
    "ble_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,m"
    "essages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0"
    ".03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_a"
    "ttempts=3,survivors=0.8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to"
    "=any,warm=1.0,warm_min=0.5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare"
    "=1.0",
    # likewise
    "seed=3663,routers=4,topology=full,drop=0.01,dup=0.0,reorder=0.0,partitions=0,partition_m"
    "in=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=2"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=4,messages=15,ch"
    "urn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettle"
    "d_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,sur"
    "vivors=0.5,pub_survivors=-1.0,drop_client=2,notice=0.5,move_max=1.5,move_to=same,warm=0."
    "0,warm_min=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise
    "seed=3850,routers=4,topology=star,drop=0.0,dup=0.0,reorder=0.0,partitions=1,partition_mi"
    "n=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=5,messages=15,chu"
    "rn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=1.0,pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=same,warm=0.5"
    ",warm_min=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # An orphan given up at reconnect-timeout was forgotten with no memory of who had
    # accepted it: the publisher's late resend owed it again to a subscriber that had processed
    # it, and its detach failed the message naming it (failover.py _remember keeps who accepted).
    "seed=8007090,routers=3,topology=random,drop=0.0,dup=0.0,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=4,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A late resend added a copy to a record whose ttl had already run out: nothing would
    # ever expire it (found by the invariant checks; failover.py _add_locals fails it at once).
    "seed=8009603,routers=5,topology=line,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=4,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=0.0,drop_client=4,"
    "notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # A resend answered from a destination's tombstone of a failed message named nobody:
    # the origin's Forget carried no names (Forget now carries the failure's description and info).
    "seed=8003418,routers=4,topology=ring,drop=0.0,dup=0.02,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=0,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=2,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # Adopting a destination's orphan for a publisher's resend: a new pre-settled local copy decided
    # it, and the outcome was reset and decided again: two outcomes for one delivery
    # (failover.py _add_locals resets before any copy is sent).
    "seed=8002151,routers=2,topology=line,drop=0.05,dup=0.0,reorder=0.0,partitions=2,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=3,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # A destination's record orphaned by its origin's restart kept its own verdict (for the
    # subscribers there only) as the tombstone: the publisher's later resend was told accepted
    # although a subscriber that had moved there never got it (failover.py _remember).
    "seed=8003001,routers=2,topology=star,drop=0.0,dup=0.02,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=4.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A publisher's resend adopted a destination's orphan: a new pre-settled local copy decided
    # it accepted before the remote parts were added (failover.py _resend_from_publisher).
    "seed=8000897,routers=3,topology=full,drop=0.05,dup=0.02,reorder=0.0,partitions=2,"
    "partition_min=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=4,subscribers=5,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # Engine.remote_message decided before the stand-in ("ghost") copies of owed subscribers
    # that had left were added: with a pre-settled subscriber there, the verdict was "accepted"
    # at once, and the publisher was told accepted although an owed subscriber never got it.
    "seed=1428,routers=2,topology=random,drop=0.2,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=4.5,isolate=0.3,unreachable_timeout=3.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=1,messages=15,"
    "churn=2.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.5,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    "seed=2203,routers=2,topology=line,drop=0.0,dup=0.1,reorder=0.1,partitions=2,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,unreachable_timeout=2.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=3,messages=15,"
    "churn=2.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    # MeshNode._send_item silently dropped an item for a router whose incarnation it did not
    # know yet (its LSA lost or late): a Forward known only through gossip (1038), a Verdict
    # to an origin known only through its DATA (776). The publisher never got an outcome.
    "seed=1038,routers=6,topology=line,drop=0.2,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,unreachable_timeout=2.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=4,messages=15,"
    "churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.5,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    "seed=776,routers=6,topology=star,drop=0.2,dup=0.1,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=12.5,isolate=0.3,unreachable_timeout=5.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=5,messages=15,"
    "churn=0.0,flaky=1.0,slow=0.2,stall=0.1,ttl=0.5,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    # After the unreachable timeout the transfer channel was reset with its incarnation
    # "spent": the Forget sent right after (and any later item) raised ValueError out of
    # MeshNode.tick, which would kill the router.
    "seed=26,routers=5,topology=star,drop=0.0,dup=0.1,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,unreachable_timeout=3.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=3,messages=15,"
    "churn=0.5,flaky=1.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    # Only one side gave up (the partition healed between the two ends' timeouts): it dropped
    # the other's messages without a verdict, and their publisher never got an outcome. 414
    # with a clean network (no drop, dup or reorder): partitions alone.
    "seed=414,routers=3,topology=ring,drop=0.0,dup=0.0,reorder=0.0,partitions=2,"
    "partition_min=0.5,partition_max=5.0,isolate=0.3,restarts=0,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=1,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.5,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3",
    "seed=1950,routers=2,topology=full,drop=0.0,dup=0.1,reorder=0.1,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,unreachable_timeout=2.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=2,messages=15,"
    "churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,window=8,max_attempts=3",
    # On giving a router up, MeshNode kept the ids of the MSG items its transfer handed back
    # (to send FORGET when the router is back) but not those of FORGET items: a FORGET not yet
    # acknowledged was lost, and the destination kept the record (and never settled the
    # subscriber's copy) for good.
    "seed=1355,routers=3,topology=random,drop=0.2,dup=0.0,reorder=0.1,partitions=2,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=0,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=1.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3",
    # Failover (clients that survive and move). Engine._claim (a subscriber attaching where
    # parts for it were pending) counted the part and its new copy both as pending: the
    # record was never forgotten, the publisher's window shrank for good and the copies on
    # other routers were never settled (26); and it did not decide a record whose new copy
    # counted as accepted at once (declared accepted on resume): no outcome ever (227).
    "seed=26,routers=5,topology=full,drop=0.05,dup=0.02,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=3,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    "seed=227,routers=4,topology=line,drop=0.0,dup=0.0,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # Failover bugs the simulation found (fixed):
    # stale _mesh_records entry after _claim: a leak per moved subscriber
    "seed=2,routers=5,topology=line,drop=0.0,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=1,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # the origin adopting its own record on a resend owes it to later attachers
    "seed=91,routers=3,topology=line,drop=0.05,dup=0.02,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=3,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a resend is not owed to subscribers away (not warm) from a lost router
    "seed=31,routers=5,topology=ring,drop=0.0,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=2,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # _owe_new_remotes returns early without remote subscribers: away ones missed
    "seed=511,routers=4,topology=random,drop=0.0,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=2,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=0,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # _moved_away/_go_warm requeue by record number, not in the order of the queue
    "seed=474,routers=3,topology=full,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # no retarget when a non-warm subscriber's removal gossip came before its move
    "seed=437,routers=4,topology=random,drop=0.0,dup=0.0,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=5,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a tombstone answers a remote resend for keys its record never had
    "seed=478,routers=4,topology=star,drop=0.0,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=3,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # a part still pending at a router that failed the message ends WITHDRAWN: in mode all the
    # record is never decided
    "seed=289,routers=5,topology=random,drop=0.0,dup=0.02,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # a verdict answered from an origin tombstone names other routers' subscribers
    "seed=1127,routers=5,topology=ring,drop=0.0,dup=0.02,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=4,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # a key attaching again at the same router before it noticed the old connection died: two
    # Subscribers for one key
    "seed=102,routers=2,topology=star,drop=0.01,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=4,messages=15,churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=0.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A warm subscriber that came back after its timeout got a message from a second record
    # at its router, out of publish order (#8 after #14); gone with the fixes above
    "seed=251,routers=4,topology=ring,drop=0.05,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=5,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=0.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # After a crash, a part for a subscriber that attached again at the restarted router was
    # never answered (the record there answered only for another key), and the publisher
    # never got an outcome; gone with the fixes above (a destination answers for more keys
    # as their copies finish)
    "seed=731,routers=2,topology=line,drop=0.01,dup=0.02,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=0.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # (fixed) a publisher told accepted although a subscriber that moved twice did not accept
    "seed=166,routers=3,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=0,partition_min"
    "=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=3.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=4,messages=15,chur"
    "n=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_"
    "subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survi"
    "vors=1.0,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.0,w"
    "arm_min=0.5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a resend from another router for a message of a publisher still attached here (its death
    # not yet noticed) made a second record: a duplicate
    "seed=2165,routers=2,topology=random,drop=0.01,dup=0.0,reorder=0.0,partitions=2,partition"
    "_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout"
    "=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=4,messages=15,"
    "churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presett"
    "led_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,s"
    "urvivors=1.0,pub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1"
    ".0,warm_min=0.5,warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # a tombstone answered 'failed' for a subscriber that had accepted
    "seed=831,routers=3,topology=random,drop=0.05,dup=0.0,reorder=0.0,partitions=0,partition_"
    "min=0.5,partition_max=1.0,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout="
    "2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,c"
    "hurn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettl"
    "ed_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,su"
    "rvivors=1.0,pub_survivors=-1.0,drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=0."
    "0,warm_min=0.5,warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # The checker took an adopted record (numbered anew) for a second record and expected
    # attempt 0 on its copies (fixed in the simulator: records are told apart by identity).
    "seed=631,routers=2,topology=full,drop=0.05,dup=0.0,reorder=0.5,partitions=0,partition_mi"
    "n=0.5,partition_max=7.5,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,messages=15,chu"
    "rn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=0.5,pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=0.0,"
    "warm_min=0.5,warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    "seed=654,routers=4,topology=star,drop=0.01,dup=0.02,reorder=0.0,partitions=1,partition_m"
    "in=0.5,partition_max=1.2,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=5,messages=15,ch"
    "urn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettle"
    "d_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,sur"
    "vivors=1.0,pub_survivors=-1.0,drop_client=1,notice=0.5,move_max=1.5,move_to=same,warm=1."
    "0,warm_min=0.5,warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    "seed=3355,routers=5,topology=random,drop=0.05,dup=0.02,reorder=0.5,partitions=0,partitio"
    "n_min=0.5,partition_max=4.5,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeou"
    "t=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=2,messages=15"
    ",churn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,preset"
    "tled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,"
    "survivors=0.8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm"
    "=1.0,warm_min=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    "seed=3573,routers=3,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=0,partition_mi"
    "n=0.5,partition_max=7.5,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,chu"
    "rn=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=1.0,pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=1.0,"
    "warm_min=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # A late copy from a message's previous origin (its publisher had resumed elsewhere) made
    # a second record at a destination (3552); a publisher back at its first router did not
    # resend what its parts owed where it had sent before, and a destination had dropped
    # that copy meanwhile (3318).
    # likewise (duplicate not asked for)
    "seed=3318,routers=3,topology=star,drop=0.0,dup=0.0,reorder=0.1,partitions=2,partition_mi"
    "n=0.5,partition_max=1.0,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=5,messages=15,chu"
    "rn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=0.8,pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.5,"
    "warm_min=0.5,warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # a duplicate after acceptance at a subscriber that never moved
    "seed=3552,routers=4,topology=star,drop=0.01,dup=0.0,reorder=0.5,partitions=2,partition_m"
    "in=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=3,messages=15,ch"
    "urn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettle"
    "d_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,surviv"
    "ors=1.0,pub_survivors=-1.0,drop_client=1,notice=2.0,move_max=1.5,move_to=any,warm=1.0,wa"
    "rm_min=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # out of order: _adopt renumbered a resumed publisher's orphan after its later settled one
    "seed=8001163,routers=4,topology=random,drop=0.0,dup=0.02,reorder=0.5,partitions=1,partitio"
    "n_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout="
    "3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=5,messages=15,chu"
    "rn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_s"
    "ubs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivor"
    "s=0.8,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.0,warm_m"
    "in=0.5,warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering; a moved subscriber got the later message first)
    "seed=8003319,routers=5,topology=ring,drop=0.05,dup=0.0,reorder=0.0,partitions=2,partition_"
    "min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=3."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=5,messages=15,churn"
    "=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=1.0"
    ",pub_survivors=-1.0,drop_client=2,notice=0.5,move_max=1.5,move_to=same,warm=0.5,warm_min=0"
    ".5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering)
    "seed=8004919,routers=5,topology=full,drop=0.0,dup=0.0,reorder=0.1,partitions=0,partition_m"
    "in=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=3,messages=15,churn="
    "1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0"
    ".5,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=1.0,warm_min"
    "=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering; _retarget to a subscriber's new router)
    "seed=8006328,routers=4,topology=star,drop=0.05,dup=0.0,reorder=0.5,partitions=1,partition_"
    "min=0.5,partition_max=1.2,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=2,messages=15,churn"
    "=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "0.8,pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min"
    "=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering at the publisher's second router)
    "seed=8008435,routers=4,topology=full,drop=0.0,dup=0.0,reorder=0.1,partitions=0,partition_m"
    "in=0.5,partition_max=1.2,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,messages=15,churn="
    "0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=1.0,"
    "pub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5"
    ",warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering)
    "seed=8009446,routers=5,topology=ring,drop=0.0,dup=0.02,reorder=0.1,partitions=1,partition_"
    "min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=4,messages=15,churn"
    "=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "0.5,pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min"
    "=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise (_adopt renumbering)
    "seed=8017194,routers=2,topology=ring,drop=0.05,dup=0.0,reorder=0.0,partitions=0,partition_"
    "min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,churn"
    "=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "1.0,pub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=same,warm=1.0,warm_mi"
    "n=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # _retarget skipped an orphan, resent its publisher's later settled one at once (_held)
    "seed=8003254,routers=3,topology=line,drop=0.01,dup=0.0,reorder=0.5,partitions=0,partition_"
    "min=0.5,partition_max=4.5,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=3."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=4,messages=15,churn"
    "=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "0.5,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min"
    "=0.5,warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # likewise (_retarget, _held)
    "seed=9001893,routers=4,topology=full,drop=0.0,dup=0.0,reorder=0.5,partitions=2,partition_m"
    "in=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=4,messages=15,churn="
    "0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1"
    ".0,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_min"
    "=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # held behind another publisher's orphan, overtaken by its own next one (_held per publisher)
    "seed=1549,routers=5,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=1,partition_min="
    "0.5,partition_max=4.5,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=3.0,go"
    "ssip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn=0.5"
    ",flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0."
    "05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.8,pub"
    "_survivors=0.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,war"
    "m_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # held parts of a subscriber that left for good were never answered (_release_held)
    "seed=110,routers=3,topology=star,drop=0.05,dup=0.0,reorder=0.0,partitions=1,partition_min="
    "0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5.0,go"
    "ssip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=5,messages=15,churn=1.0"
    ",flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0."
    "05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,"
    "pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5"
    ",warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # _retarget skipped orphans, publisher back after reconnect-timeout (checker order_at)
    "seed=8016073,routers=2,topology=full,drop=0.0,dup=0.0,reorder=0.1,partitions=0,partition_m"
    "in=0.5,partition_max=4.5,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=3.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=3,messages=15,churn="
    "1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_min=0."
    "5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # publisher back after reconnect-timeout, given-up resends after a pre-settled later one
    "seed=8000452,routers=4,topology=random,drop=0.01,dup=0.02,reorder=0.1,partitions=0,partiti"
    "on_min=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=0,restart_inc=higher,unre"
    "achable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=2"
    ",messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0"
    ".03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_att"
    "empts=3,survivors=1.0,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=sam"
    "e,warm=1.0,warm_min=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (resumed after reconnect-timeout; checker order_at)
    "seed=8005405,routers=4,topology=star,drop=0.05,dup=0.0,reorder=0.5,partitions=1,partition_"
    "min=0.5,partition_max=1.2,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn"
    "=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.5"
    ",pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0."
    "5,warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (resumed after reconnect-timeout; checker order_at)
    "seed=8008304,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.5,partitions=0,partition_m"
    "in=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=2.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,messages=15,churn="
    "1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1"
    ".0,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min="
    "0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (resumed after reconnect-timeout; checker order_at)
    "seed=8008479,routers=2,topology=line,drop=0.0,dup=0.0,reorder=0.1,partitions=1,partition_m"
    "in=0.5,partition_max=3.0,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=2.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=3,messages=15,churn="
    "0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0"
    ".8,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min="
    "0.5,warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise (resumed after reconnect-timeout; checker order_at)
    "seed=8014192,routers=3,topology=ring,drop=0.05,dup=0.0,reorder=0.1,partitions=0,partition_"
    "min=0.5,partition_max=3.0,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn"
    "=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "0.8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_mi"
    "n=0.5,warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # (OPEN_BUGS) likewise (_adopt renumbering: first deliveries out of order after moves)
    "seed=358,routers=4,topology=star,drop=0.0,dup=0.02,reorder=0.1,partitions=0,partition_mi"
    "n=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=4,messages=15,chu"
    "rn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=0.8,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.5,"
    "warm_min=0.5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a copy from the old origin's record, attributed to the publisher's new origin (checker)
    "seed=8001360,routers=4,topology=line,drop=0.05,dup=0.0,reorder=0.0,partitions=1,partition_"
    "min=0.5,partition_max=3.0,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=1,messages=15,churn"
    "=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "1.0,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.0,warm_min"
    "=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # A resend owed a subscriber that had left its destination: no stand-in failed it, the origin
    # waited for ever (failover.py _remote_resend now fails it, as engine.py _remote_message does).
    "seed=8012824,routers=4,topology=random,drop=0.05,dup=0.0,reorder=0.5,partitions=2,partitio"
    "n_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout="
    "5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=4,messages=15,chu"
    "rn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_s"
    "ubs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivor"
    "s=1.0,pub_survivors=-1.0,drop_client=0,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_m"
    "in=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise (a subscriber attached and left between the resend's send and its arrival)
    "seed=8012981,routers=3,topology=full,drop=0.05,dup=0.0,reorder=0.0,partitions=2,partition_"
    "min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn"
    "=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.8"
    ",pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0."
    "5,warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A publisher's old origin's resend, delayed, reached the router the publisher had resumed
    # at: it gave the record up to the old origin, which had yielded to it; each answered the
    # other, nobody the publisher (failover.py _reclaim: the record goes back to that publisher).
    "seed=8001712,routers=4,topology=line,drop=0.05,dup=0.0,reorder=0.0,partitions=1,partition_"
    "min=0.5,partition_max=1.2,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=2."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=4,messages=15,churn"
    "=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors="
    "0.5,pub_survivors=-1.0,drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=0.5,warm_min"
    "=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise, a resend from an old origin whose publisher link had died unnoticed (it then
    # restarted: failover.py _peer_lost reclaims it)
    "seed=8003582,routers=4,topology=full,drop=0.05,dup=0.02,reorder=0.0,partitions=0,partition"
    "_min=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=2"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=1,messages=15,chur"
    "n=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_su"
    "bs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors"
    "=0.8,pub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_mi"
    "n=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise, the old origin then forgot it without an outcome (engine.py _remote_forget)
    "seed=8007043,routers=4,topology=random,drop=0.01,dup=0.02,reorder=0.1,partitions=2,partiti"
    "on_min=0.5,partition_max=7.5,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout"
    "=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=2,messages=15,ch"
    "urn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_"
    "subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivo"
    "rs=1.0,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_"
    "min=0.5,warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # an adopted orphan of another origin never sent a moved subscriber's part (failover.py)
    "seed=12003272,routers=3,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=2,partition_m"
    "in=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=2.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,messages=15,churn=0."
    "0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0."
    "05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,p"
    "ub_survivors=-1.0,drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,w"
    "arm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # like 12003272 (failover.py _adopt_for_publisher)
    "seed=12009775,routers=4,topology=random,drop=0.0,dup=0.02,reorder=0.5,partitions=0,partitio"
    "n_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=3,messages=15,churn"
    "=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0."
    "8,pub_survivors=-1.0,drop_client=1,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0."
    "5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # like 12003272 (failover.py _adopt_for_publisher)
    "seed=14000573,routers=5,topology=line,drop=0.0,dup=0.02,reorder=0.0,partitions=0,partition_"
    "min=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=1,restart_inc=higher,unreacha"
    "ble_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=4,mess"
    "ages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,pr"
    "esettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,su"
    "rvivors=1.0,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,w"
    "arm_min=0.5,warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # an orphan's part for a moved subscriber stayed at router None, failed by nothing (_retarget)
    "seed=12006353,routers=2,topology=line,drop=0.05,dup=0.02,reorder=0.0,partitions=0,partition"
    "_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=3,messages=15,churn="
    "1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs="
    "0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.8,pu"
    "b_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=same,warm=0.0,warm_min=0.5,w"
    "arm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a stale retarget took a record from its publisher's origin (failover.py _remote_resend)
    "seed=12018241,routers=5,topology=star,drop=0.01,dup=0.0,reorder=0.5,partitions=1,partition_"
    "min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn=1"
    ".0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0"
    ".05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=1.0,pub"
    "_survivors=-1.0,drop_client=1,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,war"
    "m_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # like 12018241 (failover.py _remote_resend)
    "seed=14002691,routers=4,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=2,partition_m"
    "in=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=3.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,churn=0."
    "5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0."
    "05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.8,p"
    "ub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,w"
    "arm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # like 12018241: the publisher's newest origin never forgot (failover.py _remote_resend)
    "seed=14003861,routers=4,topology=full,drop=0.05,dup=0.0,reorder=0.1,partitions=0,partition_"
    "min=0.5,partition_max=4.5,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=3.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn=0"
    ".0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0"
    ".05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub"
    "_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,war"
    "m_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # like 12018241 (failover.py _remote_resend)
    "seed=14003917,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.0,partitions=0,partition_m"
    "in=0.5,partition_max=1.0,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=2.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=1,messages=15,churn=0."
    "0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs=0."
    "05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,p"
    "ub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,w"
    "arm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # a record a stale resend took was withdrawn when that one forgot it (engine.py _remote_forget)
    "seed=14001768,routers=5,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=0,partition_m"
    "in=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=2,restart_inc=higher,unreachab"
    "le_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=3,messa"
    "ges=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,pre"
    "settled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,sur"
    "vivors=0.8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,wa"
    "rm_min=0.5,warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # a record reclaimed from a stale resend was owed to a subscriber attached since (_reclaim)
    "seed=12008459,routers=5,topology=random,drop=0.05,dup=0.0,reorder=0.0,partitions=0,partitio"
    "n_min=0.5,partition_max=1.2,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=2"
    ".0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=1,messages=15,churn"
    "=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1."
    "0,pub_survivors=-1.0,drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0."
    "5,warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # A warm subscriber came back at A while B, the only path from A to C, was down: C failed
    # it at its timeout, which the checker took for a false claim (checker.py now leaves such
    # timing unchecked, as on a network with faults).
    "seed=8001231,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.0,partitions=0,partition_m"
    "in=0.5,partition_max=4.5,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=3.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=5,messages=15,churn="
    "1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs"
    "=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0"
    ".8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min="
    "0.5,warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A subscriber left the router the origin owed it at (moved, then left its new router
    # too) and the origin never heard where: its parts waited for ever (failover.py
    # _remote_subscriber_removed now gives it its timeout). Was OPEN_BUGS; since 06e1bcd
    # changed the draws this spec no longer meets the case: test_failover_engine.py
    # test_a_subscriber_that_left_its_router_for_somewhere_the_origin_never_hears_of does.
    "seed=430,routers=3,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=2,partition_min"
    "=0.5,partition_max=7.5,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout=5.0"
    ",gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,subscribers=3,messages=15,chur"
    "n=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_"
    "subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivor"
    "s=0.8,pub_survivors=-1.0,drop_client=1,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm"
    "_min=0.5,warm_max=1.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # like 8012824 (a fresh 9100000..9102999 sweep; failover.py _remote_resend)
    "seed=9102441,routers=4,topology=line,drop=0.0,dup=0.02,reorder=0.1,partitions=1,partition_"
    "min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=3."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=4,messages=15,churn"
    "=0.5,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled_sub"
    "s=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,max_attempts=3,survivors=0.8"
    ",pub_survivors=-1.0,drop_client=1,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0."
    "5,warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A decided orphan its publisher did not declare on reattaching at the same router
    # held a moved subscriber's older messages until its deadline, after the publisher's new
    # ones (engine.py _attach_publisher, failover.py _settled_by_declaration gives it up)
    "seed=8003533,routers=3,topology=star,drop=0.0,dup=0.02,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=4,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # likewise
    "seed=12006920,routers=5,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=3,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=8,max_attempts=3,survivors=0.5,pub_survivors=-1.0,drop_client=1,"
    "notice=0.0,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise (the orphans came from a stolen link)
    "seed=12009516,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=3,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=2,notice=0.5,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise
    "seed=9100656,routers=4,topology=star,drop=0.0,dup=0.02,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=2,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=same,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A resend for a subscriber whose copy had failed at its router (it left before the first
    # copy came) waited there for the record's verdict; the origin, still waiting, resent it
    # where the subscriber went next, after newer ones (failover.py _answer_done answers now)
    "seed=12010340,routers=4,topology=ring,drop=0.05,dup=0.02,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=4.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=3,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # likewise
    "seed=13000421,routers=2,topology=random,drop=0.0,dup=0.0,reorder=0.0,partitions=1,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,"
    "subscribers=5,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=2,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # A Forward sent for a subscriber's older attach at a router, held up by a partition,
    # overtook the origin's resends there after it left and came back (the MSG item now carries
    # the attach generation: engine.py _forward, failover.py _send_part, _not_reattached)
    "seed=8010805,routers=5,topology=ring,drop=0.01,dup=0.0,reorder=0.1,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,"
    "subscribers=4,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0",
    # likewise, a pre-settled message
    "seed=8018054,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=4.5,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=2,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0",
    # likewise, a message its publisher settled early (nothing resent)
    "seed=9102099,routers=3,topology=line,drop=0.05,dup=0.0,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,"
    "subscribers=2,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=0.5,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # A late copy, the origin's forget and the publisher's resend past reconnect-timeout came
    # in one batch: the simulator took the first copy for one from the second record (it
    # looked the record up when the actions were taken): sim/world.py notes it per Send
    "seed=2550,routers=3,topology=line,drop=0.0,dup=0.0,reorder=0.5,partitions=2,partition_mi"
    "n=0.5,partition_max=1.0,isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=5."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=2,messages=15,chu"
    "rn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=1.0,pub_survivors=-1.0,drop_client=1,notice=0.0,move_max=1.5,move_to=same,warm=1.0"
    ",warm_min=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0",
    # MQTT devices (router/sim/mqtt.py), model bugs found while it was written: a DISCONNECT
    # held behind a PUBLISH waiting for credit (the device never closed its socket), and a
    # held PUBLISH announced too late (the sim now closes after DISCONNECT, as MQTT says)
    "seed=173,routers=6,topology=line,drop=0.2,dup=0.02,reorder=0.1,partitions=1,partition_mi"
    "n=0.5,partition_max=4.5,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=3."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=1,subscribers=4,messages=15,chu"
    "rn=2.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=0.0,pub_survivors=-1.0,drop_client=0,notice=0.0,move_max=1.5,move_to=any,warm=0.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=30.0,resume_timeout=5.0,declare=1.0,mqtt=0.5"
    ",bare=0.0",
    # an UNSUBSCRIBE on its way while the origin still matched the subscription (the
    # device's side leaves at once, the router's when the UNSUBSCRIBE arrives)
    "seed=317,routers=5,topology=full,drop=0.05,dup=0.0,reorder=0.0,partitions=0,partition_mi"
    "n=0.5,partition_max=4.5,isolate=0.3,restarts=2,restart_inc=higher,unreachable_timeout=3."
    "0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,chu"
    "rn=2.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.5,early_settle=0.05,presettled=0.03,presettled"
    "_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,surv"
    "ivors=0.0,pub_survivors=-1.0,drop_client=0,notice=0.0,move_max=1.5,move_to=any,warm=0.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=30.0,resume_timeout=5.0,declare=1.0,mqtt=0.5"
    ",bare=0.0",
    # a copy from a router's second record after a late resend: a device without delivery
    # ids processes it again (at least once), one with them answers from its store
    "seed=696,routers=4,topology=full,drop=0.0,dup=0.0,reorder=0.5,partitions=0,partition_min"
    "=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=1,restart_inc=higher,unreacha"
    "ble_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=1,m"
    "essages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0"
    ".03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_a"
    "ttempts=3,survivors=0.8,pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to"
    "=same,warm=0.5,warm_min=0.5,warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declar"
    "e=1.0,mqtt=0.5,bare=0.0",
    # a copy the session kept in its backlog for a subscription then unsubscribed: the
    # device took the next PUBLISH of that message for it (now by packet id, session.out)
    "seed=1391,routers=4,topology=random,drop=0.01,dup=0.0,reorder=0.5,partitions=0,partition"
    "_min=0.5,partition_max=1.7999999999999998,isolate=0.3,restarts=1,restart_inc=higher,unre"
    "achable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers"
    "=4,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettl"
    "ed=0.0,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,ma"
    "x_attempts=3,survivors=1.0,pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move"
    "_to=any,warm=1.0,warm_min=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,decl"
    "are=1.0,mqtt=0.5,bare=0.0",
    # likewise
    "seed=1143,routers=4,topology=full,drop=0.05,dup=0.02,reorder=0.5,partitions=1,partition_"
    "min=0.5,partition_max=4.5,isolate=0.3,restarts=0,restart_inc=higher,unreachable_timeout="
    "3.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=5,messages=15,c"
    "hurn=2.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.5,early_settle=0.05,presettled=0.0,presettle"
    "d_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=4096,max_attempts=3,sur"
    "vivors=0.0,pub_survivors=-1.0,drop_client=0,notice=0.0,move_max=1.5,move_to=any,warm=0.0"
    ",warm_min=0.5,warm_max=5.0,reconnect_timeout=30.0,resume_timeout=5.0,declare=1.0,mqtt=0."
    "5,bare=0.0",
    # A warm subscriber stayed away past its timeout (C failed what it held, but the
    # verdicts were held up on C's channel to the origin), subscribed afresh at C, got newer
    # messages and moved to B: the origin resent B what the ended subscription was owed,
    # after the newer ones. SUBS entries carry the generation a subscription started afresh
    # at (failover.py _continued_since); the origin does not resend what an earlier one was
    # owed (_end_earlier).
    "seed=55720,routers=4,topology=full,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,"
    "subscribers=5,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,"
    "window=8,transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=0.0",
    # A slow SDK subscriber (one message at a time) stayed slow after the faults stopped,
    # behind what MQTT devices and others had published: not done within `drain`. The
    # simulator's SDK application is now slow only until draining, as over AMQP
    # (router/sim/sdk.py _sdk_slow).
    "seed=4243,routers=3,topology=full,drop=0.0,dup=0.0,reorder=0.1,partitions=0,part"
    "ition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,unreac"
    "hable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subsc"
    "ribers=4,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle"
    "=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=0.0,drop_client="
    "0,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=3.0,reconne"
    "ct_timeout=3.0,resume_timeout=5.0,declare=1.0,sdk=0.5,wire=0.0,mqtt=0.3,bare=0.5",
    # likewise
    "seed=12424,routers=2,topology=full,drop=0.0,dup=0.0,reorder=0.0,partitions=0,par"
    "tition_min=0.5,partition_max=1.2,isolate=0.3,restarts=0,restart_inc=higher,unrea"
    "chable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subs"
    "cribers=4,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settl"
    "e=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,window=8"
    ",transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,drop_clien"
    "t=0,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,recon"
    "nect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=0.5,wire=0.0,mqtt=0.3,bare=0"
    ".0",
    # A publisher moved from A to E with #11 (published at A) queued at C for a stalled
    # subscriber; E's resends of #3-#11 took C's record of #11 over, so the checker took
    # #11 for E's and the older resends behind it for out of order. That copy is A's
    # traffic (guarantees.md: old and new router are not ordered while both are in
    # flight): world.py NotingEngine.taken_over, checker.py on_send.
    # Later, with the same seed: a publisher's record at E, owed to app-A/sub2 at C, was
    # taken by a stale resend from A (its rebuilt record, from before the publisher moved
    # to E, owed only E's subscriber); E dropped its part at C. A forgot it accepted, and
    # E told its publisher that acceptance, which said nothing about sub2 (it had failed
    # at C). Fixed in
    # failover.py _released_answered / _owe_reclaimed: the record is reclaimed and asks C.
    "seed=17511,routers=5,topology=random,drop=0.05,dup=0.0,reorder=0.1,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,un"
    "reachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,publishers=3,s"
    "ubscribers=5,messages=15,churn=1.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_se"
    "ttle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,override=0.1,windo"
    "w=8,transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,drop_cl"
    "ient=4,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,warm_max=3.0,re"
    "connect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=0.5,wire=0.0,mqtt=0.3,bar"
    "e=0.5",
    # AMQP wire clients, rcv-settle-mode first: the edge settled a publisher's
    # delivery as it sent the outcome on a connection that had died unnoticed;
    # the record, still owed elsewhere and settled, was neither taken by the
    # publisher's declared resend at the same router nor answered: a second
    # record of the message, never completed. Fixed in failover.py
    # _resend_from_publisher (_unsettle: the resend takes the record).
    "seed=1327,routers=5,topology=full,drop=0.0,dup=0.0,reorder=0.0,"
    "partitions=2,partition_min=0.5,partition_max=1.7999999999999998,"
    "isolate=0.3,restarts=3,restart_inc=higher,unreachable_timeout=3.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=4,subscribers=4,"
    "messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.8,"
    "pub_survivors=-1.0,drop_client=2,notice=0.5,move_max=1.5,move_to=same,"
    "warm=0.5,warm_min=0.5,warm_max=5.0,reconnect_timeout=8.0,"
    "resume_timeout=5.0,declare=1.0,sdk=1.0,wire=1.0,mqtt=0.0,bare=0.0",
    # The same, caught by the checker's resend check (checker.py on_resend: a
    # record settled on the lost link is exact, as an orphan is).
    "seed=2318,routers=5,topology=star,drop=0.05,dup=0.0,reorder=0.1,"
    "partitions=1,partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,"
    "restart_inc=higher,unreachable_timeout=2.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=3,messages=15,churn=1.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.0",
    # The same with the publisher resumed at another router: the origin's
    # settled record was neither handed over nor answered, and waited for good.
    # Fixed in failover.py _remote_resend (_unsettle: it is adopted for the
    # resending origin).
    "seed=3123,routers=3,topology=full,drop=0.01,dup=0.02,reorder=0.5,"
    "partitions=2,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=2.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=4,messages=15,churn=1.0,"
    "flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=8,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.5",
    # The same as 2318 (rejected).
    "seed=3634,routers=3,topology=full,drop=0.0,dup=0.0,reorder=0.5,"
    "partitions=0,partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=5,messages=15,churn=1.0,"
    "flaky=0.3,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=same,warm=0.5,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.0",
    # The same as 2318, at the publisher's first router after a move.
    "seed=4102,routers=3,topology=full,drop=0.05,dup=0.0,reorder=0.5,"
    "partitions=1,partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,"
    "restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=4,subscribers=3,messages=15,churn=0.5,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=8,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.0",
    # The same at another router that held a destination's record of it: the
    # publisher's resend took that record, no resend reached the origin's
    # settled one, and its part there waited for good. Fixed in failover.py
    # _adopt_for_publisher (the old origin stays in `former`) and engine.py
    # _answer_former (it hears about the copies there).
    "seed=4456,routers=5,topology=star,drop=0.0,dup=0.02,reorder=0.5,"
    "partitions=0,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=2.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=5,messages=15,churn=0.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.0",
    # The same as 2318 with half of the SDK clients over AMQP.
    "seed=3998,routers=3,topology=star,drop=0.0,dup=0.02,reorder=0.1,"
    "partitions=0,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=3,messages=15,churn=1.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=same,warm=1.0,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=0.5,mqtt=0.0,bare=0.0",
    # B (origin; its publisher then resumed at A) forwarded #13-15 to sub4-D at D behind a
    # restarting hub; the publisher's resend from A reached D first and was delivered. B's
    # plain forward came late: D merged it into A's record but answered only A, so B's
    # part at D stayed PENDING for ever. Fixed in engine.py _remote_message: the late
    # copy's origin is answered too (_owed_beside), as for a resend beside a live record.
    "seed=15173,routers=5,topology=star,drop=0.05,dup=0.0,reorder=0.0,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=2,subscribers=4,messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,"
    "pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=0.0,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=8.0,resume_timeout=5.0,"
    "declare=1.0,sdk=1.0,wire=0.5,mqtt=0.0,bare=0.0",
    # B gave a message of app-B/pub3 up (its publisher stayed away past reconnect-timeout)
    # and forgot it accepted, leaving a tombstone at A. The publisher resent it at C, which
    # took it as a new message owed to app-C/sub5 too; A answered C's resend for its own
    # subscribers from the tombstone. C crashed; the publisher resent it at A, which told it
    # the tombstone's 'accepted' (the older record's, which never owed sub5). Fixed in
    # failover.py _remote_resend: a tombstone that answered another origin's resend keeps
    # who accepted here, not the outcome for the publisher.
    "seed=95188,routers=3,topology=star,drop=0.01,dup=0.0,reorder=0.0,"
    "partitions=0,partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=2.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=3,subscribers=5,messages=15,churn=1.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=0.8,pub_survivors=-1.0,"
    "drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,"
    "sdk=0.0,wire=1.0,mqtt=0.3,bare=0.0",
    # An AMQP publisher lost its link at B (its origin), came back 1.36 s later at A
    # (reconnect-timeout 1 s: B had given its orphans up), lost that connection before
    # any resend went out, and resent to B 0.95 s after that. The checker counted its
    # time away from the loss at A, not at B where the records waited: a checker bug
    # (router/sim/checker.py on_resend, World.lost_at_router), not the product's.
    "seed=41407,routers=4,topology=random,drop=0.0,dup=0.0,reorder=0.1,"
    "partitions=0,partition_min=0.5,partition_max=1.7999999999999998,isolate=0.3,"
    "restarts=2,restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=1,subscribers=3,messages=15,churn=0.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,"
    "max_attempts=3,survivors=1.0,pub_survivors=-1.0,drop_client=4,notice=0.0,"
    "move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=1.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=1.0,wire=1.0,"
    "mqtt=0.0,bare=0.0",
    # A publisher moved from B (its link there dead, unnoticed) to A, which took its
    # destination's record of each message (old origin B kept in `former`) and resent it
    # to B. A's word on its own copies to its former origin read at B as A answering B as
    # its origin: B reclaimed the message for its dead link and resent it to A, which
    # gave it up to B; sorted out only after B restarted, the messages went to sub8-B
    # after a later one. Fixed in engine.py _answer_former (not to an origin we resent to).
    "seed=38481,routers=3,topology=random,drop=0.01,dup=0.0,reorder=0.5,"
    "partitions=0,partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,"
    "restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,"
    "drain=60.0,publishers=4,subscribers=5,messages=15,churn=0.0,flaky=0.0,"
    "slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=4,notice=2.0,move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=1.0,mqtt=0.0,bare=0.5",
    # Not a product bug: app-C/sub3 got #13-#15 from E's record queued from C, the
    # publisher's old router, then #11 from a record B's resend made beside it (its
    # publisher came back after reconnect-timeout): two live records of #13 at E, and the
    # checker took the copy for one from the newest (`find`), B's, so both seemed B's
    # traffic. Fixed in the simulator: world.py NotingEngine.sent_record notes the record
    # the copy is in, and checker.py on_send looks at that one.
    "seed=86546,routers=5,topology=line,drop=0.01,dup=0.0,reorder=0.5,"
    "partitions=0,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,"
    "drain=60.0,publishers=3,subscribers=3,messages=15,churn=0.5,flaky=0.0,"
    "slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,"
    "max_attempts=3,survivors=0.5,pub_survivors=-1.0,drop_client=4,notice=2.0,"
    "move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=5.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=1.0,wire=0.0,"
    "mqtt=0.0,bare=0.5",
    # A publisher's connection to B died unnoticed and it resumed at A, whose
    # destination record its resend took (the old origin B stays in `former`); A's
    # resend to B made B release its record to A. A's `_answer_former` verdict to B
    # then read as A yielding (engine.py _peer_verdict): B took the record back for its
    # dead link, orphaned it and never answered A for its subscriber. Fixed in
    # failover.py _reached: a former origin a resend reaches hears no more verdicts.
    "seed=84294,routers=2,topology=star,drop=0.01,dup=0.0,reorder=0.1,"
    "partitions=1,partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=0,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=3,subscribers=3,messages=15,churn=0.0,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=1,notice=2.0,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,"
    "warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=1.0,"
    "wire=0.0,mqtt=0.0,bare=0.5",
    # The same the other way round: the publisher (wire AMQP) moved from A to B, and
    # B's verdict for its own subscriber made A orphan its record (3 routers).
    "seed=89914,routers=3,topology=star,drop=0.0,dup=0.0,reorder=0.0,"
    "partitions=2,partition_min=0.5,partition_max=4.5,isolate=0.3,restarts=0,"
    "restart_inc=higher,unreachable_timeout=3.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=2,subscribers=2,messages=15,churn=0.5,"
    "flaky=0.0,slow=0.2,stall=0.1,ttl=0.0,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=0.5,warm_min=0.5,"
    "warm_max=5.0,reconnect_timeout=3.0,resume_timeout=5.0,declare=1.0,sdk=0.5,"
    "wire=0.5,mqtt=0.3,bare=0.0",
    # pub5 resent at B, then moved to A (B missed its dropped connection) and resent
    # there: A took the record it held for B, resent it to B, which yielded its own. A's
    # verdict on its local copy, told to B as a former origin, made B reclaim the record
    # (as if A's resend were stale), and A yielded it back; B's dead link's record was
    # given up with its copy in flight at MQTT device mq4, and A resent it after newer
    # messages: out of order, and a second copy under a new packet id. Fixed in
    # engine.py _peer_verdict: a verdict flagged `former` never reclaims.
    "seed=93498,routers=3,topology=star,drop=0.0,dup=0.02,reorder=0.5,"
    "partitions=0,partition_min=0.5,partition_max=1.7999999999999998,"
    "isolate=0.3,restarts=1,restart_inc=higher,unreachable_timeout=3.0,"
    "gossip_interval=0.5,duration=6.0,drain=60.0,publishers=2,subscribers=3,"
    "messages=15,churn=1.0,flaky=0.0,slow=0.2,stall=0.1,ttl=0.1,"
    "early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,"
    "pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,"
    "warm=0.0,warm_min=0.5,warm_max=5.0,reconnect_timeout=3.0,"
    "resume_timeout=5.0,declare=1.0,sdk=0.0,wire=0.5,mqtt=0.3,bare=0.5",
    # A publisher moved from E (its link dead, E had not noticed) to B and resent there;
    # E released its records to B's resend. E's earlier plain forward reached B late, and
    # B answered it beside its live record (the 15173 fix) with an unmarked verdict, which
    # E read as B yielding to it: it took the records back for its dead link, gave them up
    # at its timeout, and B resent them to E after newer messages. Fixed in failover.py
    # _owed_beside: a verdict to an origin other than the record's own is marked former.
    "seed=44651,routers=5,topology=random,drop=0.05,dup=0.02,reorder=0.0,"
    "partitions=0,partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=0,"
    "restart_inc=higher,unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,"
    "drain=60.0,publishers=2,subscribers=4,messages=15,churn=0.5,flaky=0.0,"
    "slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,transfer_window=8,"
    "max_attempts=3,survivors=1.0,pub_survivors=-1.0,drop_client=4,notice=2.0,"
    "move_max=1.5,move_to=any,warm=0.0,warm_min=0.5,warm_max=3.0,"
    "reconnect_timeout=1.0,resume_timeout=5.0,declare=1.0,sdk=0.5,wire=0.5,"
    "mqtt=0.0,bare=0.0",
    # Relay workload (a relay store in every router): a released record (its window place
    # given back on stored copies) that a publisher's resend adopted was counted in the
    # new link's window again and never given back: 'publisher still holds 2 records'.
    # A released record now counts in no window, on every path (failover.py _uncounted).
    "seed=472,routers=5,topology=full,drop=0.0,dup=0.02,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=3,subscribers=3,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,"
    "ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=same,"
    "warm=1.0,warm_min=0.5,warm_max=3.0,reconnect_timeout=1.0,resume_timeout=5.0,"
    "declare=1.0,sdk=0.0,wire=0.0,mqtt=0.0,bare=0.0,relay=1",
    # Relay workload: a publisher resent released records after its link dropped; each
    # resend took a unit of credit that no forget gave back (they count in no window), and
    # it never got the credit to resend the rest ('never got an outcome'). The adoption of a
    # released record now refills the publisher (failover.py _adopt_for_publisher).
    "seed=5146,routers=5,topology=full,drop=0.0,dup=0.0,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=4,subscribers=4,messages=15,churn=0.0,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,"
    "pub_survivors=-1.0,drop_client=2,notice=2.0,move_max=1.5,move_to=same,"
    "warm=1.0,warm_min=0.5,warm_max=8.0,reconnect_timeout=3.0,resume_timeout=5.0,"
    "declare=1.0,sdk=1.0,wire=0.5,mqtt=0.0,bare=0.0,relay=1",
    # Relay workload: a warm subscriber's expiry failed many records at once, and their
    # outcomes reached a wire publisher as more bytes than proton's input buffer takes
    # at once; the simulator pushed them in one piece and called that a violation. It
    # now pushes what fits, lets proton handle it, then the rest, as a socket read does.
    "seed=1889,routers=3,topology=star,drop=0.0,dup=0.02,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=3,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=4,subscribers=5,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.8,"
    "pub_survivors=-1.0,drop_client=4,notice=0.0,move_max=1.5,move_to=any,warm=1.0,"
    "warm_min=0.5,warm_max=3.0,reconnect_timeout=8.0,resume_timeout=5.0,"
    "declare=1.0,sdk=0.5,wire=1.0,mqtt=0.0,bare=0.0,relay=1",
    # Relay workload: a publisher came back after reconnect-timeout, its origin had given
    # the message up (the destination withdrew a copy its subscriber then accepted), and
    # the resend, a new publication, failed naming that subscriber, which had left. The
    # checker called that wrong; for a late resend it is the documented limit (Msg.late).
    "seed=5891,routers=4,topology=star,drop=0.0,dup=0.0,reorder=0.5,partitions=0,"
    "partition_min=0.5,partition_max=3.0,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=5.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=4,subscribers=4,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.1,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.8,"
    "pub_survivors=-1.0,drop_client=4,notice=0.5,move_max=1.5,move_to=same,"
    "warm=1.0,warm_min=0.5,warm_max=8.0,reconnect_timeout=1.0,resume_timeout=5.0,"
    "declare=1.0,sdk=1.0,wire=0.0,mqtt=0.0,bare=0.0,relay=1",
    # Relay workload: proton reported a publisher's delivery again after its outcome (a
    # later disposition carried `received` for its neighbours); the SDK took the outcome
    # twice. Its drivers now ignore a delivery that has its outcome (`decided`).
    "seed=751,routers=2,topology=line,drop=0.0,dup=0.02,reorder=0.5,partitions=1,"
    "partition_min=0.5,partition_max=1.0,isolate=0.3,restarts=2,restart_inc=higher,"
    "unreachable_timeout=3.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=3,subscribers=4,messages=15,churn=0.5,flaky=0.0,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=0.5,"
    "pub_survivors=-1.0,drop_client=2,notice=0.0,move_max=1.5,move_to=same,"
    "warm=1.0,warm_min=0.5,warm_max=8.0,reconnect_timeout=1.0,resume_timeout=5.0,"
    "declare=1.0,sdk=0.5,wire=1.0,mqtt=0.0,bare=0.0,relay=1",
    # Relay workload: a further copy of a released record was stored with the record's
    # empty in-memory body, overwriting the stored one; its redelivery was empty. A hold
    # of a released record now takes the body from the store.
    "seed=731,routers=2,topology=line,drop=0.01,dup=0.02,reorder=0.5,partitions=2,"
    "partition_min=0.5,partition_max=1.2,isolate=0.3,restarts=1,restart_inc=higher,"
    "unreachable_timeout=2.0,gossip_interval=0.5,duration=6.0,drain=60.0,"
    "publishers=3,subscribers=5,messages=15,churn=0.0,flaky=0.3,slow=0.2,stall=0.1,"
    "ttl=0.0,early_settle=0.05,presettled=0.03,presettled_subs=0.05,some_mode=0.25,"
    "override=0.1,window=8,transfer_window=4096,max_attempts=3,survivors=1.0,"
    "pub_survivors=0.0,drop_client=2,notice=2.0,move_max=1.5,move_to=any,warm=0.5,"
    "warm_min=0.5,warm_max=5.0,reconnect_timeout=1.0,resume_timeout=5.0,"
    "declare=1.0,sdk=0.5,wire=1.0,mqtt=0.0,bare=0.0,relay=1",
]


@pytest.mark.parametrize("spec", REGRESSIONS, ids=lambda s: s.split(",")[0])
def test_regression_seeds(spec: str) -> None:
    run(Params.parse(spec))


# ------------------------------------------------------------------------ fixed scenarios

QUIET = dict(drop=0.0, dup=0.0, reorder=0.0, partitions=0, publishers=0, subscribers=0,
             churn=0.0, flaky=0.0, slow=0.0, stall=0.0, ttl=0.0, early_settle=0.0,
             presettled=0.0, presettled_subs=0.0, override=0.0)


def scripted(params: Params, subs: list[tuple[str, str]], pubs: list[tuple[str, str]],
             *, pubs_at: float = 1.5, rate: float = 0.03) -> World:
    """A world with well-behaved subscribers attached at 0.1 s and publishers at `pubs_at`."""
    world = World(params)
    for router, topic_filter in subs:
        world.at(0.1, world.attach_subscriber, router, topic_filter, True)
    for router, topic in pubs:
        world.at(pubs_at, world.attach_publisher, router, topic, ALL, rate)
    return world


def all_subs(world: World) -> dict[str, object]:
    return {s.key: s for s in world.subscribers()}


def test_sanity_without_faults_everything_is_accepted_by_everyone() -> None:
    p = Params(seed=11, routers=4, topology="ring", messages=25, **QUIET)
    world = scripted(p, [(r, "a/#") for r in "ABCD"] + [("B", "+/b")], [("A", "a/b"),
                                                                         ("C", "a/b")])
    world.run()
    msgs = list(world.checker.msgs.values())
    assert len(msgs) == 50
    everyone = set(all_subs(world))
    for msg in msgs:
        assert set(msg.owed) == everyone, f"{msg.id} owed only {sorted(msg.owed)}"
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
    for sub in world.subscribers():
        assert sorted(sub.processed) == sorted(m.id for m in msgs)
        assert all(n == 1 for n in sub.processed.values())
    assert world.checker.stats.redeliveries == 0


def test_wire_clients_without_faults_everything_is_accepted_by_everyone() -> None:
    """The sanity run with every client an SDK client over AMQP (router/sim/amqp.py): each
    message accepted by every subscriber exactly once, each outcome received by its
    publisher's core, and nothing left anywhere once drained."""
    p = Params(seed=11, routers=4, topology="ring", messages=25, sdk=1.0, wire=1.0, **QUIET)
    world = scripted(p, [(r, "a/#") for r in "ABCD"] + [("B", "+/b")], [("A", "a/b"),
                                                                         ("C", "a/b")])
    world.run()
    assert all(c.wire is not None for c in world.all_clients)
    msgs = list(world.checker.msgs.values())
    assert len(msgs) == 50
    everyone = set(all_subs(world))
    for msg in msgs:
        assert set(msg.owed) == everyone, f"{msg.id} owed only {sorted(msg.owed)}"
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
    for sub in world.subscribers():
        assert sorted(sub.processed) == sorted(m.id for m in msgs)
        assert all(n == 1 for n in sub.processed.values())
        assert sub.sdk.core.counts["accepted"] == 50 and not sub.sdk.core.queued
    for pub in world.publishers():
        assert pub.wire.got == {str(n).encode(): "accepted" for n in range(1, 26)}
        assert pub.sdk.core.outstanding == 0 and pub.sdk.core.counts["resent"] == 0
    assert world.checker.stats.redeliveries == 0 and world.amqp.counts["connections"] == 7
    assert world.finished_at is not None


@pytest.mark.parametrize("seed", [3, 17, 29])
def test_heavy_drop_duplication_and_reordering(seed: int) -> None:
    p = Params(seed=seed, routers=5, topology="random", drop=0.3, dup=0.3, reorder=0.7,
               publishers=3, subscribers=5, churn=1.0, messages=20, flaky=0.3, ttl=0.1)
    world = run(p)
    assert world.counts["dropped"] > 50 and world.counts["duplicated"] > 50
    assert world.checker.stats.accepted > 0


def test_partition_healed_within_the_timeout_loses_and_duplicates_nothing() -> None:
    p = Params(seed=5, routers=3, topology="line", unreachable_timeout=5.0, duration=16.0,
               messages=60, **QUIET)
    world = scripted(p, [("A", "a/#"), ("B", "#"), ("C", "a/+")], [("A", "a/b"),
                                                                   ("C", "a/c")])
    world.cut_link("B", "C", at=2.0, length=2.5)  # C alone for 2.5 s
    world.isolate("B", at=6.0, length=3.0)  # then B cut off from both for 3 s
    world.run()
    msgs = list(world.checker.msgs.values())
    assert len(msgs) == 120
    everyone = set(all_subs(world))
    for msg in msgs:
        assert set(msg.owed) == everyone
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
        for sub in msg.owed.values():
            assert sub.processed.get(msg.id) == 1  # exactly once


def test_partition_longer_than_the_timeout_fails_and_names_the_unreachable() -> None:
    timeout = 2.0
    cut_at, length = 2.0, 3.5 * timeout
    p = Params(seed=9, routers=3, topology="line", unreachable_timeout=timeout, duration=14.0,
               messages=200, **QUIET)
    world = scripted(p, [("A", "a/#"), ("C", "a/#")], [("A", "a/b")])
    world.cut_link("B", "C", at=cut_at, length=length)
    world.run()
    healed = cut_at + length
    c_sub = next(s for s in world.subscribers() if s.router.id == "C")
    failed = 0
    for msg in world.checker.msgs.values():
        assert msg.outcome is not None
        if cut_at + DOWN_DETECT < msg.published_at < healed - 0.5:
            # owed to C, which stayed out of reach: delivery-failed naming C's subscriber,
            # within the timeout (plus noticing the cut) of the later of publish and cut
            assert c_sub.key in msg.owed
            assert isinstance(msg.outcome, Rejected), f"{msg.id} published "\
                f"t={msg.published_at:.2f} while C was cut off: {msg.outcome}"
            assert msg.outcome.condition == DELIVERY_FAILED
            assert c_sub.label in msg.outcome.info["failed"]
            waited = msg.decided_at - max(msg.published_at, cut_at)
            assert waited <= timeout + DOWN_DETECT + 0.5, (
                f"{msg.id} published t={msg.published_at:.2f} decided only at "
                f"t={msg.decided_at:.2f}")
            failed += 1
        elif msg.published_at > healed + 1.0:
            assert isinstance(msg.outcome, Accepted), f"{msg.id} after healing: {msg.outcome}"
    assert failed > 10


def test_a_restarted_router_is_heard_again() -> None:
    """C crashes and comes back; a subscriber attaches there afterwards and must get what is
    published then. mesh/runtime.py takes the incarnation from the clock (microseconds), so a
    restart always comes back with a higher one: once it drew a random one, and a restart
    with a lower number was ignored by every other router (found by this test)."""
    p = Params(seed=21, routers=3, topology="line", duration=10.0, messages=300, **QUIET)
    world = scripted(p, [("A", "a/#")], [("A", "a/b")])
    old = world.routers["C"].inc
    world.at(2.0, world.crash, "C", 0.5, old + 1)
    world.at(3.5, world.attach_subscriber, "C", "a/#", True)
    world.run()
    new_sub = next(s for s in world.subscribers() if s.router.id == "C")
    later = [m for m in world.checker.msgs.values() if m.published_at > 5.0]
    assert later
    for msg in later:
        assert new_sub.key in msg.owed, (
            f"{msg.id} published t={msg.published_at:.2f} is not owed to {new_sub.label}, "
            "attached at the restarted router 1.5 s before")
        assert isinstance(msg.outcome, Accepted) and new_sub.processed.get(msg.id) == 1


def test_same_seed_same_run() -> None:
    p = Params(seed=123, routers=4, topology="random", drop=0.1, dup=0.1, reorder=0.3,
               partitions=2, churn=1.0, flaky=0.5, ttl=0.2)
    a, b = World(p).run(), World(p).run()
    assert list(a.trace) == list(b.trace)
    assert a.summary() == b.summary()


# ------------------------------------------------------------------------ failover scenarios


def _attach_warm_mover(world: World, subs: list, move_delay: float) -> None:
    """A warm subscriber (timeout 5 s) at C on `a/#` that, once its connection is lost,
    attaches again at B after `move_delay`; appended to `subs`."""
    sub = world.attach_subscriber("C", "a/#", True, survivor=True, warm=5.0)
    sub.move_delay, sub.move_router = move_delay, "B"
    subs.append(sub)


def test_a_warm_subscriber_whose_router_crashed_gets_what_it_missed_in_order_elsewhere() -> None:
    """C crashes under a warm subscriber; it attaches again at B 1 s later (C is back after
    0.5 s): what it was owed before the crash and what was published while it was away come
    to B, before anything newer, and every message is accepted by both subscribers once."""
    p = Params(seed=31, routers=3, topology="line", duration=10.0, messages=1000, **QUIET)
    world = World(p)
    subs: list = []
    world.at(0.1, world.attach_subscriber, "A", "a/#", True)
    world.at(0.1, _attach_warm_mover, world, subs, 1.0)
    world.at(1.0, world.attach_publisher, "A", "a/b", ALL, 0.03)
    world.at(3.0, world.crash, "C", 0.5)
    world.run()
    warm = subs[0]
    assert warm.history == ["C", "B"] and not warm.strict
    msgs = list(world.checker.msgs.values())
    missed = [m for m in msgs if 3.0 <= m.published_at <= 4.0]
    assert len(msgs) > 100 and missed
    for msg in msgs:
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
        assert warm.processed.get(msg.id) == 1
    # first deliveries in publish order across the move: the checker asserts it as they come


def test_a_warm_subscriber_that_stays_away_fails_by_name_after_its_timeout() -> None:
    """A warm subscriber dies with its router and never comes back: what it was owed fails,
    naming it, about its timeout after the others hear of the restart; later messages are
    not owed to it any more."""
    timeout, crash_at, downtime = 1.0, 2.0, 0.5
    p = Params(seed=32, routers=3, topology="line", duration=8.0, messages=400,
               reconnect_timeout=2.0, **QUIET)
    world = World(p)
    subs: list = []
    world.at(0.1, world.attach_subscriber, "A", "a/#", True)
    world.at(0.1, lambda: subs.append(world.attach_subscriber("C", "a/#", True, False, timeout)))
    world.at(1.0, world.attach_publisher, "A", "a/b", ALL, 0.02)
    world.at(crash_at, world.crash, "C", downtime)
    world.run()
    gone = subs[0]
    back = crash_at + downtime  # when A hears of the restart (and its timeout starts)
    failed = 0
    for msg in world.checker.msgs.values():
        if crash_at + 0.01 < msg.published_at < back + timeout - 0.05:
            assert isinstance(msg.outcome, Rejected), f"{msg.id} t={msg.published_at:.2f}"
            assert msg.outcome.condition == DELIVERY_FAILED
            label = f"{gone.key}@C"
            assert label in msg.outcome.info["failed"], msg.outcome
            assert "did not reattach within 1 s" in msg.outcome.info["reasons"][label]
            assert msg.decided_at <= back + timeout + 0.1, f"decided t={msg.decided_at:.2f}"
            failed += 1
        elif msg.published_at > back + timeout + 0.1:
            assert gone.key not in msg.owed
            assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
    assert failed >= p.window  # the publisher's window fills with them, then it waits


@pytest.mark.parametrize("wire", [0.0, 1.0], ids=["engine", "amqp"])
def test_a_publisher_that_lost_its_connection_resends_and_nothing_is_delivered_twice(
        wire: float) -> None:
    """A publisher's connection drops with deliveries in flight (slow subscribers): it
    attaches again at the same router and resends them; the router's records answer for
    them, so no subscriber gets a copy twice and every one gets an outcome. `amqp`: every
    client an SDK client over AMQP (router/sim/amqp.py)."""
    p = Params(seed=33, routers=3, topology="line", duration=8.0, messages=150, sdk=wire,
               wire=wire, **dict(QUIET, slow=1.0))  # type: ignore[arg-type]
    world = World(p)
    pubs: list = []

    def attach_pub() -> None:
        pub = world.attach_publisher("A", "a/b", ALL, 0.02, survivor=True)
        pub.move_delay, pub.move_router = 0.4, "A"
        pubs.append(pub)

    world.at(0.1, world.attach_subscriber, "A", "a/#")
    world.at(0.1, world.attach_subscriber, "C", "a/#")
    world.at(1.0, attach_pub)
    world.at(2.5, lambda: world.drop_connection(pubs[0], notice=0.0))
    world.run()
    assert world.moves["resent"] > 0 and world.checker.stats.raw_duplicates == 0
    for msg in world.checker.msgs.values():
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
        for sub in world.subscribers():
            assert sub.processed.get(msg.id) == 1 and sub.copies[msg.id] == 1


@pytest.mark.parametrize("wire", [0.0, 1.0], ids=["engine", "amqp"])
@pytest.mark.parametrize("notice", [0.0, 2.0])
def test_a_subscriber_that_moves_after_its_connection_dropped_misses_nothing(
        notice: float, wire: float) -> None:
    """A warm subscriber's connection to C drops; it attaches again at B. With `notice`, C
    notices the dead connection only later: the newer attach wins and C closes the old link
    (amqp:link:stolen) when it hears of it. `amqp`: every client an SDK client over AMQP
    (router/sim/amqp.py): C's AmqpConnection closes the old link, then `closed()`."""
    p = Params(seed=34, routers=3, topology="line", duration=8.0, messages=300, sdk=wire,
               wire=wire, **QUIET)
    world = World(p)
    subs: list = []
    world.at(0.1, world.attach_subscriber, "A", "a/#", True)
    world.at(0.1, _attach_warm_mover, world, subs, 0.3)
    world.at(1.0, world.attach_publisher, "A", "a/b", ALL, 0.02)
    world.at(2.5, lambda: world.drop_connection(subs[0], notice=notice))
    world.run()
    moved = subs[0]
    assert moved.history == ["C", "B"]
    if notice:
        assert world.moves["stolen"] == 1
    for msg in world.checker.msgs.values():
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
        assert moved.processed.get(msg.id) == 1


# ------------------------------------------------------------------------ MQTT devices

# MQTT 5 devices through the real MQTT session (router/sim/mqtt.py), in the failover workload
# (`Params.mqtt_from_seed`). The MQTT runs found bugs in the MQTT edge that are open (each
# entry says which, and an xfail test below shows it): the CI runs leave those parts out
# until they are fixed, then the entry and the xfail mark go. EXACTMESH_SIM_ALL_FAULTS=1
# keeps everything in.
MQTT_OPEN_BUGS_OFF: dict[str, object] = {
    # Empty: the two MQTT edge bugs the workload found (a pre-settled copy stalling a QoS 1
    # subscription; a message without `to` published to the filter) are fixed, each with a
    # test below.
}


def mqtt_params(seed: int) -> Params:
    """The MQTT workload for `seed` (Params.mqtt_from_seed), minus MQTT_OPEN_BUGS_OFF."""
    params = Params.mqtt_from_seed(seed)
    return params if ALL_FAULTS else dataclasses.replace(params, **MQTT_OPEN_BUGS_OFF)


def test_mqtt_simulations() -> None:
    """EXACTMESH_SIM_MQTT (default 150) seeds of the MQTT workload from EXACTMESH_SIM_MQTT_FROM
    (default 0): MQTT devices among AMQP clients (some of them survivors), crashes, dropped
    connections, partitions, a faulty network; all failures at once."""
    start = int(os.environ.get("EXACTMESH_SIM_MQTT_FROM", "0"))
    count = int(os.environ.get("EXACTMESH_SIM_MQTT", "150"))
    failures = []
    devices = 0
    for seed in range(start, start + count):
        try:
            world = run(mqtt_params(seed))
            devices += len(world.mqtt.devices)
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
    assert not failures, f"{len(failures)} of {count} seeds failed:\n" + "\n".join(failures)
    assert devices > count  # the workload does attach devices


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="set EXACTMESH_LONG=1 for the long run")
def test_long_mqtt_seed_sweep() -> None:
    """MQTT seeds START.. START+N (EXACTMESH_SIM_MQTT_START / _SEEDS); all failures at once."""
    assert_sweep_clean(mqtt_params, "MQTT", 5000)


def mqtt_world(params: Params) -> World:
    """A world for a scripted MQTT scenario: `params` with `mqtt` on (the AMQP publishers send
    AMQP messages, which the MQTT edge decodes for devices) and nobody attached at random."""
    return World(dataclasses.replace(params, mqtt=1.0, publishers=0, subscribers=0, churn=0.0))


def test_mqtt_and_amqp_clients_together_without_faults_exactly_once() -> None:
    """MQTT publisher and subscriber devices (one subscribing to two filters, sharing its
    window of 2) and AMQP clients on three routers, no faults: every message, whoever
    published it, reaches every subscriber owed it exactly once, in order, is accepted, and
    every MQTT publisher gets a PUBACK for each; then everything drains."""
    p = Params(seed=41, routers=3, topology="line", messages=25, **QUIET)
    world = mqtt_world(p)
    for router in "ABC":
        world.at(0.1, world.attach_subscriber, router, "a/#", True)
    world.at(0.1, world.mqtt.attach_subscriber, "A", ("a/b",), True, True, 3)
    world.at(0.1, world.mqtt.attach_subscriber, "C", ("a/#", "+/b"), True, False, 2)
    world.at(0.1, world.mqtt.attach_subscriber, "B", ("#",), True, False, 1)
    world.at(1.0, world.attach_publisher, "A", "a/b", ALL, 0.03)
    world.at(1.0, world.attach_publisher, "C", "a/b", ALL, 0.03)
    world.at(1.0, world.mqtt.attach_publisher, "B", "a/b", 0.03)
    world.at(1.0, world.mqtt.attach_publisher, "C", "a/b", 0.03)
    world.run()
    assert world.finished_at is not None
    msgs = list(world.checker.msgs.values())
    assert len(msgs) == 100
    assert sum(1 for m in msgs if m.pub.mqtt) == 50
    everyone = set(all_subs(world))
    assert sum(1 for s in world.subscribers() if s.mqtt) == 4
    for msg in msgs:
        assert set(msg.owed) == everyone, f"{msg.id} owed only {sorted(msg.owed)}"
        assert isinstance(msg.outcome, Accepted), f"{msg.id}: {msg.outcome}"
    for sub in world.subscribers():
        assert sorted(sub.processed) == sorted(m.id for m in msgs), sub.label
        assert all(n == 1 for n in sub.processed.values())
    for dev in world.mqtt.devices:
        assert not dev.in_flight and not dev.held and not dev.expected, dev.client_id
        if dev.role == "pub":
            assert dev.sent == 25
    assert world.checker.stats.redeliveries == 0 and world.mqtt.duplicates == 0


def test_an_mqtt_subscriber_whose_connection_drops_is_named_in_the_failures() -> None:
    """A subscriber device's connection drops; its router notices only 1 s later and closes
    the session: what it was owed then fails naming the subscription, and the publisher
    device is told so in PUBACK 0x80 with the engine's description as reason string (the
    device model checks it); the AMQP subscriber still gets everything once."""
    p = Params(seed=42, routers=3, topology="line", duration=6.0, messages=200, **QUIET)
    world = mqtt_world(p)
    subs: list = []
    world.at(0.1, world.attach_subscriber, "A", "a/#", True)
    world.at(0.1, lambda: subs.extend(world.mqtt.attach_subscriber("C", ("a/#",), True)))
    world.at(1.0, world.mqtt.attach_publisher, "A", "a/b", 0.02)
    world.at(2.0, lambda: world.drop_connection(subs[0], notice=1.0))
    world.run()
    gone = subs[0]
    label = f"{gone.key}@C"
    failed = 0
    for msg in world.checker.msgs.values():
        assert msg.outcome is not None
        if isinstance(msg.outcome, Rejected):
            assert 1.9 < msg.published_at < 3.1, f"{msg.id} t={msg.published_at:.2f}"
            assert msg.outcome.info["failed"] == [label], msg.outcome
            failed += 1
        elif msg.published_at > 3.1:
            assert gone.key not in msg.owed
    assert failed > 0
    assert all(s.processed.get(m.id) == 1 for s in world.subscribers() if not s.mqtt
               for m in world.checker.msgs.values())
    assert not next(d for d in world.mqtt.devices if d.role == "pub").in_flight


def test_mqtt_devices_die_with_their_router() -> None:
    """The router of a publisher and a subscriber device crashes: both are gone for good (no
    MQTT survivors yet); what was owed to the subscription fails naming it, and the rest of
    the mesh drains."""
    p = Params(seed=43, routers=3, topology="line", duration=6.0, messages=200,
               reconnect_timeout=2.0, **QUIET)
    world = mqtt_world(p)
    world.at(0.1, world.attach_subscriber, "A", "a/#", True)
    world.at(0.1, world.mqtt.attach_subscriber, "C", ("a/#",), True)
    world.at(1.0, world.mqtt.attach_publisher, "A", "a/b", 0.02)
    world.at(1.0, world.mqtt.attach_publisher, "C", "a/c", 0.02)
    world.at(2.0, world.crash, "C", 0.5)
    world.run()
    assert world.finished_at is not None
    for dev in world.mqtt.devices:
        if dev.router.id == "C":
            assert all(c.gone and c.detached for c in dev.clients)
    c_sub = next(s for s in world.subscribers() if s.mqtt)
    assert any(isinstance(m.outcome, Rejected) and f"{c_sub.key}@C" in m.outcome.info["failed"]
               for m in world.checker.msgs.values())


def _presettled_burst(world: World, pubs: list) -> None:
    """Pre-settled, then unsettled, then pre-settled again, then unsettled messages from an
    AMQP publisher, 0.5 s apart."""
    pub = pubs[0]
    for i, presettled in enumerate([True, False, True, False, False]):
        world.at(world.now + 0.5 * (i + 1), lambda ps=presettled: world.publish(pub, presettled=ps))


def test_a_presettled_copy_does_not_stall_a_qos1_subscription() -> None:
    """A QoS 1 subscription (Receive Maximum 1) gets a pre-settled copy, an unsettled one, a
    pre-settled one: the pre-settled ones used engine credit but no packet id, and once left
    its credit at 0 with its window free, what came next QUEUED for good (found by the MQTT
    workload, m296; mqtt_edge/session.py `_on_send` gives that credit back)."""
    p = Params(seed=44, routers=2, topology="line", messages=0, **QUIET)
    world = mqtt_world(p)
    pubs: list = []
    world.at(0.1, world.mqtt.attach_subscriber, "A", ("a/#",), True, False, 1)
    world.at(0.5, lambda: pubs.append(world.attach_publisher("A", "a/b", ALL, 0.03)))
    world.at(0.6, _presettled_burst, world, pubs)
    world.run()


def test_a_message_without_to_is_published_to_its_topic_not_the_filter() -> None:
    """A pre-settled AMQP message without `to` for a subscription to `a/#` at another
    router: that router forgets its record as it sends the copy, and the device got a PUBLISH
    to topic `a/#` (0x90 Topic name invalid; found by the MQTT workload, m42). The engine's
    Send carries the topic now (router/core/actions.py)."""
    p = Params(seed=45, routers=2, topology="line", messages=0, bare=1.0, **QUIET)
    world = mqtt_world(p)
    pubs: list = []
    world.at(0.1, world.mqtt.attach_subscriber, "B", ("a/#",), True)
    world.at(0.5, lambda: pubs.append(world.attach_publisher("A", "a/b", ALL, 0.03)))
    world.at(1.0, lambda: world.publish(pubs[0], presettled=True))
    world.run()


# ------------------------------------------------------------------------ `exactmesh sim`

ROOT = Path(__file__).resolve().parent.parent
# Fails for sure, whatever the router code: no time to drain after the workload, and the
# publishers still publishing when it stops (the checker finds deliveries without outcome).
UNDRAINED = "seed=1,messages=1000,drain=0.0"
FAILURE_LINE = re.compile(r"^seed (\d+): (.+); replay: exactmesh sim --spec '([^']+)'$")


def sim_command(*args: str, hash_seed: str | None = "0") -> subprocess.CompletedProcess:
    """`exactmesh sim ARGS` in a process of its own, importing this checkout (`-m` from the
    top of the tree). `hash_seed`: its PYTHONHASHSEED (None: unset)."""
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    return subprocess.run([sys.executable, "-m", "router.cli", "sim", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_sim_command_is_quiet_when_every_run_passes() -> None:
    result = sim_command("--seeds", "1000-1019")  # test_failover_simulations runs these too
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "sim: 20 runs, 0 failed\n", "")
    result = sim_command("--seeds", "7", "--faults", "none", "--workload", "random",
                         "--routers", "5")
    assert (result.returncode, result.stdout) == (0, "sim: 1 runs, 0 failed\n"), result.stderr


def test_sim_command_prints_a_line_per_failure_with_its_exact_replay() -> None:
    """Runs given no time to drain (`--set drain=0`) all fail: one line each saying what broke
    and how to replay it, the totals, exit status 1; and the replay printed fails the same
    way, under another hash seed."""
    result = sim_command("--seeds", "431-432", "--set", "drain=0.0,messages=40")
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[-1] == "sim: 2 runs, 2 failed"
    assert len(lines) == 3, lines
    match = FAILURE_LINE.match(lines[1])
    assert match is not None, lines[1]
    seed, what, spec = match.groups()
    assert seed == "432" and "after healing and draining" in what
    want = dataclasses.replace(Params.failover_from_seed(432), drain=0.0, messages=40)
    assert Params.parse(spec) == want
    replayed = sim_command("--spec", spec, hash_seed=None)
    assert replayed.returncode == 1, replayed.stderr
    first = replayed.stdout.splitlines()[0]
    assert what.startswith(first.removeprefix("exactmesh simulation failed: ")), (what, first)
    assert f"replay: exactmesh sim --spec '{spec}'" in replayed.stdout


def test_sim_command_replays_a_spec_with_its_whole_report() -> None:
    result = sim_command("--spec", UNDRAINED)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert out.startswith("exactmesh simulation failed: t=6.000000: after healing and draining")
    assert f"params: {Params.parse(UNDRAINED).spec()}" in out
    assert f"replay: exactmesh sim --spec '{Params.parse(UNDRAINED).spec()}'" in out
    assert "last events:" in out
    passing = sim_command("--spec", "f1000")
    assert passing.returncode == 0 and passing.stdout.startswith("ok in "), passing.stdout


@pytest.mark.parametrize("args", [
    ["--seeds", "5-3"], ["--seeds", "x"], ["--seeds", "1", "--routers", "1"],
    ["--spec", "seed=1,nonsense=2"], ["--spec", "f1", "--routers", "3"],
    ["--spec", "seed=1,routers=99"],
])
def test_sim_command_usage_errors_say_why_in_one_line(args: list[str]) -> None:
    result = sim_command(*args)
    assert result.returncode == 2 and result.stdout == "", result
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("exactmesh: error: "), result.stderr


def test_sim_command_needs_seeds_or_a_spec() -> None:
    assert sim_command().returncode == 2
    assert sim_command("--seeds", "1", "--spec", "1").returncode == 2


def test_runs_do_not_depend_on_the_hash_seed() -> None:
    """A spec replays exactly in any process: 15 seeds of each workload, in processes with
    different PYTHONHASHSEEDs (and one left random), print the same failures and the same
    fingerprint (every trace line and every frame of every run, in order)."""
    for workload in ("failover", "random", "mqtt"):
        outputs = {}
        for hash_seed in ("0", "1", "12345", None):
            result = sim_command("--seeds", "1000-1014", "--workload", workload,
                                 "--fingerprint", hash_seed=hash_seed)
            assert result.returncode in (0, 1) and result.stderr == "", result.stderr
            assert result.stdout.splitlines()[-1].startswith("sim: 15 runs, ")
            outputs[hash_seed] = result.stdout
        assert len(set(outputs.values())) == 1, f"{workload}: {outputs}"


def test_wire_runs_do_not_depend_on_the_hash_seed() -> None:
    """The same with every client an SDK client over AMQP (router/sim/amqp.py): proton in the
    loop, and the router's AmqpConnection, keep a run the same in any process."""
    outputs = set()
    for hash_seed in ("0", "12345", None):
        result = sim_command("--seeds", "1000-1014", "--set", "sdk=1.0,wire=1.0",
                             "--fingerprint", hash_seed=hash_seed)
        assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1, outputs


# ------------------------------------------------------------------ relay stores


def test_relay_simulations() -> None:
    """EXACTMESH_SIM_RELAY (default 150) seeds of the relay workload from
    EXACTMESH_SIM_RELAY_FROM (default 0): the failover workload with a relay store in every
    router (router/sim/relay.py): copies for warm subscribers that are away or whose window is
    full are stored, records whose pending copies are all stored give their publisher's
    window back and read their body from the store. All failures at once; and the store is
    used: copies are stored and records released in most runs."""
    start = int(os.environ.get("EXACTMESH_SIM_RELAY_FROM", "0"))
    count = int(os.environ.get("EXACTMESH_SIM_RELAY", "150"))
    failures = []
    stored = released = 0
    for seed in range(start, start + count):
        try:
            world = run(Params.relay_from_seed(seed))
        except SimFailure as failure:
            failures.append(failed_seed(seed, failure))
            continue
        stored += sum(s.stored for s in world.stores.values())
        released += sum(r.engine.core.stats.released for r in world.routers.values())
    assert not failures, f"{len(failures)} of {count} seeds failed:\n" + "\n".join(failures)
    assert stored > count and released > count // 4, (stored, released)


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="set EXACTMESH_LONG=1 for the long run")
def test_long_relay_seed_sweep() -> None:
    """Relay seeds START.. START+N (EXACTMESH_SIM_RELAY_START / _SEEDS); all failures at once."""
    assert_sweep_clean(Params.relay_from_seed, "RELAY", 5000)


def test_relay_store_with_mqtt_devices_is_refused_until_modelled() -> None:
    """The checker does not know yet that an MQTT publisher is answered on stored copies: a
    spec that asks for both is refused, not run with the wrong rules."""
    with pytest.raises(ValueError, match="not modelled yet"):
        dataclasses.replace(Params.relay_from_seed(1), mqtt=0.5)


OPEN_FAILOVER_100303 = (
    "seed=100303,routers=3,topology=random,drop=0.01,dup=0.0,reorder=0.1,"
    "partitions=1,partition_min=0.5,partition_max=7.5,isolate=0.3,restarts=3,"
    "restart_inc=higher,unreachable_timeout=5.0,gossip_interval=0.5,"
    "duration=6.0,drain=60.0,publishers=4,subscribers=4,messages=15,churn=0.5,"
    "flaky=0.3,slow=0.2,stall=0.1,ttl=0.1,early_settle=0.05,presettled=0.03,"
    "presettled_subs=0.05,some_mode=0.25,override=0.1,window=8,"
    "transfer_window=4096,max_attempts=3,survivors=1.0,pub_survivors=-1.0,"
    "drop_client=2,notice=0.5,move_max=1.5,move_to=any,warm=1.0,warm_min=0.5,"
    "warm_max=1.0,reconnect_timeout=8.0,resume_timeout=5.0,declare=1.0,sdk=0.5,"
    "wire=1.0,mqtt=0.3,bare=0.0,relay=0"
)


@pytest.mark.xfail(strict=True, reason="open: a first delivery out of publish order after "
                   "failover (failover seed 100303; see the test's text)")
def test_open_failover_seed_100303() -> None:
    """Found on 2026-11-27 by a sweep of failover seeds 100,000-101,500 (1 failure), not fixed
    yet: subscriber app-C/sub8 gets publisher app-B/pub2's message 2 first after its 6, once
    sub8 moved from C to B. It fails the same way on the code from before that day's relay
    work, so it is older than it. Strict: the day it passes, this test says so."""
    run(Params.parse(OPEN_FAILOVER_100303))


@pytest.mark.xfail(strict=True, reason="open: two origins of one message adopt each other's "
                   "resend after a restart (relay seed 11413; see the test's text)")
def test_open_relay_seed_11413() -> None:
    """Found by the relay workload's sweep, not fixed yet. A publisher moved B -> A -> D and
    was answered at A and again at D (mode some), so both held an origin record of the
    message, settled and waiting for a part at the other. When B restarted, each resent to
    the other and adopted the other's resend: A's record answers D and D's answers A, and
    neither is ever forgotten ('still holds record'). The same parameters without a relay
    store pass, but their timing differs: whether the store only exposes a failover bug is
    not known yet. Strict: the day it passes, this test says so."""
    run(Params.relay_from_seed(11413))

"""The namespace test bed (tests/hosts, docs/testbed.md): three secured routers on hosts of
their own, clients on other hosts, a seeded nemesis, and the checker.

- `line3`, bounded (2 rounds of kill, pause, partition, one-way partition, isolation): the
  checker finds nothing lost, duplicated, out of order, accepted and not delivered, or
  delivered after a failure that did not say "in doubt";
- `broken` (a publisher without a state directory, killed and restarted): reported failing;
- nothing of a run is left, after a run, after a run interrupted by an exception, and (by
  `cleanup_stale()`) after a controller killed with SIGKILL.

EXACTMESH_TESTBED_SEED picks the seed of the bounded run; EXACTMESH_LONG=1 runs a long one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosts import netns
from tests.hosts.nemesis import KINDS
from tests.hosts.scenarios import Options, World, run

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("EXACTMESH_TESTBED_SEED", "1"))


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    try:
        netns.check_prerequisites()
    except netns.NetnsError as err:
        pytest.skip(str(err))


def _nothing_left(prefix: str) -> None:
    assert [ns for ns in netns.namespaces() if ns.startswith(prefix + "-")] == []
    assert netns.processes_with(prefix) == []


class _Prefix:
    """A hook that remembers the run's prefix (and may interrupt the run)."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.prefix = ""
        self.fail_at = fail_at
        self.pids: list[int] = []

    def __call__(self, stage: str, world: World) -> None:
        self.prefix = world.bed.prefix
        self.pids = [p.pid for p in world.bed.procs]
        if stage == self.fail_at:
            raise RuntimeError(f"interrupted at {stage}")


def test_line3_keeps_the_guarantee_under_every_fault(tmp_path: Path) -> None:
    hook = _Prefix()
    report = run(Options("line3", seed=SEED, cycles=2, out=tmp_path), hook)
    c = report.counts
    assert (c["lost"], c["duplicated"], c["out_of_order"], c["accepted_not_delivered"],
            c["failed_delivered_not_in_doubt"]) == (0, 0, 0, 0, 0), report.summary()
    assert report.ok, report.summary()
    assert len(report.faults) == 2 * len(KINDS) and c["published"] > 500, report.summary()
    assert {f["kind"] for f in report.faults} == set(KINDS)
    assert report.json_path is not None and Path(report.json_path).exists()
    _nothing_left(hook.prefix)


def test_a_publisher_without_its_outbox_is_reported(tmp_path: Path) -> None:
    hook = _Prefix()
    report = run(Options("broken", seed=SEED, cycles=1, kinds=("kill",), out=tmp_path), hook)
    assert not report.ok
    assert report.counts["lost"] > 0, report.summary()
    assert "replay: python -m tests.hosts broken --seed" in report.summary()
    _nothing_left(hook.prefix)


def test_nothing_is_left_by_a_run_interrupted_by_an_exception(tmp_path: Path) -> None:
    hook = _Prefix(fail_at="clients")
    with pytest.raises(RuntimeError, match="interrupted at clients"):
        run(Options("line3", seed=SEED, cycles=1, out=tmp_path), hook)
    assert hook.prefix and len(hook.pids) == 9  # 3 routers, 3 publishers, 3 subscribers
    _nothing_left(hook.prefix)
    assert not any(netns.pid_alive(pid) for pid in hook.pids)


CONTROLLER = """
import sys
from tests.hosts.netns import Testbed
bed = Testbed(["h1", "h2"])
bed.start()
bed.spawn("h1", [sys.executable, "-c", "import signal; signal.pause()"], label="idle")
print(bed.prefix, flush=True)
sys.stdin.read()
"""


def test_cleanup_stale_removes_what_a_killed_controller_left() -> None:
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER], cwd=ROOT, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert controller.stdout is not None
        prefix = controller.stdout.readline().strip()
        assert prefix.startswith("xm")
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
        left = [ns for ns in netns.namespaces() if ns.startswith(prefix + "-")]
        assert sorted(left) == [f"{prefix}-h1", f"{prefix}-h2", f"{prefix}-sw"]
        inside = netns.pids_in(f"{prefix}-h1")
        assert len(inside) == 1
        removed = netns.cleanup_stale()
        assert set(left) <= set(removed)
        assert [ns for ns in netns.namespaces() if ns.startswith(prefix + "-")] == []
        assert not netns.pid_alive(inside[0])
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)


@pytest.mark.slow
def test_line3_long(tmp_path: Path) -> None:
    """Ten rounds of every fault (EXACTMESH_LONG=1)."""
    if not os.environ.get("EXACTMESH_LONG"):
        pytest.skip("set EXACTMESH_LONG=1 for the long run")
    report = run(Options("line3", seed=SEED, cycles=10, out=tmp_path))
    assert report.ok, report.summary()

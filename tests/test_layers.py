"""The layers are a test: the import-linter contracts in pyproject.toml ([tool.importlinter])
hold on the tree, and a deliberate violation in a copy of the tree breaks the contract that
names it (so the contracts are not vacuous: they see the modules they talk about)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("router", "mesh", "amqp_edge", "mqtt_edge", "spark_connector")
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    if not LINT.exists():
        pytest.skip("lint-imports is not installed (the `test` extra has import-linter)")
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [str(LINT), "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.json"))
    return tree


# (file of the copy, line appended to it, contract broken, what the report names)
VIOLATIONS = [
    ("router/core/engine.py", "import trio",
     "router.core is sans-IO", "router.core.engine -> trio"),
    ("router/core/records.py", "import time",
     "router.core is sans-IO", "router.core.records -> time"),
    ("mqtt_edge/retained.py", "from amqp_edge import resume",
     "layers:", "mqtt_edge.retained -> amqp_edge.resume"),
    ("mesh/meshnode.py", "import router.runtime.node",
     "layers:", "mesh.meshnode -> router.runtime.node"),
    ("amqp_edge/client.py", "from router.core import engine",
     "clients (SDK", "amqp_edge.client -> router.core.engine"),
    ("amqp_edge/sdk_core.py", "import sqlite3",
     "amqp_edge.sdk_core is sans-IO", "amqp_edge.sdk_core -> sqlite3"),
    ("mesh/frames.py", "from mesh import runtime",
     "no import cycles", "No cycles are allowed in mesh."),
]


@pytest.mark.parametrize(("path", "line", "contract", "named"), VIOLATIONS,
                         ids=[v[0] + ": " + v[1] for v in VIOLATIONS])
def test_a_deliberate_violation_breaks_its_contract(
        tmp_path: Path, path: str, line: str, contract: str, named: str) -> None:
    tree = _copy(tmp_path)
    with open(tree / path, "a") as f:
        f.write(f"\n{line}  # deliberate violation (tests/test_layers.py)\n")
    run = _lint(tree)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    broken = out.split("Broken contracts", 1)[-1]
    assert contract in broken, out
    assert named in out, out
    # Exactly one contract broke: the one that says so.
    assert "1 broken" in out, out

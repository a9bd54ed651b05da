"""The optional compiled build of the per-message modules, and the guard that keeps it honest.

The router spends much of its CPU per message in plain Python: the MQTT codec, session and
message mapping, and the delivery engine (benchmarks/mqtt.py, profiled with py-spy). mypyc
compiles those same source files, unchanged, into C extension modules that Python imports in
place of the `.py` files: in-process, the router's QoS 2 path then costs about half. Nothing
else changes: the `.py` files stay the one source, and without a build (no C compiler, or
EXACTMESH_PURE_PYTHON=1) the router runs them as they are.

    exactmesh accel build    # compile (`make test` and `make demo` do it)
    exactmesh accel status   # which one a router here would run, and why

A build writes, beside the extension modules, a manifest with the SHA-256 of each source it
compiled. `guard()` loads the `.py` files instead when a source changed since the build, or
when EXACTMESH_PURE_PYTHON=1: an edited source is never shadowed by a stale compiled module.
What runs a router calls it before importing a compiled module: the `router.runtime` and
`mqtt_edge` packages, `exactmesh router` and `exactmesh demo`, the simulator and the tests'
conftest. Clients (the SDK, the Spark source) import `router.core.topics` without it: they get
the compiled module when one was built from the sources as they are, as in any install.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What is compiled: the modules on the per-message path, in one group (calls between them are
# C calls). Their code must type-check under mypy: mypyc enforces the annotations at run time.
MODULES = (
    "mqtt_edge.codec", "mqtt_edge.mapping", "mqtt_edge.session", "mqtt_edge.reactor",
    "router.core.engine", "router.core.failover", "router.core.groups", "router.core.records",
    "router.core.actions",
    "router.core.topics", "router.core.transitions", "router.core.events", "router.core.message",
)
GROUP = "router.accel_lib"  # the shared library: router/accel_lib__mypyc.*.so
MANIFEST = ROOT / "router" / "accel_manifest.json"
PURE_ENV = "EXACTMESH_PURE_PYTHON"

_state: dict[str, Any] = {}


def _source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extension(module: str) -> Path | None:
    src = _source(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = src.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def check() -> tuple[bool, str]:
    """(use the compiled modules?, why): compiled only when every one was built from the
    sources as they are now."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return False, f"pure Python ({PURE_ENV} is set)"
    if not any(_extension(m) for m in MODULES):
        return False, "pure Python (not compiled; `exactmesh accel build` compiles)"
    try:
        built = json.loads(MANIFEST.read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return False, f"pure Python ({MANIFEST.name} is missing or unreadable; rebuild)"
    for module in MODULES:
        if _extension(module) is None or built.get(module) != _digest(_source(module)):
            return False, (f"pure Python ({module} changed since it was compiled; "
                           "`exactmesh accel build` compiles it again)")
    return True, "compiled with mypyc: " + ", ".join(MODULES)


class _SourceFirst:
    """A meta-path finder that loads the listed modules from their `.py` files, so that the
    extension modules beside them (which the import system would prefer) are not used."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in MODULES:
            return None
        src = _source(name)
        loader = importlib.machinery.SourceFileLoader(name, str(src))
        return importlib.util.spec_from_file_location(name, src, loader=loader)


def guard() -> None:
    """Decide once per process, before the compiled modules can be imported."""
    if "compiled" in _state:
        return
    compiled, why = check()
    _state["compiled"], _state["why"] = compiled, why
    if not compiled and any(_extension(m) for m in MODULES):
        sys.meta_path.insert(0, _SourceFirst())


def describe() -> str:
    """One line for the router's log and the benchmarks: what runs, and why."""
    guard()
    return str(_state["why"])


def compiled() -> bool:
    guard()
    return bool(_state["compiled"])


def build() -> int:
    """Compile MODULES with mypyc, in place, and write the manifest. Returns an exit code."""
    try:
        from mypyc.build import mypycify
        from setuptools import Distribution
    except ImportError:
        print("router.accel: mypy (which provides mypyc) and setuptools are needed to compile; "
              "`pip install -e '.[accel]'` installs them. The router runs as pure Python.",
              file=sys.stderr)
        return 1
    sources = {m: _digest(_source(m)) for m in MODULES}
    MANIFEST.unlink(missing_ok=True)  # a half-done build must not look valid
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypycify wants paths relative to the top of the import tree
    try:
        with tempfile.TemporaryDirectory(prefix="exactmesh-accel-") as tmp:
            paths = [str(_source(m).relative_to(ROOT)) for m in MODULES]
            # Only these files are type-checked and compiled; what they import is read for
            # its types (follow-imports=silent), not judged. `misc` is off for the engine's
            # failover mixin, whose methods declare `self: Engine` (the class it is mixed in).
            options = ["--ignore-missing-imports", "--follow-imports=silent",
                       "--disable-error-code", "misc"]
            extensions = mypycify(options + paths, opt_level="3", group_name=GROUP,
                                  target_dir=os.path.join(tmp, "c"))
            dist = Distribution({"name": "exactmesh-accel", "ext_modules": extensions})
            cmd = dist.get_command_obj("build_ext")
            cmd.inplace = True
            cmd.build_temp = os.path.join(tmp, "obj")
            cmd.parallel = os.cpu_count() or 1
            cmd.ensure_finalized()
            cmd.run()
    finally:
        os.chdir(cwd)
    MANIFEST.write_text(json.dumps({"sources": sources, "group": GROUP}, indent=1) + "\n")
    print("router.accel: compiled " + ", ".join(MODULES))
    return 0

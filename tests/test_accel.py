"""The optional compiled build (router/accel.py): which modules a router runs, and that an
edited source is never shadowed by a stale compiled module."""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from router import accel

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import router.accel as a, mqtt_edge.codec as c, mqtt_edge.session as s; "
         "print(a.compiled(), c.__file__, s.__file__)")


def _probe(pure: bool) -> tuple[str, str, str]:
    env = {k: v for k, v in os.environ.items() if k != accel.PURE_ENV}
    if pure:
        env[accel.PURE_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=60, check=True).stdout.split()
    return out[0], out[1], out[2]


def test_the_makefile_compiles_what_accel_lists() -> None:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    listed = re.search(r"^ACCEL_SRC := (.*)$", text, re.M)
    assert listed is not None
    assert listed.group(1).split() == [
        str(accel._source(m).relative_to(ROOT)) for m in accel.MODULES]


def test_plain_python_when_asked() -> None:
    compiled, codec, session = _probe(pure=True)
    assert compiled == "False"
    assert codec.endswith("codec.py") and session.endswith("session.py")


def test_compiled_modules_are_used_when_built() -> None:
    ok, why = _probe_check()
    if not ok:
        pytest.skip(f"not compiled here: {why}")
    compiled, codec, session = _probe(pure=False)
    assert compiled == "True"
    assert not codec.endswith(".py") and not session.endswith(".py")


def _probe_check() -> tuple[bool, str]:
    saved = os.environ.pop(accel.PURE_ENV, None)
    try:
        return accel.check()
    finally:
        if saved is not None:
            os.environ[accel.PURE_ENV] = saved


def _fake_build(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree shaped like a built checkout: the sources, an 'extension' beside each, and a
    manifest of the sources' digests."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    sources = {}
    for module in accel.MODULES:
        src = tmp.joinpath(*module.split(".")).with_suffix(".py")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {module}\n")
        src.with_suffix(suffix).write_bytes(b"")
        sources[module] = accel._digest(src)
    manifest = tmp / "accel_manifest.json"
    manifest.write_text(json.dumps({"sources": sources}))
    monkeypatch.setattr(accel, "ROOT", tmp)
    monkeypatch.setattr(accel, "MANIFEST", manifest)
    monkeypatch.delenv(accel.PURE_ENV, raising=False)


def test_a_changed_source_falls_back_to_python(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_build(tmp_path, monkeypatch)
    assert accel.check()[0] is True
    edited = accel.MODULES[1]
    tmp_path.joinpath(*edited.split(".")).with_suffix(".py").write_text("# edited\n")
    ok, why = accel.check()
    assert ok is False and edited in why and "exactmesh accel build" in why
    spec = accel._SourceFirst().find_spec(edited)
    assert spec is not None and spec.origin.endswith(".py")
    assert accel._SourceFirst().find_spec("mqtt_edge.packets") is None


def test_a_missing_manifest_falls_back_to_python(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_build(tmp_path, monkeypatch)
    (tmp_path / "accel_manifest.json").unlink()
    ok, why = accel.check()
    assert ok is False and "rebuild" in why


def test_the_router_says_what_it_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "router.cli", "accel", "status"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert out.stdout.startswith(("compiled with mypyc", "pure Python ("))

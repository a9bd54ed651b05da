"""docs/conformance-mqtt5.md stays true: every test it cites exists and names its statement,
no test names a statement the table does not count as tested, and the totals add up."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "conformance-mqtt5.md"
ROW = re.compile(r"^\| (MQTT-[0-9.]+-[0-9]+) \| (.*) \| (.*) \| (tested|code only|not named) \|$")
CITED = re.compile(r"`(tests/[a-z0-9_]+\.py)::([a-z0-9_]+)`")


def _rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(3), m.group(4))
    return rows


@functools.cache
def _test_functions() -> dict[str, str]:
    found = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found[f"tests/{path.name}::{node.name}"] = ast.get_source_segment(text, node) or ""
    return found


def _names(body: str, statement: str) -> bool:
    return re.search(re.escape(statement) + r"(?![0-9])", body) is not None


def test_every_cited_test_exists_and_names_its_statement() -> None:
    tests = _test_functions()
    for statement, (where, status) in _rows().items():
        cited = [f"{f}::{n}" for f, n in CITED.findall(where)]
        if status == "tested":
            assert cited, f"{statement} is 'tested' but cites no test"
        for name in cited:
            assert name in tests, f"{statement}: {name} does not exist"
            assert _names(tests[name], statement), f"{name} does not name {statement}"


def test_no_test_names_a_statement_the_table_does_not_count() -> None:
    tests = _test_functions()
    for statement, (_, status) in _rows().items():
        naming = [n for n, body in tests.items() if _names(body, statement)]
        if status != "tested":
            assert not naming, f"{statement} is '{status}' in the table, but {naming} name it"


def test_the_totals_add_up() -> None:
    statuses = [status for _, status in _rows().values()]
    text = TABLE.read_text()
    for status in ("tested", "code only", "not named"):
        assert f"**{statuses.count(status)} {status}**" in text, status

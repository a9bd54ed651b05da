"""`exactmesh pub` and `exactmesh sub` end to end: real router and command processes."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from amqp_edge.client import Publisher
from tests.harness import EXACTMESH, ROOT, RouterProcess, free_port, wait_for


def amqp(router: RouterProcess) -> str:
    return f"amqp://{router.url}"


def exactmesh(*args: str, stdin: str | None = None,
              timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([EXACTMESH, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


class SubProcess:
    """`exactmesh sub ...` running; `wait_subscribed()` waits for its stderr line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([EXACTMESH, "sub", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    def wait_subscribed(self) -> None:
        wait_for(lambda: any("subscribed" in line for line in self.err)
                 or self.proc.poll() is not None, 15, "the sub command to subscribe")
        assert self.proc.poll() is None, "".join(self.err)

    def finish(self, timeout: float = 20.0) -> tuple[int, list[dict[str, Any]]]:
        out, _ = self.proc.communicate(timeout=timeout)
        self._reader.join(5)
        return self.proc.returncode, [json.loads(line) for line in out.splitlines()]


def sub_args(router: RouterProcess, state: Path, *more: str) -> list[str]:
    return ["--url", amqp(router), "--topic", "cli/#", "--id", "reader",
            "--state-dir", str(state), *more]


def pub_args(router: RouterProcess, state: Path, *more: str) -> list[str]:
    return ["pub", "--url", amqp(router), "--topic", "cli/x", "--id", "writer",
            "--state-dir", str(state), *more]


def summary(result: subprocess.CompletedProcess) -> dict[str, int]:
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_pub_count_and_sub_count_across_runs(tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        sub = SubProcess(*sub_args(router, tmp_path / "sub", "--count", "50"))
        sub.wait_subscribed()
        result = exactmesh(*pub_args(router, tmp_path / "pub", "--count", "50"))
        assert result.returncode == 0, result.stderr
        assert summary(result) == {"sent": 50, "accepted": 50, "failed": 0, "resent": 0}
        code, lines = sub.finish()
        assert code == 0
        assert [m["body"] for m in lines] == [f"writer-{i}" for i in range(1, 51)]
        first = lines[0]
        assert first["topic"] == "cli/x" and first["message_id"] == "writer:1"
        assert re.fullmatch(r"[0-9a-f]{32}", first["tag"]) and first["redelivered"] is False

        # Second runs: the publisher continues from its persisted sequence up to 80, the
        # subscriber from its persisted count up to 80.
        sub = SubProcess(*sub_args(router, tmp_path / "sub", "--count", "80"))
        sub.wait_subscribed()
        result = exactmesh(*pub_args(router, tmp_path / "pub", "--count", "80"))
        assert result.returncode == 0, result.stderr
        assert summary(result) == {"sent": 30, "accepted": 30, "failed": 0, "resent": 0}
        code, lines = sub.finish()
        assert code == 0
        assert [m["body"] for m in lines] == [f"writer-{i}" for i in range(51, 81)]

        # Both are done: a third run does nothing and says so.
        again = exactmesh(*pub_args(router, tmp_path / "pub", "--count", "80"))
        assert again.returncode == 0 and summary(again)["sent"] == 0
        done = exactmesh("sub", *sub_args(router, tmp_path / "sub", "--count", "80"))
        assert done.returncode == 0 and done.stdout == ""


def test_stdin_lines_are_messages_and_binary_bodies_are_base64(tmp_path: Path) -> None:
    with RouterProcess("A") as router:
        sub = SubProcess(*sub_args(router, tmp_path / "sub", "--count", "4"))
        sub.wait_subscribed()
        result = exactmesh(*pub_args(router, tmp_path / "pub"), stdin="alpha\nbeta\n\ngamma\n")
        assert result.returncode == 0, result.stderr
        assert summary(result)["accepted"] == 4
        code, lines = sub.finish()
        assert code == 0
        assert [m["body"] for m in lines] == ["alpha", "beta", "", "gamma"]

        sub = SubProcess(*sub_args(router, tmp_path / "sub", "--idle-exit", "0.5"))
        sub.wait_subscribed()
        with Publisher([amqp(router)], "cli/bin", id="bin", state_dir=str(tmp_path)) as pub:
            pub.send(b"\xff\x00\xfe")
            pub.flush(10)
        code, lines = sub.finish()
        assert code == 0
        assert lines == [{"topic": "cli/bin", "message_id": "bin:1", "tag": lines[0]["tag"],
                          "redelivered": False, "publisher": "bin/pub/bin", "body": "/wD+",
                          "body_base64": True}]


def test_pub_exits_1_listing_failures(tmp_path: Path) -> None:
    with RouterProcess("A", "--no-subscribers", "reject") as router:
        result = exactmesh(*pub_args(router, tmp_path, "--count", "2"))
        assert result.returncode == 1
        assert summary(result) == {"sent": 2, "accepted": 0, "failed": 2, "resent": 0}
        lines = result.stderr.splitlines()
        assert [line.split(" ", 2)[:2] for line in lines] == [
            ["1", "exactmesh:no-subscribers"], ["2", "exactmesh:no-subscribers"]]


def one_error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {result.stderr!r}"
    assert lines[0].startswith("exactmesh: error: "), lines[0]
    return lines[0]


def test_usage_errors_exit_2_with_one_clear_line(tmp_path: Path) -> None:
    base = ["--id", "x", "--state-dir", str(tmp_path)]
    line = one_error_line(exactmesh("pub", "--url", "http://h:1", "--topic", "a", *base))
    assert "bad router URL 'http://h:1'" in line and "amqp://HOST:PORT" in line
    line = one_error_line(exactmesh("pub", "--url", "h:port", "--topic", "a", *base))
    assert "bad router URL 'h:port'" in line
    line = one_error_line(exactmesh("pub", "--url", "h:1", "--topic", "a/#", *base))
    assert "bad topic 'a/#'" in line
    line = one_error_line(exactmesh("sub", "--url", "h:1", "--topic", "a/#/b", *base))
    assert "bad topic filter" in line
    afile = tmp_path / "file"
    afile.write_text("")
    line = one_error_line(exactmesh("sub", "--url", "h:1", "--topic", "a/#", "--id", "x",
                                    "--state-dir", str(afile / "state")))
    assert "state directory" in line and "--state-dir" in line
    line = one_error_line(exactmesh("sub", "--url", "h:1", "--topic", "a", "--timeout", "5",
                                    *base))
    assert "--durable" in line
    missing = exactmesh("pub", "--url", "h:1", "--topic", "a")
    assert missing.returncode == 2 and "--id" in missing.stderr


def test_unreachable_routers_exit_3(tmp_path: Path) -> None:
    dead = f"amqp://127.0.0.1:{free_port()}"
    result = exactmesh("pub", "--url", dead, "--topic", "a", "--id", "p", "--state-dir",
                       str(tmp_path), "--count", "1", "--timeout", "0.5")
    line = one_error_line(result, 3)
    assert "no exactmesh router reachable" in line and dead in line
    result = exactmesh("sub", "--url", dead, "--topic", "a", "--id", "s", "--state-dir",
                       str(tmp_path), "--connect-timeout", "0.5")
    assert "no exactmesh router reachable" in one_error_line(result, 3)

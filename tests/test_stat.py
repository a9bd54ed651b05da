"""`exactmesh stat` (router/stat_cli.py): one router's view, and with `--mesh` every
router's, asked through the status endpoints the routers advertise in the mesh."""

from __future__ import annotations

import json
import subprocess

from .harness import EXACTMESH, free_port, wait_for
from .mesh_harness import holding_subscriber, publish_one, start_mesh, stop_clients


def stat(http: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXACTMESH, "stat", "--http", f"127.0.0.1:{http}", *args],
                          capture_output=True, text=True, timeout=30)


def test_stat_shows_routes_subscriptions_and_a_stuck_delivery_across_the_mesh() -> None:
    http = {r: free_port() for r in "ABC"}
    extra = {r: ["--http", f"127.0.0.1:{p}"] for r, p in http.items()}
    with start_mesh("line", 3, extra=extra, common=["--stuck-after", "0.3"]) as mesh:
        mesh.wait_links_up()
        holder, clients = holding_subscriber(mesh["C"].url, "audit")
        try:
            mesh["A"].wait_logged("knows subscriber audit/sub@C", 15)
            pub, pub_client = publish_one(mesh["A"].url)
            wait_for(lambda: len(holder.held) == 1, 10, "the copy at C")
            wait_for(lambda: mesh["A"].logged("waiting for audit/sub@C"), 10, "stuck at A")
            run = stat(http["A"], "--mesh", "--json")
            assert run.returncode == 0, run.stderr
            views = {v["router"]: v for v in json.loads(run.stdout)}
            assert sorted(views) == ["A", "B", "C"]
            a = views["A"]
            assert a["routers"]["C"]["next_hop"] == "B" and a["routers"]["C"]["cost"] == 2
            assert a["routers"]["B"]["link_up"] is True
            assert a["routers"]["C"]["http"] == f"http://127.0.0.1:{http['C']}"
            assert {"key": "audit/sub", "filter": "orders/#"} in a["subscriptions"]["C"]
            (stuck,) = a["stuck"]
            assert stuck["pending"] == ["audit/sub@C"] and stuck["address"] == "orders/eu"
            assert [x["role"] for x in a["links"]] == ["publisher"]
            c = views["C"]
            assert [x["filter"] for x in c["links"]] == ["orders/#"]
            assert c["links"][0]["unsettled"] == 1
            text = stat(http["A"])
            assert text.returncode == 0
            for part in ("Router A (pid", "Counters", "Routers (as this one routes)",
                         "Subscriptions", "audit/sub orders/#",
                         "waiting for audit/sub@C"):
                assert part in text.stdout, part
            clients.call(lambda: holder.answer_held("accept"))
            wait_for(lambda: pub.outcomes, 10, "the outcome")
            stop_clients(pub_client)
        finally:
            stop_clients(clients)
        mesh["C"].kill()
        run = stat(http["A"], "--mesh", "--json")
        assert run.returncode == 1
        views = {v["router"]: v for v in json.loads(run.stdout)}
        assert "error" in views["C"]


def test_stat_of_an_unreachable_router_is_one_line_and_status_2() -> None:
    run = stat(free_port())
    assert run.returncode == 2
    assert run.stderr.startswith("exactmesh: error: cannot reach the status endpoint")

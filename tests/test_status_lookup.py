"""`exactmesh status delivery` by what a publisher knows (docs/operations.md): its
message-id, asked at a router other than the origin, and its container, link and own tag.
Both answer with the same delivery as its id does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from amqp_edge.client import Publisher

from .harness import EXACTMESH, free_port, wait_for
from .harness import Subscriber as ProtonSubscriber
from .mesh_harness import start_clients, start_mesh, stop_clients


def status(http: int, *args: str) -> tuple[int, dict]:
    run = subprocess.run([EXACTMESH, "status", "delivery", *args, "--http",
                          f"127.0.0.1:{http}"], capture_output=True, text=True, timeout=30)
    body = json.loads(run.stdout) if run.stdout.strip() else {"stderr": run.stderr}
    return run.returncode, body


def test_a_delivery_is_found_by_message_id_at_another_router_and_by_publisher(
    tmp_path: Path,
) -> None:
    http = {"A": free_port(), "B": free_port()}
    extra = {r: ["--http", f"127.0.0.1:{p}"] for r, p in http.items()}
    with start_mesh("line", 2, extra=extra) as mesh:
        mesh.wait_links_up()
        holder = ProtonSubscriber(mesh["B"].url, "orders/#", policy=lambda m, d: "hold",
                                  container_id="audit")
        clients = start_clients(holder)
        pub = None
        try:
            mesh["A"].wait_logged("knows subscriber audit/sub@B", 15)
            pub = Publisher(f"amqp://{mesh['A'].url}", "orders/eu", id="shop",
                            state_dir=str(tmp_path / "pub"))
            pub.send("order 1")
            wait_for(lambda: len(holder.held) == 1, 10, "the copy at B")
            code, at_b = status(http["B"], "--message-id", "shop:1")
            assert code == 0, at_b
            assert at_b["router"] == "B" and at_b["origin"] == "A"
            assert at_b["pending"] == ["audit/sub@B"]
            code, at_a = status(http["A"], "--publisher", "shop", "--link", "pub/shop",
                                "--tag", "1")
            assert code == 0, at_a
            assert at_a["id"] == at_b["id"] and at_a["router"] == "A"
            code, by_id = status(http["A"], at_b["id"])
            assert code == 0 and by_id["id"] == at_a["id"]
            code, missing = status(http["B"], "--message-id", "shop:2")
            assert code == 1 and "no delivery with message-id 'shop:2'" in missing["error"]
            code, both = status(http["A"], at_b["id"], "--message-id", "shop:1")
            assert code == 2 and "one of the three" in both["stderr"]
            clients.call(lambda: holder.answer_held("accept"))
            pub.flush(timeout=10)
        finally:
            if pub is not None:
                pub.close()
            stop_clients(clients)

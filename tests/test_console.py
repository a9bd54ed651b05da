"""The web console (GET /console, router/runtime/console.html) in a real headless browser:
Debian's chromium in its own headless mode, which loads the page, runs its script for a
virtual-time budget and prints the resulting DOM (or takes a screenshot).

Every host name but 127.0.0.1 resolves to nothing in that browser, so the page is shown to
work with no network. On a running line of three routers it shows every router and link,
then a stuck delivery with its pending subscriber, then the link to a SIGKILLed router down.
Set EXACTMESH_CONSOLE_SHOTS=DIR to keep the screenshots of the three states (docs/ has them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .harness import free_port, wait_for
from .mesh_harness import holding_subscriber, publish_one, start_mesh, stop_clients

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test "
                                "installs Debian's chromium)")

NO_NETWORK = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


def browser(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-extensions", NO_NETWORK,
                           "--virtual-time-budget=2500", *args],
                          capture_output=True, text=True, timeout=60)


def dom(url: str) -> str:
    run = browser("--dump-dom", url)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def shot(url: str, name: str, tmp: Path) -> None:
    out = Path(os.environ.get("EXACTMESH_CONSOLE_SHOTS") or tmp) / f"console-{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    browser(f"--screenshot={out}", "--window-size=1280,1000", url)
    assert out.exists() and out.stat().st_size > 1000


def link_state(page: str, link: str) -> str | None:
    m = re.search(rf'<line [^>]*data-link="{link}" data-state="(\w+)"', page)
    return m[1] if m else None


def test_the_console_shows_the_mesh_a_stuck_delivery_and_a_link_going_down(
    tmp_path: Path,
) -> None:
    http = {r: free_port() for r in "ABC"}
    extra = {r: ["--http", f"127.0.0.1:{p}"] for r, p in http.items()}
    with start_mesh("line", 3, extra=extra, common=["--stuck-after", "0.3"]) as mesh:
        mesh.wait_links_up()
        url = f"http://127.0.0.1:{http['A']}/console"
        page = wait_for(lambda: (p := dom(url)) and link_state(p, "B-C") == "up" and p, 20,
                        "the whole mesh on the page")
        for router in "ABC":
            assert f'data-router="{router}"' in page
        assert link_state(page, "A-B") == "up"
        # This router's own links show their rates (bytes each way, from two polls).
        row = re.search(r'<tr data-link="A-B">(.*?)</tr>', page)[1]
        assert "KiB/s" in row, row
        assert re.search(r'<span id="router">A</span>', page)
        shot(url, "mesh", tmp_path)

        holder, clients = holding_subscriber(mesh["C"].url, "audit")
        try:
            mesh["A"].wait_logged("knows subscriber audit/sub@C", 15)
            pub, pub_client = publish_one(mesh["A"].url)
            wait_for(lambda: len(holder.held) == 1, 10, "the copy at C")
            page = wait_for(lambda: (p := dom(url)) and 'class="stuck"' in p and p, 20,
                            "the stuck delivery on the page")
            stuck = re.search(r'<tr class="stuck"[^>]*>(.*?)</tr>', page)[1]
            assert "orders/eu" in stuck and "audit/sub@C" in stuck
            shot(url, "stuck", tmp_path)
            clients.call(lambda: holder.answer_held("accept"))
            wait_for(lambda: pub.outcomes, 10, "the outcome")
            stop_clients(pub_client)
        finally:
            stop_clients(clients)

        killed = time.monotonic()
        mesh["C"].kill()
        wait_for(lambda: link_state(dom(url), "B-C") == "down", 15,
                 "the link to the killed router shown down")
        shown_after = time.monotonic() - killed
        assert shown_after < 10, f"shown down only after {shown_after:.1f} s"
        shot(url, "link-down", tmp_path)


def test_the_console_page_loads_nothing_from_elsewhere() -> None:
    page = (Path(__file__).parent.parent / "router" / "runtime" / "console.html").read_text()
    # Only the SVG and XHTML namespace names, which are never fetched.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xhtml"}, urls
    assert "<link " not in page and "src=" not in page

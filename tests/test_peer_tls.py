"""Mutual TLS on peer links (`peer-tls-cert`, `peer-tls-key`, `peer-tls-ca`).

`trustme` makes throwaway CAs and certificates, written to files because the router loads
them from files (`RouterConfig.peer_tls`, which the PeerManager tests use too). PeerManagers
run under trio with deadlines, as in tests/test_mesh_links.py; the process test runs two real
routers with proton clients; the CLI tests check the one-line errors. All on 127.0.0.1.
"""

from __future__ import annotations

import socket
import ssl
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from mesh.peers import PeerManager
from router.config import ConfigError, HostPort, RouterConfig
from tests.harness import Publisher, Subscriber, Tally, numbered
from tests.mesh_harness import start_clients, start_mesh, stop_clients, wait_outcomes
from tests.test_cli import one_error_line, run_exactmesh
from tests.test_mesh_links import (
    Recorder,
    dropped_at_handshake_deadline,
    mesh_lines,
    peer_settings,
    run,
    sample,
    until,
)

TLS_FLAGS = ("--peer-tls-cert", "--peer-tls-key", "--peer-tls-ca")


def tls_files(directory: Path, ca: trustme.CA, name: str, trust: trustme.CA | None = None
              ) -> dict[str, str]:
    """Certificate chain and key for router `name` issued by `ca`, and the CA bundle of
    `trust` (default `ca`), as files: {option: path}."""
    directory.mkdir(parents=True, exist_ok=True)
    issued = ca.issue_cert(f"{name.lower()}.routers.test")
    cert, key, bundle = (directory / f"{name}.crt", directory / f"{name}.key",
                         directory / f"{name}-ca.pem")
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    (trust or ca).cert_pem.write_to_path(str(bundle))
    return {"peer-tls-cert": str(cert), "peer-tls-key": str(key), "peer-tls-ca": str(bundle)}


def contexts(files: dict[str, str]) -> dict[str, ssl.SSLContext]:
    """PeerSettings keywords for those files, built the way the router builds them."""
    config = RouterConfig(id="X", amqp=HostPort("127.0.0.1", 1),
                          **{k.replace("-", "_"): v for k, v in files.items()})
    tls = config.peer_tls()
    assert tls is not None
    return {"tls_server": tls[0], "tls_client": tls[1]}


def flags(files: dict[str, str]) -> list[str]:
    return [arg for k, v in files.items() for arg in (f"--{k}", v)]


@pytest.fixture(scope="module")
def cas() -> tuple[trustme.CA, trustme.CA]:
    return trustme.CA(), trustme.CA()  # the cluster's CA and a stranger's


@pytest.fixture(autouse=True)
def _mesh_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="exactmesh.mesh")


async def start(nursery: trio.Nursery, router_id: str, **kw: Any
                ) -> tuple[PeerManager, Recorder, int]:
    rec = Recorder()
    manager = PeerManager(peer_settings(router_id, **kw), rec.on_up, rec.on_frame, rec.on_down)
    listeners = await nursery.start(manager.listen, "127.0.0.1", 0)
    return manager, rec, listeners[0].socket.getsockname()[1]


# ------------------------------------------------------------------ PeerManager level


def test_two_tls_managers_link_up_and_exchange_frames(tmp_path: Path, cas: Any) -> None:
    ca, _ = cas
    tls_a, tls_b = (contexts(tls_files(tmp_path, ca, n)) for n in "AB")

    async def test(nursery: trio.Nursery) -> None:
        a, rec_a, port_a = await start(nursery, "A", inc=1, **tls_a)
        b, rec_b, _ = await start(nursery, "B", inc=2, **tls_b)
        nursery.start_soon(b.connect, "127.0.0.1", port_a)
        await until(lambda: "B" in rec_a.up and "A" in rec_b.up)
        link_ab, link_ba = a.links()["B"], b.links()["A"]
        for i in range(50):
            link_ba.send(sample("DATA", item=["msg", i]))
            link_ab.send(sample("ACK", upto=i))
        await until(lambda: len(rec_a.frames) == 50 and len(rec_b.frames) == 50)
        assert [f["item"][1] for _, f in rec_a.frames] == list(range(50))
        assert [f["upto"] for _, f in rec_b.frames] == list(range(50))
        # Heartbeats go through TLS too: two heartbeats of node silence, still up.
        await trio.sleep(2 * 0.4)
        assert a.links() == {"B": link_ab} and b.links() == {"A": link_ba}
        # An orderly close is still told to the peer, inside TLS.
        link_ba.close("maintenance")
        await until(lambda: rec_a.downs["B"] == 1)
        assert rec_a.events[-1][3] == "closed by the peer: maintenance"
        await until(lambda: "B" in rec_a.up and "A" in rec_b.up)  # the connect loop is back
        assert rec_a.violations == rec_b.violations == []

    run(test)


def test_a_certificate_from_another_ca_is_refused_and_the_good_link_stays(
        tmp_path: Path, cas: Any, caplog: pytest.LogCaptureFixture) -> None:
    ca, stranger = cas
    tls_a, tls_b = (contexts(tls_files(tmp_path, ca, n)) for n in "AB")
    # C trusts the cluster's CA (so it would accept A), but its own certificate is a stranger's.
    tls_c = contexts(tls_files(tmp_path, stranger, "C", trust=ca))

    async def test(nursery: trio.Nursery) -> None:
        a, rec_a, port_a = await start(nursery, "A", **tls_a)
        b, rec_b, _ = await start(nursery, "B", **tls_b)
        c, rec_c, _ = await start(nursery, "C", **tls_c)
        nursery.start_soon(b.connect, "127.0.0.1", port_a)
        await until(lambda: "B" in rec_a.up and "A" in rec_b.up)
        link_ab = a.links()["B"]
        nursery.start_soon(c.connect, "127.0.0.1", port_a)

        def refused() -> list[str]:
            return [m for m in mesh_lines(caplog) if "incoming" in m
                    and "TLS handshake failed" in m and "certificate verify failed" in m]

        await until(lambda: len(refused()) >= 2)  # refused, and refused again on the retry
        line = refused()[0]
        assert line.startswith("peer 127.0.0.1:") and "(router unknown, incoming)" in line
        assert "\n" not in line
        # C's side is logged too, naming A's address and the TLS alert it got.
        assert any(m.startswith(f"peer 127.0.0.1:{port_a} (router unknown, outgoing)")
                   and "TLS" in m for m in mesh_lines(caplog))
        assert rec_a.ups == Counter({"B": 1}) and rec_c.ups == Counter()
        assert a.links() == {"B": link_ab} and rec_a.downs == Counter()
        for rec in (rec_a, rec_b, rec_c):
            assert rec.violations == []

    run(test)


def test_plain_tcp_and_tls_do_not_mix(tmp_path: Path, cas: Any,
                                      caplog: pytest.LogCaptureFixture) -> None:
    ca, _ = cas
    tls_a, tls_c = (contexts(tls_files(tmp_path, ca, n)) for n in "AC")

    async def test(nursery: trio.Nursery) -> None:
        a, rec_a, port_a = await start(nursery, "A", handshake_patience=1, **tls_a)
        d, rec_d, port_d = await start(nursery, "D")  # plain TCP
        c, rec_c, _ = await start(nursery, "C", **tls_c)
        # A plain peer dialling a TLS listener: A refuses it at the TLS handshake.
        nursery.start_soon(d.connect, "127.0.0.1", port_a)
        await until(lambda: any("incoming" in m and "TLS handshake failed" in m
                                for m in mesh_lines(caplog)))
        # A TLS peer dialling a plain listener: refused too (by both sides).
        nursery.start_soon(c.connect, "127.0.0.1", port_d)
        await until(lambda: any(m.startswith(f"peer 127.0.0.1:{port_d} ") and "TLS" in m
                                for m in mesh_lines(caplog)))
        # A connection that never starts TLS is dropped at the handshake deadline (2 s).
        await dropped_at_handshake_deadline(port_a, caplog,
                                            "TLS handshake not complete within 2 s")
        assert rec_a.ups == rec_c.ups == rec_d.ups == Counter()
        assert a.links() == c.links() == d.links() == {}

    run(test)


# ------------------------------------------------------------------ real routers


def test_two_routers_over_tls_deliver_exactly_once(tmp_path: Path, cas: Any) -> None:
    ca, _ = cas
    extra = {n: flags(tls_files(tmp_path, ca, n)) for n in "AB"}
    with start_mesh("line", 2, extra=extra) as mesh:
        mesh.wait_links_up()
        sub = Subscriber(mesh["B"].url, "orders/#", "audit", container_id="app-B")
        subc = start_clients(sub)
        pub = Publisher(mesh["A"].url, "orders/eu/paris", numbered(200, "tls-"), window=50)
        pubc = None
        try:
            mesh.wait_knows("A", sub, "B")
            pubc = start_clients(pub)
            wait_outcomes(pub)
            assert pub.states() == ["accepted"] * 200, mesh.logs()
            Tally([m.body for m in pub.messages], sub.bodies()).check_exactly_once_in_order()
        finally:
            stop_clients(*(c for c in (pubc, subc) if c is not None))
        # The mesh port speaks only TLS: a plain HELLO-sized frame is refused and logged.
        with socket.create_connection(("127.0.0.1", mesh["A"].mesh_port), timeout=5) as s:
            s.sendall(b"\x00\x00\x00\x05hello")
            while s.recv(65536):
                pass
        mesh["A"].wait_logged("TLS handshake failed")
        assert not mesh["A"].logged("refusing the link")


# ------------------------------------------------------------------ the command line


def test_a_partial_tls_option_set_is_refused(tmp_path: Path, cas: Any) -> None:
    files = tls_files(tmp_path, cas[0], "A")
    base = ["router", "--id", "A", "--amqp", "127.0.0.1:5672"]
    line = one_error_line(run_exactmesh(*base, "--peer-tls-cert", files["peer-tls-cert"],
                                        "--peer-tls-ca", files["peer-tls-ca"]))
    assert "peer-tls-key is missing" in line and "all three or none" in line
    # The same from the TOML file.
    cfg = tmp_path / "router.toml"
    cfg.write_text(f'peer-tls-key = "{files["peer-tls-key"]}"\n')
    line = one_error_line(run_exactmesh(*base, "--config", str(cfg)))
    assert "peer-tls-cert is missing" in line


@pytest.mark.parametrize(("option", "problem", "expect"), [
    ("peer-tls-ca", "missing", "No such file or directory"),
    ("peer-tls-cert", "junk", "no PEM certificate"),
    ("peer-tls-key", "junk", "not a PEM private key"),
    ("peer-tls-key", "other", "does not match the certificate"),
    ("peer-tls-ca", "junk", "no PEM CA certificate"),
])
def test_a_bad_tls_file_is_refused_naming_the_option(
        tmp_path: Path, cas: Any, option: str, problem: str, expect: str) -> None:
    files = tls_files(tmp_path, cas[0], "A")
    if problem == "missing":
        files[option] = str(tmp_path / "nowhere.pem")
    elif problem == "junk":
        (tmp_path / "junk.pem").write_text("not a PEM file\n")
        files[option] = str(tmp_path / "junk.pem")
    else:
        files[option] = tls_files(tmp_path / "other", cas[0], "B")[option]
    line = one_error_line(run_exactmesh("router", "--id", "A", "--amqp", "127.0.0.1:5672",
                                        *flags(files)))
    assert f"{option} '{files[option]}'" in line and expect in line


def test_tls_options_in_a_config_object(tmp_path: Path, cas: Any) -> None:
    assert RouterConfig(id="A", amqp=HostPort("127.0.0.1", 1)).peer_tls() is None
    with pytest.raises(ConfigError, match="peer-tls-ca is missing"):
        RouterConfig(id="A", amqp=HostPort("127.0.0.1", 1), peer_tls_cert="x",
                     peer_tls_key="y").peer_tls()
    server, client = contexts(tls_files(tmp_path, cas[0], "A")).values()
    for context in (server, client):
        assert context.verify_mode == ssl.CERT_REQUIRED and not context.check_hostname

"""amqp_edge.container.LeanContainer: proton's Container without its eager TLS contexts.

It copies what `Container.__init__` does in the pinned python-qpid-proton; if a proton
upgrade changes that, the attribute check here fails before a client misbehaves."""

from __future__ import annotations

from proton.reactor import Container

from amqp_edge.container import LeanContainer


def test_it_sets_what_proton_container_sets() -> None:
    plain, lean = Container(), LeanContainer()
    assert set(vars(plain)) - {"ssl"} == set(vars(lean)) - {"_ssl", "_ssl_built"}
    for name in ("allow_insecure_mechs", "allowed_mechs", "sasl_enabled", "user", "password",
                 "trigger"):
        assert getattr(lean, name) == getattr(plain, name), name
    assert type(lean.global_handler) is type(plain.global_handler)
    assert lean.container_id != plain.container_id  # each its own uuid


def test_tls_contexts_are_built_on_first_use_and_can_be_replaced() -> None:
    lean = LeanContainer()
    assert lean._ssl is None  # nothing built yet
    first = lean.ssl
    assert first is not None and lean.ssl is first  # built once
    lean.ssl = None
    assert lean.ssl is None

"""proton's `Container`, without the two TLS contexts it builds for every instance.

`proton.reactor.Container.__init__` creates an `SSLConfig` (a client and a server
`SSLDomain`, each an OpenSSL context loading the system's CA store): about 57 ms of CPU on
the 2-core test machine, more than everything else a client does to connect and attach. The
SDK never uses those (a TLS connection gets its own `ssl_domain`, amqp_edge.client), and the
Spark sink starts a publisher per chunk of rows, so the cost was a fifth of a Spark
partition's CPU. This subclass does what `Container.__init__` does (python-qpid-proton
0.40.0, pinned in pyproject.toml; tests/test_sdk_container.py checks that the attributes
match) but builds the `SSLConfig` only when something reads `container.ssl`.

proton's `Container.connect` reads `container.ssl.client` for every connection without an
`ssl_domain` (it uses it only for amqps:// URLs), so `LeanContainer.connect` passes one: a
default client domain, the same as proton's own default, built once per process and shared
(nothing here changes it after it is built).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from proton import SSLDomain, SSLUnavailable
from proton._reactor import GlobalOverrides, Reactor, SSLConfig
from proton.reactor import Container

_default_lock = threading.Lock()
_default_client: SSLDomain | None = None


def default_client_domain() -> SSLDomain:
    """proton's default TLS client context (the system's CAs), one per process."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = SSLDomain(SSLDomain.MODE_CLIENT)
        return _default_client


class LeanContainer(Container):
    """A `Container` whose `ssl` (proton's default TLS contexts) is built on first use."""

    def __init__(self, *handlers: Any, **kwargs: Any) -> None:
        Reactor.__init__(self, *handlers, **kwargs)
        self._ssl: SSLConfig | None = None
        self._ssl_built = False
        self.global_handler = GlobalOverrides(kwargs.get("global_handler",
                                                         self.global_handler))
        self.trigger = None
        self.container_id = kwargs.get("container_id", str(uuid.uuid4()))
        self.allow_insecure_mechs = True
        self.allowed_mechs = None
        self.sasl_enabled = True
        self.user = None
        self.password = None

    @property  # type: ignore[override]
    def ssl(self) -> SSLConfig | None:
        if not self._ssl_built:
            self._ssl_built = True
            try:
                self._ssl = SSLConfig()
            except SSLUnavailable:
                self._ssl = None
        return self._ssl

    @ssl.setter
    def ssl(self, value: SSLConfig | None) -> None:
        self._ssl, self._ssl_built = value, True

    def connect(self, *args: Any, ssl_domain: SSLDomain | None = None, **kwargs: Any) -> Any:
        return super().connect(*args, ssl_domain=ssl_domain or default_client_domain(),
                               **kwargs)

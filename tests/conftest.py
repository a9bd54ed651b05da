"""Test-wide set-up: choose between the compiled and the plain-Python per-message modules before
any test imports one (router/accel.py); importing `router.core` alone does not."""

import contextlib
import sys

import pytest

from router import accel

accel.guard()


@pytest.fixture(autouse=True)
def _stop_leftover_client_threads():
    """A test that fails before stopping its proton clients leaves their threads running; stop
    them here, so that one failure stays one failure and does not abort the interpreter at exit."""
    yield
    harness = sys.modules.get("tests.harness")
    if harness is None:
        return
    for client in list(harness.ClientThread.live):
        with contextlib.suppress(BaseException):
            client.stop()

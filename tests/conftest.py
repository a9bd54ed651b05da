"""Test-wide set-up: choose between the compiled and the plain-Python per-message modules before
any test imports one (router/accel.py); importing `router.core` alone does not."""

from router import accel

accel.guard()

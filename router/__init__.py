"""The router node: its sans-IO delivery engine and the runtime that wires edges to it."""

from . import accel

accel.guard()  # before anything imports a module that may be compiled (router/accel.py)

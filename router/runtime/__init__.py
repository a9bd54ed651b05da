"""The trio runtime around the core: the node that applies the engine's actions on the edges'
links and the mesh, its timers, and the status endpoint."""

from router import accel

accel.guard()  # before anything imports a module that may be compiled (router/accel.py)

"""Deterministic simulation of a whole exactmesh cluster in one process (FoundationDB style).

`world.World` runs N routers (engine + mesh node each), a simulated clock and a faulty network
between them, with simulated publishers and subscribers attached through the engine API; every
random choice comes from one seed. `checker.Checker` asserts the delivery properties of
docs/guarantees.md and ../shared/DESIGN-NOTES.md continuously and at the end.

Replay a run:  PYTHONHASHSEED=0 .venv/bin/python -m tests.sim.world 'seed=…,routers=…,…'
(or just a seed: `python -m tests.sim.world 1234` derives every parameter from it).
"""

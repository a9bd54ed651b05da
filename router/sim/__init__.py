"""Deterministic simulation of a whole exactmesh cluster in one process (FoundationDB style).

`world.World` runs N routers (engine + mesh node each), a simulated clock and a faulty network
between them, with simulated publishers and subscribers attached through the engine API, and
(`mqtt`) MQTT 5 devices speaking real packets to each router's real MQTT session; every
random choice comes from one seed. `checker.Checker` asserts the delivery properties of
docs/guarantees.md and ../shared/DESIGN-NOTES.md continuously and at the end. `command` is
`exactmesh sim`: many seeds, one line per failure. A run replays exactly from its spec alone
(against the same code, whatever the process's PYTHONHASHSEED):

    exactmesh sim --spec 'seed=…,routers=…,…' [-v]
    python -m router.sim 'seed=…,routers=…,…' [-v]

(or just a seed: `1234` derives every parameter from it, `f1234` the failover workload's,
`m1234` the failover workload's with MQTT devices).
"""

from router import accel

accel.guard()  # before anything imports a module that may be compiled (router/accel.py)

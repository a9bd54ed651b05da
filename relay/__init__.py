"""Relay agents (seed 000, docs/relay.md): what holds copies and outcomes for clients that are
only sometimes connected. `relay.store` is the durable store, used by the relay agent and by a
router started with `--relay-store`."""

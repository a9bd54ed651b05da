"""The router node: its sans-IO delivery engine and the runtime that wires edges to it."""

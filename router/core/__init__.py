"""The sans-IO delivery core: events in, actions out. It imports the standard library only
(the import-linter contracts in pyproject.toml hold it to that): no trio, no sockets, no
clock, no other package of this project."""

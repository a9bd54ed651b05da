"""A test bed of hosts made of Linux network namespaces, a nemesis and a checker
(docs/testbed.md): `python -m tests.hosts SCENARIO`."""

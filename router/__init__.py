"""The router node: `router.core` (the sans-IO delivery engine), `router.runtime` (trio) and the
command line. Importing `router` does nothing: clients import `router.core.topics` for the
topic helpers without loading a runtime or running the compiled-module guard."""

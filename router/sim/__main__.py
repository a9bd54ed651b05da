"""`python -m router.sim SPEC [-v]`: what `exactmesh sim --spec SPEC [-v]` does."""

import sys

from .command import replay
from .world import Params


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m router.sim SEED|SPEC [-v]\n"
              "  SPEC is 'seed=N,routers=3,...' as a failure prints it (also: exactmesh sim)")
        return 2
    return replay(Params.parse(argv[0]), verbose="-v" in argv[1:])


sys.exit(main(sys.argv[1:]))

"""Entry of the frozen plugin: one binary is kubectl-hami_place and, invoked under that name, its completion helper."""

import os
import sys

from kubectl_hami_place.entry import complete_main, main


def _entry() -> int:
    """kubectl 1.26+ runs `kubectl_complete-hami_place` for completion: a link to this binary under that name works."""
    invoked_as = os.path.basename(sys.argv[0]).removesuffix(".exe")
    return complete_main() if invoked_as.startswith("kubectl_complete-") else main()


if __name__ == "__main__":
    sys.exit(_entry())

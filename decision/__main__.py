"""``python -m decision ...``: the ``decision`` command, where its script is not on the PATH."""

import sys

from decision.cli import main

if __name__ == "__main__":  # not when imported (pydoc, autodoc walking the package)
    sys.exit(main())

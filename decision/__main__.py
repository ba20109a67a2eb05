"""``python -m decision ...``: the ``decision`` command, where its script is not on the PATH."""

import sys

from decision.cli import main

sys.exit(main())

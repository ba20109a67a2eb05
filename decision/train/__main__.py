"""``python -m decision.train --config FILE``: the training recipe without the full CLI."""

import sys

from decision.train.cli import main

sys.exit(main())

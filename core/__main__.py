"""``python -m kiq``: the ``kiq`` command."""

import sys

from .cli import main

sys.exit(main())

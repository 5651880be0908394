"""``python -m kiq.cli``: the ``kiq`` command."""

import sys

from . import main

sys.exit(main())

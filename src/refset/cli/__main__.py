"""``python -m refset.cli``: the ``refset`` command."""

import sys

from refset.cli import main

sys.exit(main())

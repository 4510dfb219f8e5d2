"""``python -m amp_suite.cli``: the command line, as ``amp-suite``."""

import sys

from amp_suite.cli import main

sys.exit(main())

"""``python -m amp_suite`` is the ``amp-suite`` command."""

import sys

from amp_suite.cli import main

sys.exit(main())

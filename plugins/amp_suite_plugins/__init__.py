"""amp-suite's built-in plugins.

Each module is registered through the ``amp_suite`` entry-point group, exactly
as a third-party plugin would be (see ``pyproject.toml``).  No module here
imports its framework at import time.
"""

"""amp-suite: identical FP32-vs-AMP benchmarks for PyTorch, Keras and JAX.

The package owns the pluggy markers.  Plugins (built-in or third-party) write::

    from amp_suite import hookimpl

    @hookimpl
    def framework_info():
        ...

and register their module through the ``amp_suite`` entry-point group.
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

PROJECT_NAME = "amp_suite"
ENTRY_POINT_GROUP = "amp_suite"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["__version__", "hookimpl", "hookspec", "PROJECT_NAME", "ENTRY_POINT_GROUP"]

"""amp-suite: identical FP32-vs-AMP benchmarks for PyTorch, Keras and JAX.

The package hands out the pluggy markers (declared in the leaf module
:mod:`amp_suite.markers`, which the package's own modules import, so none of
them imports this root).  Plugins (built-in or third-party) write::

    from amp_suite import hookimpl

    @hookimpl
    def framework_info():
        ...

and register their module through the ``amp_suite`` entry-point group.

Notebooks use :func:`amp_suite.run`, :func:`amp_suite.load`, :func:`amp_suite.compare`,
:func:`amp_suite.equivalence`, :func:`amp_suite.learning_curves`, :func:`amp_suite.run_numerics` and
:func:`amp_suite.numerics_report` (see
:mod:`amp_suite.api`); they are imported on first use, so ``import amp_suite``
stays cheap and imports neither pandas nor a framework (nor pluggy, until a
marker is asked for).  The root is the top
floor of the layering (docs/architecture.md, checked by tests/test_layering.py
like every module): it may import any module, and no module of the package
imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amp_suite.api import compare, equivalence, learning_curves, load, numerics_report, run, run_numerics
    from amp_suite.markers import ENTRY_POINT_GROUP, PROJECT_NAME, __version__, hookimpl, hookspec

__all__ = ["__version__", "hookimpl", "hookspec", "PROJECT_NAME", "ENTRY_POINT_GROUP", "run", "load", "compare",
           "equivalence", "learning_curves", "run_numerics", "numerics_report"]


# The markers too are handed out on first use: the command line (amp_suite.__main__) loads this root before it
# can catch a Ctrl-C, and the markers import pluggy.
_FROM_MARKERS = ("__version__", "hookimpl", "hookspec", "PROJECT_NAME", "ENTRY_POINT_GROUP")


def __getattr__(name: str):
    if name in _FROM_MARKERS:
        from amp_suite import markers

        return getattr(markers, name)
    if name in ("run", "load", "compare", "equivalence", "learning_curves", "run_numerics", "numerics_report"):
        from amp_suite import api

        return getattr(api, name)
    raise AttributeError(f"module 'amp_suite' has no attribute {name!r}")

"""A plugin may fail, never end the program: what only a program's end should raise becomes its failure.

``SystemExit``, a ``KeyboardInterrupt`` the plugin raised itself (the user's
Ctrl-C arrives as :class:`~amp_suite.errors.SweepInterrupted` and passes
through) and any other ``BaseException`` that is not an ``Exception`` become a
:class:`~amp_suite.errors.PluginError` naming the plugin and the hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from amp_suite.errors import PluginError, SweepInterrupted, one_line

# The end of the message of a plugin that tried to end the program (never a figure left out: the cell fails).
ENDING = "a plugin may not end the program"


@contextmanager
def contained(plugin: str, hook: str) -> Iterator[None]:
    """A hook call in which ending the program becomes the plugin's failure.

    ``SystemExit``, a ``KeyboardInterrupt`` the plugin raised itself (the
    user's Ctrl-C arrives as :class:`SweepInterrupted` and passes through) and
    any other ``BaseException`` that is not an ``Exception`` become a
    :class:`PluginError` naming ``plugin`` and ``hook``.
    """
    try:
        yield
    except (Exception, SweepInterrupted):
        raise
    except BaseException as exc:
        raise PluginError(f"plugin {plugin!r}: {hook} raised {_ending(exc)}; {ENDING}") from None


def _ending(exc: BaseException) -> str:
    """``SystemExit(3)``, ``KeyboardInterrupt``: how a program-ending exception is named in a message."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"[:200]
    return one_line(exc)

"""Standard output and error that go quiet when their reader is gone.

``amp-suite run ... | head -1`` closes the pipe after one line; a write then
raises ``BrokenPipeError`` wherever it happens (a progress line, a summary),
which would end a sweep with cells still to run.  :func:`quiet_when_closed`
wraps ``sys.stdout`` and ``sys.stderr``: the first write that finds its reader
gone points the stream's file descriptor at ``/dev/null``, and from then on
that stream says nothing while the command goes on (the sweep runs every cell
and writes its report; ``list`` and ``compare`` exit as usual, with no
traceback).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO


class QuietWhenClosed:
    """A text stream that drops what it cannot write once its reader has closed the pipe."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except OSError as exc:
                self._gone_if_closed(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except OSError as exc:
                self._gone_if_closed(exc)

    def _gone_if_closed(self, exc: OSError) -> None:
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
            raise exc
        self.reader_gone = True
        try:  # what the stream still buffers, and every later write, now goes nowhere
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def quiet_when_closed() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (once) in :class:`QuietWhenClosed`."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, QuietWhenClosed):
            setattr(sys, name, QuietWhenClosed(stream))

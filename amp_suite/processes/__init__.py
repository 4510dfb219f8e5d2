"""Processes amp-suite starts, and the trees they grow: every one ends with the work it was started for.

:mod:`.tree` starts a command under a small supervisor (:mod:`.supervisor`)
that owns everything the command starts, detached children included, and ends
all of it when the command ends, when a time limit passes, or when the host is
gone.
"""

"""Probe results shared by the processes of one test session, so two pytest-xdist lanes never run the same probe.

Under pytest-xdist every lane is a process of its own, and a session- or
module-scoped cache of probes lives in one lane only: the conformance class's
reference probes, or a module's probes, were run once per lane that needed
them (each a framework's whole step compiled and trained again).
:func:`shared_probe` keeps one result per request for the whole session in a
folder every lane sees: the first lane to ask runs the probe while it holds
that request's lock, and a lane asking later (or waiting on the lock) loads
what it wrote.  A probe that fails leaves nothing behind, so the next lane to
ask runs it again and sees the same failure.  :func:`shared_folder` does the
same for any folder of files a test session makes once (a module's
measurements from a process of their own).

The folder is ``AMP_SUITE_PROBE_CACHE`` where that is set (a fresh folder per
session: nothing in it is ever invalidated), else one the xdist lanes of this
run share under pytest's base temporary folder; a session without xdist
shares nothing (its own in-process caches suffice).  Locks are POSIX file
locks: where ``fcntl`` is missing every lane runs its own probes, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from amp_suite.testing.probes import ProbeRequest, ProbeResult, load_probe, run_probe
from amp_suite.testing.server import ProbeServer

try:
    from fcntl import LOCK_EX, LOCK_UN
    from fcntl import flock as _flock
except ImportError:  # not POSIX: no shared probes
    _flock = None  # type: ignore[assignment]

#: the environment variable naming the folder of a session's shared probes
PROBE_CACHE_ENV = "AMP_SUITE_PROBE_CACHE"
# Written into a shared folder once it was filled and its files are whole.
_COMPLETE = "complete"


def session_probe_folder(tmp_path_factory: Any) -> Path | None:
    """The folder this test session's lanes share their probes in, or None where nothing is shared.

    ``tmp_path_factory`` is pytest's fixture of that name: under xdist its
    base folder is the lane's own, inside the run's, which every lane shares.
    """
    chosen = os.environ.get(PROBE_CACHE_ENV)
    if chosen:
        return Path(chosen)
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not run_id:
        return None
    return Path(tmp_path_factory.getbasetemp()).parent / f"amp-suite-probes-{run_id}"


def shared_probe(request: ProbeRequest, *, session: Path | None, folder: Callable[[], Path],
                 server: Callable[[], ProbeServer | None] | None = None) -> ProbeResult:
    """The result of ``request``: loaded where a lane of this session already ran it, else run here and kept.

    ``session`` is :func:`session_probe_folder`'s answer (None: run it here, in
    ``folder()``).  ``server`` (None: a fresh process) is called only when the
    probe runs in this lane, so a lane that only loads results never starts a
    framework.
    """
    if session is None or _flock is None:
        return run_probe(request, folder(), server=server() if server else None)
    ran: list[ProbeResult] = []

    def run_here(entry: Path) -> None:
        ran.append(run_probe(request, entry, server=server() if server else None))

    key = hashlib.sha256(request.to_json().encode()).hexdigest()[:32]
    entry = shared_folder(session, key, run_here)
    return ran[0] if ran else load_probe(request, entry)


def shared_folder(session: Path, key: str, fill: Callable[[Path], None]) -> Path:
    """``session/key``, filled by ``fill(folder)`` once per test session however many lanes ask for it.

    The first lane to ask fills it while it holds that key's lock; a lane that
    asks later, or waited on the lock, gets the folder as it was filled.  A
    ``fill`` that raises leaves nothing behind, so the next lane to ask fills
    it again.  Where POSIX file locks are missing, every call fills a fresh
    folder of its own under ``session``.
    """
    session.mkdir(parents=True, exist_ok=True)
    if _flock is None:
        entry = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=session))
        fill(entry)
        return entry
    entry = session / key
    with _locked(session / f"{key}.lock"):
        if not (entry / _COMPLETE).exists():
            shutil.rmtree(entry, ignore_errors=True)  # an earlier lane's fill that failed half-way
            entry.mkdir(parents=True)
            try:
                fill(entry)
            except BaseException:
                shutil.rmtree(entry, ignore_errors=True)
                raise
            (entry / _COMPLETE).write_text(key, encoding="utf-8")
    return entry


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        _flock(handle.fileno(), LOCK_EX)
        try:
            yield
        finally:
            _flock(handle.fileno(), LOCK_UN)

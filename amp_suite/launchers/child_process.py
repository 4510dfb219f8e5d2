"""Helper processes (doctor and calibration probes) started the way workers are.

A probe is a fresh interpreter whose import path is the host's without the
current directory (a ``json.py`` where the user stands is never imported),
set before anything else is imported, and which dies with its host: it asks
the kernel for SIGKILL when its parent ends (``PR_SET_PDEATHSIG``) and
watches the host's pid (:mod:`amp_suite.host_watch`), exactly as workers do.
"""

from __future__ import annotations

import os
import signal
import sys

from amp_suite.host_watch import HOST_PID_ENV
from amp_suite.launchers.single import OWN_PATH, path_setter, worker_import_path

# Runs module ``sys.argv[1]`` as ``__main__`` after isolating the path and tying the process to its host.
ISOLATED_BOOTSTRAP = (
    path_setter(".pop") + "from amp_suite.host_watch import die_with_host_from_env; die_with_host_from_env(); "
    "import runpy; sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def isolated_command(module: str, *args: str, python: str = "") -> list[str]:
    """The command line running ``python -m MODULE ARGS`` with an isolated path; pair it with :func:`isolated_env`.

    ``python``: an environment's interpreter (pass ``own_path=True`` to :func:`isolated_env`), else this one.
    """
    return [python or sys.executable, "-c", ISOLATED_BOOTSTRAP, module, *args]


def isolated_env(base: dict[str, str] | None = None, *, own_path: bool = False) -> dict[str, str]:
    """``base`` (default: this environment) plus the import path and host pid the bootstrap reads.

    ``own_path``: the child keeps its own interpreter's path (an environment's), and no
    ``PYTHONPATH``/``PYTHONHOME`` of the host's reaches it.
    """
    env = dict(os.environ if base is None else base)
    if own_path:
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
    env["AMP_SUITE_WORKER_PATH"] = OWN_PATH if own_path else os.pathsep.join(worker_import_path())
    env[HOST_PID_ENV] = str(os.getpid())
    return env


def exit_description(code: int | None) -> str:
    """``exited with code 3`` or ``was killed by SIGKILL`` / ``by signal 40`` for a child's return code."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"

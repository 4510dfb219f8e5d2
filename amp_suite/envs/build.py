"""Building, inspecting and removing managed environments (``amp-suite env``).

A managed environment is a virtual environment in ``ENVS_DIR/NAME`` holding the
environment's requirements and amp-suite itself: the same source tree as the
host, installed editable, so workers run the very code the host planned with
(an amp-suite installed from a wheel is installed at the same version
instead).  It is built with uv (``uv venv`` + ``uv pip install``); where uv
is missing, with ``python -m venv`` and pip, and the build says so.

A build first creates the folder with amp-suite's marker in it
(:mod:`amp_suite.owned_paths`); amp-suite removes or rebuilds only a folder
carrying that marker (or, from builds before the marker, a stamp), checked
without following links.  A folder of another origin with an environment's
name is left alone and named in a one-line refusal.

The file :data:`STAMP` is written last, after every install succeeded: an
environment without it (a build killed half-way) is never called built, and
the next ``env create`` starts it afresh.  A failed or interrupted build
removes its folder.  The stamp keeps a fingerprint of what was asked for
(requirements, index options, the amp-suite source and the host's Python):
``env create`` keeps an environment whose fingerprint is unchanged and
rebuilds one whose fingerprint changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_suite.config.environments import EnvironmentSpec
from amp_suite.errors import UsageError
from amp_suite.markers import PACKAGE_DIR, __version__
from amp_suite.owned_paths import (
    NotOursError,
    has_marker,
    is_empty_directory,
    is_real_directory,
    make_marked_folder,
    read_private_file,
    refusal,
    remove_marked_folder,
)
from amp_suite.safe_files import write_file_atomically

STAMP = "amp-suite-env.json"
# Longest resolver reason quoted in a one-line error.
REASON_CHARS = 400
# Longest stamp read back.
STAMP_BYTES = 1 << 20
# What a refusal to touch a folder amp-suite did not make tells the user to do.
FOREIGN_FIX = "move it away, or set AMP_SUITE_ENVS to another folder"
# Seconds a version query of an environment's interpreter may take.
QUERY_TIMEOUT_S = 60.0

# Asks an interpreter for its prefix and the versions of the distributions named in argv.
_VERSIONS_QUERY = (
    "import sys, json, importlib.metadata as m\n"
    "def v(name):\n"
    "    try:\n"
    "        return m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'prefix': sys.prefix, 'executable': sys.executable, "
    "'python': '.'.join(map(str, sys.version_info[:3])), "
    "'versions': {n: v(n) for n in sys.argv[1:]}}))\n"
)


@dataclass(frozen=True)
class EnvironmentState:
    """What is on disk for one environment, as ``amp-suite env list`` shows it.

    ``built``: usable by workers (a managed one has its stamp and interpreter;
    a user's interpreter exists).  ``stale``: built for other requirements.
    ``problem`` says why it cannot be used ("" when it can).
    """

    spec: EnvironmentSpec
    python: Path
    folder: Path | None
    built: bool
    stale: bool = False
    versions: dict[str, str | None] = field(default_factory=dict)
    problem: str = ""


def interpreter_in(folder: Path) -> Path:
    """The interpreter of the virtual environment in ``folder``."""
    return folder / "bin" / "python"


def suite_source() -> tuple[str, str]:
    """How an environment gets amp-suite: ``("editable", SOURCE_DIR)`` or ``("release", "amp-suite==V")``."""
    root = PACKAGE_DIR.parent
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "amp-suite"' in project.read_text(encoding="utf-8", errors="replace"):
        return "editable", str(root)
    return "release", f"amp-suite=={__version__}"


def fingerprint(spec: EnvironmentSpec) -> str:
    """A digest of everything a build depends on: requirements, index options, amp-suite's source, Python."""
    mode, where = suite_source()
    project = Path(where) / "pyproject.toml"
    parts = {"requirements": list(spec.requirements), "options": spec.install_options(), "suite": [mode, where],
             "suite_project": project.read_text(encoding="utf-8", errors="replace") if mode == "editable" else "",
             "python": sys.version, "base": sys.base_prefix}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def requirement_names(requirements: tuple[str, ...]) -> list[str]:
    """The distribution names of requirement strings (``jax[cuda12]==0.10.2`` -> ``jax``)."""
    names = []
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match and match.group(1) not in names:
            names.append(match.group(1))
    return names


def query_interpreter(python: Path, names: list[str]) -> dict[str, Any]:
    """``{"prefix", "executable", "python", "versions"}`` as ``python`` itself reports them.

    Raises :class:`OSError` or :class:`RuntimeError` when it cannot answer.
    """
    from amp_suite.processes import tree as process_tree

    done = process_tree.run([str(python), "-I", "-c", _VERSIONS_QUERY, *names], capture_output=True, text=True,
                            timeout=QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} exited with code {done.returncode}: {tail[:200]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def _read_stamp(folder: Path) -> dict[str, Any] | None:
    """The stamp of a finished build (no link followed), or None."""
    data = read_private_file(folder, STAMP, STAMP_BYTES)
    if data is None:
        return None
    try:
        stamp = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get("fingerprint"), str) else None


def made_by_amp_suite(folder: Path) -> bool:
    """True for an environment folder amp-suite built: its marker, or (builds before the marker) its stamp."""
    return has_marker(folder) or (is_real_directory(folder) and _read_stamp(folder) is not None)


def state_of(spec: EnvironmentSpec, envs_dir: Path) -> EnvironmentState:
    """The environment's state on disk (asks no interpreter: cheap enough for every sweep)."""
    if not spec.managed:
        python = Path(spec.python)
        usable = python.is_file() and _executable(python)
        return EnvironmentState(spec, python, None, usable,
                                problem="" if usable else f"its interpreter {python} does not exist or cannot be "
                                                          f"run (fix python in [environments.\"{spec.name}\"])")
    folder = envs_dir / spec.name
    python = interpreter_in(folder)
    stamp = _read_stamp(folder)
    if stamp is None:
        if os.path.lexists(folder) and not made_by_amp_suite(folder) and not is_empty_directory(folder):
            return EnvironmentState(spec, python, folder, False,
                                    problem=f"{folder} is not an environment amp-suite built (it holds no marker); "
                                            f"amp-suite leaves it alone: {FOREIGN_FIX}")
        why = ("is not built" if not os.path.lexists(folder) else
               "was never finished (a build stopped half-way)")
        return EnvironmentState(spec, python, folder, False,
                                problem=f"environment {spec.name!r} {why}: run `amp-suite env create {spec.name}`")
    if not _executable(python):
        return EnvironmentState(spec, python, folder, False, versions=stamp.get("versions", {}),
                                problem=f"environment {spec.name!r} is broken ({python} is missing): run "
                                        f"`amp-suite env create {spec.name}`")
    stale = stamp.get("fingerprint") != fingerprint(spec)
    return EnvironmentState(spec, python, folder, True, stale, stamp.get("versions", {}))


def _executable(path: Path) -> bool:
    return os.access(path, os.X_OK) and path.exists()


def find_uv() -> str | None:
    """uv's executable: the ``uv`` package's, else one on ``PATH``; None where there is none."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def build_commands(spec: EnvironmentSpec, folder: Path, uv: str | None) -> list[list[str]]:
    """The commands that build ``spec`` in ``folder``: a virtual environment, then one install."""
    python = str(interpreter_in(folder))
    mode, source = suite_source()
    suite = ["-e", source] if mode == "editable" else [source]
    if uv is not None:
        return [[uv, "venv", "--allow-existing", "--python", sys.executable, str(folder)],
                [uv, "pip", "install", "--python", python, *spec.install_options(), *spec.requirements, *suite]]
    return [[sys.executable, "-m", "venv", str(folder)],
            [python, "-m", "pip", "install", "--disable-pip-version-check", *spec.install_options(),
             *spec.requirements, *suite]]


def failure_reason(lines: list[str]) -> str:
    """The one line that says why an install failed: the resolver's "Because ...", an error line, or the last."""
    text = [line.rstrip() for line in lines]
    for index, line in enumerate(text):
        if "Because " in line:  # the resolver's explanation (uv: "cause: Because ..." or "╰─▶ Because ...")
            parts = [line[line.index("Because "):].strip()]
            for more in text[index + 1:]:
                if not more.strip() or more.lstrip().startswith(("hint:", "help:", "cause:", "error:")):
                    break
                parts.append(more.strip())
            return _cut(" ".join(parts))
    errors = [line.strip() for line in text if line.strip().lower().startswith(("error:", "× "))]
    causes = [line.strip() for line in text if line.strip().startswith("Caused by:")]
    if errors:
        return _cut(" ".join([errors[0], *causes[:2]]))
    last = [line.strip() for line in text if line.strip()]
    return _cut(last[-1] if last else "no output")


def _cut(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + "..."


def _run_streamed(command: list[str], emit: Callable[[str], None]) -> tuple[int, list[str]]:
    """Run ``command``, passing each output line to ``emit``; its exit code and lines."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               stdin=subprocess.DEVNULL, errors="replace")
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.strip():
                emit(line.rstrip())
        return process.wait(), lines
    except BaseException:
        process.kill()
        process.wait()
        raise


def create(spec: EnvironmentSpec, envs_dir: Path, *, emit: Callable[[str], None] = lambda line: None,
           uv: str | None | bool = True) -> tuple[EnvironmentState, str]:
    """Build ``spec`` unless it is built for the same fingerprint; its state and what was done.

    ``uv``: True finds uv, a path uses that one, None/False builds with venv
    and pip.  Raises :class:`UsageError` (one line, the installer's reason)
    when the build fails; the half-built folder is removed then, and on an
    interrupt.
    """
    if not spec.managed:
        state = state_of(spec, envs_dir)
        if not state.built:
            raise UsageError(state.problem)
        return state, f"uses {spec.python} (an interpreter you manage: nothing to build)"
    state = state_of(spec, envs_dir)
    if state.built and not state.stale:
        return state, "already built for these requirements: kept"
    folder = envs_dir / spec.name
    done = "rebuilt (its requirements changed)" if state.built else "built"
    installer = find_uv() if uv is True else (uv or None)
    if installer is None:
        emit("uv is not installed: building with python -m venv and pip (slower; pip install uv to use uv)")
    started = time.perf_counter()
    if os.path.lexists(folder) and not made_by_amp_suite(folder) and not is_empty_directory(folder):
        raise refusal(folder, f"build environment {spec.name!r} over it", FOREIGN_FIX)
    try:
        remove_marked_folder(folder, ours=made_by_amp_suite, fix=FOREIGN_FIX)
        envs_dir.mkdir(parents=True, exist_ok=True)
        make_marked_folder(folder)
    except OSError as exc:
        raise UsageError(f"environment {spec.name!r} cannot be built in {envs_dir}: {exc.strerror or exc} "
                         "(set AMP_SUITE_ENVS to a folder you can write)") from None
    try:
        for command in build_commands(spec, folder, installer if isinstance(installer, str) else None):
            code, lines = _run_streamed(command, emit)
            if code != 0:
                raise UsageError(f"environment {spec.name!r} could not be built: {failure_reason(lines)}")
        names = [*requirement_names(spec.requirements), "amp-suite"]
        answer = query_interpreter(interpreter_in(folder), names)
        stamp = {"name": spec.name, "framework": spec.framework, "requirements": list(spec.requirements),
                 "fingerprint": fingerprint(spec), "installer": "uv" if installer else "venv+pip",
                 "build_seconds": round(time.perf_counter() - started, 1), "prefix": answer["prefix"],
                 "python": answer["python"], "versions": answer["versions"]}
        write_file_atomically(folder / STAMP, json.dumps(stamp, indent=2))
    except BaseException as exc:
        try:
            remove_marked_folder(folder, fix=FOREIGN_FIX)  # made above, marker first
        except NotOursError:  # its marker was replaced during the build: what is there now is left alone
            pass
        if isinstance(exc, (UsageError, KeyboardInterrupt)):
            raise
        if isinstance(exc, (OSError, RuntimeError, ValueError, subprocess.SubprocessError)):
            raise UsageError(f"environment {spec.name!r} could not be built: {exc}") from None
        raise
    return state_of(spec, envs_dir), f"{done} in {time.perf_counter() - started:.0f} s with " + (
        "uv" if installer else "venv and pip")


def remove(spec: EnvironmentSpec, envs_dir: Path) -> str:
    """Remove a managed environment's folder; what was done.

    Raises :class:`~amp_suite.owned_paths.NotOursError` (nothing removed) when
    the folder is not one amp-suite built.
    """
    if not spec.managed:
        return f"{spec.name} uses {spec.python}, which amp-suite did not build: left alone"
    folder = envs_dir / spec.name
    if not remove_marked_folder(folder, ours=made_by_amp_suite, fix=FOREIGN_FIX):
        return f"{spec.name} is not built: nothing to remove"
    return f"removed {folder}"

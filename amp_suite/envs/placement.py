"""Which interpreter runs each framework a sweep names.

``--frameworks torch@2.12,torch@2.13,keras`` names two environments and a
framework.  An environment's name runs its framework in that environment and
labels its cells with the name; a framework's name runs in
``[environments."NAME"]`` of the same name when one is declared, on a GPU
sweep in the framework's built GPU environment (``gpu = true``) when there is
one, and otherwise in this interpreter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from amp_suite.config.environments import EnvironmentSpec
from amp_suite.envs.build import state_of
from amp_suite.errors import UsageError
from amp_suite.schema import closest, shown

# Seconds a user's interpreter has to say whether it has amp-suite (less where the sweep's --timeout is less).
INTERPRETER_CHECK_S = 60.0


@dataclass(frozen=True)
class Placement:
    """Where one requested framework name runs.

    ``label`` is the name as requested (it labels the cells); ``framework``
    the plugin that runs them; ``environment`` the environment ("" for this
    interpreter) and ``python`` its interpreter; ``problem`` says why the
    environment cannot run cells now ("" when it can): those cells end
    ``unavailable`` with it, and the others run.
    """

    label: str
    framework: str
    environment: str = ""
    python: str = ""
    problem: str = ""
    stale: bool = False


def place_frameworks(requested: Iterable[str], environments: Mapping[str, EnvironmentSpec],
                     frameworks: Iterable[str], envs_dir: Path, device_kind: str = "cpu",
                     timeout_s: float = INTERPRETER_CHECK_S) -> dict[str, Placement]:
    """A :class:`Placement` for every requested name; an unknown name is a one-line error.

    ``timeout_s``: the longest a user's interpreter may take to answer whether it has amp-suite (the
    sweep's ``--timeout`` where that is shorter than :data:`INTERPRETER_CHECK_S`).
    """
    known = list(frameworks)
    placements: dict[str, Placement] = {}
    for name in requested:
        spec = environments.get(name)
        if spec is None and name in known and device_kind == "gpu":
            spec = _built_gpu_environment(name, environments, envs_dir)
        if spec is None:
            if name not in known:
                others = [n for n in environments if n not in known]
                _refuse_unknown_backend(name, known, others)
                raise UsageError(f"unknown framework {shown(name)}; allowed: {', '.join(known)}"
                                 f"{closest(name, [*known, *others])}"
                                 + (f"; or an environment: {', '.join(others)}" if others else ""))
            placements[name] = Placement(name, name)
            continue
        if spec.framework not in known:
            raise UsageError(f"environment {name!r} runs framework {spec.framework!r}, which no loaded plugin "
                             f"provides; known: {', '.join(known)}")
        if spec.name in known and spec.framework != spec.name:
            raise UsageError(f"environment {spec.name!r} is named after a framework but runs {spec.framework!r}; "
                             f"an environment named after a framework must run it (framework = {spec.name!r})")
        state = state_of(spec, envs_dir)
        problem = state.problem or (suite_missing(spec, timeout_s) if state.built and not spec.managed else "")
        placements[name] = Placement(name, spec.framework, spec.name,
                                     str(state.python) if state.built and not problem else "", problem, state.stale)
    return placements


def _refuse_unknown_backend(name: str, known: list[str], others: list[str]) -> None:
    """``keras@mxnet``: a framework's backend it does not have, refused naming the backends it has."""
    family, _, backend = name.partition("@")
    backends = [n for n in known if n == family or n.startswith(f"{family}@")]
    if backend and any(n.startswith(f"{family}@") for n in backends):
        raise UsageError(f"unknown backend {shown(backend)} of {family} ({shown(name)}); allowed: {', '.join(backends)}"
                         + (f"; or an environment: {', '.join(others)}" if others else ""))


def _built_gpu_environment(framework: str, environments: Mapping[str, EnvironmentSpec],
                           envs_dir: Path) -> EnvironmentSpec | None:
    """The first built environment of the GPU set that runs ``framework``."""
    for spec in environments.values():
        if spec.gpu and spec.framework == framework and state_of(spec, envs_dir).built:
            return spec
    return None


def suite_missing(spec: EnvironmentSpec, timeout_s: float = INTERPRETER_CHECK_S) -> str:
    """Why a user's interpreter cannot run workers: it has no amp-suite ("" when it has one).

    The check is a supervised tree (:mod:`amp_suite.processes.tree`): an interpreter that hangs is ended,
    with whatever it started, after ``timeout_s`` seconds (at most :data:`INTERPRETER_CHECK_S`).
    """
    import subprocess

    from amp_suite.processes import tree as process_tree

    limit = min(timeout_s, INTERPRETER_CHECK_S)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('amp_suite') is None)"
    try:
        done = process_tree.run([spec.python, "-I", "-c", probe], capture_output=True, timeout=limit,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"environment {spec.name!r}: its interpreter {spec.python} did not answer within {limit:g} s"
    except OSError as exc:
        return f"environment {spec.name!r}: its interpreter {spec.python} cannot be run: {exc}"
    if done.returncode == process_tree.CANNOT_START:
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        return f"environment {spec.name!r}: its interpreter {spec.python} cannot be run: {reason}"
    if done.returncode != 0:
        return (f"environment {spec.name!r}: its interpreter {spec.python} has no amp-suite; install it there "
                f"({spec.python} -m pip install amp-suite, or -e this source tree)")
    return ""


def describe_placement(placement: Placement) -> str:
    """Where a framework's processes run, in words: the environment and its interpreter, or this interpreter."""
    import sys

    if placement.environment:
        return f"environment {placement.environment} ({placement.python or 'not usable: ' + placement.problem})"
    return f"this interpreter ({sys.executable})"


def place_for_checks(names: Iterable[str], environments: Mapping[str, EnvironmentSpec], frameworks: Iterable[str],
                     config_path: Path | None, device_kind: str) -> dict[str, Placement]:
    """Where ``doctor`` and ``calibrate`` run each framework: where a sweep on ``device_kind`` (cpu or gpu)
    would (a GPU sweep's built GPU environment, a declared environment of the framework's name, else this
    interpreter)."""
    from amp_suite.config.environments import environments_dir

    return place_frameworks(names, environments, frameworks, environments_dir(config_path), device_kind)

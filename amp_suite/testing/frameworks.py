"""Which frameworks a test can run here, and what their plugins declare (no framework imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from amp_suite.records import FrameworkInfo
from amp_suite.testing.probes import PROBE_TIMEOUT_S, REFERENCE_FRAMEWORKS


def framework_installed(framework: str, plugin_modules: tuple[str, ...] = ()) -> bool:
    """Whether a plugin provides ``framework`` and every module it needs is installed (nothing imported)."""
    from amp_suite.plugins.host import PluginHost

    info = PluginHost(extra_modules=plugin_modules).frameworks().get(framework)
    return info is not None and not info.missing_modules()


def reference_framework(exclude: str = "", candidates: tuple[str, ...] = REFERENCE_FRAMEWORKS) -> str | None:
    """The first installed built-in framework other than ``exclude`` (torch, then jax, then keras)."""
    for name in candidates:
        if name != exclude and framework_installed(name):
            return name
    return None


def framework_info(framework: str, plugin_modules: tuple[str, ...] = ()) -> FrameworkInfo:
    """The :class:`~amp_suite.records.FrameworkInfo` a plugin gives for ``framework`` (nothing imported)."""
    from amp_suite.plugins.host import PluginHost

    frameworks = PluginHost(extra_modules=plugin_modules).frameworks()
    if framework not in frameworks:
        raise AssertionError(f"no plugin provides framework {framework!r}; loaded: {', '.join(frameworks) or 'none'}")
    return frameworks[framework]


def missing_layer_kinds(info: FrameworkInfo) -> list[str]:
    """The kinds of the layer vocabulary (``amp_suite.workloads.kinds.KINDS``) ``info`` does not declare.

    In vocabulary order; every kind when the backend declares none
    (``FrameworkInfo.layer_kinds`` empty).
    """
    from amp_suite.workloads.kinds import missing_kinds

    return missing_kinds(info.layer_kinds)


def assert_declares_layer_kinds(info: FrameworkInfo, *, lacks: tuple[str, ...] = ()) -> None:
    """``info`` declares every kind of the vocabulary but ``lacks``, and no kind the vocabulary does not have.

    A backend that declares nothing is told to declare (a sweep cannot then
    tell which workloads it builds); one that lacks kinds gets them listed, so
    a new kind of the vocabulary shows up here as the one entry to add.
    ``lacks`` names kinds a backend leaves out on purpose (a CNN-only backend:
    the token kinds).
    """
    from amp_suite.workloads.kinds import KINDS

    if not info.layer_kinds:
        raise AssertionError(f"framework {info.name!r} declares no layer kinds: set FrameworkInfo.layer_kinds to the "
                             f"kinds its plugin builds (the vocabulary: {', '.join(KINDS)})")
    unknown = [kind for kind in info.layer_kinds if kind not in KINDS]
    if unknown:
        raise AssertionError(f"framework {info.name!r} declares kinds the vocabulary does not have: "
                             f"{', '.join(unknown)} (the vocabulary: {', '.join(KINDS)})")
    missing = [kind for kind in missing_layer_kinds(info) if kind not in lacks]
    if missing:
        raise AssertionError(f"framework {info.name!r} lacks {len(missing)} layer kind(s) of the vocabulary: "
                             f"{', '.join(missing)} (docs/layers.md defines each; add one entry per kind to the "
                             "plugin's table and to FrameworkInfo.layer_kinds)")
    built = [kind for kind in lacks if kind in info.layer_kinds]
    if built:
        raise AssertionError(f"framework {info.name!r} declares {', '.join(built)}, which the test says it lacks: "
                             "take them out of lacks_kinds")


def jax_compiles_to_build(framework: str, workload: str, table: dict[str, Any], *, precision: str = "fp32",
                          plugin_modules: tuple[str, ...] = (), timeout: float = PROBE_TIMEOUT_S) -> int:
    """How many XLA programs a JAX-based backend compiles in ``build_model``, for ``workload`` built from its
    ``[workloads]`` ``table``: counted in a fresh process without a compilation cache (a program read from a
    cache would go uncounted).

    Run eagerly, every initializer and each of the optimizer's ``zeros`` compiles a program of its own (450
    for an EfficientNet-B0); traced for shapes (``jax.eval_shape``, ``nnx.eval_shape``) with the optimizer's
    init jitted, a build compiles a few.
    """
    request = {"framework": framework, "workload": workload, "table": table, "precision": precision,
               "plugin_modules": list(plugin_modules)}
    env = {name: value for name, value in os.environ.items() if name != "JAX_COMPILATION_CACHE_DIR"}
    with tempfile.TemporaryDirectory(prefix="amp-suite-build-compiles-") as folder:
        path = Path(folder) / "request.json"
        path.write_text(json.dumps(request))
        done = subprocess.run([sys.executable, "-m", "amp_suite_plugins.jax.build_compiles", str(path)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError(f"building {workload} in {framework} failed (exit {done.returncode}):\n"
                             f"{done.stderr[-3000:]}")
    return int(json.loads(done.stdout.splitlines()[-1])["compiles"])

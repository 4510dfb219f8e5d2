"""Shared fixtures (a tiny sweep config, a clean fake-framework environment) and the helpers on the path.

Test modules never import this file: what they share lives in ``tests/helpers/`` (``suite_cli``:
the repository root, the tiny config, the CLI runner).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Test modules import the helpers (suite_cli, processes, ...) as top-level modules: pytest puts
# tests/helpers on sys.path (``pythonpath`` in pyproject.toml) before it reads this file.
from amp_suite.plugins.loading import DISABLE_ENV
from amp_suite.testing.shared_probes import PROBE_CACHE_ENV
from suite_cli import (
    CHART_REPORTERS,
    XLA_LLVM_LEVEL_FLAG,
    disabled_besides_charts,
    nvidia_gpu_present,
    tiny_config_file,
)

HELPERS = Path(__file__).parent / "helpers"
REPO_ROOT = Path(__file__).resolve().parent.parent
# The environment variables this session sets, undone when it ends.
_SESSION_ENVIRONMENT = pytest.StashKey[pytest.MonkeyPatch]()
# The cache folders (compiles, probe results) this process made (the controller's), removed when the session ends.
_CACHES_MADE = pytest.StashKey[list[str]]()
# TensorFlow's flag that keeps its XLA compiles (jit_compile=True functions) in a folder, read from TF_XLA_FLAGS.
TF_XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def _lane_threads() -> int | None:
    """OpenMP threads for the framework processes of one xdist lane: the cores shared by the lanes, or None
    outside xdist, with one lane, or where the caller chose OMP_NUM_THREADS."""
    lanes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if lanes <= 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    return max(1, len(os.sched_getaffinity(0)) // lanes)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test that starts a real framework (seconds to minutes on 2 "
                                       "cores); -m 'not slow' leaves them out")
    # Worker processes import the test plugins (fakefw, ghostfw) by module name: for this session they
    # find them through PYTHONPATH, which pytest_unconfigure gives back as it was.
    environment = config.stash[_SESSION_ENVIRONMENT] = pytest.MonkeyPatch()
    environment.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH", ""))
                                                     if p))
    # Each xdist lane's PyTorch (and oneDNN) processes get their share of the cores, not all of them: with two
    # lanes on two cores, two OpenMP pools of two threads each spin against each other (the real time-to-target
    # test took 180 s beside another lane, 35 s alone, 51 s with one thread).  No assertion depends on the count;
    # set OMP_NUM_THREADS, or run with -n 0, to choose otherwise.
    threads = _lane_threads()
    if threads is not None:
        environment.setenv("OMP_NUM_THREADS", str(threads))
    # One XLA compilation cache for the session's JAX processes (both lanes and their probes, cells and the Flax
    # example's own suite inherit it): many probes compile the very same step (one model, precision and batch size,
    # asked for different steps or counters), and each is a fresh process that would compile it again.  A cache
    # hit replaces XLA's compile only: tracing still runs, so the checks that count traces count the same.  The
    # controller makes the folder; xdist's workers inherit it.  Set JAX_COMPILATION_CACHE_DIR to choose another.
    # JAX keeps only compiles that took a second or more; the suite's small models compile in less, again in every
    # probe, so the session keeps every compile (JAX-heavy tests, two lanes: 298 s -> 234 s, same run, two each).
    made = config.stash[_CACHES_MADE] = []
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        environment.setenv("JAX_COMPILATION_CACHE_DIR", _session_folder("xla-cache", made))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            environment.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    # One folder of probe results for the session (amp_suite.testing.shared_probes): a probe that both lanes, or
    # a lane and the Flax example's own suite (its reference is the built-in JAX plugin), ask for runs once.
    if PROBE_CACHE_ENV not in os.environ:
        environment.setenv(PROBE_CACHE_ENV, _session_folder("probes", made))
    # The charts and the HTML page (which embeds the charts) are drawn by matplotlib in the host after every sweep,
    # whatever the test checks: a three-cell sweep of the fake framework used 5.4 s of CPU with them and 3.7 s
    # without (AMD EPYC, AVX2; three runs each), and the suite runs about 170 sweeps.  They are off in the session's
    # sweeps, as a user turns them off (AMP_SUITE_DISABLE_PLUGINS, docs/reports.md); the tests of what they draw and
    # of the files they write ask for them with the report_charts fixture.  A value the caller exported is kept.
    if DISABLE_ENV not in os.environ:
        environment.setenv(DISABLE_ENV, ",".join(CHART_REPORTERS))
    # The same for TensorFlow's XLA: its persistent cache keys a compile by the program, so the Keras probes that
    # compile a step another probe compiled (the conformance kit's, in one server process or several) load it
    # instead.  Measured on a Keras resnet8 probe of 3 steps: 12.7 s of CPU cold, 8.8 s with its step cached; the
    # Keras conformance class (24 tests, -n 0), two runs each: 233 and 191 s of CPU without it, 214 and 179 s with it.
    # TF_XLA_FLAGS that already name a cache folder are left as they are.
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if TF_XLA_CACHE_FLAG not in flags:
        folder = _session_folder("tf-xla-cache", made)
        environment.setenv("TF_XLA_FLAGS", f"{flags} {TF_XLA_CACHE_FLAG}={folder}".strip())
    # XLA's LLVM stage unoptimized (-O0) in the session's XLA compiles on a machine without an NVIDIA GPU: JAX's,
    # Keras's on TensorFlow and on JAX, the Flax example's.  The level is read by LLVM alone, after every HLO pass:
    # the program each plugin builds and XLA optimizes and fuses, which the checks judge (dtypes, operations,
    # numerics against PyTorch and float64), is the same (tests/test_xla_test_level.py compares the optimized HLO of
    # both levels); what changes is how LLVM turns fused loops into machine code (no FMA contraction, reductions not
    # vectorized), so round-off, within every tolerance, and speed, which the tests leave to benchmarks/.  Measured
    # on 2 cores (AMD EPYC, AVX2): the backbone and transformer modules (72 tests) used 819 s of CPU at XLA's default
    # and 561 s at 0.
    # Outside the tests amp-suite leaves the level alone (XLA's default); benchmarks/full_size_comparisons.py names
    # the default for its comparisons, and the real-MNIST sweep of tests/test_end_to_end.py for its cells (their
    # time is training, not compiling).  Name a level in XLA_FLAGS to choose another.
    xla_flags = os.environ.get("XLA_FLAGS", "")
    if XLA_LLVM_LEVEL_FLAG not in xla_flags and not nvidia_gpu_present():
        environment.setenv("XLA_FLAGS", f"{xla_flags} {XLA_LLVM_LEVEL_FLAG}=0".strip())
    # PyTorch inductor's kernels and graphs (torch.compile: the compiled modes and the compile option) in a folder of
    # the session's, not /tmp/torchinductor_$USER, which outlives runs: a run then compiles what it checks, and
    # nothing an earlier run built under other settings can answer for it.  Its key evidently leaves out ATen's
    # instruction set: a run with ATEN_CPU_CAPABILITY=avx2 (how docs/architecture.md emulates an AVX2-only CPU) on
    # the folder default runs had filled trained mnist_cnn to a loss of 2.7e31; a fresh folder trained like eager.
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        environment.setenv("TORCHINDUCTOR_CACHE_DIR", _session_folder("inductor-cache", made))
    if not hasattr(config, "workerinput"):  # the controller, once: the xdist lanes start after it
        _compile_the_projects_modules()


def _compile_the_projects_modules() -> None:
    """Write the bytecode of the repository's own modules (``__pycache__``, git-ignored) before any test runs.

    pip compiles what it installs into site-packages, but an editable install leaves ``amp_suite/`` and
    ``builtin/`` as source; where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines set it), none of
    the session's ~650 Python processes may write what it compiled, so every one compiled the ~200 modules it
    imports again: a three-cell sweep of the fake framework used 5.6 s of CPU, 4.8 s with its modules compiled
    (AMD EPYC, AVX2).  Existing up-to-date files are only checked; Python reads them with or without the
    variable."""
    import compileall

    for folder in ("amp_suite", "builtin", "tests", "examples"):
        compileall.compile_dir(str(REPO_ROOT / folder), quiet=2, workers=1)


def _session_folder(name: str, made: list[str]) -> str:
    """A new temporary folder ``amp-suite-tests-NAME-*``, listed in ``made`` to be removed when the session ends."""
    folder = tempfile.mkdtemp(prefix=f"amp-suite-tests-{name}-")
    made.append(folder)
    return folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The tests that start a real framework first, each group in its own order: the xdist lanes then end on
    # short tests, which even them out, instead of one lane starting a minutes-long test as the other runs dry.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    items[:] = _interleaved(items)


def _interleaved(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each module that names ``INTERLEAVE_BY`` (a parametrized fixture whose value the lanes
    compute once and share, under a lock) taking its values in turn: test 1 of each value, then test 2, ...

    pytest groups a module's tests by such a fixture's value, and xdist hands consecutive tests to alternate
    lanes, so both lanes asked for the same value at once: one computed it while the other waited on the lock
    (tests/test_transformers_keras.py: 42, 69 and 8 s of a lane idle, one wait per Keras backend).  Taken in
    turn, the lanes compute different values side by side; re-entering a computed value reads its file.
    """
    out: list[Any] = []  # tests, and a module where its interleaved tests go
    pending: dict[Any, list[pytest.Item]] = {}
    for item in items:
        fixture = getattr(getattr(item, "module", None), "INTERLEAVE_BY", None)
        callspec = getattr(item, "callspec", None)
        if fixture is None or callspec is None or fixture not in callspec.params:
            out.append(item)
            continue
        module = item.module
        if module not in pending:
            pending[module] = []
            out.append(module)  # a placeholder where the module's first such test stood
        pending[module].append(item)
    result: list[pytest.Item] = []
    for entry in out:
        if isinstance(entry, pytest.Item):
            result.append(entry)
            continue
        fixture = entry.INTERLEAVE_BY
        by_value: dict[Any, list[pytest.Item]] = {}
        for item in pending[entry]:
            by_value.setdefault(item.callspec.params[fixture], []).append(item)
        queues = list(by_value.values())
        while queues:
            result.extend(queue.pop(0) for queue in queues)
            queues = [queue for queue in queues if queue]
    return result


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup`` (pyproject), xdist's scheduler with the tests that start a local cluster, and
    those one probe server answers, each kept in one lane as one unit of work (``lane_units.lane_scheduler``);
    otherwise xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from lane_units import lane_scheduler

    return lane_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    environment = config.stash.get(_SESSION_ENVIRONMENT, None)
    if environment is not None:
        environment.undo()
    for folder in config.stash.get(_CACHES_MADE, []):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    return tiny_config_file(tmp_path)


@pytest.fixture
def report_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's sweeps and reports draw the charts and write report.html, as a plain run does: the plugins the
    session leaves out (CHART_REPORTERS) are loaded again; any other plugin the variable names stays out."""
    kept = disabled_besides_charts(os.environ.get(DISABLE_ENV, ""))
    if kept:
        monkeypatch.setenv(DISABLE_ENV, kept)
    else:
        monkeypatch.delenv(DISABLE_ENV, raising=False)


@pytest.fixture
def clean_fake_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("FAKEFW_MODE", "FAKEFW_TARGET", "FAKEFW_PIDFILE", "FAKEFW_GATE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch

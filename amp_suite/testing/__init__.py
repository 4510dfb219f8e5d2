"""A conformance kit for plugin authors: run a backend through the hooks and check the contract.

Importing this package imports no framework and no pytest.  The pieces:

* :func:`run_probe` runs one framework plugin through every per-run hook in a
  fresh process (one framework per process) and returns a :class:`ProbeResult`;
* the ``assert_*`` functions check one contract each and raise
  ``AssertionError`` with the numbers that failed;
* :mod:`amp_suite.testing.conformance` has :class:`BackendConformance`, a
  pytest test class that runs every check for a framework: subclass it with
  ``framework = "NAME"`` and pytest collects the whole suite;
* :func:`sample_results` and :func:`run_reporter` test a reporter plugin.

``docs/writing-a-plugin.md`` documents every name exported here; a test
checks the signatures against this module.

The kit lives in rooms of one job (:mod:`~amp_suite.testing.probes`: running
a probe; :mod:`~amp_suite.testing.shared_probes`: one probe's result shared by
the xdist lanes of a session; :mod:`~amp_suite.testing.frameworks`: which frameworks are there;
:mod:`~amp_suite.testing.checks`: the checks;
:mod:`~amp_suite.testing.reporters`: testing a reporter); import every name
from this package, where it stays.
"""

from __future__ import annotations

from amp_suite.testing.checks import (
    assert_batch_norm_in_float32,
    assert_cell_ok,
    assert_compiles_once,
    assert_deterministic,
    assert_gradients_match_reference,
    assert_kept_in_float32,
    assert_layer_dtypes,
    assert_matches_reference,
    assert_no_loss_scaling,
    assert_one_wait_per_window,
    assert_optimizer_arithmetic,
    assert_overflow_skipped,
    assert_reduced_precision,
    assert_scale_grows,
    assert_static_scale,
    assert_training_predict_changes_nothing,
    assert_trains_like_reference,
    assert_trajectory_halves,
    relative_error,
    relative_l2,
    relative_l2_floored,
)
from amp_suite.testing.frameworks import (
    assert_declares_layer_kinds,
    framework_info,
    framework_installed,
    jax_compiles_to_build,
    missing_layer_kinds,
    reference_framework,
)
from amp_suite.testing.probes import (
    FRAMEWORK_VERSION_PATTERN,
    OPTIMIZER_CHECKS,
    OPTIMIZERS,
    PROBE_TIMEOUT_S,
    REFERENCE_FRAMEWORKS,
    WORKLOADS,
    GradientStep,
    ProbeRequest,
    ProbeResult,
    load_probe,
    run_probe,
)
from amp_suite.testing.reporters import (
    run_reporter,
    sample_results,
)
from amp_suite.testing.server import ProbeServer
from amp_suite.testing.shared_probes import PROBE_CACHE_ENV, session_probe_folder, shared_folder, shared_probe
from amp_suite.testing.traces import check_trace_step

__all__ = [
    "FRAMEWORK_VERSION_PATTERN", "GradientStep", "OPTIMIZERS", "OPTIMIZER_CHECKS", "PROBE_CACHE_ENV", "PROBE_TIMEOUT_S",
    "ProbeRequest", "ProbeResult", "ProbeServer", "REFERENCE_FRAMEWORKS", "WORKLOADS",
    "assert_batch_norm_in_float32", "assert_cell_ok", "assert_compiles_once", "assert_declares_layer_kinds",
    "assert_deterministic",
    "assert_gradients_match_reference", "assert_kept_in_float32", "assert_layer_dtypes", "assert_matches_reference", "assert_no_loss_scaling",
    "assert_one_wait_per_window", "assert_optimizer_arithmetic", "assert_overflow_skipped",
    "assert_reduced_precision", "assert_scale_grows", "assert_static_scale", "assert_training_predict_changes_nothing",
    "assert_trains_like_reference", "assert_trajectory_halves", "check_trace_step", "framework_info", "framework_installed", "jax_compiles_to_build", "load_probe",
    "missing_layer_kinds", "reference_framework", "relative_error", "relative_l2", "relative_l2_floored",
    "run_probe", "run_reporter", "sample_results", "session_probe_folder", "shared_folder", "shared_probe",
]

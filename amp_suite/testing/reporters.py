"""Testing a reporter plugin: three sample cells, and a reporter loaded and run on them with its answer checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amp_suite.records import CellResult


def sample_results() -> list[CellResult]:
    """Three cells as a reporter receives them: two ``ok`` (fp32 and amp_bf16) and one ``failed``."""
    def cell(precision: str, status: str, throughput: float | None, error: str = "") -> CellResult:
        metrics = {} if throughput is None else {
            "throughput": throughput, "step_time_median_s": 128 / throughput, "first_step_loss": 2.30,
            "final_loss": 2.1, "val_accuracy": 0.2, "val_loss": 2.2, "param_count": 824_458,
            "peak_rss_bytes": 900 * 2 ** 20, "framework_version": "numpy 2.0"}
        return CellResult(key=f"fake/mnist_cnn/{precision}/r0", framework="fake", workload="mnist_cnn",
                          precision=precision, repeat=0, status=status, error=error,
                          config={"batch_size": 128, "steps": 20, "epochs": 1, "warmup": 5, "dataset": "synthetic"},
                          applied={"compute_dtype": "float32" if precision == "fp32" else "bfloat16",
                                   "loss_scaling": "none"}, metrics=metrics)

    return [cell("fp32", "ok", 1000.0), cell("amp_bf16", "ok", 1500.0),
            cell("amp_fp16", "failed", None, "RuntimeError: example failure")]


def run_reporter(module: str, out_dir: Path | str, results: list[CellResult] | None = None,
                 environment: dict[str, Any] | None = None) -> list[Path]:
    """Load reporter ``module`` (no entry points), call ``write_report`` and check the answer.

    Returns the paths it wrote; raises ``AssertionError`` if the plugin failed
    to load, raised, returned the wrong type, named a file that does not exist
    or lies outside ``out_dir``, wrote the sweep's ``results.jsonl`` or
    ``environment.json``, or wrote under a name of amp-suite's own files
    (``report.md``, ``results.csv``, a ``chart-*.png``: the two reporters would
    replace each other's file).
    """
    import fnmatch

    from amp_suite.machine.environment import host_environment
    from amp_suite.plugins.host import PluginHost
    from amp_suite.sweep.output_dir import CHART_PATTERN, ENVIRONMENT_FILE, RESULTS_FILE, SWEEP_FILES
    from amp_suite.sweep.report_files import BUILT_IN_REPORT_FILES

    host = PluginHost(extra_modules=(module,), autoload=False)
    assert not host.failures, f"{module} failed to load: {host.failures}"
    out = Path(out_dir)
    outcome = host.write_report(sample_results() if results is None else results, out,
                                host_environment() if environment is None else environment,
                                stored=(RESULTS_FILE, ENVIRONMENT_FILE), built_in=BUILT_IN_REPORT_FILES)
    assert not outcome.failures, f"reporter failed: {outcome.failures}"
    missing = [p for p in outcome.written if not Path(p).is_file()]
    assert not missing, f"reported paths that do not exist: {missing}"
    taken = [Path(p).name for p in outcome.written
             if Path(p).name in SWEEP_FILES or fnmatch.fnmatchcase(Path(p).name, CHART_PATTERN)]
    assert not taken, (f"writes {', '.join(taken)}, a name of amp-suite's own files (its built-in reporters' or "
                       "the sweep's): one would replace the other; choose names of your own")
    return list(outcome.written)

"""The Python API: run a sweep, load one, or compare two, as pandas DataFrames.

For notebooks::

    import amp_suite

    df = amp_suite.run(frameworks=["torch"], precisions=["fp32", "amp_bf16"], steps=20)
    df[["framework", "precision", "throughput", "val_accuracy"]]
    df = amp_suite.load("amp-suite-results")
    amp_suite.equivalence("amp-suite-results")   # a sweep with --seeds: AMP - fp32 over seeds, verdicts

``run`` and ``load`` return one row per cell with the columns of ``results.csv``
(:data:`amp_suite.report.normalize.CELL_COLUMNS` and the figures the report derives).
``amp-suite run`` is built on the same engine (:func:`amp_suite.sweep.engine.sweep`),
so the command line and the API check the same inputs, hold the same output
lock and write the same files.  Bad input raises
:class:`amp_suite.errors.UsageError` with the one-line message the command
line prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.config.settings import SweepSettings
from amp_suite.errors import UsageError
from amp_suite.records import CellResult
from amp_suite.schema import closest, comma_separated
from amp_suite.sweep.engine import AUTO_FIRST_REPEATS, AUTO_MAX_REPEATS, SweepRequest, sweep
from amp_suite.sweep.stored import load_results

if TYPE_CHECKING:  # pandas is imported only when a frame is built
    import pandas as pd

# Sweep settings the API and ``run`` accept as keywords (``steps=20``, ``dataset="mnist"``).
SETTING_NAMES = tuple(f.name for f in fields(SweepSettings))


# --- the notebook API ------------------------------------------------------------


def _names(value: Any, keyword: str) -> tuple[str, ...] | None:
    """A list, a tuple or a comma-separated string of names, as a tuple (``keyword`` names it in an error)."""
    if value is None:
        return None
    if isinstance(value, str):
        return comma_separated(value, f"{keyword}=")
    from amp_suite.sweep.request_checks import listed

    return listed(value)  # a generator as a tuple; anything else not a list reaches the schema, which names it


def run(
    frameworks: Iterable[str] | str | None = None,
    workloads: Iterable[str] | str | None = None,
    precisions: Iterable[str] | str | None = None,
    *,
    config: str | Path | None = None,
    preset: str | None = None,
    plugins: Iterable[str] = (),
    resume: bool = False,
    force: bool = False,
    inline: bool = False,
    quiet: bool = False,
    price_per_hour: float | None = None,
    currency: str | None = None,
    **settings: Any,
) -> pd.DataFrame:
    """Run a sweep and return one row per cell (the columns of ``results.csv``).

    ``settings`` are any :class:`~amp_suite.config.settings.SweepSettings` field:
    ``steps``, ``epochs``, ``warmup``, ``batch_size``, ``repeats``,
    ``timeout``, ``seed``, ``device``, ``dataset``, ``train_split``
    (``repeats="auto"``: as ``--repeats auto``),
    ``val_split``, ``data_dir``, ``download``, ``synthetic_fallback``,
    ``out``, the sweep axes ``modes`` (e.g. ``["eager", "compiled"]``) and
    ``batch_sizes`` (e.g. ``[128, 512]``) with ``learning_rate_rule``, and
    ``seeds`` (a count, ``5``, or a list, ``[0, 1, 2]``) with
    ``equivalence_margin`` and ``curve_every``,
    and the data-parallel ``devices`` (e.g. ``[1, 2]``),
    ``sync_batch_norm``, ``nnodes``, ``node_rank``, ``coordinator``.  Anything not given comes from
    ``preset`` (a ``[presets.NAME]`` table) when given, else from ``[defaults]`` (the packaged catalog's,
    or that of ``benchmarks.toml``), exactly as for ``amp-suite run``; the output directory
    receives the same files.  The frame's ``attrs`` hold ``out_dir``,
    ``exit_code`` (that of ``amp-suite run``) and ``interrupted``.  The
    progress lines of ``amp-suite run`` go to stderr, as plain lines where it
    is not a terminal (a notebook, a log file): a line per cell with the
    sweep's ETA, and the running cell's steps every few seconds; ``quiet=True``
    leaves them out.  The verdict (each AMP precision against fp32) is printed
    on stdout at the end, as ``amp-suite run`` prints it.  ``force=True``
    (``--force``) replaces report files in the output directory that
    amp-suite did not write (an edited ``report.md``); without it they stop
    the sweep before any cell runs.
    """
    unknown = [name for name in settings if name not in SETTING_NAMES]
    if unknown:
        raise UsageError(f"unknown setting {unknown[0]!r}{closest(unknown[0], SETTING_NAMES)}; "
                         f"allowed: {', '.join(SETTING_NAMES)}")
    auto = 0
    if settings.get("repeats") == "auto":  # as --repeats auto
        settings = {**settings, "repeats": AUTO_FIRST_REPEATS}
        auto = AUTO_MAX_REPEATS
    overrides = {**settings, "frameworks": _names(frameworks, "frameworks"),
                 "workloads": _names(workloads, "workloads"), "precisions": _names(precisions, "precisions")}
    cost = {k: v for k, v in (("price_per_hour", price_per_hour), ("currency", currency)) if v is not None}
    from amp_suite.progress import SweepProgress
    from amp_suite.sweep import request_checks  # the CLI's messages for the same mistakes

    if "devices" in overrides:
        overrides["devices"] = request_checks.device_counts(overrides["devices"])
    request = SweepRequest(config=request_checks.config_path(config), overrides=overrides,
                           plugins=request_checks.plugin_names(plugins), resume=request_checks.flag("resume", resume),
                           force=request_checks.flag("force", force), inline=request_checks.flag("inline", inline),
                           quiet=request_checks.flag("quiet", quiet),
                           cost=cost, preset=preset, auto_repeats=auto)
    outcome = sweep(request, progress=SweepProgress())
    frame = results_table(outcome.results, outcome.environment)
    frame.attrs.update(out_dir=str(outcome.out_dir), exit_code=outcome.exit_code,
                       interrupted=outcome.stopped_by is not None)
    return frame


def results_table(results: list[CellResult], environment: dict[str, Any] | None = None) -> pd.DataFrame:
    """The per-cell frame of ``results.csv`` for ``results``."""
    from amp_suite.report.normalize import results_frame

    return results_frame(results, environment or {})


def compare(base: str | Path, new: str | Path) -> pd.DataFrame:
    """Two sweep directories matched cell by cell: one row per cell and metric, NEW/BASE with its interval.

    See :mod:`amp_suite.comparison`; ``frame.attrs["markdown"]`` is what ``amp-suite compare`` prints.
    """
    from amp_suite.comparison import compare as compare_directories
    from amp_suite.sweep.request_checks import directory_path

    return compare_directories(directory_path("base", base), directory_path("new", new))


def load(directory: str | Path, *, price_per_hour: float | None = None,
         currency: str | None = None, strict: bool = True) -> pd.DataFrame:
    """One row per cell of a finished (or running) sweep's ``results.jsonl``, as in ``results.csv``.

    ``price_per_hour``/``currency`` replace the sweep's cost settings.  A
    stored value a report cannot use (a wrong type, an impossible or oversized
    value) raises :class:`amp_suite.errors.StoredValueError` naming the file,
    line and field; with ``strict=False`` such fields are dropped with a
    warning on stderr instead, as ``amp-suite report`` does.
    """
    from amp_suite.config.cost import cost_settings
    from amp_suite.sweep import request_checks

    directory = request_checks.directory_path("directory", directory)
    results, environment = load_results(directory, strict=request_checks.flag("strict", strict))
    cost = cost_settings(environment.get("cost") or {},
                         **{k: v for k, v in (("price_per_hour", price_per_hour), ("currency", currency))
                            if v is not None})
    if cost:
        environment["cost"] = cost
    frame = results_table(results, environment)
    frame.attrs["out_dir"] = str(directory)
    return frame


def equivalence(directory: str | Path, *, margin: float | None = None, strict: bool = True) -> pd.DataFrame:
    """A sweep's paired differences over seeds and their verdicts, one row per comparison and figure.

    For every workload, framework and AMP precision, the difference AMP −
    fp32 of validation accuracy (points) and of the final validation loss,
    paired by seed, with its 95% interval and verdict; then each framework
    against the sweep's first at fp32.  The columns are
    :data:`amp_suite.report.seeds.EQUIVALENCE_COLUMNS`; ``margin`` (percentage
    points) replaces the sweep's ``equivalence_margin``.  See
    :mod:`amp_suite.report.seeds`.
    """
    from amp_suite.config.settings import SETTINGS_FIELDS
    from amp_suite.report.seeds import equivalence_frame, margin_of
    from amp_suite.schema import check_value
    from amp_suite.sweep import request_checks

    if margin is not None:
        margin = check_value("equivalence_margin", margin, SETTINGS_FIELDS["equivalence_margin"])
    directory = request_checks.directory_path("directory", directory)
    results, environment = load_results(directory, strict=request_checks.flag("strict", strict))
    frame = equivalence_frame(results_table(results, environment),
                              margin if margin is not None else margin_of(environment))
    frame.attrs["out_dir"] = str(directory)
    return frame


def learning_curves(directory: str | Path, *, strict: bool = True) -> pd.DataFrame:
    """Every learning-curve point a sweep's cells stored (``curve_every``): one row per cell and point.

    The columns are :data:`amp_suite.report.curves.POINT_COLUMNS` (``steps``,
    ``val_loss``, ``val_accuracy`` beside the cell's workload, framework,
    precision, seed and repeat); :func:`amp_suite.report.curves.curve_bands`
    turns them into the median and min–max band over seeds the report shows.
    """
    from amp_suite.report.curves import curve_points
    from amp_suite.sweep import request_checks

    directory = request_checks.directory_path("directory", directory)
    results, _ = load_results(directory, strict=request_checks.flag("strict", strict), missing_environment=None)
    frame = curve_points(results)
    frame.attrs["out_dir"] = str(directory)
    return frame


def run_numerics(workloads: str | Iterable[str], frameworks: str | Iterable[str],
             precisions: str | Iterable[str] = ("amp_fp16", "amp_bf16"), *, steps: int = 3,
             out: str | Path = "amp-suite-numerics", batch_size: int | None = None, seed: int = 0,
             device: str = "auto", timeout: float = 600.0, dataset: str | None = None,
             config: str | Path | None = None, plugins: str | Iterable[str] | None = None,
             inline: bool = False, bisect: bool = False, tolerance: float = 0.01,
             max_runs: int = 6, force: bool = False) -> pd.DataFrame:
    """``amp-suite numerics`` from Python: trace, compare, write the files, and return :func:`numerics_report`.

    The same checks as the command line: an unknown name or a bad number is a
    one-line :class:`UsageError` before anything runs.  A run that fails is a
    row of ``frame.attrs["runs"]`` with its status, never an exception.
    ``bisect=True`` also searches for layers to keep in float32 (``--bisect``):
    its result is ``frame.attrs["bisect"]``.  An ``out`` holding an earlier run's results is refused unless
    ``force=True`` (``--force``), which replaces them.
    """
    from amp_suite.shadow.command import numerics
    from amp_suite.shadow.plan import NumericsRequest
    from amp_suite.sweep import request_checks

    def names(label: str, value: Any) -> tuple[str, ...]:
        given = _names(value, label)
        if not isinstance(given, tuple) or not all(isinstance(item, str) for item in given):
            raise UsageError(f"{label} must be a name, a comma-separated text or a list of names, got {value!r}")
        return given

    request = NumericsRequest(
        workloads=names("workloads", workloads), frameworks=names("frameworks", frameworks),
        precisions=names("precisions", precisions), steps=steps, out=out, batch_size=batch_size, seed=seed,
        device=device, timeout=timeout, config=config, plugins=names("plugins", plugins or ()),
        inline=inline, dataset=dataset, bisect=bisect, tolerance=tolerance, max_runs=max_runs,
        force=request_checks.flag("force", force))
    outcome = numerics(request)
    return numerics_report(outcome.out_dir)


def numerics_report(directory: str | Path) -> pd.DataFrame:
    """The layer rows of ``amp-suite numerics``'s ``DIRECTORY/numerics.jsonl``, one per run, shadow, step, layer
    and tensor (the fields of :class:`amp_suite.numerics.records.LayerNumerics`); ``frame.attrs["runs"]`` holds
    each run's record (:class:`amp_suite.numerics.records.NumericsRun`) as a dict, ``frame.attrs["bisect"]`` the
    search of ``--bisect`` (:class:`amp_suite.numerics.records.BisectOutcome`) as a dict, or ``None``."""
    import dataclasses

    import pandas as pd

    from amp_suite.numerics.records import LayerNumerics
    from amp_suite.shadow.report import LAYERS_FILE
    from amp_suite.shadow.stored import read_numerics_and_search
    from amp_suite.sweep import request_checks

    directory = request_checks.directory_path("directory", directory)
    if not (directory / LAYERS_FILE).is_file():
        raise UsageError(f"{str(directory)!r} holds no {LAYERS_FILE}: give the --out of an amp-suite numerics run")
    runs, layers, search = read_numerics_and_search(directory)
    frame = pd.DataFrame([dataclasses.asdict(row) for row in layers],
                         columns=[f.name for f in dataclasses.fields(LayerNumerics)])
    frame.attrs["runs"] = [dataclasses.asdict(run) for run in runs]
    frame.attrs["bisect"] = None if search is None else dataclasses.asdict(search)
    frame.attrs["out_dir"] = str(directory)
    return frame

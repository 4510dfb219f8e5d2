"""The commands that run or read sweeps: ``run``, ``report``, ``compare``, ``calibrate`` and ``numerics``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from amp_suite.cli.shared import (
    _cost_overrides,
    _csv,
    _host,
    _print_reporter_failures,
    out_text,
)
from amp_suite.config.catalog import find_config, load_config
from amp_suite.config.settings import overrides_from_flags
from amp_suite.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError

# Longest path `report` prints whole (Linux's PATH_MAX): a listing of files is not cut like a message.
PATH_MAX = 4096


def cmd_run(args: argparse.Namespace) -> int:
    from amp_suite.progress import SweepProgress
    from amp_suite.sweep.engine import SweepRequest, execute, resolve

    overrides = overrides_from_flags(args)
    auto = 0
    if overrides["repeats"] == "auto":
        from amp_suite.sweep.engine import AUTO_FIRST_REPEATS, AUTO_MAX_REPEATS

        overrides["repeats"], auto = AUTO_FIRST_REPEATS, AUTO_MAX_REPEATS
    request = SweepRequest(config=args.config, overrides=overrides, plugins=tuple(args.plugin),
                           resume=args.resume, force=args.force, inline=args.inline, quiet=args.quiet,
                           cost=_cost_overrides(args), preset=args.preset, auto_repeats=auto,
                           executor=args.executor, ray_address=args.ray_address)
    plan = resolve(request)
    if args.dry_run:  # the plan alone: no output directory, no data, no worker
        if args.resume:  # the warning the run itself gives when its settings differ from the stored sweep's
            from dataclasses import asdict

            from amp_suite.sweep.stored import warn_about_other_settings

            warn_about_other_settings(plan.out_dir, asdict(plan.settings))
        print("\n".join(plan.lines()))
        return EXIT_OK
    return execute(plan, progress=SweepProgress()).exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from amp_suite.config.cost import cost_settings
    from amp_suite.report.text import path_text
    from amp_suite.sweep.output_dir import report_lock
    from amp_suite.sweep.report_files import write_recorded_report
    from amp_suite.sweep.stored import load_results

    host = _host(args.plugin)
    with report_lock(args.directory):  # a running sweep's store never changes under the report
        results, environment = load_results(Path(args.directory))
        _check_report_replaceable(Path(args.directory), results, args.force)
        cost = cost_settings(environment.get("cost") or {}, **_cost_overrides(args))
        if cost:
            environment["cost"] = cost
        outcome = write_recorded_report(host, results, Path(args.directory), environment)
    if outcome.written:  # a line each: a newline in the folder's name is shown escaped, never splits one
        print("\n".join(path_text(p, limit=PATH_MAX) for p in outcome.written))
    _warn_about_settings(results, environment)
    _print_reporter_failures(outcome)
    if args.open and not _open_html_report(outcome.written):
        return EXIT_USAGE
    return EXIT_USAGE if outcome.failures else EXIT_OK


def _warn_about_settings(results: list, environment: dict) -> None:
    """One warning line per row the report could not compare with its fp32 row (or its tf32 row, base mode's,
    one-device row's): cells of runs with other settings side by side in one folder (the header names them too)."""
    from amp_suite.report.notes import not_compared
    from amp_suite.report.summary import summary_frame
    from amp_suite.report.superseded import without_superseded

    summary = summary_frame(*without_superseded(results, environment))
    for line in not_compared(summary) if not summary.empty else []:
        print(f"amp-suite: warning: not compared: {line}", file=sys.stderr)


def _open_html_report(written: list[Path]) -> bool:
    """Open the report.html among ``written`` in a browser; ``False`` (and why, on stderr) when none was written."""
    import webbrowser

    page = next((Path(p) for p in written if Path(p).name == "report.html"), None)
    if page is None:
        print("amp-suite: error: --open: no report.html was written (is the html reporter turned off in "
              "AMP_SUITE_DISABLE_PLUGINS, or did it fail?)", file=sys.stderr)
        return False
    if not webbrowser.open(page.resolve().as_uri()):
        print(f"amp-suite: no web browser could be started; open {out_text(page.resolve())} yourself",
              file=sys.stderr)
    return True


def _check_report_replaceable(directory: Path, results: list, force: bool) -> None:
    """Refuse to replace a report file amp-suite did not write (an edited report.md, your own results.csv), or a
    report with one of no result, unless ``force``."""
    from amp_suite.owned_paths import FORCE_FLAG
    from amp_suite.sweep.report_files import check_report_files_replaceable

    report = directory / "report.md"
    check_report_files_replaceable(directory, force=force, other_way="move it out of the folder first")
    if not results and os.path.lexists(report) and not force:
        raise UsageError(f"{out_text(directory / 'results.jsonl')} holds no valid result: the existing "
                         f"{out_text(report)} is kept (pass {FORCE_FLAG} to replace it with a report of no result)")


def cmd_compare(args: argparse.Namespace) -> int:
    from amp_suite.comparison import compare, regressions, unjudged

    if args.fail_above is not None and not 0 <= args.fail_above <= 100:
        raise UsageError(f"--fail-above must be a percentage from 0 to 100, got {args.fail_above:g}")
    if args.out is not None:
        _check_compare_out(args.out, args.force)
    frame = compare(args.base, args.new)
    print(frame.attrs["markdown"])
    if args.out is not None:
        from amp_suite.safe_files import write_file_atomically

        try:
            write_file_atomically(Path(args.out), frame.attrs["markdown"] + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {out_text(args.out)}: {exc.strerror or exc}") from None
    if args.fail_above is None:
        return EXIT_OK
    if frame.empty:  # a guard that compared nothing must not pass as one that found nothing worse
        print(f"amp-suite: error: --fail-above has nothing to judge: {out_text(args.base)} and "
              f"{out_text(args.new)} share no cell (same workload, framework, precision, devices and device kind)",
              file=sys.stderr)
        return EXIT_FAILED
    worse = regressions(frame, args.fail_above)
    for row in worse.itertuples():
        print(f"amp-suite: regression: {row.workload} / {row.framework} / {row.precision}: {row.metric} "
              f"{row.ratio:.3f}x of BASE ({row.low:.3f}–{row.high:.3f}), beyond -{args.fail_above:g}%",
              file=sys.stderr)
    blind = unjudged(frame)
    if len(blind):
        print(f"amp-suite: --fail-above could not judge {len(blind)} throughput and speed-up "
              f"row{'s' if len(blind) != 1 else ''} (no spread on one side or both: a single repeat of a single "
              "timed window); run both sweeps with --repeats 2 or more", file=sys.stderr)
    return EXIT_FAILED if len(worse) else EXIT_OK


def _check_compare_out(text: str, force: bool) -> None:
    """Refuse ``compare --out`` with no file name, over a sweep's stored results, and over a file compare did not
    write unless ``force``; before anything is printed."""
    from amp_suite.comparison import FIRST_LINE
    from amp_suite.owned_paths import check_replaceable
    from amp_suite.sweep.output_dir import STORED_FILES, is_suite_output

    if not str(text).strip() or not Path(text).name.strip():
        raise UsageError(f"--out must name a file, got {str(text)!r}")
    out = Path(text)
    shown = out_text(out)
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {shown}: the folder {out_text(out.parent)} does not exist")
    if out.name in STORED_FILES and is_suite_output(out.parent):
        raise UsageError(f"refusing --out {shown}: it is a sweep's stored {out.name}, which amp-suite never "
                         "replaces; choose another file")
    check_replaceable(out, command="amp-suite compare", first_line=FIRST_LINE, force=force)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from amp_suite.calibration.ceiling import calibrate

    config_path = find_config(args.config)
    return calibrate(frameworks=_csv(args.frameworks, "--frameworks"), device=args.device, force=args.force,
                     host=_host(args.plugin), budget_s=args.budget, config_path=config_path,
                     environments=load_config(config_path).environments)


def cmd_numerics(args: argparse.Namespace) -> int:
    from amp_suite.shadow.flags import cmd_numerics as run_numerics

    return run_numerics(args)

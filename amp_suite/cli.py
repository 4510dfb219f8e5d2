"""The ``amp-suite`` command line.

Importing this module imports no framework: torch, TensorFlow and JAX are
imported only inside the worker process that runs a cell.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import NoReturn

from amp_suite.config.catalog import find_config, load_config
from amp_suite.config.settings import add_setting_flags, check_names, overrides_from_flags, parse_list
from amp_suite.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PluginError, SweepInterrupted, UsageError
from amp_suite.markers import __version__
from amp_suite.modes import MODES
from amp_suite.precision import PRECISIONS

# Signals that stop a sweep the way Ctrl-C does.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _exit_code_for(signum: int) -> int:
    """The shell's code for a process ended by ``signum`` (130 for Ctrl-C)."""
    return 128 + signum


@contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`SweepInterrupted` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise SweepInterrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UsageError(message)


def _csv(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else parse_list(text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="amp-suite", description=(
        "Measure what automatic mixed precision buys in PyTorch, Keras and JAX on identical "
        "workloads, and report it in one normalized table."))
    parser.add_argument("--version", action="version", version=f"amp-suite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a sweep and write report.md, results.jsonl, results.csv")
    run.add_argument("--config", help="configuration extending the packaged catalog (default: ./benchmarks.toml "
                                      "when there is one)")
    run.add_argument("--preset", metavar="NAME",
                     help="fill the sweep from [presets.NAME] (amp-suite list shows them); flags still win")
    add_setting_flags(run)  # one flag per sweep setting, declared in amp_suite/config/settings.py
    run.add_argument("--resume", action="store_true", help="skip cells already ok in OUT/results.jsonl")
    run.add_argument("--inline", action="store_true",
                     help="run cells in this process (debugging; frameworks then share a process)")
    run.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                     help="load an extra plugin module (repeatable)")
    run.add_argument("--price-per-hour", type=float, help="price of this machine per hour: cost columns")
    run.add_argument("--currency", help="currency of --price-per-hour (default USD)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.add_argument("--executor", metavar="local|ray|slurm",
                     help="where cells run: here one after another (local, the default), as Ray tasks or as "
                          "Slurm jobs ([executor] in benchmarks.toml; docs/cluster.md)")
    run.add_argument("--ray-address", metavar="HOST:PORT",
                     help="the Ray cluster to submit to (default: a local Ray instance started for the sweep)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the plan (cells, environments, where each runs, estimated time) and run nothing")

    report = sub.add_parser("report", help="re-render the report from DIR/results.jsonl")
    report.add_argument("directory", help="a sweep's output directory")
    report.add_argument("--price-per-hour", type=float, help="price of the machine per hour: cost columns")
    report.add_argument("--currency", help="currency of --price-per-hour (default USD)")
    report.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                        help="load an extra plugin module (repeatable)")
    report.add_argument("--force", action="store_true",
                        help="replace a report.md amp-suite did not write, or write a report of no result over "
                             "an existing one")
    report.add_argument("--open", action="store_true", help="open the written report.html in a web browser")

    cmp = sub.add_parser("compare", help="compare two sweeps' results cell by cell, with intervals and verdicts",
                         description="Match the cells of two sweep directories and print one markdown table per "
                                     "metric: BASE, NEW, NEW/BASE with its 95% interval and a verdict (faster, "
                                     "slower, no measurable difference); the environments' differences first.")
    cmp.add_argument("base", metavar="BASE", help="the reference sweep's output directory")
    cmp.add_argument("new", metavar="NEW", help="the sweep to judge against it")
    cmp.add_argument("--fail-above", type=float, metavar="PCT",
                     help="exit 1 when a throughput or speed-up is slower by more than PCT percent, outside the noise")
    cmp.add_argument("--out", metavar="FILE", help="also write the markdown to FILE (an existing FILE only if "
                                                   "amp-suite compare wrote it)")
    cmp.add_argument("--force", action="store_true",
                     help="let --out replace a file amp-suite compare did not write (never a sweep's stored results)")

    cal = sub.add_parser("calibrate", help="measure this machine's peak matmul and convolution TFLOP/s "
                                           "per framework and dtype (cached per machine)")
    cal.add_argument("--frameworks", help="comma-separated (default: every installed framework)")
    cal.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                     help="the device to measure: auto (a GPU when there is one), cpu or gpu (default auto)")
    cal.add_argument("--budget", type=float, default=1.0,
                     help="seconds of timing per measurement (default 1)")
    cal.add_argument("--force", action="store_true", help="measure again even if cached")
    cal.add_argument("--config", help="configuration declaring [environments]: each framework is measured in the "
                                      "environment a sweep would run it in (default: ./benchmarks.toml when there is "
                                      "one)")
    cal.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                     help="load an extra plugin module (repeatable)")

    lst = sub.add_parser("list", help="frameworks (installed or not), workloads, presets and precisions, "
                                      "with where each workload and preset comes from")
    lst.add_argument("--config", help="configuration extending the packaged catalog (default: ./benchmarks.toml "
                                      "when there is one)")
    lst.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                     help="load an extra plugin module (repeatable)")

    init = sub.add_parser("init", help="write a commented starter benchmarks.toml into the current directory",
                          description="Write ./benchmarks.toml: every line commented, so it loads to the packaged "
                                      "catalog unchanged; uncomment what you want to change.")
    init.add_argument("--force", action="store_true", help="overwrite an existing benchmarks.toml")

    doctor = sub.add_parser("doctor", help="check that this machine measures what the suite says (run it first)",
                            description="Check each installed framework on this machine: the device it sees, "
                                        "fp32/tf32 math, AMP dtypes, loss scaling, step timing and memory APIs. "
                                        "Exit 1 when a check fails.")
    doctor.add_argument("--device", default="auto",
                        help="the device you expect: auto (a GPU if the machine has an NVIDIA one), cpu or gpu")
    doctor.add_argument("--frameworks", help="comma-separated frameworks and environments (default: every "
                                             "framework plugin and every declared environment)")
    doctor.add_argument("--config", help="configuration declaring [environments] (default: ./benchmarks.toml "
                                         "when there is one)")
    doctor.add_argument("--timeout", type=float, default=600.0, help="seconds per framework probe")
    doctor.add_argument("--acceptance", action="store_true",
                        help="run the whole acceptance checklist (doctor, TF32 through XLA, calibration, a "
                             "four-precision ResNet-18 sweep, the fused fp16 optimizer, data parallel), skipping "
                             "with its reason each check this machine cannot run; docs/gpu.md")
    doctor.add_argument("--report", metavar="PATH",
                        help="with --acceptance: where the markdown report goes (default ./amp-suite-acceptance.md; "
                             "its state, for --resume, beside it as .json)")
    doctor.add_argument("--checks", metavar="KEYS",
                        help="with --acceptance: the checks to run, by key or number, comma-separated (devices, "
                             "doctor, tf32, sweep-torch or sweep for every sweep, calibration, fused, data-parallel; "
                             "default: all)")
    doctor.add_argument("--budget", type=float, metavar="SECONDS",
                        help="with --acceptance: the seconds this phase may take; checks that do not fit are "
                             "skipped, to run with --resume")
    doctor.add_argument("--resume", action="store_true",
                        help="with --acceptance: continue the report --report names, keeping the checks it judged")
    doctor.add_argument("--force", action="store_true",
                        help="with --acceptance: replace a report file an acceptance run did not write")
    doctor.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                        help="load an extra plugin module (repeatable)")

    from amp_suite.envs.command import add_env_parser

    add_env_parser(sub)
    from amp_suite.shadow.flags import add_numerics_parser

    add_numerics_parser(sub)
    plugins = sub.add_parser("plugins", help="loaded plugins with their versions and hooks")
    plugins.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                         help="load an extra plugin module (repeatable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from amp_suite.closed_pipes import quiet_when_closed

    quiet_when_closed()  # a reader that closes the pipe (| head -1) never stops a command
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        handler = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "plugins": cmd_plugins,
                   "calibrate": cmd_calibrate, "doctor": cmd_doctor, "init": cmd_init, "compare": cmd_compare,
                   "env": cmd_env, "numerics": cmd_numerics}
        with _stop_signals_interrupt():
            return handler[args.command](args)
    except UsageError as exc:
        print(f"amp-suite: error: {_one_line_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except PluginError as exc:
        print(f"amp-suite: plugin error: {_one_line_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # before the first cell (a download) or after the last
        signum = exc.signum if isinstance(exc, SweepInterrupted) else signal.SIGINT
        print(f"amp-suite: interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return _exit_code_for(signum)


def _one_line_text(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def own_command() -> list[str]:
    """The command line that runs this command line again, in this interpreter (``doctor --acceptance``
    runs ``amp-suite doctor``, ``run`` and ``calibrate`` through it)."""
    return [sys.executable, "-m", "amp_suite"]


def _host(modules: list[str], *, strict: bool = True):
    from amp_suite.sweep.resolve import make_host

    return make_host(modules, strict=strict)


def _cost_overrides(args: argparse.Namespace) -> dict:
    return {k: v for k, v in (("price_per_hour", args.price_per_hour), ("currency", args.currency))
            if v is not None}


def cmd_run(args: argparse.Namespace) -> int:
    from amp_suite.progress import SweepProgress
    from amp_suite.sweep.engine import SweepRequest, execute, resolve

    overrides = overrides_from_flags(args)
    auto = 0
    if overrides["repeats"] == "auto":
        from amp_suite.sweep.engine import AUTO_FIRST_REPEATS, AUTO_MAX_REPEATS

        overrides["repeats"], auto = AUTO_FIRST_REPEATS, AUTO_MAX_REPEATS
    request = SweepRequest(config=args.config, overrides=overrides, plugins=tuple(args.plugin),
                           resume=args.resume, inline=args.inline, quiet=args.quiet,
                           cost=_cost_overrides(args), preset=args.preset, auto_repeats=auto,
                           executor=args.executor, ray_address=args.ray_address)
    plan = resolve(request)
    if args.dry_run:  # the plan alone: no output directory, no data, no worker
        print("\n".join(plan.lines()))
        return EXIT_OK
    return execute(plan, progress=SweepProgress()).exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from amp_suite.config.cost import cost_settings
    from amp_suite.sweep.output_dir import report_lock
    from amp_suite.sweep.stored import load_results

    host = _host(args.plugin)
    with report_lock(args.directory):  # a running sweep's store never changes under the report
        results, environment = load_results(Path(args.directory))
        _check_report_replaceable(Path(args.directory), results, args.force)
        cost = cost_settings(environment.get("cost") or {}, **_cost_overrides(args))
        if cost:
            environment["cost"] = cost
        outcome = host.write_report(results, Path(args.directory), environment)
    if outcome.written:
        print("\n".join(str(p) for p in outcome.written))
    _print_reporter_failures(outcome)
    if args.open and not _open_html_report(outcome.written):
        return EXIT_USAGE
    return EXIT_USAGE if outcome.failures else EXIT_OK


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
    """Refuse to replace a report.md amp-suite did not write, or a report with one of no result, unless
    ``force``."""
    from amp_suite.owned_paths import FORCE_FLAG, check_replaceable
    from amp_suite.report.text import REPORT_FIRST_LINE

    report = directory / "report.md"
    check_replaceable(report, command="amp-suite report", first_line=REPORT_FIRST_LINE, force=force)
    if not results and os.path.lexists(report) and not force:
        raise UsageError(f"{out_text(directory / 'results.jsonl')} holds no valid result: the existing "
                         f"{out_text(report)} is kept (pass {FORCE_FLAG} to replace it with a report of no result)")


def cmd_compare(args: argparse.Namespace) -> int:
    from amp_suite.comparison import compare, regressions, unjudged

    if args.fail_above is not None and not 0 <= args.fail_above <= 100:
        raise UsageError(f"--fail-above must be a percentage from 0 to 100, got {args.fail_above:g}")
    if args.out:
        _check_compare_out(Path(args.out), args.force)
    frame = compare(args.base, args.new)
    print(frame.attrs["markdown"])
    if args.out:
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


def _check_compare_out(out: Path, force: bool) -> None:
    """Refuse ``compare --out`` over a sweep's stored results, and over a file compare did not write unless
    ``force``; before anything is printed."""
    from amp_suite.comparison import FIRST_LINE
    from amp_suite.owned_paths import check_replaceable
    from amp_suite.sweep.output_dir import STORED_FILES, is_suite_output

    shown = out_text(out)
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {shown}: the folder {out_text(out.parent)} does not exist")
    if out.name in STORED_FILES and is_suite_output(out.parent):
        raise UsageError(f"refusing --out {shown}: it is a sweep's stored {out.name}, which amp-suite never "
                         "replaces; choose another file")
    check_replaceable(out, command="amp-suite compare", first_line=FIRST_LINE, force=force)


def out_text(path: Path | str) -> str:
    """A path as one bounded piece of a one-line message (a newline or a huge name cannot split or flood it)."""
    from amp_suite.report.text import path_text

    return path_text(path)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from amp_suite.calibration.ceiling import calibrate

    config_path = find_config(args.config)
    return calibrate(frameworks=_csv(args.frameworks), device=args.device, force=args.force,
                     host=_host(args.plugin), budget_s=args.budget, config_path=config_path,
                     environments=load_config(config_path).environments)


def _print_reporter_failures(outcome) -> None:
    for failure in outcome.failures:
        print(f"amp-suite: error: reporter {failure.plugin!r} failed: {_one_line_text(failure.error)}",
              file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from amp_suite.machine.environment import package_version

    host = _host(args.plugin)
    print("frameworks:")
    frameworks = host.frameworks()
    width = max([8, *(len(name) for name in frameworks)])
    display = max([12, *(len(info.display_name) for info in frameworks.values())])
    for name, info in frameworks.items():
        missing = info.missing_modules()
        version = next((v for d in info.distributions if (v := package_version(d))), None)
        state = f"installed {version or ''}".strip() if not missing else f"not installed ({info.install_hint()})"
        precisions = "; ".join(f"{kind}: {', '.join(p)}" for kind, p in info.precisions.items())
        modes = "; ".join(f"{kind}: {', '.join(m)}" for kind, m in info.modes.items())
        print(f"  {name:<{width}} {info.display_name:<{display}} {state}  [{precisions}]"
              + (f"  modes [{modes}; default {info.default_mode}]" if modes else ""))
    config_error = None
    try:
        config = load_config(find_config(getattr(args, "config", None)))
    except UsageError as exc:
        # the frameworks and precisions are still listed; the exit status is a bad config's, as for run
        config_error = _one_line_text(exc)
        print(f"workloads and presets: unavailable ({config_error})")
    else:
        extended = f", extended by {config.path}" if config.path is not None else ""
        print(f"workloads (the packaged catalog{extended}; [source] after each):")
        width = max(map(len, config.workloads), default=0)
        from amp_suite.config.workload_datasets import workload_dataset_text

        for name, workload in config.workloads.items():
            shape = (f"context {workload.input_shape[0]} tokens" if workload.tokens else
                     f"input {workload.input_size}x{workload.input_size}x{workload.channels}")
            print(f"  {name:<{width}}  {workload.description or workload.model}, {shape}, batch "
                  f"{workload.batch_size}, {workload_dataset_text(workload)}  [{config.source('workloads.' + name)}]")
        print("presets (amp-suite run --preset NAME; docs/presets.md):")
        width = max(map(len, config.presets), default=0)
        for name, preset in config.presets.items():
            missing = [w for w in preset.settings.get("workloads", ()) if w not in config.workloads]
            state = f" (needs workloads not declared: {', '.join(missing)})" if missing else ""
            print(f"  {name:<{width}}  {preset.description}{state}  [{config.source('presets.' + name)}]")
    print("precisions:")
    for name, text in PRECISIONS.items():
        print(f"  {name:<9} {text}")
    print("modes (--modes):")
    for name, text in MODES.items():
        print(f"  {name:<10} {text}")
    from amp_suite.datasets import DATASETS

    print("datasets:\n  " + ", ".join(DATASETS))
    if config_error is not None:
        print(f"amp-suite: error: {config_error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from amp_suite.config.catalog import CONFIG_NAME
    from amp_suite.config.starter import starter_text
    from amp_suite.safe_files import write_file_atomically

    path = Path.cwd() / CONFIG_NAME
    if (path.exists() or path.is_symlink()) and not args.force:
        raise UsageError(f"{path} already exists; pass --force to overwrite it")
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} exists and is not a regular file")
    try:
        write_file_atomically(path, starter_text())
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}: it extends the packaged catalog (amp-suite list shows it); uncomment what you "
          "want to change")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from amp_suite.doctor import DoctorPlan, render_table, run_checks, summary_line

    if args.device not in ("auto", "cpu", "gpu"):
        raise UsageError(f"unknown device {args.device!r}; allowed: auto, cpu, gpu")
    known = _host(args.plugin).frameworks()
    config_path = find_config(args.config)
    declared = load_config(config_path).environments
    asked = _csv(args.frameworks)
    if asked:
        check_names("framework", asked, [*known, *declared])
    names = tuple(n for n in asked if n in known) if asked else tuple(known)
    environments = _doctor_environments(declared, known, asked, config_path)
    if not args.acceptance:
        # each framework is probed where a sweep on this device would run it (docs/environments.md)
        from amp_suite.doctor.runner import EnvironmentProbe
        from amp_suite.envs.placement import place_for_checks
        from amp_suite.machine.devices import sweep_device_kind

        placements = place_for_checks(names, declared, known, config_path, sweep_device_kind(args.device))
        moved = tuple(EnvironmentProbe(name, p.python, known[p.framework], p.problem, environment=p.environment)
                      for name, p in placements.items() if p.environment)
        taken = {p.environment for p in placements.values()}
        environments = moved + tuple(e for e in environments if e.name not in taken)
        names = tuple(n for n in names if not placements[n].environment)
    if args.acceptance:
        from amp_suite.doctor.acceptance import run_acceptance
        from amp_suite.doctor.acceptance_run import subprocess_executor
        from amp_suite.doctor.phases import parse_checks

        if args.budget is not None and (not math.isfinite(args.budget) or args.budget <= 0):
            raise UsageError(f"--budget must be a finite number of seconds above 0, got {args.budget:g}")
        return run_acceptance(device=args.device, frameworks=_csv(args.frameworks), known=known,
                              executor=partial(subprocess_executor, program=own_command()),
                              report=args.report, plugins=args.plugin, force=args.force,
                              emit=lambda line: print(line, flush=True),
                              progress=lambda text: print(f"amp-suite doctor: {text}", file=sys.stderr, flush=True),
                              checks=parse_checks(args.checks), budget_s=args.budget, resume=args.resume)
    for flag, given in (("--report", args.report is not None), ("--checks", args.checks is not None),
                        ("--budget", args.budget is not None), ("--resume", args.resume), ("--force", args.force)):
        if given:
            raise UsageError(f"{flag} goes with --acceptance")
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout must be a finite number of seconds above 0, got {args.timeout:g}")
    plan = DoctorPlan(device=args.device, frameworks=tuple(known[n] for n in names), timeout_s=args.timeout,
                      environments=environments)
    rows = run_checks(plan, progress=lambda text: print(f"amp-suite doctor: {text}", file=sys.stderr, flush=True))
    print(render_table(rows))
    print(summary_line(rows))
    return EXIT_FAILED if any(r.failed for r in rows) else EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from amp_suite.envs.command import cmd_env as run_env

    return run_env(args, frameworks=lambda: _host(getattr(args, "plugin", None) or []).frameworks())


def cmd_numerics(args: argparse.Namespace) -> int:
    from amp_suite.shadow.flags import cmd_numerics as run_numerics

    return run_numerics(args)


def _doctor_environments(declared: dict, known: dict, asked: tuple[str, ...] | None, config_path) -> tuple:
    """The environments the doctor probes: those asked for by name, else every declared one (the GPU set's
    only once built)."""
    from amp_suite.doctor.runner import EnvironmentProbe
    from amp_suite.envs import environments_dir, state_of

    envs_dir = environments_dir(config_path)
    probes = []
    for name, spec in declared.items():
        state = state_of(spec, envs_dir)
        wanted = name in asked if asked else (state.built or not spec.gpu)
        if wanted and spec.framework in known:
            probes.append(EnvironmentProbe(name, str(state.python), known[spec.framework],
                                           "" if state.built else state.problem))
    return tuple(probes)


def cmd_plugins(args: argparse.Namespace) -> int:
    host = _host(args.plugin, strict=False)  # a -p module that fails to load is listed, as FAILED TO LOAD
    for plugin in host.describe():
        version = f" {plugin.version}" if plugin.version else ""
        print(f"{plugin.name}{version}  ({plugin.source})")
        print(f"    hooks: {', '.join(plugin.hooks) or 'none'}")
    for failure in host.failures:
        print(f"{failure.name}  FAILED TO LOAD ({failure.source}): {failure.error}")
    asked = [failure.name for failure in host.failures if failure.name in args.plugin]
    if asked:
        print(f"amp-suite: error: plugin module{'s' if len(asked) > 1 else ''} asked for with -p failed to load: "
              f"{', '.join(asked)}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

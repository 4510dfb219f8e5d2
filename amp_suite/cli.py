"""The ``amp-suite`` command line.

Importing this module imports no framework: torch, TensorFlow and JAX are
imported only inside the worker process that runs a cell.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from amp_suite import __version__
from amp_suite.config import (
    SuiteConfig,
    check_batch_split,
    check_framework_tables,
    check_names,
    find_config,
    load_config,
    with_overrides,
)
from amp_suite.errors import PluginError, StorageError, SweepInterrupted, UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import BENIGN_STATUSES, CellResult, RunSpec

EXIT_OK, EXIT_FAILED_CELLS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ENVIRONMENT_FILE = "environment.json"
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
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(message)


def _csv(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _devices(text: str | None) -> tuple[int | str, ...] | None:
    """``--devices 1,2`` -> (1, 2); words stay words for the schema to judge."""
    parts = _csv(text)
    if parts is None:
        return None
    return tuple(int(p) if p.isdigit() else p for p in parts)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="amp-suite", description=(
        "Measure what automatic mixed precision buys in PyTorch, Keras and JAX on identical "
        "workloads, and report it in one normalized table."))
    parser.add_argument("--version", action="version", version=f"amp-suite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a sweep and write report.md, results.jsonl, results.csv")
    run.add_argument("--config", help="sweep configuration (default: ./benchmarks.toml)")
    run.add_argument("--frameworks", help="comma-separated, e.g. torch,keras,jax")
    run.add_argument("--workloads", help="comma-separated workload names from the config")
    run.add_argument("--precisions", help=f"comma-separated: {', '.join(PRECISIONS)}")
    run.add_argument("--dataset", help="synthetic, mnist or cifar10 (default from the config)")
    run.add_argument("--train-split", help="training split, TFDS notation: train, test[:8000], train[:10%%]")
    run.add_argument("--val-split", help="validation split, e.g. test or test[8000:]")
    run.add_argument("--data-dir", help="directory holding the official dataset files (or $AMP_SUITE_DATA)")
    run.add_argument("--no-download", dest="download", action="store_false", default=None,
                     help="never download dataset files")
    run.add_argument("--synthetic-fallback", action="store_true", default=None,
                     help="use synthetic data, and say so in the report, when a dataset cannot be had")
    run.add_argument("--steps", type=int, help="training steps per epoch")
    run.add_argument("--epochs", type=int, help="epochs per run")
    run.add_argument("--warmup", type=int, help="steps of the first epoch excluded from steady state")
    run.add_argument("--window-steps", type=int,
                     help="steps dispatched back to back with one wait at the end (default 32)")
    run.add_argument("--latency-steps", type=int,
                     help="last steps of each epoch run one by one to measure per-step latency (default 10)")
    run.add_argument("--batch-size", type=int, help="override every workload's batch size")
    run.add_argument("--repeats", type=int, help="runs of each cell")
    run.add_argument("--timeout", type=float, help="seconds per cell before its worker is killed")
    run.add_argument("--seed", type=int, help="seed of initial weights, data and batch order")
    run.add_argument("--device", help="auto, cpu or gpu")
    run.add_argument("--devices", help="comma-separated device counts per cell, e.g. 1,2 (data parallel; "
                     "the global batch is split over them); all = every device the framework sees")
    run.add_argument("--sync-batch-norm", action="store_true", default=None,
                     help="BatchNorm statistics over all replicas where the framework has it (default: per replica)")
    run.add_argument("--nnodes", type=int, help="machines each cell runs on (start amp-suite once per machine)")
    run.add_argument("--node-rank", type=int, help="this machine's rank among --nnodes (0 is the coordinator)")
    run.add_argument("--coordinator", help="HOST:PORT of node 0, where a cell's processes meet")
    run.add_argument("--out", help="output directory")
    run.add_argument("--resume", action="store_true", help="skip cells already ok in OUT/results.jsonl")
    run.add_argument("--inline", action="store_true",
                     help="run cells in this process (debugging; frameworks then share a process)")
    run.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                     help="load an extra plugin module (repeatable)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")

    report = sub.add_parser("report", help="re-render the report from DIR/results.jsonl")
    report.add_argument("directory", help="a sweep's output directory")
    report.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE")

    lst = sub.add_parser("list", help="frameworks (installed or not), workloads and precisions")
    lst.add_argument("--config", help="sweep configuration (default: ./benchmarks.toml)")
    lst.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE")

    plugins = sub.add_parser("plugins", help="loaded plugins with their versions and hooks")
    plugins.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        handler = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "plugins": cmd_plugins}
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


def _host(modules: list[str]):
    from amp_suite.plugin_host import PluginHost

    host = PluginHost(extra_modules=tuple(modules))
    for failure in host.failures:
        print(f"amp-suite: warning: plugin {failure.name!r} failed to load: {failure.error}", file=sys.stderr)
    return host


def device_counts(settings) -> tuple[int, ...]:
    """The sweep's device counts, ``all`` resolved (see :func:`amp_suite.launchers.visible_devices`)."""
    counts: list[int] = []
    for count in settings.devices:
        if count == "all":
            from amp_suite.launchers import visible_devices

            count = visible_devices(settings.device)
        if count not in counts:
            counts.append(count)
    return tuple(counts)


def plan_cells(config: SuiteConfig, settings, plugin_modules: tuple[str, ...] = (),
               launchers: dict[str, str] | None = None):
    """Every cell of the sweep, repeats outermost so slow drifts spread over all cells.

    ``launchers`` maps a framework to its :attr:`FrameworkInfo.launcher`
    (how its data-parallel cells start); one-device cells always run in one process.
    """
    from amp_suite.runner import Cell

    cells = []
    for repeat in range(settings.repeats):
        for workload_name in settings.workloads:
            workload = config.workloads[workload_name]
            for framework, devices, precision in itertools.product(
                    settings.frameworks, device_counts(settings), settings.precisions):
                run = RunSpec(
                    framework=framework, workload=workload_name, precision=precision, repeat=repeat,
                    steps=settings.steps, epochs=settings.epochs, warmup=settings.warmup,
                    window_steps=settings.window_steps, latency_steps=settings.latency_steps,
                    batch_size=settings.batch_size or workload.batch_size, seed=settings.seed,
                    dataset=settings.dataset, train_split=settings.train_split,
                    val_split=settings.val_split,
                    data_dir=str(Path(settings.data_dir).resolve()) if settings.data_dir else None,
                    download=settings.download, synthetic_fallback=settings.synthetic_fallback,
                    device=settings.device, timeout_s=settings.timeout,
                    options=dict(config.framework_options.get(framework, {})),
                    plugin_modules=plugin_modules,
                    devices=devices, sync_batch_norm=settings.sync_batch_norm, nnodes=settings.nnodes,
                    node_rank=settings.node_rank, coordinator=settings.coordinator or "",
                    launcher=(launchers or {}).get(framework, "process") if devices > 1 else "process",
                )
                cells.append(Cell(run, workload))
    return cells


def _progress(index: int, total: int, cell, result: CellResult | None) -> None:
    run = cell.run
    devices = f" x{run.devices}" if run.devices != 1 else ""
    label = f"[{index}/{total}] {run.workload} {run.framework} {run.precision}{devices} r{run.repeat}"
    if result is None:
        print(f"{label} ...", file=sys.stderr, flush=True)
        return
    if result.status == "ok":
        m = result.metrics
        print(f"{label} ok: {m.get('throughput', 0):,.0f} img/s, val acc {m.get('val_accuracy', 0):.3f}"
              f" ({result.wall_time_s:.1f} s)", file=sys.stderr, flush=True)
    else:
        print(f"{label} {result.status}: {result.error}", file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    from amp_suite.datasets import DATASETS, check_request
    from amp_suite.output_dir import OutputLock, prepare_output_dir

    config = load_config(find_config(args.config))
    settings = with_overrides(
        config.settings,
        frameworks=_csv(args.frameworks), workloads=_csv(args.workloads), precisions=_csv(args.precisions),
        dataset=args.dataset, train_split=args.train_split, val_split=args.val_split,
        data_dir=args.data_dir, download=args.download, synthetic_fallback=args.synthetic_fallback,
        steps=args.steps, epochs=args.epochs, warmup=args.warmup,
        window_steps=args.window_steps, latency_steps=args.latency_steps,
        batch_size=args.batch_size, repeats=args.repeats, timeout=args.timeout, seed=args.seed,
        device=args.device, out=args.out, devices=_devices(args.devices), sync_batch_norm=args.sync_batch_norm,
        nnodes=args.nnodes, node_rank=args.node_rank, coordinator=args.coordinator,
    )
    settings.check()
    if args.inline and any(count != 1 for count in settings.devices):
        raise UsageError("--inline runs cells in this process, which cannot be several data-parallel processes "
                         "or split into devices; drop --inline or use --devices 1")
    if args.inline and args.timeout is not None:
        raise UsageError("--timeout cannot be enforced with --inline (cells then run in this process); "
                         "drop one of the two")
    host = _host(args.plugin)
    broken = {f.name: f.error for f in host.failures}
    for name in settings.frameworks:
        if name in broken and name not in host.frameworks():
            raise UsageError(f"framework {name!r}: its plugin failed to load: {broken[name]}")
    check_names("framework", settings.frameworks, host.frameworks())
    check_framework_tables(config, host.frameworks(), absent=_absent_plugins(host))
    check_names("workload", settings.workloads, config.workloads)
    check_names("dataset", (settings.dataset,), DATASETS)
    for name in settings.workloads:
        workload = config.workloads[name]
        check_request(settings.dataset, workload, settings.train_split, settings.val_split,
                      batch_size=settings.batch_size or workload.batch_size)
        for count in device_counts(settings):
            check_batch_split(name, settings.batch_size or workload.batch_size, count)
    if args.inline:
        print("amp-suite: note: --inline runs every cell in this process, without a timeout", file=sys.stderr)
    out_dir = prepare_output_dir(settings.out)
    cells = plan_cells(config, settings, _worker_plugin_modules(host, args.plugin),
                       {name: info.launcher for name, info in host.frameworks().items()})
    with OutputLock(out_dir):
        _fetch_data(settings)
        return _run_locked(args, host, config, settings, cells, out_dir)


def _fetch_data(settings) -> None:
    """Verify (or download) every data file before the first cell starts."""
    from amp_suite.datasets import fetch
    from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError

    try:
        fetch(settings.dataset, settings.train_split, settings.val_split,
              data_dir=settings.data_dir, allow_download=settings.download)
    except ChecksumMismatch as exc:
        raise UsageError(str(exc)) from None
    except DatasetError as exc:
        if not settings.synthetic_fallback:
            raise UsageError(f"{exc}; or set synthetic_fallback = true to run on synthetic data") from None
        print(f"amp-suite: warning: {exc}; synthetic data will stand in (the report says so)", file=sys.stderr)


def _worker_plugin_modules(host, requested: list[str]) -> tuple[str, ...]:
    """The extra plugin modules the host really loaded (the worker loads exactly these)."""
    from amp_suite.plugin_host import EXTRA_PLUGINS_ENV

    loaded = {plugin.name for plugin in host.describe()}
    from_env = [m.strip() for m in os.environ.get(EXTRA_PLUGINS_ENV, "").split(",") if m.strip()]
    return tuple(dict.fromkeys(m for m in [*requested, *from_env] if m in loaded))


def _absent_plugins(host) -> set[str]:
    """Plugins disabled by the user or failed to load in the host."""
    from amp_suite.plugin_host import DISABLE_ENV

    blocked = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return blocked | {failure.name for failure in host.failures}


def _worker_env(host) -> dict[str, str]:
    """Environment overrides that keep a worker from loading a plugin the host did not load."""
    from amp_suite.plugin_host import DISABLE_ENV, EXTRA_PLUGINS_ENV

    return {DISABLE_ENV: ",".join(sorted(_absent_plugins(host))), EXTRA_PLUGINS_ENV: ""}


def _warn_skipped_lines(store, contents=None) -> None:
    """One warning naming the lines of ``results.jsonl`` that hold no result."""
    contents = store.read() if contents is None else contents
    if contents.skipped:
        print(f"amp-suite: warning: {store.path}: skipped {len(contents.skipped)} line(s) that hold no "
              f"result: {contents.describe_skipped()}", file=sys.stderr)


def _run_locked(args, host, config: SuiteConfig, settings, cells, out_dir: Path) -> int:
    from amp_suite.environment import host_environment
    from amp_suite.results import ResultStore
    from amp_suite.runner import iter_sweep
    from amp_suite.safe_files import write_file_atomically

    store = ResultStore(out_dir)
    if args.resume:
        _warn_skipped_lines(store)
    environment = host_environment()
    environment["config_file"] = str(config.path)
    environment["settings"] = asdict(settings)
    try:
        write_file_atomically(out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
    except OSError as exc:
        raise UsageError(f"cannot write {out_dir / ENVIRONMENT_FILE}: {exc.strerror or exc}") from None

    print(f"amp-suite: {len(cells)} cells -> {out_dir}/", file=sys.stderr)
    started = time.perf_counter()
    stopped_by: int | None = None
    storage_failed = False
    results: list[CellResult] = []
    try:
        for result in iter_sweep(cells, store, inline=args.inline, resume=args.resume, env=_worker_env(host),
                                 progress=None if args.quiet else _progress):
            results.append(result)
    except KeyboardInterrupt as exc:
        stopped_by = exc.signum if isinstance(exc, SweepInterrupted) else signal.SIGINT
        print(f"amp-suite: interrupted by {signal.Signals(stopped_by).name}; finished cells are kept in "
              "results.jsonl (--resume runs the rest)", file=sys.stderr)
    except StorageError as exc:
        storage_failed = True
        print(f"amp-suite: error: {_one_line_text(exc)}; the sweep stops, {len(results)} finished cells are "
              "stored (free space or fix permissions, then run again with --resume)", file=sys.stderr)
    outcome = host.write_report(results, out_dir, environment)
    print(f"amp-suite: {len(results)} cells in {time.perf_counter() - started:.0f} s; wrote "
          + (", ".join(str(p) for p in outcome.written) or "no report"), file=sys.stderr)
    _print_reporter_failures(outcome)
    if stopped_by is not None:
        return _exit_code_for(stopped_by)
    if storage_failed or outcome.failures:
        return EXIT_USAGE
    return EXIT_OK if all(r.status in BENIGN_STATUSES for r in results) else EXIT_FAILED_CELLS


def cmd_report(args: argparse.Namespace) -> int:
    from amp_suite.results import RESULTS_FILE, ResultStore

    directory = Path(args.directory)
    store = ResultStore(directory)
    if not store.path.is_file():
        what = "is not a file" if store.path.exists() else "does not exist"
        raise UsageError(f"{str(store.path)!r} {what}; pass a sweep's output directory (it holds {RESULTS_FILE})")
    try:
        contents = store.read()
    except OSError as exc:
        raise UsageError(f"cannot read {str(store.path)!r}: {exc.strerror or exc}") from None
    _warn_skipped_lines(store, contents)
    environment = _stored_environment(directory)
    latest = {result.key: result for result in contents.results}
    outcome = _host(args.plugin).write_report(list(latest.values()), directory, environment)
    if outcome.written:
        print("\n".join(str(p) for p in outcome.written))
    _print_reporter_failures(outcome)
    return EXIT_USAGE if outcome.failures else EXIT_OK


def _stored_environment(directory: Path) -> dict:
    """The sweep's ``environment.json``; this machine's environment, with a warning, if it is unusable."""
    from amp_suite.environment import host_environment

    path = directory / ENVIRONMENT_FILE
    problem = "is missing"
    if path.exists():
        try:
            environment = json.loads(path.read_bytes().decode("utf-8"))
            if isinstance(environment, dict):
                return environment
            problem = "is not a JSON object"
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            problem = "is unreadable or truncated"
    print(f"amp-suite: warning: {path} {problem}; the report describes this machine instead", file=sys.stderr)
    return host_environment()


def _print_reporter_failures(outcome) -> None:
    for failure in outcome.failures:
        print(f"amp-suite: error: reporter {failure.plugin!r} failed: {_one_line_text(failure.error)}",
              file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from amp_suite.environment import package_version
    from amp_suite.worker import missing_modules

    host = _host(args.plugin)
    print("frameworks:")
    for name, info in host.frameworks().items():
        missing = missing_modules(info)
        version = next((v for d in info.distributions if (v := package_version(d))), None)
        state = f"installed {version or ''}".strip() if not missing else f"not installed ({info.install_hint()})"
        precisions = "; ".join(f"{kind}: {', '.join(p)}" for kind, p in info.precisions.items())
        print(f"  {name:<8} {info.display_name:<12} {state}  [{precisions}]")
    try:
        config = load_config(find_config(getattr(args, "config", None)))
        print(f"workloads ({config.path}):")
        for name, workload in config.workloads.items():
            print(f"  {name:<16} {workload.description or workload.model}, input "
                  f"{workload.input_size}x{workload.input_size}x{workload.channels}, batch {workload.batch_size}")
    except UsageError as exc:
        print(f"workloads: unavailable ({exc})")
    print("precisions:")
    for name, text in PRECISIONS.items():
        print(f"  {name:<9} {text}")
    from amp_suite.datasets import DATASETS

    print("datasets:\n  " + ", ".join(DATASETS))
    return EXIT_OK


def cmd_plugins(args: argparse.Namespace) -> int:
    host = _host(args.plugin)
    for plugin in host.describe():
        version = f" {plugin.version}" if plugin.version else ""
        print(f"{plugin.name}{version}  ({plugin.source})")
        print(f"    hooks: {', '.join(plugin.hooks) or 'none'}")
    for failure in host.failures:
        print(f"{failure.name}  FAILED TO LOAD ({failure.source}): {failure.error}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""The ``amp-suite`` command line.

Importing this module imports no framework: torch, TensorFlow and JAX are
imported only inside the worker process that runs a cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from amp_suite import __version__
from amp_suite.config import SuiteConfig, check_names, find_config, load_config, with_overrides
from amp_suite.errors import PluginError, UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import BENIGN_STATUSES, CellResult, RunSpec

EXIT_OK, EXIT_FAILED_CELLS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ENVIRONMENT_FILE = "environment.json"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(message)


def _csv(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


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
    run.add_argument("--batch-size", type=int, help="override every workload's batch size")
    run.add_argument("--repeats", type=int, help="runs of each cell")
    run.add_argument("--timeout", type=float, help="seconds per cell before its worker is killed")
    run.add_argument("--seed", type=int, help="seed of initial weights, data and batch order")
    run.add_argument("--device", help="auto, cpu or gpu")
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

    doctor = sub.add_parser("doctor", help="check that this machine measures what the suite says (run it first)",
                            description="Check each installed framework on this machine: the device it sees, "
                                        "fp32/tf32 math, AMP dtypes, loss scaling, step timing and memory APIs. "
                                        "Exit 1 when a check fails.")
    doctor.add_argument("--device", default="auto",
                        help="the device you expect: auto (a GPU if the machine has an NVIDIA one), cpu or gpu")
    doctor.add_argument("--frameworks", help="comma-separated (default: every framework plugin)")
    doctor.add_argument("--timeout", type=float, default=600.0, help="seconds per framework probe")
    doctor.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE")

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
        handler = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "plugins": cmd_plugins,
                   "doctor": cmd_doctor}
        return handler[args.command](args)
    except UsageError as exc:
        print(f"amp-suite: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PluginError as exc:
        print(f"amp-suite: plugin error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _host(modules: list[str]):
    from amp_suite.plugin_host import PluginHost

    host = PluginHost(extra_modules=tuple(modules))
    for failure in host.failures:
        print(f"amp-suite: warning: plugin {failure.name!r} failed to load: {failure.error}", file=sys.stderr)
    return host


def plan_cells(config: SuiteConfig, settings, plugin_modules: tuple[str, ...] = ()):
    """Every cell of the sweep, repeats outermost so slow drifts spread over all cells."""
    from amp_suite.runner import Cell

    cells = []
    for repeat in range(settings.repeats):
        for workload_name in settings.workloads:
            workload = config.workloads[workload_name]
            for framework in settings.frameworks:
                for precision in settings.precisions:
                    run = RunSpec(
                        framework=framework, workload=workload_name, precision=precision, repeat=repeat,
                        steps=settings.steps, epochs=settings.epochs, warmup=settings.warmup,
                        batch_size=settings.batch_size or workload.batch_size, seed=settings.seed,
                        dataset=settings.dataset, train_split=settings.train_split,
                        val_split=settings.val_split,
                        data_dir=str(Path(settings.data_dir).resolve()) if settings.data_dir else None,
                        download=settings.download, synthetic_fallback=settings.synthetic_fallback,
                        device=settings.device, timeout_s=settings.timeout,
                        options=dict(config.framework_options.get(framework, {})),
                        plugin_modules=plugin_modules,
                    )
                    cells.append(Cell(run, workload))
    return cells


def _progress(index: int, total: int, cell, result: CellResult | None) -> None:
    run = cell.run
    label = f"[{index}/{total}] {run.workload} {run.framework} {run.precision} r{run.repeat}"
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
    from amp_suite.datasets import DATASETS, check_request, fetch
    from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError
    from amp_suite.environment import host_environment
    from amp_suite.results import ResultStore
    from amp_suite.runner import iter_sweep

    config = load_config(find_config(args.config))
    settings = with_overrides(
        config.settings,
        frameworks=_csv(args.frameworks), workloads=_csv(args.workloads), precisions=_csv(args.precisions),
        dataset=args.dataset, train_split=args.train_split, val_split=args.val_split,
        data_dir=args.data_dir, download=args.download, synthetic_fallback=args.synthetic_fallback,
        steps=args.steps, epochs=args.epochs, warmup=args.warmup,
        batch_size=args.batch_size, repeats=args.repeats, timeout=args.timeout, seed=args.seed,
        device=args.device, out=args.out,
    )
    settings.check()
    host = _host(args.plugin)
    broken = {f.name: f.error for f in host.failures}
    for name in settings.frameworks:
        if name in broken and name not in host.frameworks():
            raise UsageError(f"framework {name!r}: its plugin failed to load: {broken[name]}")
    check_names("framework", settings.frameworks, host.frameworks())
    check_names("workload", settings.workloads, config.workloads)
    check_names("dataset", (settings.dataset,), DATASETS)
    for name in settings.workloads:
        check_request(settings.dataset, config.workloads[name], settings.train_split, settings.val_split)
    try:  # every file verified (or downloaded) before the first cell starts
        fetch(settings.dataset, settings.train_split, settings.val_split,
              data_dir=settings.data_dir, allow_download=settings.download)
    except ChecksumMismatch as exc:
        raise UsageError(str(exc)) from None
    except DatasetError as exc:
        if not settings.synthetic_fallback:
            raise UsageError(f"{exc}; or set synthetic_fallback = true to run on synthetic data") from None
        print(f"amp-suite: warning: {exc}; synthetic data will stand in (the report says so)", file=sys.stderr)

    out_dir = Path(settings.out)
    store = ResultStore(out_dir)
    environment = host_environment()
    environment["config_file"] = str(config.path)
    environment["settings"] = asdict(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ENVIRONMENT_FILE).write_text(json.dumps(environment, indent=2, default=str))

    cells = plan_cells(config, settings, tuple(args.plugin))
    print(f"amp-suite: {len(cells)} cells -> {out_dir}/", file=sys.stderr)
    started = time.perf_counter()
    interrupted = False
    results: list[CellResult] = []
    try:
        for result in iter_sweep(cells, store, inline=args.inline, resume=args.resume,
                                 progress=None if args.quiet else _progress):
            results.append(result)
    except KeyboardInterrupt:
        interrupted = True
        print("amp-suite: interrupted; finished cells are kept in results.jsonl", file=sys.stderr)
    written = host.write_report(results, out_dir, environment)
    print(f"amp-suite: {len(results)} cells in {time.perf_counter() - started:.0f} s; wrote "
          + ", ".join(str(p) for p in written), file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(r.status in BENIGN_STATUSES for r in results) else EXIT_FAILED_CELLS


def cmd_report(args: argparse.Namespace) -> int:
    from amp_suite.environment import host_environment
    from amp_suite.results import RESULTS_FILE, ResultStore

    directory = Path(args.directory)
    store = ResultStore(directory)
    if not store.path.exists():
        raise UsageError(f"no {RESULTS_FILE} in {str(directory)!r}")
    env_path = directory / ENVIRONMENT_FILE
    environment = json.loads(env_path.read_text()) if env_path.exists() else host_environment()
    results = list(store.latest_by_key().values())
    written = _host(args.plugin).write_report(results, directory, environment)
    print("\n".join(str(p) for p in written))
    return EXIT_OK


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


def cmd_doctor(args: argparse.Namespace) -> int:
    from amp_suite.doctor import DoctorPlan, render_table, run_checks, summary_line

    if args.device not in ("auto", "cpu", "gpu"):
        raise UsageError(f"unknown device {args.device!r}; allowed: auto, cpu, gpu")
    known = _host(args.plugin).frameworks()
    names = _csv(args.frameworks) or tuple(known)
    check_names("framework", names, known)
    plan = DoctorPlan(device=args.device, frameworks=tuple(known[n] for n in names), timeout_s=args.timeout)
    rows = run_checks(plan, progress=lambda text: print(f"amp-suite doctor: {text}", file=sys.stderr, flush=True))
    print(render_table(rows))
    print(summary_line(rows))
    return EXIT_FAILED_CELLS if any(r.failed for r in rows) else EXIT_OK


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

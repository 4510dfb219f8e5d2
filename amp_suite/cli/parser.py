"""The ``amp-suite`` argument parser: every command and its flags (errors in one line, exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from amp_suite.cli.setting_defaults import RunHelpFormatter, run_defaults
from amp_suite.config.cost import COST_FIELDS
from amp_suite.config.settings import add_setting_flags
from amp_suite.errors import UsageError
from amp_suite.markers import __version__
from amp_suite.schema import Field, number_parser

# The argparse type of a flag of seconds or of a percentage: a text that is no number names what is allowed.
SECONDS = number_parser(Field(float, above=0))
PERCENT = number_parser(Field(float, minimum=0, maximum=100))
PRICE = number_parser(COST_FIELDS["price_per_hour"])


class _Parser(argparse.ArgumentParser):
    # A command whose help ends each setting with its default and closes naming where those come from (run's),
    # worked out only when its help is printed: (setting name -> shown default, closing lines).
    help_defaults: Callable[[], tuple[dict[str, str], str]] | None = None
    _shown_defaults: dict[str, str] = {}  # replaced while help prints, never mutated

    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UsageError(message)

    def format_help(self) -> str:
        if self.help_defaults is None:
            return super().format_help()
        self._shown_defaults, self.epilog = self.help_defaults()
        try:
            return super().format_help()
        finally:
            self._shown_defaults = {}

    def _get_formatter(self) -> argparse.HelpFormatter:
        formatter = super()._get_formatter()
        if isinstance(formatter, RunHelpFormatter):
            formatter.defaults = self._shown_defaults
        return formatter


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="amp-suite", description=(
        "Measure what automatic mixed precision buys in PyTorch, Keras and JAX on identical "
        "workloads, and report it in one normalized table."))
    parser.add_argument("--version", action="version", version=f"amp-suite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a sweep and write report.md, results.jsonl, results.csv",
                         formatter_class=RunHelpFormatter)
    run.help_defaults = run_defaults
    run.add_argument("--config", help="configuration extending the packaged catalog (default: ./benchmarks.toml "
                                      "when there is one)")
    run.add_argument("--preset", metavar="NAME",
                     help="fill the sweep from [presets.NAME] (amp-suite list shows them); flags still win")
    add_setting_flags(run)  # one flag per sweep setting, declared in amp_suite/config/settings.py
    run.add_argument("--resume", action="store_true",
                     help="keep the cells already ok in OUT/results.jsonl with the same definition (fingerprint); "
                          "run the rest")
    run.add_argument("--force", action="store_true",
                     help="replace report files in OUT that amp-suite did not write (your own results.csv, a "
                          "report.md whose first line changed; left alone otherwise)")
    run.add_argument("--inline", action="store_true",
                     help="run cells in this process (debugging; frameworks then share a process)")
    run.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                     help="load an extra plugin module (repeatable)")
    run.add_argument("--price-per-hour", type=PRICE, help="price of this machine per hour: cost columns")
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
    report.add_argument("--price-per-hour", type=PRICE, help="price of the machine per hour: cost columns")
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
    cmp.add_argument("--fail-above", type=PERCENT, metavar="PCT",
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
    cal.add_argument("--budget", type=SECONDS, default=1.0,
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
    doctor.add_argument("--timeout", type=SECONDS, default=600.0, help="seconds per framework probe")
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
    doctor.add_argument("--budget", type=SECONDS, metavar="SECONDS",
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

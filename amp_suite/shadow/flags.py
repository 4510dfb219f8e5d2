"""The ``amp-suite numerics`` command line: its parser and what it runs."""

from __future__ import annotations

import argparse
import sys

from amp_suite.errors import UsageError
from amp_suite.schema import Field, comma_separated, number_parser
from amp_suite.shadow.plan import (
    BATCH_SIZE_FIELD,
    DEFAULT_MAX_RUNS,
    DEFAULT_OUT,
    DEFAULT_STEPS,
    DEFAULT_TOLERANCE,
    MAX_RUNS,
    SEED_FIELD,
    STEPS_FIELD,
    NumericsRequest,
)


def add_numerics_parser(sub: argparse._SubParsersAction) -> None:
    """The ``numerics`` command and its flags."""
    parser = sub.add_parser(
        "numerics", help="set AMP training steps beside float32 and float64 shadows, layer by layer",
        description="Train a few steps of each workload from identical weights and batches in every requested "
                    "precision and in the float32 (and float64) shadow, one process each, then compare every "
                    "named layer's activation and weight gradients: relative error, underflow, subnormal and "
                    "overflow shares, and under amp_fp16 what the loss scale saves. Writes numerics.jsonl, "
                    "numerics.md and numerics-heatmap.png (docs/numerics.md).")
    parser.add_argument("--workloads", required=True, help="comma-separated workload names (amp-suite list)")
    parser.add_argument("--frameworks", required=True, help="comma-separated framework names")
    parser.add_argument("--precisions", default="amp_fp16,amp_bf16",
                        help="comma-separated precisions to set beside the shadows (default amp_fp16,amp_bf16; "
                             "any precision a requested framework runs)")
    parser.add_argument("--steps", type=number_parser(STEPS_FIELD), default=DEFAULT_STEPS,
                        help=f"training steps to trace (default {DEFAULT_STEPS})")
    parser.add_argument("--batch-size", type=number_parser(BATCH_SIZE_FIELD), help="examples per step (default: each workload's own)")
    parser.add_argument("--dataset", help="the dataset every workload trains on (default: each workload's own, "
                                          "else the catalog's default)")
    parser.add_argument("--seed", type=number_parser(SEED_FIELD), default=0, help="seed of the initial weights and batches (default 0)")
    parser.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto)")
    parser.add_argument("--timeout", type=number_parser(Field(float, above=0)), default=600.0, help="seconds each run may take (default 600)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--force", action="store_true",
                        help="replace the results an earlier amp-suite numerics left in --out (kept otherwise)")
    parser.add_argument("--config", help="configuration extending the packaged catalog (default: "
                                         "./benchmarks.toml when there is one)")
    parser.add_argument("--inline", action="store_true",
                        help="trace every run in this process (debugging; frameworks then share a process)")
    parser.add_argument("--bisect", action="store_true",
                        help="search for layers to keep in float32 (keep_fp32) that bring the AMP run's losses within "
                             "--tolerance of float32's: one framework, workload and AMP precision (docs/numerics.md)")
    # default None: a --tolerance or --max-runs given without --bisect is refused; the real defaults apply after
    parser.add_argument("--tolerance", type=number_parser(Field(float, above=0)),
                        help=f"--bisect: the largest relative loss gap accepted (default {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--max-runs", type=number_parser(Field(int, minimum=1, maximum=MAX_RUNS)),
                        help=f"--bisect: the most AMP runs the search makes (default {DEFAULT_MAX_RUNS})")
    parser.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                        help="load an extra plugin module (repeatable)")


def cmd_numerics(args: argparse.Namespace) -> int:
    """Run the command; print the worst-layer sentences (or what was not compared, and why) and where the files
    are."""
    from amp_suite.shadow.command import numerics
    from amp_suite.shadow.report import summary_lines

    for flag, value in (("--tolerance", args.tolerance), ("--max-runs", args.max_runs)):
        if value is not None and not args.bisect:
            raise UsageError(f"{flag} {value:g} is a setting of the --bisect search: it needs --bisect (give both, "
                             "or leave it out)")
    request = NumericsRequest(
        workloads=comma_separated(args.workloads, "--workloads"),
        frameworks=comma_separated(args.frameworks, "--frameworks"),
        precisions=comma_separated(args.precisions, "--precisions"), steps=args.steps, out=args.out,
        batch_size=args.batch_size,
        seed=args.seed, device=args.device, timeout=args.timeout, config=args.config,
        plugins=tuple(args.plugin), inline=args.inline, dataset=args.dataset, bisect=args.bisect,
        tolerance=DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance,
        max_runs=DEFAULT_MAX_RUNS if args.max_runs is None else args.max_runs, force=args.force)
    outcome = numerics(request)
    if outcome.search is not None:
        from amp_suite.shadow.bisect import bisect_sentence

        print(bisect_sentence(outcome.search))
    for sentence in summary_lines(outcome.layers, outcome.gaps):
        print(sentence)
    for path in outcome.written:
        print(f"amp-suite numerics: wrote {path}", file=sys.stderr)
    return outcome.exit_code

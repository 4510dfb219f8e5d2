"""The acceptance report: markdown with the verdict, the machine, every check's expected and observed, the commands.

Written from an :class:`~.acceptance_run.AcceptanceRun` after every check, so a
stopped or killed phase still leaves a report of what finished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amp_suite.doctor.acceptance_output import find_row, finite_number, parse_calibration, read_results
from amp_suite.doctor.acceptance_records import (
    DISPLAY,
    FAIL,
    GPU_PRECISIONS,
    GPU_WORKLOAD,
    LABELS,
    PASS,
    SKIP,
    framework_list,
)
from amp_suite.doctor.acceptance_run import AcceptanceRun

# How the acceptance report's first line begins: how a later run knows a report it may replace.
REPORT_FIRST_WORDS = "# amp-suite acceptance:"


def _environment(run: AcceptanceRun) -> tuple[dict[str, Any], Path | None]:
    """The environment.json of the first sweep that wrote one."""
    for check in run.plan.checks:
        if check.command.out_dir:
            path = Path(check.command.out_dir) / "environment.json"
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data, path
    return {}, None


def _runtimes(run: AcceptanceRun) -> dict[str, str]:
    """Framework -> 'CUDA x, cuDNN y' from the first ok row of each framework in the sweeps."""
    found: dict[str, str] = {}
    for check in run.plan.checks:
        if not check.command.out_dir:
            continue
        for row in read_results(Path(check.command.out_dir) / "results.jsonl"):
            env = row.get("environment") or {}
            facts = [f"CUDA {env['cuda_runtime_version']}" if env.get("cuda_runtime_version") else "",
                     f"cuDNN {env['cudnn_version']}" if env.get("cudnn_version") else ""]
            text = ", ".join(f for f in facts if f)
            if text and row.get("framework") not in found:
                found[str(row.get("framework"))] = text
    return found


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_report(run: AcceptanceRun, *, command_line: str = "amp-suite doctor --acceptance") -> str:
    """The markdown report: verdict, machine facts, every check's expected vs observed, the commands."""
    plan = run.plan
    counts = {s: sum(o.status == s for o in run.outcomes) for s in (PASS, FAIL, SKIP)}
    pending = run.pending
    unfinished = bool(pending or run.running or run.interrupted or len(run.outcomes) < len(plan.checks))
    verdict = "FAILED" if run.failed else ("INCOMPLETE" if unfinished else "PASSED")
    environment, env_path = _environment(run)
    lines = [f"{REPORT_FIRST_WORDS} {verdict}", "",
             f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped "
             f"({plan.mode.upper()} mode; skipped checks are not failures).", ""]
    if run.running:
        lines += [f"**In progress**: `{_md(run.running)}` was running when this report was written; a report "
                  "that still says so was left by a phase that was killed. `--resume` continues.", ""]
    if run.interrupted:
        lines += [f"**Interrupted** ({_md(run.interrupted)}): the checks below are those it finished; "
                  "`--resume` continues.", ""]
    if pending or len(run.outcomes) < len(plan.checks):
        names = [o.check.name for o in pending] + [c.name for c in plan.checks[len(run.outcomes):]]
        lines += [f"**Still to run** ({len(names)}): {_md('; '.join(names))}. Continue with "
                  f"`{_md(command_line.split(' --resume')[0])} --resume`.", ""]
    lines += ["## Machine", "", f"- command: `{command_line}`", f"- started: {run.started}"]
    for phase in run.phases:
        lines.append(f"- {phase}")
    version = environment.get("amp_suite_version")
    if version is None:
        from amp_suite.markers import __version__ as version
    commit = environment.get("git_commit")
    lines.append(f"- amp-suite: {version}" + (f" (commit {commit})" if commit else ""))
    if environment.get("python") or environment.get("platform"):
        lines.append(f"- Python {environment.get('python', '?')} on {environment.get('platform', '?')}")
    if environment.get("cpu_model"):
        flags = ", ".join(environment.get("cpu_flags") or []) or "none of interest"
        lines.append(f"- CPU: {environment['cpu_model']} ({environment.get('cpu_count', '?')} cores; flags: {flags})")
    gpus = plan.machine.inventory.gpus
    if gpus:
        for gpu in gpus:
            memory = f", {gpu.memory_total_mib:.0f} MiB" if gpu.memory_total_mib else ""
            power = f", power limit {gpu.power_limit_w:g} W" if gpu.power_limit_w else ""
            lines.append(f"- GPU {gpu.index}: {gpu.name}, driver {gpu.driver or '?'}, "
                         f"sm {gpu.compute_capability or '?'}{memory}{power}")
    else:
        lines.append(f"- GPU: {plan.machine.inventory.describe()}")
    packages = environment.get("packages") or _installed_versions()
    if packages:
        lines.append("- packages: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    runtimes = _runtimes(run)
    for name, text in runtimes.items():
        lines.append(f"- {DISPLAY.get(name, name)} ran with {text}")
    for name, text in plan.machine.where.items():
        lines.append(f"- {DISPLAY.get(name, name)} runs in {text}")
    lines.append(f"- frameworks checked: {framework_list(plan.frameworks)}" + (
        f" (not installed: {framework_list(list(plan.machine.missing))})" if plan.machine.missing else ""))
    lines.append(f"- files of this run: `{plan.workdir}`" + (f" (environment: `{env_path}`)" if env_path else ""))
    for check in plan.checks:
        report = Path(check.command.out_dir) / "report.md" if check.command.out_dir else None
        if report is not None and report.is_file():
            lines.append(f"- {check.name}: report `{report}`")
    lines += ["", "## Checks", "", "| # | key | check | result | expected | observed |",
              "| --- | --- | --- | --- | --- | --- |"]
    for number, outcome in enumerate(run.outcomes, 1):
        kept = f" (kept from the phase of {outcome.kept})" if outcome.kept else ""
        lines.append(f"| {number} | {outcome.check.key} | {_md(outcome.check.name)} | **{LABELS[outcome.status]}** | "
                     f"{_md(outcome.check.expected)} | {_md(outcome.observed)}{_md(kept)} |")
    figures = gpu_figures_section(run)
    if figures:
        lines += ["", *figures]
    lines += ["", "## Commands", "", "| command | outcome | seconds | log |", "| --- | --- | --- | --- |"]
    for record in run.commands:
        lines.append(f"| `{_md(record.display)}` | {record.outcome} | {record.seconds:.0f} | "
                     f"{f'`{record.log}`' if record.log else '–'} |")
    skipped = [o for o in run.outcomes if o.status == SKIP and not o.pending]
    if skipped:
        lines += ["", "Skipped checks did not run; each needs what the machine lacks: "
                  + "; ".join(f"{o.check.name} ({', '.join(o.check.needs)})" for o in skipped) + "."]
    return "\n".join(lines) + "\n"


ABOVE_CEILING = 1.05  # a speed-up this far above the calibrated peak ratio is marked
LAUNCH_BOUND_PCT = 50.0  # a cell whose GPU was busy less of its timed windows than this is launch- or input-bound
_CEILING_DTYPE = {"tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16"}


def gpu_figures_section(run: AcceptanceRun) -> list[str]:
    """The sweeps' figures judged further: each precision's speed-up over fp32 and over tf32, the calibrated
    ceiling beside it (the matmul/conv peak ratio over fp32 that calibration measured), the GPU's busy time,
    and a mark on launch-bound cells.  Empty when no GPU sweep stored a row."""
    ceilings = {name: figures.peaks for name, figures in
                parse_calibration(calibration_output(run)).items() if figures.kind == "gpu"}
    table: list[str] = []
    launch_bound: list[str] = []
    above: list[str] = []
    for check in run.plan.checks:
        if not check.key.startswith("sweep-") or not check.command.out_dir:
            continue
        rows = read_results(Path(check.command.out_dir) / "results.jsonl")
        fw = check.key.removeprefix("sweep-")
        throughput: dict[str, float] = {}
        busy: dict[str, float] = {}
        for precision in GPU_PRECISIONS:
            row = find_row(rows, fw, GPU_WORKLOAD, precision)
            if row is None or row.get("status") != "ok" or (row.get("device") or {}).get("kind") != "gpu":
                continue
            metrics = row.get("metrics") or {}
            if (value := finite_number(metrics.get("throughput"))) is not None:
                throughput[precision] = value
            if (pct := finite_number(metrics.get("gpu_utilization_pct_mean"))) is not None:
                busy[precision] = pct
        if not throughput:
            continue
        peaks = ceilings.get(fw, {})
        for precision in GPU_PRECISIONS:
            if precision not in throughput:
                continue
            value = throughput[precision]
            over_fp32 = f"{value / throughput['fp32']:.2f}x" if throughput.get("fp32") else "–"
            over_tf32 = f"{value / throughput['tf32']:.2f}x" if throughput.get("tf32") and precision != "tf32" \
                else "–"
            dtype = _CEILING_DTYPE.get(precision)
            bound = peaks[dtype] / peaks["fp32"] if dtype and peaks.get(dtype) and peaks.get("fp32") else None
            ceiling = "–" if bound is None else f"{bound:.1f}x"
            if bound is not None and throughput.get("fp32") and value / throughput["fp32"] > ABOVE_CEILING * bound:
                ceiling += " (speed-up above it: the fp32 cell ran below its own peak's share)"
                above.append(f"{fw}/{precision}")
            pct = busy.get(precision)
            mark = ""
            if pct is not None and pct < LAUNCH_BOUND_PCT:
                mark = " (launch- or input-bound)"
                launch_bound.append(f"{fw}/{precision} {pct:.0f}%")
            table.append(f"| {DISPLAY.get(fw, fw)} | {precision} | {value:,.0f} | {over_fp32} | {over_tf32} | "
                         f"{ceiling} | {'–' if pct is None else f'{pct:.0f}%'}{mark} |")
    if not table:
        return []
    lines = ["## GPU figures", "",
             f"{GPU_WORKLOAD}, one run per cell. The ceiling is what calibration measured: the precision's "
             "matmul/convolution peak over fp32's, the most a compute-bound step could gain; GPU busy is NVML's "
             f"utilization over the timed windows, and a cell below {LAUNCH_BOUND_PCT:.0f}% is marked launch- or "
             "input-bound (its speed-up says more about the loop than the arithmetic).", "",
             "| framework | precision | images/s | over fp32 | over tf32 | ceiling | GPU busy |",
             "| --- | --- | --- | --- | --- | --- | --- |", *table]
    if launch_bound:
        lines += ["", f"Launch- or input-bound: {', '.join(launch_bound)}."]
    if above:
        lines += ["", f"Above the calibrated ceiling: {', '.join(above)} (a speed-up the arithmetic cannot give; "
                      "read the fp32 cell's log before trusting it)."]
    return lines


def calibration_output(run: AcceptanceRun) -> str:
    """The calibrate command's stdout, from this phase or an earlier one."""
    for outcome in run.outcomes:
        if outcome.check.key == "calibration" and outcome.result is not None:
            return outcome.result.stdout
    return run.calibration_output


def _installed_versions() -> dict[str, str]:
    from amp_suite.machine.environment import PACKAGES, package_version

    return {p: v for p in PACKAGES if (v := package_version(p))}

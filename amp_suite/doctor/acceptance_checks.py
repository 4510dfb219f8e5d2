"""The acceptance judges: each turns a command's result (and what it wrote) into a pass or a fail with one line.

They are pure functions of a command's output, so the GPU verdicts are tested
on any machine by handing them what a GPU run would print or write.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amp_suite.doctor.acceptance_output import (
    DoctorRow,
    find_row,
    finite_number,
    parse_calibration,
    parse_doctor_table,
    read_results,
)
from amp_suite.doctor.acceptance_records import (
    AMP_PRECISIONS,
    CPU_SWEEP_STEPS,
    CPU_WORKLOAD,
    DP_PRECISION,
    FAIL,
    GPU_PRECISIONS,
    GPU_WORKLOAD,
    NOISE_FLAG,
    PASS,
    Command,
    CommandResult,
    Verdict,
)


def _command_problem(result: CommandResult, command: Command) -> str:
    """One line about a command that timed out or printed an error, else ""."""
    if result.timed_out:
        return f"{command.display()} timed out after {command.timeout_s:g} s"
    return ""


def _last_error(result: CommandResult) -> str:
    lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return _cut((errors or lines or ["no output"])[-1], 300)


def _cut(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _doctor_rows(result: CommandResult, command: Command) -> tuple[list[DoctorRow], str]:
    rows = parse_doctor_table(result.stdout)
    if rows:
        return rows, ""
    problem = _command_problem(result, command) or f"{result.describe()}: {_last_error(result)}"
    return rows, f"the doctor printed no table ({problem})"


CUDNN_ROW = "one cuDNN build loaded"


def judge_devices(result: CommandResult, command: Command, *, frameworks: Sequence[str],
                  missing: dict[str, str], gpu: bool) -> Verdict:
    """Each requested framework is installed and its 'sees the expected device' row passes (on the GPU
    naming the CUDA runtime and cuDNN, with its 'one cuDNN build loaded' row passing where the doctor
    has one).  On a CPU one installed framework is enough."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    seen, wrong, absent = [], [], []
    for name in frameworks:
        mine = [r for r in rows if r.scope == name]
        device = next((r for r in mine if r.check == "sees the expected device"), None)
        if name in missing or any(r.check == "installed" for r in mine):
            absent.append(f"{name} is not installed ({missing.get(name) or next(r.detail for r in mine)})")
            continue
        if device is None:
            broken = next((r for r in mine if r.status == "failed"), None)
            wrong.append(f"{name}: {_cut(broken.detail) if broken else 'no device row in the doctor table'}")
        elif device.status != "passed":
            wrong.append(f"{name}: {_cut(device.detail, 300)}")
        elif gpu and not (device.detail.startswith("GPU") and "CUDA" in device.detail and "cuDNN" in device.detail):
            wrong.append(f"{name}: the device row names no CUDA runtime and cuDNN ({_cut(device.detail)})")
        else:
            loaded = next((r for r in mine if r.check == CUDNN_ROW), None)
            if gpu and loaded is not None and loaded.status != "passed":
                wrong.append(f"{name} '{CUDNN_ROW}' {loaded.status}: {_cut(loaded.detail, 200)}")
            else:
                extra = f" (loaded: {_cut(loaded.detail, 80)})" if gpu and loaded is not None else ""
                seen.append(f"{name}: {_cut(device.detail, 160)}{extra}")
    if gpu and absent:
        wrong = absent + wrong
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    if not seen:
        return Verdict(FAIL, "; ".join(absent) or "no framework requested")
    notes = [f"skipped: {a}" for a in absent]
    return Verdict(PASS, "; ".join(seen + notes))


def judge_doctor(result: CommandResult, command: Command) -> Verdict:
    """The doctor exits 0 and no row failed."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    failed = [r for r in rows if r.status == "failed"]
    counts = {s: sum(r.status == s for r in rows) for s in ("passed", "failed", "skipped")}
    summary = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    if failed or result.returncode != 0:
        named = "; ".join(f"{r.scope} '{r.check}': {_cut(r.detail, 160)}" for r in failed)
        return Verdict(FAIL, f"{result.describe()}, {summary}" + (f": {named}" if named else ""))
    return Verdict(PASS, f"exit 0, {summary}")


TF32_ROWS = ("fp32 matmul is fp32", "fp32 conv is fp32", "tf32 matmul is TF32", "tf32 conv is TF32")


def judge_tf32(result: CommandResult, command: Command, *, frameworks: Sequence[str]) -> Verdict:
    """For Keras and JAX (XLA): fp32 really fp32 and tf32 really TF32, on matmul and conv."""
    rows, problem = _doctor_rows(result, command)
    if problem:
        return Verdict(FAIL, problem)
    seen, wrong = [], []
    for name in frameworks:
        mine = {r.check: r for r in rows if r.scope == name}
        if "installed" in mine:
            continue  # not installed: the first check says so
        for check in TF32_ROWS:
            row = mine.get(check)
            if row is None:
                wrong.append(f"{name} '{check}': no row")
            elif row.status != "passed":
                wrong.append(f"{name} '{check}' {row.status}: {_cut(row.detail, 160)}")
            else:
                value = re.search(r"\d+\.\d+", row.detail)
                seen.append(f"{name} {check.split(' is ')[0]} {value.group(0) if value else 'passed'}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    if not seen:
        return Verdict(FAIL, "no Keras or JAX rows in the doctor table")
    return Verdict(PASS, ", ".join(seen))


def judge_calibration(result: CommandResult, command: Command, *, frameworks: Sequence[str],
                      tf32: bool = True) -> Verdict:
    """Every framework calibrated on the GPU, reduced-precision peaks above fp32."""
    if result.timed_out:
        return Verdict(FAIL, _command_problem(result, command))
    figures = parse_calibration(result.stdout)
    wanted = ("tf32", "fp16", "bf16") if tf32 else ("fp16", "bf16")
    seen, wrong = [], []
    for name in frameworks:
        entry = figures.get(name)
        if entry is None:
            failure = next((line for line in result.stderr.splitlines() if line.startswith(f"{name}:")), "")
            wrong.append(f"{name}: no figures" + (f" ({_cut(failure, 200)})" if failure else ""))
            continue
        if entry.kind != "gpu":
            wrong.append(f"{name}: measured on the {entry.kind}, not the GPU")
            continue
        base = entry.peaks.get("fp32")
        if not base:
            wrong.append(f"{name}: no fp32 figure")
            continue
        ratios = []
        for dtype in wanted:
            peak = entry.peaks.get(dtype)
            if not peak:
                wrong.append(f"{name}: no {dtype} figure")
            elif peak <= base:
                wrong.append(f"{name}: {dtype} {peak:.1f} TFLOP/s is not above fp32 {base:.1f}")
            ratios.append(f"{dtype} {peak / base:.1f}x" if peak else f"{dtype} n/a")
        seen.append(f"{name} fp32 {base:.1f} TFLOP/s, " + ", ".join(ratios))
    if not wrong and result.returncode != 0:
        wrong.append(f"{result.describe()}: {_last_error(result)}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    return Verdict(PASS, "; ".join(seen) or "no framework to calibrate")


def judge_sweep_command(result: CommandResult, command: Command, *,
                        judge_rows: Callable[[list[dict[str, Any]]], Verdict]) -> Verdict:
    """Read the sweep's ``OUT/results.jsonl`` and judge its rows; a timeout or a run that stored nothing fails."""
    path = Path(command.out_dir or ".") / "results.jsonl"
    rows = read_results(path)
    if not rows:
        why = _command_problem(result, command) or f"{result.describe()}: {_last_error(result)}"
        return Verdict(FAIL, f"no result in {path} ({why})")
    verdict = judge_rows(rows)
    if result.timed_out:
        return Verdict(FAIL, f"{_command_problem(result, command)}; {verdict.observed}")
    return verdict


def _not_ok(row: dict[str, Any] | None, name: str) -> str:
    if row is None:
        return f"{name}: no result"
    if row.get("status") != "ok":
        return f"{name} {row.get('status')}: {_cut(row.get('error') or 'no error text', 200)}"
    return ""


def judge_gpu_sweep(rows: list[dict[str, Any]], *, frameworks: Sequence[str],
                    precisions: Sequence[str] = GPU_PRECISIONS, workload: str = GPU_WORKLOAD,
                    tf32: bool = True) -> Verdict:
    """Every cell ok on the GPU, AMP faster than fp32, NVML telemetry with energy, no measurement flags.

    A noisy-timing flag (the windows' throughput spread, :mod:`amp_suite.machine.noise`) is reported
    beside the verdict, not failed: it is the flag doing its job on a figure the report marks ⚑, not a
    broken path (seen on an H100: eager PyTorch's tf32 cell at 12% over five windows, its GPU 42% busy).
    Every other flag (a region too short to time, throttled clocks, another process on the GPU) fails.
    """
    wrong: list[str] = []
    notes: list[str] = []
    speedups: list[str] = []
    sources: set[str] = set()
    energies: list[float] = []
    for fw in frameworks:
        throughput: dict[str, float] = {}
        for precision in precisions:
            name = f"{fw}/{workload}/{precision}"
            row = find_row(rows, fw, workload, precision)
            if row is not None and row.get("status") == "unsupported" and not tf32 and precision == "tf32":
                continue
            if (problem := _not_ok(row, name)):
                wrong.append(problem)
                continue
            assert row is not None
            metrics = row.get("metrics") or {}
            kind = (row.get("device") or {}).get("kind")
            if kind != "gpu":
                wrong.append(f"{name}: ran on {kind or 'no device'}, not the GPU")
            source = metrics.get("telemetry_source")
            if not isinstance(source, str) or not source.startswith("NVML"):
                wrong.append(f"{name}: telemetry_source is {source!r}, not NVML" if source is not None
                             else f"{name}: no telemetry_source recorded")
            else:
                sources.add(source)
            energy = finite_number(metrics.get("energy_per_image_j"))
            if energy is None or energy <= 0:
                wrong.append(f"{name}: energy_per_image_j is {metrics.get('energy_per_image_j')!r}, not above 0")
            else:
                energies.append(energy)
            flags = [str(f) for f in metrics.get("measurement_flags") or []]
            noisy = [f for f in flags if f.startswith(NOISE_FLAG)]
            if noisy:
                notes.append(f"{name} flagged: {_cut('; '.join(noisy), 160)}")
            if len(noisy) < len(flags):
                wrong.append(f"{name}: measurement_flags: {_cut('; '.join(f for f in flags if f not in noisy), 200)}")
            if (value := finite_number(metrics.get("throughput"))) is not None:
                throughput[precision] = value
        base = throughput.get("fp32")
        parts = []
        for precision in AMP_PRECISIONS:
            if precision not in precisions or precision not in throughput:
                continue
            if not base:
                wrong.append(f"{fw}/{workload}/{precision}: no fp32 throughput to compare with")
                continue
            ratio = throughput[precision] / base
            parts.append(f"{precision.removeprefix('amp_')} {ratio:.2f}x")
            if ratio <= 1:
                wrong.append(f"{fw}/{workload}/{precision}: speed-up {ratio:.2f}x over fp32 "
                             f"({throughput[precision]:,.0f} vs {base:,.0f} img/s), expected above 1")
        if parts:
            speedups.append(f"{fw} " + " ".join(parts))
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    cells = len(frameworks) * len(precisions)
    telemetry = (f"; telemetry {', '.join(sorted(sources))}, energy {min(energies) * 1e3:.3g}–"
                 f"{max(energies) * 1e3:.3g} mJ/image" if energies else "")
    flagged = "; ".join(notes) if notes else "no measurement flags"
    return Verdict(PASS, f"{cells} cells ok; speed-up over fp32: {'; '.join(speedups) or 'n/a'}{telemetry}; "
                         f"{flagged}")


def judge_cpu_sweep(rows: list[dict[str, Any]], *, frameworks: Sequence[str], workload: str = CPU_WORKLOAD,
                    precision: str = "fp32") -> Verdict:
    """Every cell ok on the CPU; telemetry 'RAPL...' with energy above 0, or 'none: reason'.

    A run of six steps is too short to time, so measurement flags are reported, not failed.
    """
    wrong, seen, notes = [], [], []
    for fw in frameworks:
        name = f"{fw}/{workload}/{precision}"
        row = find_row(rows, fw, workload, precision)
        if (problem := _not_ok(row, name)):
            wrong.append(problem)
            continue
        assert row is not None
        metrics = row.get("metrics") or {}
        source = metrics.get("telemetry_source")
        if not isinstance(source, str) or not source.strip():
            wrong.append(f"{name}: no telemetry_source recorded (expected 'RAPL...' or 'none: reason')")
        elif source.startswith("RAPL"):
            energy = finite_number(metrics.get("energy_per_image_j"))
            if energy is None or energy <= 0:
                wrong.append(f"{name}: telemetry {source} but energy_per_image_j is "
                             f"{metrics.get('energy_per_image_j')!r}")
            else:
                seen.append(f"{name} ok, {finite_number(metrics.get('throughput')) or 0:,.0f} img/s, telemetry "
                            f"{_cut(source, 80)}, {energy * 1e3:.3g} mJ/image")
        elif source.startswith("none"):
            seen.append(f"{name} ok, {finite_number(metrics.get('throughput')) or 0:,.0f} img/s, telemetry "
                        f"'{_cut(source, 120)}'")
        else:
            wrong.append(f"{name}: telemetry_source {source!r} is neither 'RAPL...' nor 'none: reason'")
        if metrics.get("measurement_flags"):
            notes.append(f"{fw} flagged (expected for {CPU_SWEEP_STEPS[1]} steps): "
                         f"{_cut('; '.join(map(str, metrics['measurement_flags'])), 120)}")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    return Verdict(PASS, "; ".join(seen + notes))


def judge_fused(rows: list[dict[str, Any]], *, workload: str = GPU_WORKLOAD) -> Verdict:
    """The PyTorch amp_fp16 cell is ok on the GPU and ran the fused optimizer."""
    name = f"torch/{workload}/amp_fp16"
    row = find_row(rows, "torch", workload, "amp_fp16")
    if (problem := _not_ok(row, name)):
        return Verdict(FAIL, problem)
    assert row is not None
    metrics = row.get("metrics") or {}
    wrong = []
    kind = (row.get("device") or {}).get("kind")
    if kind != "gpu":
        wrong.append(f"{name}: ran on {kind or 'no device'}, not the GPU")
    implementation = metrics.get("optimizer_implementation")
    if implementation != "fused":
        wrong.append(f"{name}: optimizer_implementation is {implementation!r}, not 'fused'")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong))
    return Verdict(PASS, f"{name} ok, optimizer_implementation fused, "
                         f"{finite_number(metrics.get('throughput')) or 0:,.0f} img/s")


def judge_data_parallel(rows: list[dict[str, Any]], *, frameworks: Sequence[str], workload: str = GPU_WORKLOAD,
                        precision: str = DP_PRECISION, devices: int = 2) -> Verdict:
    """One data-parallel cell per framework, each ok."""
    wrong, seen = [], []
    for fw in frameworks:
        name = f"{fw}/{workload}/{precision}/d{devices}"
        row = find_row(rows, fw, workload, precision, devices)
        if (problem := _not_ok(row, name)):
            wrong.append(problem)
            continue
        assert row is not None
        seen.append(f"{name} ok, {finite_number((row.get('metrics') or {}).get('throughput')) or 0:,.0f} img/s")
    if wrong:
        return Verdict(FAIL, "; ".join(wrong + seen))
    return Verdict(PASS, "; ".join(seen))

"""``amp-suite compare BASE NEW``: verdicts outside the noise only, the exit code of --fail-above."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

import amp_suite
from amp_suite.comparison import NO_DIFFERENCE, compare_results
from amp_suite.comparison_environment import environment_differences
from amp_suite.records import CellResult
from suite_cli import run_cli

NOISE = (0.97, 1.0, 1.03)  # a ±3% spread over three repeats


def _cell(framework, precision, repeat, throughput, *, windows=None, memory=100.0, accuracy=0.9):
    metrics = {"throughput": throughput, "peak_rss_bytes": memory * 2**20, "val_accuracy": accuracy,
               "final_loss": 1.0, "window_throughputs": windows or [], "measurement_flags": []}
    return CellResult(key=f"{framework}/tiny/{precision}/r{repeat}", framework=framework, workload="tiny",
                      precision=precision, repeat=repeat, status="ok", metrics=metrics,
                      config={"dataset": "mnist", "batch_size": 8, "devices": 1},
                      device={"kind": "cpu", "name": "cpu"})


def _write(directory: Path, cells, environment) -> Path:
    directory.mkdir(parents=True)
    (directory / "results.jsonl").write_text("".join(json.dumps(asdict(c)) + "\n" for c in cells))
    (directory / "environment.json").write_text(json.dumps(environment))
    return directory


ENV = {"amp_suite_version": "0.1.0", "python": "3.12.3", "cpu_model": "Test CPU", "cpu_flags": ["avx2", "fma"],
       "packages": {"numpy": "2.0.0"}, "settings": {"steps": 50, "repeats": 3}, "date": "2025-01-01"}


@pytest.fixture
def two_sweeps(tmp_path):
    """BASE and NEW with three repeats: fp32 10% slower in NEW, amp_bf16 1% faster, inside the noise."""
    base = [_cell("fake", "fp32", r, 1000 * k) for r, k in enumerate(NOISE)]
    base += [_cell("fake", "amp_bf16", r, 1500 * k) for r, k in enumerate(NOISE)]
    base += [_cell("torch", "fp32", 0, 500.0)]  # BASE only
    new = [_cell("fake", "fp32", r, 900 * k) for r, k in enumerate(NOISE)]
    new += [_cell("fake", "amp_bf16", r, 1515 * k) for r, k in enumerate(reversed(NOISE))]
    new += [_cell("fake", "amp_fp16", 0, 700.0)]  # NEW only
    new_env = {**ENV, "packages": {"numpy": "2.1.0"}, "cpu_flags": ["avx2", "fma", "avx512f"]}
    return _write(tmp_path / "base", base, ENV), _write(tmp_path / "new", new, new_env)


def _row(frame, metric, precision):
    return frame[(frame.metric == metric) & (frame.precision == precision)].iloc[0]


def test_a_known_regression_is_slower_and_a_change_inside_the_noise_is_none(two_sweeps):
    frame = amp_suite.compare(*two_sweeps)
    fp32 = _row(frame, "throughput", "fp32")
    assert fp32.verdict == "slower" and fp32.ratio == pytest.approx(0.9, rel=1e-3)
    assert fp32.high < 1.0 and fp32.basis == "repeats"
    bf16 = _row(frame, "throughput", "amp_bf16")
    assert bf16.verdict == NO_DIFFERENCE and bf16.low < 1.0 < bf16.high
    speedup = _row(frame, "speedup", "amp_bf16")  # NEW's paired speed-ups spread by the reversed noise
    assert speedup.ratio == pytest.approx(1.515 / 0.9 / 1.5, rel=0.01) and speedup.verdict != "slower"
    assert _row(frame, "peak_memory_mib", "fp32").verdict == NO_DIFFERENCE  # identical figures
    assert frame.attrs["base_only"] == [("tiny", "torch", "fp32", 1, "cpu", "", 0)]  # no mode or batch axis
    assert frame.attrs["new_only"] == [("tiny", "fake", "amp_fp16", 1, "cpu", "", 0)]
    assert "packages.numpy: 2.0.0 → 2.1.0" in frame.attrs["environment_differences"]
    assert "cpu_flags: +avx512f" in frame.attrs["environment_differences"]


def test_the_command_prints_tables_and_fails_above_the_threshold(two_sweeps, tmp_path):
    base, new = map(str, two_sweeps)
    done = run_cli("compare", base, new, "--fail-above", "5", "--out", str(tmp_path / "cmp.md"))
    assert done.returncode == 1, done.stderr
    assert "regression: tiny / fake / fp32: throughput 0.900x" in done.stderr
    assert "amp_bf16" not in done.stderr  # a 1% change inside the noise never fails the job
    for title in ("## Environment differences", "## Throughput, images/s", "## Speed-up over fp32",
                  "## Peak memory, MiB", "## Validation accuracy", "## Cells in one run only"):
        assert title in done.stdout
    assert "- BASE only: tiny / torch / fp32 / cpu" in done.stdout
    assert "- NEW only: tiny / fake / amp_fp16 / cpu" in done.stdout
    assert (tmp_path / "cmp.md").read_text().strip() == done.stdout.strip()
    lenient = run_cli("compare", base, new, "--fail-above", "15")
    assert lenient.returncode == 0, lenient.stderr
    assert run_cli("compare", base, new).returncode == 0
    assert run_cli("compare", base, str(tmp_path / "nowhere")).returncode == 2


def test_a_single_repeat_judges_by_its_windows_and_says_so():
    tight = [1000.0, 1010.0, 990.0, 1005.0, 995.0]
    base = [_cell("fake", "fp32", 0, 1000.0, windows=tight)]
    slower = [_cell("fake", "fp32", 0, 900.0, windows=[w * 0.9 for w in tight])]
    same = [_cell("fake", "fp32", 0, 1010.0, windows=[w * 1.01 for w in reversed(tight)] + [1000.0])]
    frame = compare_results(base, slower)
    row = _row(frame, "throughput", "fp32")
    assert row.verdict == "slower" and row.basis == "timed windows"
    noisy = [_cell("fake", "fp32", 0, 1010.0, windows=[800.0, 1200.0, 1010.0, 950.0, 1100.0])]
    assert _row(compare_results(base, noisy), "throughput", "fp32").verdict == NO_DIFFERENCE
    assert _row(compare_results(base, same), "throughput", "fp32").verdict in (NO_DIFFERENCE, "faster")
    blind = compare_results([_cell("fake", "fp32", 0, 1000.0)], [_cell("fake", "fp32", 0, 900.0)])
    assert _row(blind, "throughput", "fp32").verdict.startswith("no verdict")


def test_a_guard_that_cannot_judge_says_so(tmp_path):
    # one repeat, one timed window on each side: a 36% slow-down has no verdict, and --fail-above says it saw nothing
    base = _write(tmp_path / "base", [_cell("fake", "fp32", 0, 1000.0), _cell("fake", "amp_bf16", 0, 1500.0)], ENV)
    new = _write(tmp_path / "new", [_cell("fake", "fp32", 0, 640.0), _cell("fake", "amp_bf16", 0, 1400.0)], ENV)
    done = run_cli("compare", str(base), str(new), "--fail-above", "10")
    assert done.returncode == 0, done.stderr
    assert "--fail-above could not judge 3 throughput and speed-up rows" in done.stderr  # 2 throughputs, 1 speed-up
    assert "--repeats 2 or more" in done.stderr
    nowhere = tmp_path / "no-such-folder" / "cmp.md"
    refused = run_cli("compare", str(base), str(new), "--out", str(nowhere))
    assert refused.returncode == 2 and refused.stdout == ""  # refused before anything is printed
    assert f"cannot write {nowhere}: the folder {nowhere.parent} does not exist" in refused.stderr


def test_compare_shows_the_speedup_the_report_shows():
    # two paired repeats whose ratios are 0.733 and 0.079: the report's geometric mean, 0.24, not their median 0.41
    base = [_cell("fake", "fp32", 0, 597.4), _cell("fake", "fp32", 1, 5595.0),
            _cell("fake", "amp_bf16", 0, 437.6), _cell("fake", "amp_bf16", 1, 442.3)]
    from amp_suite.report.intervals import log_interval, paired_ratios

    frame = compare_results(base, base)
    row = _row(frame, "speedup", "amp_bf16")
    expected = log_interval(paired_ratios({0: 437.6, 1: 442.3}, {0: 597.4, 1: 5595.0})).value
    assert row.base == pytest.approx(expected) and row.base == pytest.approx((437.6 / 597.4 * 442.3 / 5595.0) ** 0.5)
    assert row.new == row.base


def test_a_sweep_of_the_fake_framework_compared_with_itself_has_no_difference(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "same"
    amp_suite.run(frameworks="fake", precisions="fp32,amp_bf16", config=tiny_config, plugins=["fakefw"],
                  repeats=2, steps=12, window_steps=4, out=str(out))
    frame = amp_suite.compare(out, out)
    assert set(frame.metric) == {"throughput", "speedup", "peak_memory_mib"}  # synthetic data: no accuracy
    assert (frame.verdict == NO_DIFFERENCE).all() and (frame.ratio == 1.0).all()
    assert environment_differences(json.loads((out / "environment.json").read_text()),
                                   json.loads((out / "environment.json").read_text())) == []


def _shown_table(markdown: str, title: str) -> list[dict[str, str]]:
    """The rows of one of the comparison's tables, as the markdown shows them."""
    lines = markdown.split(f"## {title}", 1)[1].splitlines()
    table = lines[2:lines.index("", 2)]  # the title's line, a blank line, the table, a blank line
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    return [dict(zip(header, [cell.strip() for cell in line.strip("|").split("|")], strict=True)) for line in table[2:]]


def test_the_shown_base_and_new_reproduce_the_shown_ratio(tmp_path):
    # five repeats against two, skewed so that each side's median and geometric mean differ by 5% or more
    base = [_cell("fake", "fp32", r, t) for r, t in enumerate((1000.0, 1020.0, 1040.0, 600.0, 610.0))]
    base += [_cell("fake", "amp_bf16", r, t) for r, t in enumerate((700.0, 720.0, 740.0, 400.0, 410.0))]
    new = [_cell("fake", "fp32", r, t) for r, t in enumerate((500.0, 1000.0))]
    new += [_cell("fake", "amp_bf16", r, t) for r, t in enumerate((300.0, 700.0))]
    frame = amp_suite.compare(_write(tmp_path / "base", base, ENV), _write(tmp_path / "new", new, ENV))
    rows = _shown_table(frame.attrs["markdown"], "Throughput, images/s")
    assert [row["precision"] for row in rows] == ["fp32", "amp_bf16"]
    for row in rows:
        shown_base, shown_new = float(row["BASE"].replace(",", "")), float(row["NEW"].replace(",", ""))
        ratio, interval = row["NEW/BASE (95%)"].split(" ", 1)
        low, high = map(float, interval.strip("()").split("–"))
        # the figures are shown to the unit and the ratio to the third decimal: that much rounding, and no more
        slack = shown_new / shown_base * (0.5 / shown_base + 0.5 / shown_new) + 0.0005
        assert abs(shown_new / shown_base - float(ratio)) <= slack, row
        assert low <= float(ratio) <= high and row["verdict"] == NO_DIFFERENCE  # the verdict is the interval's
    assert "geometric mean" in frame.attrs["markdown"]  # the note says which figure BASE and NEW are


def test_a_single_run_shows_its_own_figure_and_its_windows_spread_around_it():
    # the run's throughput (samples over time) is not its windows' geometric mean, about 1,010 here
    base = [_cell("fake", "fp32", 0, 1000.0, windows=[800.0, 1100.0, 1150.0])]
    new = [_cell("fake", "fp32", r, t) for r, t in enumerate((880.0, 900.0, 920.0))]
    row = _row(compare_results(base, new), "throughput", "fp32")
    assert row.base == 1000.0 and row.basis == "repeats and timed windows"
    assert row.ratio == pytest.approx(row.new / row.base) and row.ratio == pytest.approx((row.low * row.high) ** 0.5)


def test_no_speedup_is_taken_over_an_fp32_of_other_settings():
    """A trial's NEW folder held fp32 of 6 steps beside amp_bf16 of 3: compare reported their ratio as NEW's
    speed-up.  As the report, it takes a speed-up only where both ran the same settings."""
    def sweep(fp32_steps):
        cells = [_cell("fake", "fp32", r, 1000 * k) for r, k in enumerate(NOISE)]
        cells += [_cell("fake", "amp_bf16", r, 1500 * k) for r, k in enumerate(NOISE)]
        for cell in cells:
            steps = fp32_steps if cell.precision == "fp32" else 3
            cell.definition = {"workload": {}, "data": {}, "options": {"steps": steps, "seed": 0}, "environment": {}}
        return cells

    alike = compare_results(sweep(3), sweep(3))
    assert "speedup" in set(alike["metric"])
    mixed = compare_results(sweep(3), sweep(6))
    assert "speedup" not in set(mixed["metric"]) and "throughput" in set(mixed["metric"])


def test_a_sweep_without_its_environment_is_not_described_as_this_machine_now(two_sweeps, capsys):
    """A hostile user's trial: compare on a folder of results copied without environment.json showed this machine
    and the current time as that sweep's, its CPU and packages compared, and `settings.modes: (none) -> (none)`."""
    base, new = two_sweeps
    (base / "environment.json").unlink()
    frame = amp_suite.compare(base, new)
    markdown = frame.attrs["markdown"]
    assert f"- BASE: {base} (unknown (not recorded))" in markdown
    assert frame.attrs["environment_differences"] == [
        "BASE's environment.json is missing: its machine, versions and settings are unknown, so none is compared "
        "(this machine's are not the sweep's)"]
    assert "cpu_flags" not in markdown and "(none) → (none)" not in markdown
    # the warning says what follows for a comparison, not that this machine stands in, as a report's does
    err = capsys.readouterr().err
    assert (f"warning: {base / 'environment.json'} is missing; its machine, versions and settings are unknown, and "
            "the comparison says so") in err and "stands in" not in err, err
    from amp_suite.report.context import environment_lines
    from amp_suite.sweep.stored import stored_environment

    assert environment_lines(stored_environment(base, warn=False))[0].startswith(
        "- recorded environment: none (environment.json is missing); the lines below describe the machine")


def test_a_setting_absent_on_one_side_and_empty_on_the_other_is_no_difference():
    assert environment_differences({**ENV, "settings": {"modes": None}}, {**ENV, "settings": {"modes": []}}) == []


def test_compare_names_a_bad_folder_or_out_for_what_it_is(two_sweeps, tmp_path, capsys, monkeypatch):
    """A hostile user's trial: `--out ''` exited 0 and wrote nothing, `--out ' '` wrote a file named " ", and a file,
    a link loop or an empty argument given as a sweep each read "'X/results.jsonl' does not exist"."""
    from amp_suite.cli import main

    base, new = two_sweeps
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine\n")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    for argv, message in (
            ([str(base), str(new), "--out", ""], "--out must name a file, got ''"),
            ([str(base), str(new), "--out", " "], "--out must name a file, got ' '"),
            ([str(base), "afile"], "'afile' is not a directory; pass a sweep's output directory"),
            (["loop1", str(new)], "'loop1' is a link that leads nowhere (or in a loop)"),
            (["", str(new)], "no sweep's output directory given ('')")):
        assert main(["compare", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, (argv, err)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile", "base", "loop1", "loop2", "new"]

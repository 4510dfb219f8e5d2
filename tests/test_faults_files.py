"""Issue 39, part A: nothing of the user's is deleted or overwritten, stored values are checked, text is bounded.

One test per defect: each builds the situation the defect was found in, then asserts the fixed behaviour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_suite.envs import EnvironmentSpec, state_of
from amp_suite.envs.build import STAMP, create, fingerprint, remove
from amp_suite.owned_paths import MARKER, MARKER_TEXT, NotOursError, make_marked_folder
from suite_cli import run_cli
from suite_cli import tiny_config_file as _config

SPEC = EnvironmentSpec("six@a", "fake", ("six==1.16.0",))
ENVIRONMENT = '\n[environments."six@a"]\nframework = "fake"\nrequirements = ["six==1.16.0"]\n'
FAILING_INSTALLER = "/bin/false"  # an installer that fails at once: create() cleans up after it


def _foreign(envs: Path) -> Path:
    """A folder of the user's that happens to carry a declared environment's name."""
    folder = envs / SPEC.name
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "thesis.tex").write_text("a week of work")
    return folder


# --- 1. environment folders ------------------------------------------------------------------


def test_env_create_refuses_to_remove_a_folder_amp_suite_did_not_make(tmp_path):
    """HIGH: env create removed a foreign folder with an environment's name before building."""
    folder = _foreign(tmp_path)
    with pytest.raises(NotOursError) as info:
        create(SPEC, tmp_path, uv=FAILING_INSTALLER)
    assert "\n" not in str(info.value) and str(folder) in str(info.value) and "left alone" in str(info.value)
    assert (folder / "data" / "thesis.tex").read_text() == "a week of work"


def test_env_remove_refuses_a_folder_amp_suite_did_not_make(tmp_path):
    """HIGH: env remove deleted a foreign folder outright."""
    folder = _foreign(tmp_path)
    config = _config(tmp_path, ENVIRONMENT)
    done = run_cli("env", "remove", SPEC.name, "--config", str(config), env={"AMP_SUITE_ENVS": str(tmp_path)})
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(errors) == 1 and "not make" in errors[0] and str(folder) in errors[0]
    assert (folder / "data" / "thesis.tex").exists()


def test_env_list_does_not_call_a_foreign_folder_a_half_finished_build(tmp_path):
    """HIGH: env list called a foreign folder a half-finished build and advised env create."""
    _foreign(tmp_path)
    state = state_of(SPEC, tmp_path)
    assert not state.built and "never finished" not in state.problem and "not an environment amp-suite built" \
        in state.problem
    config = _config(tmp_path, ENVIRONMENT)
    listed = run_cli("env", "list", "--config", str(config), env={"AMP_SUITE_ENVS": str(tmp_path)})
    assert "never finished" not in listed.stdout and "leaves it alone" in listed.stdout


def test_a_failed_build_removes_only_the_folder_it_made(tmp_path):
    """HIGH: a failed build left a foreign folder gone; it removes its own, marked folder only."""
    with pytest.raises(Exception, match="could not be built"):
        create(SPEC, tmp_path, uv=FAILING_INSTALLER)
    assert not (tmp_path / SPEC.name).exists()


def test_a_link_in_place_of_an_environment_or_its_marker_is_not_ours(tmp_path):
    """HIGH: the marker is checked without following links (a link to a marked folder, a linked marker)."""
    elsewhere = tmp_path / "elsewhere"
    make_marked_folder(elsewhere)
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / SPEC.name).symlink_to(elsewhere)
    with pytest.raises(NotOursError):
        remove(SPEC, envs)
    assert (elsewhere / MARKER).exists() and (envs / SPEC.name).is_symlink()
    (envs / SPEC.name).unlink()
    (envs / SPEC.name).mkdir()
    (envs / SPEC.name / MARKER).symlink_to(elsewhere / MARKER)
    with pytest.raises(NotOursError):
        remove(SPEC, envs)
    assert (envs / SPEC.name / MARKER).is_symlink()


def test_a_marked_or_stamped_environment_is_still_removed(tmp_path):
    """A folder amp-suite built (its marker, or a stamp from before the marker) is removed as before."""
    make_marked_folder(tmp_path / SPEC.name)
    assert remove(SPEC, tmp_path).startswith("removed")
    (tmp_path / SPEC.name).mkdir()
    (tmp_path / SPEC.name / STAMP).write_text(json.dumps({"fingerprint": fingerprint(SPEC)}))
    assert remove(SPEC, tmp_path).startswith("removed") and not (tmp_path / SPEC.name).exists()


_ENTRY = st.sampled_from(["file", "dir", "link-to-outside", "link-to-dir-outside"])
_MARKERS = st.sampled_from(["none", "good", "wrong-text", "link", "directory"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), _ENTRY, max_size=6),
       marker=_MARKERS, folder_is_link=st.booleans())
def test_generated_folders_never_lose_what_amp_suite_did_not_make(tmp_path_factory, entries, marker,
                                                                 folder_is_link):
    """HIGH, property: whatever a folder holds, remove and create delete it only when it carries a real marker."""
    root = tmp_path_factory.mktemp("prop")
    outside = root / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("keep")
    (outside / "sub" / "keep.txt").write_text("keep")
    real = root / "real"
    real.mkdir()
    for name, kind in entries.items():
        if kind == "file":
            (real / name).write_text(name)
        elif kind == "dir":
            (real / name).mkdir()
            (real / name / "inner").write_text(name)
        elif kind == "link-to-outside":
            (real / name).symlink_to(outside / "keep.txt")
        else:
            (real / name).symlink_to(outside / "sub")
    if marker == "good":
        (real / MARKER).write_text(MARKER_TEXT)
    elif marker == "wrong-text":
        (real / MARKER).write_text("mine\n")
    elif marker == "link":
        (outside / "marker").write_text(MARKER_TEXT)
        (real / MARKER).symlink_to(outside / "marker")
    elif marker == "directory":
        (real / MARKER).mkdir()
    envs = root / "envs"
    envs.mkdir()
    if folder_is_link:
        (envs / SPEC.name).symlink_to(real)
    else:
        real.rename(envs / SPEC.name)
        real = envs / SPEC.name
    ours = marker == "good" and not folder_is_link
    before = sorted(str(p.relative_to(real)) for p in real.rglob("*"))
    for action in (lambda: remove(SPEC, envs), lambda: create(SPEC, envs, uv=FAILING_INSTALLER)):
        try:
            action()
        except NotOursError:
            assert not ours
        except Exception as exc:  # the failing installer
            assert ours and "could not be built" in str(exc)
        if not ours:
            assert sorted(str(p.relative_to(real)) for p in real.rglob("*")) == before
    assert ours != os.path.lexists(envs / SPEC.name)
    assert (outside / "keep.txt").read_text() == "keep" and (outside / "sub" / "keep.txt").read_text() == "keep"
    if marker == "link":
        assert (outside / "marker").read_text() == MARKER_TEXT


# --- 2. files a command writes ------------------------------------------------------------------

from dataclasses import asdict  # noqa: E402

from amp_suite.cli import main  # noqa: E402
from amp_suite.records import CellResult  # noqa: E402

ENV = {"amp_suite_version": "0.1.0", "python": "3.12.3", "cpu_model": "Test CPU", "date": "2025-01-01"}


def _cell(precision="fp32", repeat=0, throughput=1000.0, **fields) -> CellResult:
    metrics = {"throughput": throughput, "peak_rss_bytes": 100 * 2**20, "val_accuracy": 0.9, "final_loss": 1.0,
               **fields.pop("metrics", {})}
    return CellResult(key=f"fake/tiny/{precision}/r{repeat}", framework="fake", workload="tiny", precision=precision,
                      repeat=repeat, status="ok", metrics=metrics, config={"dataset": "mnist", "batch_size": 8},
                      device={"kind": "cpu", "name": "cpu"}, **fields)


def _sweep(directory: Path, cells=None, environment=None) -> Path:
    directory.mkdir(parents=True)
    cells = [_cell(), _cell("amp_bf16", throughput=1500.0)] if cells is None else cells
    (directory / "results.jsonl").write_text("".join(json.dumps(asdict(c)) + "\n" for c in cells))
    (directory / "environment.json").write_text(json.dumps(environment or ENV))
    return directory


def _stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_compare_out_never_replaces_a_sweeps_stored_results(tmp_path, capsys):
    """MEDIUM: compare --out wrote over a sweep's own results.jsonl (with or without --force)."""
    base, new = _sweep(tmp_path / "base"), _sweep(tmp_path / "new")
    stored = (base / "results.jsonl").read_bytes()
    for extra in ([], ["--force"]):
        assert main(["compare", str(base), str(new), "--out", str(base / "results.jsonl"), *extra]) == 2
        lines = _stderr_lines(capsys)
        assert len(lines) == 1 and "stored results.jsonl" in lines[0]
    assert (base / "results.jsonl").read_bytes() == stored


def test_compare_out_replaces_a_foreign_file_only_with_force(tmp_path, capsys):
    """MEDIUM: compare --out replaced any file; now only its own output, or another with --force."""
    base, new = _sweep(tmp_path / "base"), _sweep(tmp_path / "new")
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    assert main(["compare", str(base), str(new), "--out", str(notes)]) == 2
    assert "--force" in _stderr_lines(capsys)[0] and notes.read_text() == "my notes\n"
    assert main(["compare", str(base), str(new), "--out", str(notes), "--force"]) == 0
    assert notes.read_text().startswith("# amp-suite compare")
    assert main(["compare", str(base), str(new), "--out", str(notes)]) == 0  # its own output: replaced freely
    capsys.readouterr()
    link = tmp_path / "link.md"
    link.symlink_to(notes)
    assert main(["compare", str(base), str(new), "--out", str(link), "--force"]) == 2  # a link: never
    assert link.is_symlink()


def test_report_refuses_a_report_md_it_did_not_write(tmp_path, capsys):
    """MEDIUM: report replaced a report.md amp-suite did not write; now only with --force."""
    sweep = _sweep(tmp_path / "out")
    (sweep / "report.md").write_text("# My own analysis\n")
    assert main(["report", str(sweep)]) == 2
    assert "--force" in _stderr_lines(capsys)[0] and (sweep / "report.md").read_text() == "# My own analysis\n"
    assert main(["report", str(sweep), "--force"]) == 0
    assert (sweep / "report.md").read_text().startswith("# amp-suite report")
    assert main(["report", str(sweep)]) == 0  # its own report: rebuilt freely


def test_a_report_of_no_valid_result_keeps_the_good_report_unless_forced(tmp_path, capsys):
    """MEDIUM+LOW: a report rebuilt from zero valid results replaced the good one and kept the old charts."""
    sweep = _sweep(tmp_path / "out")
    assert main(["report", str(sweep)]) == 0
    good = (sweep / "report.md").read_text()
    charts = sorted(p.name for p in sweep.glob("chart-*.png"))
    (sweep / "results.jsonl").write_text("# amp-suite compare\n")  # what compare --out used to leave there
    capsys.readouterr()
    assert main(["report", str(sweep)]) == 2
    assert "holds no valid result" in _stderr_lines(capsys)[-1] and (sweep / "report.md").read_text() == good
    assert main(["report", str(sweep), "--force"]) == 0
    assert "_no results_" in (sweep / "report.md").read_text()
    if charts:  # matplotlib installed: the first report drew charts, the empty one removed them
        assert not list(sweep.glob("chart-*.png")) and not (sweep / "charts.json").exists()


def test_charts_are_written_before_the_report_that_links_them():
    """LOW: a signal while the report was written left a report.md pointing at charts never written."""
    from amp_suite.sweep.engine import make_host

    order = make_host([])._implementers("write_report")
    assert order.index("charts") < order.index("reporters")

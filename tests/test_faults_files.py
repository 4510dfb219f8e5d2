"""Issue 39, part A: nothing of the user's is deleted or overwritten, stored values are checked, text is bounded.

One test per defect: each builds the situation the defect was found in, then asserts the fixed behaviour.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amp_suite
from amp_suite.cli import main
from amp_suite.envs import EnvironmentSpec, state_of
from amp_suite.envs.build import STAMP, create, fingerprint, remove
from amp_suite.errors import StoredValueError, UsageError
from amp_suite.owned_paths import MARKER, MARKER_TEXT, NotOursError, make_marked_folder
from amp_suite.records import CellResult
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


@pytest.mark.parametrize("kind", ["file", "broken link", "link to a file"])
def test_env_list_says_when_the_environments_folder_is_no_folder(tmp_path, kind):
    """A file (or a link to nothing) named by AMP_SUITE_ENVS: env list said 'managed ones in' it, as of a folder."""
    envs = tmp_path / "envs"
    if kind == "file":
        envs.write_text("mine")
    else:
        if kind == "link to a file":
            (tmp_path / "target").write_text("mine")
        envs.symlink_to(tmp_path / ("target" if kind == "link to a file" else "nowhere"))
    listed = run_cli("env", "list", "--config", str(_config(tmp_path, ENVIRONMENT)), env={"AMP_SUITE_ENVS": str(envs)})
    what = {"file": "a regular file", "broken link": "a link that leads nowhere",
            "link to a file": "a link to a regular file"}[kind]
    assert listed.returncode == 0 and (f"managed ones would be in {envs}, but it is {what}, not a folder: none can be "
                                       "built there; set AMP_SUITE_ENVS to a folder") in listed.stdout, listed.stdout
    assert envs.is_symlink() or envs.read_text() == "mine"
    assert kind != "link to a file" or (tmp_path / "target").read_text() == "mine"


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
    with pytest.raises(NotOursError, match=r"is a symbolic link amp-suite did not make \(amp-suite makes a real "
                                           "folder with its .* marker in it, and follows no link to one"):
        remove(SPEC, envs)
    assert (elsewhere / MARKER).exists() and (envs / SPEC.name).is_symlink()
    (envs / SPEC.name).unlink()
    (envs / SPEC.name).mkdir()
    (envs / SPEC.name / MARKER).symlink_to(elsewhere / MARKER)
    # the refusal says what is wrong with the marker there, not that there is none
    with pytest.raises(NotOursError, match=f"its {re.escape(MARKER)} marker is a symbolic link, where amp-suite "
                                           "writes a file"):
        remove(SPEC, envs)
    assert (envs / SPEC.name / MARKER).is_symlink()
    (envs / SPEC.name / MARKER).unlink()
    (envs / SPEC.name / MARKER).write_text("mine\n")
    with pytest.raises(NotOursError, match="marker does not hold what amp-suite writes"):
        remove(SPEC, envs)
    (envs / SPEC.name / MARKER).unlink()
    (envs / SPEC.name / "keep.txt").write_text("keep")
    with pytest.raises(NotOursError, match=f"it holds no {re.escape(MARKER)} marker"):
        remove(SPEC, envs)
    assert (envs / SPEC.name / "keep.txt").read_text() == "keep"


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
    ours = not folder_is_link and (marker == "good" or (marker == "none" and not entries))  # empty: nothing to lose
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


ENV = {"amp_suite_version": "0.1.0", "python": "3.12.3", "cpu_model": "Test CPU", "date": "2025-01-01"}


def _cell(precision="fp32", repeat=0, throughput=1000.0, **fields) -> CellResult:
    metrics = {"throughput": throughput, "peak_rss_bytes": 100 * 2**20, "val_accuracy": 0.9, "final_loss": 1.0,
               **fields.pop("metrics", {})}
    fields.setdefault("config", {"dataset": "mnist", "batch_size": 8})
    fields.setdefault("device", {"kind": "cpu", "name": "cpu"})
    fields.setdefault("workload", "tiny")
    return CellResult(key=f"fake/{fields['workload']}/{precision}/r{repeat}", framework="fake", precision=precision,
                      repeat=repeat, status="ok", metrics=metrics, **fields)


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


@pytest.mark.usefixtures("report_charts")
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


@pytest.mark.usefixtures("report_charts")
def test_charts_are_written_before_the_report_that_links_them():
    """LOW: a signal while the report was written left a report.md pointing at charts never written."""
    from amp_suite.sweep.resolve import make_host

    order = make_host([])._implementers("write_report")
    assert order.index("charts") < order.index("reporters")


# --- 3. stored values are checked where they are read ----------------------------------------------


@pytest.mark.parametrize("metrics,field", [
    ({"peak_rss_bytes": "lots"}, "metrics.peak_rss_bytes"),
    ({"peak_rss_bytes": [1, 2]}, "metrics.peak_rss_bytes"),
    ({"measurement_flags": True}, "metrics.measurement_flags"),
    ({"dataset_note": 5}, "metrics.dataset_note"),
    ({"throughput": -5.0}, "metrics.throughput"),
    ({"val_accuracy": -2.0}, "metrics.val_accuracy"),
    ({"window_throughputs": "fast"}, "metrics.window_throughputs"),
    ({"compilation": "x" * 100_000}, "metrics.compilation"),
])
def test_a_stored_value_of_the_wrong_type_drops_that_field_and_every_reporter_writes(tmp_path, capsys, metrics,
                                                                                      field):
    """MEDIUM+LOW: one wrong-typed or impossible stored value stopped every reporter (exit 2, no report)."""
    sweep = _sweep(tmp_path / "out", [_cell(metrics=metrics), _cell("amp_bf16", throughput=1500.0)])
    assert main(["report", str(sweep)]) == 0
    warning = [line for line in _stderr_lines(capsys) if "warning" in line]
    assert len(warning) == 1 and f"line 1, field {field}" in warning[0] and str(sweep / "results.jsonl") in warning[0]
    assert "| tiny" in (sweep / "report.md").read_text() and (sweep / "results.csv").exists()


@pytest.mark.parametrize("fields,field", [
    ({"device": {"kind": 5, "name": "cpu"}}, "device.kind"),
    ({"config": {"dataset": 5, "batch_size": 8}}, "config.dataset"),
    ({"config": {"dataset": "mnist", "devices": "two"}}, "config.devices"),
])
def test_a_wrong_type_in_a_results_config_or_device_drops_that_field(tmp_path, capsys, fields, field):
    """MEDIUM: a non-text device kind or dataset name stopped the built-in reporter."""
    sweep = _sweep(tmp_path / "out", [_cell(**fields), _cell("amp_bf16", throughput=1500.0)])
    assert main(["report", str(sweep)]) == 0
    assert f"field {field}" in capsys.readouterr().err


def test_load_raises_the_projects_error_naming_file_line_and_field(tmp_path, capsys):
    """MEDIUM: amp_suite.load() raised a bare TypeError on a stored value of the wrong type."""
    sweep = _sweep(tmp_path / "out", [_cell(), _cell("amp_bf16", metrics={"peak_rss_bytes": "lots"})])
    with pytest.raises(StoredValueError) as info:
        amp_suite.load(sweep)
    assert isinstance(info.value, UsageError)
    assert f"{sweep / 'results.jsonl'}: line 2, field metrics.peak_rss_bytes" in str(info.value)
    frame = amp_suite.load(sweep, strict=False)  # the reporters' way: dropped, with a warning
    assert len(frame) == 2 and "metrics.peak_rss_bytes" in capsys.readouterr().err


@pytest.mark.parametrize("call", [lambda: amp_suite.load(5), lambda: amp_suite.load(None),
                                  lambda: amp_suite.load(b"/tmp"), lambda: amp_suite.compare(5, "x"),
                                  lambda: amp_suite.load("/tmp", strict="yes")])
def test_the_api_answers_a_wrong_argument_type_with_its_own_error(call):
    """LOW: the Python API raised bare TypeError for wrong argument types."""
    with pytest.raises(UsageError):
        call()


def test_the_api_accepts_generators_where_it_declares_iterables():
    """LOW: run() refused a generator for frameworks/plugins although it declares Iterable[str]."""
    from amp_suite.api import _names
    from amp_suite.sweep.request_checks import plugin_names

    assert _names((name for name in ["torch", "jax"]), "frameworks") == ("torch", "jax")
    assert plugin_names(name for name in ["fakefw"]) == ("fakefw",)
    with pytest.raises(UsageError, match="unknown framework"):  # the generator's names reach the name check
        amp_suite.run(frameworks=(name for name in ["no-such-framework"]), steps=3, warmup=1)


# --- 4. text that reaches a report is bounded and escaped --------------------------------------------


@pytest.mark.usefixtures("report_charts")
def test_a_script_tag_in_a_stored_name_does_not_reach_report_md_raw(tmp_path):
    """LOW: `<script>` in a stored name passed into report.md raw (it will reach the HTML report)."""
    evil = "<script>alert(1)</script>"
    sweep = _sweep(tmp_path / "out", [_cell(workload=evil), _cell("amp_bf16", workload=evil)],
                   {**ENV, "cpu_model": evil})
    assert main(["report", str(sweep)]) == 0
    text = (sweep / "report.md").read_text()
    assert "<script" not in text and "&lt;script>" in text


def test_a_huge_stored_name_does_not_bloat_the_report(tmp_path, capsys):
    """LOW: a 100 kB stored name made a 6.9 MB report; the line is skipped, named, and the report stays small."""
    huge = "w" * 100_000
    sweep = _sweep(tmp_path / "out", [_cell(), _cell("amp_bf16", throughput=1500.0), _cell(workload=huge)],
                   {**ENV, "cpu_model": "c" * 100_000})
    assert main(["report", str(sweep)]) == 0
    assert "line 3 (field 'key' is oversized" in capsys.readouterr().err
    assert (sweep / "report.md").stat().st_size < 30_000


def test_text_helpers_keep_one_bounded_line_for_markdown_and_html():
    """LOW: the escaping function is one, usable for the markdown report now and HTML later."""
    from amp_suite.report.text import html_text, markdown_cell, path_text

    assert markdown_cell("a|b\n<i>") == "a\\|b &lt;i>"
    assert html_text('<a href="x">\n') == "&lt;a href=&quot;x&quot;&gt;"
    assert len(markdown_cell("x" * 10_000)) < 400
    assert "\n" not in path_text("/tmp/out\nwrote /etc/passwd") and "\\n" in path_text("a\nb")


def test_an_out_with_a_newline_does_not_split_the_summary_line(tmp_path, capsys):
    """LOW: an --out holding a newline split the run's summary line in two."""
    config = _config(tmp_path)
    out = tmp_path / "a\nwrote fake.md"
    main(["run", "--config", str(config), "-p", "fakefw", "--frameworks", "fake", "--precisions", "fp32", "-q",
          "--out", str(out)])
    err = capsys.readouterr().err
    summary = [line for line in err.splitlines() if " cell" in line and ("->" in line or "wrote" in line)]
    assert summary and all("a\\nwrote fake.md" in line for line in summary), err
    assert not any(line.startswith("wrote fake.md") for line in err.splitlines())


# --- 5. the low items of files, config and stored data -----------------------------------------------


def test_fail_above_with_no_shared_cell_says_so_and_fails(tmp_path, capsys):
    """LOW: compare --fail-above exited 0 in silence when the two sweeps shared no cell."""
    base = _sweep(tmp_path / "base")
    new = _sweep(tmp_path / "new", [_cell("amp_fp16")])
    assert main(["compare", str(base), str(new)]) == 0  # a plain comparison still just shows both
    capsys.readouterr()
    assert main(["compare", str(base), str(new), "--fail-above", "5"]) == 1
    assert "share no cell" in _stderr_lines(capsys)[-1]


def test_fail_above_100_is_accepted(tmp_path, capsys):
    """LOW: --fail-above 100 was refused although percentages run to 100."""
    base, new = _sweep(tmp_path / "base"), _sweep(tmp_path / "new")
    assert main(["compare", str(base), str(new), "--fail-above", "100"]) == 0
    assert main(["compare", str(base), str(new), "--fail-above", "100.5"]) == 2


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    """LOW: a --data-dir that is a file was passed over in silence."""
    from amp_suite.datasets.fetch import check_data_dir

    a_file = tmp_path / "mnist.tar"
    a_file.write_text("")
    with pytest.raises(UsageError, match="is a regular file, not a directory"):
        check_data_dir(a_file)
    check_data_dir(tmp_path)  # a directory is fine


def test_a_data_dir_that_does_not_exist_is_a_one_line_error(tiny_config, tmp_path):
    """A missing --data-dir was passed over in silence, and the packaged MNIST used instead."""
    from suite_cli import run_cli

    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--dataset", "mnist", "--workloads",
                  "mnist_cnn", "--data-dir", str(tmp_path / "not-yet"), "--precisions", "fp32")
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"amp-suite: error: the data directory {str(tmp_path / 'not-yet')!r} does not exist")
    assert not (tmp_path / "out" / "results.jsonl").exists()


@pytest.mark.parametrize("kind", ["fifo", "broken link"])
def test_an_implicit_benchmarks_toml_that_is_no_file_is_named(tmp_path, monkeypatch, kind):
    """LOW: an implicit ./benchmarks.toml that is a FIFO or a broken link was ignored in silence."""
    from amp_suite.config.catalog import find_config

    monkeypatch.chdir(tmp_path)
    if kind == "fifo":
        os.mkfifo(tmp_path / "benchmarks.toml")
    else:
        (tmp_path / "benchmarks.toml").symlink_to(tmp_path / "gone.toml")
    with pytest.raises(UsageError, match="FIFO|broken symbolic link") as info:
        find_config(None)
    assert "--config" in str(info.value)


def test_a_config_with_a_byte_order_mark_gets_a_hint(tmp_path):
    """LOW: a config saved with a UTF-8 BOM got 'Invalid statement' without a hint."""
    from amp_suite.config.catalog import load_config

    config = tmp_path / "b.toml"
    config.write_bytes(b"\xef\xbb\xbf[defaults]\nsteps = 3\n")
    with pytest.raises(UsageError, match="byte-order mark"):
        load_config(config)


def test_a_disabled_framework_is_named_as_disabled_not_as_a_missing_environment(tmp_path, monkeypatch, capsys):
    """LOW: the error for a framework disabled by AMP_SUITE_DISABLE_PLUGINS suggested an environment."""
    monkeypatch.setenv("AMP_SUITE_DISABLE_PLUGINS", "jax")
    assert main(["run", "--config", str(_config(tmp_path)), "--frameworks", "jax", "-q"]) == 2
    line = _stderr_lines(capsys)[-1]
    assert "is disabled" in line and "AMP_SUITE_DISABLE_PLUGINS" in line and "environment" not in line


def test_env_create_refuses_a_framework_no_plugin_provides(tmp_path):
    """LOW: env create built an environment for a framework no plugin provides."""
    config = _config(tmp_path, '\n[environments."x@1"]\nframework = "nosuch"\nrequirements = ["six"]\n')
    done = run_cli("env", "create", "x@1", "--config", str(config), env={"AMP_SUITE_ENVS": str(tmp_path / "envs")})
    assert done.returncode == 1 and "no loaded plugin provides" in done.stderr
    assert not (tmp_path / "envs" / "x@1").exists()


def test_a_copy_inside_another_repository_records_no_commit_of_its_own(tmp_path):
    """LOW: amp-suite unpacked from a source archive inside another git repository recorded that one's commit."""
    import shutil
    import subprocess

    from amp_suite.machine.environment import git_commit

    if shutil.which("git") is None:
        pytest.skip("no git here")
    outer = tmp_path / "outer"
    package = outer / "vendor" / "amp-suite-0.1" / "amp_suite"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    git = ["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "outer"], check=True)
    assert git_commit(package) is None
    own = outer / "amp_suite"  # the same repository with amp-suite at its top level: its commit counts
    own.mkdir()
    assert git_commit(own) is not None


def test_the_acceptance_report_replaces_only_its_own_file_unless_forced(tmp_path, capsys):
    """The same rule for doctor --acceptance --report PATH: a file it did not write is refused before any check."""
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    assert main(["doctor", "--acceptance", "--report", str(notes)]) == 2
    assert "--force" in _stderr_lines(capsys)[-1] and notes.read_text() == "# my notes\n"
    assert main(["doctor", "--force"]) == 2  # --force belongs to --acceptance
    assert "--force goes with --acceptance" in _stderr_lines(capsys)[-1]


def test_step_losses_one_list_per_epoch_are_kept():
    """The store writes step_losses as one list per epoch; the first check dropped them all as 'not a list of numbers'."""
    from amp_suite.stored_values import metric_problem

    assert metric_problem("step_losses", [[2.31, 2.29], [2.1]]) is None
    assert metric_problem("step_losses", [[2.31, "nan"]]) is None  # a diverged loss is stored as text
    assert "not a list of lists of numbers" in metric_problem("step_losses", [[2.31, "lots"]])
    assert "not a list of lists of numbers" in metric_problem("step_losses", [2.31])

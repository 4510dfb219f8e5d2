"""A reporter writes files of its own and nothing else (a plugin author's trial found each of these possible).

Every reporter gets its own copy of the results, so one that rounds figures in place changes no other report nor
the verdict; a reporter that replaces the sweep's results.jsonl or another reporter's report.md has it put back and
is named; a listed path outside the folder or never written is named and not counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_suite.cli import main
from amp_suite.records import CellResult

ROUNDING = '''
from amp_suite import hookimpl

@hookimpl(tryfirst=True)
def write_report(results, out_dir):
    for result in results:  # "rounds for display" in place: a copy of the results, never the host's
        result.metrics["throughput"] = 1e9
    results.clear()
    return []
'''

STORE_WRITER = '''
from amp_suite import hookimpl

@hookimpl
def write_report(results, out_dir):
    (out_dir / "results.jsonl").write_text("{}\\n")  # the obvious name for a JSON-lines reporter
    (out_dir / "environment.json").unlink()
    return [out_dir / "results.jsonl"]
'''

FIRST = '''
from amp_suite import hookimpl

@hookimpl(tryfirst=True)
def write_report(results, out_dir):
    (out_dir / "report.md").write_text("CLOBBERED first")
    return [out_dir / "report.md"]
'''

CLOBBER = '''
from amp_suite import hookimpl

@hookimpl(trylast=True)
def write_report(results, out_dir):
    (out_dir / "report.md").write_text("CLOBBERED")
    (out_dir / "mine.txt").write_text("mine")
    return [out_dir / "report.md", out_dir / "mine.txt", out_dir / "never_written.txt", out_dir.parent / "escaped.txt"]
'''

BAD_SECTIONS = '''
from amp_suite import hookimpl

@hookimpl
def report_sections(results, out_dir, environment):
    return ("Temperatures", "all fine")
'''

NUMBER_SECTIONS = '''
from amp_suite import hookimpl

@hookimpl
def report_sections(results, out_dir, environment):
    return [("Temperatures", 42.5)]
'''


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from amp_suite.sweep.store import ResultStore

    for name, text in (("rounding", ROUNDING), ("store_writer", STORE_WRITER), ("clobber", CLOBBER), ("first", FIRST),
                       ("bad_sections", BAD_SECTIONS), ("number_sections", NUMBER_SECTIONS)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    store = ResultStore(out)
    for precision, throughput in (("fp32", 100.0), ("amp_bf16", 223.0)):
        store.append(CellResult(key=f"fake/tiny/{precision}/r0", framework="fake", workload="tiny",
                                precision=precision, repeat=0, status="ok", metrics={"throughput": throughput}))
    (out / "environment.json").write_text(json.dumps({"amp_suite_version": "0", "settings": {"steps": 3}}))
    return out


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "error" in line]


def test_a_reporter_that_changes_its_results_changes_no_other_report(folder, capsys):
    assert main(["report", str(folder), "-p", "rounding"]) == 0
    report = (folder / "report.md").read_text()
    assert "2.23x" in report and "1,000,000,000" not in report
    assert '"throughput": 223.0' in (folder / "results.json").read_text()


def test_a_reporter_that_replaces_the_sweeps_record_has_it_put_back_and_is_named(folder, capsys):
    before = (folder / "results.jsonl").read_bytes(), (folder / "environment.json").read_bytes()
    assert main(["report", str(folder), "-p", "store_writer"]) == 2
    assert ((folder / "results.jsonl").read_bytes(), (folder / "environment.json").read_bytes()) == before
    errors = _errors(capsys)
    assert ("amp-suite: error: reporter 'store_writer' failed: changed results.jsonl, the sweep's own record (put "
            "back as it was); a reporter writes files of its own") in errors
    assert any("changed environment.json, the sweep's own record" in line for line in errors), errors
    assert main(["report", str(folder)]) == 0  # the folder is whole


def test_a_reporter_that_overwrites_another_reporters_file_or_lists_what_it_did_not_write_is_named(folder, capsys):
    assert main(["report", str(folder), "-p", "clobber"]) == 2
    assert (folder / "report.md").read_text().startswith("# amp-suite report")  # put back
    assert (folder / "mine.txt").read_text() == "mine"
    errors = _errors(capsys)
    assert any("reporter 'clobber' failed: changed report.md, a file of amp-suite's built-in reporters (put back" in line
               for line in errors), errors
    assert any("never_written.txt', which it did not write (no such file)" in line for line in errors), errors
    assert any("escaped.txt', outside the output folder" in line for line in errors), errors
    listed = capsys.readouterr().out
    main(["report", str(folder), "-p", "clobber"])
    listed = capsys.readouterr().out.splitlines()
    assert str(folder / "mine.txt") in listed and not any(line.endswith(("escaped.txt", "never_written.txt"))
                                                          for line in listed)


def test_report_sections_are_checked_against_their_type(folder, capsys):
    assert main(["report", str(folder), "-p", "bad_sections"]) == 2
    assert ("amp-suite: error: reporter 'bad_sections' failed: report_sections returned tuple; it must return "
            "list[tuple[str, str]] | None") in _errors(capsys)
    assert main(["report", str(folder), "-p", "number_sections"]) == 2
    assert any("report_sections returned list" in line for line in _errors(capsys))


@pytest.mark.parametrize(("name", "problem"), [
    ("results.jsonl", "changed results.jsonl, the sweep's own record"),
    ("report.md", "changed report.md, a file of amp-suite's built-in reporters"),
    ("results.csv", "changed results.csv, a file of amp-suite's built-in reporters"),
    ("../outside.txt", "outside the output folder"),
])
def test_the_kits_run_reporter_fails_a_reporter_that_writes_what_is_not_its_own(folder, tmp_path, name, problem):
    from amp_suite.testing import run_reporter

    module = "writes_" + name.replace(".", "_").replace("/", "_")
    (tmp_path / f"{module}.py").write_text(
        "from amp_suite import hookimpl\n\n@hookimpl\ndef write_report(out_dir):\n"
        f"    (out_dir / {name!r}).write_text('mine')\n    return [out_dir / {name!r}]\n")
    (tmp_path / "kit").mkdir()
    with pytest.raises(AssertionError, match=problem) as failed:
        run_reporter(module, tmp_path / "kit")
    assert "which it did not write" not in str(failed.value)  # the file put back is not named twice


def test_a_reporter_that_writes_a_built_in_reporters_file_first_is_named_and_the_report_kept(folder, capsys):
    """A re-check of the trial: a tryfirst reporter that wrote report.md kept it, and the built-in reporter that wrote
    after it was blamed and had the clobbered file put back."""
    assert main(["report", str(folder), "-p", "first"]) == 2
    assert (folder / "report.md").read_text().startswith("# amp-suite report")
    errors = _errors(capsys)
    assert any("reporter 'first' failed: changed report.md, a file of amp-suite's built-in reporters" in line
               for line in errors), errors
    assert not any("reporter 'reporters' failed" in line for line in errors), errors


def test_a_third_party_reporter_that_changes_anothers_file_has_it_put_back(tmp_path):
    from amp_suite.plugins.report_guard import ReportGuard

    guard = ReportGuard(tmp_path, (), ("report.md",))
    guard.before(False)
    (tmp_path / "summary.txt").write_text("a's")
    assert guard.check("a", [tmp_path / "summary.txt"], False) == ([tmp_path / "summary.txt"], [])
    guard.before(False)
    (tmp_path / "summary.txt").write_text("b's")
    kept, problems = guard.check("b", [tmp_path / "summary.txt"], False)
    assert kept == [] and problems == ["changed summary.txt, which reporter 'a' wrote (put back as it was); a "
                                       "reporter writes files of its own"]
    assert (tmp_path / "summary.txt").read_text() == "a's"

"""The results store and atomic writes: nothing finished is lost, nothing half-written is left."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from amp_suite import safe_files
from amp_suite.records import CellResult
from amp_suite.safe_files import append_line, write_files_atomically
from amp_suite.sweep.store import ERROR_CHARS, TEXT_FIGURE_CHARS, ResultStore


def _result(precision: str = "fp32", repeat: int = 0, **fields) -> CellResult:
    return CellResult(key=f"fake/tiny/{precision}/r{repeat}", framework="fake", workload="tiny",
                      precision=precision, repeat=repeat, status=fields.pop("status", "ok"), **fields)


def test_an_append_after_a_torn_line_starts_on_a_fresh_line(tmp_path):
    store = ResultStore(tmp_path)
    store.append(_result("fp32"))
    with open(store.path, "ab") as fh:
        fh.write(b'{"key": "fake/tiny/amp_fp16/r0", "stat')  # a writer killed mid-line
    store.append(_result("amp_bf16"))
    contents = store.read()
    assert [r.precision for r in contents.results] == ["fp32", "amp_bf16"]
    assert [(s.number, s.reason) for s in contents.skipped] == [(2, "torn or not JSON")]


@pytest.mark.parametrize("line,reason", [
    (b"[1, 2, 3]", "a JSON list, not an object"),
    (b"null", "a JSON null, not an object"),
    (b"42", "a JSON int, not an object"),
    (b'{"key": "x"}', "no text field 'framework'"),
    (b'{"key": "a", "framework": "f", "workload": "w", "precision": "p", "status": "ok", "repeat": "0"}',
     "no integer field 'repeat'"),
    (b'{"key": "a", "framework": "f", "workload": "w", "precision": "p", "status": "ok", "repeat": 0,'
     b' "metrics": [1]}', "field 'metrics' has the wrong type"),
    (b"\xff\xfe not utf-8", "torn or not JSON"),
    (b"[" * 100000, "torn or not JSON"),
])
def test_foreign_lines_are_skipped_and_named(tmp_path, line, reason):
    store = ResultStore(tmp_path)
    store.append(_result("fp32"))
    with open(store.path, "ab") as fh:
        fh.write(line + b"\n")
    store.append(_result("amp_bf16"))
    contents = store.read()
    assert [r.precision for r in contents.results] == ["fp32", "amp_bf16"]
    assert [(s.number, s.reason) for s in contents.skipped] == [(2, reason)]
    assert contents.describe_skipped() == f"line 2 ({reason})"


def test_a_failed_append_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    store = ResultStore(tmp_path)
    store.append(_result("fp32"))
    before = store.path.read_bytes()
    real_write = os.write

    def disk_full_after_a_few_bytes(fd, data):
        real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_files.os, "write", disk_full_after_a_few_bytes)
    with pytest.raises(OSError) as info:
        store.append(_result("amp_fp16"))
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    store.append(_result("amp_bf16"))
    assert [r.precision for r in store.load()] == ["fp32", "amp_bf16"]


def test_long_failure_text_is_capped(tmp_path):
    store = ResultStore(tmp_path)
    huge = "x" * (20 * 2**20)
    store.append(_result("fp32", status="timeout", error=huge, metrics={"log_tail": huge + "END"}))
    assert store.path.stat().st_size < 4 * TEXT_FIGURE_CHARS
    stored = store.load()[0]
    assert len(stored.error) < ERROR_CHARS + 50
    assert stored.metrics["log_tail"].endswith("END") and "characters cut" in stored.metrics["log_tail"]


def test_append_refuses_a_line_break():
    with pytest.raises(ValueError):
        append_line(Path("/nonexistent/never-written"), "a\nb")


def test_atomic_writes_keep_old_files_when_one_write_fails(tmp_path, monkeypatch):
    report, table = tmp_path / "report.md", tmp_path / "results.csv"
    report.write_text("old report")
    table.write_text("old table")
    real_write = os.write
    calls = []

    def full_on_second_file(fd, data):
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(safe_files.os, "write", full_on_second_file)
    with pytest.raises(OSError):
        write_files_atomically({report: "new report", table: "new table"})
    monkeypatch.undo()
    assert report.read_text() == "old report" and table.read_text() == "old table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results.csv"]  # no temporary left
    write_files_atomically({report: "new report", table: "new table"})
    assert report.read_text() == "new report" and table.read_text() == "new table"


def test_reporter_writes_through_temporary_files(tmp_path, monkeypatch):
    from amp_suite_plugins import reporters

    (tmp_path / "report.md").write_text("complete old report")
    monkeypatch.setattr(reporters, "write_files_atomically",
                        lambda contents: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError):
        reporters.write_report([_result()], tmp_path, {})
    assert (tmp_path / "report.md").read_text() == "complete old report"
    monkeypatch.undo()
    written = reporters.write_report([_result()], tmp_path, {})
    assert [p.name for p in written] == ["report.md", "results.csv", "results.json"]
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["precision"] == "fp32"


def test_a_log_of_one_huge_line_gives_a_short_tail(tmp_path):
    from amp_suite.sweep.worker_process import _log_tail

    log = tmp_path / "worker.log"
    log.write_bytes(b"y" * (20 * 2**20) + b"\nthe last words\n")
    tail = _log_tail(log)
    assert len(tail) <= TEXT_FIGURE_CHARS + 10
    assert tail.endswith("the last words")

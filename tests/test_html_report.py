"""report.html: one self-contained page, escaped, opened by `amp-suite report DIR --open`, and checked in a real
headless browser (Debian's Chromium through its own command line) from a small fabricated sweep."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

from amp_suite.cli import main
from amp_suite.records import CellResult
from amp_suite.report.html import SCRIPT_RAN

# The session leaves the chart-drawing reporters out of its sweeps (tests/conftest.py); these tests are about them.
pytestmark = pytest.mark.usefixtures("report_charts")

MIB = 2**20
CHROMIUM = Path("/usr/bin/chromium")
INJECTED = '<img src=x onerror="alert(1)">'
BUSY = "machine busy: other processes kept 1.50 of 2 cores busy while the cell trained; its throughput is likely low"
ENV = {"amp_suite_version": "0.1.0", "python": "3.11.7", "cpu_model": "Test CPU <b>bold</b>", "date": "2026-11-26"}


def cell(framework, precision, repeat=0, *, throughput=1000.0, status="ok", error="", flags=(), metrics=None,
         notes=("matmul_precision=highest",)) -> CellResult:
    figures = {"throughput": throughput, "peak_rss_bytes": 300 * MIB, "val_accuracy": 0.9 + throughput / 1e5,
               "final_loss": 0.4, "step_time_median_s": 0.01, "measurement_flags": list(flags), **(metrics or {})}
    return CellResult(key=f"{framework}/tiny/{precision}/r{repeat}", framework=framework, workload="tiny",
                      precision=precision, repeat=repeat, status=status, error=error,
                      metrics=figures if status == "ok" else {}, config={"dataset": "mnist", "batch_size": 8},
                      device={"kind": "cpu", "name": "Test CPU"},
                      applied={"precision": precision, "compute_dtype": "bfloat16" if "bf16" in precision else "float32",
                               "param_dtype": "float32", "output_dtype": "float32", "loss_scaling": "none",
                               "initial_loss_scale": None, "notes": list(notes)})


RESULTS = [
    cell("torch", "fp32", 0, throughput=1000.0), cell("torch", "fp32", 1, throughput=1040.0),
    cell("torch", "amp_bf16", 0, throughput=1900.0, metrics={"kernel": f"onednn {INJECTED}"}),
    cell("torch", "amp_bf16", 1, throughput=2010.0, flags=[BUSY], notes=(f"note {INJECTED}",)),
    cell("torch", "amp_fp16", status="oom", error=f"out of memory {INJECTED}"),
    cell("jax", "fp32", throughput=3000.0), cell("jax", "amp_bf16", throughput=2400.0),
]


def _sweep(directory: Path, results=RESULTS) -> Path:
    directory.mkdir(parents=True)
    (directory / "results.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in results))
    (directory / "environment.json").write_text(json.dumps(ENV))
    return directory


def _write(out: Path) -> Path:
    pytest.importorskip("matplotlib")
    from amp_suite_plugins import charts, html_report, reporters

    sections = charts.report_sections(RESULTS)
    reporters.write_report(RESULTS, out, ENV, sections)
    charts.write_report(RESULTS, out, ENV)
    (page,) = html_report.write_report(RESULTS, out, ENV, sections)
    return page


def _html_plugin_installed() -> None:
    if "html" not in {ep.name for ep in importlib.metadata.entry_points(group="amp_suite")}:
        pytest.skip("the installed amp-suite predates the html entry point (pip install -e . again)")


class Page(HTMLParser):
    """What the tests read from a page: the <html> element's attributes, each table's rows, the page's text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.root: dict[str, str] = {}
        self.tables: dict[str, list[dict]] = {}
        self.images: list[str] = []
        self.text: list[str] = []
        self._table = ""
        self._row: dict | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.root = attributes
        elif tag == "table":
            self._table = attributes.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = {"hidden": "hidden" in attributes, "cells": [], "titles": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._row["titles"].append(attributes.get("title", ""))
        elif tag == "img":
            self.images.append(attributes.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row["cells"].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = ""

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def body(self, table: str) -> list[dict]:
        return self.tables[table][1:]  # the first row is the header


def test_report_html_is_one_self_contained_escaped_file(tmp_path):
    page = _write(tmp_path)
    text = page.read_text()
    assert page.name == "report.html" and page.parent == tmp_path
    # nothing outside the file: inline style and script, charts as data URIs, a policy that forbids any other source
    assert "<link" not in text and "<script src" not in text and "http://" not in text and "https://" not in text
    assert "default-src 'none'" in text
    parsed = Page(text)
    assert len(parsed.images) == 4 and all(src.startswith("data:image/png;base64,") for src in parsed.images)
    # stored text never opens a tag: the error, a plugin's figure, a note, the CPU's name
    assert "<img src=x" not in text and "<b>bold" not in text
    assert text.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 3
    # the verdict first, then the tables
    assert text.index('id="verdict-section"') < text.index('id="summary-section"') < text.index(
        'id="charts-section"') < text.index('id="runs-section"') < text.index('id="method-section"')
    assert "Charts were" not in text and "](chart-" not in text  # the charts section of report.md is embedded, not linked


def test_report_open_opens_report_html_in_a_browser(tmp_path, monkeypatch, capsys):
    _html_plugin_installed()
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url) or True)
    sweep = _sweep(tmp_path / "out")
    assert main(["report", str(sweep), "--open"]) == 0
    assert opened == [(sweep / "report.html").resolve().as_uri()]
    assert str(sweep / "report.html") in capsys.readouterr().out.splitlines()


def test_report_open_without_an_html_report_is_an_error(tmp_path, monkeypatch, capsys):
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url) or True)
    monkeypatch.setenv("AMP_SUITE_DISABLE_PLUGINS", "html")
    sweep = _sweep(tmp_path / "out")
    assert main(["report", str(sweep), "--open"]) == 2
    assert opened == [] and "--open: no report.html was written" in capsys.readouterr().err


def test_report_open_says_so_when_no_browser_starts(tmp_path, monkeypatch, capsys):
    _html_plugin_installed()
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: False)
    sweep = _sweep(tmp_path / "out")
    assert main(["report", str(sweep), "--open"]) == 0
    assert "no web browser could be started; open" in capsys.readouterr().err


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (apt-get install chromium) for this test")
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_a_headless_browser_runs_the_page_its_sorting_and_filtering_and_draws_it(tmp_path):
    page = _write(tmp_path / "out")
    # the hash sorts the summary by images/s (column 8), largest first, and filters every run to amp_bf16
    url = page.resolve().as_uri() + "#sort=summary:8:desc&filter=runs:amp_bf16"
    dom = Page(_chromium(tmp_path, "--dump-dom", url).stdout)
    assert dom.root.get("data-report-script") == SCRIPT_RAN, dom.root  # the script ran to its end
    assert "data-script-error" not in dom.root, dom.root["data-script-error"]
    assert int(dom.root["data-sortable-tables"]) == len(dom.tables) == 5
    # sorted: images/s descending, the failed cell (no figure) last
    throughputs = [row["cells"][8] for row in dom.body("summary")]
    assert throughputs == ["3,000", "2,400", "1,955", "1,020", "–"]
    # filtered: only the amp_bf16 runs are shown
    shown = [row for row in dom.body("runs") if not row["hidden"]]
    assert [row["cells"][4] for row in shown] == ["amp_bf16"] * 3
    assert len(dom.body("runs")) == len(RESULTS)
    # the verdict and every cell are there, with the flags' reasons as tooltips
    verdict = {(row["cells"][0], row["cells"][1]): row for row in dom.body("verdict")}
    assert set(verdict) == {("torch", "amp_bf16"), ("torch", "amp_fp16"), ("jax", "amp_bf16")}
    assert verdict[("torch", "amp_fp16")]["cells"][2] == "n/a (oom)"
    assert verdict[("jax", "amp_bf16")]["cells"][2] == "0.80x 1 run"
    assert verdict[("torch", "amp_bf16")]["cells"][2].startswith("1.92x (") and "⚑" in verdict[("torch", "amp_bf16")][
        "cells"][2]
    assert "machine busy" in verdict[("torch", "amp_bf16")]["titles"][2]
    text = " ".join(dom.text)
    assert "torch: amp_bf16 is the fastest here at 1.92x" in text and "but not to be trusted: flagged" in text
    assert "jax: fp32 stays the choice on this machine" in text
    runs = {(row["cells"][1], row["cells"][4], row["cells"][5]): row for row in dom.body("runs")}
    for result in RESULTS:
        row = runs[(result.framework, result.precision, str(result.repeat))]
        assert row["cells"][6] == result.status
        if result.status == "ok":
            assert row["cells"][7] == f"{result.metrics['throughput']:,.0f}"
        else:
            assert row["cells"][13].startswith("out of memory <img src=x")  # shown as text, never as a tag
    assert any("machine busy" in title for row in dom.body("runs") for title in row["titles"])


def test_a_headless_browser_screenshot_of_the_page_is_not_blank(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    page = _write(tmp_path / "out")
    shot = tmp_path / "page.png"
    _chromium(tmp_path, "--hide-scrollbars", "--window-size=1000,1400", f"--screenshot={shot}", page.resolve().as_uri())
    pixels = image.imread(shot)
    assert pixels.shape[0] == 1400 and pixels.shape[1] == 1000
    grey = pixels[..., :3].mean(axis=2)
    assert grey.std() > 0.05  # text, tables and charts, not one flat colour
    assert (grey < 0.5).mean() > 0.01  # dark text covers part of the page


def test_report_html_has_the_tables_report_md_has_beside_its_main_ones():
    """An ML engineer's trial: report.html lacked the Token workloads table, Keras against its backend's own
    framework, the ratios over the base mode and the best configuration, and an fp8 row's emulated mark."""
    from amp_suite.report.html import render_html
    from amp_suite.report.markdown import render_markdown

    def keras(precision, throughput):
        return cell("keras@jax", precision, throughput=throughput,
                    metrics={"keras_backend": "jax", "framework_version": "keras 3.15.1, jax 0.10.2"})

    def gpt(framework, precision, throughput):
        result = cell(framework, precision, throughput=throughput,
                      metrics={"tokens_per_s": throughput * 128, "val_bits_per_char": 3.5,
                               "unigram_bits_per_char": 4.7, "context": 128})
        result.workload, result.key = "text_gpt_nano", result.key.replace("/tiny/", "/text_gpt_nano/")
        return result

    fp8 = cell("jax", "fp8", throughput=900.0)
    fp8.applied = {**fp8.applied, "fp8_matmul": "emulated"}
    results = [*RESULTS, keras("fp32", 2000.0), keras("amp_bf16", 2600.0), fp8, gpt("jax", "fp32", 50.0),
               gpt("jax", "amp_bf16", 60.0)]
    page, report = render_html(results, ENV), render_markdown(results, ENV)
    for section, title in (("keras-cost", "## Keras against its backend's own framework"),
                           ("tokens", "## Token workloads"), ("best", "Best configuration per framework")):
        assert title in report and f'id="{section}-section"' in page, section
    assert "0.67x 1 run" in page.split('id="keras-cost-section"')[1]  # keras@jax fp32 over jax's, single runs
    assert ">emulated<" in page.split('id="summary-section"')[1].split("</table>")[0]


def test_every_declared_table_is_on_both_pages_under_its_title_and_note(monkeypatch):
    """report.md and report.html render one list of tables (extra_tables.EXTRA_TABLES): each table whose frame has
    rows is on both pages, with its title, its note and the lines after it, and in the list's order."""
    import dataclasses
    import html

    import pandas as pd

    from amp_suite.report import extra_tables
    from amp_suite.report.html import render_html
    from amp_suite.report.markdown import render_markdown

    tables = tuple(dataclasses.replace(table, frame=lambda inputs, name=table.table_id: pd.DataFrame(
        {"workload": [f"row-of-{name}"], "framework": ["torch"]}),
        after=lambda inputs, name=table.table_id: [f"- after {name}"]) for table in extra_tables.EXTRA_TABLES)
    monkeypatch.setattr(extra_tables, "EXTRA_TABLES", tables)
    page, report = render_html(RESULTS, ENV), render_markdown(RESULTS, ENV)
    for table in tables:
        assert f"## {table.title}\n\n{table.note}\n" in report, table.table_id
        assert f'<h2 id="{table.table_id}-section">' in page, table.table_id
        section = page.split(f'id="{table.table_id}-section"')[1].split("<h2")[0]
        assert html.escape(table.note[:40]) in section and f"row-of-{table.table_id}" in section, table.table_id
        assert f"after {table.table_id}" in section, table.table_id
    order = [table.table_id for table in tables]
    assert sorted(order, key=lambda name: page.index(f'id="{name}-section"')) == order
    assert sorted(order, key=lambda name: report.index(f"row-of-{name}")) == order

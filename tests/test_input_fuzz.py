"""Bad input of every kind: exit 2, one line on stderr, no traceback, no cell run.

Most cases call the CLI in this process (fast); a few go through a fresh
process to prove no traceback reaches a real user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amp_suite.cli import main
from suite_cli import TINY_CONFIG, run_cli


def _config(tmp_path: Path, defaults: dict[str, str] | None = None, extra: str = "",
            drop_workloads: bool = False) -> Path:
    """The tiny test config with ``[defaults]`` keys replaced or added, and ``extra`` appended."""
    text = TINY_CONFIG.format(out=(tmp_path / "out").as_posix())
    cut = text.index("[workloads.")
    head, tail = text[:cut], text[cut:]
    for key, value in (defaults or {}).items():
        line = f"{key} = {value}"
        head, replaced = re.subn(rf"(?m)^{re.escape(key)} = .*$", lambda _, line=line: line, head)
        if not replaced:
            head = head.replace("[defaults]\n", f"[defaults]\n{line}\n", 1)
    text = head + tail
    if drop_workloads:
        text = text[: text.index("[workloads.tiny]")]
    path = tmp_path / "benchmarks.toml"
    path.write_text(text + "\n" + extra)
    return path


def _assert_refused(code: int, err: str, needle: str, tmp_path: Path) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("amp-suite: error: "), err
    assert needle in lines[0], err
    assert not (tmp_path / "out" / "results.jsonl").exists()  # no cell ran


CLI_CASES = [
    (["--timeout", "nan"], "timeout must be a finite number, got nan"),
    (["--timeout", "inf"], "timeout must be a finite number, got inf"),
    (["--timeout", "1e400"], "timeout must be a finite number"),
    (["--timeout", "0"], "timeout must be > 0"),
    (["--timeout", "-5"], "timeout must be > 0"),
    (["--timeout", "1e9"], "timeout must be <= 604800"),
    (["--seed", "-1"], "seed must be >= 0, got -1"),
    (["--seed", str(2**40)], "seed must be <= 4294967295"),
    (["--steps", "0"], "steps must be >= 1, got 0 (allowed: 1 to 1000000)"),  # the whole range, not one bound
    (["--timeout", "-1"], "timeout must be > 0, got -1.0 (allowed: above 0 to 604800)"),
    (["--steps", str(10**12)], "steps must be <= 1000000"),
    (["--epochs", "0"], "epochs must be >= 1"),
    (["--repeats", "0"], "repeats must be >= 1"),
    (["--repeats", "100000"], "repeats must be <= 1000"),
    (["--repeats", "autoo"], "argument --repeats: 'autoo' is neither a whole number of repeats nor auto (did you "
                             "mean 'auto'?)"),
    (["--precisions", "fp16"], "unknown precision 'fp16'; allowed: fp32, tf32, amp_fp16, amp_bf16, fp8, fp64 (did you "
                               "mean 'amp_fp16'?)"),  # spelling alone had offered fp64
    (["--precisions", "FP32"], "(did you mean 'fp32'?)"),
    (["--batch-size", "0"], "batch_size must be >= 1"),
    (["--warmup", "-1"], "warmup must be >= 0"),
    (["--out", ""], "out must not be empty"),
    (["--out", "   "], "out must not be empty"),
    (["--frameworks", "fake,fake"], "frameworks lists 'fake' more than once"),
    (["--frameworks", ","], "argument --frameworks: ',' names nothing between its commas"),
    (["--frameworks", "   "], "frameworks must name at least one"),
    (["--precisions", "fp32,,amp_bf16"], "'fp32,,amp_bf16' has an empty entry between commas; did you mean "
                                          "'fp32,amp_bf16'?"),  # an empty entry was dropped in silence
    (["--frameworks", "fake,"], "'fake,' has an empty entry between commas"),
    (["--val-split", "garbage["], "malformed split 'garbage['"),  # synthetic data: the text is still checked
    (["--frameworks", "fa|ke"], "may hold only letters, digits"),
    (["--workloads", "x" * 300], "is longer than 64 characters"),
    (["--workloads", "tiny,tiny"], "workloads lists 'tiny' more than once"),
    (["--workloads", "tiyn"], "unknown workload 'tiyn'; allowed: tiny, mnist_cnn, mnist_cnn_128, "),  # then the catalog's
    (["--precisions", "fp32,fp32"], "precisions lists 'fp32' more than once"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--dataset", "mnist", "--train-split", "test[9000:100]"], "split test[9000:100] selects no example"),
    (["--dataset", "mnist", "--train-split", "test[:0]"], "split test[:0] selects no example"),
    (["--dataset", "mnist", "--val-split", "test[5:5]"], "split test[5:5] selects no example"),
    (["--dataset", "mnist", "--val-split", "train[200%:]"], "outside -100%..100%"),
    (["--dataset", "mnist", "--train-split", "test[:" + "9" * 5000 + "]"], "out of range"),
    (["--dataset", "mnist", "--train-split", "train["], "malformed split"),
    (["--dataset", "mnist", "--train-split", "validation"], "unknown split 'validation'"),
    (["--dataset", "mnist", "--train-split", "test[:8000]", "--val-split", "test[:2000]"],
     "the validation split test[:2000] overlaps the training split test[:8000] (2000 examples in both): its accuracy "
     "would be measured on data the model trained on"),
    (["--dataset", "mnist", "--train-split", "test", "--val-split", "test"], "(10000 examples in both)"),
    (["--dataset", "mnist", "--workloads", "mnist_cnn", "--train-split", "test[:10]"],
     "has 10 examples, fewer than one batch of 16"),
    (["--dataset", "mnist", "--train-split", ""], "train_split must not be empty"),
    (["--data-dir", ""], "data_dir must not be empty"),
    (["--inline", "--timeout", "5"], "--timeout cannot be enforced with --inline"),
    (["--steps", "x"], "argument --steps: 'x' is not a whole number (allowed: 1 to 1000000)"),
    (["--timeout", "soon"], "argument --timeout: 'soon' is not a number"),
]


@pytest.mark.parametrize("args,needle", CLI_CASES, ids=[" ".join(a)[:40] for a, _ in CLI_CASES])
def test_bad_command_line_values(tmp_path, capsys, args, needle):
    code = main(["run", "--config", str(_config(tmp_path)), "-p", "fakefw", *args])
    _assert_refused(code, capsys.readouterr().err, needle, tmp_path)


TOML_CASES = [
    ({"timeout": "nan"}, "", "[defaults] timeout must be a finite number, got nan"),
    ({"timeout": "inf"}, "", "timeout must be a finite number, got inf"),
    ({"timeout": '"900"'}, "", "timeout must be a number, got '900'"),
    ({"timeout": "true"}, "", "timeout must be a number, got True"),
    ({"seed": "-1"}, "", "seed must be >= 0, got -1"),
    ({"steps": "1.5"}, "", "steps must be an integer, got 1.5"),
    ({"steps": "true"}, "", "steps must be an integer, got True"),
    ({"frameworks": '"fake"'}, "", "frameworks must be a list of strings, got 'fake'"),
    ({"frameworks": '["fake", "fake"]'}, "", "frameworks lists 'fake' more than once"),
    ({"frameworks": "[1]"}, "", "frameworks must be a string, got 1"),
    ({"out": '""'}, "", "out must not be empty"),
    ({"out": '"a\\u0000b"'}, "", "out must not contain a NUL character"),
    ({"download": '"yes"'}, "", "download must be true or false, got 'yes'"),
    ({"stepz": "3"}, "", "unknown key 'stepz' (did you mean 'steps'?)"),
    ({"batch-size": "8", "batch_size": "8"}, "", "batch_size is given twice"),
    ({}, "[frameworks.fake]\ninitial_loss_scale = \"big\"\n", "initial_loss_scale must be a number, got 'big'"),
    ({}, "[frameworks.fake]\ninitial_loss_scale = nan\n", "initial_loss_scale must be a finite number"),
    ({}, "[frameworks.fake]\ninitial_loss_scale = -1\n", "initial_loss_scale must be > 0"),
    ({}, "[frameworks.fake]\nloss_scale_growth_interval = 0\n", "loss_scale_growth_interval must be >= 1"),
    ({}, "[frameworks.torch]\nchannels_last = \"false\"\n", "channels_last must be true or false, got 'false'"),
    ({}, "[frameworks.torch]\nchanels_last = true\n", "unknown key 'chanels_last' (did you mean 'channels_last'?)"),
    ({}, "[frameworks.keras]\nchannels_last = true\n", "[frameworks.keras]: unknown key 'channels_last'"),
    ({}, "[frameworks.tprch]\n", "[frameworks.tprch] names no known framework (did you mean 'torch'?)"),
    ({}, "[frameworks]\ntorch = 3\n", "[frameworks.torch] must be a table, got 3"),
    ({}, "[workloads]\nbig = 3\n", "workloads.big must be a table ([workloads.big]), got 3"),
    ({}, "[workloads.\"a|b\"]\nmodel = \"mnist_cnn\"\n", "workload name 'a|b' may hold only"),
    ({}, "[workloads.\"a\\u0000b\"]\nmodel = \"mnist_cnn\"\n", "may hold only letters"),
    ({}, f"[workloads.{'w' * 300}]\nmodel = \"mnist_cnn\"\n", "is longer than 64 characters"),
    ({}, "[workloads.bad]\nmodel = \"mnist_cnn\"\ninput_size = \"ten\"\n", "[workloads.bad]"),
    ({}, "[workloads.bad]\nmodel = \"mnist_cnn\"\nbatch_size = [1, 2]\n", "[workloads.bad]"),
    ({}, "[wrkloads.a]\n", "unknown table 'wrkloads' (did you mean 'workloads'?)"),
]


@pytest.mark.parametrize("defaults,extra,needle", TOML_CASES, ids=[n[:40] for _, _, n in TOML_CASES])
def test_bad_config_values(tmp_path, capsys, defaults, extra, needle):
    code = main(["run", "--config", str(_config(tmp_path, defaults, extra)), "-p", "fakefw"])
    _assert_refused(code, capsys.readouterr().err, needle, tmp_path)


def test_top_level_keys_that_are_not_tables(tmp_path, capsys):
    workload = '[workloads.a]\nmodel = "mnist_cnn"\n'
    for text, needle in (("defaults = 3\n" + workload, "[defaults] must be a table, got 3"),
                         ("workloads = 3\n", "workloads must be tables [workloads.NAME], got 3"),
                         ("frameworks = 3\n" + workload, "frameworks must be tables [frameworks.NAME]")):
        path = tmp_path / "top.toml"
        path.write_text(text)
        _assert_refused(main(["run", "--config", str(path)]), capsys.readouterr().err, needle, tmp_path)


def test_out_pointing_at_a_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    code = main(["run", "--config", str(_config(tmp_path)), "-p", "fakefw", "--out", str(tmp_path / "afile")])
    _assert_refused(code, capsys.readouterr().err, "is a file, not a directory", tmp_path)


def test_a_directory_where_a_data_file_belongs(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    (data / "t10k-images-idx3-ubyte.gz").mkdir(parents=True)
    monkeypatch.setenv("AMP_SUITE_CACHE", str(tmp_path / "cache"))
    code = main(["run", "--config", str(_config(tmp_path)), "-p", "fakefw", "--dataset", "mnist",
                 "--workloads", "mnist_cnn", "--data-dir", str(data), "--train-split", "test[:100]", "--val-split", "test[100:200]",
                 "--no-download"])
    _assert_refused(code, capsys.readouterr().err, "is not a regular file (a directory?)", tmp_path)


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01\xff\xfe binary", "not a UTF-8 text file"),
    (b"steps = \x00", "malformed TOML"),
])
def test_a_binary_config_in_a_fresh_process(tmp_path, content, needle):
    path = tmp_path / "binary.toml"
    path.write_bytes(content)
    out = run_cli("run", "--config", str(path))
    _assert_refused(out.returncode, out.stderr, needle, tmp_path)


def test_nan_timeout_in_a_fresh_process(tmp_path):
    out = run_cli("run", "--config", str(_config(tmp_path)), "-p", "fakefw", "--timeout", "nan")
    _assert_refused(out.returncode, out.stderr, "timeout must be a finite number, got nan", tmp_path)


@pytest.mark.parametrize("lines,needle", [
    (b"[1,2,3]\n", "line 1 (a JSON list, not an object)"),
    (b"null\n", "line 1 (a JSON null, not an object)"),
])
def test_report_and_resume_read_past_foreign_lines(tmp_path, capsys, lines, needle):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(lines)
    (out / "environment.json").write_text('{"amp_suite_version": "0.1.0", "pyth')  # truncated
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert needle in err and "is unreadable or truncated" in err and "Traceback" not in err
    assert (out / "report.md").exists()


def test_a_table_for_a_disabled_framework_is_accepted(tmp_path, monkeypatch):
    from amp_suite.config.catalog import check_framework_tables, load_config
    from fakefw import framework_info

    config = load_config(_config(tmp_path, extra="[frameworks.torch]\nchannels_last = false\n"
                                                 "[frameworks.myfw]\nanything = 1\n"))
    fake = {"fake": framework_info()}
    checked = check_framework_tables(config, fake, absent={"myfw"})  # torch is built in, myfw disabled
    assert checked.framework_options["myfw"] == {"anything": 1}  # kept as written: its plugin is not here
    with pytest.raises(Exception, match="names no known framework"):
        check_framework_tables(config, fake)


def test_ctrl_c_during_a_download_is_one_line(tmp_path, capsys, monkeypatch):
    from amp_suite import datasets

    def interrupted_download(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "fetch", interrupted_download)
    code = main(["run", "--config", str(_config(tmp_path)), "-p", "fakefw"])
    err = capsys.readouterr().err
    assert code == 130 and err.strip() == "amp-suite: interrupted by SIGINT"


def test_names_with_table_characters_cannot_break_the_report():
    from amp_suite.records import CellResult
    from amp_suite.report.normalize import render_markdown

    foreign = CellResult(key="k", framework="fa|ke", workload="two\nlines", precision="fp32", repeat=0,
                         status="failed", error="bad | worse\nworst", metrics={"param_count": "many"})
    text = render_markdown([foreign], {})
    tables: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    tables = [t for t in tables if t]
    assert len(tables) == 6  # five comparisons and every run
    for table in tables:  # every row of a table has as many cell borders as its header
        assert len({row.count("|") - row.count("\\|") for row in table}) == 1, table
        assert "fa\\|ke" in table[-1]
    assert all("| two lines" in table[-1] for table in tables[:5])
    # every run's table names a workload all its rows share once, above it, on one line
    assert "Every run shares workload two lines, devices 1." in text
    assert "- two lines / fa|ke / fp32 / repeat 0: **failed** — bad | worse worst" in text


@pytest.mark.parametrize("args", [
    ["numerics", "--workloads", "tiny", "--frameworks", "fake,,jax", "--precisions", "amp_fp16"],
    ["calibrate", "--frameworks", "fake,,jax"],
    ["doctor", "--frameworks", "fake,,jax"],
])
def test_every_command_refuses_an_empty_list_entry(tmp_path, capsys, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("amp-suite: error: --frameworks 'fake,,jax' has an empty entry between "
                                         "commas; did you mean 'fake,jax'?"), err
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written

"""``amp-suite numerics``: shares against NumPy's own casts, a planted error named, failures kept, bad input refused.

The fake backend ``shadowfw`` (tests/helpers/shadowfw.py) is NumPy only, so
every test here runs in seconds; the real frameworks' traces are checked in
tests/test_numerics_traces.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import amp_suite
from amp_suite.numerics.compare import compare_steps
from amp_suite.numerics.formats import BFLOAT16, FLOAT16
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.numerics.shares import value_shares
from amp_suite.shadow.bisect import worst_layer
from amp_suite.shadow.report import summarise, worst_layer_sentences
from amp_suite.shadow.stored import read_numerics
from suite_cli import one_line_error, run_cli, tiny_config_file

FLOAT16_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)


def _spread(seed: int, size: int = 20_000) -> np.ndarray:
    """float32 values whose magnitudes span 1e-12 to 1e6, both signs, with exact zeros, infs and a NaN."""
    rng = np.random.default_rng(seed)
    values = np.sign(rng.normal(size=size)) * 10.0 ** rng.uniform(-12, 6, size)
    values[:50] = 0.0
    values[50:53] = [np.inf, -np.inf, np.nan]
    return values.astype(np.float32).astype(np.float64)


def _bfloat16_by_bits(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 by their bits (nearest, ties to even): an independent cast."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("seed", [0, 1])
def test_float16_shares_are_those_of_numpys_own_cast(seed: int) -> None:
    values = _spread(seed)
    with np.errstate(over="ignore"):
        cast = values.astype(np.float16).astype(np.float64)
    finite = np.isfinite(values)
    nonzero, finites = np.count_nonzero(finite & (values != 0)), np.count_nonzero(finite)
    shares = value_shares(values, FLOAT16)
    assert shares.underflow == np.count_nonzero(finite & (values != 0) & (cast == 0)) / nonzero > 0
    assert shares.subnormal == np.count_nonzero(finite & (cast != 0) & (np.abs(cast) < FLOAT16_SMALLEST_NORMAL)) \
        / nonzero > 0
    assert shares.overflow == np.count_nonzero(finite & np.isinf(cast)) / finites > 0
    assert shares.nonfinite == 3 / values.size


@pytest.mark.parametrize("seed", [0, 1])
def test_bfloat16_shares_are_those_of_a_cast_by_bits(seed: int) -> None:
    # float32 values down to 1e-45: float32 subnormals, many of which bfloat16 (the same exponents, 7 bits of
    # mantissa) rounds to zero or to its own subnormals
    values = (_spread(seed) * 1e-33).astype(np.float32).astype(np.float64)
    values[60:70] = 3.4e38  # rounds up past bfloat16's largest finite value (3.3895e38)
    finite = np.isfinite(values)
    cast = _bfloat16_by_bits(np.where(finite, values, 0.0))
    shares = value_shares(values, BFLOAT16)
    nonzero, finites = np.count_nonzero(finite & (values != 0)), np.count_nonzero(finite)
    assert shares.underflow == np.count_nonzero(finite & (values != 0) & (cast == 0)) / nonzero > 0
    assert shares.subnormal == np.count_nonzero(finite & (cast != 0) & (np.abs(cast) < BFLOAT16.smallest_normal)) \
        / nonzero > 0
    assert shares.overflow == np.count_nonzero(finite & np.isinf(cast)) / finites == 10 / finites


def _trace(activations: dict[str, np.ndarray], gradients: dict[str, np.ndarray], dtype: str,
           loss_scale: float | None = None) -> StepTrace:
    return StepTrace(loss=1.0, activations={k: TensorTrace(v, dtype) for k, v in activations.items()},
                     gradients={k: TensorTrace(v, dtype) for k, v in gradients.items()}, loss_scale=loss_scale)


def test_a_rows_shares_count_the_shadows_values_cast_to_the_runs_dtype_with_and_without_the_loss_scale() -> None:
    rng = np.random.default_rng(3)
    act = rng.normal(size=(4, 8))
    grad = 10.0 ** rng.uniform(-12, -2, size=(8, 8))  # many below float16's smallest subnormal (6e-8)
    shadow = _trace({"dense": act}, {"dense/w": grad}, "float32")
    with np.errstate(over="ignore"):
        run = _trace({"dense": act.astype(np.float16).astype(np.float64)},
                     {"dense/w": (grad * 1024).astype(np.float16).astype(np.float64) / 1024}, "float16", 1024.0)
    rows = compare_steps(run, shadow, framework="f", workload="w", precision="amp_fp16", shadow_precision="fp32",
                         step=0)
    gradient = next(r for r in rows if r.tensor == "gradient")
    assert gradient.format == "float16" and gradient.count == 64
    without = np.count_nonzero(grad.astype(np.float16) == 0) / grad.size
    scaled = np.count_nonzero((grad * 1024).astype(np.float16) == 0) / grad.size
    assert gradient.underflow_without_scale == without > scaled == gradient.underflow
    assert 0 < gradient.relative_error < 1
    activation = next(r for r in rows if r.tensor == "activation")
    assert activation.underflow_without_scale is None and activation.error_added == activation.relative_error
    assert 0 < activation.relative_error < 1e-3  # float16 round-off of values of order 1


def test_a_trace_with_other_names_than_its_shadow_is_refused_by_name() -> None:
    a = _trace({"dense": np.ones(3)}, {}, "float32")
    b = _trace({"head": np.ones(3)}, {}, "float32")
    with pytest.raises(ValueError, match="dense, head"):
        compare_steps(a, b, framework="f", workload="w", precision="fp32", shadow_precision="fp64", step=0)


def _numerics(tmp_path: Path, **keywords):
    config = tiny_config_file(tmp_path)
    options = dict(workloads="tiny", frameworks="shadowfw", precisions="amp_bf16", steps=1,
                   out=tmp_path / "numerics", dataset="synthetic", config=config, plugins="shadowfw")
    return amp_suite.run_numerics(**{**options, **keywords})


@pytest.mark.parametrize("planted", ["conv2", "dense1"])
def test_the_comparison_names_the_one_layer_whose_output_a_backend_perturbs(tmp_path: Path, monkeypatch,
                                                                           planted: str) -> None:
    monkeypatch.setenv("SHADOWFW_PLANT", planted)
    frame = _numerics(tmp_path, inline=True)
    assert {run["status"] for run in frame.attrs["runs"]} == {"ok"}
    _, layers = read_numerics(tmp_path / "numerics")
    amp = [r for r in layers if r.precision == "amp_bf16" and r.shadow == "fp32" and r.tensor == "activation"]
    assert [r.layer for r in amp] == ["conv1", "conv2", "dense1", "logits"]
    # the layer --bisect keeps first (the largest error added, then the gradients' error)
    assert worst_layer(amp, [r.layer for r in amp]) == planted
    # fp32 against fp64 is the round-off floor: no layer of it comes near the planted 5%
    floor = [r for r in layers if r.precision == "fp32" and r.shadow == "fp64"]
    assert floor and max(r.relative_error for r in floor) < 1e-5
    sentences = worst_layer_sentences(summarise(layers))
    assert any(s.startswith(f"layer {planted} adds the most error") for s in sentences), sentences


@pytest.mark.usefixtures("report_charts")
def test_the_command_line_writes_the_report_and_names_the_planted_layer(tmp_path: Path) -> None:
    config = tiny_config_file(tmp_path)
    out = run_cli("numerics", "--workloads", "tiny", "--frameworks", "shadowfw", "--precisions", "amp_fp16",
                  "--steps", "2", "--dataset", "synthetic", "--config", str(config), "-p", "shadowfw",
                  "--out", str(tmp_path / "numerics"), env={"SHADOWFW_PLANT": "dense1"}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "layer dense1 adds the most error" in out.stdout
    lines = [json.loads(line) for line in (tmp_path / "numerics" / "numerics.jsonl").read_text().splitlines()]
    runs = [line for line in lines if line["record"] == "run"]
    assert [(r["precision"], r["status"], r["steps"]) for r in runs] == [("amp_fp16", "ok", 2), ("fp32", "ok", 2),
                                                                        ("fp64", "ok", 2)]
    assert runs[0]["loss_scales"] == [4096.0, 4096.0]
    layers = [line for line in lines if line["record"] == "layer"]
    assert {(r["precision"], r["shadow"]) for r in layers} == {("amp_fp16", "fp32"), ("amp_fp16", "fp64"),
                                                               ("fp32", "fp64")}
    assert {r["step"] for r in layers} == {0, 1}
    gradient = next(r for r in layers if r["tensor"] == "gradient" and r["precision"] == "amp_fp16")
    assert gradient["loss_scale"] == 4096.0 and gradient["underflow_without_scale"] is not None
    text = (tmp_path / "numerics" / "numerics.md").read_text()
    assert "## shadowfw / tiny / amp_fp16 against fp32" in text and "| dense1 |" in text
    assert (tmp_path / "numerics" / "numerics-heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_precision_never_takes_the_command_down(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_FAIL", "amp_fp16")
    frame = _numerics(tmp_path, precisions="amp_fp16,amp_bf16")
    runs = {run["precision"]: run for run in frame.attrs["runs"]}
    assert runs["amp_fp16"]["status"] == "failed" and "told to fail amp_fp16" in runs["amp_fp16"]["error"]
    assert Path(runs["amp_fp16"]["log"]).is_file()
    assert all(runs[p]["status"] == "ok" for p in ("amp_bf16", "fp32", "fp64"))
    assert set(frame["precision"]) == {"amp_bf16", "fp32"} and len(frame) > 0
    assert "| amp_fp16 | failed |" in (tmp_path / "numerics" / "numerics.md").read_text()


def test_a_run_whose_process_dies_is_a_failed_run_with_its_exit_code(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_CRASH", "fp64")
    frame = _numerics(tmp_path)
    runs = {run["precision"]: run for run in frame.attrs["runs"]}
    assert runs["fp64"]["status"] == "failed" and "exited with code 3 and no outcome" in runs["fp64"]["error"]
    assert set(frame["shadow"]) == {"fp32"}  # amp_bf16 beside the float32 shadow only


@pytest.mark.parametrize(("keywords", "expected"), [
    ({"workloads": "tinny"}, "unknown workload 'tinny'"),
    ({"frameworks": "shadowfv"}, "unknown framework 'shadowfv'"),
    ({"precisions": "amp_bf61"}, "unknown precision 'amp_bf61'"),
    ({"steps": 0}, "steps must be a whole number from 1 to 1000, got 0"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"dataset": "imagenet22k"}, "unknown dataset 'imagenet22k'"),
    ({"batch_size": 0}, "batch size must be a whole number from 1 to 65536, got 0"),
    ({"timeout": -1.0}, "timeout must be a positive number of seconds, got -1.0"),
    # the shadows themselves are no precision to set beside them: compared with itself, fp32 would say nothing
    ({"precisions": "fp32"}, "precision 'fp32' is one of the shadows (fp32, fp64)"),
    ({"precisions": "amp_bf16,fp64"}, "precision 'fp64' is one of the shadows (fp32, fp64)"),
])
def test_bad_input_is_refused_in_one_line_before_anything_runs(tmp_path: Path, keywords, expected: str) -> None:
    message = one_line_error(lambda: _numerics(tmp_path, **keywords))
    assert expected in message
    if "precision" in expected:
        assert "amp_bf16" in message  # the closest allowed name
    assert not (tmp_path / "numerics").exists()


def test_an_output_directory_of_something_else_is_refused(tmp_path: Path) -> None:
    (tmp_path / "numerics").mkdir()
    (tmp_path / "numerics" / "thesis.tex").write_text("mine")
    assert "neither empty nor an output of amp-suite numerics" in one_line_error(lambda: _numerics(tmp_path))


def test_the_output_path_is_checked_as_run_checks_it(tmp_path: Path) -> None:
    """numerics and run share their output path's checks (sweep.output_dir.output_path): a broken link as --out
    is named as one, as run names it, and nothing is made at its target."""
    (tmp_path / "numerics").symlink_to(tmp_path / "gone")
    assert "is a broken symbolic link" in one_line_error(lambda: _numerics(tmp_path))
    assert not (tmp_path / "gone").exists()


def test_an_earlier_runs_results_are_kept_unless_force_replaces_them(tmp_path: Path) -> None:
    _numerics(tmp_path, inline=True)
    out = tmp_path / "numerics"
    before = {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()}
    message = one_line_error(lambda: _numerics(tmp_path, inline=True, precisions="amp_fp16"))
    assert "holds the results of an earlier amp-suite numerics" in message and "--force" in message
    assert {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()} == before
    frame = _numerics(tmp_path, inline=True, precisions="amp_fp16", force=True)
    assert {run["precision"] for run in frame.attrs["runs"]} == {"amp_fp16", "fp32", "fp64"}


@pytest.mark.parametrize("planted", ["numerics.jsonl", "numerics.md", "numerics-heatmap.png", "logs/{key}.log",
                                     "traces/{key}.request.json", "traces/{key}.npz", "traces/{key}.json"])
def test_a_link_planted_where_numerics_writes_is_refused_and_its_target_untouched(tmp_path: Path,
                                                                                  planted: str) -> None:
    """Nothing outside OUT is written through a link planted in it: refused in one line before any run."""
    _numerics(tmp_path, inline=True)
    out, target = tmp_path / "numerics", tmp_path / "mine.txt"
    target.write_text("precious")
    link = out / planted.format(key="shadowfw__tiny__amp_bf16")
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    message = one_line_error(lambda: _numerics(tmp_path, inline=True, force=True))
    if planted == "numerics.jsonl":  # the file that makes the folder ours: a link there makes it someone else's
        assert "neither empty nor an output of amp-suite numerics" in message
    else:
        assert "is a symbolic link" in message and link.name in message
    assert target.read_text() == "precious"


def test_a_folder_whose_numerics_jsonl_is_a_link_or_another_file_is_not_ours(tmp_path: Path) -> None:
    out, target = tmp_path / "numerics", tmp_path / "mine.jsonl"
    out.mkdir()
    target.write_text('{"record": "run"}\n')
    (out / "numerics.jsonl").symlink_to(target)
    assert "neither empty nor an output of amp-suite numerics" in one_line_error(
        lambda: _numerics(tmp_path, force=True))
    (out / "numerics.jsonl").unlink()
    (out / "numerics.jsonl").write_text("my own lines\n")
    assert "neither empty nor an output of amp-suite numerics" in one_line_error(
        lambda: _numerics(tmp_path, force=True))
    assert target.read_text() == '{"record": "run"}\n'


def test_an_output_stopped_before_its_first_run_is_its_own_and_force_reuses_it(tmp_path: Path) -> None:
    """What a command stopped before any run finished leaves (an empty numerics.jsonl, a log, a request) is an
    output of its own: kept without --force, reused with it."""
    out = tmp_path / "numerics"
    (out / "logs").mkdir(parents=True)
    (out / "numerics.jsonl").write_text("\n")
    (out / "logs" / "shadowfw__tiny__amp_bf16.log").write_text("stopped\n")
    assert "holds the results of an earlier amp-suite numerics" in one_line_error(lambda: _numerics(tmp_path))
    frame = _numerics(tmp_path, inline=True, force=True)
    assert {run["status"] for run in frame.attrs["runs"]} == {"ok"}


def test_a_stopped_commands_report_says_how_many_of_its_runs_ran(tmp_path: Path) -> None:
    from amp_suite.numerics.records import NumericsRun
    from amp_suite.shadow.report import write_report

    runs = [NumericsRun("shadowfw", "tiny", "fp32", "ok")]
    write_report(tmp_path, runs, [], planned=3)
    text = (tmp_path / "numerics.md").read_text()
    assert text.startswith("# Numerics") and "Stopped before it ended: 1 of 3 planned runs ran" in text
    write_report(tmp_path, runs, [])
    assert "Stopped" not in (tmp_path / "numerics.md").read_text()


def test_the_kits_trace_check_fails_a_backend_whose_trace_misses_the_workloads_variables() -> None:
    from amp_suite.testing import check_trace_step

    # shadowfw traces a chain of small dense layers named after the workload's layers: the names match, the
    # shapes are not deep_cnn's
    with pytest.raises(AssertionError, match=r"shapes that are not the canonical ones: \['logits/w \(8, 10\)"):
        check_trace_step("shadowfw", "deep_cnn", plugin_modules=("shadowfw",))


def test_numerics_report_reads_back_what_the_command_wrote_and_refuses_a_folder_without_it(tmp_path: Path) -> None:
    frame = _numerics(tmp_path, inline=True)
    again = amp_suite.numerics_report(tmp_path / "numerics")
    assert again.equals(frame) and again.attrs["runs"] == frame.attrs["runs"]
    assert {"relative_error", "underflow_without_scale", "error_added"} <= set(frame.columns)
    assert "holds no numerics.jsonl" in one_line_error(lambda: amp_suite.numerics_report(tmp_path))


def test_gradients_that_overflow_at_the_loss_scale_are_named_and_their_infinite_error_is_not_ranked() -> None:
    rng = np.random.default_rng(5)
    act = rng.normal(size=(2, 4))
    big = np.full((4, 4), 10.0)  # times the scale 2**14: 163840, beyond float16's 65504
    big[0, 0] = 1e-3
    shadow = _trace({"head": act, "body": act}, {"head/w": big, "body/w": big * 1e-3}, "float32")
    run = _trace({"head": act, "body": act}, {"head/w": np.where(big > 1, np.inf, big), "body/w": big * 1.01e-3},
                 "float16", loss_scale=2.0**14)
    rows = compare_steps(run, shadow, framework="f", workload="w", precision="amp_fp16", shadow_precision="fp32",
                         step=0)
    head = next(r for r in rows if r.layer == "head" and r.tensor == "gradient")
    assert head.overflow == 15 / 16 == head.nonfinite and head.relative_error == np.inf
    sentences = worst_layer_sentences(summarise(rows))
    assert "layer head: 93.8% of its weight gradients overflow float16 at the loss scale 16384" in sentences[0]
    assert any(s.startswith("layer body: its weight gradients are 1% off") for s in sentences), sentences


def test_a_run_with_declared_choices_records_them_and_the_runs_table_names_them():
    """An ML engineer's trial: numerics.md and numerics.jsonl could not tell that conv1 and logits ran as float32
    islands, nor that loss scaling was off."""
    from amp_suite.numerics.records import NumericsRun
    from amp_suite.records import PrecisionApplied
    from amp_suite.shadow.report import markdown
    from amp_suite.shadow.worker import declared_choices

    off = PrecisionApplied("amp_fp16", "float16", "float32", loss_scaling="none", keep_fp32=("conv1", "logits"))
    assert declared_choices(off) == "loss scaling none, keep_fp32 conv1,logits"
    assert declared_choices(PrecisionApplied("amp_fp16", "float16", "float32", loss_scaling="dynamic")) == ""
    assert declared_choices(PrecisionApplied("amp_bf16", "bfloat16", "float32")) == ""  # no loss scale to declare
    run = NumericsRun("torch", "mnist_cnn", "amp_fp16", "ok", steps=1, choices=declared_choices(off))
    assert "| torch | mnist_cnn | amp_fp16 | ok | 1 |  |  | loss scaling none, keep_fp32 conv1,logits |" in \
        markdown([run], [])


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--steps", "abc", "argument --steps: 'abc' is not a whole number (allowed: 1 to 1000)"),
    ("--batch-size", "1.5", "argument --batch-size: '1.5' is not a whole number (allowed: 1 to 65536)"),
    ("--timeout", "10s", "argument --timeout: '10s' is not a number (allowed: above 0)"),
])
def test_a_flag_that_is_no_number_is_refused_with_the_range_it_allows(tmp_path: Path, capsys, monkeypatch,
                                                                      flag: str, value: str, expected: str) -> None:
    from amp_suite.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["numerics", "--workloads", "tiny", "--frameworks", "shadowfw", flag, value])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"amp-suite: error: {expected}", err
    assert list(tmp_path.iterdir()) == []


def test_a_precision_the_device_does_not_run_is_refused_before_anything_runs(tmp_path: Path, monkeypatch) -> None:
    """A new user's trial: numerics offered tf32 on a CPU (declared for GPUs), then ran the shadows and exited 1 with
    nothing compared; it is refused in one line, naming what the device runs."""
    from amp_suite.config.catalog import load_config
    from amp_suite.records import FrameworkInfo
    from amp_suite.shadow.plan import NumericsRequest, check_request

    info = FrameworkInfo(name="gpufw", display_name="GPU fw", modules=(), extra="gpufw",
                         precisions={"cpu": ("fp32", "amp_bf16", "fp64"), "gpu": ("fp32", "tf32", "amp_bf16")})
    config = load_config(None)
    request = NumericsRequest(workloads=("mnist_cnn",), frameworks=("gpufw",), precisions=("tf32",), device="cpu")
    message = one_line_error(lambda: check_request(request, config, {"gpufw": info}))
    assert message == "precision 'tf32' does not run on the CPU (allowed there: amp_bf16)", message
    gpu = NumericsRequest(workloads=("mnist_cnn",), frameworks=("gpufw",), precisions=("tf32",), device="gpu")
    check_request(gpu, config, {"gpufw": info})  # on a GPU it is one to set beside the shadows
    assert "allowed: amp_bf16" in one_line_error(lambda: check_request(
        NumericsRequest(workloads=("mnist_cnn",), frameworks=("gpufw",), precisions=("amp_bf61",), device="cpu"),
        config, {"gpufw": info}))

"""``amp-suite numerics`` honours ``[frameworks.NAME]`` options as ``amp-suite run`` does: the textbook
demonstration of gradient underflow (``amp_fp16`` with ``loss_scaling = "none"``) and ``keep_fp32``.

The fake backend ``shadowfw`` (NumPy) makes these fast; one real PyTorch run on the tiny CNN shows the
same on a real framework.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import amp_suite
from amp_suite.shadow.report import summarise, worst_layer_sentences
from amp_suite.shadow.stored import read_numerics
from suite_cli import one_line_error, tiny_config_file


def _numerics(folder: Path, table: str, **keywords):
    """``amp-suite numerics`` of the tiny workload with ``table`` as ``[frameworks.shadowfw]``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = tiny_config_file(folder, f"\n[frameworks.shadowfw]\n{table}\n" if table else "")
    options = dict(workloads="tiny", frameworks="shadowfw", precisions="amp_fp16", steps=2,
                   out=folder / "numerics", dataset="synthetic", config=config, plugins="shadowfw", inline=True)
    return amp_suite.run_numerics(**{**options, **keywords})


def _gradient_share(folder: Path, share: str = "underflow") -> dict[str, float]:
    """Per layer, the largest ``share`` (underflow, subnormal) of weight gradients in float16 in the amp_fp16
    run."""
    _, layers = read_numerics(folder / "numerics")
    shares: dict[str, float] = {}
    for row in layers:
        if row.precision == "amp_fp16" and row.shadow == "fp32" and row.tensor == "gradient":
            shares[row.layer] = max(shares.get(row.layer, 0.0), getattr(row, share))
    return shares


def test_amp_fp16_without_loss_scaling_underflows_more_gradients_and_the_report_says_so(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_LOSS_FACTOR", "1e-4")  # gradients around 1e-7: below float16's normals
    _numerics(tmp_path / "dynamic", "")
    frame = _numerics(tmp_path / "none", 'loss_scaling = "none"')
    runs = {run["precision"]: run for run in frame.attrs["runs"]}
    assert runs["amp_fp16"]["status"] == "ok" and list(runs["amp_fp16"]["loss_scales"]) == [None, None]
    scaled, unscaled = _gradient_share(tmp_path / "dynamic"), _gradient_share(tmp_path / "none")
    assert set(scaled) == set(unscaled) == {"conv1", "conv2", "dense1", "logits"}
    assert sum(unscaled.values()) > sum(scaled.values()) + 0.01, (scaled, unscaled)
    worst = max(unscaled, key=unscaled.__getitem__)
    assert unscaled[worst] > scaled[worst]
    _, layers = read_numerics(tmp_path / "none" / "numerics")
    sentences = worst_layer_sentences(summarise(layers))
    assert any(s.startswith(f"layer {worst}: ") and "nonzero weight gradients underflow to zero in float16" in s
               and "no loss scale" in s for s in sentences), sentences
    # with the scale, the gradients that would underflow without it are the ones the report names
    _, scaled_layers = read_numerics(tmp_path / "dynamic" / "numerics")
    assert any("without the loss scale" in s for s in worst_layer_sentences(summarise(scaled_layers)))


def test_keep_fp32_from_the_config_computes_the_named_layer_in_float32_in_the_traced_run(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_PLANT", "conv2")
    _numerics(tmp_path, 'keep_fp32 = ["conv2"]', precisions="amp_bf16")
    _, layers = read_numerics(tmp_path / "numerics")
    dtypes = {r.layer: r.dtype for r in layers if r.precision == "amp_bf16" and r.tensor == "activation"}
    assert dtypes == {"conv1": "bfloat16", "conv2": "float32", "dense1": "bfloat16", "logits": "bfloat16"}


@pytest.mark.parametrize(("table", "precisions", "expected"), [
    ('loss_scaling = "none"', "amp_bf16", "[frameworks.shadowfw] loss_scaling = 'none': only amp_fp16"),
    ('loss_scaling = "off"', "amp_fp16", "'off'"),
    ('keep_fp32 = ["conv3"]', "amp_bf16", "'conv3' is neither a layer of workload 'tiny' nor a layer kind"),
    ('keep_fp32 = ["conv2"]', "fp32", "precision 'fp32' is one of the shadows"),  # no fp32 run to keep layers of
])
def test_bad_framework_options_are_refused_in_one_line_before_anything_runs(tmp_path: Path, table: str,
                                                                            precisions: str, expected: str) -> None:
    message = one_line_error(lambda: _numerics(tmp_path, table, precisions=precisions))
    assert expected in message, message
    if "conv3" in expected:
        assert "conv2" in message  # the closest name
    assert not (tmp_path / "numerics").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_torch_amp_fp16_without_loss_scaling_underflows_more_gradients_than_with_it(tmp_path: Path) -> None:
    # mnist_cnn's weight gradients after one step of a batch of 32 reach float16's subnormals: without the loss
    # scale about 0.01% of conv2's and dense1's round to zero (docs/numerics.md quotes such a run)
    for name, table in (("dynamic", ""), ("none", 'loss_scaling = "none"')):
        folder = tmp_path / name
        folder.mkdir()
        config = tiny_config_file(folder, f"\n[frameworks.torch]\n{table}\n" if table else "")
        frame = amp_suite.run_numerics("mnist_cnn", "torch", "amp_fp16", steps=1, out=folder / "numerics",
                                       dataset="synthetic", config=config, device="cpu", batch_size=32, inline=True)
        assert {run["status"] for run in frame.attrs["runs"]} == {"ok"}, frame.attrs["runs"]
    scaled, unscaled = _gradient_share(tmp_path / "dynamic"), _gradient_share(tmp_path / "none")
    assert sum(unscaled.values()) > sum(scaled.values()) == 0, (scaled, unscaled)
    # the gradients float16 keeps only as subnormals (precision lost) are many more without the scale
    assert sum(_gradient_share(tmp_path / "none", "subnormal").values()) \
        > 10 * sum(_gradient_share(tmp_path / "dynamic", "subnormal").values())


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_torch_traces_the_layers_keep_fp32_keeps_in_float32(tmp_path: Path) -> None:
    # a kept layer's output is cast back to bfloat16 (docs/layers.md), so its dtype cannot tell; its arithmetic
    # can: keeping the convolutions in float32 moves the amp_bf16 loss and the convolutions' error
    losses, errors = {}, {}
    for name, table in (("all", ""), ("kept", 'keep_fp32 = ["conv2d"]')):
        folder = tmp_path / name
        folder.mkdir()
        config = tiny_config_file(folder, f"\n[frameworks.torch]\n{table}\n" if table else "")
        frame = amp_suite.run_numerics("tiny", "torch", "amp_bf16", steps=1, out=folder / "numerics",
                                       dataset="synthetic", config=config, device="cpu", batch_size=4, inline=True)
        runs = {run["precision"]: run for run in frame.attrs["runs"]}
        assert {run["status"] for run in runs.values()} == {"ok"}, runs
        losses[name] = runs["amp_bf16"]["losses"][0]
        _, layers = read_numerics(folder / "numerics")
        errors[name] = next(r.relative_error for r in layers if r.precision == "amp_bf16" and r.shadow == "fp64"
                            and r.layer == "conv1" and r.tensor == "activation")
    assert losses["kept"] != losses["all"], losses
    # conv1 reads the float32 input: kept, its output is off only by the cast back to bfloat16
    assert errors["kept"] < errors["all"], errors

"""PyTorch's transformers: every token kind against the NumPy float64 reference, the two attention
implementations, parameter counts, AdamW / warm-up / clipping (unscaled before clipping under a loss scale),
the float32 islands under AMP, and a compiled tiny ViT.

Most tests drive the plugin's hooks in this process on tiny models (width 8, one block, batch 4); one probe
checks the path a cell takes, token ids from the host's own dataset included.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from amp_suite.errors import UnsupportedError  # noqa: E402
from amp_suite.records import Batch, LayerSpec, RunSpec, Workload  # noqa: E402
from amp_suite.testing import relative_error  # noqa: E402
from amp_suite.workloads import reference  # noqa: E402
from amp_suite.workloads.kinds import KINDS, missing_kinds  # noqa: E402
from amp_suite.workloads.layers import (  # noqa: E402
    class_token,
    class_token_pool,
    dense,
    gelu,
    layer_norm,
    multi_head_attention,
    patch_embed,
    position_embedding,
    residual,
    rms_norm,
    token_embedding,
    token_mean_pool,
)
from amp_suite.workloads.workload import (  # noqa: E402
    init_variables,
    init_weights,
    param_count,
    variable_specs,
    workload_from_config,
)
from amp_suite_plugins.torch import layers as torch_layers  # noqa: E402
from amp_suite_plugins.torch import plugin as torch_plugin  # noqa: E402

pytestmark = pytest.mark.slow  # a real framework on 2 cores

BATCH = 4
VIT = {"model": "vit", "input_size": 8, "channels": 2, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4, "batch_size": BATCH, "optimizer": "adamw", "learning_rate": 1e-2,
       "weight_decay": 0.1, "schedule": "warmup_cosine", "warmup_steps": 1, "clip_norm": 1.0}
GPT = {"model": "gpt", "width": 8, "depth": 2, "heads": 2, "mlp": 16, "vocab_size": 7, "context": 6,
       "batch_size": BATCH, "optimizer": "adamw", "learning_rate": 1e-2, "weight_decay": 0.1,
       "schedule": "warmup_cosine", "warmup_steps": 1, "clip_norm": 1.0}


def _workload(table: dict[str, Any], layers: tuple[LayerSpec, ...] | None = None) -> Workload:
    workload = workload_from_config("tiny", table)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(workload.optimizer, decay_steps=4))
    return workload if layers is None else dataclasses.replace(workload, layers=layers)


def _perturbed(workload: Workload, seed: int = 0) -> dict[str, np.ndarray]:
    """The canonical weights with every entry moved (biases, offsets and scales too), so a misplaced or
    transposed leaf shows."""
    rng = np.random.default_rng(seed)
    weights, _ = init_variables(workload, 0)
    return {k: (v + rng.normal(0.0, 0.3, v.shape)).astype(np.float32) for k, v in weights.items()}


def _build(workload: Workload, precision: str, weights: dict[str, np.ndarray] | None = None, *,
           options: dict[str, Any] | None = None, mode: str = "") -> tuple[RunSpec, Any]:
    run = RunSpec(framework="torch", workload=workload.name, precision=precision, steps=3, warmup=0,
                  batch_size=BATCH, options=options or {}, mode=mode)
    device = torch_plugin.select_device(run)
    applied = torch_plugin.set_precision(run, device)
    if weights is None:
        weights, _ = init_variables(workload, run.seed)
    return run, torch_plugin.build_model(run, workload, weights, {}, applied, device)


def _batches(workload: Workload, count: int, seed: int = 1) -> list[Batch]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        if workload.tokens:
            vocab = workload.transformer.vocab_size if workload.transformer else 0
            ids = rng.integers(0, vocab, size=(BATCH, *workload.input_shape)).astype(np.int32)
            out.append(Batch(ids, rng.integers(0, vocab, size=ids.shape).astype(np.int32), {}))
        else:
            images = rng.normal(size=(BATCH, *workload.input_shape)).astype(np.float32)
            out.append(Batch(images, rng.integers(0, workload.num_classes, size=BATCH).astype(np.int32), {}))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One probe process for this module's probes: torch is imported once."""
    from amp_suite.testing import ProbeServer

    probes = ProbeServer(tmp_path_factory.mktemp("torch-server"))
    yield probes
    probes.close()


# --- the table --------------------------------------------------------------------------------------------


def test_every_kind_is_one_table_entry_and_a_missing_one_is_unsupported_by_name(monkeypatch) -> None:
    assert torch_plugin.framework_info().layer_kinds == tuple(torch_layers.TORCH_KINDS)
    assert missing_kinds(torch_plugin.framework_info().layer_kinds) == []
    assert set(torch_layers.TORCH_KINDS) == set(KINDS)
    monkeypatch.delitem(torch_layers.TORCH_KINDS, "gelu")
    with pytest.raises(UnsupportedError, match="cannot build layer kind 'gelu'"):
        _build(_workload(VIT), "fp32")


def test_an_unknown_attention_implementation_is_refused_naming_it_and_the_allowed_ones() -> None:
    with pytest.raises(UnsupportedError, match="'flash' is not an implementation; allowed: fused, reference"):
        _build(_workload(VIT), "fp32", options={"attention": "flash"})


# --- fp64 forward of each kind against the NumPy reference ------------------------------------------------

PATCHES = (patch_embed("patch", 8, 4),)
# Each model isolates one kind between a patch embedding (or a token embedding) and a readout; a per-token
# dense readout keeps every token's value in the logits.
KIND_MODELS: dict[str, tuple[LayerSpec, ...]] = {
    "patch_embed": (*PATCHES, dense("head", 3)),
    "class_token": (*PATCHES, class_token("cls"), dense("head", 3)),
    "position_embedding": (*PATCHES, class_token("cls"), position_embedding("pos"), dense("head", 3)),
    "layer_norm": (*PATCHES, layer_norm("ln", epsilon=1e-5), dense("head", 3)),
    "rms_norm": (*PATCHES, rms_norm("rms", epsilon=1e-6), dense("head", 3)),
    "gelu": (*PATCHES, gelu(), dense("head", 3)),
    "multi_head_attention": (*PATCHES, multi_head_attention("attn", 2), dense("head", 3)),
    "causal_attention": (*PATCHES, multi_head_attention("attn", 4, causal=True), dense("head", 3)),
    "residual": (*PATCHES, residual((layer_norm("ln"), dense("inner", 8))), dense("head", 3)),
    "token_mean_pool": (*PATCHES, token_mean_pool(), dense("head", 3)),
    "class_token_pool": (*PATCHES, class_token("cls"), position_embedding("pos"), class_token_pool(),
                         dense("head", 3)),
}
TOKEN_MODELS: dict[str, tuple[LayerSpec, ...]] = {
    "token_embedding": (token_embedding("embed", 7, 8), position_embedding("pos"), dense("head", 7)),
}


@pytest.mark.parametrize("name", [*KIND_MODELS, *TOKEN_MODELS])
def test_each_token_kind_at_fp64_is_the_numpy_reference(name: str) -> None:
    table, layers = (GPT, TOKEN_MODELS[name]) if name in TOKEN_MODELS else (VIT, KIND_MODELS[name])
    workload = _workload(table, layers)
    weights = _perturbed(workload)
    inputs = _batches(workload, 1)[0].images
    expected = reference.forward(layers, inputs, weights)
    for attention in ("fused", "reference"):
        run, model = _build(workload, "fp64", weights, options={"attention": attention})
        logits = torch_plugin.predict(run, model, inputs, training=False)
        assert logits.dtype == np.float64 and logits.shape == expected.shape
        assert relative_error(logits, expected) < 1e-9, (name, attention)
        variables = torch_plugin.get_variables(run, model)
        assert {k: v.shape for k, v in variables.items()} == {v.name: v.shape for v in variable_specs(workload)}
        assert all(np.array_equal(variables[k], weights[k]) for k in weights)  # canonical in, canonical out


@pytest.mark.parametrize("table", [VIT, GPT], ids=["vit", "gpt"])
def test_fused_and_reference_attention_give_the_reference_forward_at_fp64(table: dict[str, Any]) -> None:
    workload = _workload(table)
    weights = _perturbed(workload)
    inputs = _batches(workload, 1)[0].images
    expected = reference.forward(workload.layers, inputs, weights)
    outputs = {}
    for attention in ("fused", "reference"):
        run, model = _build(workload, "fp64", weights, options={"attention": attention})
        outputs[attention] = torch_plugin.predict(run, model, inputs, training=False)
        assert relative_error(outputs[attention], expected) < 1e-9
    assert relative_error(outputs["fused"], outputs["reference"]) < 1e-12
    if workload.tokens:  # causal: the last token changes no earlier position's logits
        changed = inputs.copy()
        changed[:, -1] = (changed[:, -1] + 1) % 7
        after = torch_plugin.predict(run, model, changed, training=False)
        np.testing.assert_array_equal(after[:, :-1], outputs["reference"][:, :-1])
        assert not np.array_equal(after[:, -1], outputs["reference"][:, -1])


@pytest.mark.parametrize("table", [VIT, GPT], ids=["vit", "gpt"])
def test_parameter_count_is_the_neutral_walks(table: dict[str, Any]) -> None:
    workload = _workload(table)
    run, model = _build(workload, "fp32")
    declared = param_count(init_weights(workload, 0))
    assert torch_plugin.measure(run, model, torch_plugin.select_device(run))["param_count"] == declared


def test_a_probe_of_the_gpt_at_fp64_matches_the_reference_on_the_hosts_token_windows(tmp_path, server) -> None:
    from amp_suite.testing import ProbeRequest, run_probe

    result = run_probe(ProbeRequest(framework="torch", precision="fp64", workload="tiny_gpt", table=GPT, steps=2,
                                    batch_size=BATCH), tmp_path, server=server)
    assert result.inputs is not None and np.issubdtype(result.inputs.dtype, np.integer)
    workload = workload_from_config("tiny_gpt", GPT)
    expected = reference.forward(workload.layers, result.inputs, result.initial)
    assert result.logits_before.shape == (BATCH, 6, 7)
    assert relative_error(result.logits_before, expected) < 1e-9
    assert len(result.losses) == 2 and all(np.isfinite(result.losses))


# --- the optimizer ----------------------------------------------------------------------------------------


def test_adamw_decays_only_the_declared_variables_in_its_own_group() -> None:
    workload = _workload(GPT)
    run, model = _build(workload, "fp32")
    groups = model.optimizer.param_groups
    assert isinstance(model.optimizer, torch.optim.AdamW) and [g["weight_decay"] for g in groups] == [0.1, 0.0]
    names = {id(p): name for name, p in torch_layers.named_parameters(model.module).items()}
    decayed = {names[id(p)] for p in groups[0]["params"]}
    assert decayed == {v.name for v in variable_specs(workload) if v.decay}
    assert {names[id(p)] for p in groups[1]["params"]} >= {"embed/table", "pos/table", "block1_ln1/scale",
                                                            "block1_attn/qkv_b"}


@pytest.mark.parametrize("table", [VIT, GPT], ids=["vit", "gpt"])
def test_adamw_warmup_cosine_and_clipping_are_the_suites_arithmetic(table: dict[str, Any], tmp_path,
                                                                    server) -> None:
    from amp_suite.testing import ProbeRequest, assert_optimizer_arithmetic, run_probe

    # clip_norm small enough to bind at every step; warm-up of one step (rate 0 at step 0), then the cosine
    tight = {**table, "clip_norm": 0.05, "warmup_steps": 1}
    result = run_probe(ProbeRequest(framework="torch", precision="fp64", workload="tiny", table=tight, steps=3,
                                    batch_size=BATCH, gradient_oracle=True), tmp_path, server=server)
    norms = [np.sqrt(sum(float((g ** 2).sum()) for g in step.gradients.values())) for step in result.gradient_steps]
    assert min(norms) > 0.05  # the clip bound at every step
    assert_optimizer_arithmetic(result, rtol=1e-6)


def _gentle(workload: Workload) -> dict[str, np.ndarray]:
    """The canonical weights with a 10x smaller final LayerNorm scale and head: every gradient below 1 in
    magnitude, so a loss scale of 2**15 overflows no float16 gradient."""
    weights, _ = init_variables(workload, 0)
    return {k: v * np.float32(0.1) if k in ("final_ln/scale", "head/w") else v for k, v in weights.items()}


def _one_step_update(workload: Workload, scale: float, batch: Batch) -> tuple[dict[str, np.ndarray], Any]:
    run, model = _build(workload, "amp_fp16", _gentle(workload), options={"initial_loss_scale": scale})
    before = torch_plugin.get_variables(run, model)
    result = torch_plugin.train_epoch(run, model, torch_plugin.stage_batches(run, model, [batch]), 0)
    after = torch_plugin.get_variables(run, model)
    return {k: after[k].astype(np.float64) - before[k] for k in before}, result


def _norm(tree: dict[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(float((v ** 2).sum()) for v in tree.values())))


@pytest.mark.parametrize("table", [VIT, GPT], ids=["vit", "gpt"])
def test_under_amp_fp16_a_loss_scale_of_2_15_does_not_change_the_clipped_update(table: dict[str, Any]) -> None:
    # Plain SGD, so the update is lr times the clipped gradient (Adam would hide a wrongly scaled gradient).
    clip, lr = 1e-3, 0.5
    sgd = {**{k: v for k, v in table.items() if k not in ("weight_decay", "warmup_steps")}, "optimizer": "sgd",
           "learning_rate": lr, "schedule": "constant", "clip_norm": clip}
    workload = _workload(sgd)
    batch = _batches(workload, 1)[0]
    scaled, result = _one_step_update(workload, 2.0 ** 15, batch)
    plain, _ = _one_step_update(workload, 1.0, batch)
    unclipped, _ = _one_step_update(_workload({**sgd, "clip_norm": 0.0}), 2.0 ** 15, batch)
    assert result.skipped_steps == 0 and result.loss_scale_final == 2.0 ** 15
    # the clip bound: the update is lr * clip long, far shorter than the unclipped one
    assert _norm(unclipped) > 20 * lr * clip
    assert _norm(scaled) == pytest.approx(lr * clip, rel=2e-3)
    # the scale changed nothing (fp16 round-off of the gradients aside) ...
    difference = _norm({k: scaled[k] - plain[k] for k in plain})
    assert difference < 1e-2 * _norm(plain), difference / _norm(plain)
    # ... where clipping the scaled gradients would have made the update 2**15 times shorter
    assert _norm(scaled) > 1e3 * (lr * clip / 2.0 ** 15)


# --- AMP ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
@pytest.mark.parametrize("table", [VIT, GPT], ids=["vit", "gpt"])
def test_amp_trains_a_tiny_transformer_with_finite_losses_and_float32_logits(precision: str,
                                                                              table: dict[str, Any]) -> None:
    workload = _workload(table)
    for attention in ("fused", "reference"):
        run, model = _build(workload, precision, options={"attention": attention})
        batches = _batches(workload, 3)
        result = torch_plugin.train_epoch(run, model, torch_plugin.stage_batches(run, model, batches), 0)
        assert len(result.step_losses) == 3 and all(np.isfinite(result.step_losses))
        logits = torch_plugin.predict(run, model, batches[0].images, training=False)
        assert logits.dtype == np.float32 and np.isfinite(logits).all()


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
def test_under_amp_normalizations_and_the_reference_softmax_compute_in_float32(precision: str, monkeypatch) -> None:
    workload = _workload(VIT, (*PATCHES, layer_norm("ln"), rms_norm("rms"),
                               multi_head_attention("attn", 2, causal=True), token_mean_pool(), dense("head", 3)))
    seen: dict[str, list[Any]] = {"layer_norm": [], "rms_norm": [], "softmax": []}
    functional = torch.nn.functional
    for name, owner in (("layer_norm", functional), ("rms_norm", functional), ("softmax", torch)):
        original = getattr(owner, name)

        def recording(x, *args, _name=name, _original=original, **kwargs):
            out = _original(x, *args, **kwargs)
            seen[_name].append((x.dtype, out.dtype))
            return out

        monkeypatch.setattr(owner, name, recording)
    outputs: list[Any] = []  # (input, output) dtypes of the rms_norm kind as a whole
    entry = torch_layers.TORCH_KINDS["rms_norm"]

    def keep_dtypes(torch_module, net, spec, x, masks):
        out = entry.apply(torch_module, net, spec, x, masks)
        outputs.append((x.dtype, out.dtype))
        return out

    monkeypatch.setitem(torch_layers.TORCH_KINDS, "rms_norm", dataclasses.replace(entry, apply=keep_dtypes))
    run, model = _build(workload, precision, _perturbed(workload), options={"attention": "reference"})
    torch_plugin.predict(run, model, _batches(workload, 1)[0].images, training=False)
    compute = getattr(torch, {"amp_bf16": "bfloat16", "amp_fp16": "float16"}[precision])
    assert seen["layer_norm"] == [(torch.float32, torch.float32)]  # statistics and normalization in float32
    assert seen["rms_norm"] == [(torch.float32, torch.float32)]
    assert seen["softmax"] == [(torch.float32, torch.float32)]
    assert outputs == [(compute, compute)]  # ... and the kind's output is cast back to the compute dtype
    notes = " ".join(torch_plugin.set_precision(run, torch_plugin.select_device(run)).notes)
    assert "attention=reference" in notes and "layer_norm, rms_norm=float32" in notes


def test_the_fused_attention_is_recorded_in_the_notes() -> None:
    run = RunSpec(framework="torch", workload="tiny", precision="amp_bf16", steps=1, warmup=0, batch_size=BATCH)
    notes = torch_plugin.set_precision(run, torch_plugin.select_device(run)).notes
    assert any(note.startswith("attention=fused (torch.nn.functional.scaled_dot_product_attention") for note in notes)


# --- compiled ----------------------------------------------------------------------------------------------


def test_the_compiled_mode_trains_a_tiny_vit_like_eager() -> None:
    workload = _workload(VIT)
    batches = _batches(workload, 2)
    losses = {}
    for mode in ("", "compiled"):
        run, model = _build(workload, "fp32", mode=mode)
        result = torch_plugin.train_epoch(run, model, torch_plugin.stage_batches(run, model, batches), 0)
        losses[mode] = result.step_losses
    assert losses["compiled"] == pytest.approx(losses[""], rel=1e-5)


def test_token_ids_and_labels_are_staged_at_the_hosts_size_so_the_memory_figure_subtracts_them_whole() -> None:
    """A GPU review: ids and labels were staged as int64, twice the host's int32 bytes the memory figure subtracts
    from the allocator's peak, so half of every window's staged tokens stayed in PyTorch's training-only peak."""
    from amp_suite.cell.figures import staged_bytes

    workload = _workload(GPT)
    run, model = _build(workload, "fp32")
    batches = _batches(workload, 2)
    staged = torch_plugin.stage_batches(run, model, batches)
    on_device = sum(t.numel() * t.element_size() for ids, labels, masks in staged
                    for t in (ids, labels, *masks.values()))
    assert on_device == staged_bytes(batches) and staged[0][0].dtype == staged[0][1].dtype == torch.int32
    result = torch_plugin.train_epoch(run, model, staged, 0)  # the loss widens the labels itself
    assert len(result.step_losses) == 2 and all(np.isfinite(result.step_losses))

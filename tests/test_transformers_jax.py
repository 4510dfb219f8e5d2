"""The token kinds, attention, AMP policy and AdamW/clipping of the JAX (haiku + jmp + optax) plugin (issue 40).

Every probe runs in one long-lived JAX process (the kit's
:class:`~amp_suite.testing.ProbeServer`) on tiny models: width 8, one block,
batches of 4, one or three steps.  The per-kind models
(``tests/helpers/token_kind_nets.py``) isolate one kind between a patch
embedding and a token pool; at ``fp64`` their forward pass must equal the
NumPy float64 reference (:func:`amp_suite.workloads.reference.forward`) from
the same canonical variables.  ``jax.nn.dot_product_attention`` takes its
softmax in float32 even for float64 inputs, so the per-kind checks of
attention use the reference implementation and the fused one is compared
with it to float32 round-off.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import token_kind_nets  # noqa: F401 - registers the isolating models here too (the probe loads it as a plugin)
from amp_suite.testing import (
    ProbeRequest,
    ProbeResult,
    ProbeServer,
    framework_installed,
    relative_error,
    relative_l2,
    session_probe_folder,
    shared_probe,
)
from amp_suite.workloads import reference
from amp_suite.workloads.workload import init_weights, param_count, workload_from_config

# The probes start JAX (seconds each on 2 cores): they are marked slow one by one; the table checks are not.
pytestmark = pytest.mark.skipif(not framework_installed("jax"), reason="jax is not installed")
slow = pytest.mark.slow

BATCH = 4
# An isolating model's table: a 4x4 image of 2 channels, its own architecture (token_kind_nets).
KIND_TABLE = {"input_size": 4, "channels": 2, "num_classes": 3, "batch_size": BATCH, "optimizer": "adam",
              "learning_rate": 1e-3}
VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4, "batch_size": BATCH, "optimizer": "adamw", "learning_rate": 1e-2,
       "weight_decay": 0.1, "schedule": "warmup_cosine", "warmup_steps": 1, "clip_norm": 1.0}
GPT = {"model": "gpt", "width": 8, "depth": 1, "heads": 2, "mlp": 16, "vocab_size": 7, "context": 6,
       "batch_size": BATCH, "optimizer": "adamw", "learning_rate": 1e-2, "weight_decay": 0.1,
       "schedule": "warmup_cosine", "warmup_steps": 1, "clip_norm": 1.0}
TRANSFORMERS = {"vit": VIT, "gpt": GPT}
KIND_NETS = ("tokens_patch_embed", "tokens_class_token", "tokens_position_embedding", "tokens_layer_norm",
             "tokens_rms_norm", "tokens_gelu", "tokens_dense", "tokens_residual", "tokens_attention",
             "tokens_causal_attention", "tokens_class_token_pool", "tokens_block")
REFERENCE = {"attention": "reference"}


def test_every_vocabulary_kind_is_one_table_entry_and_a_missing_one_is_unsupported() -> None:
    from amp_suite.errors import UnsupportedError
    from amp_suite.plugins.host import PluginHost
    from amp_suite.workloads.kinds import missing_kinds
    from amp_suite_plugins.jax.layers import LAYER_KINDS, TRANSLATIONS, translation

    assert PluginHost().frameworks()["jax"].layer_kinds == LAYER_KINDS == tuple(TRANSLATIONS)
    assert missing_kinds(LAYER_KINDS) == []
    with pytest.raises(UnsupportedError, match="does not build layer kind 'conv3d' \\(layer 'stem'\\)"):
        translation("conv3d", "stem")


def test_the_flax_example_declares_the_kinds_it_builds_so_token_kinds_are_named_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from amp_suite.workloads.kinds import TOKEN_KINDS, missing_kinds

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "examples" / "amp-suite-flax"))
    from amp_suite_flax.plugin import framework_info

    kinds = framework_info().layer_kinds
    assert "conv2d" in kinds and set(TOKEN_KINDS) <= set(missing_kinds(kinds))


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``probe(workload, table, precision="fp64", **fields) -> ProbeResult`` in one JAX process, cached."""
    servers: list[ProbeServer] = []
    cache: dict[str, ProbeResult] = {}

    def server() -> ProbeServer:
        if not servers:
            servers.append(ProbeServer(tmp_path_factory.mktemp("server-jax")))
        return servers[0]

    def get(workload: str, table: dict[str, Any], precision: str = "fp64", **fields: Any) -> ProbeResult:
        request = ProbeRequest(framework="jax", precision=precision, workload=workload, table=table,
                               batch_size=BATCH, plugin_modules=("token_kind_nets",), **fields)
        key = request.to_json()
        if key not in cache:  # run once in the session, by the xdist lane that asks first
            cache[key] = shared_probe(request, session=session_probe_folder(tmp_path_factory), server=server,
                                      folder=lambda: tmp_path_factory.mktemp(f"jax-{workload}-{precision}"))
        return cache[key]

    yield get
    for started in servers:
        started.close()


def _kind_table(model: str) -> dict[str, Any]:
    return {**KIND_TABLE, "model": model}


def _reference_logits(result: ProbeResult, table: dict[str, Any]) -> np.ndarray:
    workload = workload_from_config(result.request.workload, table)
    assert result.inputs is not None
    return reference.forward(workload.layers, result.inputs, result.initial)


@slow
@pytest.mark.parametrize("model", KIND_NETS)
def test_each_token_kind_at_fp64_equals_the_numpy_reference(probe: Any, model: str) -> None:
    table = _kind_table(model)
    result = probe(model, table, options=REFERENCE)
    assert result.logits_before.dtype == np.float64
    expected = _reference_logits(result, table)
    assert result.logits_before.shape == expected.shape
    error = relative_error(result.logits_before, expected)
    assert error <= 1e-9, f"{model}: fp64 logits differ from the NumPy reference by {error:.2e}"


@slow
@pytest.mark.parametrize("model", ["gpt", "vit"])
def test_whole_transformers_at_fp64_equal_the_reference_and_the_neutral_parameter_count(probe: Any,
                                                                                        model: str) -> None:
    table = TRANSFORMERS[model]
    result = probe(model, table, options=REFERENCE)
    workload = workload_from_config(model, table)
    expected = _reference_logits(result, table)
    if model == "gpt":  # token ids in, one row of vocabulary logits per position out
        assert result.inputs is not None and np.issubdtype(result.inputs.dtype, np.integer)
        assert result.logits_before.shape == (BATCH, GPT["context"], GPT["vocab_size"])
    assert relative_error(result.logits_before, expected) <= 1e-9
    assert result.param_count == param_count(init_weights(workload, 0))
    assert set(result.initial) == set(init_weights(workload, 0))
    first_loss = reference.mean_cross_entropy(expected, _labels(workload, table))
    assert result.losses[0] == pytest.approx(first_loss, rel=1e-9)


def _labels(workload: Any, table: dict[str, Any]) -> np.ndarray:
    """The first batch's labels, as the probe's pipeline drew them (one per example, or one per token)."""
    from amp_suite.datasets import input_pipeline, load_dataset

    data = load_dataset("synthetic", workload, steps=1, batch_size=BATCH, seed=0)
    return input_pipeline(workload, data, batch_size=BATCH, steps=1, seed=0).batches(0, 0, 1)[0].labels


@slow
@pytest.mark.parametrize("model", ["tokens_attention", "tokens_causal_attention", "gpt"])
def test_fused_attention_gives_the_reference_attentions_forward_at_fp64(probe: Any, model: str) -> None:
    table = TRANSFORMERS.get(model) or _kind_table(model)
    fused = probe(model, table, options={"attention": "fused"})
    explicit = probe(model, table, options=REFERENCE)
    assert any("multi_head_attention=fused" in note for note in fused.applied["notes"])
    assert any("multi_head_attention=reference" in note for note in explicit.applied["notes"])
    # jax.nn.dot_product_attention's softmax is float32 even for float64 inputs: float32 round-off, no more
    error = relative_error(fused.logits_before, explicit.logits_before)
    assert error <= 1e-6, f"{model}: fused and reference attention differ by {error:.2e}"
    assert fused.losses[0] == pytest.approx(explicit.losses[0], rel=1e-6)


def _update(result: ProbeResult) -> np.ndarray:
    """Every parameter's change over the probe's step, as one vector."""
    return np.concatenate([(np.asarray(result.variables[k], np.float64) - result.initial[k]).ravel()
                           for k in sorted(result.initial)])


@slow
def test_a_loss_scale_of_2_to_the_15_does_not_change_the_clipped_update_under_amp_fp16(probe: Any) -> None:
    # A pre-norm block on patches (tokens_block).  Not the ViT or the GPT: their class token and embeddings start
    # at std 0.02 and reach a LayerNorm, whose backward multiplies their gradient by about 1/0.02; at a scale of
    # 2**15 that gradient (7.4 on the tiny ViT) overflows float16 and the step is skipped, as it should be.
    rate, clip = 0.5, 1e-3
    table = {**_kind_table("tokens_block"), "optimizer": "sgd", "learning_rate": rate, "clip_norm": clip}
    scaled = probe("tokens_block", table, "amp_fp16", options={"initial_loss_scale": 2.0 ** 15})
    unscaled = probe("tokens_block", table, "amp_fp16", options={"initial_loss_scale": 1.0})
    unclipped = probe("tokens_block", {**table, "clip_norm": 0.0}, "amp_fp16", options={"initial_loss_scale": 1.0})
    assert scaled.skipped == unscaled.skipped == unclipped.skipped == 0
    # plain SGD: the update is -rate * the clipped gradient, so its norm over rate is the clipped norm
    gradient_norm = float(np.linalg.norm(_update(unclipped))) / rate
    assert gradient_norm > 20 * clip, f"the clip must bind: the gradient's norm is {gradient_norm:.3g}"
    for result in (scaled, unscaled):
        # clipping the scaled gradients, then unscaling, would leave a norm of clip / 2**15
        assert float(np.linalg.norm(_update(result))) / rate == pytest.approx(clip, rel=1e-3)
    assert relative_l2(_update(scaled), _update(unscaled)) <= 1e-2


@slow
@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
@pytest.mark.parametrize("model", ["vit", "gpt"])
def test_amp_trains_a_tiny_transformer_with_float32_normalization_and_softmax(probe: Any, model: str,
                                                                               precision: str) -> None:
    result = probe(model, TRANSFORMERS[model], precision, steps=3, inspect="jax_token_dtypes:of_jax")
    assert len(result.losses) == 3 and all(np.isfinite(result.losses)), result.losses
    compute = "bfloat16" if precision == "amp_bf16" else "float16"
    assert result.applied["compute_dtype"] == compute
    dtypes = result.dtypes
    # layer_norm: statistics and normalization in float32, its output cast back to the compute dtype, which
    # is what the dense layers after it receive; the reference attention's softmax in float32; logits float32
    assert dtypes["layer_norm_input"] == ["float32"] and dtypes["layer_norm_result"] == ["float32"]
    assert dtypes["dense_input"] == [compute]
    assert dtypes["softmax_input"] == ["float32"]
    assert dtypes["logits"] == ["float32"] and result.logits_before.dtype == np.float32
    fp32 = probe(model, TRANSFORMERS[model], "fp32", steps=3)
    assert relative_error(result.logits_before, fp32.logits_before) <= 5e-2
    if precision == "amp_fp16":  # the fused op cannot compile float16 on a CPU: the note says so
        assert any("attention=fused was asked" in note for note in result.applied["notes"])


@slow
def test_adamw_warmup_cosine_and_clipping_follow_the_float64_reference(probe: Any) -> None:
    """Three fp64 steps of the tiny ViT: each parameter's change equals the kit's float64 AdamW (decay on the
    declared variables only), at the warm-up/cosine rate, on the clipped gradients the backend measured."""
    from amp_suite.testing import assert_optimizer_arithmetic

    result = probe("vit", {**VIT, "weight_decay": 0.5, "learning_rate": 5e-2}, gradient_oracle=True, steps=3)
    assert_optimizer_arithmetic(result, rtol=1e-6)

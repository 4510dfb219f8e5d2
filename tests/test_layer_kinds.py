"""The layer-kind declarations and the NumPy float64 reference of the token kinds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_suite.errors import UsageError
from amp_suite.records import OptimizerSpec
from amp_suite.workloads import reference
from amp_suite.workloads.kinds import FLOAT32_KINDS, KINDS, TOKEN_KINDS, missing_kinds
from amp_suite.workloads.layers import (
    class_token,
    class_token_pool,
    dense,
    multi_head_attention,
    patch_embed,
    position_embedding,
    token_embedding,
    walk,
)
from amp_suite.workloads.workload import (
    forward_flops_per_image,
    init_variables,
    learning_rate_at,
    variable_specs,
    workload_from_config,
)

VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4}
GPT = {"model": "gpt", "width": 8, "depth": 1, "heads": 2, "mlp": 16, "vocab_size": 5, "context": 6}


def test_every_token_kind_is_declared_and_normalizations_are_float32_islands() -> None:
    assert set(TOKEN_KINDS) <= set(KINDS)
    assert set(FLOAT32_KINDS) == {"batch_norm", "layer_norm", "rms_norm"}
    assert missing_kinds(tuple(KINDS)) == []
    assert missing_kinds(("conv2d",))[:2] == ["depthwise_conv2d", "zero_pad"]


def test_vit_shapes_variables_and_flops_follow_the_declarations() -> None:
    w = workload_from_config("t", VIT)
    shapes = {item.layer.name or item.layer.kind: item.output_shape for item in walk(w.layers, w.input_shape)}
    assert shapes["patch"] == (4, 8) and shapes["cls"] == (5, 8) and shapes["pos"] == (5, 8)
    assert shapes["head"] == (3,)
    specs = {v.name: v for v in variable_specs(w)}
    assert specs["pos/table"].shape == (5, 8) and specs["block1_attn/qkv_w"].shape == (8, 24)
    assert specs["block1_attn/qkv_w"].decay and not specs["block1_attn/qkv_b"].decay
    assert not specs["pos/table"].decay and not specs["block1_ln1/scale"].decay and specs["head/w"].decay
    t, f = 5, 8
    attention = 2 * t * f * 3 * f + 4 * t * t * f + 2 * t * f * f
    expected = 2 * 4 * 16 * 8 + attention + 2 * t * f * 16 + 2 * t * 16 * f + 2 * f * 3
    assert forward_flops_per_image(w) == expected


def test_gpt_takes_token_ids_and_gives_one_logit_row_per_token() -> None:
    w = workload_from_config("g", GPT)
    assert w.tokens and w.input_shape == (6,)
    assert walk(w.layers, w.input_shape)[-1].output_shape == (6, 5)
    assert all(layer.causal for layer in _attention_layers(w.layers))


def _attention_layers(layers):  # type: ignore[no-untyped-def]
    from amp_suite.workloads.layers import iter_layers

    return [layer for layer in iter_layers(layers) if layer.kind == "multi_head_attention"]


@pytest.mark.parametrize(("change", "message"), [
    ({"heads": 3}, "a width of 8 does not split into 3 heads; allowed heads: 1, 2, 4, 8"),
    ({"patch": 3}, "a patch of 3 does not divide the 8x8 image; allowed: 1, 2, 4, 8"),
    ({"vocab_size": 5}, "vocab_size does not apply to model 'vit'"),
])
def test_bad_transformer_tables_are_refused_in_one_line_naming_the_workload(change, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="\\[workloads.bad\\]") as info:
        workload_from_config("bad", {**VIT, **change})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_normal_init_has_the_declared_spread_and_embeddings_use_it() -> None:
    w = workload_from_config("g", {**GPT, "vocab_size": 400, "width": 64})
    params, _ = init_variables(w, 0)
    assert abs(float(params["embed/table"].std()) - 0.02) < 0.002
    assert float(np.abs(params["block1_attn/qkv_b"]).max()) == 0.0


def test_warmup_cosine_rises_linearly_then_decays_to_zero() -> None:
    spec = OptimizerSpec("adamw", 1.0, schedule="warmup_cosine", warmup_steps=4, decay_steps=12)
    rates = [learning_rate_at(spec, s) for s in range(14)]
    assert rates[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert rates[8] == pytest.approx(0.5) and rates[12] == pytest.approx(0.0) and rates[13] == pytest.approx(0.0)
    assert learning_rate_at(OptimizerSpec("adamw", 1.0, schedule="warmup_cosine", warmup_steps=10,
                                          decay_steps=5), 20) == 1.0


# --- the NumPy reference, against formulas written independently ---------------------------------------


def test_patch_embed_is_the_strided_convolution_in_row_major_token_order() -> None:
    rng = np.random.default_rng(0)
    images, w, b = rng.normal(size=(2, 4, 6, 3)), rng.normal(size=(2, 2, 3, 5)), rng.normal(size=5)
    out = reference.patch_embed(images, w, b)
    assert out.shape == (2, 6, 5)
    for i in range(2):
        for j in range(3):
            patch = images[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :]
            expected = np.einsum("nhwc,hwcf->nf", patch, w) + b
            np.testing.assert_allclose(out[:, i * 3 + j], expected, rtol=1e-12)


def test_attention_matches_a_loop_over_heads_and_the_causal_mask_hides_the_future() -> None:
    rng = np.random.default_rng(1)
    n, t, f, heads = 2, 5, 6, 3
    x = rng.normal(size=(n, t, f))
    qkv_w, qkv_b, out_w, out_b = (rng.normal(size=s) for s in ((f, 3 * f), (3 * f,), (f, f), (f,)))
    qkv = x @ qkv_w + qkv_b
    d = f // heads
    for causal in (False, True):
        joined = np.zeros((n, t, f))
        for h in range(heads):
            q, k, v = (qkv[..., part * f + h * d: part * f + (h + 1) * d] for part in range(3))
            for example in range(n):
                for i in range(t):
                    seen = i + 1 if causal else t
                    scores = np.array([q[example, i] @ k[example, j] / math.sqrt(d) for j in range(seen)])
                    weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
                    joined[example, i, h * d:(h + 1) * d] = weights @ v[example, :seen]
        expected = joined @ out_w + out_b
        np.testing.assert_allclose(reference.attention(x, qkv_w, qkv_b, out_w, out_b, heads, causal), expected,
                                   rtol=1e-10, atol=1e-12)
    changed = x.copy()
    changed[:, -1] += 1.0
    before = reference.attention(x, qkv_w, qkv_b, out_w, out_b, heads, True)
    after = reference.attention(changed, qkv_w, qkv_b, out_w, out_b, heads, True)
    np.testing.assert_array_equal(before[:, :-1], after[:, :-1])


def test_normalizations_and_gelu_have_their_defining_properties() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(3.0, 5.0, size=(2, 4, 16))
    normed = reference.layer_norm(x, np.ones(16), np.zeros(16), 1e-12)
    np.testing.assert_allclose(normed.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(normed.var(-1), 1.0, rtol=1e-9)
    rms = reference.rms_norm(x, np.full(16, 2.0), 1e-12)
    np.testing.assert_allclose(np.sqrt((rms ** 2).mean(-1)), 2.0, rtol=1e-9)
    assert reference.gelu(np.array([0.0]))[0] == 0.0
    # Phi(1) = 0.8413447460685429, so gelu(1) = 0.8413...: the exact form, not the tanh approximation (0.8412).
    assert reference.gelu(np.array([1.0]))[0] == pytest.approx(0.8413447460685429, abs=1e-15)


def test_the_reference_forward_runs_a_whole_vit_and_gpt() -> None:
    for table in (VIT, GPT):
        w = workload_from_config("m", table)
        params, _ = init_variables(w, 0)
        rng = np.random.default_rng(3)
        inputs = (rng.integers(0, 5, size=(2, 6)).astype(np.int32) if w.tokens
                  else rng.random((2, 8, 8, 1)).astype(np.float32))
        logits = reference.forward(w.layers, inputs, params)
        assert logits.shape == ((2, 6, 5) if w.tokens else (2, 3)) and np.isfinite(logits).all()
        labels = rng.integers(0, logits.shape[-1], size=logits.shape[:-1])
        loss = reference.mean_cross_entropy(logits, labels)
        flat = logits.reshape(-1, logits.shape[-1])
        by_hand = np.mean([np.log(np.exp(row).sum()) - row[label] for row, label in zip(flat, labels.reshape(-1),
                                                                                        strict=True)])
        assert loss == pytest.approx(by_hand, rel=1e-12)


def test_token_layers_refuse_image_activations_and_images_refuse_token_layers() -> None:
    with pytest.raises(UsageError, match="needs token activations"):
        walk((class_token("c"),), (8, 8, 1))
    with pytest.raises(UsageError, match="needs token ids"):
        walk((token_embedding("e", 5, 4),), (8, 8, 1))
    with pytest.raises(UsageError, match="needs an image"):
        walk((token_embedding("e", 5, 4), patch_embed("p", 4, 2)), (6,))
    assert walk((patch_embed("p", 4, 2), position_embedding("pos"), multi_head_attention("a", 2),
                 class_token_pool(), dense("d", 3)), (4, 4, 1))[-1].output_shape == (3,)

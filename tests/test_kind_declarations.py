"""Which layer kinds a backend builds: the kit tells it which it lacks, the host refuses cells it cannot build."""

from __future__ import annotations

import pytest

import amp_suite
from amp_suite.cell.kind_check import kinds_used, undeclared_kinds
from amp_suite.config.catalog import find_config, load_config
from amp_suite.plugins.host import PluginHost
from amp_suite.records import FrameworkInfo
from amp_suite.testing import assert_declares_layer_kinds, framework_info, missing_layer_kinds
from amp_suite.testing.conformance import BackendConformance
from amp_suite.workloads.kinds import KINDS, TOKEN_KINDS

BUILT_IN = ("torch", "keras", "jax", "keras@jax", "keras@torch")
IMAGE_KINDS = tuple(kind for kind in KINDS if kind not in TOKEN_KINDS)
PACKAGED = load_config(find_config(None))


def info(kinds: tuple[str, ...]) -> FrameworkInfo:
    return FrameworkInfo(name="mine", display_name="Mine", modules=(), extra="", precisions={},
                         layer_kinds=kinds)


def test_missing_kinds_are_listed_in_vocabulary_order():
    assert missing_layer_kinds(info(tuple(KINDS))) == []
    assert missing_layer_kinds(info(IMAGE_KINDS)) == [kind for kind in KINDS if kind in TOKEN_KINDS]
    assert missing_layer_kinds(info(())) == list(KINDS)


def test_the_kit_names_the_missing_kinds_and_tells_a_silent_backend_to_declare():
    assert_declares_layer_kinds(info(tuple(KINDS)))
    assert_declares_layer_kinds(info(IMAGE_KINDS), lacks=TOKEN_KINDS)
    with pytest.raises(AssertionError, match=r"lacks 2 layer kind\(s\) of the vocabulary: gelu, layer_norm"):
        assert_declares_layer_kinds(info(tuple(k for k in KINDS if k not in ("gelu", "layer_norm"))))
    with pytest.raises(AssertionError, match="declares no layer kinds: set FrameworkInfo.layer_kinds"):
        assert_declares_layer_kinds(info(()))
    with pytest.raises(AssertionError, match="kinds the vocabulary does not have: conv3d"):
        assert_declares_layer_kinds(info((*KINDS, "conv3d")))
    with pytest.raises(AssertionError, match="declares gelu, which the test says it lacks"):
        assert_declares_layer_kinds(info(tuple(KINDS)), lacks=("gelu",))


class BigramConformance(BackendConformance):  # not collected (no Test prefix): its one kind check is called below
    framework = "bigram"
    plugin_modules = ("bigramfw",)


def test_the_conformance_kind_check_reads_the_plugins_declaration(monkeypatch):
    monkeypatch.setenv("BIGRAMFW_KINDS", ",".join(KINDS))
    BigramConformance().test_declares_every_layer_kind()
    monkeypatch.setenv("BIGRAMFW_KINDS", ",".join(k for k in KINDS if k != "multi_head_attention"))
    with pytest.raises(AssertionError, match="lacks 1 layer kind\\(s\\) of the vocabulary: multi_head_attention"):
        BigramConformance().test_declares_every_layer_kind()
    assert framework_info("bigram", ("bigramfw",)).name == "bigram"


@pytest.mark.parametrize("framework", BUILT_IN)
def test_every_built_in_plugin_declares_every_kind(framework):
    frameworks = PluginHost().frameworks()
    assert framework in frameworks
    assert missing_layer_kinds(frameworks[framework]) == []


def test_kinds_used_walks_nested_bodies():
    vit = PACKAGED.workloads["mnist_vit_tiny"]
    used = kinds_used(vit.layers)
    assert {"patch_embed", "class_token", "multi_head_attention", "layer_norm", "gelu", "residual",
            "class_token_pool"} <= set(used)
    assert len(used) == len(set(used))
    assert undeclared_kinds(info(()), vit) == []  # a plugin that declares nothing is not checked
    assert "multi_head_attention" in undeclared_kinds(info(IMAGE_KINDS), vit)
    assert undeclared_kinds(info(IMAGE_KINDS), PACKAGED.workloads["mnist_cnn"]) == []


def test_a_cell_with_a_kind_the_plugin_does_not_build_is_unsupported_before_it_starts(tiny_config, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("BIGRAMFW_KINDS", "dense,residual")
    frame = amp_suite.run(frameworks="bigram", workloads="text_gpt_nano", precisions="fp32", config=tiny_config,
                          plugins=["bigramfw"], steps=4, warmup=1, repeats=1, batch_size=4,
                          out=str(tmp_path / "out"), inline=True)
    (row,) = frame.itertuples()
    assert row.status == "unsupported"
    assert "does not build layer kind(s) token_embedding, position_embedding" in row.error
    assert "multi_head_attention" in row.error and "'text_gpt_nano'" in row.error


def test_the_kit_skips_a_check_whose_workload_a_backend_lacks_and_checks_its_optimizers_on_one_it_builds():
    """A plugin author's trial: a CNN-only backend (no BatchNorm, residual, max_pool) got 8 failures of raw probe
    tracebacks, and its optimizer arithmetic could never be checked (those checks trained resnet8 only)."""

    class CnnOnly(BackendConformance):
        framework = "mine"
        lacks_kinds = ("batch_norm", "global_avg_pool", "residual", "max_pool", *TOKEN_KINDS)

    kit = CnnOnly()
    assert kit._lacked("resnet8", None) == ["batch_norm", "global_avg_pool", "residual"]
    assert kit._lacked("deep_cnn", None) == ["max_pool"]
    assert kit._lacked("mnist_cnn", None) == [] and kit._buildable("resnet8") == "mnist_cnn"
    assert BackendConformance()._buildable("resnet8") == "resnet8"  # a backend that lacks nothing: as before

    class Probe:
        def mktemp(self, name):  # never reached: the skip comes before any probe runs
            raise AssertionError(name)

    get = CnnOnly.probe.__wrapped__(kit, Probe())
    with pytest.raises(pytest.skip.Exception, match=r"mine lacks batch_norm, global_avg_pool, residual \(lacks_kinds\), "
                                                     "which this check's workload resnet8 has"):
        get(workload="resnet8", steps=1)


def test_the_kit_checks_the_gradients_and_trajectory_of_a_backend_without_batch_norm_on_mnist_cnn(monkeypatch):
    """A backend without BatchNorm had no gradient or trajectory check against the reference (both trained resnet8
    or deep_cnn only): both now train mnist_cnn there, and deep_cnn's case, which would repeat it, skips."""

    class CnnOnly(BackendConformance):
        framework = "mine"
        lacks_kinds = ("batch_norm", "global_avg_pool", "residual", "max_pool", *TOKEN_KINDS)

    asked: list[tuple[str | None, str]] = []

    def probe(framework=None, **fields):
        asked.append((framework, fields["workload"]))
        raise _Stop

    class _Stop(Exception):
        pass

    kit = CnnOnly()
    monkeypatch.setattr(CnnOnly, "_reference", lambda self: "torch")
    with pytest.raises(_Stop):
        kit.test_gradients_at_the_canonical_weights_match_the_reference(probe, "resnet8")
    with pytest.raises(_Stop):
        kit.test_a_stable_trajectory_trains_like_the_reference(probe)
    assert asked == [(None, "mnist_cnn"), (None, "mnist_cnn")]
    with pytest.raises(pytest.skip.Exception, match="mine lacks kinds of deep_cnn; its gradients are checked on "
                                                    "mnist_cnn in the resnet8 case"):
        kit.test_gradients_at_the_canonical_weights_match_the_reference(probe, "deep_cnn")

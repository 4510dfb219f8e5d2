"""benchmarks.toml: the shipped file loads, and bad files fail with one clear line."""

from pathlib import Path

import pytest

from amp_suite.config import SweepSettings, load_config, with_overrides
from amp_suite.errors import UsageError
from suite_cli import REPO


def test_shipped_config_declares_both_mnist_sizes():
    config = load_config(REPO / "benchmarks.toml")
    assert config.workloads["mnist_cnn"].input_shape == (28, 28, 1)
    assert config.workloads["mnist_cnn_128"].input_shape == (128, 128, 1)
    assert config.workloads["cifar10_cnn"].input_shape == (32, 32, 3)
    assert config.workloads["mnist_cnn"].batch_size == 128
    assert config.workloads["mnist_cnn"].optimizer.learning_rate == 1e-3
    config.settings.check()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


def test_malformed_toml_names_the_line(tmp_path):
    path = _write(tmp_path, "[defaults]\nsteps = 5\nwarmup = = 2\n")
    with pytest.raises(UsageError, match=r"malformed TOML.*line 3"):
        load_config(path)


@pytest.mark.parametrize("text,needle", [
    ("[defaults]\nstepz = 3\n[workloads.a]\n", "unknown key 'stepz'"),
    ("[defaults]\nsteps = 'many'\n[workloads.a]\n", "steps must be an integer"),
    ("[presets.p]\nsteps = 3\n", "[presets.p]: description is missing"),
    ("[workloads.a]\nmodel = 'resnet9'\n", "unknown model 'resnet9'"),
    ("[workloads.a]\nmodel = 'mnist_cnn'\ninput_size = 2\n", "too small"),
    ("[wrkloads.a]\n", "unknown table 'wrkloads'"),
])
def test_invalid_content_is_one_line(tmp_path, text, needle):
    with pytest.raises(UsageError) as info:
        load_config(_write(tmp_path, text))
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides,needle", [
    ({"warmup": 10, "steps": 10}, "warmup (10) must be smaller than steps per epoch (10)"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"precisions": ("fp32", "fp8")}, "unknown precision 'fp8'; allowed: fp32, tf32, amp_fp16, amp_bf16"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
])
def test_settings_check(overrides, needle):
    with pytest.raises(UsageError) as info:
        with_overrides(SweepSettings(), **overrides).check()
    assert needle in str(info.value)

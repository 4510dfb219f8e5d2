"""benchmarks.toml: the shipped file loads, and bad files fail with one clear line."""

import re
from pathlib import Path

import pytest

from amp_suite.config.catalog import SweepSettings, load_config, with_overrides
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


def test_the_fp64_reference_is_in_no_default_sweep_and_no_preset():
    # fp64 checks arithmetic in tests; a sweep runs it only when asked by name
    from amp_suite.precision import PRECISIONS, REFERENCE_PRECISIONS

    assert set(REFERENCE_PRECISIONS) <= set(PRECISIONS)
    for config in (load_config(None), load_config(REPO / "benchmarks.toml")):
        sweeps = {"[defaults]": config.settings.precisions, "built-in default": SweepSettings().precisions,
                  **{f"[defaults.on_{kind}]": values.get("precisions", ()) for kind, values
                     in config.device_defaults.items()},
                  **{f"preset {name}": preset.settings.get("precisions", ()) for name, preset in config.presets.items()}}
        assert len(sweeps) > 3
        assert not {where: names for where, names in sweeps.items() if set(names) & set(REFERENCE_PRECISIONS)}


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
    ({"precisions": ("fp32", "fp4")}, "unknown precision 'fp4'; allowed: fp32, tf32, amp_fp16, amp_bf16, fp8, fp64"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
])
def test_settings_check(overrides, needle):
    with pytest.raises(UsageError) as info:
        with_overrides(SweepSettings(), **overrides).check()
    assert needle in str(info.value)


# --- [frameworks.NAME]: checked against the options the framework's plugin declares ---------------

def _third_party(**options):
    from amp_suite.records import FrameworkInfo

    return FrameworkInfo(name="mxnet", display_name="MXNet", modules=("mxnet",), extra="", precisions={},
                         options=options)


def test_a_plugins_declared_options_check_its_table(tmp_path):
    from amp_suite.config.catalog import check_framework_tables
    from amp_suite.records import FrameworkOption
    from amp_suite.schema import Field

    hybridize = FrameworkOption(Field(bool), True, "compile the graph")
    workers = FrameworkOption(Field(int, minimum=1, maximum=64), 4, "data-loading threads")
    frameworks = {"mxnet": _third_party(hybridize=hybridize, workers=workers)}
    good = load_config(_write(tmp_path, "[workloads.a]\nmodel = \"mnist_cnn\"\n"
                                        "[frameworks.mxnet]\nhybridize = false\ninitial_loss_scale = 1024\n"))
    assert good.framework_options["mxnet"] == {"hybridize": False, "initial_loss_scale": 1024}  # as written
    checked = check_framework_tables(good, frameworks)
    assert checked.framework_options["mxnet"] == {"hybridize": False, "initial_loss_scale": 1024.0}
    for table, needle in (("hybridise = false", "[frameworks.mxnet]: unknown key 'hybridise' (did you mean "
                                                "'hybridize'?); allowed: hybridize, workers, initial_loss_scale"),
                          ("workers = 0", "[frameworks.mxnet] workers must be >= 1, got 0"),
                          ("hybridize = 1", "[frameworks.mxnet] hybridize must be true or false, got 1")):
        config = load_config(_write(tmp_path, f"[workloads.a]\nmodel = \"mnist_cnn\"\n[frameworks.mxnet]\n{table}\n"))
        with pytest.raises(UsageError, match="^" + re.escape(f"{tmp_path / 'bad.toml'}: {needle}")) as caught:
            check_framework_tables(config, frameworks)
        assert "\n" not in str(caught.value)


def test_a_table_of_a_built_in_framework_whose_plugin_is_not_loaded_is_kept_as_written(tmp_path):
    from amp_suite.config.catalog import check_framework_tables

    config = load_config(_write(tmp_path, "[workloads.a]\nmodel = \"mnist_cnn\"\n[frameworks.torch]\nfused = 3\n"))
    assert check_framework_tables(config, {}).framework_options["torch"] == {"fused": 3}

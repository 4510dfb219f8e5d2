"""Presets: each expands to the cells it documents, the command line wins, and a preset's report puts
the article's published figures beside the ratios measured here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from amp_suite.config.catalog import load_config, with_overrides
from amp_suite.config.presets import expand_preset, fit_device_counts
from amp_suite.errors import UsageError
from amp_suite.sweep.cells import plan_cells
from suite_cli import REPO, TINY_CONFIG, run_cli

FRAMEWORKS = {"torch", "keras", "jax"}
# What docs/presets.md says each preset runs: workload -> batch size, and the settings of every cell.
DOCUMENTED = {
    "keras-tensor-cores": dict(
        workloads={"backbone_vgg16": 8, "backbone_mobilenet": 16, "backbone_resnet50": 16,
                   "backbone_efficientnet_b0": 16},
        precisions={"fp32", "amp_fp16"}, devices={1}, dataset="mnist", train_split="test[:1000]",
        val_split="test[1000:1200]", steps=62, epochs=1),
    "keras-multi-gpu": dict(
        workloads={"mnist_deep_cnn": 128}, precisions={"fp32"}, devices={1, 4}, dataset="mnist",
        train_split="test[:8000]", val_split="test[8000:]", steps=62, epochs=2),
    "pytorch-fp16-cifar": dict(
        workloads={"cifar10_resnet18": 128, "cifar10_resnet50": 512}, precisions={"fp32", "amp_fp16"},
        devices={1}, dataset="cifar10", train_split="train", val_split="test", steps=50, epochs=1),
    "haiku-jmp-mnist": dict(
        workloads={"mnist_cnn": 128, "mnist_cnn_128": 128}, precisions={"fp32", "amp_fp16"}, devices={1},
        dataset="mnist", train_split="test[:8000]", val_split="test[8000:]", steps=62, epochs=1),
}


def planned(name: str, config_path: Path | None = None, **overrides):
    """The cells ``amp-suite run --preset NAME`` plans (nothing runs), and the preset's plan."""
    config = load_config(config_path)
    plan = expand_preset(config, name, overrides)
    settings = with_overrides(plan.settings, **overrides)
    settings.check()
    steps = overrides.get("steps") if overrides.get("steps") is not None else plan.steps
    return plan_cells(config, settings, explicit_steps=steps), plan


@pytest.mark.parametrize("name", list(DOCUMENTED))
def test_each_preset_expands_to_the_cells_it_documents(name):
    documented = DOCUMENTED[name]
    cells, plan = planned(name)
    runs = [cell.run for cell in cells]
    expected = len(FRAMEWORKS) * len(documented["workloads"]) * len(documented["precisions"]) * len(documented["devices"])
    assert len(runs) == expected
    assert {r.framework for r in runs} == FRAMEWORKS  # every preset runs all three frameworks
    assert {r.workload: r.batch_size for r in runs} == documented["workloads"]
    assert {r.precision for r in runs} == documented["precisions"]
    assert {r.devices for r in runs} == documented["devices"]
    for key in ("dataset", "train_split", "val_split", "steps", "epochs"):
        assert {getattr(r, key) for r in runs} == {documented[key]}, key
    assert plan.record["published"]["figures"] and plan.record["notes"]
    assert plan.record["published_name"] == name


def test_the_transformers_preset_runs_each_workload_on_its_own_dataset():
    cells, plan = planned("transformers")
    runs = [cell.run for cell in cells]
    assert {r.framework for r in runs} == FRAMEWORKS
    assert {(r.workload, r.dataset, r.train_split, r.val_split) for r in runs} == {
        ("mnist_vit_tiny", "mnist", "test[:8000]", "test[8000:]"), ("cifar10_vit", "cifar10", "train", "test"),
        ("text_gpt_nano", "text", "train", "validation")}
    assert {r.precision for r in runs} >= {"fp32", "amp_fp16", "amp_bf16"}  # and tf32 where the device has it
    assert len(runs) == len(FRAMEWORKS) * 3 * len({r.precision for r in runs})
    assert {r.synthetic_fallback for r in runs} == {True}  # no CIFAR-10 archive: a stand-in, said so
    assert plan.record["published"] is None and plan.record["notes"]
    # --dataset overrides every workload's own
    config = load_config(None)
    settings = with_overrides(plan.settings, dataset="synthetic")
    overridden = plan_cells(config, settings, explicit_steps=plan.steps, dataset_given=True)
    assert {c.run.dataset for c in overridden} == {"synthetic"}


def test_the_presets_reproduce_the_articles_setups():
    config = load_config(None)
    assert config.workloads["mnist_deep_cnn"].optimizer.name == "rmsprop"
    assert {config.workloads[w].input_size for w in DOCUMENTED["haiku-jmp-mnist"]["workloads"]} == {28, 128}
    cifar = config.presets["pytorch-fp16-cifar"]
    assert cifar.settings["synthetic_fallback"] is True  # no CIFAR-10 archive: runs what it can, says so
    assert config.presets["keras-multi-gpu"].fit_devices
    assert "train[:1000]" in config.presets["keras-tensor-cores"].notes[0]  # the report says what differs
    figures = {(f["workload"], f["metric"]): f for f in config.published["haiku-jmp-mnist"]["figures"]}
    assert (figures["mnist_cnn_128", "epoch_time"]["baseline"], figures["mnist_cnn_128", "epoch_time"]["compared"]) == (8.41, 4.67)
    assert (figures["mnist_cnn_128", "peak_memory"]["baseline"], figures["mnist_cnn_128", "peak_memory"]["compared"]) == (6119, 2023)
    assert (figures["mnist_cnn", "epoch_time"]["baseline"], figures["mnist_cnn", "epoch_time"]["compared"]) == (0.77, 1.01)
    for published in config.published.values():  # every number has its source
        assert published["article"] and published["hardware"]
        assert all(figure["where"] for figure in published["figures"])


def test_every_packaged_preset_is_documented():
    text = (REPO / "docs" / "presets.md").read_text()
    headings = set(re.findall(r"^## `(.+)`$", text, flags=re.M))
    assert set(load_config(None).presets) <= headings


def test_device_counts_fit_the_machine():
    assert fit_device_counts((1, 4), 8, [128]) == (1, 4)
    assert fit_device_counts((1, 4), 2, [128]) == (1, 2)
    assert fit_device_counts((1, 4), 1, [128]) == (1,)
    assert fit_device_counts((1, 4), 3, [128]) == (1, 2)  # 3 does not divide the batch


def test_the_command_line_wins_over_the_preset():
    cells, plan = planned("haiku-jmp-mnist", frameworks=("torch",), steps=3, warmup=1, batch_size=16,
                          precisions=("fp32", "amp_bf16"))
    runs = [cell.run for cell in cells]
    assert {(r.framework, r.steps, r.warmup, r.batch_size) for r in runs} == {("torch", 3, 1, 16)}
    assert {r.precision for r in runs} == {"fp32", "amp_bf16"}
    assert {r.workload for r in runs} == {"mnist_cnn", "mnist_cnn_128"}  # not given: the preset's
    assert plan.record["command_line"]["steps"] == {"preset": 62, "used": 3}
    assert plan.record["command_line"]["batch_size"] == {"preset": 128, "used": 16}
    cells, _ = planned("keras-tensor-cores", workloads=("mnist_cnn",))  # a workload of the command line
    assert {cell.run.workload for cell in cells} == {"mnist_cnn"}


def test_the_command_line_wins_in_a_sweep(tmp_path, clean_fake_env):
    config = tmp_path / "benchmarks.toml"
    config.write_text(TINY_CONFIG.format(out=(tmp_path / "out").as_posix()) + """
[presets.tiny-preset]
description = "the tiny workload, fp32 vs amp_fp16"
frameworks = ["fake"]
workloads = ["tiny"]
precisions = ["fp32", "amp_fp16"]
steps = 6
warmup = 2
batch_size = 4
""")
    done = run_cli("run", "--preset", "tiny-preset", "-p", "fakefw", "--steps", "3", "--warmup", "1",
                   "--precisions", "fp32", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [row] = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert (row["precision"], row["config"]["steps"], row["config"]["warmup"], row["config"]["batch_size"]) == \
        ("fp32", 3, 1, 4)
    environment = json.loads((tmp_path / "out" / "environment.json").read_text())
    assert environment["preset"]["name"] == "tiny-preset"
    assert environment["preset"]["source"] == str(config)
    assert environment["preset"]["command_line"]["steps"] == {"preset": 6, "used": 3}
    assert "- preset: tiny-preset" in (tmp_path / "out" / "report.md").read_text()


def test_an_unknown_preset_is_one_line_naming_the_closest(tmp_path):
    done = run_cli("run", "--preset", "keras-tensor-core", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("amp-suite: error: unknown preset 'keras-tensor-core'")
    assert "(did you mean 'keras-tensor-cores'?)" in line
    assert not (tmp_path / "amp-suite-results").exists()


@pytest.mark.parametrize("table,needle", [
    ("steps = 3\n", "[presets.p]: description is missing"),
    ('description = "d"\nstepz = 3\n', "unknown key 'stepz' (did you mean 'steps'?)"),
    ('description = "d"\nsteps = 0\n', "steps must be >= 1"),
    ('description = "d"\nprecisions = ["fp4"]\n', "unknown precision 'fp4'"),
    ('description = "d"\npublished = "haiku-jmp"\n', "names published figures 'haiku-jmp' that no [published.NAME]"),
    ('description = "d"\nnnodes = 2\n', "unknown key 'nnodes'"),
])
def test_a_bad_preset_table_is_one_line_naming_its_file(tmp_path, table, needle):
    path = tmp_path / "benchmarks.toml"
    path.write_text("[presets.p]\n" + table)
    with pytest.raises(UsageError) as info:
        load_config(path)
    assert needle in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_preset_naming_an_undeclared_workload_is_refused_when_used():
    config = load_config(None)
    broken = {**config.presets}
    from dataclasses import replace

    broken["haiku-jmp-mnist"] = replace(broken["haiku-jmp-mnist"],
                                        settings={**broken["haiku-jmp-mnist"].settings, "workloads": ("mnist_cn",)})
    with pytest.raises(UsageError, match="names workload 'mnist_cn', which no catalog file or benchmarks.toml "
                                         "declares \\(did you mean 'mnist_cnn'\\?\\)"):
        expand_preset(replace(config, presets=broken), "haiku-jmp-mnist")


@pytest.mark.slow  # a real framework
def test_a_preset_runs_end_to_end_and_its_report_puts_the_article_beside_the_measurement(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    done = run_cli("run", "--preset", "haiku-jmp-mnist", "--frameworks", "torch", "--workloads", "mnist_cnn",
                   "--steps", "3", "--warmup", "1", "--batch-size", "16", "--val-split", "test[8000:8064]",
                   "--out", str(out), "-q", cwd=tmp_path)  # no benchmarks.toml here: the packaged catalog
    assert done.returncode == 0, done.stderr[-3000:]
    report = (out / "report.md").read_text()
    section = report.split("## Published beside measured: JAX with dm-haiku and jmp", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| mnist_cnn")]
    assert len(rows) == 4  # mnist_cnn: time and memory for torch; mnist_cnn_128: not run in this sweep
    time_row = next(r for r in rows if "time per epoch" in r and "| mnist_cnn " in r)
    assert "fp32 0.77 → amp_fp16 1.01 s/epoch" in time_row and "| 1.31 " in time_row
    assert "NVIDIA RTX 2080 Ti" in time_row and "| torch " in time_row
    measured = [c.strip() for c in time_row.split("|")[1:-1]][7]
    assert float(measured) > 0  # the ratio measured here
    assert "fp32 8.41 → amp_fp16 4.67 s/epoch" in section and "fp32 6,119 → amp_fp16 2,023 MB" in section
    assert "not run in this sweep" in section
    assert "### What differs here from the article" in section and "60,000 training images" in section
    assert "Command line: frameworks torch (the preset: torch, keras, jax)" in section
    (out / "report.md").unlink()
    again = run_cli("report", str(out), cwd=tmp_path)  # the preset travels in environment.json
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").read_text() == report


def test_a_fit_devices_preset_runs_what_the_machine_offers_and_says_so(monkeypatch):
    import amp_suite.launchers
    from amp_suite.sweep.resolve import _fit_preset_devices

    monkeypatch.setattr(amp_suite.launchers, "visible_devices", lambda device: 2)
    config = load_config(None)
    plan = expand_preset(config, "keras-multi-gpu")
    settings = _fit_preset_devices(config, plan.settings, plan.record)
    assert settings.devices == (1, 2)
    [note] = plan.record["adjusted"]
    assert note.startswith("devices 1, 4 asked; this machine offers 2") and note.endswith("ran 1, 2")

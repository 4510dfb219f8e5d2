"""A workload names its own dataset: one sweep mixes MNIST, CIFAR-10 and text; --dataset still overrides all."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

import amp_suite
from amp_suite.config.catalog import find_config, load_config, with_overrides
from amp_suite.config.workload_datasets import dataset_choice
from amp_suite.datasets import text
from amp_suite.errors import PluginError, UsageError
from amp_suite.sweep.cells import plan_cells
from suite_cli import run_cli, tiny_config_file

PACKAGED = load_config(find_config(None))
MIXED = ("mnist_cnn", "mnist_vit_tiny", "cifar10_vit", "text_gpt_nano")


def _settings(**values):
    return with_overrides(PACKAGED.settings, **{"workloads": MIXED, "frameworks": ("torch",),
                                                 "precisions": ("fp32",), "repeats": 1, **values})


def test_each_workload_trains_on_its_own_dataset_with_that_datasets_splits():
    cells = plan_cells(PACKAGED, _settings(), explicit_steps=6)
    data = {c.run.workload: (c.run.dataset, c.run.train_split, c.run.val_split) for c in cells}
    assert data == {
        "mnist_cnn": ("mnist", "test[:8000]", "test[8000:]"),  # names none: the sweep's, as before
        "mnist_vit_tiny": ("mnist", "test[:8000]", "test[8000:]"),  # the sweep's dataset: the sweep's splits
        "cifar10_vit": ("cifar10", "train", "test"),
        "text_gpt_nano": ("text", "train", "validation"),
    }


def test_the_users_dataset_overrides_every_workloads():
    cells = plan_cells(PACKAGED, _settings(dataset="synthetic", train_split="train", val_split="test"),
                       explicit_steps=6, dataset_given=True)
    assert {(c.run.dataset, c.run.train_split, c.run.val_split) for c in cells} == {("synthetic", "train", "test")}
    choice = dataset_choice(_settings(dataset="synthetic"), PACKAGED.workloads["text_gpt_nano"], dataset_given=True)
    assert choice.source == "--dataset"
    assert dataset_choice(_settings(), PACKAGED.workloads["mnist_cnn"]).source == "sweep"
    assert dataset_choice(_settings(), PACKAGED.workloads["text_gpt_nano"]).source == "workload"


def test_an_unknown_workload_dataset_is_refused_in_one_line():
    workload = replace(PACKAGED.workloads["mnist_cnn"], name="odd", dataset="imagenett")
    with pytest.raises(UsageError) as caught:
        dataset_choice(_settings(), workload)
    message = str(caught.value)
    assert "workload 'odd' names dataset 'imagenett'" in message and "mnist, cifar10, text" in message
    assert "\n" not in message


def test_run_refuses_an_unknown_workload_dataset_before_any_cell(tmp_path):
    config = tiny_config_file(tmp_path, '\n[workloads.odd]\nmodel = "mnist_cnn"\ninput_size = 8\n'
                                        'dataset = "mnistt"\n')
    done = run_cli("run", "--config", str(config), "--workloads", "odd", "--plugin", "fakefw")
    assert done.returncode == 2
    assert "workload 'odd' names dataset 'mnistt'" in done.stderr and "did you mean 'mnist'" in done.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_gpt_context_longer_than_the_validation_split_is_refused_before_any_cell(tmp_path):
    config = tiny_config_file(tmp_path, '\n[workloads.long_gpt]\nmodel = "gpt"\ndataset = "text"\n'
                                        'vocab_size = 70\ncontext = 60000\nwidth = 8\ndepth = 1\nheads = 2\n'
                                        'mlp = 8\nbatch_size = 2\n')
    done = run_cli("run", "--config", str(config), "--workloads", "long_gpt", "--plugin", "fakefw")
    assert done.returncode == 2
    assert "workload 'long_gpt': context 60000 is longer" in done.stderr
    assert "context <= 58380" in done.stderr


def test_list_says_which_dataset_each_workload_uses():
    done = run_cli("list")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert "dataset text" in lines["text_gpt_nano"] and "context 128" in lines["text_gpt_nano"]
    assert "dataset cifar10" in lines["cifar10_vit"]
    assert "the sweep's dataset" in lines["mnist_cnn"]
    assert "text" in done.stdout.split("datasets:")[1]


@pytest.mark.usefixtures("report_charts")
def test_a_sweep_mixes_an_image_and_a_text_workload_and_reports_token_figures(tiny_config, tmp_path,
                                                                              clean_fake_env):
    out = tmp_path / "mixed"
    frame = amp_suite.run(frameworks="fake,bigram", workloads="tiny,text_gpt_nano", precisions="fp32",
                          config=tiny_config, plugins=["fakefw", "bigramfw"], steps=8, warmup=1, repeats=1,
                          batch_size=8, out=str(out), inline=True)
    rows = {(r.workload, r.framework): r for r in frame.itertuples()}
    assert rows[("tiny", "fake")].status == "ok" and rows[("tiny", "fake")].dataset == "synthetic"
    assert rows[("text_gpt_nano", "bigram")].status == "ok"
    assert rows[("tiny", "bigram")].status == "unsupported"  # one cell refused, the sweep goes on
    gpt = rows[("text_gpt_nano", "bigram")]
    assert gpt.dataset == "text"
    assert gpt.tokens_per_s == pytest.approx(gpt.throughput * 128)
    assert gpt.val_bits_per_char == pytest.approx(gpt.val_loss / math.log(2))
    assert gpt.unigram_bits_per_char == pytest.approx(text.UNIGRAM_BITS_PER_CHAR, abs=0.01)
    # a bigram model learns character statistics: under the unigram baseline after 8 steps
    assert gpt.val_bits_per_char < gpt.unigram_bits_per_char
    stored = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    token_cell = next(r for r in stored if r["workload"] == "text_gpt_nano" and r["framework"] == "bigram")
    assert token_cell["config"]["val_split"] == "validation"
    assert token_cell["metrics"]["val_tokens"] == token_cell["metrics"]["val_examples"] * 128
    environment = json.loads((out / "environment.json").read_text())
    assert environment["workload_datasets"]["text_gpt_nano"]["dataset"] == "text"
    report = (out / "report.md").read_text()
    assert "text_gpt_nano: text" in report and "tiny: synthetic" in report
    assert "## Token workloads" in report and "tokens/s" in report
    assert f"{text.UNIGRAM_BITS_PER_CHAR:.3f}" in report.split("## Token workloads")[1]
    # a trial saw the GPT in images/s, and its token figures listed as if a plugin had added them
    assert "## Throughput, images/s (samples/s for a token workload)" in report
    added = report.split("## Figures added by plugins")[1].split("\n## ")[0]
    assert "fake_kernel" in added and "tokens_per_s" not in added and "val_bits_per_char" not in added
    html = (out / "report.html").read_text()
    assert ">images/s (samples/s for a token workload)<" in html


def test_compare_judges_token_figures():
    from amp_suite.comparison import compare_results
    from amp_suite.records import CellResult

    def cell(repeat, bits, tokens):
        return CellResult(key=f"bigram/text_gpt_nano/fp32/r{repeat}", framework="bigram", workload="text_gpt_nano",
                          precision="fp32", repeat=repeat, status="ok", config={"dataset": "text"},
                          metrics={"throughput": tokens / 128, "tokens_per_s": tokens, "val_bits_per_char": bits,
                                   "val_accuracy": 0.3})

    base = [cell(0, 2.00, 1000.0), cell(1, 2.01, 1010.0)]
    new = [cell(0, 1.50, 1000.0), cell(1, 1.51, 1012.0)]
    frame = compare_results(base, new)
    bits = frame[frame["metric"] == "val_bits_per_char"].iloc[0]
    assert bits["ratio"] == pytest.approx(1.505 / 2.005, rel=1e-3) and bits["verdict"] == "fewer bits"
    tokens = frame[frame["metric"] == "tokens_per_s"].iloc[0]
    assert tokens["verdict"] == "no measurable difference"


def test_the_learning_benchmark_prints_the_gpt_against_its_baseline(tmp_path, capsys, monkeypatch):
    import importlib.util

    from suite_cli import REPO

    spec = importlib.util.spec_from_file_location("transformers_learning",
                                                  REPO / "benchmarks" / "transformers_learning.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    monkeypatch.chdir(tmp_path)  # the packaged catalog, whatever benchmarks.toml the checkout has
    assert benchmark.main(["--frameworks", "bigram", "--precisions", "fp32", "--models", "gpt", "--gpt-steps", "6",
                           "--gpt-epochs", "1", "--warmup", "1", "--device", "cpu", "--plugin", "bigramfw",
                           "--inline", "--out", str(tmp_path / "learning")]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| bigram"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:3] == ["bigram", "fp32", "not run"]
    bits, baseline, below = float(cells[3]), float(cells[4]), float(cells[5])
    assert baseline == pytest.approx(text.UNIGRAM_BITS_PER_CHAR, abs=0.01)
    assert below == pytest.approx(baseline - bits, abs=2e-3) and below > 0


def test_stored_token_figures_are_checked_like_the_others():
    from amp_suite.stored_values import metric_problem

    assert metric_problem("tokens_per_s", "lots") == "not a number: 'lots'"
    assert metric_problem("val_bits_per_char", -1.0) == "impossible value -1.0 (it cannot be negative)"
    assert metric_problem("unigram_bits_per_char", "inf") is None  # a baseline can be infinite
    assert metric_problem("tokens_per_s", 12_345.0) is None


def test_validation_of_a_token_workload_runs_over_every_token_and_keeps_ids_int32():
    import numpy as np

    from amp_suite.cell.worker import token_figures, validate
    from amp_suite.datasets import Dataset, input_pipeline
    from amp_suite.records import RunSpec

    workload = PACKAGED.workloads["text_gpt_nano"]
    ids = np.array([[0, 1, 2], [2, 1, 0], [1, 1, 1]], dtype=np.int32)
    labels = np.array([[1, 2, 0], [1, 0, 0], [1, 2, 2]], dtype=np.int32)
    table = np.log(np.array([[0.1, 0.7, 0.2], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]]))  # next-token probabilities

    class Host:
        def predict(self, run, model, images, training=False):
            assert images.dtype == np.int32
            return table[images].astype(np.float32)

        def implementer(self, hook_name):
            return "bigram_plugin"

    data = Dataset("text", ids, labels, ids, labels)
    pipeline = input_pipeline(workload, data, batch_size=2, steps=1, seed=0)
    figures = validate(Host(), RunSpec("bigram", "text_gpt_nano", "fp32"), None, pipeline, batch_size=2, outputs=3)
    probs = np.exp(table)[ids]
    expected_loss = float(-np.log(np.take_along_axis(probs, labels[..., None], axis=-1)).mean())
    assert figures["val_examples"] == 3
    assert figures["val_accuracy"] == pytest.approx(float((probs.argmax(-1) == labels).mean()))
    assert figures["val_loss"] == pytest.approx(expected_loss, rel=1e-6)
    with pytest.raises(PluginError, match=r"predict returned logits of shape \(2, 3, 3\) for labels of shape "
                                          r"\(2, 3\); expected \(2, 3, 4\) \(4 tokens of vocabulary of text_gpt_nano\)"):
        validate(Host(), RunSpec("bigram", "text_gpt_nano", "fp32"), None, pipeline, batch_size=2, outputs=4)
    tokens = token_figures(workload, {"throughput": 10.0, **figures}, 4.7, labels.size)
    assert tokens["tokens_per_s"] == 10.0 * 128 and tokens["val_tokens"] == 9
    assert tokens["val_bits_per_char"] == pytest.approx(expected_loss / math.log(2), rel=1e-6)
    assert token_figures(PACKAGED.workloads["mnist_cnn"], {"throughput": 1.0}, None, 1) == {}


def test_a_given_dataset_whose_splits_the_sweep_does_not_name_takes_its_own():
    from amp_suite.config.workload_datasets import splits_for_given_dataset

    packaged = _settings(dataset="text")  # the packaged splits test[:8000] / test[8000:] are MNIST's
    fitted, note = splits_for_given_dataset(packaged, {"dataset": "text"})
    assert (fitted.train_split, fitted.val_split) == ("train", "validation")
    assert "--dataset text" in note and "test[:8000]" in note
    # splits that the dataset has, or splits the user gave, stay as they are
    cifar = _settings(dataset="cifar10")
    assert splits_for_given_dataset(cifar, {"dataset": "cifar10"}) == (cifar, "")
    assert splits_for_given_dataset(packaged, {"dataset": "text", "train_split": "test"}) == (packaged, "")
    assert splits_for_given_dataset(packaged, {}) == (packaged, "")


def test_a_token_cells_progress_line_gives_tokens_per_second_and_bits_per_char():
    from amp_suite.progress import _result_text
    from amp_suite.records import CellResult

    cell = CellResult(key="k", framework="bigram", workload="text_gpt_nano", precision="fp32", repeat=0,
                      status="ok", config={"dataset": "text"},
                      metrics={"throughput": 10.0, "tokens_per_s": 1280.0, "val_bits_per_char": 3.25,
                               "val_accuracy": 0.31})
    line = _result_text("text_gpt_nano bigram fp32 r0", cell)
    assert "1,280 tokens/s" in line and "3.250 bits/char" in line and "next-token acc 0.310" in line


@pytest.mark.parametrize("width", [11, 5])
def test_logits_of_another_number_of_classes_are_a_plugin_error_not_a_loss(width):
    """A plugin author's trial: 11 logits for 10 classes gave an ok cell with another validation loss, and 5 a raw
    IndexError from deep inside validation."""
    import numpy as np

    from amp_suite.cell.worker import validate
    from amp_suite.datasets import Dataset, input_pipeline
    from amp_suite.records import RunSpec

    workload = PACKAGED.workloads["mnist_cnn"]
    images = np.zeros((4, 28, 28, 1), dtype=np.float32)
    labels = np.array([9, 1, 2, 3], dtype=np.int32)

    class Host:
        def predict(self, run, model, images, training=False):
            return np.zeros((len(images), width), dtype=np.float32)

        def implementer(self, hook_name):
            return "numpy_backend"

    pipeline = input_pipeline(workload, Dataset("mnist", images, labels, images, labels), batch_size=4, steps=1,
                              seed=0)
    with pytest.raises(PluginError, match=rf"plugin 'numpy_backend': predict returned logits of shape \(4, {width}\) for labels of shape "
                                          r"\(4,\); expected \(4, 10\) \(10 classes of mnist_cnn\)"):
        validate(Host(), RunSpec("fake", "mnist_cnn", "fp32"), None, pipeline, batch_size=4,
                 outputs=workload.outputs)

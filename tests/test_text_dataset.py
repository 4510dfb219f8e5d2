"""The shipped text dataset: provenance, vocabulary, the 90/10 split by position, windows, the unigram baseline."""

from __future__ import annotations

import gzip
import hashlib
import math

import numpy as np
import pytest

from amp_suite.config.catalog import find_config, load_config
from amp_suite.datasets import DATASETS, check_request, input_pipeline, load_dataset, text
from amp_suite.errors import UsageError
from amp_suite.workloads.workload import workload_from_config

GPT = {"model": "gpt", "dataset": "text", "vocab_size": 70, "context": 16, "width": 8, "depth": 1, "heads": 2,
       "mlp": 8, "batch_size": 4, "optimizer": "adamw"}


def gpt(**changes):
    return workload_from_config("tiny_gpt", {**GPT, **changes})


def test_the_shipped_text_is_large_ascii_and_its_readme_names_the_package_and_source():
    raw = text.TEXT_FILE.read_bytes()
    data = gzip.decompress(raw)
    assert len(data) >= 500_000 and len(data) == text.TEXT_CHARS
    assert hashlib.sha256(data).hexdigest() == text.TEXT_SHA256
    assert data.isascii()
    readme = (text.TEXT_FILE.parent / "README.md").read_text()
    for needed in ("`shakespeare` 0.6", "Project Gutenberg", "public domain", hashlib.sha256(raw).hexdigest()):
        assert needed in readme, needed


def test_vocabulary_is_the_sorted_distinct_characters_of_the_whole_text():
    whole = text.read_text()
    assert text.VOCABULARY == "".join(sorted(set(whole)))
    assert text.VOCAB_SIZE == 70
    assert text.decode(text.encode(whole[:500])) == whole[:500]
    with pytest.raises(UsageError, match="not in the text's vocabulary"):
        text.encode("caf\u00e9")


def test_split_is_ninety_ten_by_position():
    splits = text.text_splits()
    whole = text.encode(text.read_text())
    assert splits.train.size + splits.validation.size == whole.size
    assert splits.train.size == round(0.9 * whole.size) == text.SPLIT_CHARS["train"]
    assert splits.validation.size == text.SPLIT_CHARS["validation"]
    assert np.array_equal(splits.train, whole[:splits.train.size])  # by position: no shuffling
    assert np.array_equal(splits.validation, whole[splits.train.size:])


def test_windows_do_not_overlap_and_label_the_next_character():
    ids = np.arange(50, dtype=np.int32)
    inputs, labels = text.windows(ids, 16)
    assert inputs.shape == labels.shape == (3, 16) and inputs.dtype == labels.dtype == np.int32
    assert inputs[1].tolist() == list(range(16, 32))
    assert labels[1].tolist() == list(range(17, 33))
    assert text.window_count("validation", 128) == (text.SPLIT_CHARS["validation"] - 1) // 128


def test_unigram_baseline_is_computed_from_training_frequencies():
    splits = text.text_splits()
    assert not set(np.unique(splits.validation)) - set(np.unique(splits.train))
    measured = text.unigram_bits_per_char(splits.train, splits.validation)
    assert measured == pytest.approx(text.UNIGRAM_BITS_PER_CHAR, abs=1e-4)
    # Against a hand-computed case: frequencies 3/4 and 1/4, validation "0 1".
    assert text.unigram_bits_per_char(np.array([0, 0, 0, 1]), np.array([0, 1]), 2) == pytest.approx(
        (-math.log2(0.75) - math.log2(0.25)) / 2)
    assert text.unigram_bits_per_char(np.array([0, 0]), np.array([1]), 2) == math.inf


def test_load_dataset_gives_int32_windows_and_the_baseline():
    workload = gpt()
    data = load_dataset("text", workload, steps=3, batch_size=4, seed=0, train_split="train",
                        val_split="validation")
    assert data.name == "text" and "text" in DATASETS
    assert data.train_images.dtype == np.int32 and data.train_images.shape[1:] == (16,)
    assert data.train_images.shape[0] == (text.SPLIT_CHARS["train"] - 1) // 16
    assert np.array_equal(data.train_labels[:, :-1], data.train_images[:, 1:])
    assert data.baseline_bits_per_char == pytest.approx(text.UNIGRAM_BITS_PER_CHAR, abs=0.01)
    assert "unigram baseline" in data.note and "70" in data.note
    half = load_dataset("text", workload, steps=3, batch_size=4, seed=0, train_split="train[:50%]",
                        val_split="validation[-10:]")
    assert half.train_images.shape[0] == round(data.train_images.shape[0] / 2)
    assert np.array_equal(half.val_images, data.val_images[-10:])


def test_pipeline_batches_keep_token_ids_int32():
    workload = gpt()
    data = load_dataset("text", workload, steps=3, batch_size=4, seed=0, train_split="train",
                        val_split="validation")
    pipeline = input_pipeline(workload, data, batch_size=4, steps=3, seed=0)
    batch = pipeline.batches(0, 0, 1)[0]
    assert batch.images.dtype == np.int32 and batch.images.shape == (4, 16)
    assert batch.labels.dtype == np.int32 and batch.labels.shape == (4, 16)
    assert pipeline.eval_images(data.val_images[:2]).dtype == np.int32


def test_catalog_gpt_fits_the_text():
    workload = load_config(find_config(None)).workloads["text_gpt_nano"]
    assert workload.dataset == "text" and workload.transformer is not None
    assert workload.transformer.vocab_size == text.VOCAB_SIZE and workload.transformer.context == 128
    assert (workload.transformer.width, workload.transformer.depth, workload.transformer.heads,
            workload.transformer.mlp) == (128, 4, 4, 512)
    assert workload.optimizer.name == "adamw" and workload.optimizer.schedule == "warmup_cosine"
    assert workload.optimizer.clip_norm == 1.0
    check_request("text", workload, "train", "validation", batch_size=workload.batch_size)


@pytest.mark.parametrize(("changes", "message"), [
    ({"vocab_size": 65}, r"workload 'tiny_gpt': vocab_size 65 is smaller than the 70 characters.*vocab_size >= 70"),
    ({"context": 60_000, "width": 8}, r"workload 'tiny_gpt': context 60000 is longer.*context <= 58380"),
])
def test_a_workload_the_text_cannot_feed_is_refused_in_one_line(changes, message):
    with pytest.raises(UsageError, match=message) as caught:
        check_request("text", gpt(**changes), "train", "validation")
    assert "\n" not in str(caught.value)


def test_images_on_text_and_tokens_on_images_are_refused():
    cnn = workload_from_config("cnn", {"model": "mnist_cnn"})
    with pytest.raises(UsageError, match="dataset text holds character windows, but workload 'cnn'"):
        check_request("text", cnn, "train", "validation")
    with pytest.raises(UsageError, match="workload 'tiny_gpt' takes token ids, but dataset mnist holds images"):
        check_request("mnist", gpt(), "test[:8000]", "test[8000:]")


def test_text_splits_are_its_own():
    with pytest.raises(UsageError, match="unknown split 'test'.*allowed: train, validation"):
        check_request("text", gpt(), "test[:8000]", "validation")
    with pytest.raises(UsageError, match="fewer than one batch of 64"):
        check_request("text", gpt(), "train[:10]", "validation", batch_size=64)


def test_a_validation_range_inside_the_training_range_is_refused():
    with pytest.raises(UsageError, match=r"the validation split train\[-10:\] overlaps the training split train "
                                         r"\(10 windows in both\)"):
        load_dataset("text", gpt(), steps=3, batch_size=4, seed=0, train_split="train", val_split="train[-10:]")
    apart = load_dataset("text", gpt(), steps=3, batch_size=4, seed=0, train_split="train[:50%]",
                         val_split="train[50%:]")  # the same split, ranges apart: allowed
    assert apart.val_images.shape[0] > 0

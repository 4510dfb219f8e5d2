"""The dataset record, dataset loading, and the host's batch order."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError
from amp_suite.datasets.preprocess import ImageShaping, to_unit_float
from amp_suite.datasets.splits import Split, parse_split
from amp_suite.errors import UsageError
from amp_suite.records import Batch, Workload

DATASETS = ("synthetic", "mnist", "cifar10", "text")
# Each dataset's training and validation splits where a workload names the dataset itself (``dataset =``)
# and the sweep's splits are another dataset's: MNIST's are those of the shipped test split.
DEFAULT_SPLITS = {"synthetic": ("train", "test"), "mnist": ("test[:8000]", "test[8000:]"),
                  "cifar10": ("train", "test"), "text": ("train", "validation")}
# Validation examples of the synthetic dataset.
SYNTHETIC_VAL_COUNT = 512
# Synthetic validation holds at most this many values (512 images of 64x64x3): its accuracy is reported as
# n/a, so at 224x224x3 (41 images) an ImageNet backbone is not kept validating for minutes on a CPU.
SYNTHETIC_VAL_VALUES = 512 * 64 * 64 * 3


@dataclass(frozen=True)
class Dataset:
    """Training and validation arrays: NHWC float32 in [0, 1] as stored, int32 labels.

    For a token dataset (``text``, or synthetic windows of a token workload)
    the "images" are int32 token ids ``(count, context)`` and the labels the
    next token at each position, the same shape; ``baseline_bits_per_char``
    is then the unigram baseline of the validation split (``None`` elsewhere).

    ``shaping`` is what makes a slice of these images the model's input
    (resize, grey copied to colour channels), applied batch by batch by the
    pipeline; ``None`` when they already are (synthetic data, a dataset at
    the workload's size).  ``note`` says where the data came from;
    ``substituted`` is true when synthetic data stands in for a real dataset
    the config allowed to fall back.
    """

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    val_images: np.ndarray
    val_labels: np.ndarray
    note: str = ""
    substituted: bool = False
    shaping: ImageShaping | None = None
    baseline_bits_per_char: float | None = None

    def model_images(self, images: np.ndarray) -> np.ndarray:
        """A slice of this dataset's images as the model takes them (resized, channels copied)."""
        return images if self.shaping is None else self.shaping.apply(images)


def _module(name: str) -> ModuleType:
    if name == "mnist":
        from amp_suite.datasets import mnist

        return mnist
    if name == "cifar10":
        from amp_suite.datasets import cifar10

        return cifar10
    if name == "text":
        from amp_suite.datasets import text

        return text
    raise UsageError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")


def split_names(name: str) -> tuple[str, ...]:
    """The split names dataset ``name`` has (``()`` for synthetic data, which takes any)."""
    return () if name == "synthetic" else tuple(_module(name).SPLITS)


def check_request(name: str, workload: Workload | None, train_split: str, val_split: str,
                  batch_size: int | None = None) -> None:
    """Validate a dataset request without touching any file (CLI, exit 2).

    Splits are resolved against the official split sizes, so an empty or
    inverted range (``test[9000:100]``, ``test[:0]``) and a training split
    smaller than one batch are refused before any cell runs.
    """
    if name == "synthetic":  # generated from the seed: the split texts select nothing, but are still checked
        for text in (train_split, val_split):
            parse_split(text, None)
        return
    if name == "text":
        _check_text_request(workload, train_split, val_split, batch_size)
        return
    if workload is not None and workload.tokens:
        raise UsageError(f"workload {workload.name!r} takes token ids, but dataset {name} holds images; "
                         "allowed for it: text, synthetic")
    module = _module(name)
    selected = {}
    for role, text in (("training", train_split), ("validation", val_split)):
        split = parse_split(text, module.SPLITS)
        start, stop = split.bounds(module.SPLIT_SIZES[split.name])
        selected[role] = (split, start, stop)
    split, start, stop = selected["training"]
    count = stop - start
    if batch_size is not None and count < batch_size:
        raise UsageError(f"the training split {split} has {count} examples, fewer than one batch of {batch_size}")
    _check_disjoint(selected["training"], selected["validation"], "examples")
    if workload is not None and (not channels_fit(module.CHANNELS, workload.channels)
                                 or workload.num_classes != module.CLASSES):
        raise UsageError(
            f"dataset {name} has {module.CHANNELS}-channel images in {module.CLASSES} classes, but workload "
            f"{workload.name!r} expects {workload.channels} channel(s) and {workload.num_classes} classes"
        )


def _check_disjoint(training: tuple[Split, int, int], validation: tuple[Split, int, int], unit: str) -> None:
    """A one-line error when the validation range shares ``unit`` with the training range: its accuracy would be
    measured on what the model trained on (a trial's test[:8000] / test[:2000] ran without a word)."""
    (train, train_start, train_stop), (val, val_start, val_stop) = training, validation
    shared = min(train_stop, val_stop) - max(train_start, val_start)
    if train.name == val.name and shared > 0:
        raise UsageError(f"the validation split {val} overlaps the training split {train} ({shared} {unit if shared != 1 else unit.removesuffix('s')} in both): "
                         "its accuracy would be measured on data the model trained on; choose ranges apart, e.g. "
                         f"{train.name}[:80%] and {train.name}[80%:]")


def _check_text_request(workload: Workload | None, train_split: str, val_split: str,
                        batch_size: int | None) -> None:
    """The text dataset's checks: the workload fits its vocabulary and splits, the splits hold windows."""
    from amp_suite.datasets import text

    text.check_workload(workload)
    context = workload.transformer.context if workload is not None and workload.transformer is not None else 1
    split, start, stop = text.selected_windows(train_split, context)
    # an empty or malformed validation range fails here
    _check_disjoint((split, start, stop), text.selected_windows(val_split, context), "windows")
    if batch_size is not None and stop - start < batch_size:
        raise UsageError(f"the training split {split} has {stop - start} windows of {context} characters, "
                         f"fewer than one batch of {batch_size}")


def channels_fit(stored: int, wanted: int) -> bool:
    """Whether images of ``stored`` channels can feed a model of ``wanted``: equal, or grey copied to each."""
    return stored == wanted or stored == 1


def fetch(name: str, train_split: str, val_split: str, *, data_dir: str | None, allow_download: bool) -> None:
    """Find or download and verify every file the two splits need (before a sweep starts)."""
    if name in ("synthetic", "text"):  # generated, or shipped and verified when read
        return
    module = _module(name)
    names = dict.fromkeys(parse_split(text, module.SPLITS).name for text in (train_split, val_split))
    for name in names:
        module.locate_split(name, data_dir=data_dir, allow_download=allow_download)


def _synthetic(workload: Workload, steps: int, batch_size: int, seed: int, note: str,
               substituted: bool = False) -> Dataset:
    from amp_suite.datasets.synthetic import make_synthetic

    values = int(np.prod(workload.input_shape))
    val_count = max(16, min(SYNTHETIC_VAL_COUNT, SYNTHETIC_VAL_VALUES // values))
    images, labels = make_synthetic(workload, steps * batch_size + val_count, seed)
    cut = steps * batch_size
    return Dataset("synthetic", images[:cut], labels[:cut], images[cut:], labels[cut:], note=note,
                   substituted=substituted)


def load_dataset(
    name: str, workload: Workload, *, steps: int, batch_size: int, seed: int,
    train_split: str = "train", val_split: str = "test", data_dir: str | None = None,
    allow_download: bool = True, synthetic_fallback: bool = False,
) -> Dataset:
    """Prepare the named dataset in ``workload``'s input shape.

    With ``synthetic_fallback``, a real dataset whose files cannot be had
    (missing and offline) is replaced by synthetic data and the note says so;
    a file that fails its checksum is always an error.
    """
    if name == "synthetic":
        return _synthetic(workload, steps, batch_size, seed, f"synthetic, seed {seed}")
    check_request(name, workload, train_split, val_split)
    if name == "text":
        return _load_text(workload, train_split, val_split)
    module = _module(name)
    try:
        return _load_real(module, name, workload, train_split, val_split, data_dir, allow_download)
    except ChecksumMismatch:
        raise
    except DatasetError as exc:
        if not synthetic_fallback:
            raise
        return _synthetic(workload, steps, batch_size, seed,
                          f"SUBSTITUTED: synthetic data (seed {seed}) stands in for {name}: {exc}",
                          substituted=True)


def _load_real(module: ModuleType, name: str, workload: Workload, train_text: str, val_text: str,
               data_dir: str | None, allow_download: bool) -> Dataset:
    splits: dict[str, Split] = {"train": parse_split(train_text, module.SPLITS),
                                "val": parse_split(val_text, module.SPLITS)}
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    selected = {}
    for role, split in splits.items():
        if split.name not in raw:
            raw[split.name] = module.load_split(split.name, data_dir=data_dir, allow_download=allow_download)
        images, labels = raw[split.name]
        start, stop = split.bounds(int(labels.shape[0]))
        selected[role] = (to_unit_float(images[start:stop]), labels[start:stop].copy())
    shaping = None
    if (workload.input_size, workload.channels) != (module.SIZE, module.CHANNELS):
        shaping = ImageShaping(workload.input_size, workload.channels)
    resized = "" if workload.input_size == module.SIZE else (
        f", resized {module.SIZE}x{module.SIZE} -> {workload.input_size}x{workload.input_size} (bilinear)")
    grey = "" if workload.channels == module.CHANNELS else f", grey copied to {workload.channels} channels"
    note = (f"{name}: train {splits['train']} ({selected['train'][1].size} examples), "
            f"validation {splits['val']} ({selected['val'][1].size} examples){resized}{grey}")
    return Dataset(name, *selected["train"], *selected["val"], note=note, shaping=shaping)


def _load_text(workload: Workload, train_text: str, val_text: str) -> Dataset:
    from amp_suite.datasets import text

    assert workload.transformer is not None  # check_request refused an image workload
    context = workload.transformer.context
    train_inputs, train_labels = text.load_windows(train_text, context)
    val_inputs, val_labels = text.load_windows(val_text, context)
    splits = text.text_splits()
    baseline = text.unigram_bits_per_char(splits.ids(parse_split(train_text, text.SPLITS).name),
                                          val_labels.ravel())
    note = (f"text: Shakespeare's four great tragedies ({text.TEXT_CHARS:,} characters, vocabulary "
            f"{text.VOCAB_SIZE}): training split {train_text} ({train_labels.shape[0]} windows of {context}), "
            f"validation split {val_text} ({val_labels.shape[0]} windows); unigram baseline {baseline:.4f} bits/char")
    return Dataset("text", train_inputs, train_labels, val_inputs, val_labels, note=note,
                   baseline_bits_per_char=baseline)


def epoch_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """The seeded permutation of ``count`` training examples for ``epoch``."""
    return np.random.Generator(np.random.PCG64([seed, epoch, 0xBA7C])).permutation(count)


def epoch_batches(
    images: np.ndarray, labels: np.ndarray, *, batch_size: int, steps: int, seed: int, epoch: int
) -> list[Batch]:
    """The batches of one epoch, in the order every framework sees them.

    The order is a seeded permutation of the training set, reshuffled each
    epoch; a last partial batch is dropped.  At most ``steps`` batches.
    """
    count = int(labels.shape[0])
    if count < batch_size:
        raise UsageError(f"the training split has {count} examples, fewer than one batch of {batch_size}")
    order = epoch_order(count, seed, epoch)
    n_steps = min(steps, count // batch_size)
    batches = []
    for step in range(n_steps):
        idx = order[step * batch_size:(step + 1) * batch_size]
        batches.append(Batch(np.ascontiguousarray(images[idx]), np.ascontiguousarray(labels[idx])))
    return batches

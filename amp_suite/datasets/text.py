"""The character-level text dataset: four Shakespeare tragedies shipped inside the package.

The text (``data/text/``, with its README: source package, Project Gutenberg
files, public-domain status) is read whole, each character mapped to its index
in :data:`VOCABULARY` (the sorted distinct characters of the whole text), and
cut by position: the first 90% is the ``train`` split, the last 10% the
``validation`` split.  An example is a window of ``context`` characters; its
labels are the next character at each position.  Windows do not overlap, so
``(len(split) - 1) // context`` windows come from each split, int32
``(count, context)`` for both inputs and labels.

The unigram baseline is what a model that knows only the training split's
character frequencies scores on the validation split, in bits per character
(:data:`UNIGRAM_BITS_PER_CHAR`); a language model that learns anything
beats it.
"""

from __future__ import annotations

import gzip
import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from amp_suite.datasets.fetch import ChecksumMismatch
from amp_suite.datasets.splits import Split, parse_split
from amp_suite.errors import UsageError
from amp_suite.records import Workload

NAME = "text"
TEXT_FILE = Path(__file__).resolve().parent / "data" / "text" / "shakespeare_tragedies.txt.gz"
# SHA-256 of the uncompressed text (583,814 ASCII characters), checked at every load.
TEXT_SHA256 = "1018043947023fdf7d5c9a92f0da3b639f9cc13d7bf5873cebd4c4804f3fdd40"
TEXT_CHARS = 583_814
# The sorted distinct characters of the whole text: token id i is VOCABULARY[i].
VOCABULARY = "\n !\"&'(),-.12:;?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz"
VOCAB_SIZE = len(VOCABULARY)  # 70
SPLITS = ("train", "validation")
DEFAULT_SPLITS = ("train", "validation")
# The share of the text, from its start, that is the training split; the rest validates.
TRAIN_FRACTION = 0.9
# Characters of each split: the cut is at round(TEXT_CHARS * TRAIN_FRACTION).
SPLIT_CHARS = {"train": 525_433, "validation": 58_381}
# Bits per character of the training split's character frequencies on the validation split.
UNIGRAM_BITS_PER_CHAR = 4.7208


@dataclass(frozen=True)
class TextSplits:
    """The text as token ids, cut into its two splits by position."""

    train: np.ndarray
    validation: np.ndarray

    def ids(self, name: str) -> np.ndarray:
        return self.train if name == "train" else self.validation


@lru_cache(maxsize=1)
def read_text() -> str:
    """The whole shipped text, verified against :data:`TEXT_SHA256`."""
    try:
        data = gzip.decompress(TEXT_FILE.read_bytes())
    except (OSError, EOFError) as exc:
        raise ChecksumMismatch(f"{TEXT_FILE}: cannot be read ({exc}); reinstall amp-suite") from None
    if hashlib.sha256(data).hexdigest() != TEXT_SHA256:
        raise ChecksumMismatch(f"{TEXT_FILE}: its text does not have SHA-256 {TEXT_SHA256}; reinstall amp-suite")
    return data.decode("ascii")


def encode(text: str) -> np.ndarray:
    """int32 token ids of ``text``; a character outside :data:`VOCABULARY` is a one-line error."""
    lookup = np.full(256, -1, dtype=np.int32)
    lookup[np.frombuffer(VOCABULARY.encode("ascii"), dtype=np.uint8)] = np.arange(VOCAB_SIZE, dtype=np.int32)
    raw = np.frombuffer(text.encode("latin-1", errors="replace"), dtype=np.uint8)
    ids = lookup[raw]
    if ids.size and ids.min() < 0:
        bad = text[int(np.argmin(ids))]
        raise UsageError(f"character {bad!r} is not in the text's vocabulary of {VOCAB_SIZE} characters")
    return ids


def decode(ids: np.ndarray) -> str:
    """The characters of token ids (the inverse of :func:`encode`)."""
    return "".join(VOCABULARY[int(i)] for i in np.asarray(ids).ravel())


@lru_cache(maxsize=1)
def text_splits() -> TextSplits:
    """The shipped text's token ids, split 90/10 by position."""
    ids = encode(read_text())
    cut = int(round(ids.size * TRAIN_FRACTION))
    return TextSplits(ids[:cut], ids[cut:])


def windows(ids: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of ``context`` ids and the next id at each position: int32 ``(count, context)``."""
    count = (int(ids.size) - 1) // context
    inputs = ids[:count * context].reshape(count, context)
    labels = ids[1:count * context + 1].reshape(count, context)
    return np.ascontiguousarray(inputs, dtype=np.int32), np.ascontiguousarray(labels, dtype=np.int32)


def window_count(split: str, context: int) -> int:
    """Windows of ``context`` characters the whole ``split`` holds (without reading the text)."""
    return max((SPLIT_CHARS[split] - 1) // context, 0)


def unigram_bits_per_char(train: np.ndarray, validation: np.ndarray, vocab_size: int = VOCAB_SIZE) -> float:
    """Cross-entropy in bits of the validation ids under the training ids' character frequencies.

    Infinite if the validation split holds a character the training split never has.
    """
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64)
    probs = counts / counts.sum()
    seen = probs[validation]
    if (seen == 0).any():
        return math.inf
    return float(-np.log2(seen).mean())


def check_workload(workload: Workload | None) -> None:
    """Refuse, in one line, a workload the text cannot feed: images, a small vocabulary, a long context."""
    if workload is None:
        return
    if not workload.tokens:
        raise UsageError(f"dataset {NAME} holds character windows, but workload {workload.name!r} takes "
                         f"{'x'.join(map(str, workload.input_shape))} images; use dataset mnist, cifar10 or "
                         "synthetic for it")
    assert workload.transformer is not None
    vocab, context = workload.transformer.vocab_size, workload.transformer.context
    if vocab < VOCAB_SIZE:
        raise UsageError(f"workload {workload.name!r}: vocab_size {vocab} is smaller than the {VOCAB_SIZE} "
                         f"characters of dataset {NAME}; allowed: vocab_size >= {VOCAB_SIZE}")
    longest = SPLIT_CHARS["validation"] - 1
    if context > longest:
        raise UsageError(f"workload {workload.name!r}: context {context} is longer than dataset {NAME}'s "
                         f"validation split allows; allowed: context <= {longest}")


def selected_windows(text: str, context: int) -> tuple[Split, int, int]:
    """A split spec's window range ``[start, stop)`` of the whole split (TFDS notation over windows)."""
    split = parse_split(text, SPLITS)
    start, stop = split.bounds(window_count(split.name, context))
    return split, start, stop


def load_windows(text: str, context: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs and labels of split spec ``text`` (``train``, ``validation[:50%]``) at ``context``."""
    split, start, stop = selected_windows(text, context)
    inputs, labels = windows(text_splits().ids(split.name), context)
    return inputs[start:stop], labels[start:stop]

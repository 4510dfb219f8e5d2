"""Which dataset, and which of its splits, each workload of a sweep trains on.

One sweep may mix MNIST, CIFAR-10 and text workloads: a workload that names
its dataset (``dataset = "text"`` in its table) trains on it, whatever the
sweep's ``dataset`` setting; ``--dataset`` (or ``dataset=`` of
:func:`amp_suite.run`) given by the user overrides every workload's.  The
splits are the sweep's (``train_split``/``val_split``) when the workload trains
on the sweep's dataset, else that dataset's defaults
(:data:`amp_suite.datasets.DEFAULT_SPLITS`: the sweep's splits name another
dataset's).  A workload that names no dataset trains on the sweep's, as
before workloads could name one.  ``--dataset`` given without splits whose
names the sweep's splits do not have (``--dataset text`` under the packaged
``test[:8000]``) takes that dataset's default splits
(:func:`splits_for_given_dataset`).  Nothing here reads a file or imports a
framework.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from amp_suite.config.settings import SweepSettings
from amp_suite.errors import UsageError
from amp_suite.records import Workload
from amp_suite.schema import closest, shown


@dataclass(frozen=True)
class DatasetChoice:
    """The dataset and splits of one workload's cells, and why (``source``).

    ``source`` is ``"--dataset"`` (the user's setting overrode the
    workload's), ``"workload"`` (the workload names it) or ``"sweep"`` (the
    workload names none: the sweep's dataset setting).
    """

    dataset: str
    train_split: str
    val_split: str
    source: str

    @property
    def text(self) -> str:
        """``text (train / validation)``: how listings and plans show it."""
        return f"{self.dataset} ({self.train_split} / {self.val_split})"


def dataset_choice(settings: SweepSettings, workload: Workload, *, dataset_given: bool = False) -> DatasetChoice:
    """The dataset and splits ``workload`` trains on in a sweep of ``settings``.

    ``dataset_given``: the user set the dataset for this sweep (``--dataset``),
    which overrides what the workload names.  A workload's dataset that is not
    known is a one-line :class:`UsageError`.
    """
    from amp_suite.datasets import DATASETS, DEFAULT_SPLITS

    if dataset_given or not workload.dataset:
        source = "--dataset" if dataset_given and workload.dataset else "sweep"
        return DatasetChoice(settings.dataset, settings.train_split, settings.val_split, source)
    if workload.dataset not in DATASETS:
        raise UsageError(f"workload {workload.name!r} names dataset {shown(workload.dataset)}; allowed: "
                         f"{', '.join(DATASETS)}" + closest(workload.dataset, list(DATASETS)))
    if workload.dataset == settings.dataset:
        return DatasetChoice(settings.dataset, settings.train_split, settings.val_split, "workload")
    train_split, val_split = DEFAULT_SPLITS[workload.dataset]
    return DatasetChoice(workload.dataset, train_split, val_split, "workload")


def workload_dataset_text(workload: Workload) -> str:
    """What ``amp-suite list`` says of a workload's dataset: its own, or the sweep's."""
    return f"dataset {workload.dataset}" if workload.dataset else "the sweep's dataset"


def splits_for_given_dataset(settings: SweepSettings, overrides: dict[str, Any]) -> tuple[SweepSettings, str]:
    """The settings with the given dataset's default splits where the user gave ``--dataset`` but no split
    and the sweep's splits name splits that dataset lacks; and the line that says so (``""``: unchanged)."""
    from amp_suite.datasets import DATASETS, DEFAULT_SPLITS
    from amp_suite.datasets.base import split_names
    from amp_suite.datasets.splits import parse_split

    given = {key for key in ("dataset", "train_split", "val_split") if overrides.get(key) is not None}
    if given != {"dataset"} or settings.dataset not in DATASETS:
        return settings, ""
    names = split_names(settings.dataset)
    try:
        for text in (settings.train_split, settings.val_split):
            if names:
                parse_split(text, names)
    except UsageError:
        train_split, val_split = DEFAULT_SPLITS[settings.dataset]
        note = (f"--dataset {settings.dataset}: the sweep's splits {settings.train_split} / {settings.val_split} "
                f"are not {settings.dataset}'s; its own {train_split} / {val_split} are used "
                "(--train-split, --val-split choose others)")
        return replace(settings, train_split=train_split, val_split=val_split), note
    return settings, ""

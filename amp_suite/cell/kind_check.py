"""Which layer kinds a workload uses that a framework plugin does not declare it builds.

A plugin declares the kinds of the vocabulary it builds in
``FrameworkInfo.layer_kinds`` (empty: not declared, and nothing is checked).
A cell of a workload with any other kind is ``unsupported`` before its model
is built, the missing kinds named.
"""

from __future__ import annotations

from collections.abc import Iterable

from amp_suite.records import FrameworkInfo, LayerSpec, Workload
from amp_suite.workloads.layers import iter_layers


def kinds_used(layers: Iterable[LayerSpec]) -> list[str]:
    """The kinds of ``layers`` and of every nested body and shortcut, in the order first met."""
    return list(dict.fromkeys(layer.kind for layer in iter_layers(tuple(layers))))


def undeclared_kinds(info: FrameworkInfo, workload: Workload) -> list[str]:
    """The kinds ``workload`` uses that ``info`` does not declare; none when it declares nothing."""
    if not info.layer_kinds:
        return []
    return [kind for kind in kinds_used(workload.layers) if kind not in info.layer_kinds]

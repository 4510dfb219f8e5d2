"""The canonical variables in haiku's trees: names, the depthwise kernel's layout, loading, and AdamW's decay mask."""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.records import (
    Workload,
)
from amp_suite.workloads.layers import iter_layers
from amp_suite.workloads.workload import variable_specs


def _decay_mask(workload: Workload) -> Any:
    """``params -> tree of bools``: AdamW decays the variables the workload declares ``decay``, nothing else."""
    decayed = {spec.name for spec in variable_specs(workload) if spec.decay}

    def mask(params: Any) -> Any:
        return {module: {leaf: _canonical_key(module, leaf) in decayed for leaf in leaves}
                for module, leaves in params.items()}

    return mask


def _canonical_key(module_path: str, leaf: str) -> str:
    return f"{module_path.split('/')[-1]}/{leaf}"


def _depthwise_kernels(workload: Workload) -> set[str]:
    """Canonical names of the depthwise kernels, the one variable whose layout differs from haiku's."""
    return {f"{spec.name}/w" for spec in iter_layers(workload.layers) if spec.kind == "depthwise_conv2d"}


def _to_haiku_layout(key: str, value: np.ndarray, depthwise: set[str]) -> np.ndarray:
    """Canonical depthwise kernel (k, k, c, 1) -> haiku's (k, k, 1, c) (the same memory order); else as is."""
    return value.reshape(*value.shape[:2], 1, value.shape[2]) if key in depthwise else value


def _from_haiku_layout(key: str, value: np.ndarray, depthwise: set[str]) -> np.ndarray:
    return value.reshape(*value.shape[:2], value.shape[3], 1) if key in depthwise else value


def _load_canonical(tree: Any, variables: dict[str, np.ndarray],
                    depthwise: set[str]) -> dict[str, dict[str, np.ndarray]]:
    """Replace haiku's initial values by the canonical ones (same layouts, HWIO, (in, out), NHWC, but depthwise).

    Each value takes the dtype haiku made it in (float64 under fp64: the float32 canonical values cast exactly).
    """
    loaded: dict[str, dict[str, np.ndarray]] = {}
    for module_path, leaves in tree.items():
        loaded[module_path] = {}
        for leaf, value in leaves.items():
            key = _canonical_key(module_path, leaf)
            canonical = _to_haiku_layout(key, variables[key], depthwise)
            if canonical.shape != value.shape:
                raise ValueError(f"{module_path}/{leaf}: canonical shape {canonical.shape} != haiku {value.shape}")
            loaded[module_path][leaf] = np.asarray(canonical, value.dtype)
    return loaded

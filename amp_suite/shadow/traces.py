"""A run's traced steps on disk: one ``.npz`` file of float64 arrays and a JSON index inside it.

The arrays are stored under numbered keys (``t0``, ``t1`` ...) so layer and
variable names never have to be valid file names; the index (``index``, one
JSON text) says, per step, the loss, the loss scale, the extra figures and,
per tensor, its kind, name, dtype and key.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.safe_files import write_file_atomically

# The folder of a numerics output directory that holds each traced run's arrays, outcome and request.
TRACES_DIR = "traces"
# The files of one traced run KEY in that folder: its arrays, its outcome and the request its process read.
TRACE_SUFFIXES = (".npz", ".json", ".request.json")


def save_traces(path: Path, steps: list[StepTrace]) -> None:
    """Write ``steps`` to ``path`` (``.npz``), replacing it atomically."""
    arrays: dict[str, Any] = {}
    index: list[dict[str, Any]] = []
    for trace in steps:
        tensors = []
        for kind, mapping in (("activation", trace.activations), ("gradient", trace.gradients)):
            for name, tensor in mapping.items():
                key = f"t{len(arrays)}"
                arrays[key] = np.asarray(tensor.values, dtype=np.float64)
                tensors.append({"kind": kind, "name": name, "dtype": tensor.dtype, "key": key})
        index.append({"loss": trace.loss, "loss_scale": trace.loss_scale, "extra": trace.extra,
                      "tensors": tensors})
    arrays["index"] = np.array(json.dumps(index))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_file_atomically(path, buffer.getvalue())  # a temporary file and a rename: no link followed


def load_traces(path: Path) -> list[StepTrace]:
    """The steps :func:`save_traces` wrote to ``path``."""
    with np.load(path, allow_pickle=False) as stored:
        index = json.loads(str(stored["index"]))
        steps = []
        for entry in index:
            found: dict[str, dict[str, TensorTrace]] = {"activation": {}, "gradient": {}}
            for tensor in entry["tensors"]:
                found[tensor["kind"]][tensor["name"]] = TensorTrace(stored[tensor["key"]], tensor["dtype"])
            steps.append(StepTrace(loss=float(entry["loss"]), activations=found["activation"],
                                   gradients=found["gradient"], loss_scale=entry["loss_scale"],
                                   extra={k: dict(v) for k, v in entry["extra"].items()}))
    return steps

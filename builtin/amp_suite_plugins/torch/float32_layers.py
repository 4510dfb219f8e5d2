"""The PyTorch plugin's ``keep_fp32``: a kept layer runs with autocast off, in float32.

Its float16 or bfloat16 input is cast up, autocast is switched off around
it (so its matmuls and convolutions take the float32 parameters as they
are), and its floating output is cast back to the compute dtype, as
:mod:`amp_suite.workloads.kept` defines for every framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The instance attribute of a net whose dict, while a traced step records, receives each kept layer's float32
# output before it is cast back (amp_suite_plugins.torch.trace).
FLOAT32_OUTPUTS = "_float32_outputs"


def in_float32(torch: Any, net: Any, apply: Callable[..., Any], spec: Any, x: Any, masks: Any) -> Any:
    """``apply(torch, net, spec, x, masks)`` computed in float32; the output in ``net.compute_dtype``."""
    if net.compute_dtype is None:  # fp32, tf32, fp64: nothing runs below float32
        return apply(torch, net, spec, x, masks)
    wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    with torch.autocast(x.device.type, enabled=False):
        out = apply(torch, net, spec, wide, masks)
    recorded = net.__dict__.get(FLOAT32_OUTPUTS)
    if recorded is not None and spec.name:  # a traced step (numerics) keeps what the layer computed, in float32
        recorded[spec.name] = out.detach()
    return out.to(net.compute_dtype) if out.is_floating_point() else out

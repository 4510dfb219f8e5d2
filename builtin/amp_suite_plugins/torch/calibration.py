"""PyTorch's calibration probe: ``python -m amp_suite_plugins.torch.calibration DEVICE BUDGET``.

Peak matmul and convolution TFLOP/s per dtype (the protocol and the timing:
:mod:`amp_suite.calibration.kit`).  On a GPU a timed call dispatches
``GPU_CALLS_PER_SYNC`` operations before one ``torch.cuda.synchronize``, and
convolutions run with ``cudnn.benchmark`` on, as the suite's GPU cells do.
On a GPU of compute capability 8.9 or newer it also times the FP8 matmul
(``fp8``: ``torch._scaled_mm`` of e4m3 operands), the ceiling of the ``fp8``
precision's native cells.
PyTorch picks different convolution kernels per memory format, so the conv
figure is the faster of NCHW and ``channels_last``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

from amp_suite.calibration import kit
from amp_suite.plugins.kit import FP8_COMPUTE_CAPABILITY


def probe(device: str, budget_s: float) -> dict[str, Any]:
    """The figures of ``device`` (``auto``, ``cpu`` or ``gpu``), ``budget_s`` seconds of calls per figure."""
    import torch

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if device == "gpu" and not available:
        reason = "; ".join(str(w.message) for w in said) or (
            "a CPU-only build" if torch.version.cuda is None else "torch.cuda.is_available() is False")
        raise kit.gpu_unusable("PyTorch", " ".join(reason.split())[:300])
    gpu = available and device != "cpu"
    dev = "cuda" if gpu else "cpu"
    kind = "gpu" if gpu else "cpu"
    sync: Callable[[], None] = torch.cuda.synchronize if gpu else (lambda: None)
    repeats = kit.GPU_CALLS_PER_SYNC if gpu else 1
    tf32_ok = gpu and torch.cuda.get_device_capability()[0] >= 8
    if gpu:
        torch.backends.cudnn.benchmark = True  # as the suite's GPU cells: cuDNN picks its fastest kernel
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if gpu else "cpu", "kind": kind,
                           "version": torch.__version__, "threads": torch.get_num_threads(),
                           "calls_per_sync": repeats, "cudnn_benchmark": bool(gpu)}

    def batched(op: Callable[[], Any]) -> kit.Call:
        """``repeats`` dispatches of ``op``, then one wait."""
        def call() -> None:
            for _ in range(repeats):
                op()
            sync()
        return call

    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype_name == "tf32"

        def matmul(n: int, dtype: Any = dtype) -> kit.Call:
            a = torch.randn(n, n, device=dev).to(dtype)
            b = torch.randn(n, n, device=dev).to(dtype)
            return batched(lambda: torch.mm(a, b))

        def conv(batch: int, dtype: Any = dtype, layout: Any = torch.contiguous_format) -> kit.Call:
            x = torch.randn(batch, kit.CONV_CHANNELS, kit.CONV_HW, kit.CONV_HW, device=dev).to(dtype)
            w = torch.randn(kit.CONV_CHANNELS, kit.CONV_CHANNELS, kit.CONV_KERNEL, kit.CONV_KERNEL,
                            device=dev).to(dtype)
            x, w = x.contiguous(memory_format=layout), w.contiguous(memory_format=layout)
            return batched(lambda: torch.nn.functional.conv2d(x, w, padding=1))

        def conv_channels_last(batch: int, dtype: Any = dtype) -> kit.Call:
            return conv(batch, dtype, torch.channels_last)

        kit.measure_both(out, dtype_name, kind, matmul, conv, budget_s, repeats)
        kit.measure_both(out, dtype_name, kind, None, conv_channels_last, budget_s, repeats)
    if gpu and torch.cuda.get_device_capability() >= FP8_COMPUTE_CAPABILITY:
        kit.measure_both(out, "fp8", kind, lambda n: _fp8_matmul(torch, n, dev, batched), None, budget_s, repeats)
    return out


def _fp8_matmul(torch: Any, n: int, dev: str, batched: Callable[[Callable[[], Any]], kit.Call]) -> kit.Call:
    """``torch._scaled_mm`` of two ``n x n`` e4m3 operands, bfloat16 out: the matmul the fp8 precision's layers
    run on FP8 tensor cores (a GPU of compute capability 8.9 or newer only; 1,337 TFLOP/s on an H100)."""
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants it
    one = torch.ones((), device=dev, dtype=torch.float32)
    return batched(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))


if __name__ == "__main__":
    sys.exit(kit.probe_main(probe, sys.argv[1:]))

"""The doctor's PyTorch probe: ``python -m amp_suite_plugins.torch.doctor cpu|auto``.

Uses PyTorch's own APIs (``torch.autocast``, ``torch.amp.GradScaler``, the
TF32 switches, CUDA events, ``torch.cuda`` memory statistics) the way the
suite's recipe does, never the plugin's internals.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch

from amp_suite.doctor import probe_kit as kit

# Why CUDA is not usable, as torch said it (warnings of is_available, the error of init).
GPU_ERRORS: list[str] = []


def _device(requested: str) -> torch.device:
    if requested == "cpu":
        return torch.device("cpu")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    GPU_ERRORS.extend(str(w.message) for w in said)
    if not available and torch.version.cuda is not None:
        try:
            torch.cuda.init()
        except Exception as exc:  # e.g. "The NVIDIA driver on your system is too old"
            GPU_ERRORS.append(f"{type(exc).__name__}: {exc}")
    return torch.device("cuda" if available else "cpu")


def _set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def device_section(dev: torch.device) -> dict[str, Any]:
    from amp_suite.machine.devices import version_text

    found: dict[str, Any] = {"kind": "gpu" if dev.type == "cuda" else "cpu",
                             "cuda_build": torch.version.cuda is not None, "cuda_runtime": torch.version.cuda,
                             "cuda_build_version": torch.version.cuda}
    if GPU_ERRORS:
        found["gpu_error"] = " | ".join(dict.fromkeys(" ".join(e.split()) for e in GPU_ERRORS))[:1000]
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        driver = getattr(torch._C, "_cuda_getDriverVersion", lambda: 0)()
        found.update(name=props.name, compute_capability=f"{props.major}.{props.minor}",
                     driver=f"supports CUDA {driver // 1000}.{driver % 1000 // 10}" if driver else "")
        cudnn = getattr(torch._C, "_cudnn", None)  # read directly: version() raises on a mismatch
        if cudnn is not None and hasattr(cudnn, "getRuntimeVersion"):
            found["cudnn"] = ".".join(str(part) for part in cudnn.getRuntimeVersion())
            found["cudnn_compiled"] = ".".join(str(part) for part in cudnn.getCompileVersion())
        else:
            found["cudnn"] = version_text(torch.backends.cudnn.version(), "cudnn")
        # cuDNN loads lazily: run one convolution, then see which libcudnn files are mapped.
        torch.nn.functional.conv2d(torch.ones(1, 8, 8, 8, device=dev), torch.ones(8, 8, 3, 3, device=dev))
        torch.cuda.synchronize()
        found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")
    return found


def precision_section(dev: torch.device) -> dict[str, Any]:
    k = kit.PROBE_K
    a = torch.ones(k, k, device=dev) * 1.0001
    b = torch.ones(k, k, device=dev)
    # NCHW: CONV_PROBE_IN channels of 1.0001 into CONV_PROBE_OUT all-ones 1x1 filters
    image = torch.ones(1, kit.CONV_PROBE_IN, kit.CONV_PROBE_HW, kit.CONV_PROBE_HW, device=dev) * 1.0001
    kernel = torch.ones(kit.CONV_PROBE_OUT, kit.CONV_PROBE_IN, 1, 1, device=dev)
    found: dict[str, Any] = {}
    modes = [("fp32", False), ("tf32", True)] if dev.type == "cuda" else [("fp32", False)]
    for name, tf32 in modes:
        _set_tf32(tf32)
        found[f"matmul_{name}"] = float((a @ b).mean())
        found[f"conv_{name}"] = float(torch.nn.functional.conv2d(image, kernel).mean())
    _set_tf32(False)
    return found


def _model(dev: torch.device) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 10)).to(dev)


def amp_section(dev: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    model = _model(dev)
    seen: dict[str, Any] = {}

    def probe(name: str):
        def hook(module: Any, inputs: Any, output: Any) -> None:
            seen[name] = str(output.dtype).replace("torch.", "")
        return hook

    model[0].register_forward_hook(probe("conv"))
    model[3].register_forward_hook(probe("matmul"))
    x = torch.rand(4, 3, 8, 8, device=dev)
    y = torch.randint(0, 10, (4,), device=dev)
    with torch.autocast(dev.type, dtype=dtype):  # forward and loss only, as the recipe says
        logits = model(x).float()
        loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    seen["logits"] = str(logits.dtype).replace("torch.", "")
    seen["params"] = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
    grads = set()
    for p in model.parameters():
        assert p.grad is not None  # the backward pass reached every parameter
        grads.add(str(p.grad.dtype).replace("torch.", ""))
    seen["grads"] = sorted(grads)
    return seen


def _scaled_steps(dev: torch.device, initial: float, steps: int) -> tuple[float, bool]:
    """``steps`` fp16 steps through a GradScaler; the final scale and whether parameters changed."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(dev.type, init_scale=initial, growth_interval=kit.GROWTH_INTERVAL)
    x = torch.rand(8, 16, device=dev)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.float16):
            loss = model(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    changed = any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))
    return float(scaler.get_scale()), changed


def loss_scale_section(dev: torch.device) -> dict[str, Any]:
    return kit.loss_scale_section(lambda initial, steps: _scaled_steps(dev, initial, steps))


def timing_section(dev: torch.device) -> dict[str, Any]:
    gpu = dev.type == "cuda"
    batches, width, hidden = kit.timing_shape(gpu)
    _set_tf32(False)  # a float32 step, as the fp32 cells run it

    def build(batch: int) -> kit.StepKit:
        torch.manual_seed(0)
        layers: list[Any] = []
        for _ in range(hidden):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(dev)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.rand(batch, width, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        last: list[Any] = [None]

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            last[0] = loss

        def wait() -> None:
            if gpu:
                torch.cuda.synchronize()
            float(last[0].item())

        def event_timed() -> float:  # how the suite times a CUDA step
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0

        return step, wait, (event_timed if gpu else None)

    found = kit.time_sized(build, batches, method="CUDA events" if gpu else "host clock after loss.item()")
    return {**found, "width": width, "hidden_layers": hidden}


def memory_section(dev: torch.device) -> dict[str, Any]:
    if dev.type != "cuda":
        return {"api": None}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    block = torch.empty(kit.MEMORY_PROBE_BYTES, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated())
    del block
    return {"api": "torch.cuda.max_memory_allocated", "peak_bytes": peak, "allocated_bytes": kit.MEMORY_PROBE_BYTES}


def fp8_section(dev: torch.device) -> dict[str, Any]:
    """On a GPU: whether the fp8 precision's native matmul reaches ``torch._scaled_mm`` (FP8 tensor cores) in the
    forward and both backward products, and how far it lands from the emulated recipe (untested without one)."""
    from amp_suite_plugins.torch.fp8 import fp8_linear

    major, minor = torch.cuda.get_device_capability(dev)
    found: dict[str, Any] = {"compute_capability": f"{major}.{minor}", "native": (major, minor) >= (8, 9)}
    if not found["native"]:
        return found
    torch.manual_seed(0)
    x = torch.randn(64, 64, device=dev).to(torch.bfloat16).requires_grad_(True)  # dims multiples of 16
    w = torch.randn(32, 64, device=dev, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        out = fp8_linear(torch, x, w, None, native=True)
        out.float().square().sum().backward()
        torch.cuda.synchronize()
    found["scaled_mm_calls"] = sum(event.count for event in trace.key_averages() if event.key == "aten::_scaled_mm")
    emulated = fp8_linear(torch, x.detach(), w.detach(), None, native=False).float()
    found["relative_difference"] = float((out.detach().float() - emulated).abs().max() / emulated.abs().max())
    return found


def main(argv: list[str]) -> None:
    dev = _device(argv[0] if argv else "auto")
    sections = [
        ("device", lambda: device_section(dev)),
        ("precision", lambda: precision_section(dev)),
        ("amp_fp16", lambda: amp_section(dev, torch.float16)),
        ("amp_bf16", lambda: amp_section(dev, torch.bfloat16)),
        ("loss_scale", lambda: loss_scale_section(dev)),
        ("timing", lambda: timing_section(dev)),
        ("memory", lambda: memory_section(dev)),
    ]
    if dev.type == "cuda":  # a CPU has no FP8 matmul to check: no row
        sections.append(("fp8", lambda: fp8_section(dev)))
    kit.run_sections(sections)


if __name__ == "__main__":
    main(sys.argv[1:])

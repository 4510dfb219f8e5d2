"""A PyTorch training loop the way a PyTorch user writes it, without any amp-suite code.

``torch_gpu_speed.py`` puts it beside the suite's PyTorch step: same model,
same initial weights, same batches, same precision and the same optimizer
arithmetic, on the CPU or a CUDA GPU.  The model is a hand-written
``nn.Module`` (the CIFAR ResNet of the PyTorch CIFAR-10 repository, or the
dm-haiku MNIST CNN), not the suite's layer-list interpreter, so any host time
the suite's forward adds shows up as a ratio below 1.

    python benchmarks/torch_idiomatic.py SPEC_JSON

``SPEC_JSON`` is one JSON object: ``model`` (``mnist_cnn``, ``resnet8`` or
``resnet18``), ``num_classes``, ``input_size``, ``channels``, ``precision``
(``fp32``, ``tf32``, ``amp_fp16``, ``amp_bf16``), ``mode`` (``eager``;
``compiled``: ``torch.compile(model)``; ``cudagraphs``: the same with
``mode="reduce-overhead"``), ``device`` (``cpu`` or ``cuda``), ``steps``,
``warmup``, ``optimizer`` (``name``, ``learning_rate``, ``momentum``,
``weight_decay``, ``schedule``, ``beta1``, ``beta2``, ``epsilon``) and
``data``, an ``.npz`` holding ``images`` (steps, batch, h, w, c) float32,
``labels`` (steps, batch) and the canonical variables (``NAME/w`` HWIO or
(in, out), ``NAME/b``, BatchNorm ``NAME/scale``, ``offset``, ``mean``,
``var``).  It prints one JSON line: ``throughput`` (images/s over the steps
after warm-up, the clock read after ``torch.cuda.synchronize``) and
``first_step_loss``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def build_model(model: str, num_classes: int, input_size: int, channels: int) -> tuple[Any, dict[str, Any]]:
    """The ``nn.Module`` and its layers by canonical name (``conv1``, ``layer1_0_bn2``, ``linear`` ...)."""
    import torch
    from torch import nn

    named: dict[str, Any] = {}

    def conv(name: str, cin: int, cout: int, kernel: int, stride: int = 1, bias: bool = False) -> Any:
        named[name] = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=bias)
        return named[name]

    def norm(name: str, width: int) -> Any:
        named[name] = nn.BatchNorm2d(width)
        return named[name]

    if model == "mnist_cnn":
        class MnistCnn(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv1 = conv("conv1", channels, 32, 3, bias=True)
                self.conv2 = conv("conv2", 32, 64, 3, bias=True)
                self.dense1 = named["dense1"] = nn.Linear((input_size // 4) ** 2 * 64, 256)
                self.logits = named["logits"] = nn.Linear(256, num_classes)

            def forward(self, x: Any) -> Any:
                x = nn.functional.avg_pool2d(torch.relu(self.conv1(x)), 2)
                x = nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
                x = x.permute(0, 2, 3, 1).flatten(1)  # channels-last order: the weights' HWC rows, no copy
                return self.logits(torch.relu(self.dense1(x)))

        return MnistCnn(), named

    blocks = {"resnet8": ((1, 1, 1), (16, 32, 64), (1, 2, 2)),
              "resnet18": ((2, 2, 2, 2), (64, 128, 256, 512), (1, 2, 2, 2))}
    if model not in blocks:
        raise SystemExit(f"no idiomatic PyTorch model for {model!r}; have mnist_cnn, {', '.join(blocks)}")
    counts, widths, strides = blocks[model]

    class BasicBlock(nn.Module):
        def __init__(self, prefix: str, cin: int, width: int, stride: int) -> None:
            super().__init__()
            self.conv1, self.bn1 = conv(f"{prefix}_conv1", cin, width, 3, stride), norm(f"{prefix}_bn1", width)
            self.conv2, self.bn2 = conv(f"{prefix}_conv2", width, width, 3), norm(f"{prefix}_bn2", width)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != width:
                self.shortcut = nn.Sequential(conv(f"{prefix}_shortcut_conv", cin, width, 1, stride),
                                              norm(f"{prefix}_shortcut_bn", width))

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = conv("conv1", channels, widths[0], 3), norm("bn1", widths[0])
            stages, cin = [], widths[0]
            for stage, (count, width, stride) in enumerate(zip(counts, widths, strides, strict=True), start=1):
                for index in range(count):
                    stages.append(BasicBlock(f"layer{stage}_{index}", cin, width, stride if index == 0 else 1))
                    cin = width
            self.layers = nn.Sequential(*stages)
            self.linear = named["linear"] = nn.Linear(cin, num_classes)

        def forward(self, x: Any) -> Any:
            x = self.layers(torch.relu(self.bn1(self.conv1(x))))
            return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet(), named


def load_canonical(named: dict[str, Any], data: Any) -> None:
    """Copy the canonical variables into the layers (HWIO -> OIHW, (in, out) -> (out, in))."""
    import torch

    leaves = {"w": "weight", "b": "bias", "scale": "weight", "offset": "bias", "mean": "running_mean",
              "var": "running_var"}
    seen = set()
    with torch.no_grad():
        for key in data.files:
            if "/" not in key:
                continue
            layer, leaf = key.rsplit("/", 1)
            value = data[key]
            if leaf == "w":
                value = value.transpose(3, 2, 0, 1) if value.ndim == 4 else value.T
            getattr(named[layer], leaves[leaf]).copy_(torch.from_numpy(np.ascontiguousarray(value)))
            seen.add(layer)
    if seen != set(named):
        raise SystemExit(f"initial weights miss layers {sorted(set(named) - seen)}")


def make_optimizer(torch: Any, spec: dict[str, Any], params: Any, total_steps: int) -> tuple[Any, Any]:
    """The workload's optimizer and, for a cosine schedule, its LambdaLR over ``total_steps``."""
    if spec["name"] == "sgd":
        optimizer = torch.optim.SGD(params, lr=spec["learning_rate"], momentum=spec["momentum"],
                                    weight_decay=spec["weight_decay"])
    elif spec["name"] == "adam":
        optimizer = torch.optim.Adam(params, lr=spec["learning_rate"], betas=(spec["beta1"], spec["beta2"]),
                                     eps=spec["epsilon"], weight_decay=spec["weight_decay"])
    else:
        raise SystemExit(f"no idiomatic optimizer {spec['name']!r}; have sgd, adam")
    if spec["schedule"] != "cosine":
        return optimizer, None
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / total_steps)))


def build_loop(spec: dict[str, Any], data: Any) -> tuple[Callable[[int], Any], Callable[[], None], int]:
    """(``step(index)``, ``sync()``, the batch size) of ``spec``'s loop, its batches staged on the device.

    ``data`` is the opened ``.npz`` the module docstring describes.
    ``step(index)`` trains on batch ``index`` and returns the loss tensor
    without waiting for it; ``sync()`` waits for the device (nothing on a CPU).
    ``tests/test_torch_step_ops.py`` counts the operators of this step against
    the suite's.
    """
    import torch

    device = torch.device(spec["device"])
    precision, mode = spec["precision"], spec["mode"]
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = device.type == "cuda"
    model, named = build_model(spec["model"], spec["num_classes"], spec["input_size"], spec["channels"])
    load_canonical(named, data)
    images, labels = data["images"], data["labels"]
    model = model.to(device, memory_format=torch.channels_last).train()
    steps = spec["steps"]
    optimizer, scheduler = make_optimizer(torch, spec["optimizer"], model.parameters(), steps)
    dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 15) if precision == "amp_fp16" else None
    forward = model
    if mode in ("compiled", "cudagraphs"):
        forward = torch.compile(model, mode="reduce-overhead" if mode == "cudagraphs" else None)
    xs = [torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last).to(device)
          for x in images[:steps]]
    ys = [torch.from_numpy(y.astype(np.int64)).to(device) for y in labels[:steps]]

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step(index: int) -> Any:
        if mode == "cudagraphs":
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(forward(xs[index]).float(), ys[index])
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if scheduler is not None:
            scheduler.step()
        return loss

    return step, sync, int(images.shape[1])


def train(spec: dict[str, Any]) -> tuple[float, float]:
    """(images/s after warm-up, the first step's loss)."""
    with np.load(spec["data"]) as data:
        step, sync, batch = build_loop(spec, data)
    steps, warmup = spec["steps"], spec["warmup"]
    first = math.nan
    sync()
    start = time.perf_counter()
    for index in range(steps):
        if index == warmup:
            sync()
            start = time.perf_counter()
        loss = step(index)
        if index == 0:
            first = float(loss.item())  # in warm-up, before the clock starts
    sync()
    return (steps - warmup) * batch / (time.perf_counter() - start), first


if __name__ == "__main__":
    figures = train(json.loads(sys.argv[1]))
    print(json.dumps({"throughput": figures[0], "first_step_loss": figures[1]}))

"""A tiny PyTorch mnist_cnn (8×8 inputs, batch 4) built through the plugin's own hooks, with three seeded batches.

The tests of PyTorch's execution modes and of its loss scaling drive ``train_epoch`` directly on it, in
this process: a model and step small enough to compile in seconds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from amp_suite.records import RunSpec
from amp_suite.workloads.workload import init_variables, workload_from_config
from amp_suite_plugins.torch import plugin as torch_plugin

BATCH = 4
SIDE = 8  # pixels: the tiny model's input is 1×8×8


def tiny_torch_step(mode: str, precision: str = "fp32", *, steps: int = 4, optimizer: dict[str, Any] | None = None,
                    options: dict[str, Any] | None = None):
    """(run, model, device, applied, batches): the plugin's run of a tiny mnist_cnn in ``mode`` and ``precision``.

    ``optimizer`` replaces the plain SGD's settings (e.g. momentum and a cosine schedule), ``options`` are the
    framework options of the run (``loss_scaling``, ...).  The schedule decays over 10 steps.
    """
    table = {"model": "mnist_cnn", "input_size": SIDE, "batch_size": BATCH, "optimizer": "sgd", **(optimizer or {})}
    workload = workload_from_config("tiny", table)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(workload.optimizer, decay_steps=10))
    run = RunSpec(framework="torch", workload="tiny", precision=precision, steps=steps, warmup=1, batch_size=BATCH,
                  device="cpu", mode=mode, options=dict(options or {}))
    device = torch_plugin.select_device(run)
    applied = torch_plugin.set_precision(run, device)
    weights, state = init_variables(workload, run.seed)
    model = torch_plugin.build_model(run, workload, weights, state, applied, device)
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.rand(BATCH, 1, SIDE, SIDE, generator=generator).contiguous(memory_format=model.memory_format),
                torch.randint(0, 10, (BATCH,), generator=generator), {}) for _ in range(3)]
    return run, model, device, applied, batches

"""Drives one framework plugin's hooks in a fresh process and saves what it saw.

``python framework_probe.py REQUEST.json OUT.npz``: builds the request's
workload (a ``[workloads.X]`` table, or a name from benchmarks.toml) from the
canonical variables, takes eval- and train-mode logits on the first batch,
trains ``steps`` steps and saves logits, losses and every variable again.
Tests compare these files across frameworks, so no two frameworks ever share
a process.

``devices`` > 1 runs the framework's data-parallel engine (for PyTorch, start
the probe under torchrun: local rank 0 saves); ``shard: [i, n]`` trains one
device on the contiguous slice i of n of every batch, the computation one
replica of a data-parallel step does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from amp_suite.config import load_config
from amp_suite.datasets import input_pipeline, load_dataset
from amp_suite.plugin_host import PluginHost
from amp_suite.records import Batch, RunSpec
from amp_suite.workloads import init_variables, workload_from_config

REPO = Path(__file__).resolve().parents[2]


def layer_dtypes(framework: str, model, images: np.ndarray) -> dict[str, list[str]]:
    """Framework-specific look inside the model: which dtypes its layers compute and keep."""
    out: dict[str, set[str]] = {"conv_output": set(), "bn_variable": set(), "dense_output": set()}
    if framework == "torch":
        import torch

        handles = []
        for module in model.module.named.values():
            kind = "conv_output" if isinstance(module, torch.nn.Conv2d) else (
                "dense_output" if isinstance(module, torch.nn.Linear) else None)
            if kind:
                handles.append(module.register_forward_hook(
                    lambda m, args, result, kind=kind: out[kind].add(str(result.dtype).replace("torch.", ""))))
            else:
                for tensor in (module.weight, module.bias, module.running_mean, module.running_var):
                    out["bn_variable"].add(str(tensor.dtype).replace("torch.", ""))
        model.module.eval()  # a training-mode forward would move the running statistics
        with torch.no_grad(), torch.autocast("cpu", dtype=model.autocast_dtype or torch.float32,
                                             enabled=model.autocast_dtype is not None):
            model.module(torch.from_numpy(images).permute(0, 3, 1, 2))
        for handle in handles:
            handle.remove()
        model.module.train()
    elif framework == "keras":
        import keras

        convs = [l for l in model.model.layers if isinstance(l, keras.layers.Conv2D)]
        denses = [l for l in model.model.layers if isinstance(l, keras.layers.Dense)]
        probe = keras.Model(model.model.inputs, [l.output for l in convs + denses])
        outputs = probe(images, training=False)
        for layer, value in zip(convs + denses, outputs):
            out["conv_output" if layer in convs else "dense_output"].add(str(value.dtype.name))
        for layer in model.model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                out["bn_variable"].update(v.dtype for v in layer.weights)
    elif framework == "jax":
        import haiku as hk
        import jax

        def record(next_f, args, kwargs, context):
            result = next_f(*args, **kwargs)
            kind = {"Conv2D": "conv_output", "Linear": "dense_output"}.get(type(context.module).__name__)
            if kind and context.method_name == "__call__":
                out[kind].add(str(result.dtype))
            return result

        def forward(x):
            with hk.intercept_methods(record):
                return model.net_class()(x, False)

        params, state = model.params, model.state
        jax.eval_shape(lambda p, s, x: hk.transform_with_state(forward).apply(p, s, None, x), params, state,
                       images)
        for tree in (params, state):
            for module_path, leaves in tree.items():
                if "bn" in module_path.split("/")[-1]:
                    out["bn_variable"].update(str(v.dtype) for v in leaves.values())
    return {k: sorted(v) for k, v in out.items()}


def count_syncs(framework: str, run, host, model, batches) -> int:
    """Host synchronizations (device-to-host reads and explicit waits) during one ``train_epoch`` call."""
    from unittest import mock

    calls = [0]
    exempt: set[int] = set()

    def counting(original):
        def wrapper(*args, **kwargs):
            if not (args and id(args[0]) in exempt):
                calls[0] += 1
            return original(*args, **kwargs)
        return wrapper

    patches = []
    if framework == "torch":
        import torch

        # torch.optim keeps its step counters as CPU tensors and reads them with .item() even on a GPU
        # (no device sync): only values the step computes on the device count.
        exempt.update(id(v) for state in model.optimizer.state.values() for v in state.values())
        for name in ("item", "tolist", "numpy", "__float__", "__bool__", "cpu"):
            patches.append(mock.patch.object(torch.Tensor, name, counting(getattr(torch.Tensor, name))))
        patches.append(mock.patch.object(torch.cuda, "synchronize", counting(torch.cuda.synchronize)))
    elif framework == "keras":
        from tensorflow.python.framework import tensor as tensor_module

        base = next(c for c in tensor_module.Tensor.__subclasses__() if hasattr(c, "numpy"))
        patches.append(mock.patch.object(base, "numpy", counting(base.numpy)))
    elif framework == "jax":
        import jax

        patches += [mock.patch.object(jax, "device_get", counting(jax.device_get)),
                    mock.patch.object(jax, "block_until_ready", counting(jax.block_until_ready))]
    staged = host.stage_batches(run, model, batches)
    for patch in patches:
        patch.start()
    try:
        host.train_epoch(run, model, staged, 0)
    finally:
        for patch in patches:
            patch.stop()
    return calls[0]


def main(request_path: str, out_path: str) -> None:
    req = json.loads(Path(request_path).read_text())
    host = PluginHost(framework=req["framework"])
    for name, value in host.frameworks()[req["framework"]].env.items():
        os.environ.setdefault(name, value)
    if "table" in req:
        workload = workload_from_config(req.get("workload", "probe"), req["table"])
    else:
        workload = load_config(REPO / "benchmarks.toml").workloads[req.get("workload", "mnist_cnn")]
    devices = req.get("devices", 1)
    run = RunSpec(framework=req["framework"], workload=workload.name, precision=req["precision"],
                  steps=req["steps"], epochs=req.get("epochs", 1), warmup=0, batch_size=req["batch_size"],
                  options=req.get("options", {}), devices=devices, sync_batch_norm=req.get("sync_batch_norm", False),
                  launcher=host.frameworks()[req["framework"]].launcher if devices > 1 else "process")
    shard = req.get("shard")

    def batches_of(epoch: int) -> list:
        batches = pipeline.epoch(epoch)
        if shard is None:
            return batches
        size = run.batch_size // shard[1]
        rows = slice(shard[0] * size, (shard[0] + 1) * size)
        return [Batch(b.images[rows], b.labels[rows]) for b in batches]
    data = load_dataset("synthetic", workload, steps=run.steps, batch_size=run.batch_size, seed=0)
    pipeline = input_pipeline(workload, data, batch_size=run.batch_size, steps=run.steps, seed=0)
    weights, state = init_variables(workload, 0)
    device = host.select_device(run)
    applied = host.set_precision(run, device)
    model = host.build_model(run, workload, weights, state, applied, device)
    probe = pipeline.epoch(0)[0].images
    before_eval = host.predict(run, model, probe, training=False)
    before_train = host.predict(run, model, probe, training=True)
    unchanged = host.get_variables(run, model)  # a training-mode predict must not move anything
    losses, skipped, scale, traces = [], 0, np.nan, []
    for epoch in range(run.epochs):
        result = host.train_epoch(run, model, host.stage_batches(run, model, batches_of(epoch)), epoch)
        losses += result.step_losses
        skipped += result.skipped_steps
        scale = np.nan if result.loss_scale_final is None else result.loss_scale_final
        traces.append(result.extra.get("traces", -1))
    after = host.predict(run, model, probe, training=False)
    measured = host.measure(run, model, device)
    variables = host.get_variables(run, model)
    dtypes = layer_dtypes(req["framework"], model, probe) if req.get("dtypes") else {}
    syncs = [count_syncs(req["framework"], run, host, model, pipeline.batches(0, 0, n))
             for n in req.get("count_syncs", [])]
    from amp_suite.launchers import this_process

    if not this_process(run).writes_result:
        return
    np.savez(out_path, logits_before=before_eval, logits_before_train=before_train, logits_after=after,
             losses=np.asarray(losses), skipped=skipped, loss_scale_final=scale, traces=np.asarray(traces),
             param_count=measured["param_count"], applied=json.dumps(applied.__dict__),
             dtypes=json.dumps(dtypes), syncs=np.asarray(syncs, dtype=np.int64),
             **{f"init:{k}": v for k, v in unchanged.items()}, **{f"var:{k}": v for k, v in variables.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

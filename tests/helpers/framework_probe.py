"""Drives one framework plugin's hooks in a fresh process and saves what it saw.

``python framework_probe.py REQUEST.json OUT.npz``: builds the model from the
canonical weights, takes logits on the first batch, trains ``steps`` steps and
takes the logits again.  Tests compare these files across frameworks, so no
two frameworks ever share a process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from amp_suite.config import load_config
from amp_suite.datasets import epoch_batches, load_dataset
from amp_suite.plugin_host import PluginHost
from amp_suite.records import RunSpec
from amp_suite.workloads import init_weights

REPO = Path(__file__).resolve().parents[2]


def main(request_path: str, out_path: str) -> None:
    req = json.loads(Path(request_path).read_text())
    host = PluginHost()
    for name, value in host.frameworks()[req["framework"]].env.items():
        os.environ.setdefault(name, value)
    run = RunSpec(framework=req["framework"], workload="mnist_cnn", precision=req["precision"],
                  steps=req["steps"], epochs=req.get("epochs", 1), warmup=0, batch_size=req["batch_size"],
                  options=req.get("options", {}))
    workload = load_config(REPO / "benchmarks.toml").workloads["mnist_cnn"]
    data = load_dataset("synthetic", workload, steps=run.steps, batch_size=run.batch_size, seed=0)
    device = host.select_device(run)
    applied = host.set_precision(run, device)
    model = host.build_model(run, workload, init_weights(workload, 0), applied, device)
    probe = epoch_batches(data.train_images, data.train_labels, batch_size=run.batch_size,
                          steps=1, seed=0, epoch=0)[0].images
    before = host.predict(run, model, probe)
    losses, skipped, scale, traces = [], 0, np.nan, []
    for epoch in range(run.epochs):
        batches = epoch_batches(data.train_images, data.train_labels, batch_size=run.batch_size,
                                steps=run.steps, seed=0, epoch=epoch)
        result = host.train_epoch(run, model, host.stage_batches(run, model, batches), epoch)
        losses += result.step_losses
        skipped += result.skipped_steps
        scale = np.nan if result.loss_scale_final is None else result.loss_scale_final
        traces.append(result.extra.get("traces", -1))
    after = host.predict(run, model, probe)
    measured = host.measure(run, model, device)
    np.savez(out_path, logits_before=before, logits_after=after, losses=np.asarray(losses),
             skipped=skipped, loss_scale_final=scale, traces=np.asarray(traces),
             param_count=measured["param_count"], applied=json.dumps(applied.__dict__))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

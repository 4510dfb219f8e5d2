"""Drives one framework plugin through the hooks in a fresh process and saves what it saw.

``python -m amp_suite.testing.probe REQUEST.json OUT_DIR``: loads the plugins,
keeps only the request's framework (as a worker does), builds the workload
from the canonical variables, takes evaluation- and training-mode logits on
the first batch, trains ``steps`` steps per epoch and saves logits, losses,
loss-scale figures, trace counts and every variable before and after into
``OUT_DIR/probe.npz`` and ``OUT_DIR/probe.json``.  With ``"cell": true`` it
then runs one whole cell through the worker's own code path
(:func:`amp_suite.worker.execute`), so measure keys, ``EpochResult.extra``
and return types meet exactly the checks of a real sweep.

One framework per process: TensorFlow and JAX claim devices and keep
process-global switches, so :func:`amp_suite.testing.run_probe` starts one
process per probe and the tests compare the files.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.datasets import input_pipeline, load_dataset
from amp_suite.plugin_host import PluginHost
from amp_suite.records import Batch, RunSpec
from amp_suite.results import to_plain
from amp_suite.workloads import init_variables, workload_from_config


def _inspector(spec: str | None) -> Any:
    """The ``module:function`` a request names to look inside the model (layer dtypes), or None."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def probe(request: dict[str, Any], out_dir: Path) -> None:
    """Run ``request`` (see :class:`amp_suite.testing.ProbeRequest`) and write ``probe.npz``/``probe.json``."""
    framework = request["framework"]
    host = PluginHost(extra_modules=tuple(request.get("plugin_modules", ())), framework=framework)
    frameworks = host.frameworks()
    if framework not in frameworks:
        failures = "; ".join(f"{f.name}: {f.error}" for f in host.failures)
        raise SystemExit(f"no plugin provides framework {framework!r}" + (f" (failed: {failures})" if failures else ""))
    for name, value in frameworks[framework].env.items():
        os.environ.setdefault(name, value)
    workload = workload_from_config(request["workload"], request["table"])
    devices = request.get("devices", 1)
    run = RunSpec(framework=framework, workload=workload.name, precision=request["precision"],
                  steps=request["steps"], epochs=request["epochs"], warmup=0, batch_size=request["batch_size"],
                  options=request.get("options", {}), plugin_modules=tuple(request.get("plugin_modules", ())),
                  devices=devices, sync_batch_norm=request.get("sync_batch_norm", False),
                  launcher=frameworks[framework].launcher if devices > 1 else "process")
    shard = request.get("shard")

    def batches(epoch: int, stop: int) -> list[Batch]:
        """The epoch's first ``stop`` batches, or the request's contiguous shard of each."""
        whole = pipeline.batches(epoch, 0, stop)
        if shard is None:
            return whole
        size = run.batch_size // shard[1]
        rows = slice(shard[0] * size, (shard[0] + 1) * size)
        return [Batch(b.images[rows], b.labels[rows]) for b in whole]
    data = load_dataset("synthetic", workload, steps=max([run.steps, *request.get("count_syncs", [])]),
                        batch_size=run.batch_size, seed=0)
    pipeline = input_pipeline(workload, data, batch_size=run.batch_size,
                              steps=max([run.steps, *request.get("count_syncs", [])]), seed=0)
    weights, state = init_variables(workload, 0)
    device = host.select_device(run)
    applied = host.set_precision(run, device)
    model = host.build_model(run, workload, weights, state, applied, device)
    images = pipeline.batches(0, 0, 1)[0].images
    logits_before = host.predict(run, model, images, training=False)
    logits_before_train = host.predict(run, model, images, training=True)
    initial = host.get_variables(run, model)  # after a training-mode predict, which must move nothing
    canonical = {**weights, **state}
    moved = sorted(name for name in canonical if name not in initial
                   or not np.array_equal(initial[name], canonical[name]))
    losses: list[float] = []
    skipped, scale, traces, extras = 0, None, [], []
    for epoch in range(run.epochs):
        staged = host.stage_batches(run, model, batches(epoch, run.steps))
        result = host.train_epoch(run, model, staged, epoch)
        losses += [float(loss) for loss in result.step_losses]
        skipped += int(result.skipped_steps or 0)
        scale = result.loss_scale_final
        traces.append(result.extra.get("traces"))
        extras.append(to_plain(result.extra))
    logits_after = host.predict(run, model, images, training=False)
    measured = host.measure(run, model, device)
    variables = host.get_variables(run, model)
    inspect = _inspector(request.get("inspect"))
    dtypes = inspect(model, images) if inspect else {}
    counter_factory = _inspector(request.get("sync_counter"))
    syncs = []
    for steps in request.get("count_syncs", []) if counter_factory else []:
        staged = host.stage_batches(run, model, pipeline.batches(0, 0, steps))
        with counter_factory(model) as count:
            host.train_epoch(run, model, staged, 0)
        syncs.append(count())
    from amp_suite.launchers import this_process

    if not this_process(run).writes_result:  # another rank of a torchrun probe: local rank 0 saves
        return
    meta: dict[str, Any] = {
        "request": request, "applied": dataclasses.asdict(applied), "device": dataclasses.asdict(device),
        "losses": losses, "skipped": skipped, "loss_scale_final": scale, "traces": traces, "extras": extras,
        "measured": to_plain(measured), "dtypes": dtypes, "moved_by_training_predict": moved,
        "logits_dtype": str(np.asarray(logits_before).dtype), "cell": None, "syncs": syncs,
    }
    if request.get("cell"):
        from amp_suite.worker import execute

        cell_run = dataclasses.replace(run, steps=max(run.steps, 2), warmup=1, epochs=1)
        cell = execute(cell_run, workload, host)
        meta["cell"] = {"status": cell.status, "error": cell.error, "metrics": to_plain(cell.metrics)}
    np.savez(out_dir / "probe.npz", logits_before=np.asarray(logits_before),
             logits_before_train=np.asarray(logits_before_train), logits_after=np.asarray(logits_after),
             **{f"init:{k}": v for k, v in initial.items()}, **{f"var:{k}": v for k, v in variables.items()})
    (out_dir / "probe.json").write_text(json.dumps(meta, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m amp_suite.testing.probe REQUEST.json OUT_DIR", file=sys.stderr)
        return 2
    probe(json.loads(Path(args[0]).read_text()), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Drives one framework plugin through the hooks in a fresh process and saves what it saw.

``python -m amp_suite.testing.probe REQUEST.json OUT_DIR``: loads the plugins,
keeps only the request's framework (as a worker does), builds the workload
from the canonical variables, takes evaluation- and training-mode logits on
the first batch, trains ``steps`` steps per epoch and saves logits, losses,
loss-scale figures, trace counts and every variable before and after into
``OUT_DIR/probe.npz`` and ``OUT_DIR/probe.json``.  With ``"cell": true`` it
then runs one whole cell through the worker's own code path
(:func:`amp_suite.cell.worker.execute`), so measure keys, ``EpochResult.extra``
and return types meet exactly the checks of a real sweep.

One framework per process: TensorFlow and JAX claim devices and keep
process-global switches, so a probe never shares its process with another
framework.  ``python -m amp_suite.testing.probe --serve`` runs one request
after another for one framework (:class:`amp_suite.testing.ProbeServer`):
every plugin's ``set_precision`` sets its switches afresh for each run, as
in a worker, so only the imports and the process start are shared.
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
from amp_suite.plugins.host import PluginHost
from amp_suite.records import Batch, RunSpec, to_plain
from amp_suite.workloads.workload import init_variables, workload_from_config

# The plain SGD rate of the gradient oracle (ProbeRequest.gradient_oracle): a power of two, so large that
# w' = w - rate * g is dominated by the step and (w - w') / rate keeps g's own float32 digits.
ORACLE_LEARNING_RATE = 2.0 ** 20


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
    oracle = bool(request.get("gradient_oracle"))
    # with the gradient oracle every optimizer step is an epoch of its own, so variables can be read between steps
    steps, epochs = (1, request["steps"]) if oracle else (request["steps"], request["epochs"])
    # as the worker does: a cosine schedule decays over the run's optimizer steps
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(workload.optimizer,
                                                                           decay_steps=steps * epochs))
    run = RunSpec(framework=framework, workload=workload.name, precision=request["precision"],
                  steps=steps, epochs=epochs, warmup=0, batch_size=request["batch_size"],
                  options=request.get("options", {}), plugin_modules=tuple(request.get("plugin_modules", ())),
                  devices=devices, sync_batch_norm=request.get("sync_batch_norm", False),
                  launcher=frameworks[framework].launcher if devices > 1 else "process")
    shard = request.get("shard")

    def batches(epoch: int, stop: int) -> list[Batch]:
        """The epoch's first ``stop`` batches, or the request's contiguous shard of each."""
        whole = pipeline.batches(epoch, 0, stop)
        if request.get("integer_stem"):
            whole = [Batch(integer_images(b.images.shape, epoch * 1000 + i), b.labels, b.masks)
                     for i, b in enumerate(whole)]
        if shard is None:
            return whole
        size = run.batch_size // shard[1]
        return [b.rows(shard[0] * size, (shard[0] + 1) * size) for b in whole]  # masks sliced like images
    data = load_dataset("synthetic", workload, steps=max([run.steps, *request.get("count_syncs", [])]),
                        batch_size=run.batch_size, seed=0)
    pipeline = input_pipeline(workload, data, batch_size=run.batch_size,
                              steps=max([run.steps, *request.get("count_syncs", [])]), seed=0)
    weights, state = init_variables(workload, 0)
    if request.get("integer_stem"):
        stem = first_layer(workload.layers, "conv2d")
        weights[f"{stem}/w"] = integer_kernel(weights[f"{stem}/w"])
    device = host.select_device(run)
    applied = host.set_precision(run, device)
    model = host.build_model(run, workload, weights, state, applied, device)
    images = batches(0, 1)[0].images if shard is None else pipeline.batches(0, 0, 1)[0].images
    logits_before = host.predict(run, model, images, training=False)
    logits_before_train = host.predict(run, model, images, training=True)
    initial = host.get_variables(run, model)  # after a training-mode predict, which must move nothing
    canonical = {**weights, **state}
    moved = sorted(name for name in canonical if name not in initial
                   or not np.array_equal(initial[name], canonical[name]))
    losses: list[float] = []
    skipped, scale, traces, extras = 0, None, [], []
    oracle_arrays: dict[str, np.ndarray] = {}
    oracle_losses: list[float] = []
    for epoch in range(run.epochs):
        if oracle:  # the gradient at this step's variables, from a model of its own
            before = host.get_variables(run, model)
            oracle_losses.append(_oracle_step(host, run, workload, device, applied, before, set(weights),
                                              batches(epoch, 1), oracle_arrays, epoch))
        staged = host.stage_batches(run, model, batches(epoch, run.steps))
        result = host.train_epoch(run, model, staged, epoch)
        losses += [float(loss) for loss in result.step_losses]
        skipped += int(result.skipped_steps or 0)
        scale = result.loss_scale_final
        traces.append(result.extra.get("traces"))
        extras.append(to_plain(result.extra))
        if oracle:
            oracle_arrays.update({f"step{epoch}:after:{k}": v for k, v in host.get_variables(run, model).items()})
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
        "oracle_losses": oracle_losses, "optimizer": dataclasses.asdict(workload.optimizer),
    }
    if request.get("cell"):
        from amp_suite.cell.worker import execute

        cell_run = dataclasses.replace(run, steps=max(run.steps, 2), warmup=1, epochs=1)
        cell = execute(cell_run, workload, host)
        meta["cell"] = {"status": cell.status, "error": cell.error, "metrics": to_plain(cell.metrics)}
    # Any: numpy's stub would let a dict[str, ndarray] given as **kwds fill savez's allow_pickle.
    arrays: dict[str, Any] = {
        "logits_before": np.asarray(logits_before), "logits_before_train": np.asarray(logits_before_train),
        "logits_after": np.asarray(logits_after), "inputs": np.asarray(images), **{f"init:{k}": v for k, v in initial.items()},
        **{f"var:{k}": v for k, v in variables.items()}, **oracle_arrays}
    np.savez(out_dir / "probe.npz", **arrays)
    (out_dir / "probe.json").write_text(json.dumps(meta, indent=1, default=str))


def integer_images(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Images of small integers (-2 ... 2): a convolution of them with an integer kernel is exact in bf16 and fp16."""
    return np.random.default_rng(seed).integers(-2, 3, size=shape).astype(np.float32)


def integer_kernel(kernel: np.ndarray) -> np.ndarray:
    """``kernel`` made of -1, 0 and 1 by sign, zero where small: a 3x3x3 stem then sums to at most 54 in magnitude."""
    return np.where(np.abs(kernel) < 0.3 * np.abs(kernel).max(), 0.0, np.sign(kernel)).astype(np.float32)


def first_layer(layers: Any, kind: str) -> str:
    """The name of the first layer of ``kind`` in definition order."""
    from amp_suite.workloads.layers import iter_layers

    return next(spec.name for spec in iter_layers(layers) if spec.kind == kind)


def _oracle_step(host: PluginHost, run: RunSpec, workload: Any, device: Any, applied: Any,
                 before: dict[str, np.ndarray], parameters: set[str], batch: list[Batch],
                 arrays: dict[str, np.ndarray], step: int) -> float:
    """Measure the gradient at ``before`` on ``batch``: one plain SGD step of rate ``ORACLE_LEARNING_RATE``.

    A fresh model of the same backend is built from ``before`` with
    ``w <- w - rate * g`` as its optimizer, so ``g = (w - w') / rate`` is the
    gradient the backend computes there (the rate is a power of two, and
    large, so the difference keeps the gradient's own float32 digits).  Saves
    ``step{N}:before:``, ``step{N}:grad:`` and ``step{N}:oracle:`` (the
    BatchNorm statistics after that forward pass) and returns its loss.
    """
    from amp_suite.records import OptimizerSpec

    sgd = dataclasses.replace(workload, optimizer=OptimizerSpec(name="sgd", learning_rate=ORACLE_LEARNING_RATE))
    weights = {k: v for k, v in before.items() if k in parameters}
    state = {k: v for k, v in before.items() if k not in parameters}
    model = host.build_model(run, sgd, weights, state, applied, device)
    result = host.train_epoch(run, model, host.stage_batches(run, model, batch), 0)
    after = host.get_variables(run, model)
    for name, value in before.items():
        arrays[f"step{step}:before:{name}"] = value
        if name in parameters:
            arrays[f"step{step}:grad:{name}"] = ((value.astype(np.float64) - after[name]) / ORACLE_LEARNING_RATE)
        else:
            arrays[f"step{step}:oracle:{name}"] = after[name]
    return float(result.step_losses[0])


def serve(answers: Any) -> int:
    """Run requests read from stdin, one JSON line each, until stdin closes; one answer line per request.

    A request line is ``{"request": {...}, "out": DIR}``; the answer, written
    to ``answers``, is ``{"ok": true}`` or ``{"ok": false, "error": TRACEBACK}``.
    A request that raises leaves the server running for the next one.
    """
    import traceback

    for line in sys.stdin:
        if not line.strip():
            continue
        order = json.loads(line)
        try:
            probe(order["request"], Path(order["out"]))
            answer: dict[str, Any] = {"ok": True}
        except BaseException as exc:  # noqa: BLE001 - a probe's SystemExit is an answer too
            answer = {"ok": False, "error": "".join(traceback.format_exception(exc))[-6000:]}
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--serve"]:
        # answers go to the original stdout; whatever a framework prints goes to stderr instead
        answers = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        return serve(answers)
    if len(args) != 2:
        print("usage: python -m amp_suite.testing.probe REQUEST.json OUT_DIR | --serve", file=sys.stderr)
        return 2
    probe(json.loads(Path(args[0]).read_text()), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The kit's check of a backend's ``trace_step`` (``amp-suite numerics``): every layer traced, float32 repeatable."""

from __future__ import annotations

import tempfile
from pathlib import Path

from amp_suite.testing.probes import PROBE_TIMEOUT_S, WORKLOADS


def check_trace_step(framework: str, workload: str = "mnist_cnn", *, plugin_modules: tuple[str, ...] = (),
                     steps: int = 1, batch_size: int = 4, timeout: float = PROBE_TIMEOUT_S) -> None:
    """The backend's ``trace_step`` names every layer and variable of ``workload``, and two float32 runs agree.

    Traces ``steps`` float32 steps of ``workload`` (a key of :data:`WORKLOADS`)
    on synthetic data twice, each in a fresh process as ``amp-suite numerics``
    runs it, then checks that each trace names every named layer of the
    workload and every trainable variable, with finite values of the right
    shapes, and that the second run set beside the first gives a relative
    error of 0 everywhere.  ``AssertionError`` with the names or numbers
    that failed.
    """
    from amp_suite.numerics.compare import compare_steps
    from amp_suite.records import RunSpec
    from amp_suite.shadow.command import TRACES_DIR, prepare_out, run_in_process
    from amp_suite.shadow.plan import PlannedRun
    from amp_suite.shadow.traces import load_traces
    from amp_suite.workloads.layers import walk
    from amp_suite.workloads.workload import variable_specs, workload_from_config

    model = workload_from_config(workload, {**WORKLOADS[workload], "batch_size": batch_size})
    named = {item.layer.name: item.output_shape for item in walk(model.layers, model.input_shape) if item.layer.name}
    trainable = {spec.name: spec.shape for spec in variable_specs(model) if spec.trainable}
    traces = []
    with tempfile.TemporaryDirectory(prefix="amp-suite-trace-check-") as folder:
        for copy in (0, 1):
            out = prepare_out(Path(folder) / f"run{copy}")
            run = RunSpec(framework=framework, workload=workload, precision="fp32", steps=steps, warmup=0,
                          batch_size=batch_size, dataset="synthetic", device="cpu", timeout_s=float(timeout),
                          plugin_modules=tuple(plugin_modules))
            planned = PlannedRun(run, model, shadow=True)
            outcome = run_in_process(planned, out, {})
            assert outcome.status == "ok", (f"{framework}: tracing {workload} at fp32 ended {outcome.status}: "
                                            f"{outcome.error} (log: {Path(outcome.log).read_text()[-2000:]})")
            traces.append(load_traces(out / TRACES_DIR / f"{planned.key}.npz"))
    for step, (first, second) in enumerate(zip(*traces, strict=True)):
        missing = sorted(set(named) ^ set(first.activations))
        assert not missing, f"{framework}: step {step}'s activations differ from the workload's named layers: {missing}"
        missing = sorted(set(trainable) ^ set(first.gradients))
        assert not missing, f"{framework}: step {step}'s gradients differ from the trainable variables: {missing}"
        shapes = [f"{name} {tensor.values.shape} != {tuple(trainable[name])}"
                  for name, tensor in first.gradients.items() if tuple(tensor.values.shape) != tuple(trainable[name])]
        shapes += [f"{name} {tensor.values.shape[1:]} != {tuple(named[name])}"
                   for name, tensor in first.activations.items()
                   if tuple(tensor.values.shape[1:]) != tuple(named[name])]
        assert not shapes, f"{framework}: step {step}: shapes that are not the canonical ones: {shapes[:5]}"
        rows = compare_steps(second, first, framework=framework, workload=workload, precision="fp32",
                             shadow_precision="fp32", step=step)
        off = [f"{r.layer} {r.tensor} {r.relative_error:.3g}" for r in rows if r.relative_error != 0 or r.nonfinite]
        assert not off, f"{framework}: two float32 runs of step {step} differ: {off[:5]}"

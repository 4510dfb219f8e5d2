"""The kit's checks: each ``assert_*`` checks one contract of a probe's result and raises ``AssertionError``
with the numbers that failed; ``relative_*`` are the distances they compare with.
"""

from __future__ import annotations

import math

import numpy as np

from amp_suite.numerics import shares
from amp_suite.testing.probes import FRAMEWORK_VERSION_PATTERN, WORKLOADS, ProbeRequest, ProbeResult


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference over the largest magnitude of ``b``."""
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def relative_l2(a: np.ndarray, b: np.ndarray) -> float:
    """``|a - b| / |b|`` in the L2 norm."""
    return relative_l2_floored(a, b, 1e-12)


def assert_matches_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4,
                             param_count: int | None = None) -> None:
    """fp32 evaluation logits from the canonical weights, parameter count and first-step loss agree."""
    error = relative_error(result.logits_before, reference.logits_before)
    assert error <= rtol, f"logits differ from {reference.request.framework}'s by {error:.2e} (allowed {rtol:g})"
    assert result.param_count == reference.param_count, \
        f"param_count {result.param_count} != {reference.request.framework}'s {reference.param_count}"
    if param_count is not None:
        assert result.param_count == param_count, f"param_count {result.param_count} != {param_count}"
    loss, ref = result.losses[0], reference.losses[0]
    assert abs(loss - ref) / abs(ref) <= rtol, \
        f"first-step loss {loss!r} != {reference.request.framework}'s {ref!r} (allowed {rtol:g} relative)"


def assert_deterministic(first: ProbeResult, second: ProbeResult, *, rtol: float = 1e-6) -> None:
    """Two runs of one request (the same seed, weights and batches) train alike: the same losses and the same
    variables after training, to ``rtol``.  The sweep pairs repeats and compares precisions on the premise that
    only the precision changes a run; a train step with noise of its own (an unseeded dropout, a random number
    drawn from the framework's global state) breaks it."""
    np.testing.assert_allclose(second.losses, first.losses, rtol=rtol, atol=0,
                               err_msg="the same request trained to other losses when run again")
    errors = {name: relative_l2(second.variables[name], first.variables[name]) for name in first.variables}
    worst = sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    assert errors and max(errors.values()) <= rtol, \
        f"the same request ended with other variables when run again (relative L2): {worst}"


def assert_trains_like_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4) -> None:
    """Same logits in both modes, same losses, and every variable equal after the steps (relative L2)."""
    assert result.param_count == reference.param_count, \
        f"param_count {result.param_count} != {reference.request.framework}'s {reference.param_count}"
    for mode in ("logits_before", "logits_before_train"):
        error = relative_l2(getattr(result, mode), getattr(reference, mode))
        assert error <= rtol, f"{mode}: relative L2 {error:.2e} > {rtol:g}"
    np.testing.assert_allclose(result.losses, reference.losses, rtol=rtol)
    assert set(result.variables) == set(reference.variables), \
        f"variable names differ: {sorted(set(result.variables) ^ set(reference.variables))}"
    errors = {name: relative_l2(result.variables[name], reference.variables[name]) for name in reference.variables}
    worst = sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    assert max(errors.values()) <= rtol, f"variables differ after training (relative L2): {worst}"


def relative_l2_floored(a: np.ndarray, b: np.ndarray, floor: float) -> float:
    """``|a - b| / max(|b|, floor)`` in the L2 norm: a tensor whose true value is ~0 is judged against ``floor``
    (the numerics report's distance, :func:`amp_suite.numerics.shares.relative_error`)."""
    return shares.relative_error(a, b, floor=max(floor, 1e-30))


def _worst(errors: dict[str, float], n: int = 3) -> str:
    return ", ".join(f"{name} {error:.2e}" for name, error in sorted(errors.items(), key=lambda kv: -kv[1])[:n])


def _state_deltas(after: dict[str, np.ndarray], before: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """How far one forward pass moved each BatchNorm statistic (the change, not the value, is compared)."""
    return {name: np.asarray(after[name], np.float64) - before[name] for name in after}


def assert_gradients_match_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4,
                                     floor: float = 1e-3) -> None:
    """The first step's loss, gradients and BatchNorm statistics equal the reference framework's.

    Both probes ran with ``gradient_oracle``: at the canonical variables and
    on the same batch, each parameter's gradient agrees in relative L2, judged
    against ``floor`` times the largest gradient norm where its own norm is
    smaller (a bias in front of BatchNorm has a gradient of round-off alone);
    each running statistic's change agrees likewise.  Nothing is trained
    further, so no difference is amplified.
    """
    name = reference.request.framework
    assert result.gradient_steps and reference.gradient_steps, "probes need ProbeRequest(gradient_oracle=True)"
    ours, theirs = result.gradient_steps[0], reference.gradient_steps[0]
    assert abs(ours.oracle_loss - theirs.oracle_loss) <= rtol * abs(theirs.oracle_loss), \
        f"loss at the canonical variables {ours.oracle_loss!r} != {name}'s {theirs.oracle_loss!r}"
    missing = sorted(set(theirs.gradients) ^ set(ours.gradients))
    assert not missing, f"parameter names differ from {name}'s: {missing}"
    scale = floor * max(float(np.linalg.norm(g)) for g in theirs.gradients.values())
    errors = {k: relative_l2_floored(ours.gradients[k], g, scale) for k, g in theirs.gradients.items()}
    assert max(errors.values()) <= rtol, \
        f"gradients differ from {name}'s (relative L2, allowed {rtol:g}): {_worst(errors)}"
    deltas, ref_deltas = (_state_deltas(s.oracle_state, s.before) for s in (ours, theirs))
    if ref_deltas:
        assert set(deltas) == set(ref_deltas), f"state names differ from {name}'s: {sorted(set(deltas) ^ set(ref_deltas))}"
        errors = {k: relative_l2(deltas[k], d) for k, d in ref_deltas.items()}
        assert max(errors.values()) <= rtol, \
            f"BatchNorm statistics after one step differ from {name}'s (relative L2 of the change, allowed " \
            f"{rtol:g}): {_worst(errors)}"


def assert_optimizer_arithmetic(result: ProbeResult, *, rtol: float = 5e-5) -> None:
    """Every step applied the suite's optimizer to the backend's own gradients, at the scheduled rate.

    ``result`` is a ``gradient_oracle`` probe: for each step the change of
    every parameter must equal what :class:`ReferenceOptimizer` computes in
    float64 from the step's variables and measured gradients (relative L2 of
    the change, per tensor), the BatchNorm statistics must be the ones the
    oracle's forward pass gave, and the step's loss the oracle's.  A wrong
    hyper-parameter (momentum, ``rho``, ``beta1``, ``beta2``, ``epsilon``,
    weight decay) or an ignored schedule changes the updates by far more.
    """
    from amp_suite.testing.optimizer_reference import ReferenceOptimizer, describe
    from amp_suite.workloads.workload import learning_rate_at

    assert result.gradient_steps, "probe with ProbeRequest(gradient_oracle=True)"
    optimizer = ReferenceOptimizer(result.optimizer, decayed=_decayed_variables(result.request))
    what = describe(optimizer.spec)
    for n, step in enumerate(result.gradient_steps):
        assert abs(step.loss - step.oracle_loss) <= 1e-5 * abs(step.oracle_loss), \
            f"step {n}: the backend's loss {step.loss!r} != {step.oracle_loss!r} at the same variables and batch"
        rate = learning_rate_at(optimizer.spec, n)
        expected = optimizer.update(step.before, step.gradients)
        moved = {k: np.asarray(step.after[k], np.float64) - step.before[k] for k in expected}
        errors = {k: relative_l2(moved[k], d) for k, d in expected.items()}
        assert max(errors.values()) <= rtol, \
            f"step {n}: parameter updates are not {what} applied to the backend's own gradients " \
            f"(relative L2 of the change, allowed {rtol:g}): {_worst(errors)}{_rate_hint(moved, expected, rate)}"
        if step.oracle_state:
            moved = _state_deltas({k: step.after[k] for k in step.oracle_state}, step.before)
            errors = {k: relative_l2(moved[k], d) for k, d in _state_deltas(step.oracle_state, step.before).items()}
            assert max(errors.values()) <= rtol, \
                f"step {n}: BatchNorm statistics differ from the same forward pass's (allowed {rtol:g}): " \
                f"{_worst(errors)}"


def _decayed_variables(request: ProbeRequest) -> set[str]:
    """The variables of the request's workload declared ``decay`` (those AdamW's decoupled decay applies to)."""
    from amp_suite.workloads.workload import variable_specs, workload_from_config

    table = request.table if request.table is not None else WORKLOADS[request.workload]
    return {spec.name for spec in variable_specs(workload_from_config(request.workload, table)) if spec.decay}


def _rate_hint(moved: dict[str, np.ndarray], expected: dict[str, np.ndarray], rate: float) -> str:
    """Where every change is the expected one times one factor, the learning rate the backend applied."""
    flat_moved = np.concatenate([moved[k].ravel() for k in expected])
    flat_expected = np.concatenate([d.ravel() for d in expected.values()])
    factor = float(flat_moved @ flat_expected / max(float(flat_expected @ flat_expected), 1e-300))
    if relative_l2(flat_moved, factor * flat_expected) > 1e-3:
        return ""
    return f"; every change is {factor:.4g}x the expected one: a learning rate of {factor * rate:.4g} where " \
           f"the schedule gives {rate:.4g} at this step"


def assert_batch_norm_in_float32(result: ProbeResult, fp32: ProbeResult, *, rtol: float = 1e-5) -> None:
    """The first BatchNorm's statistics under AMP equal fp32's: its arithmetic is float32, as documented.

    Both probes ran with ``integer_stem``: the convolution in front of that
    BatchNorm is exact in every dtype, so its inputs are identical in both
    precisions, and statistics computed in float32 agree to round-off, while
    any step of BatchNorm done in bfloat16 or float16 moves them by 1e-3 or more.
    """
    from amp_suite.testing.probe import first_layer

    workload = result.request.table or WORKLOADS[result.request.workload]
    from amp_suite.workloads.workload import workload_from_config

    layer = first_layer(workload_from_config(result.request.workload, workload).layers, "batch_norm")
    errors = {}
    for leaf in ("mean", "var"):
        name = f"{layer}/{leaf}"
        errors[name] = relative_l2(np.asarray(result.variables[name], np.float64) - result.initial[name],
                                   np.asarray(fp32.variables[name], np.float64) - fp32.initial[name])
    precision = result.request.precision
    notes = " ".join(result.applied.get("notes", ()))
    assert max(errors.values()) <= rtol, \
        f"{precision}: BatchNorm statistics differ from fp32's on identical inputs ({_worst(errors)}; allowed " \
        f"{rtol:g}): BatchNorm arithmetic is not float32" + (f", though applied.notes say {notes!r}" if notes else "")


def assert_training_predict_changes_nothing(result: ProbeResult) -> None:
    """``predict(training=True)`` left every variable and running statistic at its canonical value."""
    assert not result.moved_by_training_predict, \
        f"a training-mode predict changed (or dropped) {result.moved_by_training_predict[:5]}"


def assert_reduced_precision(result: ProbeResult, fp32: ProbeResult, compute_dtype: str) -> None:
    """Logits rounded like ``compute_dtype`` (not fp32, not garbage), float32 out, and the record says so."""
    error = relative_error(result.logits_before, fp32.logits_before)
    assert 1e-4 < error < 0.1, f"logits differ from fp32 by {error:.2e}: expected 1e-4 < error < 0.1"
    assert result.logits_before.dtype == np.float32, f"logits are {result.logits_before.dtype}, not float32"
    assert result.applied["compute_dtype"] == compute_dtype, result.applied
    expected_scaling = "dynamic" if compute_dtype == "float16" else "none"
    assert result.applied["loss_scaling"] == expected_scaling, result.applied


def assert_overflow_skipped(result: ProbeResult, initial_scale: float) -> None:
    """An overflowing fp16 step changed no parameter, counted as skipped, and halved the loss scale."""
    assert result.skipped == 1, f"skipped_steps {result.skipped}, expected 1"
    assert result.loss_scale_final == initial_scale / 2, \
        f"loss_scale_final {result.loss_scale_final}, expected {initial_scale / 2}"
    np.testing.assert_array_equal(result.logits_after, result.logits_before, err_msg="parameters moved")
    assert all(math.isfinite(x) for x in result.losses), f"reported losses {result.losses} must be unscaled"


def assert_scale_grows(result: ProbeResult, initial_scale: float, growth_interval: int) -> None:
    """Finite fp16 steps are applied and the scale doubles every ``growth_interval`` steps."""
    steps = len(result.losses)
    assert result.skipped == 0, f"skipped_steps {result.skipped}, expected 0"
    expected = initial_scale * 2 ** (steps // growth_interval)
    assert result.loss_scale_final == expected, f"loss_scale_final {result.loss_scale_final}, expected {expected}"
    assert not np.array_equal(result.logits_after, result.logits_before), "no parameter moved"
    assert result.applied["loss_scaling"] == "dynamic" and result.applied["initial_loss_scale"] == initial_scale


def assert_no_loss_scaling(result: ProbeResult) -> None:
    """``loss_scaling = "none"`` under amp_fp16: no scale recorded, every step applied, parameters moved.

    Probe it with ``initial_loss_scale = 2**100``: a backend that scaled the
    loss anyway would overflow and skip the step (or report a scale).
    """
    assert result.applied["loss_scaling"] == "none" and result.applied["initial_loss_scale"] is None, \
        f"applied {result.applied['loss_scaling']!r} from {result.applied['initial_loss_scale']}, expected none"
    assert result.skipped == 0, f"skipped_steps {result.skipped}: without loss scaling no step is checked or skipped"
    assert result.loss_scale_final is None, f"loss_scale_final {result.loss_scale_final}, expected None"
    assert not np.array_equal(result.logits_after, result.logits_before), "no parameter moved"
    assert all(math.isfinite(x) for x in result.losses), f"losses {result.losses}"


def assert_static_scale(result: ProbeResult, initial_scale: float) -> None:
    """``loss_scaling = "static"`` with an overflowing scale: every step skipped, the scale never moved.

    A dynamic scaler would have halved its scale at each skipped step.
    """
    assert result.applied["loss_scaling"] == "static" and result.applied["initial_loss_scale"] == initial_scale, \
        result.applied
    steps = len(result.losses)
    assert result.skipped == steps, f"skipped_steps {result.skipped}, expected {steps} (each step overflows)"
    assert result.loss_scale_final == initial_scale, \
        f"loss_scale_final {result.loss_scale_final}, expected {initial_scale}: a static scale does not move"
    np.testing.assert_array_equal(result.logits_after, result.logits_before, err_msg="parameters moved")


def assert_trajectory_halves(result: ProbeResult, initial_scale: float) -> None:
    """The cell's stored loss-scale trajectory (``ProbeRequest(cell=True)``) halves at every skipped step."""
    assert result.cell is not None and result.cell["status"] == "ok", result.cell
    metrics = result.cell["metrics"]
    points, skipped = metrics.get("loss_scale_trajectory"), metrics.get("skipped_steps")
    assert points and points[0] == [0, initial_scale], f"loss_scale_trajectory {points}, expected to start at " \
        f"[0, {initial_scale}]"
    assert skipped and metrics["loss_scale_backoffs"] == skipped, \
        f"{metrics.get('loss_scale_backoffs')} backoffs for {skipped} skipped steps"
    expected = initial_scale / 2 ** skipped
    assert points[-1][1] == metrics["loss_scale_final"] == metrics["loss_scale_min"] == expected, \
        f"trajectory {points}, final {metrics['loss_scale_final']}: expected {initial_scale} halved {skipped} times"
    assert all(b[0] > a[0] and b[1] < a[1] for a, b in zip(points, points[1:], strict=False)), f"trajectory {points}"


def assert_kept_in_float32(result: ProbeResult, compute_dtype: str) -> None:
    """``keep_fp32 = ["conv2d", "logits"]`` on mnist_cnn: convolutions and the logits layer compute in float32,
    the other dense layer in ``compute_dtype``, and the record names what was kept."""
    assert result.dtypes, "the probe had no inspect function"
    assert result.dtypes["conv_output"] == ["float32"], f"kept convolutions computed in {result.dtypes['conv_output']}"
    assert result.dtypes["dense_output"] == sorted([compute_dtype, "float32"]), \
        f"dense outputs {result.dtypes['dense_output']}: expected dense1 in {compute_dtype}, logits in float32"
    assert list(result.applied.get("keep_fp32", [])) == ["conv2d", "logits"], result.applied
    assert result.logits_before.dtype == np.float32


def assert_compiles_once(result: ProbeResult) -> None:
    """``EpochResult.extra["traces"]`` (times the step was traced so far) is 1 after every epoch."""
    assert result.traces == [1] * len(result.traces), f"traces per epoch {result.traces}, expected all 1"


def assert_one_wait_per_window(result: ProbeResult) -> None:
    """Host synchronizations of a window do not grow with its steps: none happens between steps."""
    assert len(result.syncs) >= 2, "probe with count_syncs=(2, 6) and a sync_counter"
    lengths = result.request.count_syncs
    if len(set(result.syncs)) != 1:
        extra = (result.syncs[-1] - result.syncs[0]) / max(lengths[-1] - lengths[0], 1)
        raise AssertionError(
            f"synchronizations per window of {lengths} steps: {result.syncs}, {extra:g} more per step: something "
            "waits for the device or reads a value back inside every step (a float(loss), an .item(), a "
            "block_until_ready on the loss); wait once after the window's last step instead (timed_window's wait)")
    assert 1 <= result.syncs[0] <= 4, f"{result.syncs[0]} synchronizations: expected the one wait and one fetch"


def assert_layer_dtypes(result: ProbeResult, compute_dtype: str) -> None:
    """Convolutions compute in ``compute_dtype``, BatchNorm keeps float32 variables, the record says so."""
    assert result.dtypes, "the probe had no inspect function"
    assert result.dtypes["conv_output"] == [compute_dtype], result.dtypes
    if result.dtypes.get("bn_variable"):
        assert result.dtypes["bn_variable"] == ["float32"], result.dtypes
        notes = " ".join(result.applied["notes"])
        assert "batch_norm=float32" in notes or "compute=float32" in notes, \
            f"applied.notes {result.applied['notes']} do not say BatchNorm runs in float32"
    assert result.logits_before.dtype == np.float32
    assert all(v.dtype == np.float32 for v in result.variables.values()), "get_variables must give float32"


def assert_cell_ok(result: ProbeResult, *, check_version_format: bool = True) -> None:
    """A whole cell ran through the worker: measure keys did not clash, every answer had its type."""
    assert result.cell is not None, "the probe ran no cell (ProbeRequest(cell=True))"
    assert result.cell["status"] == "ok", f"cell {result.cell['status']}: {result.cell['error']}"
    metrics = result.cell["metrics"]
    assert isinstance(metrics.get("param_count"), int), "measure must give param_count"
    version = metrics.get("framework_version", "")
    assert version, "measure must give framework_version"
    assert not check_version_format or FRAMEWORK_VERSION_PATTERN.match(version), \
        f"framework_version {version!r} is not 'NAME VERSION[, NAME VERSION ...]'"

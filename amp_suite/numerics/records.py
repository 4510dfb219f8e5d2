"""The records of the numerics report: one traced training step, and one layer set beside its shadow.

A framework plugin's ``trace_step`` hook answers a :class:`StepTrace`: per
neutral layer name the layer's output activation, per canonical variable
name (``LAYER/leaf``) its unscaled weight gradient, each a float64 NumPy copy
with the dtype it was computed in, plus the step's loss and, under a loss
scale, the scale it used.  The host sets an AMP run's trace beside a float32
or float64 shadow's trace of the same step and writes one
:class:`LayerNumerics` per layer, tensor and step.  Plain data only, so the
records cross the process boundary as ``.npz`` arrays and JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# What a LayerNumerics row describes: a layer's output, or its weight gradients (every variable of it together).
TENSOR_KINDS = ("activation", "gradient")


@dataclass(frozen=True)
class TensorTrace:
    """One traced tensor: ``values`` in float64 (canonical layout), ``dtype`` the dtype it was computed in.

    For a weight gradient ``dtype`` is the dtype of the gradient before any
    unscaling (``float16`` under ``amp_fp16``), and ``values`` are unscaled.
    """

    values: np.ndarray
    dtype: str


@dataclass(frozen=True)
class StepTrace:
    """One training step as a backend traced it (the answer of the ``trace_step`` hook).

    ``activations`` maps every named layer of the workload (its neutral name)
    to its output; ``gradients`` maps every trainable variable (``LAYER/leaf``)
    to its gradient, unscaled; ``loss`` is the step's loss; ``loss_scale`` the
    loss scale the step's backward pass used (``None`` without loss scaling).
    ``extra`` holds figures a precision adds per layer (an FP8 recipe's scales
    and amax), layer name -> figure name -> value; empty otherwise.
    """

    loss: float
    activations: dict[str, TensorTrace]
    gradients: dict[str, TensorTrace]
    loss_scale: float | None = None
    extra: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerNumerics:
    """One layer's tensor at one step of a run, set beside the same step of a shadow run.

    ``tensor`` is ``activation`` or ``gradient`` (every weight gradient of the
    layer together).  ``dtype`` is what the run computed it in and ``format``
    the number format whose losses are counted (the dtype, where amp-suite
    knows it as a format).  ``relative_error`` is ``||run - shadow|| /
    ||shadow||``.  The shares come from the *shadow's* values rounded to
    ``format`` with :mod:`amp_suite.numerics.formats` (under a loss scale, a
    gradient's shadow values times the scale: what the scaled backward pass
    had to hold); ``nonfinite`` is the share of the run's own values that are
    inf or NaN.  ``max_abs`` is the shadow's largest magnitude, ``headroom``
    it over the format's largest finite value.  ``underflow_without_scale``:
    the gradient share that rounds to zero in ``format`` without the loss
    scale (``None`` where the run had none).  ``error_added`` (activations
    only): ``relative_error`` less that of the named layer before it in the
    forward pass (the first layer: all of it), never below 0: where an error
    arises rather than where it arrives.  ``extra``: the run's
    :attr:`StepTrace.extra` of the layer.
    """

    framework: str
    workload: str
    precision: str
    shadow: str
    step: int
    layer: str
    tensor: str
    dtype: str
    format: str
    count: int
    relative_error: float
    underflow: float
    subnormal: float
    overflow: float
    nonfinite: float
    max_abs: float
    headroom: float
    loss_scale: float | None = None
    underflow_without_scale: float | None = None
    error_added: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NumericsRun:
    """One (framework, precision) process of ``amp-suite numerics``: what it ran and how it ended.

    ``status`` is ``ok`` or a cell status (``failed``, ``unsupported``,
    ``unavailable``, ``timeout``); ``error`` its one line.  ``losses`` and
    ``loss_scales`` hold one value per traced step; ``compute_dtype`` is what
    ``set_precision`` applied; ``choices`` the choices it ran with away from
    its precision's default recipe (``loss scaling none, keep_fp32 conv1``);
    ``note`` says what the run could not give (no float64 shadow where the
    framework has no ``fp64``).
    """

    framework: str
    workload: str
    precision: str
    status: str
    error: str = ""
    steps: int = 0
    compute_dtype: str = ""
    losses: tuple[float, ...] = ()
    loss_scales: tuple[float | None, ...] = ()
    layers: tuple[str, ...] = ()
    note: str = ""
    log: str = ""
    choices: str = ""


@dataclass(frozen=True)
class BisectTrial:
    """One run of ``amp-suite numerics --bisect``: the layers it kept in float32 and how far its losses were.

    ``kept`` is the ``keep_fp32`` of the run (the configuration's own, then
    the layers the search added); ``loss_gap`` the largest relative gap
    ``|loss - fp32 loss| / |fp32 loss|`` over the traced steps (``nan`` when
    the run failed: ``status`` and ``error`` say why); ``worst`` the layer the
    run's numerics named worst among those not yet kept ("" when none is left).
    """

    kept: tuple[str, ...]
    status: str
    loss_gap: float
    losses: tuple[float, ...] = ()
    worst: str = ""
    error: str = ""


@dataclass(frozen=True)
class BisectOutcome:
    """What ``--bisect`` found for one framework, workload and AMP precision.

    ``found`` holds the layers the search added to ``keep_fp32`` (empty:
    the run was within ``tolerance`` as it was) or is ``None`` when no set was
    found within ``max_runs`` runs; ``reference_losses`` are the float32
    shadow's losses; ``trials`` every run, in order.
    """

    framework: str
    workload: str
    precision: str
    tolerance: float
    max_runs: int
    reference_losses: tuple[float, ...]
    trials: tuple[BisectTrial, ...]
    found: tuple[str, ...] | None

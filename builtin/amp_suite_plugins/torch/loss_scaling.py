"""The PyTorch plugin's loss scaling under ``amp_fp16``: ``torch.amp.GradScaler`` set up for each choice.

``applied.loss_scaling`` (:data:`amp_suite.precision.LOSS_SCALINGS`):

* ``dynamic``: GradScaler as documented, halving on a step with inf/NaN
  gradients (``scaler.step`` skips it) and doubling after
  ``loss_scale_growth_interval`` finite steps;
* ``static``: the same GradScaler with growth and backoff factors of 1, so
  the scale stays ``initial_loss_scale`` while a step with inf/NaN gradients
  is still skipped.  GradScaler refuses those factors in its constructor
  (torch 2.13 asserts growth > 1 and backoff < 1), so they are set on the
  built scaler: ``update`` hands them to ``torch._amp_update_scale_``, which
  multiplies by them;
* ``none``: no scaler at all; the step is a plain ``backward`` and
  ``optimizer.step`` whatever the gradients hold.
"""

from __future__ import annotations

from typing import Any

from amp_suite.records import PrecisionApplied


def grad_scaler(torch: Any, device_type: str, applied: PrecisionApplied, growth_interval: int) -> Any:
    """The run's GradScaler, or None without loss scaling."""
    if applied.loss_scaling not in ("dynamic", "static"):
        return None
    assert applied.initial_loss_scale is not None  # standard_precision sets it whenever the loss is scaled
    scaler = torch.amp.GradScaler(device_type, init_scale=applied.initial_loss_scale, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=growth_interval)
    if applied.loss_scaling == "static":
        scaler._growth_factor = 1.0  # private: see the module's docstring
        scaler._backoff_factor = 1.0
    return scaler

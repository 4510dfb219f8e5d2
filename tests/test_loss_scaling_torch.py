"""PyTorch's loss scaling choices in its eager and compiled steps (the kit checks the eager path of every backend).

Under ``static`` the scale never drops, so the compiled step cannot tell a
skipped step by a falling scale as it does under ``dynamic``: it reads
GradScaler's inf/NaN count instead.  Both paths must report every skip.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from amp_suite_plugins.torch import plugin as torch_plugin  # noqa: E402
from tiny_torch_step import tiny_torch_step  # noqa: E402

pytestmark = pytest.mark.slow  # a real framework on 2 cores

OVERFLOW = 2.0 ** 100  # float16 gradients overflow at once at this scale


def _build(mode: str, **options):
    run, model, _, _, batches = tiny_torch_step(mode, "amp_fp16", steps=3, options=options)
    return run, model, batches


def _window(mode: str, **options):
    run, model, batches = _build(mode, **options)
    before = [p.detach().clone() for p in model.module.parameters()]
    result = torch_plugin.train_epoch(run, model, batches, 0)
    moved = any(not torch.equal(a, b) for a, b in zip(before, model.module.parameters(), strict=True))
    return result, moved


def test_eager_static_scale_skips_overflowing_steps_and_keeps_its_scale():
    result, moved = _window("", loss_scaling="static", initial_loss_scale=OVERFLOW)
    assert (result.skipped_steps, result.loss_scale_final, moved) == (3, OVERFLOW, False)
    finite, moved = _window("", loss_scaling="static", initial_loss_scale=2.0 ** 4, loss_scale_growth_interval=1)
    assert (finite.skipped_steps, finite.loss_scale_final, moved) == (0, 2.0 ** 4, True)  # no growth either


def test_eager_without_loss_scaling_has_no_scaler():
    result, moved = _window("", loss_scaling="none", initial_loss_scale=OVERFLOW)
    assert (result.skipped_steps, result.loss_scale_final, moved) == (0, None, True)


def test_the_compiled_step_reports_the_skips_of_a_static_scale():
    """Compiles the whole step (tens of seconds on 2 cores)."""
    torch._dynamo.reset()
    result, moved = _window("compiled", loss_scaling="static", initial_loss_scale=OVERFLOW)
    assert (result.skipped_steps, result.loss_scale_final, moved) == (3, OVERFLOW, False)

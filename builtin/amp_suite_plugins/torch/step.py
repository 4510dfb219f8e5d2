"""One PyTorch training step (eager or through torch.compile), the window's fetch of its outcomes, its CUDA marks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amp_suite_plugins.torch.model import (
    TorchModel,
)


def _autocast(torch: Any, model: TorchModel) -> Any:
    """The run's autocast region (disabled for fp32 and tf32)."""
    return torch.autocast(model.device_type, dtype=model.autocast_dtype or torch.float32,
                          enabled=model.autocast_dtype is not None)


def mean_cross_entropy(torch: Any, model: TorchModel, logits: Any, labels: Any) -> Any:
    """The mean cross-entropy over every label (one per example, or one per token), from float32 logits; a token
    workload's labels, staged as int32, widened to the int64 the loss takes (int64 labels pass unchanged)."""
    return torch.nn.functional.cross_entropy(logits.to(model.stored_dtype).flatten(0, -2), labels.flatten().long())


def _forward_loss(torch: Any, model: TorchModel, images: Any, labels: Any, masks: dict[str, Any]) -> Any:
    """The step's loss: :func:`mean_cross_entropy` of the forward pass under the run's autocast."""
    with _autocast(torch, model):
        return mean_cross_entropy(torch, model, model.train_forward(images, masks), labels)


def _clip(torch: Any, model: TorchModel) -> None:
    """Clip the (unscaled) gradients to the workload's global norm, where it sets one."""
    if model.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.module.parameters(), model.clip_norm)


def _whole_step(torch: Any, model: TorchModel):
    """The training step the compiled modes hand to torch.compile: forward, loss, backward, loss scaling and
    the optimizer's update (the schedule's step stays outside: it only fills the tensor learning rate)."""

    def whole_step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        model.optimizer.zero_grad(set_to_none=True)
        loss = _forward_loss(torch, model, images, labels, masks)
        if model.scaler is None:
            loss.backward()
            _clip(torch, model)
            model.optimizer.step()
            return loss.detach(), None
        model.scaler.scale(loss).backward()
        if model.clip_norm > 0:  # clipping sees the true gradients: unscaled first
            model.scaler.unscale_(model.optimizer)
            _clip(torch, model)
        # The scale as a device tensor, without a host sync: GradScaler's public get_scale() calls .item(), and
        # torch has no public asynchronous accessor (2.13).  Traced here, the copy and comparison join the graph.
        before = model.scaler._get_scale_async().clone()
        model.scaler.step(model.optimizer)
        if model.static_scale:  # a fixed scale does not drop on a skipped step: ask GradScaler's inf/NaN count
            applied = _found_inf(torch, model.scaler, model.optimizer) == 0
            model.scaler.update()
            return loss.detach(), applied
        model.scaler.update()
        return loss.detach(), model.scaler._get_scale_async() >= before

    return whole_step


@dataclass(frozen=True)
class FoundInf:
    """A loss-scaled eager step's applied flag, still on the device: the step was applied when ``count`` is 0.

    ``count`` is the 0-d tensor in which ``GradScaler`` counted the step's
    inf/NaN gradients (``scaler.step`` skips the update when it is not 0, and
    ``scaler.update`` then halves the scale).  GradScaler makes a new one each
    step, so keeping it costs no kernel and no host sync; :func:`_fetch`
    compares the window's counts with 0 after the clock stopped.
    """

    count: Any


def _found_inf(torch: Any, scaler: Any, optimizer: Any) -> Any:
    """The inf/NaN count of the step ``scaler.step(optimizer)`` just took; call it before ``scaler.update()``.

    torch has no public asynchronous accessor (2.13): GradScaler's private
    per-optimizer record is read here and nowhere else.  Several devices' counts
    (never in this plugin: one device per process) are summed into a new tensor.
    """
    counts = list(scaler._found_inf_per_device(optimizer).values())
    return counts[0] if len(counts) == 1 else torch.stack(counts).sum()


def make_step(torch: Any, model: TorchModel):
    """One optimizer step on a staged batch; returns (loss, applied) without waiting for the device.

    ``applied`` is ``True`` without loss scaling.  Under loss scaling it stays
    on the device: in eager mode a :class:`FoundInf` (GradScaler's own inf/NaN
    count of the step: no kernel added to the step), in the compiled modes a
    bool tensor computed inside the graph (the scale did not drop, read through
    ``GradScaler``'s asynchronous scale tensor instead of the synchronizing
    ``get_scale()``).  Either way the step adds no host sync and no kernel to
    what an idiomatic loop launches (``tests/test_torch_step_ops.py`` counts
    it).  The compiled modes run
    :func:`_whole_step` through torch.compile; under CUDA graphs each step
    opens a new replay (``cudagraph_mark_step_begin``) and its outputs are
    copied out before the next replay overwrites them.
    """
    if model.compiled_step is not None:
        graphs = model.mode == "cudagraphs"

        def compiled(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            loss, applied = model.compiled_step(*batch)
            if graphs:
                loss = loss.clone()
                applied = applied.clone() if applied is not None else None
            if model.scheduler is not None:
                model.scheduler.step()
            return loss, True if applied is None else applied

        return compiled

    def step(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        images, labels, masks = batch
        model.optimizer.zero_grad(set_to_none=True)
        loss = _forward_loss(torch, model, images, labels, masks)
        if model.scaler is None:
            loss.backward()
            _clip(torch, model)
            model.optimizer.step()
            applied: Any = True
        else:
            model.scaler.scale(loss).backward()
            if model.clip_norm > 0:  # clipping sees the true gradients: unscaled first (step does not unscale again)
                model.scaler.unscale_(model.optimizer)
                _clip(torch, model)
            model.scaler.step(model.optimizer)  # skipped when gradients hold inf/NaN
            # Whether it was skipped, as GradScaler counted it: no .item() (a wait at every step, which would
            # break the window's one wait) and no kernel (a copy and a comparison of the scale were two).
            applied = FoundInf(_found_inf(torch, model.scaler, model.optimizer))
            model.scaler.update()  # ... and then the scale is halved
        if model.scheduler is not None:
            model.scheduler.step()
        return loss.detach(), applied

    return step


def _fetch(torch: Any, outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
    """One device-to-host copy for the window's losses, one for its applied flags."""
    if not outcomes:
        return [], []
    losses = torch.stack([loss for loss, _ in outcomes]).double().cpu().tolist()  # fp64's losses keep their digits
    flags = [applied for _, applied in outcomes]
    tensors = [flag for flag in flags if not isinstance(flag, bool)]
    if tensors:
        if all(isinstance(flag, FoundInf) for flag in tensors):
            on_device = torch.stack([flag.count for flag in tensors]) == 0
        else:
            on_device = torch.stack([flag.count == 0 if isinstance(flag, FoundInf) else flag for flag in tensors])
        values = iter(on_device.cpu().tolist())
        flags = [flag if isinstance(flag, bool) else bool(next(values)) for flag in flags]
    return losses, flags


def _step_marks(torch: Any, steps: int) -> tuple[Any, list[Any]]:
    """(the current CUDA stream, ``steps + 1`` timing events): step ``i`` runs from mark ``i`` to mark ``i + 1``.

    One event per boundary, not a start and an end per step: nothing is
    enqueued between two steps, so one step's end and the next one's start are
    the same point of the stream.  torch creates a CUDA event at its first
    record, so each is recorded once here, before the window's clock starts;
    inside the window a step then costs one ``cudaEventRecord`` and no event
    creation.
    """
    stream = torch.cuda.current_stream()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    for mark in marks:
        mark.record(stream)
    return stream, marks

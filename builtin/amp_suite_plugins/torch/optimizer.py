"""The PyTorch plugin's optimizers: ``torch.optim`` with the suite's arithmetic, and which implementation ran."""

from __future__ import annotations

from typing import Any

from amp_suite.errors import UnsupportedError
from amp_suite.records import (
    OptimizerSpec,
)
from amp_suite.workloads.workload import learning_rate_at


def _make_optimizer(torch: Any, spec: OptimizerSpec, params: Any, *, fused: bool = False,
                    device_type: str = "cpu", tensor_lr: bool = False,
                    decayed: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """``torch.optim`` with the suite's arithmetic (weight decay added to the gradient; AdamW's decoupled).

    ``fused`` asks for the single-kernel implementation; an optimizer or device
    without one raises :class:`UnsupportedError`.  ``tensor_lr`` holds the
    learning rate in a 0-d tensor on the parameters' device (the compiled
    modes): a schedule then fills it in place, where a changing Python float
    would make torch.compile recompile the optimizer step at every step.
    ``adamw`` is ``torch.optim.AdamW`` with two parameter groups: ``decayed``
    (the parameters whose ``VariableSpec.decay`` is set, by name) at the
    workload's weight decay and every other parameter at 0.
    """
    params = list(params)
    groups: list[Any] = params
    kwargs: dict[str, Any]
    if spec.name == "sgd":
        cls, kwargs = torch.optim.SGD, dict(lr=spec.learning_rate, momentum=spec.momentum,
                                            weight_decay=spec.weight_decay)
    elif spec.name == "rmsprop":
        cls, kwargs = torch.optim.RMSprop, dict(lr=spec.learning_rate, alpha=spec.rho, eps=spec.epsilon,
                                                weight_decay=spec.weight_decay, momentum=0.0, centered=False)
    elif spec.name == "adam":
        cls, kwargs = torch.optim.Adam, dict(lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                             eps=spec.epsilon, weight_decay=spec.weight_decay)
    elif spec.name == "adamw":
        cls, kwargs = torch.optim.AdamW, dict(lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                              eps=spec.epsilon, weight_decay=0.0)
        chosen = {id(p) for p in (decayed or {}).values()}
        groups = [group for group in (
            {"params": [p for p in params if id(p) in chosen], "weight_decay": spec.weight_decay},
            {"params": [p for p in params if id(p) not in chosen], "weight_decay": 0.0}) if group["params"]]
    else:
        raise ValueError(f"torch plugin has no optimizer {spec.name!r}")
    if tensor_lr and spec.schedule != "constant":
        kwargs["lr"] = torch.tensor(spec.learning_rate, dtype=torch.float32, device=params[0].device)
        if groups is not params:  # one tensor per group: the schedule fills each in place
            groups = [{**group, "lr": kwargs["lr"].clone()} for group in groups]
    if fused:
        import inspect

        if "fused" not in inspect.signature(cls).parameters:
            raise UnsupportedError(f"option fused: torch {torch.__version__} has no fused {cls.__name__} "
                                   f"(optimizer {spec.name!r}); run without fused")
        try:
            optimizer = cls(groups, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError) as exc:  # e.g. no fused kernel for this device
            raise UnsupportedError(f"option fused: torch {torch.__version__} cannot run a fused "
                                   f"{cls.__name__} on {device_type}: {' '.join(str(exc).split())[:300]}") from None
    else:
        optimizer = cls(groups, **kwargs)
    scheduler = None
    if spec.schedule != "constant":
        floor = COMPILED_ADAM_LR_FLOOR / spec.learning_rate if tensor_lr and spec.name in ("adam", "adamw") else 0.0
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: max(learning_rate_at(spec, step) / spec.learning_rate, floor))
    return optimizer, scheduler


# torch.compile's Adam and AdamW with a tensor learning rate (the compiled modes) write the update as
# m / (sqrt(v) / (c2 * s) + eps / s) with s = -lr / c1: where the learning rate is exactly 0 (a warm-up's first step,
# a cosine's last) and v is 0 (an embedding row no token of the batch used), that is 0 / 0, and the parameter turns
# NaN (torch 2.13 on a CPU: the character GPT's compiled cells diverged at their second step).  Eager Adam takes lr = 0
# as no update.  The compiled modes hold such a learning rate at this floor instead: every intermediate stays a
# normal float32, Adam's update is an absolute change of about 1e-30 per element (it scales as lr), and AdamW's
# decay factor 1 - lr * decay is 1.
COMPILED_ADAM_LR_FLOOR = 1e-30
# What the compiled modes' notes say of it.
COMPILED_LR_NOTE = (f"; Adam and AdamW hold a scheduled learning rate of 0 at {COMPILED_ADAM_LR_FLOOR:g} (torch.compile's "
                    "Adam divides by it)")


def create_momentum_buffers(torch: Any, optimizer: Any) -> int:
    """Give every parameter of an SGD with momentum its momentum buffer now, zeros; the number created.

    ``torch.optim.SGD`` creates a parameter's buffer inside its first step
    (``buf = grad.clone()``), unlike Adam, AdamW and RMSprop, whose state
    ``_init_group`` makes, which torch.compile runs outside the graph.  Under
    CUDA graphs (``mode="reduce-overhead"``) a buffer made inside the first
    step is an output of that step's graph, held in memory the next replay
    writes over: on an H100 (torch 2.11, 2026-11-27) the second step failed
    with "accessing tensor output of CUDAGraphs that has been overwritten by a
    subsequent run".  A zero buffer gives the same first step with dampening
    0, as here: ``0 * momentum + grad`` is ``grad`` exactly.
    """
    if not isinstance(optimizer, torch.optim.SGD):
        return 0
    created = 0
    for group in optimizer.param_groups:
        if group["momentum"] == 0:
            continue
        if group.get("dampening", 0) != 0:  # the first step would then differ from torch's own: leave it to torch
            continue
        for param in group["params"]:
            state = optimizer.state[param]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                created += 1
    return created


def optimizer_implementation(torch: Any, optimizer: Any) -> str:
    """Which of torch's implementations ``optimizer.step()`` runs: ``fused``, ``foreach`` or ``for-loop``."""
    defaults = optimizer.defaults
    if defaults.get("fused"):
        return "fused"
    if defaults.get("foreach") is not None:
        return "foreach" if defaults["foreach"] else "for-loop"
    # None: torch decides at each step, as below (torch.optim.optimizer._default_to_fused_or_foreach)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    except Exception:  # a private helper: fall back to its documented rule (all parameters on CUDA)
        foreach = bool(params) and all(p.is_cuda for p in params)
    return "foreach" if foreach else "for-loop"

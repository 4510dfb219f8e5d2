"""The execution modes amp-suite can sweep, and the learning-rate rules of a batch-size sweep.

A mode is how a framework runs the training step, named the same in every
framework so that ``--modes compiled`` means one thing: the whole step handed
to the framework's compiler.  Each plugin declares the modes it has
(:attr:`~amp_suite.records.FrameworkInfo.modes`, per device kind) and the one
it runs when no mode is asked for (:attr:`~amp_suite.records.FrameworkInfo.default_mode`);
a mode it lacks makes the cell ``unsupported``.
"""

from __future__ import annotations

MODES: dict[str, str] = {
    "eager": "operations dispatched one by one from Python (PyTorch's default)",
    "graph": "the step traced into a graph that runs without a fusing compiler (Keras: tf.function with "
             "jit_compile=False)",
    "compiled": "the whole training step (forward, backward, optimizer) through the framework's compiler: "
                "torch.compile (inductor), Keras jit_compile=True (XLA), jax.jit",
    "cudagraphs": "compiled, and replayed as CUDA graphs (torch.compile mode='reduce-overhead'): removes "
                  "kernel-launch overhead; NVIDIA GPUs only",
}

# The modes a framework with launch-bound steps gains from, most compiled last.
LAUNCH_OVERHEAD_MODES = ("compiled", "cudagraphs")

# How the learning rate follows the batch size of a batch-size sweep (the workload's own batch is the reference).
LEARNING_RATE_RULES: dict[str, str] = {
    "unchanged": "the workload's learning rate at every batch size",
    "linear": "the workload's learning rate times batch size / the workload's own batch size",
}


def mode_order(modes: list[str]) -> list[str]:
    """``modes`` in :data:`MODES` order (least compiled first), unknown names last."""
    known = [m for m in MODES if m in modes]
    return known + [m for m in modes if m not in known]


def base_mode(modes: list[str]) -> str:
    """The least compiled of ``modes``: what a 'mode over base' ratio divides by."""
    return mode_order(modes)[0]


def scaled_learning_rate(rule: str, learning_rate: float, batch_size: int, reference_batch_size: int) -> float:
    """The learning rate ``rule`` gives at ``batch_size`` (the workload's ``learning_rate`` is for its own batch)."""
    if rule == "linear":
        return learning_rate * batch_size / reference_batch_size
    if rule == "unchanged":
        return learning_rate
    raise ValueError(f"unknown learning-rate rule {rule!r}; allowed: {', '.join(LEARNING_RATE_RULES)}")

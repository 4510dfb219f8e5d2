"""A cell's validation: accuracy and loss from evaluation-mode logits, and the time to a target accuracy.

Validation calls the ``predict`` hook, one batch at a time, outside every
timed region: after training (the figures of the report), and between
training phases for a workload with a target accuracy
(:class:`TargetTracker`) or a learning curve.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from amp_suite.cell.windows import Phase
from amp_suite.datasets import InputPipeline
from amp_suite.errors import PluginError
from amp_suite.plugins.host import PluginHost
from amp_suite.records import EpochResult, RunSpec, Workload


def validate(host: PluginHost, run: RunSpec, model: Any, pipeline: InputPipeline,
             batch_size: int, outputs: int) -> dict[str, float]:
    """Validation accuracy and loss, from eval-mode logits computed in the run's precision.

    A classifier's labels are ``(n,)`` and its logits ``(n, classes)``; a
    language model's labels are ``(n, context)`` next tokens and its logits
    ``(n, context, vocab)``: accuracy and loss are then over every token.  The
    inputs go to the model as the pipeline gives them (token ids stay int32).
    ``outputs`` is the workload's classes (or vocabulary): logits of another
    width are a :class:`PluginError`, never a loss over the wrong classes.
    """
    labels = pipeline.dataset.val_labels
    correct = 0
    loss_sum = 0.0
    for start in range(0, int(labels.shape[0]), batch_size):
        images = pipeline.eval_images(pipeline.dataset.val_images[start:start + batch_size])  # one batch resized
        logits = np.asarray(host.predict(run, model, images, training=False), dtype=np.float64)
        y = labels[start:start + batch_size]
        if logits.shape != (*y.shape, outputs):
            what = f"{outputs} tokens of vocabulary" if logits.ndim > 2 or y.ndim > 1 else f"{outputs} classes"
            raise PluginError(f"plugin {host.implementer('predict')!r}: predict returned logits of shape "
                              f"{logits.shape} for labels of shape {y.shape}; expected {(*y.shape, outputs)} "
                              f"({what} of {run.workload})")
        correct += int((logits.argmax(axis=-1) == y).sum())
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        loss_sum += float(-np.take_along_axis(log_probs, y[..., None].astype(np.intp), axis=-1).sum())
    count = int(labels.shape[0])
    predictions = int(labels.size)  # examples, or every token of every example
    return {"val_accuracy": correct / predictions, "val_loss": loss_sum / predictions, "val_examples": count}


VALIDATION_KEYS = ("val_accuracy", "val_loss", "val_examples")
# Figures of a token workload (a language model), beside its samples/s and validation loss.
TOKEN_KEYS = ("tokens_per_s", "val_bits_per_char", "val_tokens", "unigram_bits_per_char", "context")


def token_figures(workload: Workload, metrics: dict[str, Any], baseline_bits_per_char: float | None,
                  val_tokens: int) -> dict[str, Any]:
    """A token workload's figures: tokens/s (samples/s x context), validation bits per character, the baseline.

    ``val_bits_per_char`` is the validation loss (nats per token) over ln 2;
    ``unigram_bits_per_char`` is the dataset's unigram baseline (``None`` on
    synthetic tokens).  Empty for an image workload.
    """
    if not workload.tokens:
        return {}
    assert workload.transformer is not None
    context = workload.transformer.context
    throughput, loss = metrics.get("throughput"), metrics.get("val_loss")
    return {"context": context,
            "tokens_per_s": float(throughput) * context if throughput is not None else None,
            "val_bits_per_char": float(loss) / math.log(2) if loss is not None else None,
            "val_tokens": val_tokens,
            "unigram_bits_per_char": baseline_bits_per_char}


class TargetTracker:
    """Time to target accuracy: evaluates between phases and remembers when the target was first reached.

    An evaluation point is each epoch's end (``eval_every`` 0) or the end of
    the first phase that reaches each multiple of ``eval_every`` steps.  The
    validation runs outside the training clock (its time is kept apart, in
    ``eval_time_s``); training time counts every phase trained so far (warm-up,
    windows and latency steps).  Evaluation stops once the target is reached.
    """

    def __init__(self, target: float | None, every: int, steps_per_epoch: int):
        self.target, self.every, self.steps_per_epoch = target, int(every or 0), steps_per_epoch
        self.reached: dict[str, Any] | None = None
        self.best = -1.0
        self.eval_time_s = 0.0
        self.curve: list[list[float]] = []  # [steps, training seconds, accuracy] per evaluation point
        self._last_point = 0

    def due(self, phase: Phase) -> bool:
        if self.target is None or self.reached is not None:
            return False
        done = phase.epoch * self.steps_per_epoch + phase.stop
        if self.every <= 0:
            return phase.stop >= self.steps_per_epoch
        return done // self.every > self._last_point

    def evaluate(self, phase: Phase, parts: list[tuple[Phase, EpochResult]], validate_now: Any) -> None:
        done = phase.epoch * self.steps_per_epoch + phase.stop
        if self.every > 0:
            self._last_point = done // self.every
        began = time.perf_counter()
        accuracy = float(validate_now()["val_accuracy"])
        self.eval_time_s += time.perf_counter() - began
        trained_s = float(sum(r.window_time_s for _, r in parts))
        self.curve.append([done, trained_s, accuracy])
        self.best = max(self.best, accuracy)
        if accuracy >= float(self.target):  # type: ignore[arg-type]
            self.reached = {"time_to_target_s": trained_s, "steps_to_target": done,
                            "epochs_to_target": done / self.steps_per_epoch, "accuracy_at_target": accuracy}

    def figures(self) -> dict[str, Any]:
        if self.target is None:
            return {}
        out: dict[str, Any] = {"target_accuracy": float(self.target), "target_reached": self.reached is not None,
                               "best_val_accuracy": self.best if self.curve else None,
                               "eval_time_s": self.eval_time_s, "eval_every_steps": self.every or self.steps_per_epoch,
                               "target_curve": self.curve}
        out.update(self.reached or {"time_to_target_s": None, "steps_to_target": None, "epochs_to_target": None})
        return out


def once(compute: Any) -> Any:
    """``compute`` called at most once: later calls return its first answer (one validation per point)."""
    answers: list[Any] = []

    def call() -> Any:
        if not answers:
            answers.append(compute())
        return answers[0]

    return call

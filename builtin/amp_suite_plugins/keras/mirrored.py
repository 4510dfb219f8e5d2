"""Data-parallel Keras on TensorFlow: the MirroredStrategy, the model and step built under it, batches per replica.

Data parallel (``--devices N``): ``tf.distribute.MirroredStrategy`` over N
GPUs, or over N logical CPU devices made with
``tf.config.set_logical_device_configuration`` before TensorFlow starts, so
the same code path runs on a CPU.  Model and optimizer are built under
``strategy.scope()``; each replica takes the contiguous slice i of every
global batch (``experimental_distribute_values_from_function``), its loss is
``tf.nn.compute_average_loss`` over the *global* batch, and the replicas'
gradients are summed with one ``all_reduce`` before the (loss-scale)
optimizer sees them, so the step is the one of the mean loss over the global
batch and the finite check of ``LossScaleOptimizer`` sees the global
gradient.  The replica's forward and backward pass is the XLA-compiled part;
all-reduce and update run in the strategy's ``tf.function``.  Several nodes:
``MultiWorkerMirroredStrategy`` configured by ``TF_CONFIG``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.errors import UnsupportedError
from amp_suite.records import (
    Batch,
    DeviceInfo,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite_plugins.keras.backends import attention_of, make_training_optimizer
from amp_suite_plugins.keras.loss_scaling import scales_loss
from amp_suite_plugins.keras.model import (
    build_keras_model,
    dropouts,
    model_inputs,
    named_layers,
)
from amp_suite_plugins.keras.tf_model import KerasModel
from amp_suite_plugins.keras.tf_options import _jit


def _strategy(tf: Any, run: RunSpec, device: DeviceInfo) -> Any:
    if run.nnodes > 1:  # every node's TF_CONFIG names the cluster and its own task
        import json
        import os

        try:
            config = json.loads(os.environ["TF_CONFIG"])
            workers = len(config["cluster"]["worker"])
        except (KeyError, TypeError, ValueError):
            raise UnsupportedError("Keras on several nodes needs TF_CONFIG (cluster.worker and task) on every "
                                   "node; see docs/distributed.md") from None
        if workers != run.nnodes or config.get("task", {}).get("index") != run.node_rank:
            raise UnsupportedError(f"TF_CONFIG names {workers} workers and task {config.get('task')}, but the run "
                                   f"has nnodes={run.nnodes}, node_rank={run.node_rank}")
        return tf.distribute.MultiWorkerMirroredStrategy()
    kind = "GPU" if device.kind == "gpu" else "CPU"
    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices(kind)][:run.devices])


def _build_mirrored(run: RunSpec, workload: Workload, variables: dict[str, np.ndarray],
                    applied: PrecisionApplied, device: DeviceInfo) -> KerasModel:
    """The model, optimizer and train step under a MirroredStrategy (see the module's docstring)."""
    import keras
    import tensorflow as tf

    strategy = _strategy(tf, run, device)
    global_batch = run.batch_size
    loss_scaled = scales_loss(applied)
    stored = applied.output_dtype
    with strategy.scope():
        model = build_keras_model(keras, workload, variables, synchronized=run.sync_batch_norm, stored_dtype=stored,
                                  attention=attention_of(run), kept=applied.keep_fp32, fp8=bool(applied.fp8_matmul))
        # The step all-reduces the gradients itself.
        optimizer = make_training_optimizer(keras, run, workload, applied, model, gradients_reduced=True)
        optimizer.build(model.trainable_variables)
    variables_ = model.trainable_variables
    mask_names = tuple(item.layer.name for item in dropouts(workload))

    def gradients(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(model_inputs(mask_names, images, masks), training=True), stored)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            if workload.tokens:  # one loss per token: each example's is the mean over its tokens
                per_example = tf.reduce_mean(per_example, axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            target = optimizer.scale_loss(loss) if loss_scaled else loss
        return loss, tape.gradient(target, variables_)

    # A synchronized BatchNorm all-reduces inside the forward pass, which a nested tf.function
    # cannot hold (TensorFlow forbids a synchronization point there): then no nested XLA function.
    compiled = gradients if run.sync_batch_norm else tf.function(gradients, jit_compile=_jit(run),
                                                                 reduce_retracing=True)

    def replica_step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        loss, grads = compiled(images, labels, masks)
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)  # the global batch's mean gradient
        finite = optimizer.check_finite(grads) if loss_scaled else tf.constant(True)
        optimizer.apply(grads, variables_)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, loss), finite

    def step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        loss, finite = strategy.run(replica_step, args=(images, labels, masks))
        return strategy.experimental_local_results(loss)[0], strategy.experimental_local_results(finite)[0]

    def forward(images: Any) -> Any:
        return tf.cast(model(model_inputs(mask_names, images, None), training=False), stored)

    train_step = tf.function(step, reduce_retracing=True)
    predict_fn = tf.function(forward, jit_compile=_jit(run), reduce_retracing=True)
    return KerasModel(model, optimizer, train_step, predict_fn, "/CPU:0" if device.kind == "cpu" else "/GPU:0",
                      loss_scaled, named_layers(workload), strategy, mask_names, stored)


def _distribute(tf: Any, run: RunSpec, model: KerasModel, batch: Batch) -> tuple[Any, Any, Any]:
    """A global batch as per-replica values: replica i gets the contiguous slice i (on its device), masks too.

    Images and masks in the model's stored dtype (float64 under fp64), labels as they are.

    ``replica_id_in_sync_group`` counts the replicas of every worker, so on
    several nodes each takes its own slice of the same global batch.
    """
    size = run.shard_size

    def shard(array: np.ndarray) -> Any:
        def value(context: Any) -> Any:
            first = context.replica_id_in_sync_group * size
            return tf.identity(tf.constant(array[first:first + size]))
        return model.strategy.experimental_distribute_values_from_function(value)

    batch = batch.astype(model.stored_dtype)
    return shard(batch.images), shard(batch.labels), {name: shard(mask) for name, mask in batch.masks.items()}


def _slowest_window(tf: Any, strategy: Any, seconds: float) -> float:
    """The largest of every worker's window time (tf.distribute reduces by SUM or MEAN only: gather, then max)."""
    local = strategy.run(lambda: tf.constant([seconds], tf.float64))
    return float(tf.reduce_max(strategy.gather(local, axis=0)))


def _meet(tf: Any, strategy: Any) -> None:
    """Returns once every worker has reached it (a gather each joins), before a window's clock starts."""
    _slowest_window(tf, strategy, 0.0)

"""Training loops the way a framework expert writes them, without any amp-suite code.

The fidelity benchmark (``overhead.py``) puts each one beside the suite's
measurement of the same model, batch size, input size and precision.  Every
loop trains the ``mnist_cnn`` architecture (conv 3x3x32, avg-pool, conv
3x3x64, avg-pool, dense 256, dense 10) with Adam 1e-3 on random data, times
the steps after warm-up with one wait at the end, and returns images/s.

    python benchmarks/idiomatic_loops.py FRAMEWORK PRECISION SIZE STEPS WARMUP BATCH
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def _data(size: int, steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.random((steps, batch, size, size, 1), dtype=np.float32),
            rng.integers(0, 10, (steps, batch)).astype(np.int32))


def torch_loop(precision: str, size: int, steps: int, warmup: int, batch: int) -> float:
    """Eager PyTorch, channels-last, autocast around the forward pass and the loss.

    The flatten reads channels-last activations in their memory order (NHWC),
    as an expert tuning channels-last would: ``nn.Flatten`` on a channels-last
    tensor copies it to NCHW order in the forward and the backward pass (about
    10 % of a 28x28 step on a 2-core CPU, measured side by side).
    """
    import torch
    from torch import nn

    class FlattenChannelsLast(nn.Module):
        def forward(self, x):
            return x.permute(0, 2, 3, 1).flatten(1)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        FlattenChannelsLast(), nn.Linear((size // 4) ** 2 * 64, 256), nn.ReLU(), nn.Linear(256, 10),
    ).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = _data(size, steps, batch)
    xs = [torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last) for x in images]
    ys = [torch.from_numpy(y.astype(np.int64)) for y in labels]
    amp = precision == "amp_bf16"
    for index in range(steps):
        if index == warmup:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(xs[index]).float(), ys[index])
        loss.backward()
        optimizer.step()
    loss.item()
    return (steps - warmup) * batch / (time.perf_counter() - start)


def keras_loop(precision: str, size: int, steps: int, warmup: int, batch: int) -> float:
    """Keras 3 on TensorFlow: a mixed policy, ``compile(jit_compile=True)`` and ``train_on_batch``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "amp_bf16" else "float32")
    layers = keras.layers
    model = keras.Sequential([
        keras.Input((size, size, 1)),
        layers.Conv2D(32, 3, padding="same"), layers.ReLU(), layers.AveragePooling2D(2),
        layers.Conv2D(64, 3, padding="same"), layers.ReLU(), layers.AveragePooling2D(2),
        layers.Flatten(), layers.Dense(256), layers.ReLU(), layers.Dense(10),
        layers.Activation("linear", dtype="float32"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    images, labels = _data(size, steps, batch)
    for index in range(steps):
        if index == warmup:
            start = time.perf_counter()
        loss = model.train_on_batch(images[index], labels[index])
    float(loss)
    return (steps - warmup) * batch / (time.perf_counter() - start)


def jax_loop(precision: str, size: int, steps: int, warmup: int, batch: int) -> float:
    """haiku + jmp + optax: one jitted step with donated state, one wait at the end."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import jmp
    import optax

    class Net(hk.Module):
        def __call__(self, x):
            x = hk.avg_pool(jax.nn.relu(hk.Conv2D(32, 3)(x)), 2, 2, "VALID")
            x = hk.avg_pool(jax.nn.relu(hk.Conv2D(64, 3)(x)), 2, 2, "VALID")
            return hk.Linear(10)(jax.nn.relu(hk.Linear(256)(hk.Flatten()(x))))

    compute = jnp.bfloat16 if precision == "amp_bf16" else jnp.float32
    hk.mixed_precision.set_policy(Net, jmp.Policy(jnp.float32, compute, jnp.float32))
    net = hk.without_apply_rng(hk.transform(lambda x: Net()(x)))
    images, labels = _data(size, steps, batch)
    params = net.init(jax.random.PRNGKey(0), images[0])
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    def loss_fn(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, x).astype(jnp.float32), y).mean()

    @jax.jit
    def step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    step = jax.jit(step, donate_argnums=(0, 1))
    xs, ys = jax.device_put(images), jax.device_put(labels)
    for index in range(steps):
        if index == warmup:
            jax.block_until_ready(params)
            start = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, xs[index], ys[index])
    jax.block_until_ready((params, loss))
    return (steps - warmup) * batch / (time.perf_counter() - start)


LOOPS = {"torch": torch_loop, "keras": keras_loop, "jax": jax_loop}

if __name__ == "__main__":
    framework, precision, *numbers = sys.argv[1:]
    size, steps, warmup, batch = (int(n) for n in numbers)
    print(json.dumps({"throughput": LOOPS[framework](precision, size, steps, warmup, batch)}))

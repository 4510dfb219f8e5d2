"""Training loops the way a framework expert writes them, without any amp-suite code.

The fidelity benchmark (``overhead.py``) puts each one beside the suite's
measurement of the same model, batch size, input size and precision.  Every
loop trains the ``mnist_cnn`` architecture (conv 3x3x32, avg-pool, conv
3x3x64, avg-pool, dense 256, dense 10) with Adam 1e-3, times the steps after
warm-up with one wait at the end, and prints images/s and the first step's
loss (read during warm-up), by which ``overhead.py`` checks that the loop
computes what the suite computes.

Batches and initial weights come from ``DATA``, an ``.npz`` file that
``overhead.py`` writes from the suite's own input pipeline and initializer:
``images`` (n, batch, size, size, 1) float32, ``labels`` (n, batch) int32 and
the canonical variables ``conv1/w`` ... ``logits/b`` (conv kernels HWIO, dense
kernels (in, out) with the flattened rows in HWC order).  Both sides then run
the same arithmetic on the same numbers.  That matters on a CPU, where a
step's time depends on the values it computes with: measured side by side in
one process on this project's AMD EPYC (AVX2), the suite's PyTorch step and
this loop's ran at 0.99-1.00x of each other from the same initial weights, but
per-block ratios swung between 0.6x and 1.4x from PyTorch's default
initialization, and this loop ran 1.2-1.4x faster on MNIST digits than on
uniform noise.  Loops fed their own weights and noise are not a fair baseline.

    python benchmarks/idiomatic_loops.py FRAMEWORK PRECISION SIZE STEPS WARMUP BATCH DATA
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

LAYERS = ("conv1", "conv2", "dense1", "logits")


def _initial(path: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(kernel, bias) of each layer in ``LAYERS``, canonical layout."""
    with np.load(path) as data:
        return [(data[f"{name}/w"], data[f"{name}/b"]) for name in LAYERS]


def _data(path: str, size: int, steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` batches from ``path``, cycled when the file holds fewer."""
    with np.load(path) as data:
        images, labels = data["images"], data["labels"]
    if images.shape[1:] != (batch, size, size, 1):
        raise SystemExit(f"{path}: images of shape {images.shape}, expected (n, {batch}, {size}, {size}, 1)")
    order = np.arange(steps) % images.shape[0]
    return (np.ascontiguousarray(images[order], dtype=np.float32),
            np.ascontiguousarray(labels[order], dtype=np.int32))


def torch_loop(precision: str, size: int, steps: int, warmup: int, batch: int, data: str) -> tuple[float, float]:
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
    )
    with torch.no_grad():
        layers = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]
        for layer, (kernel, bias) in zip(layers, _initial(data), strict=True):
            layout = (3, 2, 0, 1) if kernel.ndim == 4 else (1, 0)  # HWIO -> OIHW, (in, out) -> (out, in)
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.transpose(layout))))
            layer.bias.copy_(torch.from_numpy(bias))
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = _data(data, size, steps, batch)
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
        if index == 0:
            first = loss.item()  # in warm-up, before the clock starts
    loss.item()
    return (steps - warmup) * batch / (time.perf_counter() - start), first


def keras_loop(precision: str, size: int, steps: int, warmup: int, batch: int, data: str) -> tuple[float, float]:
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
    for layer, variables in zip([la for la in model.layers if la.weights], _initial(data), strict=True):
        layer.set_weights(list(variables))
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    images, labels = _data(data, size, steps, batch)
    for index in range(steps):
        if index == warmup:
            start = time.perf_counter()
        loss = model.train_on_batch(images[index], labels[index])
        if index == 0:
            first = float(loss)
    float(loss)
    return (steps - warmup) * batch / (time.perf_counter() - start), first


def jax_loop(precision: str, size: int, steps: int, warmup: int, batch: int, data: str) -> tuple[float, float]:
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
    images, labels = _data(data, size, steps, batch)
    params = net.init(jax.random.PRNGKey(0), images[0])
    loaded = {module: {"w": jnp.asarray(kernel), "b": jnp.asarray(bias)}  # modules in creation order
              for module, (kernel, bias) in zip(params, _initial(data), strict=True)}
    if jax.tree_util.tree_map(jnp.shape, loaded) != jax.tree_util.tree_map(jnp.shape, params):
        raise SystemExit(f"{data}: initial weights do not fit the haiku model")
    params = loaded
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
        if index == 0:
            first = float(loss)
    jax.block_until_ready((params, loss))
    return (steps - warmup) * batch / (time.perf_counter() - start), first


LOOPS = {"torch": torch_loop, "keras": keras_loop, "jax": jax_loop}

if __name__ == "__main__":
    framework, precision, *numbers, data = sys.argv[1:]
    size, steps, warmup, batch = (int(n) for n in numbers)
    if not 1 <= warmup < steps:
        raise SystemExit(f"WARMUP must be at least 1 and below STEPS ({steps}), got {warmup}")
    throughput, first_loss = LOOPS[framework](precision, size, steps, warmup, batch, data)
    print(json.dumps({"throughput": throughput, "first_step_loss": first_loss}))

"""What the JAX plugin's token kinds compute in, seen from inside a probe (``ProbeRequest.inspect``).

``of_jax(model, inputs)`` traces the model's evaluation forward pass with the
reference attention (``jax.eval_shape``: nothing runs) and returns the dtypes
it saw: ``layer_norm_input`` / ``layer_norm_result`` inside the LayerNorm
module (after its jmp policy cast the input, before it casts the result
back), ``dense_input`` inside every ``hk.Linear`` (what follows a LayerNorm
receives), ``softmax_input`` (the attention logits the softmax takes) and
``logits`` (the model's output).
"""

from __future__ import annotations

from typing import Any


def of_jax(model: Any, inputs: Any) -> dict[str, list[str]]:
    import haiku as hk
    import jax
    import jax.numpy as jnp

    seen: dict[str, set[str]] = {key: set() for key in
                                 ("layer_norm_input", "layer_norm_result", "dense_input", "softmax_input", "logits")}

    def record(next_f: Any, args: Any, kwargs: Any, context: Any) -> Any:
        result = next_f(*args, **kwargs)
        if context.method_name == "__call__":
            if isinstance(context.module, hk.LayerNorm):
                seen["layer_norm_input"].add(str(jnp.dtype(args[0].dtype)))
                seen["layer_norm_result"].add(str(jnp.dtype(result.dtype)))
            elif isinstance(context.module, hk.Linear):
                seen["dense_input"].add(str(jnp.dtype(args[0].dtype)))
        return result

    plain_softmax = jax.nn.softmax

    def softmax(x: Any, *args: Any, **kwargs: Any) -> Any:
        seen["softmax_input"].add(str(jnp.dtype(x.dtype)))
        return plain_softmax(x, *args, **kwargs)

    def forward(x: Any) -> Any:
        with hk.intercept_methods(record):
            return model.net_class()(x, False, False, None, "reference")

    jax.nn.softmax = softmax
    try:
        logits = jax.eval_shape(lambda p, s, x: hk.transform_with_state(forward).apply(p, s, None, x)[0],
                                model.params, model.state, inputs)
    finally:
        jax.nn.softmax = plain_softmax
    seen["logits"].add(str(jnp.dtype(logits.dtype)))
    return {key: sorted(values) for key, values in seen.items()}

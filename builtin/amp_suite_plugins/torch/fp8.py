"""The ``fp8`` precision in PyTorch: the recipe of :mod:`amp_suite.numerics.fp8` around ``nn.Linear``'s matmul.

PyTorch's maintained facility is torchao's float8 training
(``torchao.float8.convert_to_float8_training``, tensorwise scaling: a
``Float8Linear`` whose matmuls call ``torch._scaled_mm``).  ``_scaled_mm``
needs FP8 tensor cores (CUDA compute capability 8.9 or newer); on a CPU
there is no FP8 matmul, so the recipe is emulated: each operand is scaled by
``max_finite / amax``, saturated, rounded to ``torch.float8_e4m3fn`` (or
``float8_e5m2`` for the output gradient) with PyTorch's own cast, cast back
and divided by its scale, and the product runs in float32 (float64 for
float64 operands, the tests' reference), rounded to bfloat16.  The numerics
are the recipe's; the speed is not FP8's.

On a device that has FP8 matmuls (:func:`amp_suite.plugins.kit.has_fp8_matmul`)
the same operands go to ``torch._scaled_mm`` instead (``native``), as
torchao does; that path needs a GPU (this module's tests run on CPUs).  On an
H100 (2026-11-27, docs/gpu.md) it made 3 ``_scaled_mm`` calls per forward and
backward and landed within 0.7% of the NumPy recipe, at 1/5.7 of bfloat16's
speed on a large matmul, its eager scaling being the likely cost.

:func:`use_fp8` turns the ``nn.Linear`` modules of the named layers (a dense
layer's module, an attention layer's ``qkv`` and ``out``) into
:class:`Fp8Linear` in place: same parameters, same state dict, the FP8
matmul in ``forward``.  The bias is added outside the FP8 matmul, in
bfloat16.  Autocast is off inside the FP8 matmul (it would cast its operands
to bfloat16 first); torch is passed in, never imported here at module level.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from amp_suite.numerics.fp8 import RECIPE
from amp_suite.numerics.fp8_scales import RecorderStack

# The recorder of the step being traced (trace.py's trace_step), else None: the FP8 matmuls hand it their casts.
_RECORDERS = RecorderStack()
recording = _RECORDERS.recording


def _observe(torch: Any, label: tuple[str, str] | None, operand: str, values: Any, format_name: str,
             max_finite: float) -> None:
    """Hand the recorder (when tracing) ``values``, and the scale and amax :func:`quantize` gives them."""
    if not _RECORDERS.active or label is None:
        return
    with torch.no_grad():
        _, scale = quantize(torch, values, format_name, max_finite)
        magnitude = values.abs()
        amax = torch.where(torch.isfinite(magnitude), magnitude, torch.zeros_like(magnitude)).max()
        _RECORDERS.hand_over(label, operand, format_name, values.detach().double().cpu().numpy(), amax.item(),
                             scale.item())


def _wide(torch: Any, x: Any) -> Any:
    """The dtype the emulated matmul runs in: float64 for float64 operands, else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _fp8_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, name)  # float8_e4m3fn, float8_e5m2


def quantize(torch: Any, values: Any, format_name: str, max_finite: float) -> tuple[Any, Any]:
    """``(q, scale)``: ``values`` scaled by ``max_finite / amax`` (1 when the amax is 0), saturated and cast to
    the FP8 dtype ``format_name``; ``scale`` is a 0-d tensor in ``values``' dtype.  Non-finite values do not
    count towards the amax (as in the NumPy reference)."""
    magnitude = values.abs()
    amax = torch.where(torch.isfinite(magnitude), magnitude, torch.zeros_like(magnitude)).max()
    scale = torch.where(amax > 0, max_finite / amax, torch.ones_like(amax))
    q = (values * scale).clamp(-max_finite, max_finite).to(_fp8_dtype(torch, format_name))
    return q, scale


def fake_quantize(torch: Any, values: Any, format_name: str, max_finite: float) -> Any:
    """``values`` through the scaled FP8 cast and back, in ``values``' dtype."""
    q, scale = quantize(torch, values, format_name, max_finite)
    return q.to(values.dtype) / scale


def _scaled_mm(torch: Any, a: Any, a_format: str, b: Any, b_format: str, max_a: float, max_b: float) -> Any:
    """``a @ b`` (2-D) on FP8 tensor cores with the recipe's scales, bfloat16 out (native path, GPU only).

    ``torch._scaled_mm`` takes ``a`` row-major and ``b`` column-major and
    multiplies by ``scale_a * scale_b`` afterwards: the inverse scales.
    """
    qa, sa = quantize(torch, a.float(), a_format, max_a)
    qb, sb = quantize(torch, b.float(), b_format, max_b)
    return torch._scaled_mm(qa.contiguous(), qb.t().contiguous().t(), scale_a=(1.0 / sa).float(),
                            scale_b=(1.0 / sb).float(), out_dtype=torch.bfloat16)


@cache
def fp8_matmul_function(torch: Any) -> Any:
    """The ``torch.autograd.Function`` of the recipe's ``x @ weight.T`` (``weight`` in torch's ``(out, in)``)."""
    forward_format, gradient_format = RECIPE.forward_format, RECIPE.gradient_format
    output_dtype = getattr(torch, RECIPE.output_format.name)
    e4m3, e5m2 = forward_format.name, gradient_format.name
    max_e4m3, max_e5m2 = forward_format.max_finite, gradient_format.max_finite

    class Fp8Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any, native: bool, label: tuple[str, str] | None = None) -> Any:
            ctx.dtypes, ctx.native, ctx.label = (x.dtype, weight.dtype), native, label
            with torch.autocast(x.device.type, enabled=False):
                wide = _wide(torch, x)
                _observe(torch, label, "input", x.to(wide), e4m3, max_e4m3)
                _observe(torch, label, "weight", weight.to(wide), e4m3, max_e4m3)
                if native:
                    ctx.save_for_backward(x, weight)
                    flat = x.reshape(-1, x.shape[-1])
                    out = _scaled_mm(torch, flat, e4m3, weight.t(), e4m3, max_e4m3, max_e4m3)
                    return out.reshape(*x.shape[:-1], weight.shape[0])
                x_q = fake_quantize(torch, x.to(wide), e4m3, max_e4m3)
                w_q = fake_quantize(torch, weight.to(wide), e4m3, max_e4m3)
                ctx.save_for_backward(x_q, w_q)
                return (x_q @ w_q.t()).to(output_dtype)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            x_dtype, w_dtype = ctx.dtypes
            saved_x, saved_w = ctx.saved_tensors
            with torch.autocast(grad.device.type, enabled=False):
                flat_grad = grad.reshape(-1, grad.shape[-1])
                flat_x = saved_x.reshape(-1, saved_x.shape[-1])
                _observe(torch, ctx.label, "gradient", flat_grad.to(saved_x.dtype), e5m2, max_e5m2)
                if ctx.native:
                    grad_x = _scaled_mm(torch, flat_grad, e5m2, saved_w, e4m3, max_e5m2, max_e4m3)
                    grad_w = _scaled_mm(torch, flat_grad.t(), e5m2, flat_x, e4m3, max_e5m2, max_e4m3)
                else:
                    g = fake_quantize(torch, flat_grad.to(saved_x.dtype), e5m2, max_e5m2)
                    grad_x = (g @ saved_w).to(output_dtype)
                    grad_w = (g.t() @ flat_x).to(output_dtype)
            grad_x = grad_x.reshape(*saved_x.shape).to(x_dtype)
            return grad_x, grad_w.to(w_dtype), None, None

    return Fp8Matmul


# torch._scaled_mm wants every dimension of both operands a multiple of this (rows, inner and output features).
SCALED_MM_MULTIPLE = 16


def scaled_mm_fits(x: Any, weight: Any) -> bool:
    """Whether ``x @ weight.T`` and its two gradient products have the shapes ``torch._scaled_mm`` takes."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return all(size % SCALED_MM_MULTIPLE == 0 for size in (rows, x.shape[-1], weight.shape[0]))


def fp8_linear(torch: Any, x: Any, weight: Any, bias: Any, native: bool = False,
               label: tuple[str, str] | None = None) -> Any:
    """``x @ weight.T + bias`` under the recipe: the FP8 matmul, then the bias added in bfloat16.

    ``native`` sends the operands to ``torch._scaled_mm`` where their shapes fit it (:func:`scaled_mm_fits`);
    a layer whose shapes do not runs the emulated recipe, the same numbers at the emulation's speed.
    ``label`` (layer, projection) names the matmul to a :func:`recording` recorder.
    """
    return _linear(fp8_matmul_function(torch), x, weight, bias, native, label)


def _linear(matmul: Any, x: Any, weight: Any, bias: Any, native: bool, label: tuple[str, str] | None) -> Any:
    """:func:`fp8_linear` with its ``torch.autograd.Function`` already made (``matmul``)."""
    out = matmul.apply(x, weight, native and scaled_mm_fits(x, weight), label)
    return out if bias is None else out + bias.to(out.dtype)


@cache
def fp8_linear_class(torch: Any) -> Any:
    """``nn.Linear`` whose forward is :func:`fp8_linear` (``native``: the class attribute set by :func:`use_fp8`).

    Its forward calls the autograd function made here, not the cached
    :func:`fp8_matmul_function`: under ``torch.compile`` dynamo cannot trace a
    call through the cache into a class definition and broke the graph at
    every FP8 layer (31 graph breaks in the character GPT's compiled fp8 step
    on an H200, 2026-11-28, against 4 in amp_bf16's).
    """
    matmul_function = fp8_matmul_function(torch)

    class Fp8Linear(torch.nn.Linear):
        native = False
        fp8_label: tuple[str, str] | None = None  # (layer, projection), set by use_fp8

        def forward(self, x: Any) -> Any:
            return _linear(matmul_function, x, self.weight, self.bias, self.native, self.fp8_label)

    return Fp8Linear


def use_fp8(torch: Any, net: Any, names: tuple[str, ...], native: bool) -> int:
    """Turn the ``nn.Linear`` modules of layers ``names`` in ``net.named`` into FP8 linears; the number turned.

    A dense layer's module is itself an ``nn.Linear``; an attention layer's
    is a ``ModuleDict`` of two (``qkv``, ``out``).
    """
    linear_class = fp8_linear_class(torch)
    linear_class.native = native
    turned = 0
    for name in names:
        module = net.named[name]
        linears = [("", module)] if isinstance(module, torch.nn.Linear) else [
            (projection, child) for projection, child in module.named_children()
            if isinstance(child, torch.nn.Linear)]
        for projection, linear in linears:
            linear.__class__ = linear_class
            linear.fp8_label = (name, projection)
            turned += 1
    return turned


# What an fp8 cell's notes say when inductor compiles its step (keep_roundings_under_compile).
COMPILED_ROUNDING_NOTE = ("fp8 under torch.compile: inductor rounds every cast as eager does "
                          "(emulate_precision_casts, for the whole step), so the recipe's bfloat16 products stay "
                          "rounded")


# inductor's emulate_precision_casts as this process started (its default, or the user's
# TORCHINDUCTOR_EMULATE_PRECISION_CASTS), kept at the first change so that a cell that is not fp8 gets it back.
_FIRST_EMULATE_PRECISION_CASTS: list[bool] = []


def keep_roundings_under_compile(torch: Any, fp8: bool) -> None:
    """Turn inductor's ``emulate_precision_casts`` on for an fp8 cell whose step it compiles; any other compiled
    cell gets the value the process started with.

    A fused inductor kernel keeps a bfloat16 intermediate in float32 unless
    told to round it as eager does: compiled, the fp8 layer's products (the
    recipe's bfloat16 output, and its gradients) skipped that rounding and the
    bias was added to the unrounded product, so on a CPU the compiled layer
    left the recipe (28% of the outputs off, every gradient element
    unrounded) where eager matches it exactly.  With the switch on it matches
    again (tests/test_fp8_frameworks.py).  The switch covers the whole
    compiled step, not the FP8 layers alone: the rest of an fp8 cell's step
    rounds as eager does too, where a compiled amp_bf16 cell's keeps inductor's
    float32 intermediates.  A process-global switch, like TF32's, set before
    the step is compiled (compilation happens at its first call); cells share a
    process only under ``--inline``, and each compiled cell sets it.
    """
    import torch._inductor.config as inductor_config

    if not _FIRST_EMULATE_PRECISION_CASTS:
        _FIRST_EMULATE_PRECISION_CASTS.append(bool(inductor_config.emulate_precision_casts))
    inductor_config.emulate_precision_casts = True if fp8 else _FIRST_EMULATE_PRECISION_CASTS[0]


def fp8_note(matmul: str) -> str:
    """The ``PrecisionApplied`` note of the fp8 layers' matmuls (``matmul``: native or emulated)."""
    if matmul == "native":
        return ("fp8 matmuls=native (torch._scaled_mm on FP8 tensor cores, as torchao's tensorwise float8 training; "
                "the head and everything else as under amp_bf16)")
    return ("fp8 matmuls=emulated (no FP8 matmul on this device: operands cast to float8_e4m3fn / float8_e5m2 with "
            "their scales and back, float32 matmul, bfloat16 result; the head and everything else as under amp_bf16)")

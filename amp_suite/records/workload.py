"""What a cell trains, framework-neutral: a workload, its layers, variables and optimizer, read back from plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LayerSpec:
    """One node of a framework-neutral model (see :mod:`amp_suite.workloads.layers` for the vocabulary).

    ``kind`` is one of :data:`amp_suite.workloads.layers.LAYER_KINDS`.  Each kind reads only
    the fields it needs:

    * ``conv2d``: ``name``, ``features`` (output channels), ``kernel_size``,
      ``stride``, ``padding`` (zero pixels added on every side), ``use_bias``;
    * ``depthwise_conv2d``: ``name``, ``kernel_size``, ``stride``, ``padding``,
      ``use_bias`` (depth multiplier 1: as many output channels as input ones);
    * ``zero_pad``: ``pads``, the zero pixels added (top, bottom, left, right);
    * ``batch_norm``: ``name``, ``momentum`` (PyTorch's convention: the weight of
      the new batch statistic, 0.1) and ``epsilon``;
    * ``max_pool`` / ``avg_pool``: ``window`` and ``stride`` (no padding);
    * ``global_avg_pool``: ``keepdims`` (output ``(1, 1, c)`` instead of ``(c,)``);
    * ``dense``: ``name``, ``features``, ``use_bias``;
    * ``dropout``: ``name`` (the key of its mask in :attr:`Batch.masks`), ``rate``
      and ``per_sample`` (one draw per example: stochastic depth);
    * ``residual``: ``body`` and ``shortcut`` (two layer sequences applied to the
      same input and added; an empty ``shortcut`` is the identity);
    * ``multiply``: ``body`` (a sequence giving ``(1, 1, c)`` from the input,
      multiplied into it: squeeze-and-excitation);
    * ``relu``, ``relu6``, ``swish``, ``sigmoid``, ``flatten``: nothing;
    * token kinds (activations ``(tokens, features)``; see ``docs/layers.md``):
      ``patch_embed``: ``name``, ``features``, ``kernel_size`` (the patch side,
      also its stride); ``class_token``, ``position_embedding``: ``name``;
      ``token_embedding``: ``name``, ``vocab_size``, ``features``;
      ``layer_norm``, ``rms_norm``: ``name``, ``epsilon``;
      ``multi_head_attention``: ``name``, ``heads``, ``causal``;
      ``gelu``, ``token_mean_pool``, ``class_token_pool``: nothing.
    """

    kind: str
    name: str = ""
    features: int = 0
    kernel_size: int = 0
    stride: int = 1
    padding: int = 0
    use_bias: bool = True
    window: int = 0
    momentum: float = 0.1
    epsilon: float = 1e-5
    body: tuple[LayerSpec, ...] = ()
    shortcut: tuple[LayerSpec, ...] = ()
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    keepdims: bool = False
    rate: float = 0.0
    per_sample: bool = False
    heads: int = 0
    causal: bool = False
    vocab_size: int = 0


@dataclass(frozen=True)
class VariableSpec:
    """One canonical model variable an architecture declares.

    ``name`` is ``LAYER/LEAF`` (``conv1/w``, ``bn1/scale``, ``bn1/mean``);
    ``init`` is ``he_uniform``, ``zeros``, ``ones`` or ``normal`` (mean 0,
    standard deviation 0.02: embeddings, class token, positions).  ``decay``
    says whether AdamW's decoupled weight decay applies to it (kernels: yes;
    biases, normalization scales and offsets, embeddings: no).  Trainable variables are
    parameters; the others are model state (BatchNorm running statistics).
    ``fan_in`` is the fan-in He-uniform draws with; 0 means the product of
    every dimension but the last (a depthwise kernel ``(k, k, c, 1)`` sees
    ``k * k`` inputs per output, not ``k * k * c``).
    """

    name: str
    shape: tuple[int, ...]
    init: str
    trainable: bool = True
    fan_in: int = 0
    decay: bool = False


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer, with one meaning in every framework (see ``docs/workloads.md``).

    ``name`` is ``sgd``, ``rmsprop``, ``adam`` or ``adamw``.  For the first
    three ``weight_decay`` is added to the gradient (``g + weight_decay * w``,
    as ``torch.optim`` does) before the optimizer's own arithmetic; ``adamw``
    decouples it (``w -= lr * weight_decay * w`` beside the Adam update) and
    applies it only to the variables whose :attr:`VariableSpec.decay` is set.
    ``schedule`` is ``constant``, ``cosine`` (decaying to 0 over
    ``decay_steps`` optimizer steps; the host fills ``decay_steps`` in from
    the run's steps and epochs) or ``warmup_cosine`` (a linear warm-up from 0
    over ``warmup_steps``, then the cosine over the rest).  ``clip_norm`` > 0
    clips the gradients by their global norm (after unscaling them under a
    loss scale, before weight decay and the optimizer); 0 clips nothing.
    """

    name: str
    learning_rate: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    rho: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    schedule: str = "constant"
    decay_steps: int = 0
    warmup_steps: int = 0
    clip_norm: float = 0.0


@dataclass(frozen=True)
class TransformerShape:
    """The sizes of a transformer workload (``[workloads.NAME]`` keys of the same names).

    ``width`` is the token features, ``depth`` the number of blocks, ``heads``
    the attention heads (``width`` splits evenly into them), ``mlp`` the hidden
    features of each block's MLP.  A ViT has a ``patch`` side; a language model
    a ``vocab_size`` and a ``context`` (tokens per example).
    """

    width: int
    depth: int
    heads: int
    mlp: int
    patch: int = 0
    vocab_size: int = 0
    context: int = 0


@dataclass(frozen=True)
class Workload:
    """A framework-neutral training workload: architecture, data shape, input pipeline and optimizer.

    ``augment`` turns on the host's random crop (4-pixel zero padding) and
    horizontal flip; ``normalize`` subtracts the training split's per-channel
    mean and divides by its standard deviation (training and validation
    images alike); ``input_normalization = "imagenet"`` does the same with
    ImageNet's fixed mean and standard deviation instead (the input layers of
    Keras's EfficientNet, done by the host).  All happen in the host, so every
    framework sees the same pixels.
    """

    name: str
    model: str
    input_size: int
    channels: int
    num_classes: int
    batch_size: int
    optimizer: OptimizerSpec
    layers: tuple[LayerSpec, ...]
    augment: bool = False
    normalize: bool = False
    input_normalization: str = "none"
    description: str = ""
    steps: int | None = None  # steps per epoch this workload trains unless --steps says otherwise
    target_accuracy: float | None = None  # time to target: validation accuracy to reach (None: not measured)
    eval_every: int = 0  # time to target: evaluate every this many steps (0: at each epoch's end)
    dataset: str = ""  # the dataset this workload trains on ("": the sweep's --dataset)
    transformer: TransformerShape | None = None  # the sizes of a transformer architecture

    @property
    def tokens(self) -> bool:
        """True for a workload whose inputs are token ids (a language model), not images."""
        return self.transformer is not None and self.transformer.vocab_size > 0

    @property
    def outputs(self) -> int:
        """Logits per prediction: the classes, or a language model's vocabulary."""
        if self.tokens:
            assert self.transformer is not None
            return self.transformer.vocab_size
        return self.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Per-example shape: (height, width, channels), NHWC, or (context,) token ids."""
        if self.tokens:
            assert self.transformer is not None
            return (self.transformer.context,)
        return (self.input_size, self.input_size, self.channels)


def layer_from_dict(data: dict[str, Any]) -> LayerSpec:
    """Rebuild a :class:`LayerSpec` (and its nested sequences) from JSON."""
    data = dict(data)
    for key in ("body", "shortcut"):
        data[key] = tuple(layer_from_dict(layer) for layer in data.get(key, ()))
    if "pads" in data:
        data["pads"] = tuple(data["pads"])
    return LayerSpec(**data)


def workload_from_dict(data: dict[str, Any]) -> Workload:
    """Rebuild a :class:`Workload` sent as JSON to a worker."""
    data = dict(data)
    data["layers"] = tuple(layer_from_dict(layer) for layer in data["layers"])
    data["optimizer"] = OptimizerSpec(**data["optimizer"])
    if data.get("transformer") is not None:
        data["transformer"] = TransformerShape(**data["transformer"])
    return Workload(**data)

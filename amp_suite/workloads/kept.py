"""Which layers the framework option ``keep_fp32`` keeps in float32 under AMP, the same in every framework.

``keep_fp32`` lists layer names of the workload (``logits``) and layer kinds
(``layer_norm``, ``dense``).  A kept layer computes in float32: its float16 or
bfloat16 input is cast up, its variables are read in float32, and its output
is cast back to the compute dtype, so the layers around it see what they
would see without it (as for the float32 kinds, ``docs/layers.md``).  Kinds
with bodies (``residual``, ``multiply``) cannot be kept whole: name the
layers inside them.  Under fp32 and tf32 every layer already computes in
float32, so the option changes nothing there (``PrecisionApplied.notes``
says so).
"""

from __future__ import annotations

from collections.abc import Iterable

from amp_suite.errors import UsageError
from amp_suite.records import LayerSpec
from amp_suite.schema import closest
from amp_suite.workloads.kinds import KINDS
from amp_suite.workloads.layers import iter_layers

# The layer kinds keep_fp32 may name: every kind but those made of other layers.
KEEPABLE_KINDS = tuple(name for name, entry in KINDS.items() if not entry.bodies)


def keeps(spec: LayerSpec, kept: Iterable[str]) -> bool:
    """True when ``spec`` is kept in float32: ``kept`` names it or its kind (never a kind with bodies)."""
    names = kept if isinstance(kept, (set, frozenset)) else frozenset(kept)
    return spec.kind in KEEPABLE_KINDS and (spec.kind in names or bool(spec.name) and spec.name in names)


def layer_names(layers: tuple[LayerSpec, ...]) -> tuple[str, ...]:
    """The names of a workload's named layers, in definition order."""
    return tuple(spec.name for spec in iter_layers(layers) if spec.name and spec.kind in KEEPABLE_KINDS)


def check_keep_fp32(names: Iterable[str], workload: str, layers: tuple[LayerSpec, ...], where: str = "keep_fp32"
                    ) -> None:
    """A one-line :class:`UsageError` for a name that is neither a layer of ``workload`` nor a keepable kind."""
    own = layer_names(layers)
    for name in names:
        if name in own or name in KEEPABLE_KINDS:
            continue
        if name in KINDS:
            raise UsageError(f"{where}: {name!r} is a kind made of other layers and cannot be kept whole; name the "
                             f"layers inside it (workload {workload!r} has: {', '.join(own)})")
        raise UsageError(f"{where}: {name!r} is neither a layer of workload {workload!r} nor a layer kind"
                         f"{closest(name, [*own, *KEEPABLE_KINDS])}; allowed: its layers {', '.join(own)}, "
                         f"or the kinds {', '.join(KEEPABLE_KINDS)}")

"""What torch.compile made of a run, read from dynamo's counters (the figures of compiled and cudagraphs modes)."""

from __future__ import annotations

from typing import Any


def _compile_figures(torch: Any) -> dict[str, Any]:
    """What torch.compile made of the run: graphs compiled, graph breaks, recompilations (dynamo's counters) and
    inductor's on-disk cache hits and misses."""
    try:
        from torch._dynamo.utils import counters  # private, read-only: no public accessor in torch 2.13
    except ImportError:
        return {}
    found: dict[str, Any] = dict(counters)
    breaks: dict[str, int] = dict(found.get("graph_break", {}))
    reasons = sorted({(str(reason).splitlines() or [""])[0][:120] for reason in breaks})
    inductor: dict[str, int] = dict(found.get("inductor", {}))
    return {
        "compiled_graphs": int(dict(found.get("stats", {})).get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": "; ".join(reasons)[:600],
        "recompiles": int(sum(dict(found.get("recompiles", {})).values())),
        # cudagraphs mode: graphs inductor ran without CUDA graphs (a mutated input, a CPU tensor ...)
        "cudagraph_skips": int(inductor.get("cudagraph_skips", 0)),
        # graphs inductor loaded from its on-disk cache (TORCHINDUCTOR_CACHE_DIR, else /tmp/torchinductor_$USER,
        # which outlives runs) and graphs it compiled: hits make compile_time_s a warm figure
        "inductor_cache_hits": int(inductor.get("fxgraph_cache_hit", 0)),
        "inductor_cache_misses": int(inductor.get("fxgraph_cache_miss", 0)),
    }

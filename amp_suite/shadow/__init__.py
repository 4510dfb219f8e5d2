"""``amp-suite numerics``: AMP training steps set beside a float32 (and float64) shadow, layer by layer.

``plan`` checks the names and lists the runs (every requested precision plus
the shadows), ``worker`` traces one run's steps in a process of its own
through the ``trace_step`` hook, ``traces`` stores them as ``.npz``,
``command`` runs every process and compares, ``report`` writes
``numerics.jsonl``, ``numerics.md`` and the heatmap.
"""

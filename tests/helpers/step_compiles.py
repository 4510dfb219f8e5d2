"""How many times XLA compiled a JAX-based backend's train step in one probe: ``python -m step_compiles FRAMEWORK OUT``.

Runs the kit's probe in this process (mnist_cnn under amp_fp16, 3 steps in
each of 2 epochs: a loss-scale state carried through every step), counts
JAX's compile events by function, and writes ``{"step": N, "compiles": {name: count}}`` to
``OUT``.  A step traced once can still be compiled twice: ``jax.jit`` keys
its compiles by the arguments' shardings and whether they are committed to a
device, so a first state that differs there from what the step returns makes
the second step compile the whole step again, which a trace counter cannot see.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
from pathlib import Path

# JAX's event for each XLA compile (not for a program read from the cache), as amp_suite_plugins.jax.build_compiles
# counts them; its fun_name is "jit(step)" for the step.
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def main(argv: list[str]) -> int:
    framework, out = argv[0], Path(argv[1])
    import jax

    from amp_suite.testing import ProbeRequest
    from amp_suite.testing.probe import probe

    # A compile the session's persistent cache already holds is loaded, not compiled, and counts nothing.
    jax.config.update("jax_enable_compilation_cache", False)
    compiles: collections.Counter[str] = collections.Counter()

    def count(event: str, duration_secs: float, **labels: str | int) -> None:
        if event == COMPILE_EVENT:
            compiles[str(labels.get("fun_name", ""))] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    request = ProbeRequest(framework=framework, precision="amp_fp16", steps=3, epochs=2)
    with tempfile.TemporaryDirectory() as folder:
        probe(json.loads(request.to_json()), Path(folder))
    out.write_text(json.dumps({"step": compiles["jit(step)"], "compiles": dict(compiles)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

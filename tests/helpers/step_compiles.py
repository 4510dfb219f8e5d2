"""How many times XLA compiled a JAX-based backend's train step in one probe: ``python -m step_compiles FRAMEWORK OUT``.

Runs the kit's probe in this process (mnist_cnn under amp_fp16, 3 steps in
each of 2 epochs: a loss-scale state carried through every step) with JAX's
compile log on, and writes ``{"step": N, "compiles": {name: count}}`` to
``OUT``.  A step traced once can still be compiled twice: ``jax.jit`` keys
its compiles by the arguments' shardings and whether they are committed to a
device, so a first state that differs there from what the step returns makes
the second step compile the whole step again, which a trace counter cannot see.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import sys
import tempfile
from pathlib import Path

# "Finished XLA compilation of jit(step) in 0.76 sec": one line per XLA compile, logged with jax_log_compiles.
COMPILED = re.compile(r"Finished XLA compilation of (?:jit|pjit)\((?P<name>[^)]*)\)")


class _Compiles(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.names: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        found = COMPILED.search(record.getMessage())
        if found:
            self.names[found["name"]] += 1


def main(argv: list[str]) -> int:
    framework, out = argv[0], Path(argv[1])
    import jax

    from amp_suite.testing import ProbeRequest
    from amp_suite.testing.probe import probe

    jax.config.update("jax_log_compiles", True)
    # A compile the session's persistent cache already holds is loaded, not compiled, and logs nothing.
    jax.config.update("jax_enable_compilation_cache", False)
    compiles = _Compiles()
    logger = logging.getLogger("jax")
    logger.addHandler(compiles)
    logger.setLevel(logging.WARNING)
    request = ProbeRequest(framework=framework, precision="amp_fp16", steps=3, epochs=2)
    with tempfile.TemporaryDirectory() as folder:
        probe(json.loads(request.to_json()), Path(folder))
    out.write_text(json.dumps({"step": compiles.names["step"], "compiles": dict(compiles.names)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

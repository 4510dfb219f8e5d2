"""Run before a release: the cross-framework backbone comparisons on the full-width networks.

The test suite compares PyTorch, Keras and JAX on every layer and block of
MobileNet and EfficientNet-B0, at 32x32, but at about a quarter of their
width (``tests/helpers/narrow_backbones.py``), so that each probe compiles
and runs in seconds on a 2-core CPU.  This script runs the very same test
module, ``tests/test_new_layer_kinds.py``, on the full networks (3.2 and 4.0
million parameters) by setting ``AMP_SUITE_FULL_SIZE=1`` for it: fp32
logits, losses and the change of every variable over three Adam steps with
dropout and stochastic depth, and the float64 steps checked to 1e-4, with the
tolerances measured on the full networks.  It used 542 s of CPU on a 2-core
Intel Xeon (37 minutes there beside other jobs): Keras's and XLA's compiles
of a 4-million-parameter step, and float64 depthwise convolutions.  Its
XLA compiles run LLVM at XLA's default level, as a user's runs do (the test
session runs it at 0: ``tests/conftest.py``).  It is not part of
``python -m pytest``.

    python benchmarks/full_size_comparisons.py [PYTEST ARGUMENTS ...]

Extra arguments go to pytest (``-k efficientnet``, ``-x``, ``--durations=20``).
The exit status is pytest's: 0 when every comparison passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The test modules whose comparisons take their full-size networks from AMP_SUITE_FULL_SIZE.
MODULES = ("tests/test_new_layer_kinds.py",)


def main(argv: list[str] | None = None) -> int:
    extra = sys.argv[1:] if argv is None else argv
    if extra[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    # XLA's LLVM stage at its default level (3), which the test session otherwise lowers to 0 (tests/conftest.py):
    # the release comparisons compile as a user's runs do.
    sys.path.insert(0, str(REPO / "tests" / "helpers"))
    from suite_cli import xla_flags_at

    environment = {**os.environ, "AMP_SUITE_FULL_SIZE": "1", "XLA_FLAGS": xla_flags_at(3)}
    command = [sys.executable, "-m", "pytest", *MODULES, "-m", "slow", "-n", "0", "--durations=20", *extra]
    print("full-size comparisons (run before a release):", " ".join(command[1:]), flush=True)
    return subprocess.run(command, cwd=REPO, env=environment).returncode


if __name__ == "__main__":
    sys.exit(main())

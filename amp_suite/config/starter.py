"""The commented starter ``benchmarks.toml`` that ``amp-suite init`` writes.

Every line of it is a comment, so it loads to the packaged catalog unchanged.
Its ``[defaults]`` block (with ``[defaults.on_cpu]`` and ``[defaults.on_gpu]``) is copied from the catalog's
own ``defaults.toml``
(the values are declared once, there), so uncommenting the block starts from
exactly what the catalog holds.
"""

from __future__ import annotations

from amp_suite.config.catalog import CATALOG_DIR

HEADER = """\
# benchmarks.toml: this directory's amp-suite configuration (written by `amp-suite init`).
#
# It extends the catalog shipped inside amp-suite: the sweep defaults, the workloads, the
# presets and the articles' published figures (`amp-suite list` shows each workload and preset
# with the file it comes from).  A table defined here replaces the packaged table of the same
# name as a whole; everything else stays as packaged.  Flags of `amp-suite run` still override
# [defaults] and presets.  Every line below is a comment: uncomment what you want to change.
# docs/usage.md describes every key.
"""

DEFAULTS_INTRO = """
# [defaults] here replaces the packaged [defaults] as one table: a key left out takes
# amp-suite's built-in value, not the packaged one, and its sub-tables go with it: what
# [defaults.on_cpu] and [defaults.on_gpu] change on that kind of device.  These are the
# packaged values; uncomment the whole block to start from them.
#
"""

REST = """
# A workload of your own, or a packaged one redefined under its name (the whole table).
#
# [workloads.my_cnn]
# model = "mnist_cnn"            # an architecture of docs/workloads.md (mnist_cnn, resnet18, ...)
# description = "the MNIST CNN at 64x64"
# input_size = 64
# channels = 1
# num_classes = 10
# batch_size = 64
# optimizer = "adam"             # sgd | rmsprop | adam
# learning_rate = 1e-3

# A preset of your own: `amp-suite run --preset my-preset` (docs/presets.md).  Its keys are
# those of [defaults], plus description (one line), notes, published and fit_devices.
#
# [presets.my-preset]
# description = "the MNIST CNN at 64x64, fp32 vs amp_bf16"
# workloads = ["my_cnn"]
# precisions = ["fp32", "amp_bf16"]
# steps = 30

# Options handed to one framework's plugin (this table replaces the packaged one).
#
# [frameworks.torch]
# channels_last = true

# The price of this machine: cost columns in the report (--price-per-hour overrides it).
#
# [cost]
# price_per_hour = 0.526
# currency = "USD"
"""


def _packaged_defaults() -> list[str]:
    """The ``[defaults]`` table of the catalog's ``defaults.toml`` and its device-kind tables
    (``[defaults.on_cpu]``, ``[defaults.on_gpu]``): their headers and key lines.

    The device-kind tables belong to the block: a ``[defaults]`` of a file replaces the packaged
    one with its sub-tables, so a block without them would add tf32 cells on a CPU and time a GPU
    with the CPU's 20 steps.
    """
    lines: list[str] = []
    inside = False
    for line in (CATALOG_DIR / "defaults.toml").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped == "[defaults]" or stripped.startswith("[defaults.")
            if inside:
                lines.append(stripped)
            continue
        if inside and stripped and not stripped.startswith("#"):
            lines.append(line)
    return lines


def starter_text() -> str:
    """The starter file: a header, the packaged ``[defaults]`` and examples, all commented."""
    defaults = "".join(f"# {line}\n" for line in _packaged_defaults())
    return HEADER + DEFAULTS_INTRO + defaults + REST

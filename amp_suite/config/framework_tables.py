"""The ``[frameworks.NAME]`` tables: the options each may set (the plugin's and the common ones), their docs table."""

from __future__ import annotations

from typing import Any

from amp_suite.precision import LOSS_SCALINGS
from amp_suite.records import FrameworkInfo
from amp_suite.schema import Field

# Options every framework plugin reads (amp_suite.plugins.kit: loss scaling of amp_fp16, layers kept in float32;
# amp_suite.config.precision_options checks them against the sweep's precisions and workloads).
COMMON_FRAMEWORK_OPTIONS: dict[str, Field] = {
    "initial_loss_scale": Field(float, above=0, maximum=2.0**64),
    "loss_scale_growth_interval": Field(int, minimum=1, maximum=1_000_000_000),
    "loss_scaling": Field(str, choices=tuple(LOSS_SCALINGS)),
    "keep_fp32": Field(tuple, names=True),
}


# The frameworks of the packaged plugins: their tables (the catalog has some) are accepted on a
# machine where the plugin is not loaded, so one config serves every machine.
BUILT_IN_FRAMEWORKS = ("torch", "keras", "keras@jax", "keras@torch", "jax")


def framework_option_fields(framework: FrameworkInfo) -> dict[str, Field]:
    """The options ``[frameworks.NAME]`` may set: those the plugin declares, then the common ones."""
    return {**{name: option.schema for name, option in framework.options.items()}, **COMMON_FRAMEWORK_OPTIONS}


def framework_options_table(frameworks: dict[str, FrameworkInfo]) -> str:
    """The markdown table of every framework option (``docs/usage.md`` holds it for the built-in plugins)."""
    from amp_suite.config.settings import describe

    rows = ["| framework | option | values | default | what it sets |", "|---|---|---|---|---|"]
    for name, info in frameworks.items():
        for option, spec in info.options.items():
            rows.append(f"| `{name}` | `{option}` | {describe(spec.schema)} | `{_toml_text(spec.default)}` | "
                        f"{' '.join(spec.help.split())} |")
    return "\n".join(rows)


def _toml_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)

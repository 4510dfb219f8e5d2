"""What differs between two sweeps' environments: versions, device, CPU flags and the settings compared.

``amp-suite compare`` lists these above its tables, so a change of speed can
be read beside a change of library or machine.  A side with no usable
``environment.json`` (this machine stood in for it) is said to be unknown
rather than compared.
"""

from __future__ import annotations

from typing import Any

from amp_suite.config.settings import COMPARED_SETTINGS

# Environment entries whose differences are listed (nested dicts are compared key by key).
ENVIRONMENT_KEYS = ("amp_suite_version", "git_commit", "python", "platform", "cpu_model", "cpu_count", "cpu_flags",
                    "gpus", "packages")


def environment_differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``name: BASE → NEW`` for every recorded version, device, flag and setting that differs; where a side has
    no usable ``environment.json`` (this machine stands in for it), a line saying so instead."""
    missing = [f"{name}'s {side['environment_substituted']}" for name, side in (("BASE", base), ("NEW", new))
               if isinstance(side.get("environment_substituted"), str)]
    if missing:
        return [f"{' and '.join(missing)}: its machine, versions and settings are unknown, so none is compared "
                "(this machine's are not the sweep's)"]
    lines = []

    def differ(name: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) or isinstance(b, dict):
            a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
            for sub in sorted(set(a) | set(b)):
                differ(f"{name}.{sub}", a.get(sub), b.get(sub))
            return
        if name == "cpu_flags" and isinstance(a, list) and isinstance(b, list):
            gone, added = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            if gone or added:
                lines.append("cpu_flags: " + ", ".join([*(f"-{f}" for f in gone), *(f"+{f}" for f in added)]))
            return
        if a != b and _shown(a) != _shown(b):  # an absent list and an empty one both read "(none)": no change
            lines.append(f"{name}: {_shown(a)} → {_shown(b)}")

    for key in ENVIRONMENT_KEYS:
        if key == "gpus":
            differ("gpus", ", ".join(g.get("name", "?") for g in base.get("gpus") or []) or "none",
                   ", ".join(g.get("name", "?") for g in new.get("gpus") or []) or "none")
        else:
            differ(key, base.get(key), new.get(key))
    a_settings, b_settings = base.get("settings") or {}, new.get("settings") or {}
    for key in COMPARED_SETTINGS:  # those declared compared=True in amp_suite/config/settings.py
        differ(f"settings.{key}", a_settings.get(key), b_settings.get(key))
    return lines


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return " ".join(str(value).split())

"""Records the environment beside every number, without importing a framework.

Framework versions come from installed package metadata; the device a run
really used is recorded by the worker (see :mod:`amp_suite.cell.worker`).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from amp_suite.markers import __version__

# CPU flags that decide whether reduced precision can be fast on a CPU.
CPU_FLAGS_OF_INTEREST = (
    "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
    "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
)
# Distributions whose versions change results.
PACKAGES = (
    "torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib",
    "dm-haiku", "jmp", "optax", "numpy", "pluggy",
)


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_info(cpuinfo_text: str | None = None) -> dict[str, Any]:
    """CPU model and the flags of interest, from ``/proc/cpuinfo`` on Linux."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo_text = ""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return {
        "cpu_model": model,
        "cpu_flags": [f for f in CPU_FLAGS_OF_INTEREST if f in flags],
        "cpu_count": os.cpu_count(),
    }


def gpu_info() -> list[dict[str, Any]]:
    """NVIDIA GPUs as ``nvidia-smi`` reports them, with clocks, power limit and MIG (empty without a driver).

    ``mig_mode`` is ``nvidia-smi``'s current MIG mode (``Enabled``/``Disabled``;
    ``""`` where it does not say) and ``mig_profiles`` the profiles of the MIG
    devices on that GPU (``["1g.10gb", ...]``): a slice has a fraction of the
    GPU's peak.
    """
    from amp_suite.machine.devices import detect_nvidia, find_smi

    gpus = detect_nvidia().gpus
    modes, profiles = mig_layout(find_smi()) if gpus else ({}, {})
    return [{"name": g.name, "driver": g.driver,
             "memory": f"{g.memory_total_mib:.0f} MiB" if g.memory_total_mib is not None else "",
             "compute_capability": g.compute_capability, "sm_clock_max_mhz": g.sm_clock_max_mhz,
             "memory_clock_max_mhz": g.memory_clock_max_mhz, "power_limit_w": g.power_limit_w,
             "mig_mode": modes.get(g.index, ""), "mig_profiles": profiles.get(g.index, [])}
            for g in gpus]


def _smi(smi: str, *args: str) -> str | None:
    from amp_suite.machine.devices import ask_smi

    return ask_smi(smi, *args)


def parse_mig_modes(text: str) -> dict[int, str]:
    """``index, mig.mode.current`` CSV rows -> {index: "Enabled"/"Disabled"}; ``[N/A]`` is left out."""
    modes = {}
    for line in (text or "").strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1] in ("Enabled", "Disabled"):
            modes[int(parts[0])] = parts[1]
    return modes


def parse_mig_devices(text: str) -> dict[int, list[str]]:
    """``nvidia-smi -L`` -> {GPU index: [MIG profile of each MIG device under it]}."""
    found: dict[int, list[str]] = {}
    current = None
    for line in (text or "").splitlines():
        gpu = re.match(r"\s*GPU (\d+):", line)
        if gpu:
            current = int(gpu.group(1))
            continue
        mig = re.match(r"\s+MIG (\S+)\s+Device", line)
        if mig and current is not None:
            found.setdefault(current, []).append(mig.group(1))
    return found


def mig_layout(smi: str | None) -> tuple[dict[int, str], dict[int, list[str]]]:
    """MIG modes and MIG device profiles per GPU index (empty when ``nvidia-smi`` does not tell)."""
    if not smi:
        return {}, {}
    modes = parse_mig_modes(_smi(smi, "--query-gpu=index,mig.mode.current", "--format=csv,noheader") or "")
    devices = parse_mig_devices(_smi(smi, "-L") or "") if "Enabled" in modes.values() else {}
    return modes, devices


def git_commit(package: Path | None = None) -> str | None:
    """The commit of the amp-suite checkout, when it runs from one.

    ``package`` is the ``amp_suite`` package folder (this one by default).
    Only a repository whose top level is the folder above it -- amp-suite's own
    source root -- counts: a copy unpacked from a source archive inside
    another repository has no commit of its own, and gets None rather than
    that repository's commit.
    """
    where = (package or Path(__file__).resolve().parent.parent).resolve()
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short=12", "HEAD"], cwd=where,
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or len(lines) != 2 or not _same_folder(Path(lines[0]), where.parent):
        return None
    out.stdout = lines[1]
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def memory_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def host_environment(distributions: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything about this machine a reader needs to trust a figure.

    ``distributions`` (name -> version) are added to the fixed package list:
    the plugin host passes every framework plugin's distributions and every
    plugin's own distribution (:meth:`amp_suite.plugins.host.PluginHost.distributions`).
    """
    return {
        "amp_suite_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **cpu_info(),
        "memory_total_bytes": memory_total_bytes(),
        "gpus": gpu_info(),
        "packages": {**{p: v for p in PACKAGES if (v := package_version(p))}, **(distributions or {})},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }

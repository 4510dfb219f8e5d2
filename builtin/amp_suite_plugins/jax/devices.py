"""The devices a JAX process trains on, shared by every backend that runs on JAX (``jax``, ``keras@jax``).

Nothing here imports JAX at module level: :func:`split_host_devices` must run before JAX starts.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from amp_suite.errors import UnsupportedError
from amp_suite.plugins.kit import cpu_device, require_device_kind
from amp_suite.records import DeviceInfo, RunSpec


def split_host_devices(run: RunSpec) -> None:
    """Split the CPU into this process's devices: the XLA flag before JAX starts, else JAX's own option."""
    count = run.devices // run.nnodes
    if "jax" not in sys.modules:
        flag = f"--xla_force_host_platform_device_count={count}"
        os.environ["XLA_FLAGS"] = " ".join(
            [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(flag.split("=")[0])] + [flag])
    else:
        import jax

        jax.config.update("jax_num_cpu_devices", count)


def gpu_platform(platform: str, platform_version: str) -> str:
    """``DeviceInfo.platform`` of a JAX GPU: ``cuda`` or ``rocm``, as the other frameworks name it.  JAX calls
    both ``gpu``; its client's platform version says which (``cuda 13000``, ``rocm 60342``)."""
    for name in ("cuda", "rocm"):
        if platform_version.lower().startswith(name):
            return name
    return platform


def jax_device_info(jax: Any, run: RunSpec) -> DeviceInfo:
    """The device ``run`` trains on as JAX sees it (after the platform is chosen): its GPUs, else the CPU;
    a data-parallel cell that asks for more devices than JAX sees is unsupported."""
    try:
        gpus = jax.devices("gpu") if run.device != "cpu" else []
    except RuntimeError:
        gpus = []
    if require_device_kind(run, bool(gpus), "JAX") == "cpu":
        if run.distributed and len(jax.devices("cpu")) < run.devices:
            raise UnsupportedError(f"{run.devices} devices asked for, JAX sees {len(jax.devices('cpu'))} CPU devices")
        return dataclasses.replace(cpu_device(), count=run.devices)
    if run.distributed and len(gpus) < run.devices:
        raise UnsupportedError(f"{run.devices} devices asked for, JAX sees {len(gpus)} GPUs")
    dev = gpus[0]
    capability = str(getattr(dev, "compute_capability", "") or "")
    major = int(capability.split(".")[0]) if capability[:1].isdigit() else 0
    stats = dev.memory_stats() or {}
    version = str(getattr(dev.client, "platform_version", ""))
    return DeviceInfo(
        kind="gpu",
        platform=gpu_platform(dev.platform, version),
        name=dev.device_kind,
        count=run.devices if run.distributed else len(gpus),
        driver=version,
        compute_capability=capability,
        memory_total_bytes=stats.get("bytes_limit"),
        supports_tf32=major >= 8,
    )

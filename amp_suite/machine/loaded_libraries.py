"""The CUDA libraries a process really loaded, and the environment variables that change numerics.

A framework's build information names the CUDA runtime and cuDNN it was
compiled against; the process may load others (pip's ``nvidia-*`` wheels, a
system copy on ``LD_LIBRARY_PATH``). :func:`loaded_cuda_libraries` reads the
process's memory map, so it reports what is loaded, with each library's path.
Nothing here imports a framework, and nothing here loads a library that is
not loaded already.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

# Library key -> the file name stem before ".so".
CUDA_LIBRARIES: dict[str, str] = {
    "cudart": "libcudart",
    "cudnn": "libcudnn",
    "cublas": "libcublas",
    "cublasLt": "libcublasLt",
    "nccl": "libnccl",
}
UNKNOWN_VERSION = "version unknown"
_SO_NAME = re.compile(r"^(lib[A-Za-z]+)\.so((?:\.\d+)*)$")

# Environment variables that change numerics or speed when set.
NUMERICS_VARIABLES = (
    "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "XLA_FLAGS", "TF_XLA_FLAGS",
    "TF_GPU_THREAD_MODE", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "TF_ENABLE_ONEDNN_OPTS",
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH", "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS",
    # Instruction-set caps: PyTorch's kernels, and oneDNN's (PyTorch's bfloat16 convolutions and matrix products;
    # TensorFlow's): a bfloat16 step of a small CNN took 32 ms on an AMX CPU and 1,040 ms with both at AVX2.
    "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
    # oneDNN's implicit down-conversion of float32 math (bf16, tf32), and TensorFlow's thread pools.
    "ONEDNN_DEFAULT_FPMATH_MODE", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
    # Compile caches that outlive a run: a hit takes compiling out of the warm-up figures.
    "JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
)
NUMERICS_VARIABLE_PREFIXES = ("NCCL_",)


def _major_minor_patch(code: int, major_unit: int) -> str:
    return f"{code // major_unit}.{(code % major_unit) // 100}.{code % 100}"


def cudnn_version_text(code: int) -> str:
    """``cudnnGetVersion()`` as text: 91900 -> ``9.19.0`` (cuDNN 9+), 8907 -> ``8.9.7`` (cuDNN 8 and older)."""
    return _major_minor_patch(code, 10000 if code >= 90000 else 1000)


def cudart_version_text(code: int) -> str:
    """``cudaRuntimeGetVersion`` as text: 13000 -> ``13.0``, 12090 -> ``12.9``."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def nccl_version_text(code: int) -> str:
    """``ncclGetVersion`` as text: 22703 -> ``2.27.3`` (NCCL >= 2.9), 2708 -> ``2.7.8`` (older)."""
    return _major_minor_patch(code, 10000 if code >= 10000 else 1000)


def cublaslt_version_text(code: int) -> str:
    """``cublasLtGetVersion()`` as text: 120901 -> ``12.9.1``."""
    return _major_minor_patch(code, 10000)


def _open_loaded(path: str) -> ctypes.CDLL:
    """The library at ``path`` if this process has it loaded already (``RTLD_NOLOAD``), else OSError."""
    return ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1))


def _int_out(function: Callable[..., int], *args: int) -> int | None:
    """Calls ``function(*args, int*)`` (a status-returning C function); the int, or None on a non-zero status."""
    value = ctypes.c_int(0)
    if function(*args, ctypes.byref(value)) != 0:
        return None
    return value.value


def library_version_from_code(key: str, path: str) -> str | None:
    """The version the loaded library at ``path`` reports through its own version function, or None."""
    try:
        library = _open_loaded(path)
        if key == "cudnn":
            library.cudnnGetVersion.restype = ctypes.c_size_t
            return cudnn_version_text(int(library.cudnnGetVersion()))
        if key == "cudart":
            code = _int_out(library.cudaRuntimeGetVersion)
            return None if code is None else cudart_version_text(code)
        if key == "nccl":
            code = _int_out(library.ncclGetVersion)
            return None if code is None else nccl_version_text(code)
        if key == "cublas":  # libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2
            parts = [_int_out(library.cublasGetProperty, kind) for kind in (0, 1, 2)]
            return None if None in parts else ".".join(map(str, parts))
        if key == "cublasLt":
            library.cublasLtGetVersion.restype = ctypes.c_size_t
            return cublaslt_version_text(int(library.cublasLtGetVersion()))
    except (OSError, AttributeError, ValueError, TypeError):
        return None
    return None


def mapped_library_paths(maps_text: str) -> dict[str, list[str]]:
    """Library key -> the distinct paths of that library in a ``/proc/<pid>/maps`` text, in map order."""
    found: dict[str, list[str]] = {}
    stems = {stem: key for key, stem in CUDA_LIBRARIES.items()}
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5].removesuffix(" (deleted)")
        match = _SO_NAME.match(Path(path).name)
        if match and match.group(1) in stems:
            paths = found.setdefault(stems[match.group(1)], [])
            if path not in paths:
                paths.append(path)
    return found


def version_from_file_name(path: str) -> str | None:
    """The full version in a library's file name (``libcudnn.so.9.19.0`` -> ``9.19.0``); None for ``.so.9``."""
    match = _SO_NAME.match(Path(path).name)
    if not match:
        return None
    parts = match.group(2).lstrip(".").split(".")
    return ".".join(parts) if len(parts) >= 3 else None


def loaded_cuda_libraries(maps_path: str | Path = "/proc/self/maps", *,
                          version_from_code: Callable[[str, str], str | None] = library_version_from_code,
                          ) -> dict[str, str]:
    """The CUDA runtime, cuDNN, cuBLAS, cuBLASLt and NCCL this process has loaded, with versions.

    For each library found in the memory map: ``<key>`` (its version) and
    ``<key>_path``; keys are ``cudart``, ``cudnn``, ``cublas``, ``cublasLt``,
    ``nccl``. The version comes from the file name when it carries a full one
    (``libcudart.so.13.0.96``), else from the library's own version function
    called on the already-loaded copy (``cudnnGetVersion``,
    ``cudaRuntimeGetVersion``, ``cublasGetProperty``, ``cublasLtGetVersion``,
    ``ncclGetVersion``), else it is ``"version unknown"``. Two copies of one
    library (e.g. CUDA 12 and CUDA 13 runtimes) are both listed, joined by
    ``"; "`` in map order. Empty when nothing is loaded or the map is
    unreadable; never raises.
    """
    try:
        maps_text = Path(maps_path).read_text(errors="replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    try:
        for key, paths in mapped_library_paths(maps_text).items():
            versions = []
            for path in paths:
                version = version_from_file_name(path)
                if version is None:
                    try:
                        version = version_from_code(key, path)
                    except Exception:
                        version = None
                versions.append(version or UNKNOWN_VERSION)
            found[key] = "; ".join(versions)
            found[f"{key}_path"] = "; ".join(paths)
    except Exception:  # a malformed map is no reason to fail a run
        pass
    return found


def numerics_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The set environment variables that change numerics or speed (TF32 overrides, XLA flags,
    allocator settings, visible devices, thread counts, instruction-set caps, compile caches, every ``NCCL_*``),
    sorted by name."""
    return {name: environ[name] for name in sorted(environ)
            if name in NUMERICS_VARIABLES or name.startswith(NUMERICS_VARIABLE_PREFIXES)}

"""The doctor's judges of a GPU set-up: the device a framework sees, its NVIDIA driver, cuDNN, and telling log lines."""

from __future__ import annotations

import os
import re
from typing import Any

from amp_suite.doctor.check_result import FAILED, PASSED, SKIPPED, CheckResult, _error

# The oldest driver branch each CUDA major version runs on (NVIDIA's CUDA
# compatibility guide, "Minor Version Compatibility": 580 for 13.x, 525 for
# 12.x, 450 for 11.x).
DRIVER_FOR_CUDA = {13: 580, 12: 525, 11: 450}


# Lines of a probe's stderr (framework logs) worth showing beside a failure.
LOG_PATTERN = re.compile(
    r"could not load dynamic library|cannot dlopen|dlerror|libcudnn|libcublas|libcuda\b|cudnn version|"
    r"loaded runtime cudnn|driver version|cuda driver|cuinit|cuda_error|jax plugin configuration error|"
    r"unable to initialize backend|failed to initialize|nvidia gpu may be present|too old|insufficient",
    re.IGNORECASE)


MAX_NOTES = 3


def _major(capability: str) -> int:
    head = str(capability or "").split(".")[0]
    return int(head) if head.isdigit() else 0


def driver_branch(driver: str | None) -> int | None:
    """``"580.159.04"`` -> 580; None when the text holds no driver version."""
    match = re.match(r"\s*(\d+)\.\d", str(driver or ""))
    return int(match.group(1)) if match else None


def leading_number(version: Any) -> int | None:
    """The major number of a version text (``"13.0"`` -> 13, ``"9.20.0"`` -> 9), if any."""
    match = re.match(r"\s*(\d+)", str(version or ""))
    return int(match.group(1)) if match else None


def driver_problem(machine_driver: str | None, cuda_build: str | None) -> str | None:
    """Why this machine's driver cannot run a framework built for CUDA ``cuda_build``; None if it can."""
    branch, major = driver_branch(machine_driver), leading_number(cuda_build)
    need = DRIVER_FOR_CUDA.get(major) if major is not None else None
    if branch is None or need is None or branch >= need:
        return None
    return (f"the NVIDIA driver {machine_driver} is too old for a CUDA {cuda_build} build (needs >= {need}); "
            f"fix: update the NVIDIA driver to >= {need}, or install a build of the framework for an older CUDA")


def cudnn_builds(libraries: list[str] | None) -> list[str]:
    """The cuDNN builds among loaded library paths: one entry per folder and major version."""
    builds: dict[str, None] = {}
    for path in libraries or []:
        match = re.match(r"libcudnn(?:_[a-z_]+)?\.so\.(\d+)", os.path.basename(str(path)))
        if match:
            builds.setdefault(f"cuDNN {match.group(1)} from {os.path.dirname(str(path)) or '.'}", None)
    return list(builds)


def cudnn_problem(section: dict[str, Any] | None) -> str | None:
    """Two cuDNN builds in one process, or one the framework was not built against; None if fine."""
    section = section or {}
    builds = cudnn_builds(section.get("cudnn_libraries"))
    if len(builds) > 1:
        return (f"two cuDNN builds are loaded: {builds[0]} and {builds[1]}; fix: keep one — remove the folder "
                "of the one the framework does not ship with from LD_LIBRARY_PATH (or uninstall that copy), "
                "or install the frameworks in separate environments")
    compiled, loaded = leading_number(section.get("cudnn_compiled")), leading_number(section.get("cudnn"))
    if compiled is not None and loaded is not None and compiled != loaded:
        where = f" ({builds[0]})" if builds else ""
        return (f"built against cuDNN {section.get('cudnn_compiled')} but cuDNN {section.get('cudnn')} is "
                f"loaded{where}; fix: keep only the cuDNN {compiled} the framework's wheels bring — drop other "
                "cuDNN folders from LD_LIBRARY_PATH")
    return None


def log_notes(lines: list[str] | None, limit: int = MAX_NOTES) -> list[str]:
    """The lines of a framework's log that say why a GPU could not be used (deduplicated, in order)."""
    found: dict[str, None] = {}
    for line in lines or []:
        text = " ".join(str(line).split())
        if text and LOG_PATTERN.search(text):
            found.setdefault(text[:300], None)
    return list(found)[:limit]


def diagnose(section: dict[str, Any] | None, *, machine_driver: str, install_line: str,
             notes: list[str] | None = None) -> str:
    """Why a framework does not use the GPU, and the fix that matches the cause.

    Causes, first match wins: a driver older than the framework's CUDA build
    needs; two cuDNN builds loaded; a CPU-only build (the install line); a CUDA
    build whose GPU backend failed to start (the reason it gave, and the
    install line only when the reason names none of the causes above).
    """
    section = section or {}
    reason = " ".join(str(section.get("gpu_error") or "").split())[:500]
    captured = log_notes([reason, *(section.get("log_notes") or []), *(notes or [])])
    said = f" (framework says: {' | '.join(captured)})" if captured else ""
    build = section.get("cuda_build_version")
    problem = driver_problem(machine_driver, build) if section.get("cuda_build") else None
    if problem is None and section.get("cuda_build") and re.search(
            r"driver version is insufficient|driver.{0,40}too old|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|"
            r"older than the CUDA", reason + " " + " ".join(captured), re.IGNORECASE):
        need = DRIVER_FOR_CUDA.get(leading_number(build) or 0)
        target = f">= {need}" if need else "the version its CUDA build needs"
        problem = f"the NVIDIA driver {machine_driver or '?'} is too old; fix: update the NVIDIA driver to {target}"
    if problem is None:
        problem = cudnn_problem(section)
    if problem is not None:
        return f"{problem}{said}"
    if not section.get("cuda_build"):
        return f"a CPU-only build{said}; fix: {install_line}"
    if reason:
        others = [note for note in captured if note != reason[:300]]
        also = f" (framework says: {' | '.join(others)})" if others else ""
        return f"a CUDA build whose GPU backend failed to start: {reason}{also}; fix: {install_line}"
    return f"a CUDA build that sees no GPU{said}; fix: {install_line}"


def judge_device(scope: str, section: dict[str, Any] | None, *, expect_gpu: bool, machine: str,
                 install_line: str, machine_driver: str = "", notes: list[str] | None = None) -> CheckResult:
    """The framework sees the device the user expects: a CUDA GPU on a GPU machine, else the CPU."""
    check = "sees the expected device"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    if section.get("kind") == "gpu":
        facts = [section.get("name") or "a GPU",
                 f"sm {section['compute_capability']}" if section.get("compute_capability") else "",
                 f"driver {section['driver']}" if section.get("driver") else "",
                 f"CUDA {section['cuda_runtime']}" if section.get("cuda_runtime") else "",
                 f"cuDNN {section['cudnn']}" if section.get("cudnn") else ""]
        return CheckResult(scope, check, PASSED, "GPU: " + ", ".join(f for f in facts if f))
    build = "a CUDA build" if section.get("cuda_build") else "a CPU-only build"
    if expect_gpu:
        why = diagnose(section, machine_driver=machine_driver, install_line=install_line, notes=notes)
        return CheckResult(scope, check, FAILED, f"sees no GPU on a machine with {machine}: {why}")
    return CheckResult(scope, check, PASSED, f"CPU ({build}; {machine})")


def judge_cudnn(scope: str, section: dict[str, Any] | None, *, on_gpu: bool) -> CheckResult:
    """One cuDNN build in the process, the major version the framework was built against."""
    check = "one cuDNN build loaded"
    if not on_gpu:
        return CheckResult(scope, check, SKIPPED, "cuDNN is loaded only with a GPU")
    if (bad := _error(scope, check, section)) is not None:
        return bad
    problem = cudnn_problem(section)
    if problem:
        return CheckResult(scope, check, FAILED, problem)
    builds = cudnn_builds((section or {}).get("cudnn_libraries"))
    return CheckResult(scope, check, PASSED, builds[0] if builds else "no libcudnn mapped (none used yet)")

"""amp_suite.machine.loaded_libraries with fake memory maps and a fake environment."""

from __future__ import annotations

from pathlib import Path

from amp_suite.machine import loaded_libraries as ll

SITE = "/venv/lib/python3.11/site-packages/nvidia"
MAPS = f"""\
7f0000000000-7f0000100000 r--p 00000000 08:01 1234 {SITE}/cudnn/lib/libcudnn.so.9.19.0
7f0000100000-7f0000200000 r-xp 00100000 08:01 1234 {SITE}/cudnn/lib/libcudnn.so.9.19.0
7f0000200000-7f0000300000 r--p 00000000 08:01 1235 {SITE}/cudnn/lib/libcudnn_ops.so.9
7f0000300000-7f0000400000 r--p 00000000 08:01 1236 {SITE}/cu13/lib/libcudart.so.13.0.96
7f0000400000-7f0000500000 r--p 00000000 08:01 1237 {SITE}/nccl/lib/libnccl.so.2
7f0000500000-7f0000600000 r--p 00000000 08:01 1238 {SITE}/cu13/lib/libcublas.so.13
7f0000600000-7f0000700000 r--p 00000000 08:01 1239 {SITE}/cu13/lib/libcublasLt.so.13
7f0000700000-7f0000800000 r--p 00000000 08:01 1240 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000800000-7f0000900000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00100000 rw-p 00000000 00:00 0 [stack]
"""


def test_versions_from_file_names_and_from_the_libraries_own_functions(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    asked: list[tuple[str, str]] = []

    def fake_query(key: str, path: str) -> str | None:
        asked.append((key, path))
        return {"nccl": ll.nccl_version_text(22703), "cublas": "13.1.0"}.get(key)

    found = ll.loaded_cuda_libraries(maps, version_from_code=fake_query)
    assert found["cudnn"] == "9.19.0"
    assert found["cudnn_path"] == f"{SITE}/cudnn/lib/libcudnn.so.9.19.0"  # once, not libcudnn_ops
    assert found["cudart"] == "13.0.96"
    assert found["nccl"] == "2.27.3" and found["nccl_path"].endswith("libnccl.so.2")
    assert found["cublas"] == "13.1.0"
    assert found["cublasLt"] == ll.UNKNOWN_VERSION and found["cublasLt_path"].endswith("libcublasLt.so.13")
    assert sorted(key for key, _ in asked) == ["cublas", "cublasLt", "nccl"]  # full names need no call
    assert not any("libc.so" in value for value in found.values())


def test_two_copies_of_one_library_are_both_listed(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(MAPS + f"7f1000000000-7f1000100000 r--p 00000000 08:01 9 {SITE}/cuda_runtime/lib/libcudart.so.12\n")
    found = ll.loaded_cuda_libraries(maps, version_from_code=lambda key, path: "12.9")
    assert found["cudart"] == "13.0.96; 12.9"
    assert found["cudart_path"].count(";") == 1


def test_unreadable_or_empty_maps_give_nothing(tmp_path: Path) -> None:
    assert ll.loaded_cuda_libraries(tmp_path / "missing") == {}
    (tmp_path / "maps").write_text("garbage line\n\n")
    assert ll.loaded_cuda_libraries(tmp_path / "maps") == {}


def test_a_library_that_is_not_loaded_is_never_loaded() -> None:
    assert ll.library_version_from_code("cudnn", "/nonexistent/libcudnn.so.9") is None


def test_this_process_without_cuda() -> None:
    found = ll.loaded_cuda_libraries()  # the real /proc/self/maps; this venv has no CUDA library loaded
    assert isinstance(found, dict)
    assert all(isinstance(v, str) for v in found.values())


def test_version_codes() -> None:
    assert ll.cudnn_version_text(91900) == "9.19.0"
    assert ll.cudnn_version_text(8907) == "8.9.7"
    assert ll.cudart_version_text(13000) == "13.0"
    assert ll.cudart_version_text(12090) == "12.9"
    assert ll.nccl_version_text(22703) == "2.27.3"
    assert ll.nccl_version_text(2708) == "2.7.8"
    assert ll.cublaslt_version_text(120901) == "12.9.1"
    assert ll.version_from_file_name("/x/libcudnn.so.9") is None
    assert ll.version_from_file_name("/x/libcublas.so.12.4.5.8") == "12.4.5.8"


def test_numerics_environment_keeps_only_what_changes_numerics() -> None:
    environ = {"NVIDIA_TF32_OVERRIDE": "0", "XLA_FLAGS": "--xla_gpu_autotune_level=0", "NCCL_ALGO": "Ring",
               "NCCL_DEBUG": "INFO", "HOME": "/root", "PATH": "/bin", "OMP_NUM_THREADS": "2",
               "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "NCCLX": "not nccl"}
    assert ll.numerics_environment(environ) == {
        "NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "NVIDIA_TF32_OVERRIDE": "0", "OMP_NUM_THREADS": "2",
        "XLA_FLAGS": "--xla_gpu_autotune_level=0", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    assert ll.numerics_environment({}) == {}


def test_numerics_environment_records_instruction_set_caps_and_compile_caches() -> None:
    # an AVX2 cap makes a PyTorch bfloat16 step about 30x slower on an AMX CPU; a warm compile cache shortens warm-up
    environ = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ONEDNN_DEFAULT_FPMATH_MODE": "BF16",
               "JAX_COMPILATION_CACHE_DIR": "/cache/jax", "TORCHINDUCTOR_CACHE_DIR": "/cache/inductor",
               "TF_NUM_INTRAOP_THREADS": "1", "ATEN_CPU_CAPABILITY_X": "no", "LANG": "C"}
    assert set(ll.numerics_environment(environ)) == {
        "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE", "JAX_COMPILATION_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR", "TF_NUM_INTRAOP_THREADS"}

"""The test session hands its framework processes compilation caches (tests/conftest.py, docs/architecture.md).

Every probe, cell and example suite the tests start inherits these variables:
JAX's persistent cache folder, TensorFlow's (named in ``TF_XLA_FLAGS``),
PyTorch inductor's and the folder of shared probe results.
No framework is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TF_XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def test_jax_processes_share_one_compilation_cache_folder() -> None:
    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR", "")
    assert folder and Path(folder).is_dir(), f"JAX_COMPILATION_CACHE_DIR={folder!r}"
    assert os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS") is not None


def test_tensorflow_processes_share_one_xla_cache_folder() -> None:
    flags = os.environ.get("TF_XLA_FLAGS", "").split()
    folders = [flag.split("=", 1)[1] for flag in flags if flag.startswith(f"{TF_XLA_CACHE_FLAG}=")]
    assert len(folders) == 1, f"TF_XLA_FLAGS={os.environ.get('TF_XLA_FLAGS')!r}: one {TF_XLA_CACHE_FLAG} expected"
    if not folders[0]:
        pytest.skip(f"the caller turned TensorFlow's cache off ({TF_XLA_CACHE_FLAG}=)")
    assert Path(folders[0]).is_dir(), folders[0]


def test_torch_compile_caches_in_a_folder_of_the_session() -> None:
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    assert folder and Path(folder).is_dir(), f"TORCHINDUCTOR_CACHE_DIR={folder!r}"
    # PyTorch's default is /tmp/torchinductor_$USER, the folder every run shares
    assert not Path(folder).name.startswith("torchinductor_"), f"TORCHINDUCTOR_CACHE_DIR={folder!r}"


def test_probe_results_are_shared_in_one_session_folder() -> None:
    from amp_suite.testing import PROBE_CACHE_ENV

    folder = os.environ.get(PROBE_CACHE_ENV, "")
    assert folder and Path(folder).is_dir(), f"{PROBE_CACHE_ENV}={folder!r}"

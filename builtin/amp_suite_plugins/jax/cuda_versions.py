"""The CUDA runtime and cuDNN versions of JAX's CUDA plugin, read where JAX keeps them."""

from __future__ import annotations

from amp_suite.plugins.kit import (
    read_cuda_versions,
)


def cuda_versions() -> dict[str, str]:
    """``cuda_runtime``, ``cudnn`` and ``cudnn_compiled`` as JAX's CUDA plugin reports them; imports JAX.

    JAX has no public API for these: the private ``jax._src.lib.cuda_versions``
    (None without a CUDA plugin) is read here, the one place the suite touches
    it.  A version that cannot be read is left out.
    """
    try:
        from jax._src.lib import cuda_versions as versions
    except Exception:  # a JAX that moved its private module: no versions
        return {}
    return read_cuda_versions(versions)

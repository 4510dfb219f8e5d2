"""A probe inspector (``ProbeRequest.inspect``) that reports which of a few libraries the probe's process loaded."""

from __future__ import annotations

import importlib
import sys
from typing import Any

# Libraries a framework's first import would load only because they are installed.
WATCHED = ("flax", "jax", "matplotlib", "pandas")


def loaded(model: Any, images: Any) -> dict[str, list[str]]:
    """``{"loaded": [watched modules in sys.modules], "importable_after": [watched modules that import now]}``:
    called after the model was built and trained."""
    were_loaded = [name for name in WATCHED if name in sys.modules]
    importable = []
    for name in WATCHED:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        importable.append(name)
    return {"loaded": were_loaded, "importable_after": importable}

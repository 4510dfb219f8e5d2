"""A test plugin for environments: each cell records the ``six`` its worker imports and its ``sys.path``."""

from __future__ import annotations

import importlib.metadata
import os
import sys

from amp_suite import hookimpl
from amp_suite.records import RunSpec


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str] | None:
    try:
        six = importlib.metadata.version("six")
    except importlib.metadata.PackageNotFoundError:
        six = "absent"
    return {"six_version": six, "sys_path": os.pathsep.join(sys.path)}

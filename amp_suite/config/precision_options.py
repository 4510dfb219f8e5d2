"""Checks the precision options of ``[frameworks.NAME]`` against the sweep before any cell runs.

``loss_scaling`` and ``keep_fp32`` are framework options every plugin reads
(:data:`~amp_suite.config.framework_tables.COMMON_FRAMEWORK_OPTIONS`), but they only
mean something for some precisions: ``loss_scaling`` for the precisions with
a loss scale (``amp_fp16``), ``keep_fp32`` for AMP (``amp_fp16``,
``amp_bf16``).  A sweep that sets one for a framework and runs it in none of
those precisions is refused, as is a ``keep_fp32`` name that is neither a
layer of every workload of the sweep nor a layer kind.  Each problem is one
line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.precision import AMP_PRECISIONS, LOSS_SCALED_PRECISIONS
from amp_suite.records import Workload
from amp_suite.workloads.kept import check_keep_fp32


def check_precision_options(options: Mapping[str, Mapping[str, Any]], frameworks: Iterable[str],
                            precisions: Iterable[str], workloads: Mapping[str, Workload]) -> None:
    """Refuse ``loss_scaling`` / ``keep_fp32`` that no cell of the sweep would apply, and unknown kept names.

    ``options`` maps a plugin's framework name to its ``[frameworks.NAME]``
    table; ``frameworks`` are the plugin names the sweep runs; ``workloads``
    the sweep's workloads by name.
    """
    asked = tuple(precisions)
    for framework in dict.fromkeys(frameworks):
        table = options.get(framework, {})
        where = f"[frameworks.{framework}]"
        if "loss_scaling" in table and not any(p in LOSS_SCALED_PRECISIONS for p in asked):
            raise UsageError(
                f"{where} loss_scaling = {table['loss_scaling']!r}: only {', '.join(LOSS_SCALED_PRECISIONS)} has a "
                f"loss scale, and this sweep runs {', '.join(asked)}; add {LOSS_SCALED_PRECISIONS[0]} to the "
                "precisions or remove loss_scaling")
        if "keep_fp32" in table:
            if not any(p in AMP_PRECISIONS for p in asked):
                raise UsageError(
                    f"{where} keep_fp32: only {', '.join(AMP_PRECISIONS)} compute layers below float32, and this "
                    f"sweep runs {', '.join(asked)}; add an AMP precision or remove keep_fp32")
            for name, workload in workloads.items():
                check_keep_fp32(table["keep_fp32"], name, workload.layers, where=f"{where} keep_fp32")

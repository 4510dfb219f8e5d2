"""Typed records that cross hook and process boundaries.

Everything here is plain data (numbers, strings, tuples, dicts of those, numpy
arrays inside a worker only), so a record can be turned into JSON with
:func:`dataclasses.asdict` and sent from a worker process to the host.
Framework objects never appear in these records.  :class:`FrameworkInfo` is
the one record each process asks its plugin for instead of receiving it, so
its options may hold schema fields (types).

The records live in rooms of one job, and every record is handed out here, where
plugins and third parties import them: ``framework.py`` (what a plugin
declares, the device), ``workload.py`` (what a cell trains), ``run.py`` (one
run inside a worker: settings, precision applied, batches, an epoch's
window), ``cell.py`` (a cell's result and statuses), ``definition.py``
(functions, imported from there: a definition's fingerprint and the values
two definitions differ in) and
``plain.py`` (:func:`to_plain`).
"""

from __future__ import annotations

from amp_suite.records.cell import (  # noqa: F401 - re-exported
    BENIGN_STATUSES,
    STATUSES,
    CellResult,
    cell_for_run,
    cell_from_dict,
)
from amp_suite.records.framework import (  # noqa: F401 - re-exported
    DEVICE_KINDS,
    DeviceInfo,
    FrameworkInfo,
    FrameworkOption,
)
from amp_suite.records.plain import to_plain  # noqa: F401 - re-exported
from amp_suite.records.run import (  # noqa: F401 - re-exported
    Batch,
    EpochResult,
    PrecisionApplied,
    RunSpec,
    run_from_dict,
)
from amp_suite.records.workload import (  # noqa: F401 - re-exported
    LayerSpec,
    OptimizerSpec,
    TransformerShape,
    VariableSpec,
    Workload,
    layer_from_dict,
    workload_from_dict,
)

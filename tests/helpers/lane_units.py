"""The session's xdist scheduler: which tests go to one lane together, as one unit of work.

xdist's ``loadgroup`` scheduler makes each test its own unit and hands the next one to the lane that runs dry.
Two kinds of test are better kept together:

* **The tests that start a local cluster** (:data:`local_clusters.LOCAL_CLUSTER_MODULES`): one cluster runs on
  the machine at a time (``local_clusters.py``'s lock), so spread over two lanes one lane waited on the other.
* **The tests one probe server answers**: each conformance class of ``tests/test_frameworks.py`` and each module
  of :data:`ONE_SERVER_MODULES` keeps a framework process per lane (``amp_suite.testing.ProbeServer``) that
  imports its framework once and answers the tests' probes one after another.  Spread over both lanes, each
  lane started its own, importing TensorFlow, JAX or Keras a second time and compiling where the other had
  warmed up.  Measured on 2 cores (AMD EPYC, AVX2; 29 November 2026), with ``-n 2`` as the suite runs:
  ``tests/test_frameworks.py`` took 695 s of CPU with its tests spread and 668 s with each class in one lane;
  ``tests/test_new_layer_kinds.py`` with ``tests/test_transformers_jax.py``, 602 and 577 s.  Probes that both
  lanes ask for still run once (``amp_suite.testing.shared_probes``), whichever way the tests are spread.

The slow-first order of tests/conftest.py puts these long units at the start of the run, so the lanes still
end on short tests.  The scheduler sees node ids only, so modules and classes are named by path.
"""

from __future__ import annotations

from typing import Any

from local_clusters import LOCAL_CLUSTER_MODULES

# The unit of the tests that start a local cluster.
LOCAL_CLUSTERS_SCOPE = "local-clusters"
# The module whose classes are each one unit: the built-in backends' conformance classes (one probe server each).
CONFORMANCE_MODULE = "tests/test_frameworks.py"
# The modules whose probe servers are module-scoped fixtures: each module one unit.
ONE_SERVER_MODULES = ("tests/test_new_layer_kinds.py", "tests/test_transformers_jax.py",
                      "tests/test_transformers_torch.py")


def unit_of(nodeid: str) -> str | None:
    """The unit of work ``nodeid`` belongs to, or None where it is a unit of its own."""
    if nodeid.startswith(LOCAL_CLUSTER_MODULES):
        return LOCAL_CLUSTERS_SCOPE
    path, _, rest = nodeid.partition("::")
    if path in ONE_SERVER_MODULES:
        return path
    if path == CONFORMANCE_MODULE and rest.startswith("Test") and "::" in rest:
        return f"{path}::{rest.split('::')[0]}"
    return None


def lane_scheduler(config: Any, log: Any) -> Any:
    """xdist's ``loadgroup`` scheduler with the units of :func:`unit_of`."""
    from xdist.scheduler import LoadGroupScheduling

    class UnitsInOneLane(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid) or super()._split_scope(nodeid)

    return UnitsInOneLane(config, log)

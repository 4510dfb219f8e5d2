"""The session's xdist scheduler keeps two kinds of test in one lane each (tests/helpers/lane_units.py).

The tests that start a local Ray or Slurm cluster (one cluster at a time: tests/helpers/local_clusters.py) go
to one lane as one unit, so the other lane never waits on the cluster lock; the tests one probe server answers
(a conformance class, a module with a module-scoped server) go to one lane each, so no framework process is
started twice.
"""

from __future__ import annotations

import ast
import re

import pytest

from lane_units import (
    CONFORMANCE_MODULE,
    LOCAL_CLUSTERS_SCOPE,
    ONE_SERVER_MODULES,
    lane_scheduler,
    unit_of,
)
from local_clusters import LOCAL_CLUSTER_MODULES
from suite_cli import REPO

# How a test module starts a cluster: it imports the helper that makes one.
STARTS_A_CLUSTER = re.compile(r"^\s*from (ray_cluster|slurm_cluster) import", re.MULTILINE)


def test_every_module_that_starts_a_local_cluster_is_in_the_cluster_lane_and_every_one_named_exists() -> None:
    starting = {f"tests/{path.name}" for path in (REPO / "tests").glob("test_*.py")
                if STARTS_A_CLUSTER.search(path.read_text())}
    assert starting, "no test module starts a cluster: the pattern no longer matches the helpers' imports"
    assert starting == set(LOCAL_CLUSTER_MODULES), (sorted(starting), LOCAL_CLUSTER_MODULES)


def _module_scoped_server_modules() -> set[str]:
    """The test modules with a module-scoped fixture whose body starts a ProbeServer."""
    found = set()
    for path in (REPO / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or "ProbeServer(" not in ast.unparse(node):
                continue
            for decorator in node.decorator_list:
                if "fixture" in ast.unparse(decorator) and "scope='module'" in ast.unparse(decorator):
                    found.add(f"tests/{path.name}")
    return found


def test_every_module_with_a_module_scoped_probe_server_is_one_unit_and_every_one_named_exists() -> None:
    found = _module_scoped_server_modules()
    assert found, "no module-scoped probe server found: the pattern no longer matches the tests' fixtures"
    assert found == set(ONE_SERVER_MODULES), (sorted(found), ONE_SERVER_MODULES)


def test_every_conformance_class_of_the_built_in_backends_is_a_unit_of_its_own() -> None:
    source = (REPO / CONFORMANCE_MODULE).read_text()
    classes = [node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)
               and any(ast.unparse(base) == "BackendConformance" for base in node.bases)]
    assert len(classes) >= 5, classes
    units = {unit_of(f"{CONFORMANCE_MODULE}::{name}::test_x[p]") for name in classes}
    assert units == {f"{CONFORMANCE_MODULE}::{name}" for name in classes}
    assert unit_of(f"{CONFORMANCE_MODULE}::test_a_function") is None  # module-level tests spread as usual


class TwoLanes:
    """The one option xdist's scheduler reads when it is made: two local lanes (``-n 2``)."""

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx", name
        return ["2*popen"]


def test_the_scheduler_puts_each_unit_together_and_every_other_test_in_its_own() -> None:
    pytest.importorskip("xdist")
    scheduler = lane_scheduler(TwoLanes(), None)
    scopes = {nodeid: scheduler._split_scope(nodeid) for nodeid in (
        "tests/test_cluster.py::test_a", "tests/test_ray_harness.py::test_b[x]", "tests/test_slurm_harness.py::t",
        "tests/test_cli.py::test_c", "tests/test_cli.py::test_d[a@b]",
        "tests/test_frameworks.py::TestKerasConformance::test_e[amp_bf16]",
        "tests/test_frameworks.py::TestKerasConformance::test_f", "tests/test_frameworks.py::TestJaxConformance::test_e",
        "tests/test_new_layer_kinds.py::test_g[keras-mobilenet]", "tests/test_new_layer_kinds.py::test_h")}
    assert {scopes[n] for n in list(scopes)[:3]} == {LOCAL_CLUSTERS_SCOPE}
    assert scopes["tests/test_cli.py::test_c"] == "tests/test_cli.py::test_c"
    assert scopes["tests/test_cli.py::test_d[a@b]"] == "tests/test_cli.py::test_d[a@b]"
    assert scopes["tests/test_frameworks.py::TestKerasConformance::test_e[amp_bf16]"] \
        == scopes["tests/test_frameworks.py::TestKerasConformance::test_f"] \
        == "tests/test_frameworks.py::TestKerasConformance"
    assert scopes["tests/test_frameworks.py::TestJaxConformance::test_e"] == "tests/test_frameworks.py::TestJaxConformance"
    assert scopes["tests/test_new_layer_kinds.py::test_g[keras-mobilenet]"] \
        == scopes["tests/test_new_layer_kinds.py::test_h"] == "tests/test_new_layer_kinds.py"

"""The tests that start a local Ray or Slurm cluster run in one xdist lane, one after another.

tests/helpers/local_clusters.py lets one local cluster run at a time; the session's scheduler (tests/conftest.py)
hands those tests to one lane as one unit of work, so the other lane never waits on the cluster lock.
"""

from __future__ import annotations

import re

import pytest

from local_clusters import LOCAL_CLUSTER_MODULES, LOCAL_CLUSTERS_SCOPE, scheduler_with_clusters_in_one_lane
from suite_cli import REPO

# How a test module starts a cluster: it imports the helper that makes one.
STARTS_A_CLUSTER = re.compile(r"^\s*from (ray_cluster|slurm_cluster) import", re.MULTILINE)


def test_every_module_that_starts_a_local_cluster_is_in_the_cluster_lane_and_every_one_named_exists() -> None:
    starting = {f"tests/{path.name}" for path in (REPO / "tests").glob("test_*.py")
                if STARTS_A_CLUSTER.search(path.read_text())}
    assert starting, "no test module starts a cluster: the pattern no longer matches the helpers' imports"
    assert starting == set(LOCAL_CLUSTER_MODULES), (sorted(starting), LOCAL_CLUSTER_MODULES)


class TwoLanes:
    """The one option xdist's scheduler reads when it is made: two local lanes (``-n 2``)."""

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx", name
        return ["2*popen"]


def test_the_scheduler_puts_the_cluster_tests_in_one_unit_and_every_other_test_in_its_own() -> None:
    pytest.importorskip("xdist")
    scheduler = scheduler_with_clusters_in_one_lane(TwoLanes(), None)
    scopes = {nodeid: scheduler._split_scope(nodeid) for nodeid in (
        "tests/test_cluster.py::test_a", "tests/test_ray_harness.py::test_b[x]", "tests/test_slurm_harness.py::t",
        "tests/test_cli.py::test_c", "tests/test_cli.py::test_d[a@b]")}
    assert {scopes[n] for n in list(scopes)[:3]} == {LOCAL_CLUSTERS_SCOPE}
    assert scopes["tests/test_cli.py::test_c"] == "tests/test_cli.py::test_c"
    assert scopes["tests/test_cli.py::test_d[a@b]"] == "tests/test_cli.py::test_d[a@b]"

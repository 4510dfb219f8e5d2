"""One local test cluster (Ray or Slurm) on the machine at a time, and the tests that start one in one xdist lane.

The cluster tests used to share one lane through ``xdist_group("clusters")``, but pytest-xdist 3.8
groups nothing under pytest 9 (it renames ``item._nodeid``, which pytest 9 no longer reads), so a Ray
cluster and a Slurm cluster could start side by side on 2 cores.  A CI run then found the Slurm
cluster's daemons in the network namespace the Ray teardown test had just freed: the kernel gave the
Slurm cluster's new namespace the freed namespace's inode number.  An exclusive ``flock`` on one file
in the temporary directory makes every cluster wait for the one running, across lanes and sessions.

That lock left a lane waiting whenever the two lanes reached cluster tests together, which the slow-first
order made the rule: on an AMD EPYC with AVX2 only, about 70 core-seconds went idle in the suite's first
two minutes.  The session's xdist scheduler (``lane_units.py``, chosen in tests/conftest.py) hands the modules
of :data:`LOCAL_CLUSTER_MODULES` to one lane as one unit of work, so they run one after another there while the
other lane runs the rest; the lock still guards other sessions and ``-n 0``.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = Path(tempfile.gettempdir()) / "amp-suite-tests-local-cluster.lock"
# The test modules that start a local cluster (tests/helpers/ray_cluster.py, slurm_cluster.py), as node ids begin.
LOCAL_CLUSTER_MODULES = ("tests/test_cluster.py", "tests/test_ray_harness.py", "tests/test_slurm_harness.py")


@contextmanager
def one_local_cluster_at_a_time() -> Iterator[None]:
    """Hold the machine's local-cluster lock while the body runs (waits for a cluster another lane runs)."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def named_namespace_with_inode(inode: int) -> str | None:
    """The name of the live named network namespace (``ip netns``) whose inode is ``inode``, or None.

    A live namespace's inode number is its own; once a namespace is freed, a new one may get the number.
    """
    folder = Path("/run/netns")
    for path in sorted(folder.iterdir()) if folder.is_dir() else ():
        try:
            if path.stat().st_ino == inode:
                return path.name
        except OSError:
            pass
    return None

"""A multi-node Ray cluster on this machine for the cluster tests (``ray.cluster_utils``).

``grader_cluster()``: a head without CPUs (it runs no job) and two nodes of one CPU and one
``grader`` resource each; the workers import this checkout (``PYTHONPATH``) like the driver.
Shut it down with ``cluster.shutdown()`` (after ``ray.shutdown()`` when the test connected).
"""

from __future__ import annotations

import os
from typing import Any

from testkit import REPO_ROOT

__all__ = ["grader_cluster"]


def grader_cluster(nodes: int = 2) -> Any:
    """The cluster (a ``ray.cluster_utils.Cluster``), its nodes up."""
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        c.add_node(num_cpus=1, resources={"grader": 1})
    c.wait_for_nodes()
    return c

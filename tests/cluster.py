"""The loopback cluster of the shipped deploy/nats/cluster.conf (worker/shards/loopback.py),
as the cluster tests use it."""

from worker.shards.loopback import Cluster, Node, running_cluster

__all__ = ["Cluster", "Node", "running_cluster"]

"""Shards on a NATS cluster (contract section 16, shared/SCALE.md): partitions, log, leases."""

"""One test Slurm cluster per test session (per xdist worker) for every file here: a fixture imported into each
test module would be a fixture of each module, and start a cluster per file."""

from __future__ import annotations

from tests.support.slurm import slurm_cluster

__all__ = ["slurm_cluster"]

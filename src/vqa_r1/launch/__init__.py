"""Submitting training to SLURM: cluster profiles, job scripts, requeueing."""

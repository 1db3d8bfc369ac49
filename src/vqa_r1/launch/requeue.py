"""Graceful requeue on SLURM's warning signal (placeholder: relies on periodic checkpoints)."""


def install_graceful_requeue() -> None:
    """Keep submitit's handler: it requeues at once and the job resumes from the last checkpoint."""

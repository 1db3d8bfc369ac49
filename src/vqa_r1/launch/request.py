"""What a job asks for, as values that cannot change once built.

``JobOptions`` is where and how a launch runs (the launcher's flags, or the in-process verbs'
fixed choice); ``JobRequest`` is one job, complete when launch/build.py makes it: the task, its
resources, the job script's summary and setup lines, the code snapshot it will import and what
claims its folder. Nothing sets a field afterwards (frozen dataclasses): the executor
(launch/executor.py) derives what only submission knows (the job ids of the steps a step waits
for) as arguments, so a dry run prints exactly what is submitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vqa_r1.launch.task import Task

EXECUTORS = ("auto", "slurm", "local", "inprocess")


@dataclass(frozen=True)
class JobOptions:
    """Where and how the jobs of one launch run."""

    # auto: SLURM when sbatch is on PATH, else local; local: a subprocess per job (submitit);
    # inprocess: in this process, one step after another (the `vqa-r1 <verb>` commands, tests)
    executor: str = "auto"
    cluster: str | None = None
    gpus: int | None = None  # None: the recipe's
    nodes: int | None = None
    time: str | None = None  # SLURM time; None: the recipe's
    processes_per_node: int | None = None  # None: the recipe's (one per training GPU by default)
    dry_run: bool = False
    no_wait: bool = False
    max_requeues: int = 50
    snapshot: bool = True
    overwrite: bool = False  # a folder that would be refused is moved aside (claims.py)


@dataclass(frozen=True)
class Resources:
    """What one job asks for. CPUs and memory are given per GPU, or per process for a job without
    GPUs, like the cluster profile's: a node asks for them times its GPUs (its processes), so a
    recipe's amounts follow ``--gpus``. None: the profile's."""

    gpus: int  # per node
    nodes: int
    time: str
    cpus_per_gpu: int | None = None  # per GPU, or per process without GPUs
    mem_gb: float | None = None  # per GPU, or per process without GPUs
    tasks_per_node: int | None = None  # processes srun starts per node; None: one per GPU, or 1

    @property
    def processes_per_node(self) -> int:
        return self.tasks_per_node or max(1, self.gpus)

    @property
    def shares(self) -> int:
        """How many per-GPU (per-process) amounts a node gets."""
        return self.gpus if self.gpus else self.processes_per_node


@dataclass(frozen=True)
class JobRequest:
    """One job, checked on the login node (launch/build.py) and never changed after."""

    task: Task  # what the job runs (launch/task.py); it knows its GPUs and requeue limit
    resources: Resources
    executor: str = "auto"  # one of EXECUTORS
    cluster: str | None = None
    job_name: str = "vqa-r1"
    summary: tuple[str, ...] = ()  # the run's settings, echoed into the job script
    setup: tuple[str, ...] = ()  # setup lines of the job script (offline flags, a vLLM server)
    # the copy of the code a SLURM job imports (made at submission; None: the working tree)
    snapshot: Path | None = None
    # what building found in the run directory (claims.NEW / RESUME / COMPLETE), and what claims
    # it (marker, config.yaml): called by the executor once every check of the launch passed
    folder_state: str | None = None
    prepare: Callable[[], None] | None = None

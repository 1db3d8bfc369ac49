"""Which process of a multi-process job this is, and the few collectives the project needs.

A job with several processes (one per GPU, or several CPU processes with gloo) runs the same code
in every process. Side effects that belong to the run, not to a process (status.json, final/,
completions.jsonl, a generated dataset, the decision to checkpoint and requeue), are taken by one
process (rank 0) and shared with the others through these helpers.

Usable before and after the Trainer (accelerate) initialises the process group:

* before: the rank and world size come from the torch.distributed variables (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``), which torchrun sets and a multi-task SLURM job exports
  (launch/distributed.py). No variable: a single process, rank 0 of 1.
* after: from torch.distributed itself.

``barrier`` needs the process group: called before it exists in a multi-process job it raises
(a silent no-op would let a rank run ahead of a side effect it depends on). Steps that run before
the Trainer exists wait on a file instead (``wait_for``): rank 0 writes it atomically, the others
poll for it; see data/datasets.py.

A base module: imports no package of the project; torch is imported inside the functions.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)


def _initialised() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return dist.is_available() and dist.is_initialized()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().lstrip("-").isdigit() else default


def rank() -> int:
    """Global rank of this process (0 in a single-process run)."""
    if _initialised():
        import torch.distributed as dist

        return dist.get_rank()
    return _env_int("RANK", 0)


def local_rank() -> int:
    """Rank of this process on its node (0 in a single-process run)."""
    return _env_int("LOCAL_RANK", 0)


def world_size() -> int:
    """Number of processes of the job (1 in a single-process run)."""
    if _initialised():
        import torch.distributed as dist

        return dist.get_world_size()
    return max(1, _env_int("WORLD_SIZE", 1))


def is_main() -> bool:
    """True in the process that takes the run's side effects (rank 0)."""
    return rank() == 0


def barrier() -> None:
    """Wait until every process gets here; a no-op in a single-process run."""
    if _initialised():
        import torch.distributed as dist

        dist.barrier()
        return
    if world_size() > 1:
        raise RuntimeError(
            f"barrier() before the process group exists (rank {rank()} of {world_size()}); "
            "wait for a file rank 0 writes instead (vqa_r1.ranks.wait_for)"
        )


def max_over_ranks(values: Sequence[int]) -> list[int]:
    """The element-wise largest ``values`` over all processes (one all_reduce MAX): the same
    result in every process, which must all call it. Without a process group: ``values``."""
    values = [int(v) for v in values]
    if not _initialised():
        return values
    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend()).lower():  # NCCL reduces CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]


def any_rank(flag: bool) -> bool:
    """True in every process when ``flag`` is true in at least one. Every process must call it
    (a collective) when the process group exists; without one: ``flag``."""
    return bool(max_over_ranks([1 if flag else 0])[0])


def shutdown() -> None:
    """Wait for every process, then end the process group; a no-op without one.

    A process that exits while the group is alive and the others still use it can abort in the
    group's teardown ("terminate called without an active exception": seen with gloo, rank 1
    leaving while rank 0 wrote final/), which fails the job."""
    if not _initialised():
        return
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def wait_for(
    ready: Callable[[], bool], what: str, timeout_s: float = 3600.0, poll_s: float = 1.0
) -> None:
    """Poll until ``ready()`` (a file another process writes atomically), or raise after
    ``timeout_s``: the wait of a process that needs what rank 0 makes before a process group
    exists. The folder must be on a filesystem all the job's processes see."""
    started = time.monotonic()
    logged = False
    while not ready():
        waited = time.monotonic() - started
        if waited > timeout_s:
            raise TimeoutError(
                f"rank {rank()}: {what} did not appear within {timeout_s:.0f} s; it is made by "
                "rank 0 and must be on a filesystem shared by all of the job's processes"
            )
        if not logged:
            log.info("rank %d: waiting for rank 0 to make %s", rank(), what)
            logged = True
        time.sleep(poll_s)

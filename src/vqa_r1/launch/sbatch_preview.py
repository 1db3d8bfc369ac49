"""The sbatch script submitit would submit, rendered without submitting (for `--dry-run`).

This module is the package's only use of submitit's private API. submitit has no public way to get
the job script without running `sbatch`: `submit` and `map_array` write the script and submit it
in one step. Rendering it goes through these private names, all in `render` below:

- `AutoExecutor._executor`, the `SlurmExecutor` behind the auto executor;
- `SlurmExecutor._submitit_command_str`, the `python -u -m submitit.core._submit <folder>` line;
- `SlurmExecutor._make_submission_file_text(command, uid)`, the script text;
- the `map_count` parameter, which `map_array` sets when it submits a job array.

`SlurmExecutor` also refuses to be built where `srun` is not on PATH (its public `affinity()`
probe), although rendering needs no SLURM: `preview_executor` builds one for rendering only, so a
dry run works on a laptop.

tests/test_sbatch_preview.py fails if one of them changes (gone, renamed, or the script no longer
carries the #SBATCH lines, the array range, the log paths or the command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def preview_executor(folder: Path, **kwargs: Any) -> Any:
    """A SLURM `submitit.AutoExecutor` for `render` only, built also where srun is missing.

    ``kwargs`` are AutoExecutor's constructor arguments (``slurm_python``,
    ``slurm_max_num_timeout``). Never submit with it: without SLURM, sbatch would fail anyway.
    """
    import submitit

    probe = submitit.SlurmExecutor.__dict__["affinity"]
    submitit.SlurmExecutor.affinity = classmethod(lambda cls: 1)  # "srun is there"
    try:
        return submitit.AutoExecutor(folder=str(folder), cluster="slurm", **kwargs)
    finally:
        submitit.SlurmExecutor.affinity = probe


def render(executor: Any, array_size: int | None = None) -> str:
    """The job script of a SLURM `submitit.AutoExecutor`, the way `executor.submit` would write it.

    Building an executor and rendering its script write nothing: the script names the executor's
    folder (made absolute, as on submission) for its logs, but no file is created there.
    ``array_size``: the script of an array of that many jobs, as `executor.map_array` submits it
    (the array's parallelism is the executor's `slurm_array_parallelism`). The executor is left
    as it was and can still submit.
    """
    slurm = executor._executor
    if array_size is not None:
        slurm.parameters["map_count"] = array_size
    try:
        return slurm._make_submission_file_text(slurm._submitit_command_str, "DRYRUN")
    finally:
        # map_array sets map_count on a copy of the executor: one holding it can't submit
        slurm.parameters.pop("map_count", None)

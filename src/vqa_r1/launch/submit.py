"""Turn a validated request into a submitit job: SLURM on a cluster, a subprocess locally.

Validation happens here, on the login node, before anything is queued: the recipe and overrides are
resolved, the dataset is checked, the cluster profile and resources are checked against its limits,
and the run directory with its resolved config is written. The job only reads that directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.clock import run_stamp
from vqa_r1.errors import UserError
from vqa_r1.launch.clusters import load_cluster, parse_slurm_time, to_submitit_params
from vqa_r1.launch.cuda_check import require_usable_cuda
from vqa_r1.launch.sbatch_preview import preview_executor, render
from vqa_r1.launch.task import Task


@dataclass
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


def snapshot_code(run_dir: Path) -> Path:
    """Copy the library (and the judge prompts) into the run directory; the job imports that copy.

    A requeued job reruns the same sbatch script hours later; without a snapshot it would import
    whatever the working tree holds by then.
    """
    import vqa_r1

    package = Path(vqa_r1.__file__).parent
    target = run_dir / "code" / run_stamp()
    shutil.copytree(
        package, target / "vqa_r1", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    prompts = package.parents[1] / "alignment_judge" / "prompts"
    if prompts.exists():
        shutil.copytree(prompts, target / "alignment_judge" / "prompts")
    return target


def snapshot_setup(snapshot: Path) -> list[str]:
    lines = [f'export PYTHONPATH="{snapshot}${{PYTHONPATH:+:$PYTHONPATH}}"  # code as submitted']
    if (snapshot / "alignment_judge" / "prompts").exists() or not snapshot.exists():
        lines.append(f'export VQA_R1_JUDGE_PROMPTS="{snapshot / "alignment_judge" / "prompts"}"')
    return lines


@dataclass
class LaunchRequest:
    task: Task
    resources: Resources
    executor: str = "auto"  # auto | slurm | local
    cluster: str | None = None
    job_name: str = "vqa-r1"
    dry_run: bool = False
    summary: list[str] = field(default_factory=list)  # recipe settings echoed into the job script
    setup: list[str] = field(default_factory=list)  # extra setup lines (e.g. start a judge server)
    max_requeues: int = 50
    snapshot: bool = True
    # issue 3 (pipelines): per-request submitit parameters, e.g. the afterok dependency
    extra_params: dict[str, Any] = field(default_factory=dict)
    # what planning found in the run directory (output_dir.NEW / RESUME / COMPLETE), and what
    # claims it (marker, config.yaml): called by ``submit`` once every check has passed
    folder_state: str | None = None
    prepare: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.task.gpus = self.resources.gpus  # the job checks at start that it can use them


def pick_executor(choice: str) -> str:
    if choice not in ("auto", "slurm", "local"):
        raise UserError(f"--executor must be auto, slurm or local, not {choice!r}")
    if choice == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    if choice == "slurm" and not shutil.which("sbatch"):
        raise UserError(
            "--executor slurm: sbatch is not on PATH (run on a SLURM login node, or use --executor local)"
        )
    return choice


def default_cluster() -> str:
    import os

    return os.environ.get("VQA_R1_CLUSTER", "generic-gpu")


def slurm_parameters(request: LaunchRequest) -> dict[str, Any]:
    """submitit parameters: the profile's conventions with this request's resources.

    Every job asks for ``--ntasks-per-node`` (the processes srun starts; launch/distributed.py)
    and gives srun the same ``--cpus-per-task`` as sbatch: from SLURM 22.05 to 23.02 srun does not
    inherit it, and each task would be bound to one CPU. Several tasks: ``--kill-on-bad-exit=1``.
    """
    profile = load_cluster(request.cluster or default_cluster())
    res = request.resources
    minutes = parse_slurm_time(res.time)
    if profile.max_time is not None and minutes > profile.max_time:
        minutes = profile.max_time  # a longer run is several jobs joined by requeueing
    params = to_submitit_params(
        profile,
        gpus=res.gpus,
        nodes=res.nodes,
        time_minutes=minutes,
        cpus=res.cpus_per_gpu * res.shares if res.cpus_per_gpu else None,
        mem=res.mem_gb * res.shares if res.mem_gb else None,
        tasks_per_node=res.processes_per_node,
    )
    params["name"] = request.job_name
    if profile.python:  # an argument of the executor, not a job parameter (make_executor)
        params["slurm_python"] = profile.python
    params["slurm_srun_args"] = ["--cpus-per-task", str(params["cpus_per_task"])]
    if params.get("tasks_per_node", 1) > 1 or res.nodes > 1:
        # a rank that dies (OOM, a node fault, SIGKILL) takes the others with it at once; without
        # this they wait in their next collective until the time limit, and the job restarts
        # only after hours of nothing (the resume then starts from the latest complete checkpoint)
        params["slurm_srun_args"].append("--kill-on-bad-exit=1")
    # many short limits count as timeouts: allow enough requeues for the whole run
    params["slurm_max_num_timeout"] = 1000
    for key, value in request.extra_params.items():  # issue 3: dependencies (launch/pipeline.py)
        merged = {**params.get(key, {}), **value} if isinstance(value, dict) else value
        params[key] = merged
    setup = list(params.get("slurm_setup", [])) + request.summary + request.setup
    if setup:
        params["slurm_setup"] = setup
    return params


def local_parameters(request: LaunchRequest) -> dict[str, Any]:
    """The local executor's parameters: the request's time limit (``--time``, else the recipe's),
    at which submitit signals the job, which checkpoints and requeues as on SLURM. (Before, a
    local job always had 60 minutes whatever ``--time`` said.)

    A GPU job gets its GPUs: submitit's local executor sets ``CUDA_VISIBLE_DEVICES`` for the job
    to the GPUs it was given, an empty list when none, so a job submitted without
    ``gpus_per_node`` saw no GPU at all (found on an H100: the job-start check refused it). The
    GPUs are taken from this process's own ``CUDA_VISIBLE_DEVICES`` when it names them by index,
    so a job started under ``CUDA_VISIBLE_DEVICES=2,3`` keeps to GPUs 2 and 3."""
    params: dict[str, Any] = {"timeout_min": parse_slurm_time(request.resources.time)}
    gpus = request.resources.gpus  # a judge's vLLM server and the doctor need them too
    if gpus:
        params["gpus_per_node"] = gpus
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
        if visible and all(v.isdigit() for v in visible):
            params["visible_gpus"] = tuple(int(v) for v in visible)
    return params


def make_executor(
    kind: str, folder: Path, params: dict[str, Any] | None = None, preview: bool = False
) -> Any:
    """A submitit executor; ``preview``: a SLURM one that only renders its script (dry runs work
    where SLURM is not installed). ``slurm_python`` (a profile's ``python``) is the interpreter
    the job runs, a constructor argument of submitit's SLURM executor."""
    import submitit

    params = dict(params or {})
    built = {"slurm_max_num_timeout": params.pop("slurm_max_num_timeout", 1000)}
    if params.get("slurm_python"):
        built["slurm_python"] = params["slurm_python"]
    params.pop("slurm_python", None)
    if preview:
        executor = preview_executor(folder, **built)
    elif kind == "slurm":
        executor = submitit.AutoExecutor(folder=str(folder), cluster=kind, **built)
    else:  # submitit's own local executor: AutoExecutor does not pass on visible_gpus
        executor = submitit.LocalExecutor(folder=str(folder))
    if kind == "slurm":
        executor.update_parameters(**params)
    else:
        local = {k: params[k] for k in ("gpus_per_node", "visible_gpus") if k in params}
        executor.update_parameters(timeout_min=params.get("timeout_min", 60), **local)
    return executor


def dry_run_text(request: LaunchRequest) -> str:
    """The exact sbatch script submitit would submit (or the local command), without submitting."""
    if request.executor not in ("auto", "slurm", "local"):
        pick_executor(request.executor)  # the error naming the choices
    if request.executor == "local":  # auto and slurm show the SLURM script, with or without SLURM
        minutes = local_parameters(request)["timeout_min"]
        return (
            f"# local executor: runs in a subprocess of this machine\n"
            f"# time limit {request.resources.time} ({minutes} min): then it checkpoints and "
            "requeues, as on SLURM\n"
            f"# task: {request.task}\n" + "\n".join(request.summary)
        )
    if request.snapshot:
        request.setup = (
            snapshot_setup(Path(request.task.run_dir) / "code" / "SUBMISSION_TIME") + request.setup
        )
    folder = Path(request.task.run_dir) / "jobs"
    return render(make_executor("slurm", folder, slurm_parameters(request), preview=True))


def submit(request: LaunchRequest, log_dir: Path) -> Any:
    """Submit ``request``; its run directory is written (claimed, config.yaml, code snapshot,
    jobs/) only after every check has passed, and what this call wrote is removed again when
    sbatch refuses the job."""
    kind = pick_executor(request.executor)
    request.task.max_requeues = request.max_requeues
    if kind == "local" and request.task.uses_cuda:
        require_usable_cuda(request.resources.gpus)  # the job would run here: say so now
    params = slurm_parameters(request) if kind == "slurm" else local_parameters(request)
    run_dir = Path(request.task.run_dir)
    existed = run_dir.exists()
    if request.prepare is not None:
        request.prepare()
    snapshot = None
    try:
        if kind == "slurm" and request.snapshot:
            snapshot = snapshot_code(run_dir)
            request.setup = snapshot_setup(snapshot) + request.setup
            params = slurm_parameters(request)
        if kind == "slurm":
            request.task.signal_delay_s = params.get("slurm_signal_delay_s")
        log_dir.mkdir(parents=True, exist_ok=True)
        executor = make_executor(kind, log_dir, params)
        if kind != "slurm":
            return executor.submit(request.task)
        return submit_to_slurm(executor, request)
    except UserError:  # sbatch refused: leave the folder as it was
        if not existed:
            shutil.rmtree(run_dir, ignore_errors=True)
        elif snapshot is not None:
            shutil.rmtree(snapshot, ignore_errors=True)
            with contextlib.suppress(OSError):
                snapshot.parent.rmdir()  # code/, when this was its only snapshot
        raise


@contextlib.contextmanager
def sbatch_refusal(what: str, cluster: str | None) -> Iterator[None]:
    """Around ``sbatch`` through submitit: a refusal (bad partition, account, limits) becomes a
    UserError carrying SLURM's own message in one line, not submitit's traceback with the message
    printed above it (submitit echoes sbatch's stderr: ours says it, once)."""
    import io

    from submitit.core.utils import FailedJobError

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    except FailedJobError as err:
        said = " ".join(str(err).split()) or " ".join(captured.getvalue().split()) or "no message"
        raise UserError(
            f"sbatch refused {what}: {said}. Check the cluster profile "
            f"({cluster or default_cluster()}: partition, account, limits) or the resources "
            "asked for (--gpus, --time)"
        ) from None


def submit_to_slurm(executor: Any, request: LaunchRequest) -> Any:
    """``sbatch`` through submitit, a refusal said in one line (``sbatch_refusal``)."""
    with sbatch_refusal(f"job {request.job_name} ({request.task.run_dir})", request.cluster):
        return executor.submit(request.task)


def wait_local(job: Any, poll_s: float = 2.0) -> Any:
    """Wait for a local job, echoing its log; the result or the job's own traceback."""
    while not job.done():
        time.sleep(poll_s)
    return job.result()

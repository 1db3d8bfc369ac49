"""One job request as submitit sees it: its parameters, its sbatch script, the code it imports.

The executor (launch/executor.py) submits with these functions and a dry run prints with them,
from the same frozen request (launch/request.py), so a dry run shows what is submitted. Only what
submission alone knows comes as an argument: the job ids a step waits for (``dependency``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from vqa_r1.errors import UserError
from vqa_r1.launch.clusters import load_cluster, parse_slurm_time, to_submitit_params
from vqa_r1.launch.request import EXECUTORS, JobRequest
from vqa_r1.launch.sbatch_preview import preview_executor, render


def pick_executor(choice: str) -> str:
    """The executor a launch uses: ``auto`` is SLURM when sbatch is on PATH, else local."""
    if choice not in EXECUTORS:
        raise UserError(f"--executor must be one of {', '.join(EXECUTORS)}, not {choice!r}")
    if choice == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    if choice == "slurm" and not shutil.which("sbatch"):
        raise UserError(
            "--executor slurm: sbatch is not on PATH (run on a SLURM login node, or use "
            "--executor local)"
        )
    return choice


def default_cluster() -> str:
    return os.environ.get("VQA_R1_CLUSTER", "generic-gpu")


def snapshot_code(target: Path) -> Path:
    """Copy the library (and the judge prompts) to ``target``; the job imports that copy.

    A requeued job reruns the same sbatch script hours later; without a snapshot it would import
    whatever the working tree holds by then. ``target`` (``<folder>/code/<time>``) is chosen when
    the request is built, so the dry run names it too."""
    import vqa_r1

    package = Path(vqa_r1.__file__).parent
    shutil.copytree(
        package, target / "vqa_r1", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    prompts = judge_prompts()
    if prompts is not None:
        shutil.copytree(prompts, target / "alignment_judge" / "prompts")
    return target


def judge_prompts() -> Path | None:
    """The checkout's judge prompts, copied beside the package by ``snapshot_code``; None in an
    installed wheel, whose copy is inside the package (and so in the snapshot)."""
    from vqa_r1.paths import checkout

    root = checkout()
    prompts = root / "alignment_judge" / "prompts" if root is not None else None
    return prompts if prompts is not None and prompts.is_dir() else None


def snapshot_setup(snapshot: Path) -> list[str]:
    lines = [f'export PYTHONPATH="{snapshot}${{PYTHONPATH:+:$PYTHONPATH}}"  # code as submitted']
    if judge_prompts() is not None:
        lines.append(f'export VQA_R1_JUDGE_PROMPTS="{snapshot / "alignment_judge" / "prompts"}"')
    return lines


def slurm_parameters(request: JobRequest, dependency: dict | None = None) -> dict[str, Any]:
    """submitit parameters: the profile's conventions with this request's resources.

    Every job asks for ``--ntasks-per-node`` (the processes srun starts; launch/distributed.py)
    and gives srun the same ``--cpus-per-task`` as sbatch: from SLURM 22.05 to 23.02 srun does not
    inherit it, and each task would be bound to one CPU. Several tasks: ``--kill-on-bad-exit=1``.
    ``dependency``: the parameters that make the job wait for others (launch/executor.py, the
    one thing only submission knows). The code snapshot's lines open the setup.
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
    for key, value in (dependency or {}).items():  # afterok on the steps it waits for
        merged = {**params.get(key, {}), **value} if isinstance(value, dict) else value
        params[key] = merged
    snapshot = snapshot_setup(request.snapshot) if request.snapshot else []
    setup = [*params.get("slurm_setup", []), *snapshot, *request.summary, *request.setup]
    if setup:
        params["slurm_setup"] = setup
    return params


def local_parameters(request: JobRequest) -> dict[str, Any]:
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


def script_text(request: JobRequest, dependency: dict | None = None) -> str:
    """The sbatch script submitit submits for ``request`` (auto and slurm, with or without SLURM
    here), or what a local or in-process executor runs, without submitting anything."""
    if request.executor in ("local", "inprocess"):
        where = "a subprocess of this machine" if request.executor == "local" else "this process"
        lines = [f"# {request.executor} executor: runs in {where}"]
        if request.executor == "local":
            minutes = local_parameters(request)["timeout_min"]
            lines.append(
                f"# time limit {request.resources.time} ({minutes} min): then it checkpoints "
                "and requeues, as on SLURM"
            )
        return "\n".join([*lines, f"# task: {request.task}", *request.summary])
    params = slurm_parameters(request, dependency)
    folder = Path(request.task.run_dir) / "jobs"
    return render(make_executor("slurm", folder, params, preview=True))


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


def submit_to_slurm(executor: Any, request: JobRequest) -> Any:
    """``sbatch`` through submitit, a refusal said in one line (``sbatch_refusal``)."""
    with sbatch_refusal(f"job {request.job_name} ({request.task.run_dir})", request.cluster):
        return executor.submit(request.task)


def submit_local(executor: Any, task: Any) -> Any:
    """Start a local job in a session of its own, out of reach of the terminal's Ctrl-C.

    In the terminal's process group one Ctrl-C reached the launcher, submitit's controller and
    the task at once, and the controller answered it by sending the task a second SIGINT (then
    SIGKILL a second later): the task's "SIGINT again: stop now, without a checkpoint", losing
    every step since the last save. Now the launcher alone gets it and passes it on once
    (``interrupt_local``). submitit starts the controller with ``subprocess.Popen`` and takes
    no option for it: the session is asked for on that one call."""
    from submitit.local import local as submitit_local

    new_session = types.SimpleNamespace(
        Popen=functools.partial(subprocess.Popen, start_new_session=True)
    )
    with mock.patch.object(submitit_local, "subprocess", new_session):
        return executor.submit(task)


def interrupt_local(pid: int) -> bool:
    """Send SIGINT to a local job's task processes (the children of submitit's controller, the
    job's process ``pid``), as the terminal's Ctrl-C would have. False when none is running."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    sent = False
    for child in children:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(child), signal.SIGINT)
            sent = True
    if not sent:  # no /proc: the controller forwards SIGTERM, which a local task takes as Ctrl-C
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            sent = True
    return sent


class CtrlCs:
    """Counts the terminal's Ctrl-Cs (SIGINT) while a local launch runs its jobs, instead of
    raising KeyboardInterrupt wherever the launcher happens to be.

    A job runs in a session of its own (``submit_local``), so the launcher is the only one to
    pass a Ctrl-C on. Raised between starting a job and waiting for it (CI: a Ctrl-C 50 ms after
    launch.json said RUNNING), the KeyboardInterrupt left the job running, out of reach, with
    launch.json saying RUNNING for good. Counted, each Ctrl-C is acted on where the launcher
    looks: while it waits (passed on to the job) or before it starts the next step. Outside the
    main thread Python delivers no signal to it: the count stays 0 and nothing changes."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None

    def __enter__(self) -> CtrlCs:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._count)
        return self

    def _count(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

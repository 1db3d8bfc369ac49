"""One job graph for every launch, and the one executor that runs it.

Every launch is a graph of steps: one job is a one-step graph, a sweep a graph of independent
steps (one SLURM job array), a pipeline a line, an experiment (and the demo) a declared graph.
Each step is one job with its own run directory, built and checked on the login node by a
``plan.Planner``. The executor here

- submits each step to SLURM with ``afterok`` on the steps it needs (``afterany`` for a step that
  must run whatever happened, such as the tables), or runs the steps one after another here, where
  the dependents of a failed step are not run;
- skips every step whose run directory is complete with the same settings (``Step.done``: hours of
  finished training are never redone) and keeps the job of a step the previous launch queued and
  SLURM still holds (submitting it again would train the same folder twice);
- keeps one state file per launch folder, ``launch.json`` (kind, command, and per step its run
  directory, dependencies, job id and state), which ``status``, ``logs`` and ``cancel``
  (monitor.py) read for every kind of launch.

A step is DINOv2-style: the request's ``task`` is a picklable callable with ``checkpoint()``
(launch/task.py), submitted by launch/submit.py.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1 import output_dir
from vqa_r1.clock import now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json
from vqa_r1.launch.monitor import STATE_FILE, log_path, record_job
from vqa_r1.launch.sbatch_preview import render
from vqa_r1.launch.submit import (
    LaunchRequest,
    dry_run_text,
    make_executor,
    pick_executor,
    sbatch_refusal,
    slurm_parameters,
    snapshot_code,
    snapshot_setup,
    submit,
    wait_local,
)
from vqa_r1.run_dir import UNHEALTHY, RunDir

ACTIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING"}
ENDED_WELL = ("COMPLETED", "DONE EARLIER")


@dataclass
class Step:
    """One job of a launch: its request, its run directory and the steps it waits for."""

    name: str  # unique in the graph; how other steps name it in ``after``
    run_dir: Path
    request: LaunchRequest | None = None
    after: list[str] = field(default_factory=list)
    after_any: bool = False  # run when the dependencies ended, whether they succeeded or not
    done: bool | None = None  # complete from an earlier launch; None: what the request found
    job_id: str | None = None
    state: str | None = None  # NOT RUN / RUNNING / COMPLETED / FAILED / DONE EARLIER / SUBMITTED
    seconds: float | None = None  # how long its local job took (the demo's stage times)
    info: dict[str, Any] = field(default_factory=dict)  # recorded in launch.json as is
    checked_at: float = field(default_factory=time.time)  # about when planning read the folder

    def __post_init__(self) -> None:
        if self.done is None:
            found = self.request.folder_state if self.request is not None else None
            self.done = found == output_dir.COMPLETE


@dataclass
class Graph:
    """The steps of one launch and its folder (where ``launch.json`` lives)."""

    kind: str  # run | sweep | pipeline | experiment | demo
    root: Path
    steps: list[Step]
    lines: list[str] = field(default_factory=list)  # what a dry run and a launch print first
    header: dict[str, Any] = field(default_factory=dict)  # kind-specific, kept in launch.json
    array: bool = False  # independent steps sharing one request: one SLURM job array
    parallelism: int | None = None  # array elements running at once (None: all)
    # the launch folder's own claim (output_dir.py), made once every step is checked; None when
    # the folder is the one step's run directory, which its job claims and locks itself
    claim: tuple[str, Any] | None = None
    overwrite: bool = False


# ------------------------------------------------------------------------------- order


def order(steps: list[Step]) -> list[Step]:
    """The steps with every dependency first; unknown names and cycles are planning bugs."""
    by_name = {s.name: s for s in steps}
    if len(by_name) != len(steps):
        raise ValueError("step names must be unique")
    placed: list[Step] = []
    seen: set[str] = set()

    def visit(step: Step, path: tuple[str, ...]) -> None:
        if step.name in seen:
            return
        if step.name in path:
            raise ValueError(f"dependency cycle: {' -> '.join((*path, step.name))}")
        for dep in step.after:
            if dep not in by_name:
                raise ValueError(f"step {step.name} waits for unknown step {dep}")
            visit(by_name[dep], (*path, step.name))
        seen.add(step.name)
        placed.append(step)

    for step in steps:
        visit(step, ())
    return placed


def dependency(step: Step, job_ids: list[str]) -> dict[str, Any]:
    """Wait for ``job_ids``; SLURM cancels the step when that can no longer be met."""
    kind = "afterany" if step.after_any else "afterok"
    return {
        "slurm_dependency": f"{kind}:{':'.join(job_ids)}",
        "slurm_additional_parameters": {"kill_on_invalid_dep": "yes"},
    }


# ------------------------------------------------------------------------------- dry run


def dry_run(graph: Graph) -> str:
    """The job scripts a launch would submit (one array script for an array), nothing written."""
    if graph.array and graph.steps[0].request.executor != "local":  # no sbatch needed to print
        return array_script_text(graph)
    chunks = ["\n".join(graph.lines)] if graph.lines else []
    by_name = {s.name: s for s in graph.steps}
    single = len(graph.steps) == 1
    for step in order(graph.steps):
        if step.done:
            chunks.append(f"# ---- step {step.name}: complete, skipped ----")
            continue
        pending = [d for d in step.after if not by_name[d].done]
        if pending:
            step.request.extra_params = dependency(step, [f"<job id of {d}>" for d in pending])
        text = dry_run_text(step.request)
        chunks.append(text if single else f"# ---- step {step.name} ----\n{text}")
    return "\n".join(chunks) + "\n"


def array_request(graph: Graph, steps: list[Step]) -> LaunchRequest:
    """The request whose job script the whole array runs (the first element's, with the
    graph's lines as its summary)."""
    first = copy.copy(steps[0].request)
    first.summary = list(graph.lines)
    first.job_name = graph.header.get("job_name", first.job_name)
    first.setup = list(first.setup)
    return first


def array_script_text(graph: Graph) -> str:
    """The sbatch script submitit would submit for the array, built without submitting."""
    request = array_request(graph, graph.steps)
    if request.snapshot:
        request.setup = snapshot_setup(graph.root / "code" / "SUBMISSION_TIME") + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = graph.parallelism or len(graph.steps)
    executor = make_executor("slurm", graph.root / "jobs", params, preview=True)
    return render(executor, array_size=len(graph.steps))


# ------------------------------------------------------------------------------- state file


def write_state(graph: Graph, executor: str, command: str) -> None:
    """``launch.json``: what ``status``, ``logs`` and ``cancel`` read for this launch."""
    rows = [
        {
            "name": s.name,
            "run_dir": str(s.run_dir),
            "after": s.after,
            "after_any": s.after_any,
            "job_id": s.job_id,
            "state": s.state,
            "seconds": s.seconds,
            **s.info,
        }
        for s in graph.steps
    ]
    data = {
        "kind": graph.kind,
        **graph.header,
        "executor": executor,
        "command": command,
        "updated": now_iso(),
        "steps": rows,
    }
    atomic_write_json(graph.root / STATE_FILE, data)


def previous_jobs(root: Path) -> dict[str, str]:
    """Job ids of the previous launch's steps, from its ``launch.json``."""
    path = root / STATE_FILE
    if not path.exists():
        return {}
    try:
        steps = json.loads(path.read_text()).get("steps", [])
    except (json.JSONDecodeError, AttributeError):
        raise UserError(f"{path}: damaged; move it aside to launch again") from None
    return {s["name"]: s["job_id"] for s in steps if isinstance(s, dict) and s.get("job_id")}


def queued_states() -> dict[str, str]:
    """Job id -> state of the jobs the controller holds (squeue, not sacct: a job waiting on a
    dependency is not in the accounting database until it becomes eligible)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(line.split(maxsplit=1) for line in out.stdout.splitlines() if " " in line)


# ------------------------------------------------------------------------------- launch


@dataclass
class Outcome:
    """What a launch did: its exit status, the executor, and the job of each step it started."""

    code: int
    executor: str
    jobs: dict[str, Any] = field(default_factory=dict)


def launch(graph: Graph, command: str, no_wait: bool = False) -> Outcome:
    """Run the graph here or submit it to SLURM; complete steps are skipped.

    ``no_wait``: a one-step local launch returns once its job started."""
    label = graph.steps[0].name if graph.kind == "run" else graph.kind
    if all(s.done for s in graph.steps):
        what = graph.root if graph.kind == "run" else f"every step in {graph.root}"
        print(
            f"{label}: {what} is complete with these settings: nothing submitted "
            "(--overwrite, or a new --output-dir, to run it again)"
        )
        return Outcome(0, "none")
    kind = pick_executor(graph.steps[0].request.executor)
    new = not graph.root.exists()
    if graph.claim is not None:
        verb, settings = graph.claim
        output_dir.make_way(graph.root, verb, settings, overwrite=graph.overwrite)
        output_dir.claim(graph.root, verb, settings, command)
    if graph.claim is None:  # one run: its job locks its folder; the launcher only checks
        return _launch(graph, kind, command, no_wait, new)
    with output_dir.FolderLock(graph.root, graph.kind):  # one launch at a time writes it
        return _launch(graph, kind, command, no_wait, new)


def _launch(graph: Graph, kind: str, command: str, no_wait: bool, new: bool) -> Outcome:
    if kind == "local":
        refuse_locked(graph.steps)
        return run_here(graph, command, no_wait)
    try:
        return submit_all(graph, command)
    except Exception:
        if new and not any(s.state == "SUBMITTED" for s in graph.steps) and graph.claim:
            shutil.rmtree(graph.root, ignore_errors=True)  # a folder made for nothing
        raise


def refuse_locked(steps: list[Step]) -> None:
    """A step folder another process is writing: refused now, not after the queue wait."""
    for step in steps:
        holder = None if step.done else output_dir.lock_holder(step.run_dir)
        if holder is not None:
            raise output_dir.FolderRefused(
                f"{step.run_dir} is being written by {output_dir.describe(holder)}; wait for it "
                "to end, or use another --output-dir"
            )


def submit_all(graph: Graph, command: str) -> Outcome:
    """Submit the steps that are not done; a step of the previous launch still queued or
    running keeps its job."""
    earlier = previous_jobs(graph.root)
    active = queued_states() if earlier else {}
    by_name = {s.name: s for s in graph.steps}
    todo: list[Step] = []
    for step in order(graph.steps):
        old = earlier.get(step.name)
        state = active.get(old or "", "")
        if old and state not in ACTIVE_STATES and finished_since_planning(step):
            step.done = True  # its job ended between the folder check and squeue's answer
        if step.done:
            step.state = "DONE EARLIER"
        elif old and state in ACTIVE_STATES:
            step.job_id, step.state = old, f"{state} (from the previous launch)"
        else:
            todo.append(step)
    refuse_locked(todo)
    jobs: dict[str, Any] = {}
    if graph.array and todo:
        for step, job in zip(todo, submit_array(graph, todo), strict=True):
            index = job.job_id.split("_")[-1] if "_" in str(job.job_id) else None
            step.job_id, step.state, jobs[step.name] = str(job.job_id), "SUBMITTED", job
            record_job(step.run_dir, step.job_id, "slurm", graph.root / "jobs", command,
                       int(index) if index is not None else None)  # fmt: skip
        graph.header["array_job_id"] = str(next(iter(jobs.values())).job_id).split("_")[0]
    else:
        for step in todo:
            waits = [by_name[d].job_id for d in step.after if not by_name[d].done]
            if waits:
                step.request.extra_params = dependency(step, [str(j) for j in waits])
            job = submit(step.request, step.run_dir / "jobs")
            step.job_id, step.state, jobs[step.name] = str(job.job_id), "SUBMITTED", job
            record_job(step.run_dir, step.job_id, "slurm", step.run_dir / "jobs", command)
            write_state(graph, "slurm", command)
    write_state(graph, "slurm", command)
    print_submitted(graph, jobs)
    return Outcome(0, "slurm", jobs)


def finished_since_planning(step: Step) -> bool:
    """A step whose previous job left the queue after planning read its folder: complete now?

    Without this a short job that ended during the re-launch's planning (seconds: imports, TRL's
    config checks) was submitted again. Planning accepted the folder's settings as this step's,
    or it would have refused it; a completion recorded after that check is the previous job's.
    One recorded before it is not (``--overwrite`` moves such a folder aside): the marker's time
    is to the second, hence the margin. A training run records its completion in status.json,
    not in the marker (an SFT step of a relaunched experiment was submitted twice)."""
    if step.done or step.request is None:
        return False
    completed = output_dir.completed_at(step.run_dir)
    try:
        at = time.mktime(time.strptime(str(completed), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return False
    return at >= step.checked_at - 2


def submit_array(graph: Graph, steps: list[Step]) -> list[Any]:
    """The steps as one array (submitit's ``executor.batch()``): one job per step, one script."""
    request = array_request(graph, steps)
    if request.snapshot:  # one copy of the code for the whole array: one job script
        request.setup = snapshot_setup(snapshot_code(graph.root)) + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = graph.parallelism or len(steps)
    for step in steps:
        if step.request.prepare is not None:  # claimed now that every check has passed
            step.request.prepare()
        step.request.task.max_requeues = step.request.max_requeues
        step.request.task.signal_delay_s = params.get("slurm_signal_delay_s")
    log_dir = graph.root / "jobs"
    log_dir.mkdir(parents=True, exist_ok=True)
    executor = make_executor("slurm", log_dir, params)
    with sbatch_refusal(f"the job array {request.job_name} ({graph.root})", request.cluster):
        with executor.batch():
            return [executor.submit(step.request.task) for step in steps]


def print_submitted(graph: Graph, jobs: dict[str, Any]) -> None:
    if graph.kind == "run":
        step = graph.steps[0]
        print(f"submitted {step.name} as slurm job {step.job_id}; run directory {step.run_dir}")
        return
    if graph.array and "array_job_id" in graph.header:
        print(
            f"submitted {graph.kind} as SLURM job array {graph.header['array_job_id']} "
            f"({len(jobs)} elements); folder {graph.root}"
        )
    else:
        print(f"submitted {graph.kind}; folder {graph.root}")
    for step in graph.steps:
        after = f" after {', '.join(step.after)}" if step.after else ""
        print(f"  {step.name:<28} {step.state or '':<22} job {step.job_id or '-'}{after}")


# ------------------------------------------------------------------------------- here


def run_here(graph: Graph, command: str, no_wait: bool = False) -> Outcome:
    """No SLURM: the steps one after another in dependency order; a step whose dependency did
    not complete is not run (unless it runs after any outcome). Exit status 1 when a step
    failed, 130 when one was interrupted."""
    by_name = {s.name: s for s in graph.steps}
    todo = [s for s in order(graph.steps) if not s.done]
    for step in graph.steps:
        step.state = "DONE EARLIER" if step.done else "NOT RUN"
    single = graph.kind == "run"
    if not single:  # a run's folder is claimed by its submission: nothing is written before
        write_state(graph, "local", command)
    jobs: dict[str, Any] = {}
    failed: list[str] = []
    for index, step in enumerate(todo):
        position = f"[{index + 1}/{len(todo)}]"
        blocked = [d for d in step.after if by_name[d].state not in ENDED_WELL]
        if blocked and not step.after_any:
            print(f"{position} {step.name}: not run (needs {', '.join(blocked)})", flush=True)
            continue
        job = submit(step.request, step.run_dir / "jobs")
        record = record_job(step.run_dir, str(job.job_id), "local", step.run_dir / "jobs", command)
        step.job_id, step.state, jobs[step.name] = str(job.job_id), "RUNNING", job
        write_state(graph, "local", command)
        if single:
            print(f"submitted {step.name} as local job {job.job_id}; run directory {step.run_dir}")
            if no_wait:
                return Outcome(0, "local", jobs)
        else:
            print(f"{position} {step.name}: local job {job.job_id}", flush=True)
        started = time.monotonic()
        try:
            result = wait_local(job)
            step.seconds = round(time.monotonic() - started, 1)
        except KeyboardInterrupt:  # the job got the Ctrl-C too, and records how it ended
            step.state = "INTERRUPTED"
            write_state(graph, "local", command)
            where = step.run_dir if single else graph.root
            print(f"interrupted: see python slurm/launch.py status {where}", file=sys.stderr)
            return Outcome(130, "local", jobs)
        except Exception as err:  # the job's traceback is in its log: one line here
            log = log_path(record, stderr=True)
            reason = RunDir(step.run_dir).failure() or failure_reason(err)  # the job's own first
            # a run its health monitor stopped says so (train/health.py), other failures FAILED
            step.state = "UNHEALTHY" if _unhealthy(step.run_dir) else "FAILED"
            failed.append(step.name)
            write_state(graph, "local", command)
            ended = "ended UNHEALTHY" if step.state == "UNHEALTHY" else "failed"
            if single:
                print(f"error: {step.name} {ended}: {reason}; log: {log}", file=sys.stderr)
            else:
                print(f"  {step.name} {step.state}: {reason}; log: {log}", flush=True)
            continue
        if isinstance(result, dict) and result.get("state") == "INTERRUPTED":
            step.state = "INTERRUPTED"
            write_state(graph, "local", command)
            print(f"{step.name} interrupted: {result.get('reason')}", file=sys.stderr)
            return Outcome(130, "local", jobs)
        step.state = "COMPLETED"
        write_state(graph, "local", command)
        took = f" in {step.seconds:.0f} s"
        print(
            f"{'' if single else '  '}{step.name} finished{took}: {summarise(result)}", flush=True
        )
    if not single:
        print(local_verdict(graph, failed))
    return Outcome(1 if failed else 0, "local", jobs)


def _unhealthy(run_dir: Path) -> bool:
    try:
        return RunDir(run_dir).status().get("state") == UNHEALTHY
    except (OSError, ValueError):
        return False


def local_verdict(graph: Graph, failed: list[str]) -> str:
    done = sum(s.state in ENDED_WELL for s in graph.steps)
    by_name = {s.name: s for s in graph.steps}
    if not failed:
        return f"{graph.kind} completed: {done} of {len(graph.steps)} steps; folder {graph.root}"
    not_run = [s.name for s in graph.steps if s.state == "NOT RUN"]
    return (
        f"{graph.kind} stopped: step {failed[0]} "
        + ("ended UNHEALTHY" if by_name[failed[0]].state == "UNHEALTHY" else "failed")
        + (f" (also failed: {', '.join(failed[1:])})" if failed[1:] else "")
        + f"; not run: {', '.join(not_run) or 'none'}; folder {graph.root}"
    )


def summarise(result: Any) -> str:
    if isinstance(result, dict) and "written" in result:  # a tables step (report/experiment.py)
        return (
            f"{len(result['written'])} files written, {result.get('missing_rows', 0)} rows missing"
        )
    if isinstance(result, dict):
        keys = ("state", "global_step", "accuracy", "exit_code")
        return ", ".join(f"{k}={result[k]}" for k in keys if k in result) or str(result)[:200]
    return str(result)[:200]


def failure_reason(err: BaseException) -> str:
    """The exception line of a failed local job (submitit wraps the job's whole traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b.*:", line)]
    return (raised or lines or [repr(err)])[-1]

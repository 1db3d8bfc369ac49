"""The one executor: runs every launch's graph (launch/build.py) in one of three modes.

- ``slurm``: each step submitted through submitit with ``afterok`` on the steps it needs
  (``afterany`` for a step that runs whatever happened, such as the tables), a sweep as one job
  array; a step the previous launch queued and SLURM still holds keeps its job (submitting it
  again would train the same folder twice).
- ``local``: each step a subprocess of this machine (submitit's local executor), one after
  another; the dependents of a failed step are not run.
- ``inprocess``: each step's task called in this process, one after another: `vqa-r1 sft`,
  `grpo`, `evaluate`, `prompt-tune` and `pretrain`, and tests that share one interpreter's
  imports between runs.

Whatever the mode: a step whose folder is complete with the same settings was found so when the
graph was built (``Step.done``) and is skipped; the launch folder is claimed here (claims.py) like
every other root, after every check passed, then what the graph prepares (datasets,
``experiment.json``) is made under its lock, then each step's own folder is claimed just before
its job. ``launch.json`` in the launch folder (kind, command, and per step its run directory,
dependencies, job id and state) is what ``status``, ``logs`` and ``cancel`` (monitor.py) read.
A step is DINOv2-style: its request's task is a picklable callable with ``checkpoint()``
(launch/task.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1 import claims
from vqa_r1.clock import now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json
from vqa_r1.launch.graph import Graph, Step, order
from vqa_r1.launch.job_script import (
    CtrlCs,
    interrupt_local,
    local_parameters,
    make_executor,
    pick_executor,
    sbatch_refusal,
    script_text,
    slurm_parameters,
    snapshot_code,
    submit_local,
    submit_to_slurm,
)
from vqa_r1.launch.monitor import STATE_FILE, log_path, record_job, run_info
from vqa_r1.launch.request import JobRequest
from vqa_r1.launch.sbatch_preview import render
from vqa_r1.run_dir import UNHEALTHY, RunDir, process_identity, this_process

# a job in one of these states is still the controller's: a re-launch keeps it (COMPLETING: it
# ended but SLURM has not let go of it yet; submitting its step again would run it twice)
ACTIVE_STATES = {
    "PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING"
}  # fmt: skip
ENDED_WELL = ("COMPLETED", "DONE EARLIER")


@dataclass
class StepRun:
    """What this launch did with one step (the step itself is the frozen plan)."""

    job_id: str | None = None
    state: str | None = None  # NOT RUN / RUNNING / COMPLETED / FAILED / DONE EARLIER / SUBMITTED
    seconds: float | None = None  # how long its local or in-process job took


@dataclass
class Outcome:
    """What a launch did: its exit status, the executor, and per step its job (submitit's
    handle), its task's result (local and in process) and its state."""

    code: int
    executor: str
    jobs: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    states: dict[str, str | None] = field(default_factory=dict)
    nothing_to_do: bool = False


# ------------------------------------------------------------------------------- dry run


def dependency(step: Step, job_ids: list[str]) -> dict[str, Any]:
    """Wait for ``job_ids``; SLURM cancels the step when that can no longer be met."""
    kind = "afterany" if step.after_any else "afterok"
    return {
        "slurm_dependency": f"{kind}:{':'.join(job_ids)}",
        "slurm_additional_parameters": {"kill_on_invalid_dep": "yes"},
    }


def dry_run(graph: Graph) -> str:
    """The job scripts a launch would submit (one array script for an array), nothing written:
    the same requests, rendered by the same functions as at submission (launch/job_script.py);
    only the ids of the jobs a step waits for are shown as ``<job id of STEP>``."""
    if graph.array is not None and graph.array.executor in ("auto", "slurm"):
        return array_script_text(graph)
    chunks = ["\n".join(graph.lines)] if graph.lines else []
    by_name = {s.name: s for s in graph.steps}
    for step in order(graph.steps):
        if step.done:
            chunks.append(f"# ---- step {step.name}: complete, skipped ----")
            continue
        pending = [d for d in step.after if not by_name[d].done]
        waits = dependency(step, [f"<job id of {d}>" for d in pending]) if pending else None
        text = script_text(step.request, waits)
        chunks.append(text if graph.single else f"# ---- step {step.name} ----\n{text}")
    return "\n".join(chunk.rstrip("\n") for chunk in chunks) + "\n"


def array_parameters(graph: Graph) -> dict[str, Any]:
    params = slurm_parameters(graph.array)
    params["slurm_array_parallelism"] = graph.parallelism or len(graph.steps)
    return params


def array_script_text(graph: Graph) -> str:
    """The sbatch script submitit submits for the array, built without submitting."""
    executor = make_executor("slurm", graph.root / "jobs", array_parameters(graph), preview=True)
    return render(executor, array_size=len(graph.steps))


# ------------------------------------------------------------------------------- state file


def write_state(
    graph: Graph, runs: dict[str, StepRun], executor: str, command: str, **extra: Any
) -> None:
    """``launch.json``: what ``status``, ``logs`` and ``cancel`` read for this launch
    (``extra``: what submission learnt, an array's job id)."""
    rows = [
        {
            "name": s.name,
            "run_dir": str(s.run_dir),
            "after": list(s.after),
            "after_any": s.after_any,
            "job_id": runs[s.name].job_id,
            "state": runs[s.name].state,
            "seconds": runs[s.name].seconds,
            **s.info,
        }
        for s in graph.steps
    ]
    data = {
        "kind": graph.kind,
        **graph.header,
        **extra,
        "executor": executor,
        "command": command,
        "updated": now_iso(),
        # the process running a local or in-process launch: `status` checks it is still there
        **({"driver": this_process()} if executor != "slurm" else {}),
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


# ------------------------------------------------------------------------------- execute


def execute(graph: Graph, command: str, no_wait: bool = False) -> Outcome:
    """Run the graph in the mode its requests name (``auto``: SLURM when sbatch is on PATH);
    complete steps are skipped. ``no_wait``: a one-step local launch returns once its job
    started."""
    first = graph.steps[0].request
    kind = pick_executor(first.executor)
    if all(s.done for s in graph.steps):
        label = graph.steps[0].name if graph.single else graph.kind
        what = graph.root if graph.single else f"every step in {graph.root}"
        done = "nothing to do" if kind == "inprocess" else "nothing submitted"
        print(
            f"{label}: {what} is complete with these settings: {done} (--overwrite, or a new "
            f"{graph.flag}, to run it again)"
        )
        return Outcome(0, "none", states={s.name: "DONE EARLIER" for s in graph.steps},
                       nothing_to_do=True)  # fmt: skip
    check_before_writing(graph, kind)
    new = not graph.root.exists()
    if graph.claim is None:  # one run: its job claims and locks its folder; nothing to prepare
        return _run(graph, kind, command, no_wait, new)
    verb, settings = graph.claim
    claims.make_way(graph.root, verb, settings, overwrite=graph.overwrite)
    claims.claim(graph.root, verb, settings, command)
    with claims.FolderLock(graph.root, graph.kind):  # one launch at a time writes it
        for prep in graph.prepare:
            prep.make()
        return _run(graph, kind, command, no_wait, new)


def check_before_writing(graph: Graph, kind: str) -> None:
    """What only the mode knows, for every step still to run, before any folder is written: the
    cluster profile's limits (SLURM), or GPUs this machine can use (a local or in-process job
    runs here: the GPUs it asked for, and a ``model.device`` of cuda)."""
    from vqa_r1.launch.cuda_check import require_usable_cuda
    from vqa_r1.models.device import resolve_device

    for step in graph.steps:
        if step.done:
            continue
        if kind == "slurm":
            slurm_parameters(step.request)
            continue
        if not step.request.task.uses_cuda:
            continue
        if kind == "local":
            require_usable_cuda(step.request.resources.gpus)
        device = str(step.info.get("settings", {}).get("model.device", "auto"))
        if device.startswith("cuda"):
            resolve_device(device)


def _run(graph: Graph, kind: str, command: str, no_wait: bool, new: bool) -> Outcome:
    runs = {s.name: StepRun(state="DONE EARLIER" if s.done else "NOT RUN") for s in graph.steps}
    if kind == "inprocess":
        return run_inprocess(graph, runs, command)
    if kind == "local":
        refuse_locked(graph.steps)
        return run_local(graph, runs, command, no_wait)
    try:
        return submit_all(graph, runs, command)
    except Exception:
        submitted = any(r.state == "SUBMITTED" for r in runs.values())
        if new and not submitted and graph.claim:
            shutil.rmtree(graph.root, ignore_errors=True)  # a folder made for nothing
        raise


def refuse_locked(steps: tuple[Step, ...] | list[Step]) -> None:
    """A step folder another process is writing: refused now, not after the queue wait."""
    for step in steps:
        holder = None if step.done else claims.lock_holder(step.run_dir)
        if holder is not None:
            raise claims.FolderRefused(
                f"{step.run_dir} is being written by {claims.describe(holder)}; wait for it "
                "to end, or use another --output-dir"
            )


def outcome(code: int, kind: str, runs: dict[str, StepRun], **fields: Any) -> Outcome:
    return Outcome(code, kind, states={n: r.state for n, r in runs.items()}, **fields)


# ------------------------------------------------------------------------------- SLURM


def submit(request: JobRequest, kind: str, log_dir: Path, waits: dict | None = None) -> Any:
    """Submit one request (``waits``: its dependency on jobs submitted before); its folder is
    written (claimed, config.yaml, the code snapshot, jobs/) only now that every check has
    passed (execute's check_before_writing among them), and what this call wrote is removed
    again when sbatch refuses the job."""
    params = slurm_parameters(request, waits) if kind == "slurm" else local_parameters(request)
    run_dir = Path(request.task.run_dir)
    existed = run_dir.exists()
    if request.prepare is not None:
        request.prepare()
    snapshot = None
    try:
        if kind == "slurm" and request.snapshot is not None:
            snapshot = snapshot_code(request.snapshot)
        log_dir.mkdir(parents=True, exist_ok=True)
        if kind != "slurm":
            return submit_local(make_executor(kind, log_dir, params), request.task)
        return submit_to_slurm(make_executor(kind, log_dir, params), request)
    except UserError:  # sbatch refused: leave the folder as it was
        if not existed:
            shutil.rmtree(run_dir, ignore_errors=True)
        elif snapshot is not None:
            shutil.rmtree(snapshot, ignore_errors=True)
            with contextlib.suppress(OSError):
                snapshot.parent.rmdir()  # code/, when this was its only snapshot
        raise


def submit_all(graph: Graph, runs: dict[str, StepRun], command: str) -> Outcome:
    """Submit the steps that are not done; a step of the previous launch still queued or
    running keeps its job."""
    earlier = previous_jobs(graph.root)
    active = queued_states() if earlier else {}
    todo: list[Step] = []
    for step in order(graph.steps):
        old = earlier.get(step.name)
        state = active.get(old or "", "")
        run = runs[step.name]
        if step.done or (old and state not in ACTIVE_STATES and finished_since_building(step)):
            run.state = "DONE EARLIER"  # or its job ended between the folder check and squeue
        elif old and state in ACTIVE_STATES:
            run.job_id, run.state = old, f"{state} (from the previous launch)"
        else:
            todo.append(step)
    refuse_locked(todo)
    jobs: dict[str, Any] = {}
    extra: dict[str, str] = {}
    if graph.array is not None and todo:
        for step, job in zip(todo, submit_array(graph, todo), strict=True):
            index = job.job_id.split("_")[-1] if "_" in str(job.job_id) else None
            run = runs[step.name]
            run.job_id, run.state, jobs[step.name] = str(job.job_id), "SUBMITTED", job
            record_job(step.run_dir, run.job_id, "slurm", graph.root / "jobs", command,
                       int(index) if index is not None else None)  # fmt: skip
        extra["array_job_id"] = str(next(iter(jobs.values())).job_id).split("_")[0]
    else:
        for step in todo:
            ended = ("DONE EARLIER",)
            waits = [runs[d].job_id for d in step.after if runs[d].state not in ended]
            deps = dependency(step, [str(j) for j in waits]) if waits else None
            job = submit(step.request, "slurm", step.run_dir / "jobs", deps)
            run = runs[step.name]
            run.job_id, run.state, jobs[step.name] = str(job.job_id), "SUBMITTED", job
            record_job(step.run_dir, run.job_id, "slurm", step.run_dir / "jobs", command)
            write_state(graph, runs, "slurm", command)
    write_state(graph, runs, "slurm", command, **extra)
    print_submitted(graph, runs, jobs, extra.get("array_job_id"))
    return outcome(0, "slurm", runs, jobs=jobs)


def finished_since_building(step: Step) -> bool:
    """A step whose previous job left the queue after building read its folder: complete now?

    Without this a short job that ended during the re-launch's building (seconds: imports, TRL's
    config checks) was submitted again. Building accepted the folder's settings as this step's,
    or it would have refused it; a completion recorded after that check is the previous job's.
    One recorded before it is not (``--overwrite`` moves such a folder aside): the marker's time
    is to the second, hence the margin."""
    if step.done:
        return False
    completed = claims.completed_at(step.run_dir)
    try:
        at = time.mktime(time.strptime(str(completed), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return False
    return at >= step.checked_at - 2


def submit_array(graph: Graph, steps: list[Step]) -> list[Any]:
    """The steps as one array (submitit's ``executor.batch()``): one job per step, one script
    (the graph's array request, its code snapshot shared by every element)."""
    request = graph.array
    if request.snapshot is not None:
        snapshot_code(request.snapshot)
    params = array_parameters(graph)
    for step in steps:
        if step.request.prepare is not None:  # claimed now that every check has passed
            step.request.prepare()
    log_dir = graph.root / "jobs"
    log_dir.mkdir(parents=True, exist_ok=True)
    executor = make_executor("slurm", log_dir, params)
    with sbatch_refusal(f"the job array {request.job_name} ({graph.root})", request.cluster):
        with executor.batch():
            return [executor.submit(step.request.task) for step in steps]


def print_submitted(
    graph: Graph, runs: dict[str, StepRun], jobs: dict[str, Any], array_id: str | None
) -> None:
    if graph.single:
        step = graph.steps[0]
        run = runs[step.name]
        print(f"submitted {step.name} as slurm job {run.job_id}; run directory {step.run_dir}")
        return
    if array_id is not None:
        print(
            f"submitted {graph.kind} as SLURM job array {array_id} "
            f"({len(jobs)} elements); folder {graph.root}"
        )
    else:
        print(f"submitted {graph.kind}; folder {graph.root}")
    for step in graph.steps:
        run = runs[step.name]
        after = f" after {', '.join(step.after)}" if step.after else ""
        print(f"  {step.name:<28} {run.state or '':<22} job {run.job_id or '-'}{after}")


# ------------------------------------------------------------------------------- here


def run_local(graph: Graph, runs: dict[str, StepRun], command: str, no_wait: bool) -> Outcome:
    """No SLURM: the steps one after another in dependency order, each a subprocess; a step whose
    dependency did not complete is not run (unless it runs after any outcome). Exit status 1
    when a step failed, 130 when one was interrupted."""
    todo = [s for s in order(graph.steps) if not s.done]
    single = graph.single
    if no_wait and not single:  # nothing here would start the next step once this returned
        print(f"note: --no-wait: a local {graph.kind} runs its steps one after another from this "
              "command, which waits for them (to leave it running: nohup ... &, or a SLURM "
              "cluster, where the queue chains them)", file=sys.stderr, flush=True)  # fmt: skip
    if not single:  # a run's folder is claimed by its submission: nothing is written before
        write_state(graph, runs, "local", command)
    with CtrlCs() as ctrl_c:
        return _run_steps(graph, runs, command, no_wait, todo, ctrl_c)


def _run_steps(
    graph: Graph,
    runs: dict[str, StepRun],
    command: str,
    no_wait: bool,
    todo: list[Step],
    ctrl_c: CtrlCs,
) -> Outcome:
    single = graph.single
    jobs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    failed: list[str] = []
    for index, step in enumerate(todo):
        position = f"[{index + 1}/{len(todo)}]"
        run = runs[step.name]
        if ctrl_c.count:  # pressed while the last step was being recorded: stop before this one
            print(f"Ctrl-C: stopped before {step.name} (python slurm/launch.py status "
                  f"{graph.root})", file=sys.stderr)  # fmt: skip
            return outcome(130, "local", runs, jobs=jobs, results=results)
        blocked = [d for d in step.after if runs[d].state not in ENDED_WELL]
        if blocked and not step.after_any:
            print(f"{position} {step.name}: not run (needs {', '.join(blocked)})", flush=True)
            continue
        job = submit(step.request, "local", step.run_dir / "jobs")
        record = record_job(step.run_dir, str(job.job_id), "local", step.run_dir / "jobs", command,
                            process=process_identity(int(job.job_id)))  # fmt: skip
        run.job_id, run.state, jobs[step.name] = str(job.job_id), "RUNNING", job
        write_state(graph, runs, "local", command)
        if single:
            print(f"submitted {step.name} as local job {job.job_id}; run directory {step.run_dir}")
            if no_wait:
                return outcome(0, "local", runs, jobs=jobs)
        else:
            print(f"{position} {step.name}: local job {job.job_id}", flush=True)
        started = time.monotonic()
        how, result = wait_through_ctrl_c(step.name, job, ctrl_c)
        run.seconds = round(time.monotonic() - started, 1)
        if how == "failed":  # the job's traceback is in its log: one line here
            log = log_path(record, stderr=True)
            reason = job_failure(step.run_dir, result)
            _failed(graph, step, run, reason, f"log: {log}", failed)
            write_state(graph, runs, "local", command)
            continue
        if how == "interrupted" or (
            isinstance(result, dict) and result.get("state") == "INTERRUPTED"
        ):
            run.state = "INTERRUPTED"
            write_state(graph, runs, "local", command)
            said = result.get("reason") if isinstance(result, dict) else None
            reason = said or _status(step.run_dir).get("reason") or "stopped by Ctrl-C"
            where = step.run_dir if single else graph.root
            print(f"{step.name} interrupted: {reason} (python slurm/launch.py status {where})",
                  file=sys.stderr)  # fmt: skip
            return outcome(130, "local", runs, jobs=jobs, results=results)
        results[step.name] = result
        run.state = "COMPLETED"
        write_state(graph, runs, "local", command)
        took = f" in {run.seconds:.0f} s"
        print(
            f"{'' if single else '  '}{step.name} finished{took}: {summarise(result)}", flush=True
        )
    if not single:
        print(local_verdict(graph, runs, failed))
    return outcome(1 if failed else 0, "local", runs, jobs=jobs, results=results)


def wait_through_ctrl_c(name: str, job: Any, ctrl_c: CtrlCs) -> tuple[str, Any]:
    """Wait for a local job: ("done", its result), ("failed", the error), or ("interrupted", its
    result). The first Ctrl-C (``ctrl_c`` counts them) is passed on to the job, which stops at
    its next step boundary with a checkpoint, and this waits for that; a second is passed on
    too (the job stops at once, without a checkpoint) and this stops waiting."""
    passed = 0
    while not job.done():
        if ctrl_c.count > passed:
            passed += 1
            interrupt_local(int(job.job_id))
            if passed > 1:
                print(f"Ctrl-C again: {name} stops now, without a checkpoint", file=sys.stderr)
                return "interrupted", None
            print(f"Ctrl-C: {name} stops at its next step boundary with a checkpoint; waiting "
                  "for it (Ctrl-C again: stop now, without a checkpoint)", file=sys.stderr,
                  flush=True)  # fmt: skip
            continue
        time.sleep(0.2)
    try:
        result = job.result()
    except Exception as err:  # interrupted, it stopped by raising: its status.json says how
        return ("interrupted", None) if passed else ("failed", err)
    if passed and not (isinstance(result, dict) and result.get("state") == "COMPLETED"):
        return "interrupted", result
    return "done", result


def _status(run_dir: Path) -> dict:
    try:
        return RunDir(run_dir).status()
    except (OSError, ValueError):
        return {}


def run_inprocess(graph: Graph, runs: dict[str, StepRun], command: str) -> Outcome:
    """The steps in this process, one after another. A one-step graph (`vqa-r1 sft`) lets its
    task's exceptions through, as a command does; a graph of several steps records a failed step
    as the local executor does and goes on with the steps that do not need it. Ctrl-C stops
    training at the next step boundary with a checkpoint (train/callbacks.py): INTERRUPTED."""
    from vqa_r1.launch.task import RunUnhealthy

    todo = [s for s in order(graph.steps) if not s.done]
    single = graph.single
    if not single:
        write_state(graph, runs, "inprocess", command)
    results: dict[str, Any] = {}
    failed: list[str] = []
    for index, step in enumerate(todo):
        run = runs[step.name]
        blocked = [d for d in step.after if runs[d].state not in ENDED_WELL]
        if blocked and not step.after_any:
            print(f"[{index + 1}/{len(todo)}] {step.name}: not run (needs {', '.join(blocked)})")
            continue
        if step.request.prepare is not None:
            step.request.prepare()
        run.state = "RUNNING"
        if not single:
            write_state(graph, runs, "inprocess", command)
            print(f"[{index + 1}/{len(todo)}] {step.name}: in process", flush=True)
        started = time.monotonic()
        try:
            result = step.request.task()
        except RunUnhealthy as err:  # its health monitor stopped it: status.json says why
            results[step.name] = RunDir(step.run_dir).status()
            _failed(graph, step, run, str(err), "", failed)
            result = None
        except KeyboardInterrupt:
            run.state = "INTERRUPTED"
            if single:
                raise
            write_state(graph, runs, "inprocess", command)
            print(f"interrupted: see python slurm/launch.py status {graph.root}", file=sys.stderr)
            return outcome(130, "inprocess", runs, results=results)
        except Exception as err:
            run.state = "FAILED"
            if single:
                raise
            _failed(graph, step, run, RunDir(step.run_dir).failure() or failure_reason(err), "",
                    failed)  # fmt: skip
            result = None
        run.seconds = round(time.monotonic() - started, 1)
        if run.state == "RUNNING":
            results[step.name] = result
            interrupted = isinstance(result, dict) and result.get("state") == "INTERRUPTED"
            run.state = "INTERRUPTED" if interrupted else "COMPLETED"
        if not single:
            write_state(graph, runs, "inprocess", command)
        if run.state == "INTERRUPTED":
            return outcome(130, "inprocess", runs, results=results)
        if run.state == "COMPLETED" and not single:
            print(f"  {step.name} finished in {run.seconds:.0f} s: {summarise(result)}", flush=True)
    if not single:
        print(local_verdict(graph, runs, failed))
    return outcome(1 if failed else 0, "inprocess", runs, results=results)


def _failed(
    graph: Graph, step: Step, run: StepRun, reason: str, where: str, failed: list[str]
) -> None:
    """A step that failed, or that its health monitor stopped (train/health.py): said in one
    line with the job's log (the traceback is there)."""
    run.state = "UNHEALTHY" if _unhealthy(step.run_dir) else "FAILED"
    failed.append(step.name)
    ended = "ended UNHEALTHY" if run.state == "UNHEALTHY" else "failed"
    tail = f"; {where}" if where else ""
    if graph.single:
        print(f"error: {step.name} {ended}: {reason}{tail}", file=sys.stderr)
    else:
        print(f"  {step.name} {run.state}: {reason}{tail}", flush=True)


def _unhealthy(run_dir: Path) -> bool:
    try:
        return RunDir(run_dir).status().get("state") == UNHEALTHY
    except (OSError, ValueError):
        return False


def local_verdict(graph: Graph, runs: dict[str, StepRun], failed: list[str]) -> str:
    done = sum(r.state in ENDED_WELL for r in runs.values())
    if not failed:
        return f"{graph.kind} completed: {done} of {len(graph.steps)} steps; folder {graph.root}"
    not_run = [s.name for s in graph.steps if runs[s.name].state == "NOT RUN"]
    return (
        f"{graph.kind} stopped: step {failed[0]} "
        + ("ended UNHEALTHY" if runs[failed[0]].state == "UNHEALTHY" else "failed")
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


def job_failure(run_dir: Path, err: BaseException) -> str:
    """Why a local job failed, in one line: the reason its run recorded; else its process killed
    with no chance to write (status.json still RUNNING, or no result at all: SIGKILL, the OOM
    killer), with what to do; else the exception line submitit passed on."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    own = RunDir(run_dir).failure()
    if own:
        return own
    info = run_info(run_dir)
    if info["state"] == "DEAD":
        return info["reason"]
    if isinstance(err, UncompletedJobError) and not isinstance(err, FailedJobError):
        return (
            "the job ended without a result: killed (SIGKILL, out of memory?); the same command "
            "runs it again"
        )
    return failure_reason(err)


def failure_reason(err: BaseException) -> str:
    """The exception line of a failed local job (submitit wraps the job's whole traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\w*: \S", line)]
    return (raised or lines or [repr(err)])[-1]

"""A graph of dependent jobs that a re-launch resumes: the experiments' execution layer.

A pipeline (launch/pipeline.py) is a line of steps; an experiment is a graph (several trainings,
each followed by its evaluations, and a tables step after all of them). Each step is its own job
with its own run directory. On SLURM a step waits for the jobs of its dependencies (``afterok``,
or ``afterany`` for a step that must run whatever happened, such as the tables); locally the steps
run one after another here, and the dependents of a failed step are not run.

Re-launching the same command skips every step whose output is complete (``Step.done``, decided
by the caller from the run directory), reuses the job of a step still queued or running from the
previous launch, and submits the rest: hours of finished training are never redone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.clock import now_iso
from vqa_r1.io import atomic_write_json
from vqa_r1.launch.monitor import record_job
from vqa_r1.launch.plan import run_job_here
from vqa_r1.launch.submit import LaunchRequest, dry_run_text, pick_executor, submit

ACTIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING"}


@dataclass
class Step:
    name: str  # unique in the chain; also how other steps name it in ``after``
    run_dir: Path
    request: LaunchRequest | None = None
    after: list[str] = field(default_factory=list)
    after_any: bool = False  # run when the dependencies ended, whether they succeeded or not
    done: bool = False  # complete from an earlier launch: not run again
    job_id: str | None = None
    state: str | None = None  # COMPLETED / FAILED / NOT RUN / DONE EARLIER / SUBMITTED
    info: dict[str, Any] = field(default_factory=dict)  # recorded in the chain file as is


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


def write_chain_file(path: Path, header: dict, steps: list[Step], kind: str, command: str) -> None:
    rows = [
        {
            "name": s.name,
            "run_dir": str(s.run_dir),
            "after": s.after,
            "job_id": s.job_id,
            "state": s.state,
            **s.info,
        }
        for s in steps
    ]
    data = {**header, "executor": kind, "command": command, "submitted": now_iso(), "steps": rows}
    atomic_write_json(path, data)


def dependency(step: Step, job_ids: list[str]) -> dict[str, Any]:
    kind = "afterany" if step.after_any else "afterok"
    return {
        "slurm_dependency": f"{kind}:{':'.join(job_ids)}",
        "slurm_additional_parameters": {"kill_on_invalid_dep": "yes"},
    }


def dry_run(steps: list[Step], header_lines: list[str]) -> str:
    chunks = ["\n".join(header_lines)]
    by_name = {s.name: s for s in steps}
    for step in order(steps):
        if step.done:
            chunks.append(f"# ---- step {step.name}: complete, skipped ----")
            continue
        pending = [d for d in step.after if not by_name[d].done]
        if pending:
            step.request.extra_params = dependency(step, [f"<job id of {d}>" for d in pending])
        chunks.append(f"# ---- step {step.name} ----\n{dry_run_text(step.request)}")
    return "\n".join(chunks) + "\n"


def previous_jobs(path: Path) -> dict[str, str]:
    """Job ids of the previous launch's steps, from its chain file (a damaged one: UserError)."""
    from vqa_r1.report.experiment import read_experiment

    if not path.exists():
        return {}
    steps = read_experiment(path.parent).get("steps", [])
    return {s["name"]: s["job_id"] for s in steps if isinstance(s, dict) and s.get("job_id")}


def queued_states() -> dict[str, str]:
    """Job id -> state of the jobs the controller holds (squeue, not sacct: a job waiting on a
    dependency is not in the accounting database until it becomes eligible)."""
    import subprocess

    try:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(line.split(maxsplit=1) for line in out.stdout.splitlines() if " " in line)


def submit_slurm(steps: list[Step], chain_file: Path, header: dict, command: str) -> None:
    """Submit the steps that are not done; a step of the previous launch still queued or running
    keeps its job (submitting it again would train the same run directory twice)."""
    earlier = previous_jobs(chain_file)
    active = queued_states() if earlier else {}
    by_name = {s.name: s for s in steps}
    for step in order(steps):
        if step.done:
            step.state = "DONE EARLIER"
            continue
        old = earlier.get(step.name)
        state = active.get(old or "", "")
        if old and state in ACTIVE_STATES:
            step.job_id, step.state = old, f"{state} (from the previous launch)"
            continue
        waits = [by_name[d].job_id for d in step.after if not by_name[d].done]
        if waits:
            step.request.extra_params = dependency(step, [str(j) for j in waits])
        job = submit(step.request, step.run_dir / "jobs")
        step.job_id, step.state = str(job.job_id), "SUBMITTED"
        record_job(step.run_dir, step.job_id, "slurm", step.run_dir / "jobs", command)
        write_chain_file(chain_file, header, steps, "slurm", command)
    write_chain_file(chain_file, header, steps, "slurm", command)


def run_local(steps: list[Step], chain_file: Path, header: dict, command: str) -> list[str]:
    """Run the steps here in dependency order; returns the names of the steps that failed."""
    failed: list[str] = []
    by_name = {s.name: s for s in steps}
    todo = [s for s in order(steps) if not s.done]
    for step in steps:
        step.state = "DONE EARLIER" if step.done else "NOT RUN"
    write_chain_file(chain_file, header, steps, "local", command)
    for index, step in enumerate(todo):
        blocked = [d for d in step.after if by_name[d].state not in ("COMPLETED", "DONE EARLIER")]
        if blocked and not step.after_any:
            print(f"[{index + 1}/{len(todo)}] {step.name}: not run (needs {', '.join(blocked)})")
            continue

        def started(job_id: str, step: Step = step) -> None:
            step.job_id, step.state = job_id, "RUNNING"
            write_chain_file(chain_file, header, steps, "local", command)

        position = f"[{index + 1}/{len(todo)}]"
        ok = run_job_here(step.name, step.request, step.run_dir, command, position, started)
        step.state = "COMPLETED" if ok else "FAILED"
        if not ok:
            failed.append(step.name)
        write_chain_file(chain_file, header, steps, "local", command)
    return failed


def launch(
    steps: list[Step], chain_file: Path, header: dict, executor: str, command: str
) -> tuple[str, list[str]]:
    """Run or submit the chain; returns the executor kind and the failed steps (local only)."""
    kind = pick_executor(executor)
    chain_file.parent.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        return kind, run_local(steps, chain_file, header, command)
    submit_slurm(steps, chain_file, header, command)
    return kind, []

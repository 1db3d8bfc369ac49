"""`python slurm/launch.py pipeline`: SFT -> merge -> GRPO -> evaluate as a chain of dependent jobs.

Each step is its own job (its own time limit, requeues and run directory) that starts only after
the previous one completed (`afterok`); `--kill-on-invalid-dep=yes` makes SLURM cancel the rest of
the chain when a step fails, instead of leaving jobs pending forever on a dependency that can never
be met. All configs are resolved and written at submit time, so the whole chain is validated on the
login node; only the paths that earlier steps will produce (the SFT adapter, the merged model) are
not checked for existence there. `pipeline.json` in the pipeline folder records the steps, their
run directories and job ids for `status`, `logs` and `cancel`.

Step semantics: `merge` folds the SFT adapter into the base model (train/merge.py) and later steps
load that merged model (`model.path`) with a fresh LoRA; without `merge`, GRPO continues the SFT
adapter (`init_adapter`). `evaluate` scores the last trained adapter on the last base model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vqa_r1 import output_dir as folders
from vqa_r1.clock import now_iso
from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json
from vqa_r1.launch.monitor import record_job
from vqa_r1.launch.plan import (
    MERGE_TIME,
    JobOptions,
    LocalItem,
    claimer,
    default_dir,
    folder_check,
    request_for_config,
    route_overrides,
    run_locally,
)
from vqa_r1.launch.submit import LaunchRequest, dry_run_text, pick_executor, submit
from vqa_r1.recipes import load_config
from vqa_r1.train.merge import merged_dir

STEPS = ("sft", "merge", "grpo", "evaluate")
DEFAULT_STEPS = "sft,merge,grpo,evaluate"
PIPELINE_FILE = "pipeline.json"


@dataclass
class Step:
    name: str  # also the verb and the run directory's name
    run_dir: Path
    config: RunConfig
    adapter: str | None = None  # merge/evaluate: the adapter (or run directory) to use
    after: str | None = None  # the step this one waits for
    request: LaunchRequest | None = None
    job_id: str | None = None
    state: str | None = None  # local runs: COMPLETED / FAILED / NOT RUN


@dataclass
class PipelinePlan:
    root: Path
    model: str
    steps: list[Step] = field(default_factory=list)


# ------------------------------------------------------------------------------- parsing


def parse_steps(text: str) -> list[str]:
    """`sft,grpo,evaluate` -> the steps, in the only order that makes sense (sft < merge < ...)."""
    steps = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise UserError(
            f"--steps: unknown step(s) {', '.join(unknown)}; steps are {', '.join(STEPS)}"
        )
    if not steps:
        raise UserError(f"--steps: give at least one of {', '.join(STEPS)}")
    if len(set(steps)) != len(steps):
        raise UserError(f"--steps {text}: a step is repeated")
    if steps != sorted(steps, key=STEPS.index):
        raise UserError(f"--steps {text}: steps must come in the order {', '.join(STEPS)}")
    if "merge" in steps and "sft" not in steps:
        raise UserError("--steps: merge needs an sft step before it (it merges the SFT adapter)")
    return steps


def split_overrides(items: list[str], steps: list[str]) -> dict[str, list[str]]:
    """`--set key=v` applies to every step; `--set grpo:key=v` only to the named step."""
    return route_overrides(items, steps, STEPS, "step")


# ------------------------------------------------------------------------------- planning


def step_config(name: str, model: str, overrides: list[str], run_dir: Path) -> RunConfig:
    config = load_config(name, model, None, overrides)  # merge: the SFT recipe's model settings
    config.output_dir = str(run_dir)
    if name == "merge":
        config.resources.time = MERGE_TIME
    return config


def plan_pipeline(
    model: str, steps: str, overrides: list[str], output_dir: str | None
) -> PipelinePlan:
    """Resolve every step's config; wire each to the outputs of the steps before it."""
    names = parse_steps(steps)
    per_step = split_overrides(overrides, names)
    plan = PipelinePlan(default_dir(f"pipeline-{model}", output_dir), model)
    base_path: str | None = None  # a merged model, once merge ran
    adapter_from: Path | None = None  # the run whose adapter applies on base_path
    previous: str | None = None
    for name in names:
        run_dir = plan.root / name
        config = step_config(name, model, per_step[name], run_dir)
        step = Step(name, run_dir, config, after=previous)
        if base_path:
            config.model.path = base_path  # produced by the merge step: not checked here
        if name == "sft":
            adapter_from = run_dir
        elif name == "merge":
            step.adapter = str(adapter_from)
            base_path, adapter_from = str(merged_dir(run_dir)), None
        elif name == "grpo":
            if adapter_from is not None:  # no merge: continue the SFT adapter
                config.init_adapter = str(adapter_from / "final")
            adapter_from = run_dir
        elif name == "evaluate":
            step.adapter = str(adapter_from) if adapter_from else None
        plan.steps.append(step)
        previous = name
    return plan


def attach_requests(plan: PipelinePlan, job: JobOptions) -> None:
    """Job requests per step (writes the configs unless dry-run), chained by `afterok`."""
    if (plan.root / "config.yaml").exists():
        raise UserError(f"{plan.root} is a run directory; give the pipeline its own --output-dir")
    for step in plan.steps:
        step_job = replace(job, time=job.time or MERGE_TIME) if step.name == "merge" else job
        step.request = request_for_config(
            step_job, step.name, step.config, step.run_dir, step.adapter
        )
        step.request.job_name = f"vqa-r1-{step.name}-{plan.model}"


def dependency_params(previous_job_id: str) -> dict[str, Any]:
    """Wait for the previous step to complete; cancel this job if that can no longer happen."""
    return {
        "slurm_dependency": f"afterok:{previous_job_id}",
        "slurm_additional_parameters": {"kill_on_invalid_dep": "yes"},
    }


def describe(plan: PipelinePlan) -> list[str]:
    lines = [f"# pipeline {' -> '.join(s.name for s in plan.steps)} in {plan.root}"]
    for step in plan.steps:
        details = [f"run {step.run_dir}"]
        if step.config.model.path:
            details.append(f"model.path {step.config.model.path}")
        if step.config.init_adapter:
            details.append(f"init_adapter {step.config.init_adapter}")
        if step.adapter:
            details.append(f"adapter {step.adapter}")
        if step.after:
            details.append(f"after {step.after} (afterok)")
        lines.append(f"#   {step.name}: " + "; ".join(details))
    return lines


def dry_run(plan: PipelinePlan) -> str:
    chunks = ["\n".join(describe(plan))]
    for step in plan.steps:
        if step.after:
            step.request.extra_params = dependency_params(f"<job id of {step.after}>")
        chunks.append(f"# ---- step {step.name} ----\n{dry_run_text(step.request)}")
    return "\n".join(chunks) + "\n"


# ------------------------------------------------------------------------------- running


def write_pipeline_file(plan: PipelinePlan, kind: str, command: str) -> None:
    steps = [
        {
            "name": s.name,
            "run_dir": str(s.run_dir),
            "after": s.after,
            "job_id": s.job_id,
            "state": s.state,
            "model_path": s.config.model.path,
            "init_adapter": s.config.init_adapter,
            "adapter": s.adapter,
        }
        for s in plan.steps
    ]
    data = {
        "model": plan.model,
        "executor": kind,
        "command": command,
        "submitted": now_iso(),
        "steps": steps,
    }
    atomic_write_json(plan.root / PIPELINE_FILE, data)


def submit_chain(plan: PipelinePlan, command: str) -> None:
    """One job per step; each after the previous (afterok, killed when that fails)."""
    previous: str | None = None
    for step in plan.steps:
        if previous is not None:
            step.request.extra_params = dependency_params(previous)
        job = submit(step.request, step.run_dir / "jobs")
        step.job_id = previous = str(job.job_id)
        record_job(step.run_dir, step.job_id, "slurm", step.run_dir / "jobs", command)
        write_pipeline_file(plan, "slurm", command)


def run_chain_locally(plan: PipelinePlan, command: str) -> int:
    """No SLURM: run the steps in order here; stop at the first failure and say so."""
    items = [LocalItem(s.name, s.request, s.run_dir) for s in plan.steps]

    def sync() -> None:
        for step, item in zip(plan.steps, items, strict=True):
            step.job_id, step.state = item.job_id, item.state
        write_pipeline_file(plan, "local", command)

    failed = run_locally(items, command, stop_on_failure=True, on_change=sync)
    if failed:
        later = ", ".join(i.name for i in items if i.state == "NOT RUN") or "none"
        print(f"pipeline stopped: step {failed[0]} failed; not run: {later}")
        return 1
    print(f"pipeline completed; folder {plan.root}")
    return 0


def run_pipeline(
    model: str,
    steps: str,
    overrides: list[str],
    output_dir: str | None,
    job: JobOptions,
    command: str,
) -> int:
    plan = plan_pipeline(model, steps, overrides, output_dir)
    settings = {"model": model, "steps": [s.name for s in plan.steps], "set": list(overrides)}
    folder_check(plan.root, "pipeline", settings, job)  # before any step's folder is checked
    attach_requests(plan, job)
    if job.dry_run:
        print(dry_run(plan), end="")
        return 0
    if all(s.request.folder_state == folders.COMPLETE for s in plan.steps):
        print(f"pipeline: every step in {plan.root} is complete with these settings: nothing "
              "submitted (--overwrite, or a new --output-dir, to run it again)")  # fmt: skip
        return 0
    kind = pick_executor(job.executor)
    claimer(plan.root, "pipeline", settings, job.overwrite)()
    with folders.FolderLock(plan.root, "pipeline"):  # one launch at a time writes pipeline.json
        if kind == "local":
            return run_chain_locally(plan, command)
        submit_chain(plan, command)
    print(f"submitted pipeline {' -> '.join(s.name for s in plan.steps)}; folder {plan.root}")
    for step in plan.steps:
        after = f" (after {step.after})" if step.after else ""
        print(f"  {step.name:<9} job {step.job_id}{after}  {step.run_dir}")
    return 0

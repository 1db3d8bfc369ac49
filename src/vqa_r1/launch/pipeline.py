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

import argparse
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.cli_args import add_set_argument
from vqa_r1.errors import UserError

STEPS = ("sft", "merge", "grpo", "evaluate")
DEFAULT_STEPS = "sft,merge,grpo,evaluate"
PIPELINE_FILE = "pipeline.json"
MERGE_TIME = "01:00:00"


@dataclass
class Step:
    name: str  # also the verb and the run directory's name
    run_dir: Path
    config: Any  # RunConfig
    adapter: str | None = None  # merge/evaluate: the adapter (or run directory) to use
    after: str | None = None  # the step this one waits for
    request: Any = None  # LaunchRequest
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
    per_step: dict[str, list[str]] = {s: [] for s in steps}
    for item in items or []:
        head, sep, rest = item.partition(":")
        if sep and "=" not in head:
            if head not in STEPS:
                raise UserError(f"--set {item!r}: {head!r} is not a step ({', '.join(STEPS)})")
            if head not in per_step:
                raise UserError(f"--set {item!r}: step {head} is not in --steps")
            per_step[head].append(rest)
        else:
            for step in steps:
                per_step[step].append(item)
    return per_step


# ------------------------------------------------------------------------------- planning


def default_root(args: argparse.Namespace) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(args.output_dir or f"runs/pipeline-{args.model}-{stamp}").resolve()


def step_config(name: str, args: argparse.Namespace, overrides: list[str], run_dir: Path) -> Any:
    from vqa_r1.config import load_config

    verb = "sft" if name == "merge" else name  # merge loads the SFT base model's settings
    overrides = list(overrides)
    if getattr(args, "dataset", None):
        overrides.append(f"data.dataset={args.dataset}")
    config = load_config(verb, args.model, None, overrides)
    config.verb = name
    config.output_dir = str(run_dir)
    if name == "merge":
        config.resources.time = MERGE_TIME
    return config


def plan_pipeline(args: argparse.Namespace) -> PipelinePlan:
    """Resolve every step's config; wire each to the outputs of the steps before it."""
    from vqa_r1.train.merge import merged_dir

    names = parse_steps(args.steps)
    overrides = split_overrides(args.overrides, names)
    plan = PipelinePlan(default_root(args), args.model)
    base_path: str | None = None  # a merged model, once merge ran
    adapter_from: Path | None = None  # the run whose adapter applies on base_path
    previous: str | None = None
    for name in names:
        run_dir = plan.root / name
        config = step_config(name, args, overrides[name], run_dir)
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


def attach_requests(plan: PipelinePlan, args: argparse.Namespace) -> None:
    """Job requests per step (writes the configs unless dry-run), chained by `afterok`."""
    from vqa_r1.launch.cli import request_for_config

    if (plan.root / "config.yaml").exists():
        raise UserError(f"{plan.root} is a run directory; give the pipeline its own --output-dir")
    for step in plan.steps:
        step_args = argparse.Namespace(**vars(args))
        if step.name == "merge" and args.time is None:
            step_args.time = MERGE_TIME
        request, _, _ = request_for_config(
            step_args, step.name, step.config, step.run_dir, step.adapter
        )
        request.job_name = f"vqa-r1-{step.name}-{plan.model}"
        step.request = request


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
    from vqa_r1.launch.submit import dry_run_text

    chunks = ["\n".join(describe(plan))]
    for step in plan.steps:
        if step.after:
            step.request.extra_params = dependency_params(f"<job id of {step.after}>")
        chunks.append(f"# ---- step {step.name} ----\n{dry_run_text(step.request)}")
    return "\n".join(chunks) + "\n"


# ------------------------------------------------------------------------------- running


def write_pipeline_file(plan: PipelinePlan, kind: str, command: str) -> None:
    from vqa_r1.io import atomic_write_json

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
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "steps": steps,
    }
    atomic_write_json(plan.root / PIPELINE_FILE, data)


def submit_chain(plan: PipelinePlan, command: str) -> None:
    """One job per step; each after the previous (afterok, killed when that fails)."""
    from vqa_r1.launch.monitor import record_job
    from vqa_r1.launch.submit import submit

    previous: str | None = None
    for step in plan.steps:
        if previous is not None:
            step.request.extra_params = dependency_params(previous)
        job = submit(step.request, step.run_dir / "jobs")
        step.job_id = previous = str(job.job_id)
        record_job(step.run_dir, step.job_id, "slurm", step.run_dir / "jobs", command)
        write_pipeline_file(plan, "slurm", command)


def run_locally(plan: PipelinePlan, command: str) -> int:
    """No SLURM: run the steps in order here; stop at the first failure and say so."""
    from vqa_r1.launch.cli import summarise
    from vqa_r1.launch.monitor import log_path, record_job
    from vqa_r1.launch.submit import submit, wait_local

    for step in plan.steps:
        step.state = "NOT RUN"
    write_pipeline_file(plan, "local", command)
    for index, step in enumerate(plan.steps):
        job = submit(step.request, step.run_dir / "jobs")
        step.job_id, step.state = str(job.job_id), "RUNNING"
        record = record_job(step.run_dir, step.job_id, "local", step.run_dir / "jobs", command)
        write_pipeline_file(plan, "local", command)
        print(f"[{index + 1}/{len(plan.steps)}] {step.name}: local job {job.job_id}", flush=True)
        try:
            result = wait_local(job)
        except Exception as err:
            step.state = "FAILED"
            write_pipeline_file(plan, "local", command)
            later = ", ".join(s.name for s in plan.steps[index + 1 :]) or "none"
            reason = failure_reason(err)
            print(
                f"pipeline stopped: step {step.name} failed ({reason}); "
                f"not run: {later}; log: {log_path(record, stderr=True)}"
            )
            return 1
        step.state = "COMPLETED"
        write_pipeline_file(plan, "local", command)
        print(f"  {step.name} finished: {summarise(result)}", flush=True)
    print(f"pipeline completed; folder {plan.root}")
    return 0


def failure_reason(err: BaseException) -> str:
    """The exception line of a failed local job (submitit wraps the job's whole traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b.*:", line)]
    return (raised or lines or [repr(err)])[-1]


def run_pipeline(args: argparse.Namespace, command: str) -> int:
    from vqa_r1.launch.submit import pick_executor

    plan = plan_pipeline(args)
    attach_requests(plan, args)
    if args.dry_run:
        print(dry_run(plan), end="")
        return 0
    kind = pick_executor(args.executor)
    plan.root.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        return run_locally(plan, command)
    submit_chain(plan, command)
    print(f"submitted pipeline {' -> '.join(s.name for s in plan.steps)}; folder {plan.root}")
    for step in plan.steps:
        after = f" (after {step.after})" if step.after else ""
        print(f"  {step.name:<9} job {step.job_id}{after}  {step.run_dir}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="registered model name (`vqa-r1 models`)")
    parser.add_argument(
        "--steps",
        default=DEFAULT_STEPS,
        help=f"comma-separated subset of {', '.join(STEPS)}, in that order (default: all)",
    )
    parser.add_argument(
        "--dataset", default=None, help="'synthetic' or a dataset folder (save_to_disk)"
    )
    add_set_argument(
        parser,
        "override a recipe key for every step, or for one step with STEP: (repeatable)",
        "[STEP:]KEY=VALUE",
    )
    parser.add_argument(
        "--output-dir", default=None, help="pipeline folder (default: runs/pipeline-<model>-<time>)"
    )

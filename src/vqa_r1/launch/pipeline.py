"""`python slurm/launch.py pipeline`: SFT -> merge -> GRPO -> evaluate as a line of dependent jobs.

Each step is its own job (its own time limit, requeues and run directory) that starts only after
the previous one completed (`afterok`; `--kill-on-invalid-dep=yes` makes SLURM cancel the rest
when a step fails, instead of leaving jobs pending forever). All configs are resolved at submit
time, so the whole line is validated on the login node; only the paths that earlier steps will
produce (the SFT adapter, the merged model) are not checked for existence there. The pipeline is
a graph (launch/graph.py): a re-launch skips the steps that are complete, and `launch.json` in the
pipeline folder is what `status`, `logs` and `cancel` read.

Step semantics: `merge` folds the SFT adapter into the base model (train/merge.py) and later steps
load that merged model (`model.path`) with a fresh LoRA; without `merge`, GRPO continues the SFT
adapter (`init_adapter`). `evaluate` scores the last trained adapter on the last base model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.launch.graph import Graph, Step
from vqa_r1.launch.plan import (
    MERGE_TIME,
    Planner,
    default_dir,
    folder_check,
    route_overrides,
)
from vqa_r1.recipes import load_config
from vqa_r1.train.merge import merged_dir

STEPS = ("sft", "merge", "grpo", "evaluate")
DEFAULT_STEPS = "sft,merge,grpo,evaluate"


@dataclass
class PipelineStep:
    """A step's resolved config and what it reads from the steps before it."""

    name: str  # also the verb and the run directory's name
    run_dir: Path
    config: RunConfig
    adapter: str | None = None  # merge/evaluate: the adapter (or run directory) to use
    after: str | None = None  # the step this one waits for


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


def resolve_steps(model: str, steps: str, overrides: list[str], root: Path) -> list[PipelineStep]:
    """Resolve every step's config; wire each to the outputs of the steps before it."""
    names = parse_steps(steps)
    per_step = split_overrides(overrides, names)
    resolved: list[PipelineStep] = []
    base_path: str | None = None  # a merged model, once merge ran
    adapter_from: Path | None = None  # the run whose adapter applies on base_path
    previous: str | None = None
    for name in names:
        run_dir = root / name
        config = step_config(name, model, per_step[name], run_dir)
        step = PipelineStep(name, run_dir, config, after=previous)
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
        resolved.append(step)
        previous = name
    return resolved


def plan_pipeline(
    model: str, steps: str, overrides: list[str], output_dir: str | None, planner: Planner
) -> Graph:
    """The pipeline as a graph: each step's checked request, waiting for the step before it."""
    root = default_dir(f"pipeline-{model}", output_dir)
    resolved = resolve_steps(model, steps, overrides, root)
    settings = {"model": model, "steps": [s.name for s in resolved], "set": list(overrides)}
    folder_check(root, "pipeline", settings, planner.job)  # before any step's folder is checked
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give the pipeline its own --output-dir")
    graph_steps = []
    for step in resolved:
        job = planner.job
        if step.name == "merge":
            job = replace(job, time=job.time or MERGE_TIME)
        request = planner.request_for_config(
            step.name, step.config, step.run_dir, step.adapter, job=job
        )
        request.job_name = f"vqa-r1-{step.name}-{model}"
        info = {
            "model_path": step.config.model.path,
            "init_adapter": step.config.init_adapter,
            "adapter": step.adapter,
        }
        after = [step.after] if step.after else []
        graph_steps.append(Step(step.name, step.run_dir, request, after, info=info))
    return Graph(
        "pipeline",
        root,
        graph_steps,
        lines=describe(root, resolved),
        header={"model": model},
        claim=("pipeline", settings),
        overwrite=planner.job.overwrite,
    )


def describe(root: Path, steps: list[PipelineStep]) -> list[str]:
    lines = [f"# pipeline {' -> '.join(s.name for s in steps)} in {root}"]
    for step in steps:
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

"""`python slurm/launch.py pipeline`: which steps, in which order, and what each reads.

SFT -> merge -> GRPO -> evaluate, each step its own job (its own time limit, requeues and run
directory) that starts only after the step before it completed (`afterok`;
`--kill-on-invalid-dep=yes` makes SLURM cancel the rest when a step fails, instead of leaving jobs
pending forever). launch/build.py builds the line (``pipeline_graph``) with the same builder as
every launch, so the whole line is checked on the login node; only the paths that earlier steps
will produce (the SFT adapter, the merged model) are not checked for existence there. A re-launch
skips the steps that are complete, and `launch.json` in the pipeline folder is what `status`,
`logs` and `cancel` read.

Step semantics: `merge` folds the SFT adapter into the base model (train/merge.py) and later steps
load that merged model (`model.path`) with a fresh LoRA; without `merge`, GRPO continues the SFT
adapter (`init_adapter`). `evaluate` scores the last trained adapter on the last base model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.launch.overrides import route_overrides

STEPS = ("sft", "merge", "grpo", "evaluate")
DEFAULT_STEPS = "sft,merge,grpo,evaluate"


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


def describe(root: Path, steps: list[Any]) -> list[str]:
    """The lines a dry run and a launch print first: each step, what it reads, what it waits for."""
    lines = [f"# pipeline {' -> '.join(s.name for s in steps)} in {root}"]
    for step in steps:
        details = [f"run {step.run_dir}"]
        for key, label in (
            ("model_path", "model.path"),
            ("init_adapter", "init_adapter"),
            ("adapter", "adapter"),
        ):
            if step.info.get(key):
                details.append(f"{label} {step.info[key]}")
        if step.after:
            details.append(f"after {', '.join(step.after)} (afterok)")
        lines.append(f"#   {step.name}: " + "; ".join(details))
    return lines

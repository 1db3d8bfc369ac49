"""Declared experiments: one spec file per study, launched as a resumable chain of jobs.

``python slurm/launch.py experiment NAME --model MODEL`` reads ``specs/NAME.yaml``, plans every
run, evaluation and dataset of the study with the model's own recipes (builder.py and one planner
per kind), prepares the datasets on the login node, and submits the steps as jobs that wait for
the steps they need (a graph, launch/graph.py), the last one writing the tables and plots
(report/experiment.py). ``experiment.json`` in the experiment folder declares the design, the
steps and the tables; ``launch.json`` beside it records the jobs. Re-launching the same command
skips what is complete.
"""

from __future__ import annotations

from pathlib import Path

from vqa_r1 import output_dir as folders
from vqa_r1.errors import UserError
from vqa_r1.experiments import (
    counting,
    cryptogram,
    demo,
    drivingvqa,
    prompt_tuning,
    sim2real,
    text_bias,
)
from vqa_r1.experiments.builder import Builder, split_overrides
from vqa_r1.experiments.spec import list_specs, load_spec
from vqa_r1.io import atomic_write_json
from vqa_r1.launch import graph
from vqa_r1.launch.plan import JobOptions
from vqa_r1.report.experiment import EXPERIMENT_FILE, read_experiment
from vqa_r1.typed_config import to_dict

PLANNERS = {
    "demo": demo.plan,
    "text-bias": text_bias.plan,
    "sim2real": sim2real.plan,
    "drivingvqa": drivingvqa.plan,
    "prompt-tuning": prompt_tuning.plan,
    "counting": counting.plan,
    "cryptogram": cryptogram.plan,
}

__all__ = ["list_specs", "plan_experiment", "run_experiment"]


def plan_experiment(
    name: str, model: str, overrides: list[str], output_dir: str | None, job: JobOptions
) -> Builder:
    per_verb, spec_overrides = split_overrides(overrides)
    spec = load_spec(name, spec_overrides)
    label = Path(name).stem
    root = Path(output_dir or f"results/experiments/{label}-{model}").resolve()
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give the experiment its own --output-dir")
    # output_dir.py's rule for the experiment folder: checked before the builder writes its data
    # (a re-launch with other step settings is refused step by step, builder.check_relaunch)
    settings = {"experiment": label, "model": model}
    if not job.dry_run:
        folders.make_way(root, "experiment", settings, overwrite=job.overwrite)
        folders.claim(root, "experiment", settings)
    elif not job.overwrite:
        folders.check(root, "experiment", settings)
    previous = {} if job.overwrite and job.dry_run else previous_steps(root)
    b = Builder(spec, label, model, root, job, per_verb, previous=previous)
    PLANNERS[spec.kind](b)
    b.add_tables_step()
    return b


def previous_steps(root: Path) -> dict[str, dict]:
    """The steps a previous launch recorded (name -> record); a damaged record is an error."""
    if not (root / EXPERIMENT_FILE).exists():
        return {}
    steps = read_experiment(root).get("steps", [])
    return {s["name"]: s for s in steps if isinstance(s, dict) and "name" in s}


def header(b: Builder) -> dict:
    return {
        "experiment": b.name,
        "kind": b.spec.kind,
        "description": b.spec.description,
        "model": b.model,
        "spec": to_dict(b.spec),
        "data": b.notes,
        "tables": b.tables,
        "plots": b.plots,
    }


def describe(b: Builder) -> list[str]:
    todo = [s for s in b.steps if not s.done]
    lines = [
        f"# experiment {b.name} ({b.spec.kind}) on {b.model} in {b.root}",
        f"# {len(b.steps)} steps, {len(b.steps) - len(todo)} complete from an earlier launch",
    ]
    lines += [f"# data: {note}" for note in b.notes]
    lines += tiny_model_note(b)
    for step in graph.order(b.steps):
        after = f" after {', '.join(step.after)}" if step.after and step.name != "tables" else ""
        if step.name == "tables":
            after = " after all other steps (afterany)"
        state = " [complete: skipped]" if step.done else ""
        lines.append(f"#   {step.name} ({step.info.get('verb')}){after}{state}")
    return lines


def tiny_model_note(b: Builder) -> list[str]:
    """A tiny model other than the one pretrained for the study runs, and its numbers are shown
    as measured; the plan says which tiny model was taught the task, so nobody reads a floor as
    the method's failure (a hub model gets no note)."""
    from vqa_r1.models.registry import get_spec

    wanted = b.spec.tiny_model
    if wanted is None or wanted == b.model or not get_spec(b.model).tiny:
        return []
    return [
        f"# note: {b.model} was not pretrained for this task; the tiny model pretrained for it is "
        f"{wanted} (README, 'Pretrained tiny models')"
    ]


def declare(b: Builder) -> None:
    """``experiment.json``: the design, each step's run directory, labels and settings, and the
    tables (what ``vqa-r1 tables`` and a re-launch read)."""
    steps = [
        {"name": s.name, "run_dir": str(s.run_dir), "after": s.after, **s.info} for s in b.steps
    ]
    atomic_write_json(b.root / EXPERIMENT_FILE, {**header(b), "steps": steps})


def experiment_graph(b: Builder) -> graph.Graph:
    return graph.Graph("experiment", b.root, b.steps, lines=describe(b), header={"model": b.model})


def run_experiment(
    name: str,
    model: str,
    overrides: list[str],
    output_dir: str | None,
    job: JobOptions,
    command: str,
    no_wait: bool = False,
) -> int:
    b = plan_experiment(name, model, overrides, output_dir, job)
    g = experiment_graph(b)
    if job.dry_run:
        print(graph.dry_run(g), end="")
        return 0
    print("\n".join(g.lines), flush=True)
    with folders.FolderLock(b.root, "experiment"):  # one launch at a time writes it
        declare(b)
        outcome = graph.launch(g, command, no_wait)
    if outcome.executor == "local" and outcome.code == 0:
        print(f"experiment {b.name} completed; tables and plots in {b.root}")
    return outcome.code

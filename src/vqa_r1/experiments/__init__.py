"""Declared experiments: one spec file per study, launched as a resumable graph of jobs.

``python slurm/launch.py experiment NAME --model MODEL`` reads ``specs/NAME.yaml``, builds every
run, evaluation and dataset of the study with the model's own recipes (study.py and one
``design`` per kind) into a graph of the one builder (launch/build.py), and runs it with the one
executor (launch/executor.py): it claims the experiment folder, makes the datasets and
``experiment.json`` (the design, the steps and the tables), then runs or submits the steps, each
waiting for the steps it needs, the last one writing the tables and plots (report/experiment.py);
``launch.json`` beside it records the jobs. Re-launching the same command skips what is complete.
"""

from __future__ import annotations

from pathlib import Path

from vqa_r1 import claims
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
from vqa_r1.experiments.spec import ExperimentSpec, list_specs, load_spec
from vqa_r1.experiments.study import Study, split_overrides
from vqa_r1.io import atomic_write_json
from vqa_r1.launch import executor
from vqa_r1.launch.build import GraphBuilder, RelaunchRefused
from vqa_r1.launch.graph import Graph, order
from vqa_r1.launch.request import JobOptions
from vqa_r1.report.experiment import EXPERIMENT_FILE, read_experiment
from vqa_r1.settings import differences, flatten
from vqa_r1.typed_config import to_dict

DESIGNS = {
    "demo": demo.design,
    "text-bias": text_bias.design,
    "sim2real": sim2real.design,
    "drivingvqa": drivingvqa.design,
    "prompt-tuning": prompt_tuning.design,
    "counting": counting.design,
    "cryptogram": cryptogram.design,
}

__all__ = ["build_experiment", "list_specs", "run_experiment"]


def build_study(
    name: str, model: str, overrides: list[str], output_dir: str | None, job: JobOptions
) -> Study:
    """The study's steps, datasets and tables, checked; nothing written."""
    per_verb, spec_overrides = split_overrides(overrides)
    spec = load_spec(name, spec_overrides)
    label = Path(name).stem
    root = Path(output_dir or f"results/experiments/{label}-{model}").resolve()
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give the experiment its own --output-dir")
    # claims.py's rule for the experiment folder, read only: the executor claims it; a
    # re-launch with other step settings is refused step by step (GraphBuilder.check_relaunch)
    if not job.overwrite:
        claims.check(root, "experiment", {"experiment": label, "model": model})
    previous = {} if job.overwrite else previous_steps(root)
    builder = GraphBuilder(job, previous=previous, previous_file=root / EXPERIMENT_FILE)
    study = Study(spec, label, model, root, builder, per_verb)
    try:
        DESIGNS[spec.kind](study)
    except RelaunchRefused:
        changed = spec_changes(root, to_dict(spec))
        if not changed:
            raise
        raise UserError(
            f"{root / EXPERIMENT_FILE}: this experiment was launched with other settings: "
            f"{'; '.join(changed[:4])}. Re-launch with the same --set values, or give it a new "
            "--output-dir (--overwrite moves this one aside)"
        ) from None
    study.add_judge()
    study.add_tables_step()
    return study


def spec_changes(root: Path, spec: dict) -> list[str]:
    """The ``experiment.*`` keys a re-launch changed (what a user typed; the step settings
    they change, a generated dataset's cache folder among them, say less)."""
    try:
        before = read_experiment(root).get("spec")
    except UserError:
        return []
    if not isinstance(before, dict):
        return []
    old, new = flatten(before), flatten(spec)
    # a key the record lacks, now at its default, was added later and changes nothing
    defaults = flatten(to_dict(ExperimentSpec(kind=spec.get("kind", "demo"))))
    new = {k: v for k, v in new.items() if k in old or k not in defaults or v != defaults[k]}
    return [f"experiment.{d}" for d in differences(old, new)]


def previous_steps(root: Path) -> dict[str, dict]:
    """The steps a previous launch recorded (name -> record); a damaged record is an error."""
    if not (root / EXPERIMENT_FILE).exists():
        return {}
    steps = read_experiment(root).get("steps", [])
    return {s["name"]: s for s in steps if isinstance(s, dict) and "name" in s}


def header(study: Study) -> dict:
    return {
        "experiment": study.name,
        "kind": study.spec.kind,
        "description": study.spec.description,
        "model": study.model,
        "spec": to_dict(study.spec),
        "data": study.notes,
        "tables": study.tables,
        "plots": study.plots,
    }


def describe(study: Study) -> list[str]:
    todo = [s for s in study.steps if not s.done]
    lines = [
        f"# experiment {study.name} ({study.spec.kind}) on {study.model} in {study.root}",
        f"# {len(study.steps)} steps, {len(study.steps) - len(todo)} complete from an earlier "
        "launch",
    ]
    lines += [f"# data: {note}" for note in study.notes]
    lines += tiny_model_note(study)
    for step in order(study.steps):
        after = f" after {', '.join(step.after)}" if step.after and step.name != "tables" else ""
        if step.name == "tables":
            after = " after all other steps (afterany)"
        state = " [complete: skipped]" if step.done else ""
        lines.append(f"#   {step.name} ({step.info.get('verb')}){after}{state}")
    return lines


def tiny_model_note(study: Study) -> list[str]:
    """A tiny model other than the one pretrained for the study runs, and its numbers are shown
    as measured; the description says which tiny model was taught the task, so nobody reads a
    floor as the method's failure (a hub model gets no note)."""
    from vqa_r1.models.registry import get_spec

    wanted = study.spec.tiny_model
    if wanted is None or wanted == study.model or not get_spec(study.model).tiny:
        return []
    return [
        f"# note: {study.model} was not pretrained for this task; the tiny model pretrained for "
        f"it is {wanted} (docs/models.md, 'Pretrained tiny models')"
    ]


def declare(study: Study) -> None:
    """``experiment.json``: the design, each step's run directory, labels and settings, and the
    tables (what ``vqa-r1 tables`` and a re-launch read)."""
    steps = [
        {"name": s.name, "run_dir": str(s.run_dir), "after": list(s.after), **s.info}
        for s in study.steps
    ]
    atomic_write_json(study.root / EXPERIMENT_FILE, {**header(study), "steps": steps})


def build_experiment(
    name: str, model: str, overrides: list[str], output_dir: str | None, job: JobOptions
) -> tuple[Study, Graph]:
    """The experiment as a graph: its folder claimed by the executor, then its datasets and
    ``experiment.json`` made, then its steps."""
    study = build_study(name, model, overrides, output_dir, job)
    study.builder.prep(f"{EXPERIMENT_FILE} in {study.root}", lambda: declare(study))
    graph = study.builder.graph(
        "experiment",
        study.root,
        lines=tuple(describe(study)),
        header={"model": model},
        claim=("experiment", {"experiment": study.name, "model": model}),
    )
    return study, graph


def run_experiment(
    name: str,
    model: str,
    overrides: list[str],
    output_dir: str | None,
    job: JobOptions,
    command: str,
    no_wait: bool = False,
) -> int:
    study, graph = build_experiment(name, model, overrides, output_dir, job)
    if job.dry_run:
        print(executor.dry_run(graph), end="")
        return 0
    print("\n".join(graph.lines), flush=True)
    outcome = executor.execute(graph, command, no_wait)
    if outcome.executor in ("local", "inprocess") and outcome.code == 0:
        print(f"experiment {study.name} completed; tables and plots in {study.root}")
    return outcome.code

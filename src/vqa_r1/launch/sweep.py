"""Sweeps: `--sweep key=v1,v2 [--sweep key2=...]` becomes one SLURM job array.

One array rather than N jobs because the scheduler then sees one request (one line in squeue, one
id to cancel, `%P` to bound how many run at once), while each element still gets its own run
directory `<output-dir>/<key>=<value>[,<key>=<value>...]` with its own resolved config.yaml, so a
requeued element resumes from its own checkpoints and `status` can report each one. Every element
is validated on the login node like a single job before the array is submitted.
"""

from __future__ import annotations

import copy
import itertools
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vqa_r1.clock import now_iso
from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json
from vqa_r1.launch.monitor import record_job
from vqa_r1.launch.plan import (
    JobOptions,
    LocalItem,
    RunSpec,
    claimer,
    default_dir,
    folder_check,
    run_locally,
    run_request,
)
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
)
from vqa_r1.output_dir import COMPLETE, FolderLock

SWEEP_FILE = "sweep.json"


@dataclass
class SweepElement:
    name: str  # also the run directory's name
    overrides: list[str]  # the element's `--set` items
    request: LaunchRequest | None = None
    run_dir: Path | None = None
    config: RunConfig | None = None


@dataclass
class SweepPlan:
    verb: str
    root: Path
    keys: dict[str, list[str]]
    elements: list[SweepElement] = field(default_factory=list)
    parallelism: int | None = None


# ------------------------------------------------------------------------------- parsing


def parse_sweeps(items: list[str]) -> dict[str, list[str]]:
    """`["train.seed=1,2", "lora.r=8,16"]` -> {"train.seed": ["1", "2"], "lora.r": ["8", "16"]}.

    Values stay strings: the config's own coercion types them (and names the key when it cannot).
    """
    keys: dict[str, list[str]] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--sweep {item!r}: expected key=v1,v2,..., e.g. train.seed=1,2,3")
        values = [v.strip() for v in raw.split(",")]
        if not raw.strip() or any(not v for v in values):
            raise UserError(f"--sweep {item!r}: empty value; give values separated by commas")
        if key in keys:
            raise UserError(f"--sweep {key} is given twice; list all its values in one --sweep")
        if len(set(values)) != len(values):
            raise UserError(f"--sweep {item!r}: a value is repeated")
        keys[key] = values
    return keys


def expand(keys: dict[str, list[str]]) -> list[dict[str, str]]:
    """The cartesian product, first key slowest (the order the user wrote)."""
    if not keys:
        return []
    names = list(keys)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*keys.values())]


def element_name(point: dict[str, str]) -> str:
    """`train.seed=1,lora.r=8`: readable, unique per point, and safe as one folder name."""
    text = ",".join(f"{k}={v}" for k, v in point.items())
    return text.replace("/", "_").replace(" ", "_")


def check_conflicts(keys: dict[str, list[str]], overrides: list[str]) -> None:
    """A key both swept and `--set` is ambiguous; say so rather than let one silently win."""
    fixed = {item.partition("=")[0].strip() for item in overrides or []}
    both = sorted(fixed.intersection(keys))
    if both:
        raise UserError(f"{', '.join(both)}: given both with --sweep and --set; keep one")


# ------------------------------------------------------------------------------- planning


def plan_sweep(
    spec: RunSpec, job: JobOptions, sweeps: list[str], parallel: int | None = None
) -> SweepPlan:
    """Resolve and validate every element (writes their config.yaml unless this is a dry run)."""
    keys = parse_sweeps(sweeps)
    check_conflicts(keys, spec.overrides)
    root = default_dir(f"{spec.verb}-{spec.model}-sweep", spec.output_dir)
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give a sweep its own --output-dir")
    folder_check(root, "sweep", sweep_settings(spec, sweeps), job)  # before its elements
    plan = SweepPlan(spec.verb, root, keys, parallelism=parallel)
    if plan.parallelism is not None and plan.parallelism < 1:
        raise UserError("--parallel must be at least 1")
    for point in expand(keys):
        name = element_name(point)
        overrides = [f"{k}={v}" for k, v in point.items()]
        element = replace(
            spec, overrides=[*spec.overrides, *overrides], output_dir=str(root / name)
        )
        request, run_dir, config = run_request(element, job)
        plan.elements.append(SweepElement(name, overrides, request, run_dir, config))
    check_shared_request(plan)
    return plan


def sweep_settings(spec: RunSpec, sweeps: list[str]) -> dict:
    """What makes two sweeps the same (output_dir.py): verb, model, recipe, --set, --sweep."""
    return {
        "verb": spec.verb,
        "model": spec.model,
        "recipe": spec.recipe,
        "set": list(spec.overrides),
        "sweep": list(sweeps),
    }


def check_shared_request(plan: SweepPlan) -> None:
    """An array is one sbatch script: every element must ask for the same resources and setup."""
    first = plan.elements[0].request
    for element in plan.elements[1:]:
        r = element.request
        if r.resources != first.resources or r.setup != first.setup:
            raise UserError(
                f"sweep element {element.name} needs other resources or job setup than "
                f"{plan.elements[0].name}; one array shares one request, so sweep such keys "
                "as separate launches"
            )


def array_spec(n: int, parallelism: int | None) -> str:
    """The `--array` value submitit writes: `0-(n-1)%P`, P defaulting to all elements at once."""
    return f"0-{n - 1}%{min(n, parallelism or n)}"


# ------------------------------------------------------------------------------- dry run


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def config_differences(configs: list[dict]) -> list[str]:
    """The keys whose values differ between elements (output_dir aside: it always does)."""
    flats = [flatten(c) for c in configs]
    keys = sorted(k for k in flats[0] if k != "output_dir")
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def describe_plan(plan: SweepPlan) -> list[str]:
    configs = [e.config.to_dict() for e in plan.elements]
    differing = config_differences(configs)
    lines = [
        f"# sweep: {len(plan.elements)} elements of {plan.verb} "
        f"({' x '.join(f'{k}: {len(v)}' for k, v in plan.keys.items())}) in {plan.root}",
        f"# configs differ in: {', '.join(differing) or 'nothing (check the swept keys)'}",
    ]
    for index, (element, config) in enumerate(zip(plan.elements, configs, strict=True)):
        values = ", ".join(f"{k}={flatten(config)[k]!r}" for k in differing)
        lines.append(f"#   [{index}] {element.run_dir}: {values}")
    return lines


def array_request(plan: SweepPlan) -> Any:
    """The request whose job script the whole array runs (element 0's, with a sweep summary)."""
    first = copy.copy(plan.elements[0].request)
    first.summary = describe_plan(plan)
    first.job_name = f"vqa-r1-{plan.verb}-sweep"
    first.setup = list(first.setup)
    return first


def array_script_text(plan: SweepPlan) -> str:
    """The sbatch script submitit would submit for the array, built without submitting."""

    request = array_request(plan)
    if request.snapshot:
        request.setup = snapshot_setup(plan.root / "code" / "SUBMISSION_TIME") + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = plan.parallelism or len(plan.elements)
    executor = make_executor("slurm", plan.root / "jobs", params, preview=True)
    return render(executor, array_size=len(plan.elements))


def dry_run(plan: SweepPlan) -> str:
    if plan.elements[0].request.executor == "local":
        body = "\n".join(dry_run_text(e.request) for e in plan.elements)
        return "# local executor: the elements run one after another\n" + body
    return array_script_text(plan)  # the element differences are in its setup comments


# ------------------------------------------------------------------------------- submission


def submit_array(plan: SweepPlan) -> list[Any]:
    """Submit all elements as one array (submitit's `executor.batch()`); one job per element."""

    request = array_request(plan)
    if request.snapshot:  # one copy of the code for the whole array: one job script
        request.setup = snapshot_setup(snapshot_code(plan.root)) + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = plan.parallelism or len(plan.elements)
    for element in plan.elements:
        if element.request.prepare is not None:  # claimed now that every check has passed
            element.request.prepare()
        element.request.task.max_requeues = element.request.max_requeues
        element.request.task.signal_delay_s = params.get("slurm_signal_delay_s")
    log_dir = plan.root / "jobs"
    log_dir.mkdir(parents=True, exist_ok=True)
    executor = make_executor("slurm", log_dir, params)
    with sbatch_refusal(f"the sweep array {request.job_name} ({plan.root})", request.cluster):
        with executor.batch():
            return [executor.submit(element.request.task) for element in plan.elements]


def write_sweep_file(plan: SweepPlan, kind: str, job_ids: list[str | None]) -> None:
    """sweep.json: what `status`/`logs`/`cancel` read to find the elements of a sweep folder."""
    elements = [
        {"name": e.name, "run_dir": str(e.run_dir), "set": e.overrides, "job_id": job_id}
        for e, job_id in zip(plan.elements, job_ids, strict=True)
    ]
    first = job_ids[0] if job_ids else None
    data = {
        "verb": plan.verb,
        "keys": plan.keys,
        "executor": kind,
        "array_job_id": first.split("_")[0] if first and kind == "slurm" else None,
        "parallelism": plan.parallelism,
        "submitted": now_iso(),
        "elements": elements,
    }
    atomic_write_json(plan.root / SWEEP_FILE, data)


def run_sweep(
    spec: RunSpec, job: JobOptions, sweeps: list[str], parallel: int | None, command: str
) -> int:
    """The launcher's `--sweep` path: plan, then dry-run, submit an array, or run locally."""
    plan = plan_sweep(spec, job, sweeps, parallel)
    if job.dry_run:
        print(dry_run(plan), end="")
        return 0
    if all(e.request.folder_state == COMPLETE for e in plan.elements):
        print(f"sweep: every element in {plan.root} is complete with these settings: nothing "
              "submitted (--overwrite, or a new --output-dir, to run it again)")  # fmt: skip
        return 0
    kind = pick_executor(job.executor)
    new = not plan.root.exists()
    claimer(plan.root, "sweep", sweep_settings(spec, sweeps), job.overwrite)()
    with FolderLock(plan.root, "sweep"):  # one launch at a time writes sweep.json
        return _launch_sweep(plan, kind, command, new)


def _launch_sweep(plan: SweepPlan, kind: str, command: str, new: bool) -> int:
    if kind == "local":
        return run_sweep_locally(plan, command)
    try:
        jobs = submit_array(plan)
    except Exception:  # sbatch refused the array: a folder made for it is taken back
        if new:
            shutil.rmtree(plan.root, ignore_errors=True)
        raise
    for index, (element, job_) in enumerate(zip(plan.elements, jobs, strict=True)):
        record_job(element.run_dir, str(job_.job_id), kind, plan.root / "jobs", command, index)
    write_sweep_file(plan, kind, [str(j.job_id) for j in jobs])
    array_id = str(jobs[0].job_id).split("_")[0]
    print(
        f"submitted {plan.verb} sweep as SLURM job array {array_id} "
        f"({len(jobs)} elements, {array_spec(len(jobs), plan.parallelism)}); folder {plan.root}"
    )
    for element, job_ in zip(plan.elements, jobs, strict=True):
        print(f"  {job_.job_id}  {element.run_dir}")
    return 0


def run_sweep_locally(plan: SweepPlan, command: str) -> int:
    """No SLURM: the elements run one after another; a failed element does not stop the rest."""
    items = [LocalItem(e.name, e.request, e.run_dir) for e in plan.elements]
    failed = run_locally(
        items,
        command,
        stop_on_failure=False,
        on_change=lambda: write_sweep_file(plan, "local", [i.job_id for i in items]),
    )
    if failed:
        print(f"sweep: {len(failed)} of {len(plan.elements)} failed: {', '.join(failed)}")
        return 1
    print(f"sweep: all {len(plan.elements)} elements finished; folder {plan.root}")
    return 0

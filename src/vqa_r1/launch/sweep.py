"""Sweeps: `--sweep key=v1,v2 [--sweep key2=...]` becomes one SLURM job array.

One array rather than N jobs because the scheduler then sees one request (one line in squeue, one
id to cancel, `%P` to bound how many run at once), while each element still gets its own run
directory `<output-dir>/<key>=<value>[,<key>=<value>...]` with its own resolved config.yaml, so a
requeued element resumes from its own checkpoints and `status` can report each one. Every element
is validated on the login node like a single job before the array is submitted.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

SWEEP_FILE = "sweep.json"


@dataclass
class SweepElement:
    name: str  # also the run directory's name
    overrides: list[str]  # the element's `--set` items
    request: Any = None  # LaunchRequest
    run_dir: Path | None = None
    config: Any = None  # RunConfig


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


def default_root(args: argparse.Namespace) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(args.output_dir or f"runs/{args.verb}-{args.model}-sweep-{stamp}").resolve()


def plan_sweep(args: argparse.Namespace) -> SweepPlan:
    """Resolve and validate every element (writes their config.yaml unless this is a dry run)."""
    from vqa_r1.launch.cli import request_from_args

    keys = parse_sweeps(args.sweep)
    check_conflicts(keys, args.overrides)
    root = default_root(args)
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give a sweep its own --output-dir")
    plan = SweepPlan(args.verb, root, keys, parallelism=args.parallel)
    if plan.parallelism is not None and plan.parallelism < 1:
        raise UserError("--parallel must be at least 1")
    for point in expand(keys):
        name = element_name(point)
        overrides = [f"{k}={v}" for k, v in point.items()]
        element_args = copy.copy(args)
        element_args.overrides = list(args.overrides) + overrides
        element_args.output_dir = str(root / name)
        request, run_dir, config = request_from_args(element_args)
        plan.elements.append(SweepElement(name, overrides, request, run_dir, config))
    check_shared_request(plan)
    return plan


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
    from vqa_r1.launch.submit import make_executor, slurm_parameters, snapshot_setup

    request = array_request(plan)
    if request.snapshot:
        request.setup = snapshot_setup(plan.root / "code" / "SUBMISSION_TIME") + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = plan.parallelism or len(plan.elements)
    folder = Path(tempfile.mkdtemp(prefix="vqa-r1-dryrun-"))
    try:
        inner = make_executor("slurm", folder, params)._executor
        inner.parameters["map_count"] = len(plan.elements)
        text = inner._make_submission_file_text(inner._submitit_command_str, "DRYRUN")
        text = text.replace(str(folder), str(plan.root / "jobs"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return text


def dry_run(plan: SweepPlan) -> str:
    from vqa_r1.launch.submit import dry_run_text, pick_executor

    if (
        plan.elements[0].request.executor != "auto"
        and pick_executor(plan.elements[0].request.executor) == "local"
    ):
        body = "\n".join(dry_run_text(e.request) for e in plan.elements)
        return "# local executor: the elements run one after another\n" + body
    return array_script_text(plan)  # the element differences are in its setup comments


# ------------------------------------------------------------------------------- submission


def submit_array(plan: SweepPlan) -> list[Any]:
    """Submit all elements as one array (submitit's `executor.batch()`); one job per element."""
    from vqa_r1.launch.submit import (
        make_executor,
        slurm_parameters,
        snapshot_code,
        snapshot_setup,
    )

    request = array_request(plan)
    if request.snapshot:  # one copy of the code for the whole array: one job script
        request.setup = snapshot_setup(snapshot_code(plan.root)) + request.setup
    params = slurm_parameters(request)
    params["slurm_array_parallelism"] = plan.parallelism or len(plan.elements)
    for element in plan.elements:
        element.request.task.extra["max_requeues"] = element.request.max_requeues
        element.request.task.extra["signal_delay_s"] = params.get("slurm_signal_delay_s")
    log_dir = plan.root / "jobs"
    log_dir.mkdir(parents=True, exist_ok=True)
    executor = make_executor("slurm", log_dir, params)
    with executor.batch():
        jobs = [executor.submit(element.request.task) for element in plan.elements]
    return jobs


def write_sweep_file(plan: SweepPlan, kind: str, job_ids: list[str | None]) -> None:
    """sweep.json: what `status`/`logs`/`cancel` read to find the elements of a sweep folder."""
    from vqa_r1.io import atomic_write_json

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
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "elements": elements,
    }
    atomic_write_json(plan.root / SWEEP_FILE, data)


def run_sweep(args: argparse.Namespace, command: str) -> int:
    """The launcher's `--sweep` path: plan, then dry-run, submit an array, or run locally."""
    from vqa_r1.launch.monitor import record_job
    from vqa_r1.launch.submit import pick_executor

    plan = plan_sweep(args)
    if args.dry_run:
        print(dry_run(plan), end="")
        return 0
    kind = pick_executor(args.executor)
    plan.root.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        return run_locally(plan, command)
    jobs = submit_array(plan)
    for index, (element, job) in enumerate(zip(plan.elements, jobs, strict=True)):
        record_job(element.run_dir, str(job.job_id), kind, plan.root / "jobs", command, index)
    write_sweep_file(plan, kind, [str(job.job_id) for job in jobs])
    array_id = str(jobs[0].job_id).split("_")[0]
    print(
        f"submitted {plan.verb} sweep as SLURM job array {array_id} "
        f"({len(jobs)} elements, {array_spec(len(jobs), plan.parallelism)}); folder {plan.root}"
    )
    for element, job in zip(plan.elements, jobs, strict=True):
        print(f"  {job.job_id}  {element.run_dir}")
    return 0


def run_locally(plan: SweepPlan, command: str) -> int:
    """No SLURM: the elements run one after another; a failed element does not stop the rest."""
    from vqa_r1.launch.cli import summarise
    from vqa_r1.launch.monitor import record_job
    from vqa_r1.launch.pipeline import failure_reason
    from vqa_r1.launch.submit import submit, wait_local

    failed: list[str] = []
    job_ids: list[str | None] = [None] * len(plan.elements)
    for index, element in enumerate(plan.elements):
        job = submit(element.request, element.run_dir / "jobs")
        job_ids[index] = str(job.job_id)
        record_job(element.run_dir, str(job.job_id), "local", element.run_dir / "jobs", command)
        write_sweep_file(plan, "local", job_ids)
        print(f"[{index + 1}/{len(plan.elements)}] {element.name}: local job {job.job_id}")
        try:
            print(f"  finished: {summarise(wait_local(job))}")
        except Exception as err:  # the job's own traceback is in its log
            failed.append(element.name)
            print(f"  FAILED: {failure_reason(err)}")
    if failed:
        print(f"sweep: {len(failed)} of {len(plan.elements)} failed: {', '.join(failed)}")
        return 1
    print(f"sweep: all {len(plan.elements)} elements finished; folder {plan.root}")
    return 0

"""Turning what the user asked for into job requests, on the login node, without argparse.

The command line (vqa_r1.cli.launch) fills a ``RunSpec`` (what to run) and ``JobOptions`` (where and
how); a ``Planner`` (one per launch) turns them into checked ``LaunchRequest``s: the resolved config
(recipe, overrides, registries), the model's availability in the local cache, the dataset's
images, the resources against the cluster profile and the output folder, all before anything is
queued. Every kind of launch (one job, a sweep, a pipeline, an experiment, the demo) builds its
steps' requests here and hands them to launch/graph.py as a graph. What a launch has already
checked and said lives in its planner, not in module state, so two launches in one process (the
tests) do not share it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from vqa_r1 import output_dir
from vqa_r1.clock import run_stamp
from vqa_r1.config import ResourceConfig, RunConfig, run_settings, save_config
from vqa_r1.data.datasets import load_split, release_options
from vqa_r1.errors import UserError
from vqa_r1.judge.job import JudgeJobConfig, judge_settings
from vqa_r1.launch.clusters import format_slurm_time, load_cluster
from vqa_r1.launch.distributed import (
    check_grpo_batch,
    check_vllm,
    job_setup_lines,
    processes_per_node,
)
from vqa_r1.launch.doctor import constraints_file
from vqa_r1.launch.submit import LaunchRequest, Resources, default_cluster
from vqa_r1.launch.task import (
    DoctorTask,
    JudgeTask,
    PretrainTask,
    PromptTuneTask,
    TablesTask,
    task_for,
)
from vqa_r1.models.loading import (
    cached_snapshot,
    check_adapter_base,
    download_command,
    incomplete_message,
)
from vqa_r1.models.registry import get_spec
from vqa_r1.recipes import load_config
from vqa_r1.run_dir import UNHEALTHY, RunDir, refuse_unhealthy, resolve_adapter
from vqa_r1.train.pretrain import PretrainConfig, pretrain_settings
from vqa_r1.train.prompt_tuning import PromptTuneConfig
from vqa_r1.typed_config import to_dict

MERGE_TIME = "01:00:00"
DOCTOR_MINUTES = 10  # the checks take about a minute; the limit must outlast the warning signal
# Jobs never download: compute nodes are often offline, and the model was found complete in the
# cache at submission (check_model_available); without this a missing file retries for minutes.
OFFLINE_SETUP = "export HF_HUB_OFFLINE=1  # the job reads the model from the local cache only"


@dataclass
class JobOptions:
    """Where and how a job runs (the launcher's job options)."""

    executor: str = "auto"  # auto | slurm | local
    cluster: str | None = None
    gpus: int | None = None  # None: the recipe's
    nodes: int | None = None
    time: str | None = None  # SLURM time; None: the recipe's
    processes_per_node: int | None = None  # None: the recipe's (one per training GPU by default)
    dry_run: bool = False
    no_wait: bool = False
    max_requeues: int = 50
    snapshot: bool = True
    overwrite: bool = False  # a folder that would be refused is moved aside (output_dir.py)


@dataclass
class RunSpec:
    """What one run does: the verb, model, recipe and overrides, and where it writes."""

    verb: str
    model: str
    recipe: str | None = None
    overrides: list[str] = field(default_factory=list)
    output_dir: str | None = None
    adapter: str | None = None  # evaluate / merge: the adapter or run directory
    init_adapter: str | None = None  # grpo: continue this adapter


def default_dir(kind: str, output_dir: str | None) -> Path:
    """The given folder, or ``runs/<kind>-<time>``."""
    return Path(output_dir or f"runs/{kind}-{run_stamp()}").resolve()


def resolve_run(spec: RunSpec) -> tuple[RunConfig, Path]:
    """The checked RunConfig and the run directory (no model is loaded)."""
    extra = {}
    if spec.init_adapter:
        extra["init_adapter"] = str(Path(spec.init_adapter).resolve())
    config = load_config(spec.verb, spec.model, spec.recipe, spec.overrides, **extra)
    if config.init_adapter:  # continued on the model it was trained on
        check_adapter_base(config.init_adapter, config.model)
    run_dir = default_dir(f"{spec.verb}-{spec.model}", spec.output_dir)
    config.output_dir = str(run_dir)
    return config, run_dir


@dataclass
class Planner:
    """Builds the checked job requests of one launch with its ``JobOptions``."""

    job: JobOptions
    noted: set[str] = field(default_factory=set)  # remarks said (once per launch)
    checked_splits: set[tuple[str, str, str]] = field(default_factory=set)  # images read
    trl_checked: set[str] = field(default_factory=set)  # train settings TRL has accepted

    def request_for_config(
        self,
        verb: str,
        config: RunConfig,
        run_dir: Path,
        adapter: str | None = None,
        check_data: bool = True,
        job: JobOptions | None = None,
    ) -> LaunchRequest:
        """The job request for a resolved config (single jobs, sweep elements, pipeline and
        experiment steps). ``job``: other job options for this step (a merge's shorter time).

        ``check_data=False``: the dataset is made at submission by the caller (an experiment's dry
        run prints the chain without building its datasets)."""
        job = job or self.job
        r = config.resources
        gpus = job.gpus if job.gpus is not None else r.gpus
        nodes = job.nodes if job.nodes is not None else r.nodes
        if job.processes_per_node is not None and job.processes_per_node < 1:
            raise UserError(f"--processes-per-node must be >= 1, got {job.processes_per_node}")
        requested = job.processes_per_node or r.processes_per_node
        if requested is not None and requested > 1 and verb not in ("sft", "grpo"):
            raise UserError(f"processes per node: {verb} runs one process; only training has more")
        if gpus < 0 or nodes < 1:
            raise UserError(f"--gpus must be >= 0 and --nodes >= 1, got {gpus} and {nodes}")
        gpus, nodes = self.one_writer(verb, gpus, nodes)
        processes = processes_per_node(config, gpus, requested)  # the vLLM server's GPUs left out
        check_grpo_batch(config, processes * nodes)
        self.check_trl(verb, config, processes * nodes)
        for note in check_vllm(config, gpus, processes * nodes):
            self.note(note)
        res = Resources(
            gpus=gpus,
            nodes=nodes,
            time=job.time or r.time,
            cpus_per_gpu=r.cpus_per_gpu,
            mem_gb=r.mem_gb,
            tasks_per_node=processes,
        )
        config.resources.gpus, config.resources.nodes, config.resources.time = (
            res.gpus,
            res.nodes,
            res.time,
        )
        config.resources.processes_per_node = requested
        flat = yaml.safe_dump(
            {k: config.to_dict()[k] for k in ("lora", "train")},
            default_flow_style=True,
            width=10_000,
        )
        summary = [
            f"# vqa-r1 {verb} --model {config.model.name} --recipe {config.recipe}",
            f"# run directory: {run_dir}",
            f"# settings: {flat.strip()}",
        ]
        self.check_model_available(config)
        if check_data:
            self.check_dataset(config, verb)
        settings = run_settings(config, adapter)
        state = folder_check(run_dir, verb, settings, job)
        if state == output_dir.RESUME and verb == "grpo":  # refused here, not after the queue
            refuse_unhealthy(run_dir, config.train.health_action)
        return LaunchRequest(
            task_for(verb, run_dir, adapter),
            res,
            job.executor,
            job.cluster,
            f"vqa-r1-{verb}-{config.model.name}",
            job.dry_run,
            summary=summary,
            setup=[OFFLINE_SETUP, *job_setup_lines(config, res.gpus, res.nodes)],
            max_requeues=job.max_requeues,
            snapshot=job.snapshot,
            folder_state=state,
            prepare=claimer(run_dir, verb, settings, job.overwrite, config),
        )

    def one_writer(self, verb: str, gpus: int, nodes: int) -> tuple[int, int]:
        """Evaluate and merge run one process: one GPU on one node. SLURM starts a task per GPU, and
        two tasks of one evaluation would write the same output files; more GPUs would sit idle."""
        if verb in ("sft", "grpo") or (gpus <= 1 and nodes <= 1):
            return gpus, nodes
        self.note(
            f"{verb} runs one process on one GPU: asking for {min(gpus, 1)} GPU(s) on 1 node, not "
            f"{gpus} GPU(s) on {nodes} node(s) (several evaluations at once: one job each)"
        )
        return min(gpus, 1), 1

    def run_request(self, spec: RunSpec) -> tuple[LaunchRequest, Path, RunConfig]:
        """sft / grpo / evaluate (an adapter to evaluate must exist now; a pipeline's is made later)."""
        adapter = resolve_adapter(Path(spec.adapter).resolve()) if spec.adapter else None
        config, run_dir = resolve_run(spec)
        if adapter is not None:  # evaluated on the model it was trained on
            check_adapter_base(adapter, config.model)
        given = str(Path(spec.adapter).resolve()) if spec.adapter else None
        return self.request_for_config(spec.verb, config, run_dir, given), run_dir, config

    def merge_request(self, spec: RunSpec) -> tuple[LaunchRequest, Path, RunConfig]:
        """merge: the base model's settings from its SFT recipe; the adapter checked here."""
        if not spec.adapter:
            raise UserError("merge needs --adapter (a LoRA adapter folder or a run directory)")
        adapter = resolve_adapter(Path(spec.adapter).resolve())
        config = load_config("merge", spec.model, spec.recipe, spec.overrides)
        check_adapter_base(adapter, config.model)
        run_dir = default_dir(f"merge-{spec.model}", spec.output_dir)
        config.output_dir = str(run_dir)
        job = replace(self.job, time=self.job.time or MERGE_TIME)
        return (
            self.request_for_config("merge", config, run_dir, str(adapter), job=job),
            run_dir,
            config,
        )

    def pretrain_request(
        self, pretrain_config: PretrainConfig, out: Path, stop_after: int | None
    ) -> tuple[LaunchRequest, Path]:
        """pretrain: the config was checked by train.pretrain.config_from_overrides."""
        job = self.job
        _one_process(job, "pretrain")
        gpus, nodes = self.one_writer("pretrain", job.gpus or 0, job.nodes or 1)
        res = Resources(gpus=gpus, nodes=nodes, time=job.time or "04:00:00")
        summary = [
            f"# vqa-r1 pretrain --family {pretrain_config.family} --out {out}",
            f"# settings: {asdict(pretrain_config)}",
        ]
        task = PretrainTask(str(out), config=pretrain_config, stop_after=stop_after)
        settings = pretrain_settings(pretrain_config)
        request = LaunchRequest(
            task,
            res,
            job.executor,
            job.cluster,
            f"vqa-r1-pretrain-{pretrain_config.family}",
            job.dry_run,
            summary=summary,
            max_requeues=job.max_requeues,
            snapshot=job.snapshot,
            folder_state=folder_check(out, "pretrain", settings, job, "--out"),
            prepare=claimer(out, "pretrain", settings, job.overwrite),
        )
        return request, out

    def judge_request(
        self, judge_config: JudgeJobConfig, output_dir: str | None, setup: list[str]
    ) -> tuple[LaunchRequest, Path]:
        """judge: one GPU when it serves its own vLLM model, none for an API."""
        job = self.job
        _one_process(job, "judge")
        out = default_dir("judge", output_dir)
        settings = judge_settings(judge_config)
        wants_gpu = 1 if judge_config.vllm_model else 0
        res = Resources(
            gpus=job.gpus if job.gpus is not None else wants_gpu,
            nodes=job.nodes or 1,
            time=job.time or "04:00:00",
            tasks_per_node=1,  # one judge process (a vLLM judge spreads over its GPUs itself)
        )
        request = LaunchRequest(
            JudgeTask(str(out), config=judge_config),
            res,
            job.executor,
            job.cluster,
            "vqa-r1-judge",
            job.dry_run,
            setup=setup,
            max_requeues=job.max_requeues,
            snapshot=job.snapshot,
            folder_state=folder_check(out, "judge", settings, job),
            prepare=claimer(out, "judge", settings, job.overwrite),
        )
        return request, out

    def doctor_request(
        self, models: list[str], output_dir: str | None
    ) -> tuple[LaunchRequest, Path]:
        """doctor: one process per node with one GPU (none where the profile has none; or --gpus),
        a short time limit."""
        job = self.job
        _one_process(job, "doctor")
        for name in models:
            get_spec(name)  # a typo is an error here, not a FAIL line after the queue wait
        profile = load_cluster(job.cluster or default_cluster())
        # one GPU shows the driver, the architecture and the memory (a node's GPUs are alike)
        gpus = job.gpus if job.gpus is not None else min(1, profile.gpus_per_node)
        minutes = max(DOCTOR_MINUTES, math.ceil(profile.signal_delay_s / 60) + 1)
        res = Resources(
            gpus=gpus,
            nodes=job.nodes or 1,
            time=job.time or format_slurm_time(minutes),
            tasks_per_node=1,
        )
        out = default_dir("doctor", output_dir)
        tested = constraints_file()
        task = DoctorTask(
            str(out),
            models=tuple(models),
            cluster=str(profile.source),
            constraints=str(tested) if tested else None,
        )
        flags = "".join(f" --model {name}" for name in models)
        request = LaunchRequest(
            task,
            res,
            job.executor,
            job.cluster,
            "vqa-r1-doctor",
            job.dry_run,
            summary=[f"# vqa-r1 doctor{flags} --gpus {gpus} (cluster {profile.name})"],
            setup=[OFFLINE_SETUP],
            max_requeues=0,
            snapshot=job.snapshot,
        )
        return request, out

    def prompt_tune_request(
        self,
        config: PromptTuneConfig,
        run_dir: Path,
        base: bool,
        resources: ResourceConfig,
        job_name: str,
        label: str,
    ) -> LaunchRequest:
        """prompt-tune (``base``: the base model scored the same way) with the resources of the
        model's SFT recipe (the same model is loaded and trained)."""
        job = self.job
        verb = "prompt-tune --base" if base else "prompt-tune"
        gpus = job.gpus if job.gpus is not None else resources.gpus
        settings = to_dict(config)
        return LaunchRequest(
            PromptTuneTask(str(run_dir), config=config, base=base),
            Resources(gpus=gpus, nodes=1, time=job.time or resources.time, mem_gb=resources.mem_gb),
            job.executor,
            job.cluster,
            job_name,
            job.dry_run,
            summary=[
                f"# vqa-r1 {verb} --model {config.model.name} --mode {config.mode} ({label})",
                f"# settings: {settings}",
            ],
            setup=[OFFLINE_SETUP],
            max_requeues=job.max_requeues,
            snapshot=job.snapshot,
            # the job's run_prompt_tuning / run_base claims the folder with this verb: the
            # submission (jobs/) must find it claimed, or the job would refuse its own folder
            folder_state=folder_check(run_dir, verb, settings, job),
            prepare=claimer(run_dir, verb, settings, job.overwrite),
        )

    def tables_request(self, root: Path, job_name: str) -> LaunchRequest:
        """An experiment's tables and plots (report/experiment.py): no GPU, half an hour."""
        return LaunchRequest(
            TablesTask(str(root)),
            Resources(gpus=0, nodes=1, time="00:30:00", mem_gb=8),
            self.job.executor,
            self.job.cluster,
            job_name,
            self.job.dry_run,
            summary=[f"# vqa-r1 tables {root}"],
            max_requeues=self.job.max_requeues,
            snapshot=self.job.snapshot,
        )

    def check_dataset(self, config: RunConfig, verb: str) -> None:
        """The split a job reads, schema and every image, checked here and not after the queue wait.

        Synthetic data is generated by the job itself. Each (folder, split) is read once per launch,
        so a sweep over other keys does not re-read the images per element.
        """
        if config.data.dataset == "synthetic" or verb not in ("sft", "grpo", "evaluate"):
            return
        split = config.eval.split if verb == "evaluate" else config.data.train_split
        options = release_options(config.data)
        key = (str(Path(config.data.dataset).resolve()), split, repr(sorted(options.items())))
        if key not in self.checked_splits:
            load_split(config.data.dataset, split, check_images=True, options=options)
            self.checked_splits.add(key)

    def check_trl(self, verb: str, config: RunConfig, processes: int) -> None:
        """TRL's checks of the verb's SFTConfig / GRPOConfig (train/runner.check_trl_config), once
        per distinct train section and process count of a launch (a sweep plans many)."""
        if verb not in ("sft", "grpo"):
            return
        key = json.dumps([verb, processes, config.to_dict()["train"]], sort_keys=True, default=str)
        if key in self.trl_checked:
            return
        from vqa_r1.train.runner import check_trl_config  # imports TRL (seconds): only here

        check_trl_config(config, processes)
        self.trl_checked.add(key)

    def check_model_available(self, config: RunConfig) -> None:
        """A hub model must be in the cache before a job is queued: compute nodes are often offline
        (a dry run says so once instead)."""
        message = missing_model(config)
        if message is None:
            return
        if not self.job.dry_run:
            raise UserError(message)
        self.note(message)  # a chain of 17 dry-run steps says it once

    def note(self, message: str) -> None:
        """A remark on stderr, once per launch."""
        if message not in self.noted:
            self.noted.add(message)
            print(f"note: {message}", file=sys.stderr)


def folder_check(
    run_dir: Path, verb: str, settings: Any, job: JobOptions, flag: str = "--output-dir"
) -> str:
    """What ``run_dir`` holds for this request (output_dir.py), read only: a folder the request
    may not write is refused here, on the login node, before anything is written or queued.
    With ``--overwrite`` it is moved aside at submission instead."""
    if job.overwrite:
        return output_dir.NEW
    return output_dir.check(run_dir, verb, settings, flag)


def _unhealthy(run_dir: Path) -> bool:
    try:
        return RunDir(run_dir).status().get("state") == UNHEALTHY
    except (OSError, ValueError):
        return False


def claimer(
    run_dir: Path,
    verb: str,
    settings: Any,
    overwrite: bool,
    config: RunConfig | None = None,
    command: str | None = None,
) -> Callable[[], None]:
    """What ``submit`` calls once every check has passed: the folder moved aside (``overwrite``),
    claimed for ``verb`` with ``settings``, and the resolved config written (when absent)."""

    def prepare() -> None:
        output_dir.make_way(run_dir, verb, settings, overwrite=overwrite)
        output_dir.claim(run_dir, verb, settings, command)
        config_file = run_dir / "config.yaml"
        if config is not None and (not config_file.exists() or _unhealthy(run_dir)):
            save_config(config, config_file)  # an UNHEALTHY run continues with health_action=warn

    return prepare


def missing_model(config: RunConfig) -> str | None:
    """What is wrong with a hub model's local cache (None: complete, or no hub model needed)."""
    spec = get_spec(config.model.name)
    if spec.tiny or config.model.path:
        return None
    path, missing = cached_snapshot(spec.hub_id)
    if path is not None and not missing:
        return None
    if path is not None:
        return incomplete_message(spec.hub_id, path, missing)
    return (
        f"{spec.hub_id} is not in the local Hugging Face cache; download it first on this "
        f"login node: {download_command(spec.hub_id)}"
    )


def _one_process(job: JobOptions, verb: str) -> None:
    if job.processes_per_node is not None:
        raise UserError(f"--processes-per-node: a {verb} job runs one process per node")


def route_overrides(
    items: list[str], targets: list[str], known: tuple[str, ...], kind: str
) -> dict[str, list[str]]:
    """``--set KEY=V`` goes to every target, ``--set NAME:KEY=V`` to the target NAME alone.

    Pipelines route to their steps, experiments to their verbs (``kind`` names which, in errors).
    A colon inside the value (``--set model.path=/a:b``) comes after the ``=`` and is no prefix.
    """
    routed: dict[str, list[str]] = {t: [] for t in targets}
    for item in items or []:
        head, sep, rest = item.partition(":")
        if not sep or "=" in head:
            for target in targets:
                routed[target].append(item)
            continue
        name = head.replace("-", "_")
        if name not in known:
            raise UserError(f"--set {item!r}: {head!r} is not a {kind} ({', '.join(known)})")
        if name not in routed:
            raise UserError(f"--set {item!r}: {kind} {head} is not in --{kind}s")
        routed[name].append(rest)
    return routed

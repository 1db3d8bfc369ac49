"""The one builder: what the user asked for, as a graph of checked, immutable job requests.

Every verb is a graph built here, whatever runs it: one job (`vqa-r1 sft`, `slurm/launch.py
grpo`) is a one-step graph, a sweep a graph of independent steps sharing one job script, a
pipeline a line, an experiment (experiments/study.py, a ``GraphBuilder`` with a study's design)
a declared graph. ``GraphBuilder`` checks each step on the login node before anything is written
or queued: the resolved config (recipe, overrides, registries, TRL's own checks for the process
count), the model in the local cache, the dataset's images, the resources against the cluster
profile, the run directory's state under claims.py's rule with settings.py's "same settings",
and, for a re-launch, the settings its previous launch recorded. Each step's ``JobRequest`` is
complete when made (launch/request.py: frozen); the executor (launch/executor.py) runs the graph.

What a launch has checked and said lives in its builder, not in module state, so two launches in
one process (the tests) do not share it.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from vqa_r1 import claims, ranks
from vqa_r1.clock import run_stamp
from vqa_r1.config import RunConfig, run_settings, save_config
from vqa_r1.data.datasets import load_split, release_options
from vqa_r1.errors import UserError
from vqa_r1.judge.job import JudgeJobConfig, judge_settings
from vqa_r1.launch import pipeline, sweep
from vqa_r1.launch.clusters import format_slurm_time, load_cluster
from vqa_r1.launch.distributed import (
    check_grpo_batch,
    check_vllm,
    job_setup_lines,
    processes_per_node,
)
from vqa_r1.launch.doctor import constraints_file
from vqa_r1.launch.graph import Graph, Prep, Step
from vqa_r1.launch.job_script import default_cluster
from vqa_r1.launch.request import JobOptions, JobRequest, Resources
from vqa_r1.launch.task import (
    DoctorTask,
    EvaluateTask,
    JudgeTask,
    MergeTask,
    PretrainTask,
    PromptTuneTask,
    TablesTask,
    Task,
    TrainTask,
)
from vqa_r1.models.adapters import get_adapter, image_options
from vqa_r1.models.loading import (
    cached_snapshot,
    check_adapter_base,
    download_command,
    incomplete_message,
)
from vqa_r1.models.registry import get_spec
from vqa_r1.models.serving import mm_limits
from vqa_r1.recipes import load_config
from vqa_r1.rewards.reasoning import REASONING_REWARD, has_reference, missing_reference
from vqa_r1.run_dir import UNHEALTHY, RunDir, refuse_unhealthy, resolve_adapter
from vqa_r1.settings import comparable, differences, flatten
from vqa_r1.train.merge import merged_dir
from vqa_r1.train.pretrain import PretrainConfig, pretrain_settings
from vqa_r1.typed_config import to_dict

DOCTOR_MINUTES = 10  # the checks take about a minute; the limit must outlast the warning signal
# Jobs never download: compute nodes are often offline, and the model was found complete in the
# cache at submission (check_model_available); without this a missing file retries for minutes.
OFFLINE_SETUP = "export HF_HUB_OFFLINE=1  # the job reads the model from the local cache only"


@dataclass(frozen=True)
class RunSpec:
    """What one run does: the verb, model, recipe and overrides, and where it writes."""

    verb: str
    model: str
    recipe: str | None = None
    overrides: tuple[str, ...] = ()
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
    config = load_config(spec.verb, spec.model, spec.recipe, list(spec.overrides), **extra)
    if config.init_adapter:  # continued on the model it was trained on
        check_adapter_base(config.init_adapter, config.model)
    run_dir = default_dir(f"{spec.verb}-{spec.model}", spec.output_dir)
    config.output_dir = str(run_dir)
    return config, run_dir


def step_settings(config: dict) -> dict:
    """A step's settings as launch.json and experiment.json record them and a re-launch compares
    them: settings.comparable's view of its config, flattened to ``section.key``."""
    return flatten(comparable(config))


class RelaunchRefused(UserError):
    """A re-launch whose step settings differ from the previous launch's (``check_relaunch``);
    an experiment names the ``experiment.*`` keys behind it instead, when those changed."""


@dataclass
class GraphBuilder:
    """Builds the checked steps of one launch with its ``JobOptions``, then its graph."""

    job: JobOptions
    # each step's settings as the previous launch of this graph recorded them (name -> settings)
    previous: dict[str, dict] = field(default_factory=dict)
    previous_file: Path | None = None  # where they were recorded (named in a refusal)
    steps: list[Step] = field(default_factory=list)
    configs: dict[str, Any] = field(default_factory=dict)  # each step's resolved config
    prepare: list[Prep] = field(default_factory=list)
    noted: set[str] = field(default_factory=set)  # remarks said (once per launch)
    # (folder, split, options, images per row) read once a launch -> has a reference reasoning
    checked_splits: dict[tuple, bool] = field(default_factory=dict)
    trl_checked: set[str] = field(default_factory=set)  # train settings TRL has accepted
    stamp: str = field(default_factory=run_stamp)  # the code snapshot of this launch

    @property
    def inprocess(self) -> bool:
        return self.job.executor == "inprocess"

    # ------------------------------------------------------------------------- steps
    def run(
        self,
        name: str,
        verb: str,
        config: RunConfig,
        run_dir: Path,
        adapter: str | None = None,
        after: tuple[str, ...] = (),
        info: dict | None = None,
        job_name: str | None = None,
        check_data: bool = True,
    ) -> Step:
        """An sft, grpo, evaluate or merge step with the resolved ``config`` (its resources from
        the recipe, ``--gpus``/``--nodes``/``--time`` over them). ``adapter``: what an
        evaluation or a merge reads (it may be made by a step before). ``check_data=False``: the
        dataset is made by the launch itself (a Prep), not by the user."""
        job = self.job
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
        if self.inprocess:  # the processes this command was started in (torchrun: several)
            processes, world = 1, ranks.world_size()
        else:  # the vLLM server's GPUs left out
            processes = processes_per_node(config, gpus, requested)
            world = processes * nodes
        check_grpo_batch(config, world)
        self.check_trl(verb, config, world)
        for note in check_vllm(config, gpus, world):
            self.note(note)
        res = Resources(
            gpus=gpus,
            nodes=nodes,
            time=job.time or r.time,
            cpus_per_gpu=r.cpus_per_gpu,
            mem_gb=r.mem_gb,
            tasks_per_node=processes,
        )
        resources = replace(r, gpus=gpus, nodes=nodes, time=res.time, processes_per_node=requested)
        config = replace(config, resources=resources, output_dir=str(run_dir))
        if not self.inprocess:  # a job is offline and must find it all; this process may not
            self.check_model_available(config)
            if check_data:
                self.check_dataset(config, verb)
        self.check_relaunch(name, step_settings(config.to_dict()))
        settings = run_settings(config, adapter)
        state = self.folder_check(run_dir, verb, settings)
        if state == claims.RESUME and verb == "grpo":  # refused here, not after the queue
            refuse_unhealthy(run_dir, config.train.health_action)
        flat = yaml.safe_dump(
            {k: config.to_dict()[k] for k in ("lora", "train")},
            default_flow_style=True,
            width=10_000,
        )
        summary = (
            f"# vqa-r1 {verb} --model {config.model.name} --recipe {config.recipe}",
            f"# run directory: {run_dir}",
            f"# settings: {flat.strip()}",
            *image_limits(config),
            *self.memory_plan(config, res.gpus),
        )
        kind = TrainTask if verb in ("sft", "grpo") else {"evaluate": EvaluateTask}.get(verb)
        if kind is TrainTask:
            task = self.task(TrainTask, run_dir, res.gpus)
        else:
            task = self.task(kind or MergeTask, run_dir, res.gpus, adapter=adapter)
        request = self.request(
            task,
            res,
            job_name or f"vqa-r1-{verb}-{config.model.name}",
            summary,
            (OFFLINE_SETUP, *job_setup_lines(config, res.gpus, res.nodes)),
            run_dir,
            state,
            claimer(run_dir, verb, settings, job.overwrite, config),
        )
        info = {**(info or {}), "settings": step_settings(config.to_dict())}
        return self.add(Step(name, run_dir, request, tuple(after), info=info), config)

    def memory_plan(self, config: RunConfig, gpus: int) -> tuple[str, ...]:
        """A training job for a cluster's GPUs: its memory plan, as comment lines of the job
        script (so a dry run prints it), and refused here when it cannot fit the profile's GPU
        (``gpu_mem_gb``). A local or in-process job runs on this machine's GPUs, not the
        profile's: no plan is checked for it."""
        if config.verb not in ("sft", "grpo") or gpus < 1 or self.inprocess:
            return ()
        cluster = (
            self.job.dry_run
            or self.job.executor == "slurm"
            or (self.job.executor == "auto" and shutil.which("sbatch") is not None)
        )
        if not cluster:
            return ()
        from vqa_r1.models.memory_plan import check_fits, plan, with_gpu

        memory = plan(config, gpus)
        if memory is None:
            return ()
        profile = load_cluster(self.job.cluster or default_cluster())
        card = profile.gpu_mem_gb
        if card:
            check_fits(memory, card, f"cluster {profile.name}")
            memory = with_gpu(memory, card)
        head, *terms = memory.lines(card)  # "# plan:" keeps them apart from the chain's lines
        return (f"# {head}", *(f"# plan: {term.strip()}" for term in terms))

    def train(
        self,
        name: str,
        config: RunConfig,
        run_dir: Path,
        continues: Step | None = None,
        on: Step | None = None,
        after: tuple[str, ...] = (),
        **fields: Any,
    ) -> Step:
        """An SFT or GRPO run of ``config``. ``continues``: the training step whose final adapter
        it goes on from (``init_adapter``); ``on``: the merge step whose merged model it trains
        (``model.path``, with a fresh adapter). It waits for both: pipelines and studies wire a
        chain only here (and in ``merge``, ``evaluate``)."""
        config = self._on(self._continuing(config, continues), on)
        if continues is None and config.init_adapter:  # the user's (--set init_adapter=...)
            check_adapter_base(config.init_adapter, config.model)
        return self.run(
            name, config.verb, config, run_dir, None, self._waits(after, continues, on),
            **self._wired(fields, config, None),
        )  # fmt: skip

    def merge(
        self,
        name: str,
        config: RunConfig,
        run_dir: Path,
        trained: Step,
        after: tuple[str, ...] = (),
        **fields: Any,
    ) -> Step:
        """``trained``'s adapter folded into the model of ``config`` (its SFT recipe's settings;
        the recipes give a merge an hour), after ``trained``."""
        adapter = str(trained.run_dir)
        waits = self._waits(after, trained)
        fields = self._wired(fields, config, adapter)
        return self.run(name, "merge", config, run_dir, adapter, waits, **fields)

    def evaluate(
        self,
        name: str,
        config: RunConfig,
        run_dir: Path,
        trained: Step | None = None,
        on: Step | None = None,
        after: tuple[str, ...] = (),
        **fields: Any,
    ) -> Step:
        """An evaluation of ``trained``'s adapter (None: the model itself) on the model of
        ``config``, or on the merged model of ``on``; after both."""
        adapter = str(trained.run_dir) if trained is not None else None
        config = self._on(config, on)
        waits = self._waits(after, trained, on)
        fields = self._wired(fields, config, adapter)
        return self.run(name, "evaluate", config, run_dir, adapter, waits, **fields)

    @staticmethod
    def _continuing(config: RunConfig, step: Step | None) -> RunConfig:
        if step is None:
            return config
        return replace(config, init_adapter=str(step.run_dir / "final"))

    @staticmethod
    def _on(config: RunConfig, merge: Step | None) -> RunConfig:
        if merge is None:
            return config  # made by the merge step: not checked here
        return replace(config, model=replace(config.model, path=str(merged_dir(merge.run_dir))))

    @staticmethod
    def _waits(after: tuple[str, ...], *steps: Step | None) -> tuple[str, ...]:
        names = [*after, *(s.name for s in steps if s is not None)]
        return tuple(dict.fromkeys(names))

    @staticmethod
    def _wired(fields: dict, config: RunConfig, adapter: str | None) -> dict:
        """What a step reads from the steps before it, recorded in launch.json beside it."""
        wiring = {
            "model_path": config.model.path,
            "init_adapter": config.init_adapter,
            "adapter": adapter,
        }
        return {**fields, "info": {**(fields.get("info") or {}), **wiring}}

    def task(self, kind: type[Task], run_dir: Path, gpus: int, **fields: Any) -> Task:
        """A task of ``kind`` with what the job needs to know of its launch: its GPUs (none in
        process: this process uses what it sees), the requeue limit and the cluster's warning
        time; a progress bar in a terminal (in process), never in a job log."""
        if kind in (EvaluateTask, PromptTuneTask):
            fields.setdefault("progress", self.inprocess)
        return kind(
            str(run_dir),
            max_requeues=self.job.max_requeues if kind is not DoctorTask else 0,
            signal_delay_s=self.signal_delay(),
            gpus=0 if self.inprocess else gpus,
            **fields,
        )

    def request(
        self,
        task: Task,
        resources: Resources,
        job_name: str,
        summary: tuple[str, ...],
        setup: tuple[str, ...],
        folder: Path,
        state: str | None,
        prepare: Callable[[], None] | None,
    ) -> JobRequest:
        return JobRequest(
            task,
            resources,
            self.job.executor,
            self.job.cluster,
            job_name,
            summary,
            setup,
            snapshot=self.snapshot(folder),
            folder_state=state,
            prepare=prepare,
        )

    def pretrain(self, config: PretrainConfig, out: Path, stop_after: int | None) -> Step:
        """pretrain: the config was checked by train.pretrain.config_from_overrides."""
        job = self.job
        _one_process(job, "pretrain")
        gpus, nodes = self.one_writer("pretrain", job.gpus or 0, job.nodes or 1)
        res = Resources(gpus=gpus, nodes=nodes, time=job.time or "04:00:00")
        summary = (
            f"# vqa-r1 pretrain --family {config.family} --out {out}",
            f"# settings: {asdict(config)}",
        )
        settings = pretrain_settings(config)
        state = self.folder_check(out, "pretrain", settings, "--out")
        task = self.task(PretrainTask, out, gpus, config=config, stop_after=stop_after)
        request = self.request(
            task,
            res,
            f"vqa-r1-pretrain-{config.family}",
            summary,
            (),
            out,
            state,
            claimer(out, "pretrain", settings, job.overwrite, flag="--out"),
        )
        return self.add(Step("pretrain", out, request))

    def judge(
        self,
        config: JudgeJobConfig,
        out: Path,
        setup: list[str],
        name: str = "judge",
        after: tuple[str, ...] = (),
    ) -> Step:
        """judge: one GPU when it serves its own vLLM model, none for an API; in an experiment,
        after the evaluations it judges (``after``)."""
        from vqa_r1.judge.client import require_openai

        if config.backend == "openai":  # an install without the judge extra: one line, now
            require_openai()
        job = self.job
        _one_process(job, "judge")
        settings = judge_settings(config)
        wants_gpu = 1 if config.vllm_model else 0
        res = Resources(
            gpus=job.gpus if job.gpus is not None else wants_gpu,
            nodes=job.nodes or 1,
            time=job.time or "04:00:00",
            tasks_per_node=1,  # one judge process (a vLLM judge spreads over its GPUs itself)
        )
        state = self.folder_check(out, "judge", settings)
        task = self.task(JudgeTask, out, res.gpus, config=config)
        prepare = claimer(out, "judge", settings, job.overwrite)
        request = self.request(task, res, "vqa-r1-judge", (), tuple(setup), out, state, prepare)
        return self.add(Step(name, out, request, after=after, info={"verb": "judge"}))

    def doctor(self, models: list[str], out: Path) -> Step:
        """doctor: one process per node with one GPU (none where the profile has none; or
        --gpus), a short time limit, never requeued."""
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
        tested = constraints_file()
        task = self.task(
            DoctorTask,
            out,
            gpus,
            models=tuple(models),
            cluster=str(profile.source),
            constraints=str(tested) if tested else None,
        )
        flags = "".join(f" --model {name}" for name in models)
        summary = (f"# vqa-r1 doctor{flags} --gpus {gpus} (cluster {profile.name})",)
        request = self.request(
            task, res, "vqa-r1-doctor", summary, (OFFLINE_SETUP,), out, None, None
        )
        return self.add(Step("doctor", out, request))

    def prompt_tune(
        self,
        name: str,
        config: Any,
        run_dir: Path,
        base: bool,
        resources: Any,
        job_name: str,
        label: str,
        stop_after: int | None = None,
        info: dict | None = None,
    ) -> Step:
        """prompt-tune (``base``: the base model scored the same way) with ``resources``, those
        of the model's SFT recipe (the same model is loaded and trained)."""
        job = self.job
        verb = "prompt-tune --base" if base else "prompt-tune"
        gpus = job.gpus if job.gpus is not None else resources.gpus
        settings = to_dict(config)
        recorded = step_settings(settings)
        self.check_relaunch(name, recorded, renamed=verb)
        # the job's run_prompt_tuning / run_base claims the folder with this verb too
        state = self.folder_check(run_dir, verb, settings)
        task = self.task(
            PromptTuneTask, run_dir, gpus, config=config, base=base, stop_after=stop_after
        )
        request = self.request(
            task,
            Resources(gpus=gpus, nodes=1, time=job.time or resources.time, mem_gb=resources.mem_gb),
            job_name,
            (
                f"# vqa-r1 {verb} --model {config.model.name} --mode {config.mode} ({label})",
                f"# settings: {settings}",
            ),
            (OFFLINE_SETUP,),
            run_dir,
            state,
            claimer(run_dir, verb, settings, job.overwrite),
        )
        info = {**(info or {}), "settings": recorded}
        return self.add(Step(name, run_dir, request, info=info), config)

    def tables(self, root: Path, job_name: str) -> Step:
        """An experiment's tables and plots (report/experiment.py) after every other step,
        whatever their outcome (a failed condition shows as a missing row, not as a missing
        report): no GPU, half an hour."""
        task = self.task(TablesTask, root, 0)
        res = Resources(gpus=0, nodes=1, time="00:30:00", mem_gb=8)
        summary = (f"# vqa-r1 tables {root}",)
        request = self.request(task, res, job_name, summary, (), root / "tables", None, None)
        others = tuple(s.name for s in self.steps)
        step = Step("tables", root / "tables", request, others, after_any=True)
        return self.add(replace(step, info={"verb": "tables"}))

    def add(self, step: Step, config: Any = None) -> Step:
        self.steps.append(step)
        if config is not None:
            self.configs[step.name] = config
        return step

    def prep(self, description: str, make: Callable[[], Any]) -> None:
        """Something the executor makes after claiming the launch's folder, before any job."""
        self.prepare.append(Prep(description, make))

    def graph(self, kind: str, root: Path, **fields: Any) -> Graph:
        """The launch: its steps so far, what it prepares, its folder."""
        return Graph(
            kind,
            root,
            tuple(self.steps),
            prepare=tuple(self.prepare),
            overwrite=self.job.overwrite,
            **fields,
        )

    # ------------------------------------------------------------------------- checks
    def one_writer(self, verb: str, gpus: int, nodes: int) -> tuple[int, int]:
        """Evaluate and merge run one process: one GPU on one node. SLURM starts a task per GPU,
        and two tasks of one evaluation would write the same output files; more GPUs would sit
        idle."""
        if verb in ("sft", "grpo") or (gpus <= 1 and nodes <= 1):
            return gpus, nodes
        self.note(
            f"{verb} runs one process on one GPU: asking for {min(gpus, 1)} GPU(s) on 1 node, not "
            f"{gpus} GPU(s) on {nodes} node(s) (several evaluations at once: one job each)"
        )
        return min(gpus, 1), 1

    def signal_delay(self) -> float | None:
        """The cluster's warning time before a job's limit (its profile): the job checkpoints
        and requeues on it. None in process: nothing warns this process."""
        if self.inprocess:
            return None
        return load_cluster(self.job.cluster or default_cluster()).signal_delay_s

    def snapshot(self, folder: Path) -> Path | None:
        """The copy of the code a SLURM job of ``folder`` imports (``--no-snapshot``: none)."""
        if not self.job.snapshot or self.job.executor not in ("auto", "slurm"):
            return None
        return Path(folder) / "code" / self.stamp

    def folder_check(
        self, run_dir: Path, verb: str, settings: Any, flag: str = "--output-dir"
    ) -> str:
        """What ``run_dir`` holds for this request (claims.py), read only: a folder the request
        may not write is refused here, before anything is written or queued. With
        ``--overwrite`` it is moved aside when the launch runs instead. Another rank of this
        command (torchrun) finds rank 0's lock: only rank 0 checks for one."""
        if self.job.overwrite:
            return claims.NEW
        return claims.check(run_dir, verb, settings, flag, lock=ranks.is_main())

    def check_relaunch(self, name: str, settings: dict, renamed: str | None = None) -> None:
        """A re-launch must build each step with the settings the previous launch recorded: a
        complete step is skipped, so other settings would put its old results under the new
        command. ``renamed``: the verb whose renamed keys (claims.RENAMED) an older record may
        hold. The comparison is settings.py's: threads and the health watch may differ."""
        before = self.previous.get(name, {}).get("settings")
        if before is None:  # a new step, or a launch from before settings were recorded
            return
        if renamed:
            before = step_settings(claims.renamed_settings(renamed, before))
        differ = differences(before, settings)
        if differ:
            shown = "; ".join(differ[:4])
            more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
            raise RelaunchRefused(
                f"{self.previous_file}: step {name} was started with other settings: "
                f"{shown}{more}. Re-launch with the same --set values, or give it a new "
                "--output-dir"
            )

    def check_dataset(self, config: RunConfig, verb: str) -> None:
        """The split a job reads, schema, every image and each row's image count (against its
        placeholders and data.images_per_row), checked here and not after the queue wait. Synthetic data is generated by the job itself. Each (folder, split) is read once
        per launch, so a sweep over other keys does not re-read the images per element. A GRPO run
        rewarded by reasoning_steps needs the split's ``reasoning`` column (else refused here)."""
        if verb not in ("sft", "grpo", "evaluate"):
            return
        wants_reasoning = verb == "grpo" and REASONING_REWARD in config.train.reward_funcs
        if config.data.dataset == "synthetic":
            if wants_reasoning:
                raise UserError(missing_reference("the synthetic scenes (data.dataset=synthetic)"))
            return
        split = config.eval.split if verb == "evaluate" else config.data.train_split
        options = release_options(config.data)
        per_row = config.data.images_per_row  # rows with more images are refused here
        key = (
            str(Path(config.data.dataset).resolve()),
            split,
            repr(sorted(options.items())),
            per_row,
        )
        if key not in self.checked_splits:
            ds = load_split(
                config.data.dataset,
                split,
                check_images=True,
                options=options,
                images_per_row=per_row,
            )
            self.checked_splits[key] = has_reference(ds)
        if wants_reasoning and not self.checked_splits[key]:
            raise UserError(missing_reference(f"{config.data.dataset} [{split}]"))

    def check_trl(self, verb: str, config: RunConfig, processes: int) -> None:
        """TRL's checks of the verb's SFTConfig / GRPOConfig (train/runner.check_trl_config), once
        per distinct train section and process count of a launch (a sweep builds many)."""
        if verb not in ("sft", "grpo"):
            return
        key = json.dumps([verb, processes, config.to_dict()["train"]], sort_keys=True, default=str)
        if key in self.trl_checked:
            return
        from vqa_r1.train.runner import check_trl_config  # imports TRL (seconds): only here

        check_trl_config(config, processes)
        self.trl_checked.add(key)

    def check_model_available(self, config: RunConfig) -> None:
        """A hub model must be in the cache before a job is queued: compute nodes are often
        offline (a dry run says so once instead)."""
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


def claimer(
    run_dir: Path,
    verb: str,
    settings: Any,
    overwrite: bool,
    config: RunConfig | None = None,
    flag: str = "--output-dir",
) -> Callable[[], None]:
    """What the executor calls once every check of the launch has passed: the folder moved aside
    (``overwrite``), claimed for ``verb`` with ``settings``, and the resolved config written
    (when absent, or when an UNHEALTHY run goes on under a changed health watch)."""

    def prepare() -> None:
        if not ranks.is_main():  # rank 0 of this command claims; the others only checked
            return
        claims.make_way(run_dir, verb, settings, overwrite=overwrite, flag=flag)
        claims.claim(run_dir, verb, settings, flag=flag)
        config_file = run_dir / "config.yaml"
        if config is not None and (not config_file.exists() or _unhealthy(run_dir)):
            save_config(config, config_file)  # an UNHEALTHY run continues with health_action=warn

    return prepare


def _unhealthy(run_dir: Path) -> bool:
    try:
        return RunDir(run_dir).status().get("state") == UNHEALTHY
    except (OSError, ValueError):
        return False


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


# ------------------------------------------------------------------------------- graphs


def job_graph(spec: RunSpec, job: JobOptions) -> tuple[Graph, RunConfig]:
    """One sft, grpo, evaluate or merge job as a one-step graph, and its resolved config."""
    b = GraphBuilder(job)
    if spec.verb == "merge":
        if not spec.adapter:
            raise UserError("merge needs --adapter (a LoRA adapter folder or a run directory)")
        adapter = resolve_adapter(Path(spec.adapter).resolve())
        config = load_config("merge", spec.model, spec.recipe, list(spec.overrides))
        check_adapter_base(adapter, config.model)
        run_dir = default_dir(f"merge-{spec.model}", spec.output_dir)
        step = b.run("merge", "merge", config, run_dir, str(adapter))
    else:
        adapter = resolve_adapter(Path(spec.adapter).resolve()) if spec.adapter else None
        config, run_dir = resolve_run(spec)
        if adapter is not None:  # evaluated on the model it was trained on
            check_adapter_base(adapter, config.model)
        given = str(Path(spec.adapter).resolve()) if spec.adapter else None
        step = b.run(spec.verb, spec.verb, config, run_dir, given)
    return b.graph("run", run_dir), b.configs[step.name]


def pretrain_graph(
    config: PretrainConfig, out: str, stop_after: int | None, job: JobOptions
) -> Graph:
    b = GraphBuilder(job)
    step = b.pretrain(config, Path(out).resolve(), stop_after)
    return b.graph("run", step.run_dir, flag="--out")


def judge_graph(
    config: JudgeJobConfig, output_dir: str | None, setup: list[str], job: JobOptions
) -> Graph:
    b = GraphBuilder(job)
    return b.graph("run", b.judge(config, default_dir("judge", output_dir), setup).run_dir)


def doctor_graph(models: list[str], output_dir: str | None, job: JobOptions) -> Graph:
    b = GraphBuilder(job)
    return b.graph("run", b.doctor(models, default_dir("doctor", output_dir)).run_dir)


def prompt_tune_graph(
    config: Any, out: str, base: bool, stop_after: int | None, job: JobOptions
) -> Graph:
    """`vqa-r1 prompt-tune` (in process): the resources are this process's."""
    from vqa_r1.config import ResourceConfig

    b = GraphBuilder(job)
    verb = "prompt-tune --base" if base else "prompt-tune"
    run_dir = Path(out).resolve()
    step = b.prompt_tune(
        "prompt-tune", config, run_dir, base, ResourceConfig(gpus=0), f"vqa-r1-{verb}", verb,
        stop_after,
    )  # fmt: skip
    return b.graph("run", step.run_dir)


def sweep_graph(
    spec: RunSpec, job: JobOptions, sweeps: list[str], parallel: int | None = None
) -> Graph:
    """Every element of ``--sweep key=v1,v2 ...`` a step of its own run directory, one job array
    (launch/sweep.py: the grid and its description); nothing is written before the launch."""
    keys = sweep.parse_sweeps(sweeps)
    sweep.check_conflicts(keys, list(spec.overrides))
    root = default_dir(f"{spec.verb}-{spec.model}-sweep", spec.output_dir)
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give a sweep its own --output-dir")
    settings = sweep.sweep_settings(spec, sweeps)
    b = GraphBuilder(job)
    b.folder_check(root, "sweep", settings)  # before its elements
    if parallel is not None and parallel < 1:
        raise UserError("--parallel must be at least 1")
    configs = []
    for point in sweep.expand(keys):
        name = sweep.element_name(point)
        overrides = [f"{k}={v}" for k, v in point.items()]
        element = replace(
            spec, overrides=(*spec.overrides, *overrides), output_dir=str(root / name)
        )
        config, run_dir = resolve_run(element)
        given = str(Path(spec.adapter).resolve()) if spec.adapter else None
        if spec.adapter:
            check_adapter_base(resolve_adapter(Path(spec.adapter).resolve()), config.model)
        step = b.run(name, spec.verb, config, run_dir, given, info={"set": overrides})
        configs.append(b.configs[step.name].to_dict())
    sweep.check_shared_request(b.steps)
    lines = sweep.describe_sweep(spec.verb, root, keys, b.steps, configs)
    first = b.steps[0].request
    array = replace(
        first,
        summary=tuple(lines),
        job_name=f"vqa-r1-{spec.verb}-sweep",
        snapshot=b.snapshot(root),
    )
    header = {"verb": spec.verb, "keys": keys, "parallelism": parallel}
    return b.graph(
        "sweep",
        root,
        lines=tuple(lines),
        header=header,
        array=array,
        parallelism=parallel,
        claim=("sweep", settings),
    )


def pipeline_graph(
    model: str, steps: str, overrides: list[str], output_dir: str | None, job: JobOptions
) -> Graph:
    """SFT -> merge -> GRPO -> evaluate as a line of dependent steps (launch/pipeline.py: which
    steps, and what each reads from the ones before it)."""
    names = pipeline.parse_steps(steps)
    per_step = pipeline.split_overrides(overrides, names)
    root = default_dir(f"pipeline-{model}", output_dir)
    settings = {"model": model, "steps": names, "set": list(overrides)}
    b = GraphBuilder(job)
    b.folder_check(root, "pipeline", settings)  # before any step's folder is checked
    if (root / "config.yaml").exists():
        raise UserError(f"{root} is a run directory; give the pipeline its own --output-dir")
    trained: Step | None = None  # the run whose adapter the next steps read
    merged: Step | None = None  # the merge step, once there: later steps load its model
    after: tuple[str, ...] = ()
    for name in names:
        config = load_config(name, model, None, per_step[name])
        run_dir = root / name
        fields = {"after": after, "job_name": f"vqa-r1-{name}-{model}"}
        if name == "merge":
            merged = b.merge(name, config, run_dir, trained, **fields)
            trained = None  # GRPO then trains a fresh adapter on the merged model
        elif name == "evaluate":
            b.evaluate(name, config, run_dir, trained, merged, **fields)
        else:  # sft, grpo (without merge: GRPO continues the SFT adapter)
            trained = b.train(name, config, run_dir, trained, merged, **fields)
        after = (name,)
    return b.graph(
        "pipeline",
        root,
        lines=tuple(pipeline.describe(root, b.steps)),
        header={"model": model},
        claim=("pipeline", settings),
    )


def image_limits(config: RunConfig) -> tuple[str, ...]:
    """What the job's processor and (GRPO) vLLM are told about images, as comment lines of the
    job script: the processor's settings as the recipe sets them (the checkpoint's own where
    unset), images per row, the chat template's think block, and vLLM's limits, which are the
    same settings (models/serving.py mm_limits, train/vllm_prompts.py)."""
    spec = get_spec(config.model.name)
    adapter = get_adapter(spec.family)
    processor = adapter.processor_kwargs(**image_options(config.model))
    units = ""
    from vqa_r1.models.architecture import ARCHITECTURES, architecture_config

    if (ARCHITECTURES / f"{spec.name}.json").is_file():  # a hub checkpoint's own patch and merge
        vision = architecture_config(spec.name).vision_config
        if hasattr(vision, "spatial_merge_size"):
            units = f"; patch {vision.patch_size} px, merge {vision.spatial_merge_size}x"
            units += f"{vision.spatial_merge_size}"
    lines = [
        f"# processor: {spec.family} {json.dumps(processor, sort_keys=True)}"
        f"{'' if processor else ' (the checkpoint its own)'}{units}; images per row "
        f"{config.data.images_per_row}; template opens <think>: "
        f"{'yes (format_thinking)' if spec.thinking else 'no'}"
    ]
    if config.verb == "grpo":
        t = config.train
        vllm = {
            "limit_mm_per_prompt": mm_limits(config.data.images_per_row),
            "max_model_len": t.vllm_max_model_length,
            "mm_processor_kwargs": processor,
        }
        lines.append(
            f"# vllm (train.use_vllm={str(t.use_vllm).lower()}, {t.vllm_mode}): "
            f"{json.dumps(vllm, sort_keys=True)}"
        )
    return tuple(lines)

"""Run SFT or GRPO from a RunConfig: model + LoRA, data, TRL trainer, resume, final adapter.

TRL does the training; this module only assembles its inputs and owns the run directory. A run is
resumable by construction: calling ``train(config, run_dir)`` again on the same directory continues
from the latest complete checkpoint with the same seeded subset, sampler position, optimizer,
scheduler and RNG state (all restored by the Trainer from the checkpoint).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vqa_r1 import claims, ranks
from vqa_r1.config import VLLM_URL_ENV, RunConfig, TrainConfig, run_settings, save_config
from vqa_r1.data.datasets import open_split, subset, trainer_rows
from vqa_r1.errors import UserError
from vqa_r1.io import follow_umask
from vqa_r1.models import base_record
from vqa_r1.models.adapters import image_options
from vqa_r1.models.loading import (
    cast_adapters_to_model_dtype,
    load_model,
    model_identity,
    zero3_enabled,
)
from vqa_r1.recipes import deepspeed_config
from vqa_r1.rewards import get_rewards
from vqa_r1.run_dir import UNHEALTHY, RunDir, checkpoint_step, latest_checkpoint, refuse_unhealthy
from vqa_r1.train.callbacks import JsonlMetrics, StopOnInterrupt, recording_reward
from vqa_r1.train.cpu_locations import allow_indexed_cpu_locations
from vqa_r1.train.dynamic_sampling import DynamicSamplingMixin
from vqa_r1.train.health import RunHealth
from vqa_r1.train.input_grads import hook_language_inputs_only
from vqa_r1.train.progress import make_quiet
from vqa_r1.train.step_line import StepLine
from vqa_r1.train.trackers import continue_tensorboard
from vqa_r1.train.trainer_hooks import (
    AtomicCheckpointMixin,
    EpochOrderSamplerMixin,
    GenerationBufferMixin,
)
from vqa_r1.train.vllm_prompts import colocated_engine_limits, hand_vllm_unexpanded_prompts

log = logging.getLogger(__name__)


def _common_args(config: RunConfig, rd: RunDir) -> dict:
    """TrainingArguments fields shared by SFT and GRPO; the names are ours and theirs alike."""
    import torch

    t = config.train
    return dict(
        output_dir=str(rd.checkpoints),
        learning_rate=t.learning_rate,
        num_train_epochs=t.num_train_epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        warmup_steps=t.warmup_steps,
        lr_scheduler_type=t.lr_scheduler_type,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        save_strategy="steps",
        save_steps=t.save_steps,
        logging_steps=t.logging_steps,
        seed=t.seed,
        data_seed=t.seed,
        bf16=t.bf16 and torch.cuda.is_available(),
        gradient_checkpointing=t.gradient_checkpointing,
        report_to=list(t.report_to),
        run_name=Path(rd.root).name,
        deepspeed=deepspeed_config(t.deepspeed),
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        # several CPU processes: gloo (accelerate would pick MPI when torch has it); one process:
        # none (accelerate then takes a named backend for a process group to query)
        ddp_backend="gloo" if not torch.cuda.is_available() and ranks.world_size() > 1 else None,
        disable_tqdm=False,
    )


def _grpo_vllm_args(train: TrainConfig) -> dict:
    """GRPOConfig fields for vLLM generation (server URL from the job script's export)."""
    if not train.use_vllm:
        return {}
    from vqa_r1.config import VLLM_GROUP_PORT_ENV

    args: dict = {"use_vllm": True, "vllm_mode": train.vllm_mode}
    if train.vllm_mode == "server" and os.environ.get(VLLM_URL_ENV):
        args["vllm_server_base_url"] = os.environ[VLLM_URL_ENV]
    if train.vllm_mode == "server" and os.environ.get(VLLM_GROUP_PORT_ENV):
        args["vllm_group_port"] = int(os.environ[VLLM_GROUP_PORT_ENV])  # per job, not 51216
    # colocate engine settings (server mode: the same values are on the server's command line)
    if train.vllm_gpu_memory_utilization is not None:
        args["vllm_gpu_memory_utilization"] = train.vllm_gpu_memory_utilization
    if train.vllm_max_model_length is not None:
        args["vllm_max_model_length"] = train.vllm_max_model_length
    args["vllm_tensor_parallel_size"] = train.vllm_tensor_parallel_size
    return args


def _peft_config(config: RunConfig, adapter: Any) -> Any:
    from peft import LoraConfig

    lc = config.lora
    if not lc.enabled or config.init_adapter:
        return None  # no LoRA (full fine-tune), or an existing adapter is continued
    return LoraConfig(
        r=lc.r,
        lora_alpha=lc.alpha,
        lora_dropout=lc.dropout,
        target_modules=lc.target_modules or adapter.lora_target_regex(),
        modules_to_save=lc.modules_to_save or None,
        task_type="CAUSAL_LM",
    )


def training_args(config: RunConfig, rd: RunDir) -> Any:
    """The trainer's SFTConfig or GRPOConfig, built before the model is loaded.

    Under ZeRO-3, TrainingArguments registers its DeepSpeed config with transformers
    (HfTrainerDeepSpeedConfig, a weak reference: keep the object alive until the model is
    loaded), so ``from_pretrained`` partitions the weights across the ranks as it loads them
    (``is_deepspeed_zero3_enabled``); loaded before the config exists, every rank first
    materialises the whole model in its own memory."""
    args = _trainer_config(config, rd)
    if args.deepspeed:
        # the process group first (accelerate's state, set up by the first look at the device):
        # DeepSpeed's partitioning at load reads the world size from its own communication
        # layer, which accelerate starts on GPUs but not for CPU processes (gloo)
        import torch

        _ = args.device
        if torch.distributed.is_initialized():
            import deepspeed

            deepspeed.init_distributed()  # adopts the process group; a no-op when set up already
    return args


def _trainer_config(config: RunConfig, rd: RunDir) -> Any:
    cls, kwargs = trainer_config_kwargs(config, rd)
    return cls(**kwargs)


def trainer_config_kwargs(config: RunConfig, rd: RunDir) -> tuple[type, dict]:
    """The verb's TRL config class and its arguments: our fields, then the train section's TRL
    keys (``train.trl``, trl_options.py: never one of ours nor one set here, which are refused)."""
    from vqa_r1.trl_options import trl_class

    common = {**_common_args(config, rd), **config.train.trl}
    if config.verb == "sft":
        return trl_class("sft"), dict(**common, max_length=None, remove_unused_columns=False)
    t = config.train
    return trl_class("grpo"), dict(
        **common,
        num_generations=t.num_generations,
        max_completion_length=t.max_completion_length,
        beta=t.beta,
        loss_type=t.loss_type,
        temperature=t.temperature,
        scale_rewards=t.scale_rewards,
        reward_weights=t.reward_weights,
        **_grpo_vllm_args(t),
    )


def check_trl_config(config: RunConfig, processes: int) -> None:
    """TRL's own checks of the verb's config (``__post_init__``) and the values it documents but
    checks only in the trainer, on the login node: the config built as the run builds it, with
    ``processes`` training processes in all. A UserError naming ``train.<key>`` and its value
    where TRL's message names one. (PEFT's LoraConfig checks none of the lora keys: their ranges
    are ours, domains.py.)

    Built here with what the login node cannot be: the output folder a temporary path (nothing
    is written), ``use_cpu=True`` and no tf32 or DeepSpeed (a GPU-less login node would trip
    transformers' device checks; the job's own hardware decides those, and train.deepspeed is
    checked by recipes), and the generation batch the job's process count gives (TRL derives it
    from the world size, 1 here)."""
    import re
    import tempfile
    import warnings

    from vqa_r1.trl_options import check_choices

    if config.verb not in ("sft", "grpo"):
        return
    check_choices(config.verb, {**config.to_dict()["train"]})
    rd = RunDir(Path(tempfile.gettempdir()) / "vqa-r1-trl-check")
    cls, kwargs = trainer_config_kwargs(config, rd)
    kwargs.update(use_cpu=True, ddp_backend=None, deepspeed=None, bf16=False)
    kwargs.pop("tf32", None)
    if config.verb == "grpo":
        per_process = kwargs["per_device_train_batch_size"]
        if kwargs.get("generation_batch_size") is None:  # (both set: TRL refuses it below)
            steps = (
                kwargs.pop("steps_per_generation", None) or kwargs["gradient_accumulation_steps"]
            )
            kwargs["generation_batch_size"] = per_process * processes * steps
        elif kwargs["generation_batch_size"] % (per_process * processes):
            raise UserError(
                f"train.generation_batch_size ({kwargs['generation_batch_size']}) must be "
                f"divisible by the global batch size ({per_process} x {processes} processes)"
            )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls(**kwargs)
    except (ValueError, TypeError) as err:  # TRL's messages often name neither key nor value
        text = " ".join(str(err).split())
        train = config.to_dict()["train"]
        named = [f"train.{k}={v!r}" for k, v in train.items() if re.search(rf"\b{k}\b", text)]
        where = ", ".join(named) or "train"
        raise UserError(f"{where}: refused by {cls.__name__}: {text}") from None


def build_trainer(
    config: RunConfig,
    rd: RunDir,
    loaded: Any,
    rows: Any,
    callbacks: Sequence[Any] = (),
    args: Any = None,
) -> Any:
    """The TRL trainer; ``args``: from ``training_args`` (built here when not given)."""
    callbacks = [JsonlMetrics(rd.metrics), *callbacks]
    args = args if args is not None else training_args(config, rd)
    peft_config = _peft_config(config, loaded.adapter)
    if config.verb == "sft":
        from trl import SFTTrainer

        class Trainer(AtomicCheckpointMixin, SFTTrainer):
            pass

        return Trainer(
            model=loaded.model,
            args=args,
            train_dataset=rows,
            processing_class=loaded.processor,
            peft_config=peft_config,
            callbacks=callbacks,
        )
    from trl import GRPOTrainer

    t = config.train
    # run health (train/health.py): alarms in the log and status.json; health_action=stop ends
    # the run UNHEALTHY at the step one fires
    callbacks.append(
        RunHealth(rd, t.health_window, t.health_action, t.beta, t.max_completion_length)
    )

    class Trainer(
        AtomicCheckpointMixin,
        GenerationBufferMixin,
        EpochOrderSamplerMixin,
        DynamicSamplingMixin,
        GRPOTrainer,
    ):
        pass

    if t.dynamic_sampling:
        per_rank = args.per_device_train_batch_size * args.steps_per_generation
        if per_rank % args.num_generations:
            raise UserError(
                f"train.dynamic_sampling needs whole groups on each process: "
                f"per_device_train_batch_size x steps_per_generation ({per_rank}) is not a "
                f"multiple of train.num_generations ({args.num_generations})"
            )
        Trainer.dynamic_sampling_rounds = t.dynamic_sampling_max_rounds

    rewards = [
        recording_reward(fn, rd.completions, t.sample_every, answer_rule=t.answer_rule)
        if fn.__name__ == "accuracy_reward"
        else recording_reward(fn, rd.completions, t.sample_every)
        for fn in get_rewards(t.reward_funcs)
    ]
    with colocated_engine_limits(config.data.images_per_row):
        trainer = Trainer(
            model=loaded.model,
            reward_funcs=rewards,
            args=args,
            train_dataset=rows,
            processing_class=loaded.processor,
            peft_config=peft_config,
            callbacks=callbacks,
        )
    if t.use_vllm:  # colocate: vLLM gets unexpanded prompts and the recipe's image settings
        hand_vllm_unexpanded_prompts(
            trainer,
            loaded.adapter,
            loaded.processor,
            loaded.adapter.processor_kwargs(**image_options(config.model)),
        )
    if zero3_enabled():
        # TRL copies a continued adapter into a frozen "ref" adapter for the KL term
        # (PeftModel.add_adapter, float32 by PEFT's default); ZeRO-3 needs one dtype throughout
        cast_adapters_to_model_dtype(trainer.model)
    return trainer


def fit_images(rows: Any, loaded: Any) -> Any:
    """Each image resized once to what the trainer's processor makes of it (FamilyAdapter.fit_image),
    so that vLLM, which processes the images again with the checkpoint's own limits, gives the
    same number of image tokens as the prompt ids the trainer builds."""

    def fit(row: dict) -> dict:
        if "images" in row:  # several per row: each fitted alike
            return {
                "images": [loaded.adapter.fit_image(i, loaded.processor) for i in row["images"]]
            }
        return {"image": loaded.adapter.fit_image(row["image"], loaded.processor)}

    # in memory, as trainer_rows: no cache file beside a dataset other jobs may share
    return rows.map(fit, keep_in_memory=True)


def keep_tracker_run_id(rd: RunDir) -> str:
    """One experiment-tracker run across requeues: the id is made once and kept in status.json.

    Rank 0 only: the Trainer's tracker callbacks log from the main process alone."""
    import uuid

    run_id = rd.status().get("tracker_run_id") or uuid.uuid4().hex[:12]
    rd.update_status(tracker_run_id=run_id)
    os.environ.setdefault("WANDB_RUN_ID", run_id)
    os.environ.setdefault("WANDB_RESUME", "allow")
    return run_id


def train(
    config: RunConfig,
    run_dir: str | Path,
    callbacks: Sequence[Any] = (),
    progress: str | None = None,
    sigterm_stops: bool = True,
) -> dict:
    """Train (or resume) into ``run_dir``; returns the final status.

    ``callbacks``: extra Trainer callbacks. A SLURM job passes its requeue controller here
    (launch/requeue.py): when one stops training before the last step, the checkpoint of that step
    is written, the status says STOPPED, no final adapter is saved, and the caller decides what
    comes next (the job requeues). ``progress``: a label for one quiet progress bar
    (train/progress.py) instead of the Trainer's console logs; metrics.jsonl is written either way.
    Ctrl-C (and SIGTERM when ``sigterm_stops``; a SLURM job's SIGTERM is its requeue
    controller's) stops at the next step boundary with a checkpoint: INTERRUPTED, and the same
    call resumes there.

    ``run_dir`` follows claims.py's rule: a folder of another verb, other settings or files
    not ours is refused before anything is written; a COMPLETED run is returned as it is (no
    extra step, ``final/`` untouched; ``already_complete`` says so); rank 0 holds its lock.
    """
    with claims.writing(run_dir, config.verb, run_settings(config)) as state:
        if state == claims.COMPLETE:
            log.info("%s is a complete %s run with these settings: nothing to do", run_dir,
                     config.verb)  # fmt: skip
            return {**RunDir(Path(run_dir)).status(), "already_complete": True}
        if state == claims.RESUME and config.verb == "grpo":
            refuse_unhealthy(run_dir, config.train.health_action)  # it would stop there again
        return _train(config, run_dir, callbacks, progress, sigterm_stops)


def _train(
    config: RunConfig,
    run_dir: str | Path,
    callbacks: Sequence[Any],
    progress: str | None,
    sigterm_stops: bool,
) -> dict:
    import torch

    if config.train.num_threads:
        torch.set_num_threads(config.train.num_threads)
    # several processes (ranks): all train and checkpoint together; rank 0 alone writes the run's
    # files (config, status, metrics, final/); every rank resumes from the same checkpoint
    main = ranks.is_main()
    claims.wait_for_claim(run_dir)  # other ranks: nothing in the folder before rank 0's claim
    rd = RunDir(Path(run_dir)).create()
    if main and (not rd.config.exists() or rd.status().get("state") == UNHEALTHY):
        save_config(config, rd.config)  # an UNHEALTHY run continues with health_action=warn
    resume = resume_point(rd)
    if resume is not None and ranks.world_size() > 1 and not torch.cuda.is_available():
        allow_indexed_cpu_locations()  # the Trainer loads the optimizer to cpu:N (cpu_locations)
    started = time.time()
    if main:
        keep_tracker_run_id(rd)
        mark_running(rd, config.verb, resume)

    args = training_args(config, rd)  # first: under ZeRO-3 the model is partitioned as it loads
    loaded = load_model(config, adapter_path=config.init_adapter, trainable=True)
    if config.model.freeze_vision:
        loaded.adapter.freeze_vision(loaded.model)
    hook_language_inputs_only(loaded.model, loaded.adapter)  # backward skips the frozen vision
    ds = open_split(config.data, config.data.train_split)
    ds = subset(ds, config.data.num_samples, config.data.subset_seed)
    rows = trainer_rows(
        ds,
        loaded.adapter,
        config.verb,
        config.data.instruction,
        config.data.with_reasoning,
        config.data.rationale,
    )
    if config.verb == "grpo" and config.train.use_vllm:
        rows = fit_images(rows, loaded)
    interrupt = StopOnInterrupt(sigterm=sigterm_stops)
    trainer = build_trainer(config, rd, loaded, rows, [*callbacks, interrupt], args=args)
    continue_tensorboard(trainer, rd.root, checkpoint_step(resume) if resume is not None else 0)
    # what the adapter is trained on, beside it in each checkpoint and final/: an adapter copied
    # out of its run is checked by it (models/loading.py, check_adapter_base)
    adapter_base = base_record.base_record(model_identity(config.model), loaded.path)
    trainer.adapter_base = adapter_base
    if (
        main
    ):  # where the model trains, for `launch.py status` and a user checking for a CPU fallback
        rd.update_status(device=str(trainer.model.device), dtype=str(trainer.model.dtype))
    # (all ranks stop at the same step: launch/requeue.py shares the decision)
    step, done = fit(trainer, resume, interrupt, progress, config.verb, rd)
    health = next((c for c in trainer.callback_handler.callbacks if isinstance(c, RunHealth)), None)
    alarm = health.stopped_by if health is not None else None
    done = done and alarm is None  # stopped by an alarm, even at the last step: UNHEALTHY
    if done:  # every rank calls it (a collective under ZeRO-3); rank 0 alone writes
        trainer.save_model(str(rd.final))
    if ranks.world_size() > 1:
        # free the DDP-wrapped model and its reducer while the interpreter is fully alive: left
        # to the collection at exit, gloo aborted rank 1 now and then (SIGABRT, "terminate
        # called without an active exception") after a finished run
        del trainer
        gc.collect()
    ranks.shutdown()  # the last collective: the ranks leave together (one run per process)
    if not main:
        return {
            "state": "COMPLETED" if done else UNHEALTHY if alarm else "STOPPED",
            "global_step": step,
            "rank": ranks.rank(),
        }
    if alarm is not None:
        return mark_unhealthy(rd, step, alarm)
    if not done:
        return mark_stopped(rd, step, interrupt)
    loaded.processor.save_pretrained(str(rd.final))
    base_record.write_record(rd.final, adapter_base)
    follow_umask(rd.final)  # safetensors writes the adapter 0600: readable by the group as set
    rd.update_status(
        state="COMPLETED",
        global_step=step,
        train_seconds_last_start=round(time.time() - started, 1),
        final=str(rd.final),
    )
    claims.mark_complete(rd.root, outputs=("final",))  # "complete" (claims.is_complete)
    return rd.status()


# --- a Trainer run's life in its run directory: SFT and GRPO here, prompt tuning
# (train/prompt_tuning.py) too. Rank 0 alone writes status.json and trims metrics.jsonl.


def resume_point(rd: RunDir) -> Path | None:
    """The latest complete checkpoint of ``rd`` (None: start afresh); the metrics logged after it
    are dropped, since the resumed run logs those steps again."""
    resume = latest_checkpoint(rd.checkpoints)
    if resume is not None:
        step = checkpoint_step(resume)
        if ranks.is_main():
            rd.trim_metrics(step)
        log.info("resuming from %s (step %d)", resume, step)
    return resume


def mark_running(rd: RunDir, verb: str, resume: Path | None) -> None:
    """status.json: RUNNING, one more start, where it resumed from; a previous reason cleared."""
    rd.update_status(
        state="RUNNING",
        verb=verb,
        starts=rd.status().get("starts", 0) + 1,
        resumed_from=str(resume) if resume else None,
        world_size=ranks.world_size(),
        reason=None,
        log=None,
    )


def fit(
    trainer: Any,
    resume: Path | None,
    interrupt: StopOnInterrupt,
    progress: str | None,
    label: str = "train",
    rd: RunDir | None = None,
) -> tuple[int, bool]:
    """``trainer.train`` from ``resume`` with ``interrupt``'s signal handlers in place (it must be
    one of the trainer's callbacks). The console gets, instead of TRL's dict per logged step and
    tqdm's carriage returns: with a ``progress`` label or in a terminal, one quiet bar; else (a
    job log) one readable line per logged step (train/step_line.py). Either way the progress goes
    to ``rd``'s status.json for `status`. Returns the global step reached and whether it is the
    last one: a callback may stop training at a step boundary (its checkpoint is written); a stop
    during the last step still leaves a complete run."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    bar = bool(progress) or sys.stderr.isatty()
    if bar:
        make_quiet(trainer, progress or label)
    else:
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    trainer.add_callback(StepLine(label, rd if ranks.is_main() else None, echo=not bar))
    interrupt.install()
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        interrupt.restore()
    step = trainer.state.global_step
    return step, step >= trainer.state.max_steps


def mark_stopped(rd: RunDir, step: int, interrupt: StopOnInterrupt) -> dict:
    """status.json of a run stopped before its last step: INTERRUPTED (a signal; with the
    checkpoint it resumes from) or STOPPED (a callback asked: a requeue, ``--stop-after``)."""
    if interrupt.stopped_by:
        saved = latest_checkpoint(rd.checkpoints)
        where = f"{saved.name} saved" if saved else "no checkpoint saved"
        rd.update_status(
            state="INTERRUPTED",
            global_step=step,
            reason=f"{interrupt.stopped_by} at step {step}: {where}; the same command resumes",
        )
    else:
        rd.update_status(state="STOPPED", global_step=step)
    return rd.status()


def mark_unhealthy(rd: RunDir, step: int, alarm: Any) -> dict:
    """status.json of a run its health monitor stopped (train.health_action=stop): UNHEALTHY, with
    the alarm as the reason; checkpointed at ``step``, no final adapter. A SLURM job does not
    requeue it (launch/task.py) and the same command refuses it (``run_dir.refuse_unhealthy``)."""
    saved = latest_checkpoint(rd.checkpoints)
    where = f"{saved.name} saved" if saved else "no checkpoint saved"
    rd.update_status(
        state=UNHEALTHY,
        global_step=step,
        reason=f"run health alarm {alarm.line()}; {where}; stopped (train.health_action=stop)",
    )
    return rd.status()

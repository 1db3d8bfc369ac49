"""Run SFT or GRPO from a RunConfig: model + LoRA, data, TRL trainer, resume, final adapter.

TRL does the training; this module only assembles its inputs and owns the run directory. A run is
resumable by construction: calling ``train(config, run_dir)`` again on the same directory continues
from the latest complete checkpoint with the same seeded subset, sampler position, optimizer,
scheduler and RNG state (all restored by the Trainer from the checkpoint).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from vqa_r1.config import RunConfig, save_config
from vqa_r1.train.checkpoints import AtomicCheckpointMixin, latest_checkpoint
from vqa_r1.train.run_dir import RunDir

log = logging.getLogger(__name__)


def _common_args(config: RunConfig, rd: RunDir, n_rows: int) -> dict:
    import torch

    from vqa_r1.launch.distributed import deepspeed_config

    t = config.train
    steps_per_epoch = math.ceil(n_rows / (t.per_device_batch_size * t.gradient_accumulation_steps))
    if config.verb == "grpo":
        # each optimisation step sees per_device_batch_size completions, i.e. batch/num_generations prompts
        steps_per_epoch = math.ceil(
            n_rows * t.num_generations / (t.per_device_batch_size * t.gradient_accumulation_steps)
        )
    total = t.max_steps if t.max_steps > 0 else math.ceil(steps_per_epoch * t.epochs)
    save_steps = max(1, round(t.save_every * total)) if t.save_every < 1 else int(t.save_every)
    return dict(
        output_dir=str(rd.checkpoints),
        learning_rate=t.learning_rate,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        warmup_steps=t.warmup_ratio,  # a float < 1 is a fraction of the total steps
        lr_scheduler_type=t.lr_scheduler,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        save_strategy="steps",
        save_steps=save_steps,
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
        disable_tqdm=False,
    )


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


class EpochOrderSampler:
    """TRL's GRPO sampler with each epoch's order a function of the seed and the epoch alone.

    TRL's RepeatSampler seeds its generator once and draws a new permutation at every pass, so the
    order of epoch k depends on how many passes this process has made. A job resumed in epoch
    k >= 1 (a requeue after the first epoch) made none and replayed epoch 0's order: the metrics
    of a requeued run left those of an uninterrupted run from the first resumed step of epoch 2 on
    (found by tests/slurm/test_requeue_resume.py). Re-seeding and drawing the k earlier
    permutations before each pass gives the uninterrupted run's order, resumed or not.
    """

    def __init__(self, inner: Any, epoch: Any):
        self.inner, self.epoch = inner, epoch

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        import torch

        generator = getattr(self.inner, "generator", None)
        if getattr(self.inner, "shuffle", False) and generator is not None:
            if self.inner.seed is not None:
                generator.manual_seed(self.inner.seed)
                for _ in range(self.epoch()):
                    torch.randperm(self.inner.num_samples, generator=generator)
        return iter(self.inner)


def build_trainer(config: RunConfig, rd: RunDir, loaded: Any, rows: Any) -> Any:
    from vqa_r1.train.callbacks import JsonlMetrics

    callbacks = [JsonlMetrics(rd.metrics)]
    common = _common_args(config, rd, len(rows))
    peft_config = _peft_config(config, loaded.adapter)
    if config.verb == "sft":
        from trl import SFTConfig, SFTTrainer

        class Trainer(AtomicCheckpointMixin, SFTTrainer):
            pass

        args = SFTConfig(**common, max_length=None, remove_unused_columns=False)
        return Trainer(
            model=loaded.model,
            args=args,
            train_dataset=rows,
            processing_class=loaded.processor,
            peft_config=peft_config,
            callbacks=callbacks,
        )
    from trl import GRPOConfig, GRPOTrainer

    from vqa_r1.launch.distributed import grpo_vllm_args
    from vqa_r1.rewards import get_rewards
    from vqa_r1.train.callbacks import recording_reward

    t = config.train

    class Trainer(AtomicCheckpointMixin, GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            inner = super()._get_train_sampler(dataset)
            return EpochOrderSampler(inner, lambda: int((self.state.epoch or 0) + 1e-6))

    rewards = [
        recording_reward(fn, rd.completions, t.sample_every, answer_rule=t.answer_rule)
        if fn.__name__ == "accuracy_reward"
        else recording_reward(fn, rd.completions, t.sample_every)
        for fn in get_rewards(t.reward_funcs)
    ]
    args = GRPOConfig(
        **common,
        num_generations=t.num_generations,
        max_completion_length=t.max_completion_length,
        beta=t.beta,
        loss_type=t.loss_type,
        temperature=t.temperature,
        scale_rewards=t.scale_rewards,
        reward_weights=t.reward_weights,
        **grpo_vllm_args(t),
    )
    return Trainer(
        model=loaded.model,
        reward_funcs=rewards,
        args=args,
        train_dataset=rows,
        processing_class=loaded.processor,
        peft_config=peft_config,
        callbacks=callbacks,
    )


def keep_tracker_run_id(rd: RunDir) -> str:
    """One experiment-tracker run across requeues: the id is made once and kept in status.json."""
    import os
    import uuid

    run_id = rd.status().get("tracker_run_id") or uuid.uuid4().hex[:12]
    rd.update_status(tracker_run_id=run_id)
    os.environ.setdefault("WANDB_RUN_ID", run_id)
    os.environ.setdefault("WANDB_RESUME", "allow")
    return run_id


def train(
    config: RunConfig, run_dir: str | Path, requeue: Any = None, progress: str | None = None
) -> dict:
    """Train (or resume) into ``run_dir``; returns the final status.

    ``requeue`` is the SLURM job's RequeueController (launch/requeue.py) or None: when its warning
    signal stopped training at a step boundary, the checkpoint is written and the job requeued
    instead of finishing. ``progress``: a label for one quiet progress bar (train/progress.py)
    instead of the Trainer's console logs; metrics.jsonl is written either way.
    """
    import torch

    from vqa_r1.data.datasets import dataset_dir, load_split, subset, trainer_rows
    from vqa_r1.models.loading import load_model

    if config.train.num_threads:
        torch.set_num_threads(config.train.num_threads)
    rd = RunDir(Path(run_dir)).create()
    if not rd.config.exists():
        save_config(config, rd.config)
    resume = latest_checkpoint(rd.checkpoints)
    if resume is not None:
        step = int(resume.name.split("-")[1])
        rd.trim_metrics(step)
        log.info("resuming from %s (step %d)", resume, step)
    started = time.time()
    keep_tracker_run_id(rd)
    restarts = rd.status().get("starts", 0)
    rd.update_status(
        state="RUNNING",
        verb=config.verb,
        starts=restarts + 1,
        resumed_from=str(resume) if resume else None,
    )

    loaded = load_model(config, adapter_path=config.init_adapter, trainable=True)
    if config.model.freeze_vision:
        loaded.adapter.freeze_vision(loaded.model)
    ds = load_split(dataset_dir(config.data), config.data.train_split)
    ds = subset(ds, config.data.num_samples, config.data.subset_seed)
    rows = trainer_rows(
        ds,
        loaded.adapter,
        config.verb,
        config.data.instruction,
        config.data.with_reasoning,
        config.data.rationale,
    )
    trainer = build_trainer(config, rd, loaded, rows)
    if progress:
        from vqa_r1.train.progress import make_quiet

        make_quiet(trainer, progress)
    if requeue is not None:
        from vqa_r1.launch.requeue import time_save

        trainer.add_callback(requeue)
        time_save(trainer, requeue)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    # a warning during the last step still stops training there, but the run is complete
    unfinished = trainer.state.global_step < trainer.state.max_steps
    if requeue is not None and requeue.requested and unfinished:
        rd.update_status(state="REQUEUED", global_step=trainer.state.global_step)
        requeue.requeue_now(f"checkpoint-{trainer.state.global_step} saved at the step boundary")
    trainer.save_model(str(rd.final))
    loaded.processor.save_pretrained(str(rd.final))
    status = dict(
        state="COMPLETED",
        global_step=trainer.state.global_step,
        train_seconds_last_start=round(time.time() - started, 1),
        final=str(rd.final),
    )
    rd.update_status(**status)
    if requeue is not None:
        requeue.finish()
    return rd.status()

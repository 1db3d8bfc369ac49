"""P4: seconds per GRPO step through our ``grpo`` against a bare script around TRL's GRPOTrainer.

Ours is ``vqa_r1.train.runner.train`` (what ``vqa-r1 grpo`` runs): run directory, metrics.jsonl,
sampled completions, atomic checkpoints, the epoch-order sampler. The baseline is the shortest
script a TRL user would write for the same job (``bare_trl`` below): the same model folder loaded
the same way, the same seeded rows, the same reward functions, a GRPOConfig with the same fields,
``GRPOTrainer(...).train()``, and nothing of ours (no callbacks, plain checkpoints).

Both sides carry one timing callback (``StepClock``). Seconds per step are taken in the steady
state, from the end of step ``first`` to the end of the last step, so start-up (imports, model and
data loading, trainer construction) and the first steps are reported apart. Both sides checkpoint
at the same ``save_steps`` (saves inside the timed window count), log at the same
``logging_steps``, and must end with the same logged losses and rewards: the same work was done.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from benchmarks import Result, Timing, side_by_side
from vqa_r1.config import RunConfig
from vqa_r1.data.datasets import open_split, subset, trainer_rows
from vqa_r1.models.loading import load_model
from vqa_r1.recipes import load_config
from vqa_r1.rewards import get_rewards
from vqa_r1.train.runner import train

MODEL = (
    "tiny-qwen2.5-vl-pretrained"  # the demo's model and recipe (qwen2_5_vl/tiny-pretrained_grpo)
)


@dataclass(frozen=True)
class Size:
    steps: int  # max_steps of each run
    first: int  # steady state: from the end of this step to the end of the last
    save_steps: int
    logging_steps: int
    num_samples: int  # seeded subset of the training split (start-up only; steps see 2 rows each)


FULL = Size(steps=20, first=5, save_steps=5, logging_steps=5, num_samples=256)
QUICK = Size(steps=8, first=2, save_steps=2, logging_steps=1, num_samples=64)

# Fields that name places or runs, not work: excluded when the two GRPOConfigs are compared.
_PATH_FIELDS = {"output_dir", "logging_dir", "run_name"}


class StepClock(TrainerCallback):
    """perf_counter at train begin, at each step end and at train end; the args and log history."""

    def __init__(self) -> None:
        self.begin: float | None = None
        self.end: float | None = None
        self.step_end: dict[int, float] = {}
        self.args: dict[str, Any] = {}
        self.log_history: list[dict[str, Any]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.begin = time.perf_counter()
        self.args = args.to_dict()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_end[state.global_step] = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.end = time.perf_counter()
        self.log_history = list(state.log_history)


@dataclass
class StepRun:
    """One run of one side, timed by its StepClock."""

    called: float
    returned: float
    clock: StepClock
    first: int
    saves: list[int] = field(default_factory=list)

    @property
    def last(self) -> int:
        return max(self.clock.step_end)

    @property
    def per_step(self) -> float:
        ends = self.clock.step_end
        return (ends[self.last] - ends[self.first]) / (self.last - self.first)

    @property
    def startup(self) -> float:
        """From the call to on_train_begin: imports, model, data, trainer, resume."""
        assert self.clock.begin is not None
        return self.clock.begin - self.called

    @property
    def first_steps(self) -> float:
        """From on_train_begin to the end of step ``first`` (outside the steady state)."""
        assert self.clock.begin is not None
        return self.clock.step_end[self.first] - self.clock.begin

    @property
    def after(self) -> float:
        """From the end of the last step to the return (the last save, the final adapter)."""
        return self.returned - self.clock.step_end[self.last]


def bench_config(size: Size) -> RunConfig:
    return load_config(
        "grpo",
        MODEL,
        overrides=[
            f"train.max_steps={size.steps}",
            f"train.save_steps={size.save_steps}",
            f"train.logging_steps={size.logging_steps}",
            f"data.num_samples={size.num_samples}",
        ],
    )


def ours(config: RunConfig, run_dir: Path, first: int) -> StepRun:
    clock = StepClock()
    called = time.perf_counter()
    status = train(config, run_dir, callbacks=[clock])
    returned = time.perf_counter()
    if status["state"] != "COMPLETED":
        raise RuntimeError(f"P4: our run ended {status['state']}: {status}")
    saves = sorted(
        int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*")
    )
    return StepRun(called, returned, clock, first, saves)


def bare_trl(config: RunConfig, output_dir: Path, callbacks: list[Any]) -> Any:
    """The minimal script: load, rows, rewards, GRPOConfig, GRPOTrainer(...).train(). Nothing else.

    The model folder, the processor options and the rows come from the same library functions as
    ours (a user of TRL alone would write the same few lines); the LoRA targets are the family's
    language-model regex, as in ours.
    """
    import torch
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    t, lc = config.train, config.lora
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    loaded = load_model(config)
    ds = subset(
        open_split(config.data, config.data.train_split),
        config.data.num_samples,
        config.data.subset_seed,
    )
    rows = trainer_rows(ds, loaded.adapter, "grpo", config.data.instruction)
    args = GRPOConfig(
        output_dir=str(output_dir),
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
        # GRPOConfig's defaults are bf16 and gradient checkpointing on: the same work needs ours
        bf16=t.bf16 and torch.cuda.is_available(),
        gradient_checkpointing=t.gradient_checkpointing,
        report_to=[],
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=False,
        num_generations=t.num_generations,
        max_completion_length=t.max_completion_length,
        beta=t.beta,
        loss_type=t.loss_type,
        temperature=t.temperature,
        scale_rewards=t.scale_rewards,
        reward_weights=t.reward_weights,
    )
    trainer = GRPOTrainer(
        model=loaded.model,
        reward_funcs=get_rewards(t.reward_funcs),
        args=args,
        train_dataset=rows,
        processing_class=loaded.processor,
        peft_config=LoraConfig(
            r=lc.r,
            lora_alpha=lc.alpha,
            lora_dropout=lc.dropout,
            target_modules=loaded.adapter.lora_target_regex(),
            task_type="CAUSAL_LM",
        ),
        callbacks=callbacks,
    )
    trainer.train()
    return trainer


def baseline(config: RunConfig, output_dir: Path, first: int) -> StepRun:
    clock = StepClock()
    called = time.perf_counter()
    bare_trl(config, output_dir, [clock])
    returned = time.perf_counter()
    saves = sorted(int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*"))
    return StepRun(called, returned, clock, first, saves)


def _curve(history: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    return [(h["step"], h["loss"], h["reward"]) for h in history if "loss" in h and "reward" in h]


def _same_curve(a: StepRun, b: StepRun) -> bool:
    ca, cb = _curve(a.clock.log_history), _curve(b.clock.log_history)
    return bool(ca) and len(ca) == len(cb) and all(
        x[0] == y[0] and math.isclose(x[1], y[1], rel_tol=1e-4, abs_tol=1e-6)
        and math.isclose(x[2], y[2], rel_tol=1e-4, abs_tol=1e-6)
        for x, y in zip(ca, cb, strict=True)
    )  # fmt: skip


def _args_differences(a: StepRun, b: StepRun) -> list[str]:
    keys = (set(a.clock.args) | set(b.clock.args)) - _PATH_FIELDS
    return sorted(k for k in keys if a.clock.args.get(k) != b.clock.args.get(k))


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def measure(size: Size, repeats: int, warmup: bool) -> Result:
    config = bench_config(size)
    with tempfile.TemporaryDirectory(prefix="vqa-r1-bench-p4-") as tmp:
        runs = iter(range(10**6))
        ours_t, base_t, ours_runs, base_runs = side_by_side(
            lambda: ours(config, Path(tmp) / f"ours-{next(runs)}", size.first),
            lambda: baseline(config, Path(tmp) / f"trl-{next(runs)}", size.first),
            repeats,
            labels=("vqa-r1 grpo (runner.train)", "bare TRL GRPOTrainer script"),
            warmup=warmup,
        )
    t = config.train
    steady = size.steps - size.first
    saves_in_window = [s for s in range(size.first, size.steps) if s % size.save_steps == 0]
    return Result(
        id="P4",
        title="GRPO step: our grpo vs a bare TRL script",
        ours=Timing(f"{ours_t.label}, s/step", [r.per_step for r in ours_runs]),
        baseline=Timing(f"{base_t.label}, s/step", [r.per_step for r in base_runs]),
        kind="overhead",
        goal=1.05,
        floor=1.15,
        checks={
            "same logged losses and rewards": all(
                _same_curve(a, b) for a in ours_runs for b in base_runs
            ),
            "GRPOConfig fields that differ": sorted(
                {
                    k
                    for a, b in zip(ours_runs, base_runs, strict=True)
                    for k in _args_differences(a, b)
                }
            ),
            "same checkpoints": all(
                a.saves == b.saves for a, b in zip(ours_runs, base_runs, strict=True)
            ),
            "steps": size.steps,
        },
        details={
            "model / recipe": f"{MODEL} / {config.recipe}",
            "per step": f"{t.per_device_train_batch_size} completions ({t.num_generations} per "
            f"prompt), up to {t.max_completion_length} new tokens, LoRA r={config.lora.r}",
            "steady state": f"steps {size.first + 1}..{size.steps} ({steady} steps, "
            f"checkpoints after steps {saves_in_window} inside it), logging every "
            f"{size.logging_steps}, save_steps {size.save_steps}",
            "data": f"seeded subset of {size.num_samples} rows of the recipe's training split",
            "start-up, call to on_train_begin (s), ours / bare": (
                f"{_median([r.startup for r in ours_runs])} / "
                f"{_median([r.startup for r in base_runs])}"
            ),
            f"steps 1..{size.first} (s), ours / bare": (
                f"{_median([r.first_steps for r in ours_runs])} / "
                f"{_median([r.first_steps for r in base_runs])}"
            ),
            "after the last step (last save, final adapter) (s), ours / bare": (
                f"{_median([r.after for r in ours_runs])} / {_median([r.after for r in base_runs])}"
            ),
            "wall per run (s), ours / bare": f"{ours_t.median:.2f} / {base_t.median:.2f}",
        },
        notes=[
            "seconds per step in the steady state (StepClock, a callback on both sides); start-up "
            "and the first steps are reported apart",
            "ours saves checkpoints atomically (stage, fsync, rename), writes metrics.jsonl and "
            "sampled completions: all inside the timed window, as in a real run",
            "warm-up: " + ("one untimed run of each side" if warmup else "none"),
        ],
    )


def run(quick: bool, repeats: int) -> Result:
    return measure(QUICK if quick else FULL, repeats, warmup=True)

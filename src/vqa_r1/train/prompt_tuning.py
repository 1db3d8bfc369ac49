"""Prompt tuning (PEFT ``PromptTuningConfig``): a few trainable virtual tokens, the model frozen.

Two modes, one trainer:

* ``answer``: the target is the answer alone (``<answer> True </answer>``); evaluation reads
  P(True) against P(False) at the answer position (vqa_r1.eval.prompt_scoring), no generation.
* ``reasoning``: the target is the SFT recipe's reasoning, ``<think> ... </think> <answer> ...
  </answer>`` (``data.rationale``, scene by default as in the demo); evaluation generates and reads
  the answer with vqa_r1.answers.extract_answer.

The loss is the cross-entropy of the assistant's turn (the target and the chat template's end of
turn), the prompt masked, as TRL's SFT on prompt/completion rows computes it.

Training runs on a transformers ``Trainer`` and lives in its run directory as an SFT or GRPO run
does, through train/runner.py's run-lifecycle functions: atomic ``checkpoints/checkpoint-N``
(train/trainer_hooks.py), resume from the latest complete one with optimizer, scheduler, RNG and
data position (a resumed run repeats the uninterrupted run's steps: tests/test_prompt_tuning.py),
metrics.jsonl, status.json, a progress bar, Ctrl-C at a step boundary, and a job's callbacks (the
SLURM requeue controller). The Trainer holds PEFT's prompt-tuning wrapper, which owns the one
trainable tensor (num_virtual_tokens x hidden) and is saved and reloaded as a PEFT adapter. Ours:

* the forward: ``compute_loss`` runs vqa_r1.models.virtual_prompt (virtual tokens in front, the
  model's own M-RoPE positions for Qwen2.5-VL), not PEFT's forward, which gives Qwen2.5-VL wrong
  image positions; the frozen model stays in eval mode (no dropout);
* the collator (``PromptCollator``): images, chat-formatted prompt + completion, labels on the
  completion only;
* ``final/``: the adapter (PEFT format, written aside and renamed into place) with
  ``prompt_tuning.json`` (config, steps, loss curve, wall time) and, as in each checkpoint, the
  record of its base (``adapter_base.json``, models/base_record.py).

Not TRL's SFTTrainer: what it adds to the Trainer (dataset preparation, collator, loss, model
wrapping) would all be replaced here. AdamW on the prompt alone, no weight decay or clipping,
linear warm-up and decay.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from vqa_r1.claims import renamed_settings
from vqa_r1.config import DEVICE_HELP, DataConfig, EvalConfig
from vqa_r1.data.datasets import open_split, refuse_several_images, subset
from vqa_r1.data.prompts import problem_text, sft_completion, solution_text
from vqa_r1.domains import SEED, WARMUP, above
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_dir, atomic_write_json, atomic_write_text, follow_umask, read_jsonl
from vqa_r1.models import base_record
from vqa_r1.models.device import check_device_setting, resolve_device
from vqa_r1.models.loading import load_model, model_identity
from vqa_r1.models.registry import get_spec
from vqa_r1.models.virtual_prompt import VirtualPromptModel, check_family
from vqa_r1.run_dir import RunDir, checkpoint_step
from vqa_r1.settings import differences
from vqa_r1.typed_config import build, option, parse_overrides, to_dict

log = logging.getLogger(__name__)

Mode = Literal["answer", "reasoning"]
RECORD_FILE = "prompt_tuning.json"


@dataclass
class PromptTuneData(DataConfig):
    """vqa_r1.config.DataConfig (the same ``data.*`` keys) with the CPU demo's data as defaults."""

    rationale: Literal["claim", "scene"] = option(
        "scene", help="claim: the relation that holds; scene: the layout, objects in order"
    )
    synthetic_train: int = option(4000, help="synthetic data: training scenes", minimum=0)
    synthetic_max_objects: int = option(2, help="synthetic data: most objects per scene", minimum=2)
    synthetic_distinct_colors: bool = option(True, help="every object of a scene a new colour")
    synthetic_background: Literal["plain", "ramp"] = option(
        "ramp", help="ramp: a position-coding background (data/synthetic.py)"
    )


@dataclass
class PromptTuneModel:
    """The run config's ``model.*`` keys that prompt tuning reads (the model is frozen and loaded
    in float32, so ModelConfig's training and image keys would mean nothing here)."""

    name: str = option(
        "tiny-qwen2.5-vl-pretrained", help="registered model name (`vqa-r1 models`; --model)"
    )
    path: str | None = option(None, help="a local model folder overriding the registry's hub id")
    device: str = option("auto", help=DEVICE_HELP)


@dataclass
class PromptTuneTrain:
    """The run config's ``train.*`` keys that prompt tuning uses: TrainingArguments names."""

    learning_rate: float = option(
        3e-2, help="peak learning rate (AdamW; TrainingArguments)", domain=above(0)
    )
    warmup_steps: float = option(
        0.05, help="warm-up steps; a float < 1 is a fraction of max_steps", domain=WARMUP
    )
    max_steps: int = option(
        600, help="optimizer steps (about 60-90 s on one thread for the default model)", minimum=1
    )
    per_device_train_batch_size: int = option(
        16, help="examples per step (TrainingArguments; one process)", minimum=1
    )
    save_steps: int = option(50, help="checkpoint interval in steps", minimum=1)
    logging_steps: int = option(10, help="metrics.jsonl interval in steps", minimum=1)
    seed: int = option(0, help="prompt init and data-order seed", domain=SEED)
    num_threads: int = option(1, help="torch CPU threads", minimum=1)


@dataclass
class PromptTuneEval(EvalConfig):
    """vqa_r1.config.EvalConfig (the same ``eval.*`` keys) with prompt tuning's defaults."""

    split: str | None = option(
        None, help="split evaluated; none: data.eval_split (validation). Report on test"
    )
    batch_size: int = option(32, help="evaluation batch size", minimum=1)
    max_new_tokens: int = option(128, help="reasoning mode: new tokens per answer", minimum=1)
    answer_rule: str = option("robust", help="reasoning mode: how answers are read (answers.py)")


@dataclass
class PromptTuneConfig:
    """One prompt-tuning run: training, then evaluation of the learned prompt. The keys shared
    with the run config (vqa_r1.config.RunConfig) have its names: ``model.name``,
    ``train.per_device_train_batch_size``, ``eval.limit``, ``data.*``, ...; the prompt's own keys
    are top-level."""

    mode: Mode = option(
        "answer",
        help="answer: answer-only targets, scored by P(True) vs P(False); reasoning: "
        "<think> ... </think> <answer> ... </answer> targets, scored by generation (set by --mode)",
    )
    num_virtual_tokens: int = option(8, help="virtual tokens in front of every input", minimum=1)
    init: Literal["random", "text"] = option(
        "text", help="text: the embeddings of init_text's tokens (repeated); random: Gaussian"
    )
    init_text: str = option(
        "Look at the image and check the statement.", help="init=text: the initial prompt"
    )
    model: PromptTuneModel = field(default_factory=PromptTuneModel)
    data: PromptTuneData = field(default_factory=PromptTuneData)
    train: PromptTuneTrain = field(default_factory=PromptTuneTrain)
    eval: PromptTuneEval = field(default_factory=PromptTuneEval)

    @property
    def split(self) -> str:
        return self.eval.split or self.data.eval_split


def config_from_overrides(overrides: list[str] | None) -> PromptTuneConfig:
    cfg = build(PromptTuneConfig(), parse_overrides(overrides))
    validate(cfg)
    return cfg


def validate(cfg: PromptTuneConfig) -> None:
    spec = get_spec(cfg.model.name)
    check_family(spec.family)
    check_device_setting(cfg.model.device)
    if cfg.init == "text" and not cfg.init_text.strip():
        raise UserError("init_text must not be empty when init=text")
    if cfg.data.dataset != "synthetic" and not Path(cfg.data.dataset).exists():
        raise UserError(f"data.dataset: {cfg.data.dataset!r} is neither 'synthetic' nor a folder")
    from vqa_r1.data import formats

    if cfg.data.dataset != "synthetic" and formats.detect(Path(cfg.data.dataset)) is (
        formats.multi_image
    ):  # refused before queueing; a saved dataset listing several is refused when read
        raise UserError(
            f"data.dataset: {cfg.data.dataset} holds multi-image rows; prompt tuning takes one "
            "image per row (SFT, GRPO and evaluation take several)"
        )


def load_base(cfg: PromptTuneConfig) -> Any:
    """The frozen base model (float32) of a config, in eval mode (no dropout)."""
    from vqa_r1.config import ModelConfig

    loaded = load_model(
        ModelConfig(name=cfg.model.name, path=cfg.model.path, dtype="float32"),
        device=resolve_device(cfg.model.device),
    )
    loaded.model.eval()
    for param in loaded.model.parameters():
        param.requires_grad_(False)
    return loaded


def target_text(row: dict, cfg: PromptTuneConfig) -> str:
    if cfg.mode == "answer":
        return solution_text(row["label"])
    return sft_completion(row, cfg.data.with_reasoning, cfg.data.rationale)


def warmup_count(cfg: PromptTuneConfig) -> int:
    w = cfg.train.warmup_steps
    return int(round(w * cfg.train.max_steps)) if 0 < w < 1 else int(w)


def make_peft_model(loaded: Any, cfg: PromptTuneConfig) -> Any:
    """The PEFT prompt-tuning wrapper: holds the virtual tokens, initialises and saves them."""
    import torch
    from peft import PromptTuningConfig, PromptTuningInit, TaskType, get_peft_model

    embeddings = loaded.model.get_input_embeddings()
    kwargs: dict = {}
    if cfg.init == "text":
        kwargs = dict(
            prompt_tuning_init=PromptTuningInit.TEXT,
            prompt_tuning_init_text=cfg.init_text,
            tokenizer_name_or_path=str(loaded.path),
        )
    peft_cfg = PromptTuningConfig(
        task_type=TaskType.CAUSAL_LM,
        num_virtual_tokens=cfg.num_virtual_tokens,
        token_dim=embeddings.weight.shape[1],
        **kwargs,
    )
    torch.manual_seed(cfg.train.seed)
    peft_model = get_peft_model(loaded.model, peft_cfg)
    weight = prompt_weight(peft_model)
    if cfg.init == "random":
        # PEFT's RANDOM init is N(0, 1); start the virtual tokens at the scale of real ones instead
        with torch.no_grad():
            weight.mul_(embeddings.weight.float().std())
    return peft_model


def prompt_weight(peft_model: Any) -> Any:
    return peft_model.prompt_encoder[peft_model.active_adapter].embedding.weight


def _base_record(cfg: PromptTuneConfig, loaded: Any) -> dict:
    """What the prompt is trained on (models/base_record.py), beside it in final/ and each
    checkpoint."""
    from vqa_r1.config import ModelConfig

    model = ModelConfig(name=cfg.model.name, path=cfg.model.path)
    return base_record.base_record(model_identity(model), loaded.path)


def _save_adapter(peft_model: Any, folder: Path) -> None:
    peft_model.save_pretrained(str(folder))
    follow_umask(folder)  # safetensors writes 0600


def _check_same_run(rd: RunDir, cfg: PromptTuneConfig) -> None:
    """A run directory is resumed only by the run that made it: settings.py's rule, as the
    folder's claim applies it (a config.yaml in the old key names read as today's)."""
    if not rd.config.exists():
        return
    old = renamed_settings("prompt-tune", yaml.safe_load(rd.config.read_text()) or {})
    differ = differences(old, to_dict(cfg))
    if differ:
        raise UserError(
            f"{rd.root} holds a prompt-tuning run with other settings ({'; '.join(differ[:3])}); "
            "use a new --output-dir"
        )


class PromptCollator:
    """Dataset rows -> one batch: processor inputs (left padding) of prompt + completion for each
    row's image, and ``labels``, the input ids with everything but the completion set to -100."""

    def __init__(self, vp: VirtualPromptModel, cfg: PromptTuneConfig):
        self.vp, self.cfg = vp, cfg

    def __call__(self, rows: list[dict]) -> dict:
        import torch
        from PIL import Image

        vp = self.vp
        images = [Image.open(r["image_path"]).convert("RGB") for r in rows]
        questions = [problem_text(r["caption"]) for r in rows]
        prompts = [vp.prompt_text(q) for q in questions]
        targets = [
            vp.completion_text(q, target_text(r, self.cfg))
            for q, r in zip(questions, rows, strict=True)
        ]
        batch = dict(
            vp.encode(images, [p + t for p, t in zip(prompts, targets, strict=True)], False)
        )
        lengths = [vp.completion_length(p, t) for p, t in zip(prompts, targets, strict=True)]
        ids = batch["input_ids"]
        width = ids.shape[1]
        keep = torch.arange(width).unsqueeze(0) >= width - torch.tensor(lengths).unsqueeze(1)
        batch["labels"] = ids.masked_fill(~keep, -100)
        return batch


def completion_loss(logits: Any, labels: Any) -> Any:
    """Mean cross-entropy over the labelled tokens; ``logits`` cover the virtual tokens and then
    the text (``labels``' width): position t of the text predicts token t + 1."""
    import torch

    width = labels.shape[1]
    text_logits = logits[:, -width:-1]
    return torch.nn.functional.cross_entropy(
        text_logits.reshape(-1, text_logits.shape[-1]).float(), labels[:, 1:].reshape(-1)
    )


def training_arguments(cfg: PromptTuneConfig, rd: RunDir, device: str) -> Any:
    """The Trainer's arguments; ``device``: where the model was loaded (``cpu`` or ``cuda:N``; on
    a GPU the Trainer itself places the model, on its first device)."""
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir=str(rd.checkpoints),
        max_steps=cfg.train.max_steps,
        per_device_train_batch_size=cfg.train.per_device_train_batch_size,
        learning_rate=cfg.train.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=warmup_count(cfg),
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        optim="adamw_torch",
        save_strategy="steps",
        save_steps=cfg.train.save_steps,
        logging_steps=cfg.train.logging_steps,
        seed=cfg.train.seed,
        data_seed=cfg.train.seed,
        remove_unused_columns=False,  # the collator reads image_path, caption, label, ...
        dataloader_num_workers=0,
        use_cpu=device == "cpu",
        report_to=[],
        run_name=rd.root.name,
        disable_tqdm=False,
    )
    # one process trains on one device: with several GPUs visible the Trainer would otherwise
    # wrap the model in DataParallel and multiply the batch by their number (the Trainer does
    # the same for a model spread over several GPUs)
    args._n_gpu = min(args.n_gpu, 1)
    return args


def build_trainer(
    cfg: PromptTuneConfig,
    rd: RunDir,
    vp: VirtualPromptModel,
    peft_model: Any,
    rows: Any,
    callbacks: Sequence[Any],
) -> Any:
    """The Trainer of a prompt-tuning run: atomic checkpoints, metrics.jsonl, ``callbacks``."""
    from transformers import Trainer

    from vqa_r1.train.callbacks import JsonlMetrics
    from vqa_r1.train.trainer_hooks import AtomicCheckpointMixin

    class PromptTrainer(AtomicCheckpointMixin, Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            model.eval()  # frozen, without dropout (training_step sets train mode)
            inputs = dict(inputs)
            labels = inputs.pop("labels")
            prompt = prompt_weight(self.accelerator.unwrap_model(model))
            logits = vp.forward(inputs, prompt).logits
            loss = completion_loss(logits, labels)
            return (loss, logits) if return_outputs else loss

    trainer = PromptTrainer(
        model=peft_model,
        args=training_arguments(cfg, rd, str(next(peft_model.parameters()).device)),
        data_collator=PromptCollator(vp, cfg),
        train_dataset=rows,
        callbacks=[JsonlMetrics(rd.metrics), *callbacks],
    )
    # compute_loss takes the mean itself: no token count passed in, the loss divided by the
    # accumulation steps as for a model without loss kwargs
    trainer.model_accepts_loss_kwargs = False
    return trainer


_JOB: contextvars.ContextVar[tuple[tuple, bool] | None] = contextvars.ContextVar(
    "prompt_tuning_job", default=None
)


@contextlib.contextmanager
def job_callbacks(callbacks: Sequence[Any], sigterm_stops: bool) -> Iterator[None]:
    """Within it, ``train_prompt`` adds ``callbacks`` to its trainer and leaves SIGTERM alone
    unless ``sigterm_stops``: how a SLURM job (launch/task.py PromptTuneTask) hands its requeue
    controller to training through vqa_r1.launch.prompt_tuning.run_prompt_tuning, which takes no
    callbacks of its own."""
    token = _JOB.set((tuple(callbacks), sigterm_stops))
    try:
        yield
    finally:
        _JOB.reset(token)


def train_prompt(
    cfg: PromptTuneConfig,
    run_dir: str | Path,
    progress: bool = True,
    stop_after: int | None = None,
    loaded: Any = None,
    callbacks: Sequence[Any] = (),
    sigterm_stops: bool = True,
) -> dict:
    """Train (or resume, or find finished) the prompt of ``cfg`` in ``run_dir``; returns the record
    saved as ``final/prompt_tuning.json``, or, when training stopped early (``stop_after``, a
    callback, Ctrl-C), a partial one (``complete`` false, no final/).

    ``callbacks``: extra Trainer callbacks (with those of ``job_callbacks``); ``sigterm_stops``:
    SIGTERM, like Ctrl-C, stops at the next step boundary with a checkpoint (a job's SIGTERM
    belongs to its requeue controller: ``job_callbacks``)."""
    import torch

    from vqa_r1.train.callbacks import StopAfter, StopOnInterrupt
    from vqa_r1.train.runner import fit, mark_running, mark_stopped, resume_point

    torch.set_num_threads(cfg.train.num_threads)
    rd = RunDir(Path(run_dir))
    if (rd.final / RECORD_FILE).exists():
        _check_same_run(rd, cfg)
        return json.loads((rd.final / RECORD_FILE).read_text())
    rd.create()
    _check_same_run(rd, cfg)
    atomic_write_text(rd.config, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    job = _JOB.get()
    if job is not None:
        callbacks, sigterm_stops = (*job[0], *callbacks), job[1]

    resume = resume_point(rd)
    start = checkpoint_step(resume) if resume is not None else 0
    if stop_after is not None and start >= stop_after:  # nothing to do before the stop
        return _record(cfg, rd, start, start, 0.0)
    mark_running(rd, "prompt-tune", resume)

    loaded = loaded or load_base(cfg)
    vp = VirtualPromptModel(loaded, cfg.data.instruction)
    peft_model = make_peft_model(loaded, cfg)
    adapter_base = _base_record(cfg, loaded)
    started = time.perf_counter()
    if start >= cfg.train.max_steps:
        # killed after its last checkpoint, before final/: nothing left to train (the Trainer,
        # resumed there, would train one step past max_steps)
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        set_peft_model_state_dict(peft_model, load_peft_weights(str(resume)))
        step, done = start, True
    else:
        split = open_split(cfg.data, cfg.data.train_split)
        refuse_several_images(
            split, "prompt tuning", f"{cfg.data.dataset} [{cfg.data.train_split}]"
        )
        rows = subset(split, cfg.data.num_samples, cfg.data.subset_seed)
        interrupt = StopOnInterrupt(sigterm=sigterm_stops)
        extra = [*callbacks, interrupt]
        if stop_after is not None and stop_after < cfg.train.max_steps:
            extra.append(StopAfter(stop_after))
        trainer = build_trainer(cfg, rd, vp, peft_model, rows, extra)
        trainer.adapter_base = adapter_base  # into each checkpoint (trainer_hooks.py)
        use_cache = getattr(loaded.model.config, "use_cache", None)
        try:
            label = f"prompt-tune {cfg.mode}" if progress else None
            step, done = fit(trainer, resume, interrupt, label, f"prompt-tune {cfg.mode}", rd)
        finally:  # the model goes on to evaluation as it came: eval mode, its cache setting
            loaded.model.eval()
            if use_cache is not None:
                loaded.model.config.use_cache = use_cache
        if not done:
            mark_stopped(rd, step, interrupt)
            return _record(cfg, rd, step, start, time.perf_counter() - started)
    record = _record(cfg, rd, step, start, time.perf_counter() - started)
    with atomic_dir(rd.final) as tmp:
        _save_adapter(peft_model, tmp)
        atomic_write_json(tmp / RECORD_FILE, record)
        base_record.write_record(tmp, adapter_base)
    rd.update_status(state="TRAINED", global_step=step, train_seconds=record["train_seconds"])
    return record


def _record(cfg: PromptTuneConfig, rd: RunDir, step: int, start: int, seconds: float) -> dict:
    return {
        "config": to_dict(cfg),
        "complete": step >= cfg.train.max_steps,
        "global_step": step,
        "resumed_from": start,
        "train_seconds": round(seconds, 1),
        "loss_curve": [
            (r["step"], r["loss"]) for r in read_jsonl(rd.metrics, missing_ok=True) if "loss" in r
        ],
    }

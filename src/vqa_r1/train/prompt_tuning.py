"""Prompt tuning (PEFT ``PromptTuningConfig``): a few trainable virtual tokens, the model frozen.

Two modes, one training loop:

* ``answer``: the target is the answer alone (``<answer> True </answer>``); evaluation reads
  P(True) against P(False) at the answer position (vqa_r1.eval.prompt_scoring), no generation.
* ``reasoning``: the target is the SFT recipe's reasoning, ``<think> ... </think> <answer> ...
  </answer>`` (``data.rationale``, scene by default as in the demo); evaluation generates and reads
  the answer with vqa_r1.answers.extract_answer.

The loss is the cross-entropy of the assistant's turn (the target and the chat template's end of
turn), the prompt masked, as TRL's SFT on prompt/completion rows computes it.

Why a plain loop rather than TRL's SFTTrainer: the forward must be the one of
vqa_r1.models.virtual_prompt (virtual tokens in front, the model's own M-RoPE positions for Qwen2.5-VL);
PEFT's forward, which a Trainer would call, gives Qwen2.5-VL wrong image positions. With the forward,
the collator and the saving all replaced, the Trainer would add only its loop. The loop here trains
one tensor (num_virtual_tokens x hidden) with AdamW and a linear schedule, and checkpoints atomically
like every other run: ``checkpoints/checkpoint-N`` is written beside its final place, marked
complete and renamed (vqa_r1.run_dir.latest_checkpoint skips any folder without the marker). A
checkpoint holds the adapter (PEFT format), optimizer and scheduler state and the step; the data
order is a function of the seed and the step, and the model runs without dropout, so a resumed run
repeats the uninterrupted run's steps exactly (tests/test_prompt_tuning.py).

The adapter is saved with PEFT's ``save_pretrained`` into ``<run_dir>/final`` (written aside and
renamed into place), with ``prompt_tuning.json`` (config, steps, loss curve, wall time).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from vqa_r1.config import DEVICE_HELP, DataConfig
from vqa_r1.data.datasets import open_split, subset
from vqa_r1.data.prompts import problem_text, sft_completion, solution_text
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_dir, atomic_write_json, atomic_write_text, follow_umask, read_jsonl
from vqa_r1.models.device import check_device_setting, resolve_device
from vqa_r1.models.loading import load_model
from vqa_r1.models.registry import get_spec
from vqa_r1.models.virtual_prompt import VirtualPromptModel, check_family
from vqa_r1.run_dir import COMPLETE_MARKER, RunDir, checkpoint_step, latest_checkpoint
from vqa_r1.typed_config import build, option, parse_overrides, to_dict

log = logging.getLogger(__name__)

Mode = Literal["answer", "reasoning"]
STATE_FILE = "training_state.pt"
RECORD_FILE = "prompt_tuning.json"


@dataclass
class PromptTuneData(DataConfig):
    """vqa_r1.config.DataConfig (the same ``data.*`` keys) with the CPU demo's data as defaults."""

    rationale: Literal["claim", "scene"] = option(
        "scene", help="claim: the relation that holds; scene: the layout, objects in order"
    )
    synthetic_train: int = option(4000, help="synthetic data: training scenes")
    synthetic_max_objects: int = option(2, help="synthetic data: most objects per scene")
    synthetic_distinct_colors: bool = option(True, help="every object of a scene a new colour")
    synthetic_background: Literal["plain", "ramp"] = option(
        "ramp", help="ramp: a position-coding background (data/synthetic.py)"
    )


@dataclass
class PromptTuneConfig:
    """One prompt-tuning run: training, then evaluation of the learned prompt."""

    model: str = option("tiny-qwen2.5-vl-pretrained", help="registered model name (set by --model)")
    model_path: str | None = option(None, help="a local model folder overriding the registry's")
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
    learning_rate: float = option(3e-2, help="peak learning rate (AdamW)")
    warmup_steps: float = option(0.05, help="warm-up steps; a float < 1 is a fraction of max_steps")
    max_steps: int = option(
        600, help="optimizer steps (about 60-90 s on one thread for the default model)", minimum=1
    )
    batch_size: int = option(16, help="examples per step", minimum=1)
    save_steps: int = option(50, help="checkpoint interval in steps", minimum=1)
    logging_steps: int = option(10, help="metrics.jsonl interval in steps", minimum=1)
    seed: int = option(0, help="prompt init and data-order seed")
    data: PromptTuneData = field(default_factory=PromptTuneData)
    eval_split: str | None = option(
        None, help="split evaluated; none: data.eval_split (validation). Report on test"
    )
    eval_limit: int | None = option(
        None, help="evaluate the first N examples only (at least 1); none: every example", minimum=1
    )
    eval_batch_size: int = option(32, help="evaluation batch size", minimum=1)
    max_new_tokens: int = option(128, help="reasoning mode: new tokens per answer", minimum=1)
    answer_rule: str = option("robust", help="reasoning mode: how answers are read (answers.py)")
    num_threads: int = option(1, help="torch CPU threads", minimum=1)
    device: str = option("auto", help=DEVICE_HELP)

    @property
    def split(self) -> str:
        return self.eval_split or self.data.eval_split


# keys that do not change what is trained: a resumed run may differ in these
EVAL_ONLY_KEYS = (
    "eval_split",
    "eval_limit",
    "eval_batch_size",
    "max_new_tokens",
    "answer_rule",
    "device",
)


def config_from_overrides(overrides: list[str] | None) -> PromptTuneConfig:
    cfg = build(PromptTuneConfig(), parse_overrides(overrides))
    validate(cfg)
    return cfg


def validate(cfg: PromptTuneConfig) -> None:
    spec = get_spec(cfg.model)
    check_family(spec.family)
    if cfg.learning_rate <= 0:
        raise UserError("learning_rate must be positive")
    check_device_setting(cfg.device, "device")
    if cfg.init == "text" and not cfg.init_text.strip():
        raise UserError("init_text must not be empty when init=text")
    if cfg.data.dataset != "synthetic" and not Path(cfg.data.dataset).exists():
        raise UserError(f"data.dataset: {cfg.data.dataset!r} is neither 'synthetic' nor a folder")


def load_base(cfg: PromptTuneConfig) -> Any:
    """The frozen base model (float32) of a config, in eval mode (no dropout)."""
    from vqa_r1.config import ModelConfig

    loaded = load_model(
        ModelConfig(name=cfg.model, path=cfg.model_path, dtype="float32"),
        device=resolve_device(cfg.device, "device"),
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
    w = cfg.warmup_steps
    return int(round(w * cfg.max_steps)) if 0 < w < 1 else int(w)


def lr_factor(step: int, cfg: PromptTuneConfig) -> float:
    """Linear warm-up, then linear decay to zero at max_steps (transformers' "linear")."""
    warm = warmup_count(cfg)
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (cfg.max_steps - step) / max(1, cfg.max_steps - warm))


class _Rows:
    """Training rows with each epoch's permutation computed once."""

    def __init__(self, ds: Any, cfg: PromptTuneConfig):
        self.ds, self.cfg, self.n = ds, cfg, len(ds)
        self._perms: dict[int, list[int]] = {}

    def indices(self, step: int) -> list[int]:
        import torch

        out = []
        for k in range(step * self.cfg.batch_size, (step + 1) * self.cfg.batch_size):
            epoch, pos = divmod(k, self.n)
            if epoch not in self._perms:
                gen = torch.Generator().manual_seed(self.cfg.seed * 100_003 + epoch)
                self._perms[epoch] = torch.randperm(self.n, generator=gen).tolist()
            out.append(self._perms[epoch][pos])
        return out


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
    torch.manual_seed(cfg.seed)
    peft_model = get_peft_model(loaded.model, peft_cfg)
    weight = prompt_weight(peft_model)
    if cfg.init == "random":
        # PEFT's RANDOM init is N(0, 1); start the virtual tokens at the scale of real ones instead
        with torch.no_grad():
            weight.mul_(embeddings.weight.float().std())
    return peft_model


def prompt_weight(peft_model: Any) -> Any:
    return peft_model.prompt_encoder[peft_model.active_adapter].embedding.weight


def _save_adapter(peft_model: Any, folder: Path) -> None:
    peft_model.save_pretrained(str(folder))
    follow_umask(folder)  # safetensors writes 0600


def _write_checkpoint(
    rd: RunDir, peft_model: Any, optimizer: Any, step: int, history: list
) -> None:
    import torch

    target = rd.checkpoints / f"checkpoint-{step}"
    with atomic_dir(target) as tmp:
        _save_adapter(peft_model, tmp)
        torch.save({"step": step, "optimizer": optimizer.state_dict()}, tmp / STATE_FILE)
        (tmp / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "log_history": history}, indent=2)
        )
        (tmp / COMPLETE_MARKER).write_text(str(step))
    kept = sorted(
        (p for p in rd.checkpoints.iterdir() if checkpoint_step(p) is not None),
        key=checkpoint_step,
    )
    for old in kept[:-2]:  # the two newest stay
        shutil.rmtree(old, ignore_errors=True)


def _check_same_run(rd: RunDir, cfg: PromptTuneConfig) -> None:
    """A run directory is resumed only by the run that made it (eval settings may differ)."""
    if not rd.config.exists():
        return
    old = yaml.safe_load(rd.config.read_text()) or {}
    new = to_dict(cfg)
    differ = sorted(k for k in new if k not in EVAL_ONLY_KEYS and old.get(k) != new[k])
    if differ:
        raise UserError(
            f"{rd.root} holds a prompt-tuning run with other settings ({', '.join(differ)}); "
            "use a new --output-dir"
        )


def train_prompt(
    cfg: PromptTuneConfig,
    run_dir: str | Path,
    progress: bool = True,
    stop_after: int | None = None,
    loaded: Any = None,
) -> dict:
    """Train (or resume, or find finished) the prompt of ``cfg`` in ``run_dir``; returns the record
    saved as ``final/prompt_tuning.json``, or, with ``stop_after``, a partial one (no final/)."""
    import torch
    from PIL import Image

    torch.set_num_threads(cfg.num_threads)
    rd = RunDir(Path(run_dir))
    if (rd.final / RECORD_FILE).exists():
        _check_same_run(rd, cfg)
        return json.loads((rd.final / RECORD_FILE).read_text())
    rd.create()
    _check_same_run(rd, cfg)
    atomic_write_text(rd.config, yaml.safe_dump(to_dict(cfg), sort_keys=False))

    loaded = loaded or load_base(cfg)
    vp = VirtualPromptModel(loaded, cfg.data.instruction)
    peft_model = make_peft_model(loaded, cfg)
    weight = prompt_weight(peft_model)
    optimizer = torch.optim.AdamW([weight], lr=cfg.learning_rate, weight_decay=0.0)
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.learning_rate

    start, history = 0, []
    resume = latest_checkpoint(rd.checkpoints)
    if resume is not None:
        from peft.utils import load_peft_weights

        state = torch.load(resume / STATE_FILE, weights_only=True)
        with torch.no_grad():
            weight.copy_(load_peft_weights(str(resume))["prompt_embeddings"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        history = json.loads((resume / "trainer_state.json").read_text())["log_history"]
        rd.trim_metrics(start)
        log.info("resuming prompt tuning from %s (step %d)", resume, start)
    status = rd.status()
    rd.update_status(
        state="RUNNING", verb="prompt-tune", starts=status.get("starts", 0) + 1, resumed_from=start
    )

    ds = subset(
        open_split(cfg.data, cfg.data.train_split),
        cfg.data.num_samples,
        cfg.data.subset_seed,
    )
    rows = _Rows(ds, cfg)
    end = cfg.max_steps if stop_after is None else min(cfg.max_steps, stop_after)
    bar = _bar(end - start, f"prompt-tune {cfg.mode}", progress)
    started = time.perf_counter()
    window: list[float] = []
    step = start
    for step in range(start, end):
        picked = [ds[i] for i in rows.indices(step)]
        images = [Image.open(r["image_path"]).convert("RGB") for r in picked]
        prompts = [vp.prompt_text(problem_text(r["caption"])) for r in picked]
        targets = [
            vp.completion_text(problem_text(r["caption"]), target_text(r, cfg)) for r in picked
        ]
        batch = vp.encode(images, [p + t for p, t in zip(prompts, targets, strict=True)])
        lengths = [vp.completion_length(p, t) for p, t in zip(prompts, targets, strict=True)]
        loss = completion_loss(vp, batch, weight, lengths)
        for group in optimizer.param_groups:
            group["lr"] = cfg.learning_rate * lr_factor(step, cfg)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        window.append(loss.item())
        done = step + 1
        if done % cfg.logging_steps == 0 or done == end:
            record = {
                "step": done,
                "loss": round(sum(window) / len(window), 5),
                "learning_rate": optimizer.param_groups[0]["lr"],
                "seconds": round(time.perf_counter() - started, 2),
            }
            window = []
            history.append(record)
            with open(rd.metrics, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
            bar(record)
        if done % cfg.save_steps == 0 or done == end:
            _write_checkpoint(rd, peft_model, optimizer, done, history)
            rd.update_status(global_step=done)
        bar(None)
    seconds = time.perf_counter() - started
    global_step = max(start, end)
    record = {
        "config": to_dict(cfg),
        "complete": global_step >= cfg.max_steps,
        "global_step": global_step,
        "resumed_from": start,
        "train_seconds": round(seconds, 1),
        "loss_curve": [(r["step"], r["loss"]) for r in read_jsonl(rd.metrics, missing_ok=True)],
    }
    if not record["complete"]:
        rd.update_status(state="STOPPED", global_step=global_step)
        return record
    with atomic_dir(rd.final) as tmp:
        _save_adapter(peft_model, tmp)
        atomic_write_json(tmp / RECORD_FILE, record)
    rd.update_status(
        state="TRAINED", global_step=global_step, train_seconds=record["train_seconds"]
    )
    return record


def completion_loss(vp: VirtualPromptModel, batch: Any, prompt: Any, lengths: list[int]) -> Any:
    """Mean cross-entropy over the completion tokens (the last ``lengths[i]`` of row i: the batch
    is padded on the left), with ``prompt`` in front."""
    import torch

    logits = vp.forward(batch, prompt).logits
    ids = batch["input_ids"]
    width = ids.shape[1]
    cols = torch.arange(width, device=ids.device).unsqueeze(0)
    keep = cols >= width - torch.tensor(lengths, device=ids.device).unsqueeze(1)
    labels = ids.masked_fill(~keep, -100)
    # logits of the text part (after the virtual tokens), shifted: position t predicts token t + 1
    text_logits = logits[:, -width:-1]
    return torch.nn.functional.cross_entropy(
        text_logits.reshape(-1, text_logits.shape[-1]).float(), labels[:, 1:].reshape(-1)
    )


def _bar(total: int, label: str, enabled: bool):
    if not enabled:
        return lambda record: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=label, unit="step", leave=False)

    def advance(record: dict | None) -> None:
        if record is None:
            bar.update(1)
            if bar.n >= total:
                bar.close()
        else:
            bar.set_postfix(loss=record["loss"])

    return advance

"""Pretrain a tiny VLM of one family on the general-skills curriculum (full fine-tuning, TRL SFT).

Why: the embedded default must start, as real VLMs do, from a model that already reads images and
compares text, so that SFT and GRPO on the spatial-claim task have something to build on and
something left to learn (data/curriculum.py says what is taught and what is held back).

The run is an ordinary run of TRL's SFTTrainer on every parameter (vision tower included),
deterministic from its config: the same command gives the same weights on the same machine and
library versions (tests/test_pretrain.py replays a prefix and compares the card's losses). It
checkpoints atomically and resumes like every other run, so a cluster job can requeue. The result
is a model folder: weights, processor, ``pretrain.json``, ``loss_curve.png`` and a card
(``README.md``) with the command, seeds, steps, wall time and the read-out accuracy.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vqa_r1 import claims
from vqa_r1.data.curriculum import (
    DEFAULT_WEIGHTS,
    TASKS,
    CurriculumConfig,
    generate_examples,
    image_payload,
    render,
    render_payload,
)
from vqa_r1.data.datasets import heldout_fingerprints
from vqa_r1.domains import SEED, WARMUP, above
from vqa_r1.errors import UserError
from vqa_r1.io import follow_umask
from vqa_r1.models.adapters import get_adapter
from vqa_r1.models.device import resolve_device
from vqa_r1.models.generation import GenerationSettings, Generator
from vqa_r1.models.loading import LoadedModel
from vqa_r1.models.registry import FAMILIES, MODELS, PRETRAINED, get_spec
from vqa_r1.models.tiny import TinySize, tiny_model_dir
from vqa_r1.recipes import all_data_configs
from vqa_r1.run_dir import RunDir, latest_checkpoint
from vqa_r1.settings import comparable
from vqa_r1.train.trainer_hooks import AtomicCheckpointMixin
from vqa_r1.typed_config import build, option, parse_overrides

log = logging.getLogger(__name__)


@dataclass
class PretrainConfig:
    """Defaults are the shipped models' settings, except the Qwen model's init seed 1 (seed 0 stayed
    at chance on the True/False comparison, docs/experiments/demo.md); each card gives its command."""

    family: str = option("qwen2_5_vl", help="model family (set by --family)")
    seed: int = option(0, help="model init, curriculum and data order", domain=SEED)
    hidden: int = option(128, help="language-model hidden size", minimum=1)
    layers: int = option(4, help="language-model layers", minimum=1)
    vocab: int = option(1024, help="tokenizer vocabulary size", minimum=1)
    examples: int = option(80000, help="curriculum examples generated", minimum=1)
    max_steps: int = option(2500, help="optimizer steps (TrainingArguments)", minimum=1)
    per_device_train_batch_size: int = option(
        32, help="examples per step (TrainingArguments; one process)", minimum=1
    )
    learning_rate: float = option(
        5e-4, help="peak learning rate (TrainingArguments)", domain=above(0)
    )
    warmup_steps: float = option(
        0.05, help="warm-up steps; a float < 1 is a fraction of all steps", domain=WARMUP
    )
    weight_decay: float = option(0.0, help="TrainingArguments", minimum=0)
    lr_scheduler_type: str = option("cosine", help="transformers scheduler name")
    logging_steps: int = option(10, help="loss-curve interval (TrainingArguments)", minimum=1)
    save_steps: int = option(
        500, help="checkpoint interval in steps (TrainingArguments)", minimum=1
    )
    num_threads: int = option(
        1, help="torch CPU threads (the run config's train.num_threads)", minimum=1
    )
    eval_examples: int = option(
        200, help="held-out examples per task for the card's read-out accuracy", minimum=1
    )
    name: str = option(
        "",
        help="the registered pretrained model this run makes (its card's title and folder); "
        "empty: the family's tiny-<family>-pretrained",
    )
    weights: dict[str, float] = option(
        default_factory=dict,
        help="curriculum task weights; {} = the curriculum's own (count, cell and lookup off), e.g. "
        "{layout: 0.15, which: 0.2, verify: 0.25, text_claim: 0.4, count: 0.15, cell: 0.15}",
    )


def config_from_overrides(family: str, overrides: list[str]) -> PretrainConfig:
    if family not in FAMILIES:
        raise UserError(f"--family must be one of {', '.join(FAMILIES)}, not {family!r}")
    cfg = build(PretrainConfig(family=FAMILIES[family]), parse_overrides(overrides))
    cfg.family = FAMILIES[family]
    validate(cfg)
    return cfg


def validate(cfg: PretrainConfig) -> None:
    """Checked before anything runs or is queued; each message names the field."""

    unknown = sorted(set(cfg.weights) - set(TASKS))
    if unknown:
        raise UserError(f"weights: unknown curriculum tasks {unknown}; choose from {list(TASKS)}")
    if cfg.weights and sum(cfg.weights.values()) <= 0:
        raise UserError("weights: at least one task needs a positive weight")
    shipped = [n for n, m in MODELS.items() if m.pretrained and m.family == cfg.family]
    if cfg.name and cfg.name not in shipped:
        raise UserError(
            f"name: {cfg.name!r} is not a registered pretrained {cfg.family} model; "
            f"choose from {', '.join(shipped)}"
        )


def model_name(cfg: PretrainConfig) -> str:
    """The registered pretrained model a run makes: ``name``, or the family's default one."""
    return cfg.name or PRETRAINED[cfg.family]


def curriculum_config(cfg: PretrainConfig) -> Any:

    if cfg.weights:
        return CurriculumConfig(seed=cfg.seed, weights=dict(cfg.weights))
    return CurriculumConfig(seed=cfg.seed)


def build_rows(cfg: PretrainConfig, adapter: Any) -> Any:
    """The curriculum as a TRL prompt/completion dataset whose images are drawn when read.

    Text-only tasks have no image at all (``images: []``; TRL's collator mixes them in a batch).
    The ``scene`` column holds what an image is drawn from (a scene's objects, or a cell task's
    table: curriculum.image_payload).

    Drawing on access (a ``with_transform``; TRL prepares vision datasets on the fly anyway) keeps
    start-up at seconds and nothing on disk: a scene is a few boxes, its image a function of them.
    """
    from datasets import Dataset

    ccfg = curriculum_config(cfg)
    examples = generate_examples(
        cfg.examples, ccfg, adapter.instruction, heldout_fingerprints(all_data_configs())
    )
    rows = {
        "scene": [json.dumps(image_payload(ex)) for ex in examples],
        "prompt": [
            adapter.messages(ex.question, ex.instruction, image=ex.has_image) for ex in examples
        ],
        "completion": [
            [{"role": "assistant", "content": [{"type": "text", "text": ex.target}]}]
            for ex in examples
        ],
    }

    def draw_images(batch: dict) -> dict:
        scenes = [json.loads(s) for s in batch.pop("scene")]
        batch["images"] = [[render_payload(s, ccfg.scene)] if s else [] for s in scenes]
        return batch

    return Dataset.from_dict(rows).with_transform(draw_images)


class _StopAfter:
    """Stop at a step while keeping the full run's schedule: a prefix of the same run."""

    def __init__(self, step: int):
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step >= outer.step:
                    control.should_training_stop = True

        self.step = step
        self.callback = Callback()


def pretrain_settings(cfg: PretrainConfig) -> dict:
    """What makes two pretraining runs the same run: the config (its threads aside,
    settings.comparable)."""
    return comparable(asdict(cfg))


def read_record(path: str | Path) -> dict:
    """A ``pretrain.json`` (or ``work/prefix.json``) with its ``config`` in today's key names.

    The shipped models' records were written before ``steps`` and ``batch_size`` took the
    TrainingArguments names ``max_steps`` and ``per_device_train_batch_size`` (issue 18); their
    files stay as written (a record of the run), and are read under the new names here
    (claims.RENAMED) so that ``build(PretrainConfig, record["config"])`` still loads them."""
    record = json.loads(Path(path).read_text())
    record["config"] = claims.renamed_settings("pretrain", record.get("config"))
    return record


def pretrain(
    cfg: PretrainConfig, out_dir: str | Path, stop_after: int | None = None, quiet: bool = False
) -> dict:
    """Train (or resume) into ``out_dir``; with ``stop_after``, only the first steps (no card).

    ``out_dir`` follows claims.py's rule (refused when it holds anything else; locked while
    written); a finished run with the same settings is returned from its pretrain.json as it is,
    not trained again."""
    with claims.writing(out_dir, "pretrain", pretrain_settings(cfg), "--out") as state:
        record_file = Path(out_dir) / "pretrain.json"
        if state == claims.COMPLETE:
            log.info("%s: a complete pretraining run with these settings: nothing to do", out_dir)
            return {**read_record(record_file), "already_complete": True}
        record = _pretrain(cfg, out_dir, stop_after, quiet)
        if record.get("complete"):
            claims.mark_complete(out_dir, outputs=("pretrain.json",))
        return record


def _pretrain(
    cfg: PretrainConfig, out_dir: str | Path, stop_after: int | None, quiet: bool
) -> dict:
    import torch
    from trl import SFTConfig, SFTTrainer

    from vqa_r1.train.callbacks import StopOnInterrupt
    from vqa_r1.train.runner import fit

    torch.set_num_threads(cfg.num_threads)
    out = Path(out_dir).resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
    adapter = get_adapter(cfg.family)
    init = tiny_model_dir(
        cfg.family, cfg.seed, TinySize(hidden=cfg.hidden, layers=cfg.layers, vocab=cfg.vocab)
    )
    device = resolve_device("auto", "pretrain")  # the Trainer places the model; this decides
    model, processor = adapter.load(init, "float32")
    started = time.perf_counter()
    rows = build_rows(cfg, adapter)
    args = SFTConfig(
        output_dir=str(work / "checkpoints"),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,  # a float < 1 is a fraction of the steps
        lr_scheduler_type=cfg.lr_scheduler_type,
        weight_decay=cfg.weight_decay,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=device == "cpu",
        report_to=[],
        max_length=None,
        remove_unused_columns=False,  # the image is drawn from the scene column on access
        dataloader_num_workers=0,
    )

    class Trainer(AtomicCheckpointMixin, SFTTrainer):
        pass

    trainer = Trainer(model=model, args=args, train_dataset=rows, processing_class=processor)
    if stop_after:
        trainer.add_callback(_StopAfter(stop_after).callback)
    # Ctrl-C (and SIGTERM outside SLURM, where it is the requeue's) checkpoints at the next step
    # boundary and stops, as every training of the suite does (train/callbacks.py)
    interrupt = StopOnInterrupt(sigterm=not os.environ.get("SLURM_JOB_ID"))
    trainer.add_callback(interrupt)
    resume = latest_checkpoint(work / "checkpoints")
    label = f"pretrain {cfg.family}"
    fit(trainer, resume, interrupt, label if quiet else None, label)
    seconds = time.perf_counter() - started
    losses = [
        (r["step"], round(float(r["loss"]), 5)) for r in trainer.state.log_history if "loss" in r
    ]
    record = {
        "config": asdict(cfg),
        "complete": trainer.state.global_step >= cfg.max_steps,
        "global_step": trainer.state.global_step,
        "device": device,
        "train_seconds": round(seconds, 1),
        "loss_curve": losses,
        "versions": _versions(),
    }
    if not record["complete"]:
        (work / "prefix.json").write_text(json.dumps(record, indent=2))
        if interrupt.stopped_by:  # said where a run directory says it (run_dir.py)
            saved = latest_checkpoint(work / "checkpoints")
            where = f"{saved.name} saved" if saved else "no checkpoint saved"
            step = record["global_step"]
            reason = f"{interrupt.stopped_by} at step {step}: {where}; the same command resumes"
            RunDir(out).update_status(state="INTERRUPTED", global_step=step, reason=reason)
            record.update(state="INTERRUPTED", reason=reason)
        return record
    model.save_pretrained(out)
    processor.save_pretrained(out)
    follow_umask(out)  # safetensors writes 0600
    record["readout"] = readout_accuracy(out, cfg)
    (out / "pretrain.json").write_text(json.dumps(record, indent=2) + "\n")
    plot_loss(losses, out / "loss_curve.png")
    (out / "README.md").write_text(model_card(record))
    shutil.rmtree(work, ignore_errors=True)  # checkpoints of a finished run: not needed
    return record


def _versions() -> dict:
    import torch
    import transformers
    import trl

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _answer(text: str) -> str:
    found = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    return _normal(found[-1]) if found else ""


def readout_tasks(cfg: PretrainConfig) -> list[str]:
    """The tasks the run trained on (a positive weight), in TASKS order: the card reports those."""
    weights = curriculum_config(cfg).weights
    return [task for task in TASKS if weights.get(task, 0) > 0]


def readout_accuracy(model_dir: str | Path, cfg: PretrainConfig) -> dict:
    """Per task, on held-out scenes (another curriculum seed): whole output exact, answer exact."""

    adapter = get_adapter(cfg.family)
    device = resolve_device("auto", "pretrain read-out")
    model, processor = adapter.load(model_dir, "float32", device=device)
    model.eval()
    loaded = LoadedModel(
        get_spec(model_name(cfg)), adapter, model, processor, Path(model_dir), device
    )
    ccfg = curriculum_config(cfg)
    ccfg.seed = cfg.seed + 1_000  # held out from the training examples
    result = {}
    for task in readout_tasks(cfg):
        ccfg.weights = {task: 1.0}
        examples = generate_examples(
            cfg.eval_examples, ccfg, adapter.instruction, heldout_fingerprints(all_data_configs())
        )
        # the shipped curriculum's targets fit in 64 tokens; a cell task's five pairs need more
        tokens = 64 if task in DEFAULT_WEIGHTS else 96
        generator = Generator(
            loaded, GenerationSettings(max_new_tokens=tokens, cache="on"), examples[0].instruction
        )
        outputs: list[str] = []
        for start in range(0, len(examples), 50):
            batch = examples[start : start + 50]
            images = None if not examples[0].has_image else [render(e, ccfg.scene) for e in batch]
            outputs += generator.generate(images, [e.question for e in batch])
        n = len(examples)
        result[task] = {
            "n": n,
            "exact": round(
                sum(_normal(o) == _normal(e.target) for o, e in zip(outputs, examples, strict=True))
                / n,
                4,
            ),
            "answer": round(
                sum(_answer(o) == _answer(e.target) for o, e in zip(outputs, examples, strict=True))
                / n,
                4,
            ),
        }
    return result


def plot_loss(losses: list, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([s for s, _ in losses], [v for _, v in losses])
    ax.set(xlabel="step", ylabel="training loss", yscale="log", title="pretraining loss")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def card_command(cfg: PretrainConfig) -> str:

    family = {v: k for k, v in FAMILIES.items()}[cfg.family]
    defaults = asdict(PretrainConfig(family=cfg.family))
    # quoted for the shell: a weights mapping holds spaces (the settings of the shipped cards do not,
    # and read as before)
    sets = [
        f" --set {shlex.quote(f'{k}={json.dumps(v) if isinstance(v, dict) else v}')}"
        for k, v in asdict(cfg).items()
        if defaults[k] != v
    ]
    return (
        f"vqa-r1 pretrain --family {family} --out src/vqa_r1/models/pretrained/"
        f"{model_name(cfg)}{''.join(sets)}"
    )


# what the card says of each task the shipped curriculum leaves off, when a run turns it on
EXTRA_TASK_WORDS = {
    "count": "counting the objects of a scene (1-6, never the counting study's scenes)",
    "cell": "reading one cell of a small table of letter pairs (never a cryptogram decoder)",
    "lookup": "looking each letter of a short message up in a letter table written in the text, "
    "with no image (never a cryptogram decoder)",
}
# the shipped curriculum's tasks, in the card's words (for a run that leaves some of them off)
DEFAULT_TASK_WORDS = {
    "layout": "describing the layout of synthetic scenes (objects left to right and top to bottom)",
    "which": "saying which colour of object is at one end of a scene",
    "verify": 'saying True or False to "the red object is on the left" about an image',
    "text_claim": "checking a spatial claim relating two objects against a layout given in the "
    "text, with no image",
}


def _skills(cfg: PretrainConfig) -> tuple[str, str]:
    """The card's account of what the run trained on: the opening sentence and a closing one. A
    run with all of the shipped curriculum's tasks keeps the shipped cards' words
    (``tests/test_pretrain.py`` compares them) and closes with its extra tasks; one that leaves
    some off lists only what it trained."""
    on = readout_tasks(cfg)
    if not set(DEFAULT_WEIGHTS) <= set(on):
        words = {**DEFAULT_TASK_WORDS, **EXTRA_TASK_WORDS}
        return "; ".join(words[t] for t in on) + ".", ""
    extra = [EXTRA_TASK_WORDS[t] for t in on if t not in DEFAULT_WEIGHTS]
    return (
        "describing the layout of synthetic scenes (objects left to\n"
        "right and top to bottom) and answering questions about it, saying True or False to "
        '"the red object\nis on the left" about an image, and checking a spatial claim relating '
        "two objects against a layout\ngiven in the text, with no image.",
        "" if not extra else "\nAlso trained on: " + "; ".join(extra) + ".",
    )


def model_card(record: dict) -> str:

    cfg = build(PretrainConfig, record["config"])
    name = model_name(cfg)
    skills, also = _skills(cfg)
    rows = "\n".join(
        f"| {task} | {r['n']} | {r['exact']:.3f} | {r['answer']:.3f} |"
        for task, r in record["readout"].items()
    )
    losses = record["loss_curve"]
    if losses:
        (s0, l0), (s1, l1) = losses[0], losses[-1]
        loss_line = (
            f"Step {s0}: {l0:.3f}; step {s1}: {l1:.4f} (all logged steps in `pretrain.json`)."
        )
    else:
        loss_line = "No step was logged (fewer steps than logging_steps)."
    return f"""# {name}

A tiny {cfg.family} model (text hidden {cfg.hidden}, {cfg.layers} layers, vocabulary {cfg.vocab};
random init from seed {cfg.seed}) pretrained on this repository's general-skills curriculum
(`src/vqa_r1/data/curriculum.py`): {skills} It never saw the demo's task (a claim relating two objects of an
image, with no layout in the text), nor a validation or test scene of any shipped recipe (checked
by scene fingerprint). Full fine-tuning of every parameter with TRL's SFTTrainer.{also}

## Reproduce

```bash
{card_command(cfg)}
```

Seeds: model init, curriculum and data order {cfg.seed}. {cfg.max_steps} steps at batch {cfg.per_device_train_batch_size}
over {cfg.examples} examples, lr {cfg.learning_rate} ({cfg.lr_scheduler_type}, warm-up
{cfg.warmup_steps}), {cfg.num_threads} thread. Wall time {record["train_seconds"] / 60:.1f} min on
the reference machine (2 CPU cores). Versions: {", ".join(f"{k} {v}" for k, v in record["versions"].items())}.
`tests/test_pretrain.py` replays the first steps of this command and compares the losses with
`pretrain.json` (same machine kind and versions: equal to 1e-4).

## Training loss

{loss_line}

![loss](loss_curve.png)

## Read-out accuracy on held-out scenes

Greedy decoding, {cfg.eval_examples} examples per task from curriculum seed {cfg.seed + 1000}
(disjoint from training). `exact`: the whole think-and-answer output equals the target; `answer`:
the answer block does.

| task | n | exact | answer |
|---|---|---|---|
{rows}
"""

"""Evaluate a prompt-tuned model (or the base model with no virtual tokens) in one of two modes.

* ``answer``: no generation. The model reads the prompt and the assistant's text up to the label,
  ``<answer>`` (vqa_r1.models.virtual_prompt.AnswerTokens); the prediction is True when the logit
  of the first token of `` True`` exceeds that of `` False`` at that position (the last token of
  ``<answer>``), else False. Only the two labels compete, so every item gets an answer: the
  response recorded is ``<answer> True </answer>`` or ``<answer> False </answer>``, and
  ``format_rate`` is None (no text was generated, so there is no format to rate).
  ``predictions.jsonl`` keeps both logits per item.
* ``reasoning``: greedy generation (vqa_r1.models.virtual_prompt; with no prompt it gives the same
  text as the ordinary evaluation, tests/test_prompt_tuning.py), answers read with
  vqa_r1.answers.extract_answer and scored like ``vqa-r1 evaluate``.

Writes ``scores.json`` (the keys of vqa_r1.eval.evaluate: accuracy, accuracy_ci_95, weighted
P/R/F1, n, correct, per_relation, format_rate, ... plus mode, model, split, prompt),
``generated_responses.json`` (the study's {true_response, predicted_response}) and
``predictions.jsonl``.

``config`` is a vqa_r1.train.prompt_tuning.PromptTuneConfig (read by attribute: eval may not import
train).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from vqa_r1.answers import extract_answer
from vqa_r1.data.datasets import open_split, refuse_several_images
from vqa_r1.data.prompts import problem_text, solution_text
from vqa_r1.errors import UserError
from vqa_r1.eval.evaluate import _progress
from vqa_r1.eval.scoring import score_responses
from vqa_r1.io import atomic_write_json, atomic_write_text
from vqa_r1.models.device import resolve_device
from vqa_r1.models.loading import load_model
from vqa_r1.models.virtual_prompt import VirtualPromptModel

log = logging.getLogger(__name__)


def load_prompt(adapter_dir: str | Path) -> Any:
    """The virtual tokens (num_virtual_tokens x hidden) of a PEFT prompt-tuning adapter folder."""
    from peft.utils import load_peft_weights

    path = Path(adapter_dir)
    config = path / "adapter_config.json"
    if not config.exists():
        raise UserError(f"{path}: no adapter_config.json (a prompt-tuning adapter folder)")
    peft_type = json.loads(config.read_text()).get("peft_type")
    if peft_type != "PROMPT_TUNING":
        raise UserError(f"{path}: a {peft_type} adapter, not a prompt-tuning one")
    return load_peft_weights(str(path))["prompt_embeddings"]


def _load(config: Any) -> Any:
    from vqa_r1.config import ModelConfig

    device = resolve_device(config.model.device)
    loaded = load_model(
        ModelConfig(name=config.model.name, path=config.model.path, dtype="float32"), device=device
    )
    loaded.model.eval()
    return loaded


def answer_predictions(
    vp: VirtualPromptModel, images: list, questions: list[str], prompt: Any
) -> tuple[list[bool], list[list[float]]]:
    """True/False per item from the two label logits at the answer position, and the logits."""
    logits = vp.answer_logits(images, questions, prompt)
    return (logits[:, 0] > logits[:, 1]).tolist(), logits.tolist()


def evaluate_prompt(
    config: Any,
    out_dir: str | Path,
    adapter: str | Path | None = None,
    loaded: Any = None,
    progress: bool = True,
) -> dict:
    """Score ``config.mode`` on ``config.split`` with the prompt of ``adapter`` (None: the base
    model, no virtual tokens); writes the files above into ``out_dir`` and returns the scores."""
    import torch
    from PIL import Image

    torch.set_num_threads(config.train.num_threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompt = load_prompt(adapter) if adapter else None
    loaded = loaded or _load(config)
    vp = VirtualPromptModel(loaded, config.data.instruction)
    split = config.split
    ds = open_split(config.data, split)
    refuse_several_images(ds, "prompt tuning", f"{config.data.dataset} [{split}]")
    if config.eval.limit:
        ds = ds.select(range(min(config.eval.limit, len(ds))))
    questions = [problem_text(c) for c in ds["caption"]]
    paths, labels = ds["image_path"], ds["label"]
    texts: list[str] = []
    logits: list[list[float]] = []
    bar = _progress(len(questions), f"evaluate {config.mode}", progress)
    started = time.perf_counter()
    size = config.eval.batch_size
    for start in range(0, len(questions), size):
        images = [Image.open(p).convert("RGB") for p in paths[start : start + size]]
        chunk = questions[start : start + size]
        if config.mode == "answer":
            said, pair = answer_predictions(vp, images, chunk, prompt)
            texts += [solution_text(int(s)) for s in said]
            logits += pair
        else:
            texts += vp.generate(images, chunk, prompt, config.eval.max_new_tokens)
        bar(len(images))
    seconds = time.perf_counter() - started
    records = [
        {
            "true_response": "True" if int(lbl) == 1 else "False",
            "predicted_response": text,
            "question": caption,
        }
        for lbl, text, caption in zip(labels, texts, ds["caption"], strict=True)
    ]
    relations = ds["relation"] if "relation" in ds.column_names else None
    rule = "robust" if config.mode == "answer" else config.eval.answer_rule
    scores = score_responses(records, rule, relations)
    if config.mode == "answer":
        scores["format_rate"] = None  # nothing generated: see the module docstring
    scores.update(
        mode=config.mode,
        model=config.model.name,
        split=split,
        prompt=str(adapter) if adapter else None,
        num_virtual_tokens=int(prompt.shape[0]) if prompt is not None else 0,
        device=getattr(loaded, "device", None) or str(next(loaded.model.parameters()).device),
        seconds=round(seconds, 2),
        items_per_second=round(len(records) / seconds, 2) if seconds else None,
    )
    lines = []
    for i, caption in enumerate(ds["caption"]):
        item = {
            "caption": caption,
            "relation": relations[i] if relations else None,
            "label": int(labels[i]),
            "response": texts[i],
            "robust": extract_answer(texts[i], "robust"),
        }
        if logits:
            item["logit_true"], item["logit_false"] = logits[i]
        lines.append(json.dumps(item))
    atomic_write_json(out / "generated_responses.json", records)
    atomic_write_text(out / "predictions.jsonl", "\n".join(lines) + "\n")
    atomic_write_json(out / "scores.json", scores)
    return scores


def evaluate_base(config: Any, out_dir: str | Path, progress: bool = True) -> dict:
    """The base model in ``config.mode``: answer = P(True) vs P(False) with no virtual tokens;
    reasoning = ordinary greedy generation (the text of ``vqa-r1 evaluate``)."""
    return evaluate_prompt(config, out_dir, adapter=None, progress=progress)


def evaluate_base_answer_mode(config: Any, out_dir: str | Path, progress: bool = True) -> dict:
    """The base model scored by P(True) vs P(False), whatever ``config.mode`` says."""
    import dataclasses

    return evaluate_base(dataclasses.replace(config, mode="answer"), out_dir, progress)

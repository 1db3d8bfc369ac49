"""Evaluate a model (optionally with a LoRA adapter) on a dataset split.

Writes, into the output folder: ``generated_responses.json`` in the study's format (so the judge and
`vqa-r1 score` read ours and theirs alike), ``predictions.jsonl`` with the caption, relation and both
rules' readings per item, and ``scores.json`` (accuracy, Wilson CI, weighted P/R/F1, n, per-relation
accuracy, format rate, and the generation-cache decision).

Multiple-choice datasets (rows with ``answer_type == "choice"``, e.g. DrivingVQA) ask their own
``problem`` and are scored on option letter sets against the row's ``solution`` (eval/scoring.py);
their records carry ``answer_type`` so that `vqa-r1 score` rescores them the same way.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from vqa_r1.answers import extract_answer
from vqa_r1.config import RunConfig, save_config
from vqa_r1.data.datasets import open_split
from vqa_r1.data.prompts import problem_text
from vqa_r1.eval.scoring import choice_key, score_responses
from vqa_r1.io import atomic_write_json, atomic_write_text
from vqa_r1.models.generation import GenerationSettings, Generator
from vqa_r1.models.loading import LoadedModel, load_model
from vqa_r1.run_dir import resolve_adapter

log = logging.getLogger(__name__)


def evaluate(
    config: RunConfig,
    out_dir: str | Path,
    adapter: str | Path | None = None,
    loaded: Any = None,
    progress: bool = True,
) -> dict:
    import torch

    if config.train.num_threads:
        torch.set_num_threads(config.train.num_threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "config.yaml")
    ec = config.eval
    ds = open_split(config.data, ec.split)
    if ec.limit:
        ds = ds.select(range(min(ec.limit, len(ds))))
    adapter_path = resolve_adapter(adapter)
    loaded = loaded or load_for_evaluation(config, adapter_path)
    loaded.model.eval()
    settings = GenerationSettings(
        max_new_tokens=ec.max_new_tokens, cache=config.model.generation_cache
    )
    gen = Generator(loaded, settings, config.data.instruction)
    from PIL import Image

    columns = ds.column_names
    choice = "answer_type" in columns and len(ds) > 0 and set(ds["answer_type"]) == {"choice"}
    if "problem" in columns:
        questions = list(ds["problem"])
    else:
        questions = [problem_text(c) for c in ds["caption"]]
    labels = ds["label"]
    paths = ds["image_path"]
    outputs: list[str] = []
    started = time.perf_counter()
    bar = _progress(len(questions), f"evaluate {config.model.name}", progress)
    for start in range(0, len(questions), ec.batch_size):
        images = [Image.open(p).convert("RGB") for p in paths[start : start + ec.batch_size]]
        outputs += gen.generate(images, questions[start : start + ec.batch_size])
        bar(len(images))
    seconds = time.perf_counter() - started
    # the study's two fields, plus the claim so the judge needs no side file
    if choice:
        truths = list(ds["solution"])
    else:
        truths = ["True" if int(lbl) == 1 else "False" for lbl in labels]
    records = [
        {"true_response": truth, "predicted_response": text, "question": caption}
        for truth, text, caption in zip(truths, outputs, ds["caption"], strict=True)
    ]
    if choice:
        for record in records:
            record["answer_type"] = "choice"
    relations = ds["relation"] if "relation" in ds.column_names else None
    scores = score_responses(records, ec.answer_rule, relations)
    scores.update(
        generation_cache=gen.cache_decision,
        seconds=round(seconds, 2),
        items_per_second=round(len(records) / seconds, 2) if seconds else None,
        model=config.model.name,
        adapter=str(adapter_path) if adapter_path else None,
        split=ec.split,
    )
    atomic_write_json(out / "generated_responses.json", records)

    lines = [
        json.dumps(
            {
                "caption": c,
                "relation": (relations[i] if relations else None),
                "label": labels[i] if choice else int(labels[i]),
                "response": outputs[i],
                **_readings(outputs[i], choice),
            }
        )
        for i, c in enumerate(ds["caption"])
    ]
    atomic_write_text(out / "predictions.jsonl", "\n".join(lines) + "\n")
    atomic_write_json(out / "scores.json", scores)
    return scores


def _readings(response: str, choice: bool) -> dict:
    """What the scorer read from a response: option letters, or both rules' True/False."""
    if choice:
        return {"choices": choice_key(response)}
    return {
        "robust": extract_answer(response, "robust"),
        "study": extract_answer(response, "study"),
    }


def load_for_evaluation(config: RunConfig, adapter_path: str | Path | None = None) -> LoadedModel:
    """The model of ``config`` for generation, a LoRA adapter folded into float32 weights.

    Unmerged, PEFT adds two low-rank matmuls and a Python detour to every wrapped projection at
    every decoding step: 20-25% of a tiny model's evaluation time on CPU at the demo's image size
    (400 test items, the demo adapters of all three families), 11% at 256 image tokens (bench P1).
    Folding ``W + scale * B @ A`` into float32 weights changes them by rounding only (predictions
    were identical, 400 of 400, for each of four demo adapters). In half precision folding rounds
    the update into bfloat16 weights and can change answers, so there the adapter stays separate.
    """
    import torch

    loaded = load_model(config, adapter_path=adapter_path)
    model = loaded.model
    if adapter_path and hasattr(model, "merge_and_unload"):
        if next(model.parameters()).dtype == torch.float32:
            loaded.model = model.merge_and_unload()
    return loaded


def _progress(total: int, label: str, enabled: bool):
    """A rich progress bar that advances by the batch size; silent when disabled."""
    if not enabled:
        return lambda n: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=label, unit="item", leave=False)

    def advance(n: int) -> None:
        bar.update(n)
        if bar.n >= total:
            bar.close()

    return advance

"""`run_prompt_tuning`: train a prompt (vqa_r1.train.prompt_tuning), then evaluate it
(vqa_r1.eval.prompt_scoring). Here because train and eval are sibling layers that may not import
each other; this layer may call both.

RUN_DIR/config.yaml, metrics.jsonl, status.json, checkpoints/   the training run (resumable)
RUN_DIR/final/                 the PEFT prompt adapter and prompt_tuning.json
RUN_DIR/eval/                  scores.json, generated_responses.json, predictions.jsonl
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from vqa_r1 import claims
from vqa_r1.eval.prompt_scoring import evaluate_base, evaluate_prompt
from vqa_r1.run_dir import RunDir
from vqa_r1.train.prompt_tuning import PromptTuneConfig, load_base, train_prompt
from vqa_r1.typed_config import to_dict

log = logging.getLogger(__name__)


def run_prompt_tuning(
    config: PromptTuneConfig,
    run_dir: str | Path,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict:
    """Train (or resume) and evaluate; returns the scores with the training record under
    ``training``. With ``stop_after`` (a prefix of the run, as if killed), returns the partial
    training record and does not evaluate."""
    rd = RunDir(Path(run_dir))
    with claims.writing(rd.root, "prompt-tune", to_dict(config)) as state:
        scores_file = rd.root / "eval" / "scores.json"
        if state == claims.COMPLETE:  # not trained nor scored again
            log.info("%s: a complete prompt-tuning run with these settings: nothing to do", rd.root)
            return {**json.loads(scores_file.read_text()), "already_complete": True}
        loaded = load_base(config)
        record = train_prompt(
            config, rd.root, progress=progress, stop_after=stop_after, loaded=loaded
        )
        if not record["complete"]:
            return {"training": record}
        scores = evaluate_prompt(
            config, rd.root / "eval", rd.final, loaded=loaded, progress=progress
        )
        rd.update_status(state="COMPLETED", accuracy=scores["accuracy"], split=scores["split"])
        claims.mark_complete(rd.root, outputs=("final", "eval/scores.json"))
        return {**scores, "training": _summary(record)}


def run_base(config: PromptTuneConfig, out_dir: str | Path, progress: bool = True) -> dict:
    """The base model, no virtual tokens, in ``config.mode`` (no training); a complete scoring
    with the same settings is returned as it is."""
    with claims.writing(out_dir, "prompt-tune --base", to_dict(config)) as state:
        scores_file = Path(out_dir) / "scores.json"
        if state == claims.COMPLETE:
            log.info("%s: a complete base scoring with these settings: nothing to do", out_dir)
            return {**json.loads(scores_file.read_text()), "already_complete": True}
        scores = evaluate_base(config, out_dir, progress=progress)
        claims.mark_complete(out_dir, outputs=("scores.json",))
        return scores


def _summary(record: dict[str, Any]) -> dict:
    keys = ("global_step", "resumed_from", "train_seconds", "complete")
    return {k: record[k] for k in keys if k in record}

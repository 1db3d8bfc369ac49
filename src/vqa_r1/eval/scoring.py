"""Score generated responses (ours or the study's files) with the shared answer extractor.

Multiple-choice records (``answer_type: "choice"``, written by evaluate for DrivingVQA) compare
letter sets: an item is right when the response names exactly the reference's options. The set is
written as a canonical string ("A,B") so that the same accuracy, interval and weighted F1 code
scores both kinds and scores.json keeps its keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vqa_r1.answers import check_rule, extract_answer, extract_choices, label_of
from vqa_r1.errors import UserError
from vqa_r1.metrics import classification_scores
from vqa_r1.rewards import format_reward


def read_responses(path: str | Path) -> list[dict]:
    """A generated_responses.json: a list of {"true_response", "predicted_response"}."""
    path = Path(path)
    expected = "a list of objects with 'true_response' and 'predicted_response'"
    if path.is_dir():
        hint = (
            " (the evaluation's own file)" if (path / "generated_responses.json").is_file() else ""
        )
        raise UserError(
            f"{path}: a folder; give a generated_responses.json file, e.g. "
            f"{path / 'generated_responses.json'}{hint}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text (JSON) file; expected {expected}") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, list) or not all(
        isinstance(r, dict) and "true_response" in r and "predicted_response" in r for r in data
    ):
        raise UserError(f"{path}: expected {expected}")
    if not data:
        raise UserError(f"{path}: no responses (an empty list); nothing to score")
    return data


def score_responses(
    records: Sequence[dict], rule: str = "robust", groups: Sequence[str] | None = None
) -> dict:
    check_rule(rule)
    if records and all(r.get("answer_type") == "choice" for r in records):
        return score_choices(records, groups)
    refs = [label_of(r["true_response"], rule) for r in records]
    preds = [extract_answer(r["predicted_response"], rule) for r in records]
    scores = classification_scores(refs, preds, groups)
    scores["answer_rule"] = rule
    completions = [r["predicted_response"] for r in records]
    scores["format_rate"] = sum(format_reward(completions)) / len(records) if records else 0.0
    scores["unparsed"] = sum(1 for p in preds if p not in ("true", "false"))
    return scores


def choice_key(text: object) -> str:
    """A response's or solution's option letters as one comparable string: "A,B"; "" for none."""
    return ",".join(sorted(extract_choices(text)))


def score_choices(records: Sequence[dict], groups: Sequence[str] | None = None) -> dict:
    refs = [choice_key(r["true_response"]) for r in records]
    preds = [choice_key(r["predicted_response"]) for r in records]
    scores = classification_scores(refs, preds, groups)
    # extract_choices reads the final answer with the robust rule whatever eval.answer_rule says
    scores["answer_rule"] = "robust"
    scores["answer_type"] = "choice"
    completions = [r["predicted_response"] for r in records]
    scores["format_rate"] = sum(format_reward(completions)) / len(records)
    scores["unparsed"] = sum(1 for p in preds if not p)
    return scores


def rule_differences(records: Sequence[dict]) -> list[dict]:
    """Items that the robust and study rules score differently, with what each rule read."""
    out = []
    for i, r in enumerate(records):
        robust = extract_answer(r["predicted_response"], "robust")
        study = extract_answer(r["predicted_response"], "study")
        ok_robust = bool(robust) and robust == label_of(r["true_response"], "robust")
        ok_study = bool(study) and study == label_of(r["true_response"], "study")
        if ok_robust != ok_study:
            out.append(
                {
                    "index": i,
                    "robust": robust,
                    "study": study,
                    "robust_correct": ok_robust,
                    "study_correct": ok_study,
                    "label": r["true_response"].strip(),
                }
            )
    return out

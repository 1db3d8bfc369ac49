"""Score generated responses (ours or the study's files) with the shared answer extractor.

Multiple-choice records (``answer_type: "choice"``, written by evaluate for DrivingVQA) compare
letter sets: an item is right when the response names exactly the reference's options. The set is
written as a canonical string ("A,B") so that the same accuracy, interval and weighted F1 code
scores both kinds and scores.json keeps its keys.

Counting records (``answer_type: "number"``, written by evaluate for counting datasets) compare
canonical integers under a counting rule: ``number`` (eval.answer_rule ``robust`` means it for
them) or ``r1v_count``. ``read_responses`` also reads R1-V's published evaluation logs
(Deep-Agent/R1-V, src/eval/logs/counting_results_superclevr_200_*.json, written by
src/eval/test_qwen2vl_counting_superclevr.py): ``{"accuracy": percent, "results": [{"question":
the jsonl row, "ground_truth": int, "model_output": text, "extracted_answer": int or null}]}``;
each result becomes a counting record that keeps the log's own reading and published accuracy,
so `vqa-r1 score --answer-rule r1v_count` shows both beside ours.

Cryptogram records (``answer_type: "cryptogram"``, written by evaluate for cryptogram datasets,
data/cryptogram.py): ``true_response`` is the plain message, ``coded_message`` the code as shown.
They are read with the cryptogram rewards' own rule (rewards/cryptogram.py: one ``<answer>`` block,
stripped, runs of white space as one space, case-sensitive as r1_vlm's): accuracy is the ungated
correctness (the answer equals the message), ``char_accuracy`` the mean ungated decoding score of
the ``<chars>`` block (1 - normalised edit distance to the right characters), ``correct_with_chars``
the gated correctness (the answer right and every character of ``<chars>`` too) and
``chars_nearer_code`` the share of ``<chars>`` blocks nearer the coded message than the message
(the copy the gate refuses). ``per_relation`` holds the same per number of words ("2 words").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vqa_r1.answers import (
    NUMBER_RULES,
    check_rule,
    extract_answer,
    extract_choices,
    label_of,
)
from vqa_r1.errors import UserError
from vqa_r1.metrics import classification_scores, wilson_interval
from vqa_r1.rewards import cryptogram_format_reward, format_reward
from vqa_r1.rewards.cryptogram import block, correct_score, decoding_score, message_of


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
    if is_r1v_log(data):
        return r1v_records(data, path)
    if not isinstance(data, list) or not all(
        isinstance(r, dict) and "true_response" in r and "predicted_response" in r for r in data
    ):
        raise UserError(f"{path}: expected {expected}")
    if not data:
        raise UserError(f"{path}: no responses (an empty list); nothing to score")
    return data


def is_r1v_log(data: object) -> bool:
    """R1-V's counting log: a dict with ``results``, each with ``ground_truth`` and ``model_output``."""
    results = data.get("results") if isinstance(data, dict) else None
    return (
        isinstance(results, list)
        and bool(results)
        and all(isinstance(r, dict) and {"ground_truth", "model_output"} <= set(r) for r in results)
    )


def r1v_records(data: dict, path: Path) -> list[dict]:
    """R1-V's log as counting records (ground truth, output, question, R1-V's own reading)."""
    records = []
    for result in data["results"]:
        question = result.get("question")
        if isinstance(question, dict):
            question = question.get("question")
        records.append(
            {
                "true_response": result["ground_truth"],
                "predicted_response": result["model_output"] or "",
                "question": "" if question is None else str(question),
                "answer_type": "number",
                "published_answer": result.get("extracted_answer"),
            }
        )
    if isinstance(data.get("accuracy"), int | float):
        records[0]["published_accuracy"] = data["accuracy"]
    return records


def number_rule(rule: str) -> str:
    """The counting rule a rule name means for counting records (robust -> number)."""
    return rule if rule in NUMBER_RULES else "number"


def score_numbers(records: Sequence[dict], rule: str, groups: Sequence[str] | None = None) -> dict:
    """Counting records: canonical integers under ``number`` or ``r1v_count``; a log's own reading
    and published accuracy, where it has them, are reported beside ours."""
    rule = number_rule(rule)
    refs = [label_of(r["true_response"], rule) for r in records]
    preds = [extract_answer(r["predicted_response"], rule) for r in records]
    scores = classification_scores(refs, preds, groups)
    scores["answer_rule"] = rule
    scores["answer_type"] = "number"
    completions = [r["predicted_response"] for r in records]
    scores["format_rate"] = sum(format_reward(completions)) / len(records) if records else 0.0
    scores["unparsed"] = sum(1 for p in preds if not p)
    if records and "published_answer" in records[0]:
        published = [r.get("published_answer") for r in records]
        scores["published_disagreements"] = sum(
            1
            for ours, theirs in zip(preds, published, strict=True)
            if ours != ("" if theirs is None else label_of(theirs, rule))
        )
    if records and "published_accuracy" in records[0]:
        scores["published_accuracy"] = records[0]["published_accuracy"] / 100
    return scores


def score_responses(
    records: Sequence[dict], rule: str = "robust", groups: Sequence[str] | None = None
) -> dict:
    check_rule(rule)
    if records and all(r.get("answer_type") == "cryptogram" for r in records):
        return score_cryptograms(records)
    if records and all(r.get("answer_type") == "choice" for r in records):
        return score_choices(records, groups)
    if records and all(r.get("answer_type") == "number" for r in records):
        return score_numbers(records, rule, groups)
    if rule in NUMBER_RULES:
        raise UserError(
            f"answer rule {rule} reads counts; these responses are not counting records "
            '(answer_type "number", or an R1-V counting log)'
        )
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


def word_group(count: int) -> str:
    """A cryptogram's group in ``per_relation``: "1 word", "2 words", ..."""
    return f"{count} word" + ("" if count == 1 else "s")


def cryptogram_readings(record: dict) -> dict:
    """One cryptogram record read as the rewards read it: the message, the answer and ``<chars>``
    blocks, whether the answer is right (ungated, and gated on the characters) and the
    characters' score (ungated; ``nearer_code``: the gate would refuse them)."""
    text = str(record["predicted_response"])
    message = message_of(record["true_response"], None)
    coded = record.get("coded_message")
    chars = decoding_score(text, message, None, gated=False)
    gated = decoding_score(text, message, coded, gated=True) if coded is not None else None
    return {
        "message": message,
        "answer": block(text, "answer"),
        "chars": block(text, "chars"),
        "correct": correct_score(text, message, None, gated=False) == 1.0,
        "correct_with_chars": coded is not None and correct_score(text, message, coded) == 1.0,
        "char_accuracy": chars,
        "nearer_code": gated is not None and chars > 0.0 and gated == 0.0,
    }


def score_cryptograms(records: Sequence[dict]) -> dict:
    """Cryptogram records (see the module docstring): exact answers, character accuracy, and
    both per number of words in ``per_relation``."""
    readings = [cryptogram_readings(r) for r in records]
    refs = [r["message"] or "" for r in readings]
    # the answer as read, or the message itself when the rule says right (the same judgement)
    preds = [r["message"] if r["correct"] else (r["answer"] or "") for r in readings]
    groups = [word_group(len(m.split())) for m in refs]
    scores = classification_scores(refs, preds, groups)
    n = len(records)
    scores["answer_rule"] = "cryptogram"
    scores["answer_type"] = "cryptogram"
    completions = [r["predicted_response"] for r in records]
    scores["format_rate"] = sum(cryptogram_format_reward(completions)) / n if n else 0.0
    scores["unparsed"] = sum(1 for r in readings if r["answer"] is None)
    scores["chars_missing"] = sum(1 for r in readings if r["chars"] is None)
    scores["char_accuracy"] = sum(r["char_accuracy"] for r in readings) / n if n else 0.0
    right = sum(r["correct_with_chars"] for r in readings)
    scores["correct_with_chars"] = right
    scores["accuracy_with_chars"] = right / n if n else 0.0
    scores["accuracy_with_chars_ci_95"] = list(wilson_interval(right, n))
    scores["chars_nearer_code"] = sum(r["nearer_code"] for r in readings) / n if n else 0.0
    for group, part in scores.get("per_relation", {}).items():
        mine = [r for r, g in zip(readings, groups, strict=True) if g == group]
        part["char_accuracy"] = sum(r["char_accuracy"] for r in mine) / len(mine)
    return scores


GROUNDED_IOU = 0.5  # an entity counts as grounded when a written box overlaps it this much


def grounding_scores(records: Sequence[dict]) -> dict | None:
    """How well the boxes a model writes ground the items' entities (DrivingVQA's reasoning with
    boxes): ``box_iou``, the mean over items with ground-truth boxes of the ``iou`` reward's
    score (matched IoUs over max(predicted, true boxes): extra and missing boxes cost), and
    ``grounded``, the share of all ground-truth entities matched by a written box at IoU >=
    GROUNDED_IOU; with the items counted. Why a box failed, in two parts: ``named``, the share
    of written boxes whose name is one of the item's entities (the reward matches a box to an
    entity only when the names agree), and ``placed_when_named``, the share of those at IoU >=
    GROUNDED_IOU with that entity's box. None when no record carries ``gt_boxes``."""
    from vqa_r1.rewards.boxes import _pred_name, _words, box_matches, iou, parse_boxes

    items = entities = grounded = 0
    total = 0.0
    predicted = 0
    named = placed = 0
    for record in records:
        if record.get("gt_boxes") is None:
            continue
        matched, made, truth = box_matches(
            str(record["predicted_response"]), record["gt_boxes"], record.get("gt_box_labels")
        )
        if not truth:
            continue
        items += 1
        entities += truth
        predicted += made
        total += sum(matched) / max(made, truth)
        grounded += sum(value >= GROUNDED_IOU for value in matched)
        labels = record.get("gt_box_labels") or []
        by_name = {_words(n): b for n, b in zip(labels, record["gt_boxes"], strict=False) if n}
        for box, name in parse_boxes(str(record["predicted_response"])):
            words = _pred_name(" ".join(name))
            truth_box = next((b for n, b in by_name.items() if words[: len(n)] == n), None)
            if truth_box is not None:
                named += 1
                placed += box is not None and iou(box, truth_box) >= GROUNDED_IOU
    if not items:
        return None
    return {
        "items": items,
        "entities": entities,
        "boxes_written": predicted,
        "box_iou": total / items,
        "grounded": grounded / entities,
        "grounded_at": GROUNDED_IOU,
        "named": named / predicted if predicted else None,
        "placed_when_named": placed / named if named else None,
    }


def rule_differences(records: Sequence[dict]) -> list[dict]:
    """Items that the robust and study rules score differently, with what each rule read
    (for counting records: the ``number`` and ``r1v_count`` rules, reported under those keys)."""
    if records and all(r.get("answer_type") == "cryptogram" for r in records):
        return []  # one rule: the cryptogram rewards' (score_cryptograms)
    robust_rule, study_rule = "robust", "study"
    if records and all(r.get("answer_type") == "number" for r in records):
        robust_rule, study_rule = NUMBER_RULES
    out = []
    for i, r in enumerate(records):
        robust = extract_answer(r["predicted_response"], robust_rule)
        study = extract_answer(r["predicted_response"], study_rule)
        ok_robust = bool(robust) and robust == label_of(r["true_response"], robust_rule)
        ok_study = bool(study) and study == label_of(r["true_response"], study_rule)
        if ok_robust != ok_study:
            out.append(
                {
                    "index": i,
                    "robust": robust,
                    "study": study,
                    "robust_correct": ok_robust,
                    "study_correct": ok_study,
                    "label": str(r["true_response"]).strip(),
                    "rules": [robust_rule, study_rule],
                }
            )
    return out

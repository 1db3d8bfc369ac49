"""Reading model outputs and splitting each response into reasoning and final answer.

Two shapes are read: the study's ``generated_responses.json`` (``true_response`` and
``predicted_response`` only, so the claim must come from elsewhere) and records that carry their own
claim (our evaluation outputs, or anything with a ``question``/``caption`` field), as a JSON list or
JSONL. The split reproduces the study's exactly for its plain-text responses, because the judge's
verdicts are only comparable when it saw the same reasoning text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.answers import label_of
from vqa_r1.data.prompts import numbered_placeholders
from vqa_r1.errors import UserError
from vqa_r1.io import read_jsonl

_ANSWER_MARK = "\nAnswer:"
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
_THINK_TAG = re.compile(r"</?\s*think\s*>", re.IGNORECASE)

# Field names accepted for each role, first match wins: the study's names come first.
RESPONSE_FIELDS = ("predicted_response", "prediction", "response", "completion", "output")
REFERENCE_FIELDS = ("true_response", "true_label", "label", "reference", "solution", "answer")
QUESTION_FIELDS = ("question", "claim", "caption", "statement", "problem", "prompt")


@dataclass(frozen=True)
class JudgeItem:
    """One (model, index) response ready to be judged; ``key_fields`` feed the cache key."""

    index: int
    model: str
    question: str
    true_label: str
    response: str
    reasoning: str
    final_ans: str
    image_url: str | None = None

    def key_fields(self) -> dict[str, str]:
        return {"claim": self.question, "reasoning": self.reasoning, "answer": self.final_ans}


def split_reasoning(text: object) -> tuple[str, str]:
    """Split a response into (reasoning, final answer) the way the study did.

    The study cut at the last ``"\\nAnswer:"``, else took the last line as the answer; reasoning
    text is kept byte for byte (leading newlines included) so our prompts match the study's. Tagged
    responses (``<think>...</think><answer>...</answer>``) are split at the last answer tag.
    """
    text = "" if text is None else str(text)
    tags = list(_ANSWER_TAG.finditer(text))
    if tags:
        last = tags[-1]
        reasoning = _THINK_TAG.sub("", text[: last.start()]).strip()
        return reasoning, last.group(1).strip()
    pos = text.rfind(_ANSWER_MARK)
    if pos >= 0:
        return text[:pos], text[pos + len(_ANSWER_MARK) :].strip()
    if text.startswith("Answer:"):
        return "", text[len("Answer:") :].strip()
    lines = text.strip().split("\n")
    return "\n".join(lines[:-1]), lines[-1].strip()


def display_label(reference: object) -> str:
    """The study wrote labels as "True"/"False"; other labels are kept as stripped text."""
    norm = label_of(reference, "robust")
    if norm in ("true", "false"):
        return norm.capitalize()
    return "" if reference is None else str(reference).strip()


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """A JSON list or JSONL file of objects; errors name the file (and the line of a JSONL file)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if not stripped:
        raise UserError(f"{path}: file is empty")
    if not stripped.startswith("["):
        return read_jsonl(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"{path}: expected a JSON list of objects (or JSONL)")
    return data


def _first(record: dict[str, Any], fields: Sequence[str]) -> tuple[str | None, Any]:
    for name in fields:
        if name in record and record[name] is not None:
            return name, record[name]
    return None, None


def load_questions(path: str | Path) -> dict[int, str]:
    """Claims by index from a checks file, a dataset export, or a plain list of strings.

    The study's responses files carry no claim; its checks files do (``index``, ``question``), and
    so does a dataset exported as JSON/JSONL (``caption``, by position).
    """
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8").lstrip().startswith("["):
        raw = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(raw, list) and all(isinstance(q, str) for q in raw):
            return dict(enumerate(raw))
    questions: dict[int, str] = {}
    for position, record in enumerate(load_records(path)):
        name, value = _first(record, QUESTION_FIELDS)
        if name is None:
            raise UserError(
                f"{path}: record {position} has no claim field (one of {', '.join(QUESTION_FIELDS)})"
            )
        index = record.get("index", position)
        questions.setdefault(int(index), str(value))
    return questions


def load_items(
    path: str | Path,
    model: str,
    questions: dict[int, str] | None = None,
) -> list[JudgeItem]:
    """Items of one responses file; the claim comes from the record, else from ``questions``."""
    records = load_records(path)
    items: list[JudgeItem] = []
    missing: list[int] = []
    for position, record in enumerate(records):
        rname, response = _first(record, RESPONSE_FIELDS)
        if rname is None:
            raise UserError(
                f"{path}: record {position} has no response field "
                f"(one of {', '.join(RESPONSE_FIELDS)})"
            )
        _, reference = _first(record, REFERENCE_FIELDS)
        index = int(record.get("index", position))
        _, question = _first(record, QUESTION_FIELDS)
        if question is None and questions is not None:
            question = questions.get(index)
        if question is None:
            missing.append(index)
            question = ""
        reasoning, final = split_reasoning(response)
        items.append(
            JudgeItem(
                index=index,
                model=model,
                question=numbered_placeholders(str(question)),
                true_label=display_label(reference),
                response=str(response),
                reasoning=reasoning,
                final_ans=final,
                image_url=record.get("image_url") or record.get("image_path"),
            )
        )
    if missing:
        raise UserError(
            f"{path}: {len(missing)} record(s) carry no claim (first indices {missing[:5]}); "
            f"pass --questions FILE (a checks file, a dataset export with 'caption', or a list of "
            f"strings) so the judge sees the claim"
        )
    return items


def parse_named_files(values: Sequence[str], option: str) -> list[tuple[str, Path]]:
    """``NAME=FILE`` pairs, checked here so a typo fails before any request is made."""
    pairs: list[tuple[str, Path]] = []
    seen: set[str] = set()
    for value in values:
        name, sep, file = value.partition("=")
        if not sep or not name or not file:
            raise UserError(
                f"{option} {value!r}: expected NAME=FILE, e.g. {option} base=responses.json"
            )
        if name in seen:
            raise UserError(f"{option}: model name {name!r} given twice")
        seen.add(name)
        if not Path(file).is_file():
            raise UserError(f"{option} {name}={file}: file not found")
        pairs.append((name, Path(file)))
    return pairs

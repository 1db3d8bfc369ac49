"""DrivingVQA as released: ``train.json`` / ``test.json`` plus the exam images.

Fields per the RIV-CoT code released with the paper (jason-ferraro/RIV-CoT,
llava/preprocessing/convert_annotations_to_llava.py, extract_image_crops.py, riv_cot_utils.py):
each file maps a sample id to a dict with ``img_filename``, ``img_size`` ([width, height]),
``questions`` (a string, or a list when ``has_multiple_questions``), ``possible_answers`` (letter ->
option text), ``true_answers`` (letters), ``explanation``, ``interleaved_explanation`` (the
explanation with ``entity [x, y, w, h]`` after each grounded entity, entities sometimes in
``**bold**``), ``relevant_entities`` (a list of one-key dicts, name -> COCO ``[x, y, w, h]`` box in
pixels) and ``exam_type``. The Hugging Face release (EPFL-DrivingVQA/DrivingVQA) holds
``train.json`` and ``test.json`` at its root; the RIV-CoT scripts read ``splits/<split>.json`` and
``images/original/``. Both layouts are accepted; images are looked up in ``images/``, then
``images/original/``. No question-category field was found, so ``relation`` is "drivingvqa".

Rows: boxes become ``[x1, y1, x2, y2]`` pixel corners of the original image (the absolute
convention of Qwen2.5-VL grounding), written before the entity name inside the reasoning.

Items with two questions (``has_multiple_questions``) are kept as the authors keep them
(convert_annotations_to_llava.py ``get_prompt_components`` / ``get_possible_answers``): one
prompt holding both questions, options A and B under the first and the others under the second,
and one set of true letters; metrics.py scores that set by exact match, as our choice scoring
does. ``data.drivingvqa_multiple_questions=drop`` drops them instead (counted and printed).
Images above ``data.drivingvqa_max_pixels`` (default 1280*1280: a larger exam photo costs
thousands of image tokens) are dropped; each drop is printed and listed in the conversion report.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vqa_r1.data.formats.common import first_existing, notice, read_json

NAME = "drivingvqa"
VERSION = 1
URL = "https://huggingface.co/datasets/EPFL-DrivingVQA/DrivingVQA"
NEEDS = "train.json / test.json (samples with img_filename, questions, true_answers, ...) + images"
LAYOUT = "<folder>/{train,test}.json (or <folder>/splits/) and <folder>/images/<img_filename>"
# the release has train and test; a validation.json (the synthetic stand-in's) is read too
SPLITS = {"train": "train", "validation": "validation", "test": "test"}
DEFAULT_MAX_PIXELS = 1280 * 1280
MULTIPLE_QUESTIONS = ("keep", "drop")
OPTIONS = {"max_pixels": DEFAULT_MAX_PIXELS, "multiple_questions": "keep"}
# RIV-CoT get_possible_answers: options A and B belong to the first of two questions
FIRST_QUESTION_LETTERS = ("A", "B")
RELATION = "drivingvqa"
_NUM = r"-?\d+(?:\.\d+)?"
_BOX = re.compile(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\]")


def split_files(folder: Path) -> dict[str, Path]:
    found = {}
    for name, split in SPLITS.items():
        path = first_existing([folder / f"{name}.json", folder / "splits" / f"{name}.json"])
        if path is not None:
            found[split] = path
    return found


def detect(folder: Path) -> bool:
    files = split_files(folder)
    if not files:
        return False
    data = read_json(next(iter(files.values())))
    first = next(iter(_samples(data)), None)
    return isinstance(first, dict) and "true_answers" in first and "img_filename" in first


def sources(folder: Path) -> list[Path]:
    return list(split_files(folder).values())


def _samples(data: Any) -> list:
    return list(data.values()) if isinstance(data, dict) else list(data)


def _items(data: Any) -> list[tuple[str, dict]]:
    return [(str(k), v) for k, v in (data.items() if isinstance(data, dict) else enumerate(data))]


def xyxy(box: list[float]) -> list[float]:
    x, y, w, h = (float(v) for v in box)
    return [x, y, x + w, y + h]


def box_text(box: list[float]) -> str:
    return "[" + ", ".join(f"{v:g}" if v != int(v) else str(int(v)) for v in box) + "]"


def entities(sample: dict) -> tuple[list[list[float]], list[str]]:
    boxes, labels = [], []
    for entity in sample.get("relevant_entities") or []:
        for name, box in entity.items():
            boxes.append(xyxy(box))
            labels.append(name)
    return boxes, labels


def reasoning(sample: dict) -> str:
    """The explanation with each grounded entity written as ``[x1, y1, x2, y2] entity``."""
    text = sample.get("interleaved_explanation") or sample.get("explanation") or ""
    boxes, labels = entities(sample)
    grounded = False
    for name in sorted(set(labels), key=len, reverse=True):
        pattern = re.compile(rf"(?:\*\*)?{re.escape(name)}(?:\*\*)?\s*{_BOX.pattern}")

        def swap(m: re.Match, name: str = name) -> str:
            return f"{box_text(xyxy([float(g) for g in m.groups()]))} {name}"

        text, n = pattern.subn(swap, text)
        grounded = grounded or n > 0
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text).strip()
    if boxes and not grounded:  # a plain explanation: name the grounded entities first
        listed = "; ".join(f"{box_text(b)} {n}" for b, n in zip(boxes, labels, strict=True))
        text = f"Relevant: {listed}. {text}".strip()
    return text


def _options(items: list[tuple[str, Any]]) -> str:
    return "\n".join(f"({k}) {v}" for k, v in items)


def problem(sample: dict) -> str:
    """The question(s) and options; two questions each with their own options (A, B: the first)."""
    questions = _questions(sample)
    options = sorted(sample["possible_answers"].items())
    context = ""
    if sample.get("exam_type"):
        context = f"Unless stated otherwise, you are driving a {sample['exam_type']} in France.\n"
    if len(questions) == 1:
        return (
            f"{context}{questions[0].strip()}\n{_options(options)}\nSeveral options may be correct."
        )
    first = [o for o in options if o[0] in FIRST_QUESTION_LETTERS]
    second = [o for o in options if o[0] not in FIRST_QUESTION_LETTERS]
    return (
        f"{context}{questions[0].strip()}\n{_options(first)}\n{questions[1].strip()}\n"
        f"{_options(second)}\nSeveral options may be correct; choose at least one per question."
    )


def _questions(sample: dict) -> list[str]:
    q = sample.get("questions")
    if q is None:
        return []
    return [str(x) for x in q] if isinstance(q, list) else [str(q)]


def _pixels(sample: dict, path: Path) -> int | None:
    size = sample.get("img_size")
    if size and len(size) == 2:
        return int(size[0]) * int(size[1])
    try:
        from PIL import Image

        with Image.open(path) as img:  # reads the header only
            return img.width * img.height
    except OSError:
        return None  # a missing image is check_image_paths' error, with the others


def convert(sample: dict, image: Path) -> dict:
    boxes, labels = entities(sample)
    letters = ", ".join(sorted(str(a).strip() for a in sample["true_answers"]))
    text = problem(sample)
    return {
        "image_path": str(image),
        "problem": text,
        "caption": text,
        "solution": f"<answer> {letters} </answer>",
        "reasoning": reasoning(sample),
        "gt_boxes": boxes,
        "gt_box_labels": labels,
        "answer_type": "choice",
        "label": letters,
        "relation": RELATION,
    }


def image_path(folder: Path, name: str) -> Path:
    base = folder / "images"
    return first_existing([base / name, base / "original" / name], base / name)


def images_hint(folder: Path, report: dict) -> str:
    return (
        "DrivingVQA's exam images come with its Hugging Face release "
        f"(EPFL-DrivingVQA/DrivingVQA): put them in {folder / 'images'} (or images/original/)"
    )


def _drop_reason(
    sample: dict, image: Path, max_pixels: int, multiple: str
) -> tuple[str, str] | None:
    """(the report's counter, the printed reason) for an item not kept; None to keep it."""
    questions = _questions(sample)
    if len(questions) not in (1, 2):
        return "unreadable_questions", f"{len(questions)} questions (1 or 2 are read)"
    if len(questions) == 2 and multiple == "drop":
        return "multiple_questions", "two questions (data.drivingvqa_multiple_questions=drop)"
    pixels = _pixels(sample, image)
    if pixels is not None and pixels > max_pixels:
        return "too_many_pixels", f"{pixels} pixels > data.drivingvqa_max_pixels={max_pixels}"
    return None


def read(folder: Path, options: dict) -> tuple[dict[str, list[dict]], dict]:
    max_pixels = int(options.get("max_pixels") or DEFAULT_MAX_PIXELS)
    multiple = options.get("multiple_questions", "keep")
    splits: dict[str, list[dict]] = {}
    report: dict[str, Any] = {
        "max_pixels": max_pixels,
        "multiple_questions": multiple,
        "kept": {},
        "two_questions_kept": {},
        "dropped": {},
        "dropped_items": [],
    }
    for split, path in split_files(folder).items():
        rows = []
        dropped = {"multiple_questions": 0, "too_many_pixels": 0, "unreadable_questions": 0}
        two = 0
        for item_id, sample in _items(read_json(path)):
            image = image_path(folder, sample["img_filename"])
            drop = _drop_reason(sample, image, max_pixels, multiple)
            if drop is not None:
                kind, reason = drop
                dropped[kind] += 1
                report["dropped_items"].append(
                    {"split": split, "id": item_id, "image": sample["img_filename"], "why": reason}
                )
                notice(
                    f"drivingvqa: dropped {split} item {item_id} ({sample['img_filename']}): {reason}"
                )
                continue
            two += len(_questions(sample)) == 2
            rows.append(convert(sample, image))
        splits[split] = rows
        report["kept"][split] = len(rows)
        report["two_questions_kept"][split] = two
        report["dropped"][split] = dropped
    return splits, report


def features() -> Any:
    from datasets import Features, Sequence, Value

    text = Value("string")
    return Features(
        {
            "image_path": text,
            "problem": text,
            "caption": text,
            "solution": text,
            "reasoning": text,
            "gt_boxes": Sequence(Sequence(Value("float64"))),
            "gt_box_labels": Sequence(text),
            "answer_type": text,
            "label": text,
            "relation": text,
        }
    )

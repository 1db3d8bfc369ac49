"""A stand-in for DrivingVQA in its release format, drawn from synthetic scenes.

Why: the drivingvqa experiment must run on a laptop and in CI, where the real exam photos cannot
be downloaded. The stand-in has what the real set's training exercises: a multiple-choice question
with one or more correct letters, and an explanation that names each relevant object followed by
its box (``name [x, y, w, h]``, COCO boxes, as the release's ``interleaved_explanation``), so SFT
learns to ground before answering and GRPO's IoU reward has boxes to match. The files are written
in the release layout (``train.json``, ``test.json``, ``images/``), so they go through the same
converter (data/formats/drivingvqa.py) as the real set.

Question: "Which objects are {relation} the {anchor}?"; options: the other objects; correct: those
for which the relation holds by a clear margin (scenes with an object near the margin are drawn
again, so no answer is ambiguous).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from vqa_r1.data.synthetic import RELATIONS, SceneConfig, _place_objects, draw
from vqa_r1.io import atomic_dir

LETTERS = "ABCDE"


def _coco(box: tuple[int, int, int, int]) -> list[int]:
    x0, y0, x1, y1 = box
    return [x0, y0, x1 - x0, y1 - y0]


def _sample(rng: random.Random, cfg: SceneConfig, index: int) -> tuple[dict, object]:
    margin = cfg.margin * cfg.image_size
    while True:
        objects = _place_objects(rng, cfg)
        if len(objects) < 3:
            continue
        anchor = rng.choice(objects)
        relation = rng.choice(list(RELATIONS))
        _, axis, sign = RELATIONS[relation]
        others = [o for o in objects if o is not anchor]
        deltas = [(o.center[axis] - anchor.center[axis]) * sign for o in others]
        if any(abs(d) <= margin for d in deltas) or not any(d > margin for d in deltas):
            continue  # an option near the margin is ambiguous; no correct option is no question
        rng.shuffle(others)
        deltas = [(o.center[axis] - anchor.center[axis]) * sign for o in others]
        options = {LETTERS[i]: f"The {o.name}" for i, o in enumerate(others)}
        true = [LETTERS[i] for i, d in enumerate(deltas) if d > margin]
        clauses = [
            f"The {o.name} {_coco(o.box)} is {'' if d > margin else 'not '}{relation} "
            f"the {anchor.name} {_coco(anchor.box)}."
            for o, d in zip(others, deltas, strict=True)
        ]
        scene_objects = [*others, anchor]
        sample = {
            "img_filename": f"{index:06d}.png",
            "img_size": [cfg.image_size, cfg.image_size],
            "questions": f"Which objects are {relation} the {anchor.name}?",
            "possible_answers": options,
            "true_answers": true,
            "explanation": " ".join(
                c.replace(f" {_coco(o.box)}", "") for c, o in zip(clauses, others, strict=True)
            ),
            "interleaved_explanation": " ".join(clauses),
            "relevant_entities": [{o.name: _coco(o.box)} for o in scene_objects],
            "has_multiple_questions": False,
            "exam_type": None,
        }
        from vqa_r1.data.synthetic import Scene

        image = draw(Scene(scene_objects, "", 0, "", "", "", cfg.image_size), cfg)
        return sample, image


def write_standin(
    out: str | Path,
    train: int = 1000,
    test: int = 200,
    seed: int = 0,
    cfg: SceneConfig | None = None,
) -> Path:
    """Write the stand-in release folder (deterministic from ``seed``); returns ``out``."""
    cfg = cfg or SceneConfig(
        min_objects=3, max_objects=4, background_style="ramp", distinct_colors=True
    )
    out = Path(out)
    with atomic_dir(out, keep_existing=True) as tmp:  # a cache: the same whoever writes it
        (tmp / "images").mkdir(parents=True)
        index = 0
        for split_index, (split, n) in enumerate({"train": train, "test": test}.items()):
            rng = random.Random(seed * 1000 + split_index + 5_000_000)
            samples = {}
            for _ in range(n):
                sample, image = _sample(rng, cfg, index)
                image.save(tmp / "images" / sample["img_filename"], compress_level=1)
                samples[str(index)] = sample
                index += 1
            (tmp / f"{split}.json").write_text(json.dumps(samples, indent=1))
        (tmp / "README.md").write_text(
            "A DrivingVQA-format stand-in drawn from synthetic scenes "
            f"(vqa_r1.data.drivingvqa_standin, seed {seed}); not the real dataset.\n"
        )
    return out

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

Layouts: ``free`` places objects anywhere (boxes of any size and position: a tiny model's vision
tower of a few patches cannot write them to IoU 0.5); ``grid`` puts three objects in a 3 x 3 grid, one
per row and column, each filling its cell but a fixed inset, so each box is one of nine and
follows from the objects' order left to right and top to bottom, which the tiny models read (the
task the drivingvqa experiment's grounding reading needs on CPU).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from vqa_r1.data.synthetic import (
    COLORS,
    RELATIONS,
    SHAPES,
    SceneConfig,
    SceneObject,
    _place_objects,
    draw,
)
from vqa_r1.io import atomic_dir

LETTERS = "ABCDE"
GRID = 3  # cells per side of the grid layout
LAYOUTS = ("free", "grid")


def _grid_objects(rng: random.Random, cfg: SceneConfig) -> list[SceneObject]:
    """GRID objects of distinct colours in a GRID x GRID grid, one in each row and each column,
    each filling its cell less an inset of an eighth of the cell (at 112 px: 37-px cells, 29-px
    boxes). One per row and column makes an object's cell its rank from the left and from the
    top: the layout the tiny models were pretrained to read (colours left to right, top to
    bottom), so writing its box is reading that layout, learnable by LoRA in minutes. (Nine
    cells with objects anywhere among them were not: 600 SFT steps wrote the top-left box for
    two boxes in three, box IoU 0.06 on the validation split.)"""
    cell = cfg.image_size // GRID
    inset = max(1, cell // 8)
    columns = rng.sample(range(GRID), GRID)
    objects = []
    for colour, row, col in zip(rng.sample(list(COLORS), GRID), range(GRID), columns, strict=True):
        x0, y0 = col * cell + inset, row * cell + inset
        shape = rng.choice(SHAPES)
        box = (x0, y0, x0 + cell - 2 * inset, y0 + cell - 2 * inset)
        objects.append(SceneObject(f"{colour} {shape}", colour, shape, box))
    rng.shuffle(objects)
    return objects


def _coco(box: tuple[int, int, int, int]) -> list[int]:
    x0, y0, x1, y1 = box
    return [x0, y0, x1 - x0, y1 - y0]


def _sample(
    rng: random.Random, cfg: SceneConfig, index: int, layout: str = "free"
) -> tuple[dict, object]:
    margin = cfg.margin * cfg.image_size
    while True:
        objects = _grid_objects(rng, cfg) if layout == "grid" else _place_objects(rng, cfg)
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
    validation: int = 0,
    seed: int = 0,
    cfg: SceneConfig | None = None,
    layout: str = "free",
) -> Path:
    """Write the stand-in release folder (deterministic from ``seed``); returns ``out``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    cfg = cfg or SceneConfig(
        min_objects=3, max_objects=4, background_style="ramp", distinct_colors=True
    )
    out = Path(out)
    with atomic_dir(out, keep_existing=True) as tmp:  # a cache: the same whoever writes it
        (tmp / "images").mkdir(parents=True)
        index = 0
        # validation last: the train and test scenes of a folder without one stay as they were
        splits = {"train": train, "test": test, "validation": validation}
        for split_index, (split, n) in enumerate(splits.items()):
            if split == "validation" and not n:
                continue
            rng = random.Random(seed * 1000 + split_index + 5_000_000)
            samples = {}
            for _ in range(n):
                sample, image = _sample(rng, cfg, index, layout)
                image.save(tmp / "images" / sample["img_filename"], compress_level=1)
                samples[str(index)] = sample
                index += 1
            (tmp / f"{split}.json").write_text(json.dumps(samples, indent=1))
        (tmp / "README.md").write_text(
            "A DrivingVQA-format stand-in drawn from synthetic scenes "
            f"(vqa_r1.data.drivingvqa_standin, seed {seed}, layout {layout}); not the real "
            "dataset.\n"
        )
    return out

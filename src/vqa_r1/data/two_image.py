"""A question that needs two images: is the object at one end of the first image the same colour
as the object at that end of the second?

Why this task: a multi-image pipeline is only tested when no single image holds the answer. Each
image is a scene of the demo's kind (two objects of different colours, clearly ordered on both
axes, the position-coding background), and the answer compares one reading of each: the colour
at the named end (left, right, top, bottom) of the first image against that of the second. Half
the pairs share that colour (True), half do not; each image alone gives chance. The reasoning
target reads each image's layout along the question's axis, first image first, in the format the
tiny models were pretrained on (data/curriculum.py: "left to right: red, blue."), then the two
end colours:

    left to right: red, blue. left to right: green, red. left: red, green.

Only words of the pretraining targets: the tiny models' output layer learned nothing else, and a
label such as "first:" (v1 of this data) kept a probability of 0.03 per token after 200 SFT steps
(greedy decoding still wrote it, but a sampled GRPO completion turned it into byte noise in most
samples, which then misread the layout after it; measured on the validation pairs).

The folder is written in the multi-image JSONL format (data/formats/multi_image.py): the rows name
their images with ``<image>`` placeholders, so the generator exercises the same loader as a
user's JSONL. Deterministic from the seed; written atomically (a cache any job may write).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from vqa_r1.data.curriculum import END_OF, ENDS, layout_of
from vqa_r1.data.synthetic import Scene, SceneConfig, _place_objects, draw
from vqa_r1.io import atomic_dir

AXIS_WORDS = {0: "left to right", 1: "top to bottom"}
QUESTION = (
    "First image: <image> Second image: <image> Is the object at the {end} of the first image "
    "the same colour as the object at the {end} of the second image?"
)


def scene_config() -> SceneConfig:
    """The demo's scenes: two objects of distinct colours on the position-coding background."""
    return SceneConfig(min_objects=2, max_objects=2, background_style="ramp", distinct_colors=True)


def _ordered_scene(rng: random.Random, cfg: SceneConfig, gap: float) -> Scene:
    """Two objects apart by more than ``gap`` px on both axes (so either end is unambiguous)."""
    while True:
        objects = _place_objects(rng, cfg)
        if len(objects) != 2:
            continue
        (ax, ay), (bx, by) = objects[0].center, objects[1].center
        if abs(ax - bx) > gap and abs(ay - by) > gap:
            return Scene(objects, "", 0, "", "", "", cfg.image_size)


def _end_colour(scene: Scene, end: str) -> str:
    by_x, by_y = layout_of((o.name, o.box) for o in scene.objects)
    axis, index = ENDS[end]
    return (by_x if axis == 0 else by_y)[index]


def make_pair(rng: random.Random, cfg: SceneConfig, gap: float) -> tuple[Scene, Scene, str, bool]:
    """Two scenes, the end asked about and the label (True for half the pairs, drawn first)."""
    label = rng.random() < 0.5
    end = rng.choice(sorted(END_OF.values()))
    first = _ordered_scene(rng, cfg, gap)
    wanted = _end_colour(first, end)
    while True:
        second = _ordered_scene(rng, cfg, gap)
        if (_end_colour(second, end) == wanted) == label:
            return first, second, end, label


def reasoning(first: Scene, second: Scene, end: str) -> str:
    axis = ENDS[end][0]
    parts = []
    for scene in (first, second):
        by_x, by_y = layout_of((o.name, o.box) for o in scene.objects)
        parts.append(f"{AXIS_WORDS[axis]}: {', '.join(by_x if axis == 0 else by_y)}.")
    colours = f"{end}: {_end_colour(first, end)}, {_end_colour(second, end)}."
    return f"{' '.join(parts)} {colours}"


def write_two_image(
    out: str | Path,
    train: int = 2000,
    validation: int = 200,
    test: int = 400,
    seed: int = 0,
    cfg: SceneConfig | None = None,
    carry: tuple[str, ...] = (),
    keep_existing: bool = True,
) -> Path:
    """Write the folder (``<split>.jsonl`` + ``images/``); returns ``out``. ``carry``: a claimed
    folder's marker and lock (claims.py), moved into the new folder."""
    cfg = cfg or scene_config()
    gap = cfg.margin * cfg.image_size
    out = Path(out)
    with atomic_dir(out, keep_existing=keep_existing, carry=carry) as tmp:
        (tmp / "images").mkdir(parents=True)
        for split_index, (split, n) in enumerate(
            {"train": train, "validation": validation, "test": test}.items()
        ):
            rng = random.Random(seed * 1000 + split_index + 7_000_000)
            lines = []
            for i in range(n):
                first, second, end, label = make_pair(rng, cfg, gap)
                names = [f"images/{split}-{i:05d}-{k}.png" for k in ("a", "b")]
                for name, scene in zip(names, (first, second), strict=True):
                    draw(scene, cfg).save(tmp / name, compress_level=1)
                row = {
                    "images": names,
                    "question": QUESTION.format(end=end),
                    "label": label,
                    "reasoning": reasoning(first, second, end),
                    "relation": end,
                }
                lines.append(json.dumps(row))
            (tmp / f"{split}.jsonl").write_text("\n".join(lines) + ("\n" if lines else ""))
        (tmp / "README.md").write_text(
            "Two-image questions drawn from synthetic scenes (vqa_r1.data.two_image, seed "
            f"{seed}): is the object at one end of the first image the same colour as the one at "
            "that end of the second? Multi-image JSONL (data/formats/multi_image.py).\n"
        )
    return out

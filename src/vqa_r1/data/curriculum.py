"""The pretraining curriculum of the tiny models: general skills, never the demo's task itself.

Why a curriculum: a randomly initialised tiny VLM does not learn to check a spatial claim against an
image in minutes on CPU (README, "Demo results" of the first release), yet real VLMs come to GRPO
already able to read images and compare text. Measured on this machine (shared notes): a tiny model
learns in about a minute to read one named object's attribute out of an image, and to compare two
facts that sit at fixed places in the text, but it sits on a long plateau when it must search a
scene and compare in one step. So the curriculum teaches the two easy skills separately, each in
the think-then-answer format:

- ``locate`` / ``locate_pair`` / ``colour`` / ``count``: read facts out of the image. A fact is a
  named object and the coarse grid cell of its centre, e.g. ``red circle: x 2, y 0`` (4 cells per
  axis; two centres at least a cell width apart always fall in different cells).
- ``text_claim``: check a claim against facts given *in the text*, with no image at all: the
  reasoning restates the claim's subject and object facts, in the claim's order, and the answer
  compares them.

The demo's task (a claim about a real image, no facts in the text) is never trained here: a model
must compose "read the named objects out of the image" with "compare their facts", which is what
SFT and GRPO then teach. Scenes come from seeds disjoint from every split the demo and tests use,
and each scene's fingerprint (objects and boxes) is checked against the held-out splits.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from vqa_r1.data.synthetic import (
    COLORS,
    RELATIONS,
    SHAPES,
    Scene,
    SceneConfig,
    SceneObject,
    draw,
    make_scene,
)

# Cells per axis in a fact. Four, because every family's tiny model turns a 112 px image into a
# 4 x 4 grid of image tokens: a fact then names the token an object's centre falls in.
GRID = 4
GENERAL_INSTRUCTION = (
    "First think about the question in <think> </think> tags, "
    "then give the final answer in <answer> </answer> tags."
)
TASKS = ("locate", "locate_pair", "colour", "count", "text_claim")
# Pretraining seeds live far above the demo's and tests' dataset seeds (seed * 1000 + split index,
# with user seeds well below this offset).
SEED_OFFSET = 7_000_000


@dataclass
class CurriculumConfig:
    """What the pretraining rows are made of. Weights are relative frequencies of the tasks."""

    seed: int = 0
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "locate": 0.15,
            "locate_pair": 0.3,
            "colour": 0.1,
            "count": 0.1,
            "text_claim": 0.35,
        }
    )
    scene: SceneConfig = field(
        default_factory=lambda: SceneConfig(min_objects=1, max_objects=3, background_style="ramp")
    )

    def __post_init__(self) -> None:
        unknown = set(self.weights) - set(TASKS)
        if unknown:
            raise ValueError(f"unknown curriculum tasks {sorted(unknown)}: choose from {TASKS}")


def grid_cell(box: Iterable[float], image_size: int) -> tuple[int, int]:
    """The grid cell of a box's centre: (column, row), each in 0..GRID-1."""
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return (
        min(GRID - 1, int(cx * GRID / image_size)),
        min(GRID - 1, int(cy * GRID / image_size)),
    )


def cell(obj: SceneObject, image_size: int) -> tuple[int, int]:
    return grid_cell(obj.box, image_size)


def fact(name: str, xy: tuple[int, int]) -> str:
    return f"{name}: x {xy[0]}, y {xy[1]}"


def claim_holds(relation: str, subj: tuple[int, int], obj: tuple[int, int]) -> bool | None:
    """Whether ``subj relation obj`` holds on grid cells; None when the cells do not decide it."""
    _, axis, sign = RELATIONS[relation]
    delta = subj[axis] - obj[axis]
    if delta == 0:
        return None
    return delta * sign > 0


def fingerprint(objects: Iterable[tuple[str, Iterable[int]]]) -> str:
    """A scene's identity: its objects' names and boxes (what an image is drawn from)."""
    key = ";".join(f"{name}@{','.join(str(int(v)) for v in box)}" for name, box in objects)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def scene_fingerprint(scene: Scene) -> str:
    return fingerprint((o.name, o.box) for o in scene.objects)


def _think(facts: list[str], answer: str) -> str:
    return f"<think> {'; '.join(facts)} </think> <answer> {answer} </answer>"


def _random_scene(rng: random.Random, cfg: SceneConfig) -> Scene:
    from vqa_r1.data.synthetic import _place_objects

    while True:
        objects = _place_objects(rng, cfg)
        if objects:
            return Scene(objects, "", 0, "", "", "", cfg.image_size)


@dataclass
class Example:
    """One pretraining row before it meets a processor: image, question, instruction, target."""

    task: str
    scene: Scene | None  # None: a text-only task
    question: str
    instruction: str
    target: str


def make_example(
    task: str, rng: random.Random, cfg: SceneConfig, claim_instruction: str
) -> Example:
    size = cfg.image_size
    if task == "text_claim":
        return _text_claim(rng, claim_instruction)
    if task == "locate_pair":
        scene = _scene_with(rng, cfg, at_least=2)
        a, b = rng.sample(scene.objects, 2)
        facts = [fact(a.name, cell(a, size)), fact(b.name, cell(b, size))]
        answer = f"x {cell(a, size)[0]}, y {cell(a, size)[1]} and x {cell(b, size)[0]}, y {cell(b, size)[1]}"
        return Example(
            task,
            scene,
            f"Where are the {a.name} and the {b.name}?",
            GENERAL_INSTRUCTION,
            _think(facts, answer),
        )
    if task == "locate":
        scene = _scene_with(rng, cfg, at_least=1)
        a = rng.choice(scene.objects)
        xy = cell(a, size)
        return Example(
            task,
            scene,
            f"Where is the {a.name}?",
            GENERAL_INSTRUCTION,
            _think([fact(a.name, xy)], f"x {xy[0]}, y {xy[1]}"),
        )
    if task == "colour":
        scene = _scene_with(rng, cfg, at_least=1)
        shapes = [o.shape for o in scene.objects]
        unique = [o for o in scene.objects if shapes.count(o.shape) == 1]
        a = rng.choice(unique or scene.objects)
        return Example(
            task,
            scene,
            f"What colour is the {a.shape}?",
            GENERAL_INSTRUCTION,
            _think([fact(a.name, cell(a, size))], a.color),
        )
    if task == "count":
        scene = _scene_with(rng, cfg, at_least=1)
        ordered = sorted(scene.objects, key=lambda o: o.center[0])
        facts = [fact(o.name, cell(o, size)) for o in ordered]
        return Example(
            task,
            scene,
            "How many objects are there?",
            GENERAL_INSTRUCTION,
            _think(facts, str(len(ordered))),
        )
    raise ValueError(f"unknown task {task!r}")


def _scene_with(rng: random.Random, cfg: SceneConfig, at_least: int) -> Scene:
    while True:
        scene = _random_scene(rng, cfg)
        if len(scene.objects) >= at_least:
            return scene


def _text_claim(rng: random.Random, instruction: str) -> Example:
    """A claim checked against facts written in the question; no image."""
    names = [f"{c} {s}" for c in COLORS for s in SHAPES]
    while True:
        a, b = rng.sample(names, 2)
        xa = (rng.randrange(GRID), rng.randrange(GRID))
        xb = (rng.randrange(GRID), rng.randrange(GRID))
        relation = rng.choice(list(RELATIONS))
        verdict = claim_holds(relation, xa, xb)
        if verdict is not None:
            break
    listed = [fact(a, xa), fact(b, xb)]
    rng.shuffle(listed)  # facts in any order; the reasoning restates them in the claim's order
    question = (
        f"Facts: {'; '.join(listed)}. "
        f"Is the following statement true: The {a} is {relation} the {b}."
    )
    target = _think([fact(a, xa), fact(b, xb)], "True" if verdict else "False")
    return Example("text_claim", None, question, instruction, target)


def generate_examples(
    n: int, cfg: CurriculumConfig, claim_instruction: str, exclude: set[str] = frozenset()
) -> list[Example]:
    """``n`` examples, deterministic from ``cfg.seed``; scenes whose fingerprint is in ``exclude``
    (the held-out splits) are drawn again."""
    rng = random.Random(SEED_OFFSET + cfg.seed)
    tasks, weights = zip(*cfg.weights.items(), strict=True)
    out = []
    while len(out) < n:
        task = rng.choices(tasks, weights)[0]
        example = make_example(task, rng, cfg.scene, claim_instruction)
        if example.scene is not None and scene_fingerprint(example.scene) in exclude:
            continue
        out.append(example)
    return out


def render(example: Example, cfg: SceneConfig):
    """The example's image, or None for a text-only task."""
    return None if example.scene is None else draw(example.scene, cfg)


def render_scene(objects: list, cfg: SceneConfig):
    """Draw a scene from ``[[name, box], ...]``."""
    placed = [
        SceneObject(name, *name.split(" ", 1), tuple(int(v) for v in box)) for name, box in objects
    ]
    return draw(Scene(placed, "", 0, "", "", "", cfg.image_size), cfg)


def rows_fingerprints(rows: Iterable[dict]) -> set[str]:
    """Fingerprints of dataset rows that carry ``objects`` and ``boxes`` (the synthetic schema)."""
    return {fingerprint(zip(r["objects"], r["boxes"], strict=True)) for r in rows}


__all__ = [
    "GRID",
    "TASKS",
    "CurriculumConfig",
    "Example",
    "cell",
    "claim_holds",
    "fact",
    "fingerprint",
    "generate_examples",
    "grid_cell",
    "rows_fingerprints",
    "make_scene",
    "render",
    "render_scene",
    "scene_fingerprint",
]

"""The pretraining curriculum of the tiny models: general skills, never the demo's task itself.

Why a curriculum: a randomly initialised tiny VLM does not learn to check a spatial claim against an
image in minutes on CPU, yet real VLMs come to GRPO already able to read images and compare text.
What a tiny model learns quickly was measured on this machine (shared notes, and this module's own
trials, README "Demo results"): naming the object at a position ("what colour is the object on the
left?") in minutes, and comparing tokens that stand at fixed places; naming the position of a named
object, or searching a list for a name, sits on long plateaus; and the tiny vision tower tells
colours apart at once but shapes only slowly (measured: colour per slot 0.95-0.99, shape at chance
after 2,000 steps). So every task reasons in one *layout* format that reads position -> colour,
the learnable direction, and puts the colours a claim needs at fixed places (scenes have one object
per colour, so a colour names an object):

    <think> left to right: red, blue. top to bottom: blue, red. left: red. subject: red. </think>

(then the colour at the end of the layout that the question or the claim's relation points to,
and for a claim the subject's colour: "the red circle is left of the blue square" holds iff the
two are the same, a comparison of two tokens side by side).

- image tasks (``layout``, ``which``): describe the layout of a scene, then answer a question about
  it (which colours there are, which object is on the left or at the top);
- ``verify``: True/False about one object's place in an image ("The red object is on the left."),
  with the same instruction as the demo's claims. Why: without it the model only ever answered
  True/False for text, so on an image with the True/False instruction it answered a colour
  (measured: 200 of 200 validation answers), and GRPO from the base model got no accuracy reward
  at all; a real instruction-tuned VLM answers in the asked format;
- ``text_claim``: check a spatial claim against a layout given *in the text*, with no image: the
  reasoning restates the layout, the answer follows from it.

The demo's task (a claim relating two objects of an image, no layout in the text) is never trained
here: the model must compose "describe the image's layout" with "check a relation claim against a
layout", which is what SFT and GRPO then teach. Scenes come from seeds disjoint from every split
the demo and tests use, and each scene's fingerprint (objects and boxes) is checked against the held-out splits.
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
    _place_objects,
    draw,
)

GENERAL_INSTRUCTION = (
    "First think about the question in <think> </think> tags, "
    "then give the final answer in <answer> </answer> tags."
)
TASKS = ("layout", "which", "verify", "text_claim")
# Pretraining seeds live far above the demo's and tests' dataset seeds (seed * 1000 + split index,
# with user seeds well below this offset).
SEED_OFFSET = 7_000_000
# which object is at each end of an axis, as the question and the layout say it
ENDS = {"left": (0, 0), "right": (0, -1), "top": (1, 0), "bottom": (1, -1)}
# the end of the layout a relation's subject must be at: "A left of B" (two objects) iff A is left
END_OF = {"left of": "left", "right of": "right", "above": "top", "below": "bottom"}


@dataclass
class CurriculumConfig:
    """What the pretraining rows are made of. Weights are relative frequencies of the tasks."""

    seed: int = 0
    weights: dict[str, float] = field(
        default_factory=lambda: {"layout": 0.15, "which": 0.2, "verify": 0.25, "text_claim": 0.4}
    )
    # two objects of different colours, as in the demo's scenes; both axes must order them clearly
    scene: SceneConfig = field(
        default_factory=lambda: SceneConfig(
            min_objects=2, max_objects=2, background_style="ramp", distinct_colors=True
        )
    )
    min_gap: float = 0.08  # minimum centre distance on each axis, as a fraction of the image size

    def __post_init__(self) -> None:
        unknown = set(self.weights) - set(TASKS)
        if unknown:
            raise ValueError(f"unknown curriculum tasks {sorted(unknown)}: choose from {TASKS}")


def colour_of(name: str) -> str:
    return name.split(" ", 1)[0]


def layout_text(by_x: list[str], by_y: list[str]) -> str:
    """The layout line: the objects' colours in left-to-right and in top-to-bottom order."""
    return f"left to right: {', '.join(by_x)}. top to bottom: {', '.join(by_y)}."


def layout_of(objects: Iterable[tuple[str, Iterable[float]]]) -> tuple[list[str], list[str]]:
    """Colours of named boxes ordered by centre, left to right and top to bottom."""
    placed = [(colour_of(name), list(box)) for name, box in objects]
    by_x = [c for c, b in sorted(placed, key=lambda o: (o[1][0] + o[1][2]) / 2)]
    by_y = [c for c, b in sorted(placed, key=lambda o: (o[1][1] + o[1][3]) / 2)]
    return by_x, by_y


def claim_holds(relation: str, subj: str, obj: str, by_x: list[str], by_y: list[str]) -> bool:
    """Whether ``subj relation obj`` (object names) holds in a layout of colours."""
    _, axis, sign = RELATIONS[relation]
    order = by_x if axis == 0 else by_y
    delta = order.index(colour_of(subj)) - order.index(colour_of(obj))
    return delta * sign > 0


def fingerprint(objects: Iterable[tuple[str, Iterable[int]]]) -> str:
    """A scene's identity: its objects' names and boxes (what an image is drawn from)."""
    key = ";".join(f"{name}@{','.join(str(int(v)) for v in box)}" for name, box in objects)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def scene_fingerprint(scene: Scene) -> str:
    return fingerprint((o.name, o.box) for o in scene.objects)


def rows_fingerprints(rows: Iterable[dict]) -> set[str]:
    """Fingerprints of dataset rows that carry ``objects`` and ``boxes`` (the synthetic schema)."""
    return {fingerprint(zip(r["objects"], r["boxes"], strict=True)) for r in rows}


@dataclass
class Example:
    """One pretraining row before it meets a processor: image, question, instruction, target."""

    task: str
    scene: Scene | None  # None: a text-only task
    question: str
    instruction: str
    target: str


def _target(layout: str, answer: str) -> str:
    return f"<think> {layout} </think> <answer> {answer} </answer>"


def at_end(end: str, by_x: list[str], by_y: list[str]) -> str:
    """The colour at one end of a layout (``left``, ``right``, ``top``, ``bottom``)."""
    axis, index = ENDS[end]
    return (by_x if axis == 0 else by_y)[index]


def claim_reasoning(relation: str, subj: str, by_x: list[str], by_y: list[str]) -> str:
    """The layout, the colour at the end the claim's relation points to, the subject's colour.

    "The red circle is left of the blue square" holds iff the left object is red. Each step is one
    a tiny model learns quickly: the layout is read from the image (position -> colour), the end's
    colour is copied from a fixed place of the layout, the subject's colour from the claim, and
    the answer compares the last two tokens, side by side (measured: the same comparison with the
    subject's colour left in the claim stayed at chance after 1,500 steps).
    """
    end = END_OF[relation]
    colours = f"{end}: {at_end(end, by_x, by_y)}. subject: {colour_of(subj)}."
    return f"{layout_text(by_x, by_y)} {colours}"


def _scene(rng: random.Random, cfg: CurriculumConfig) -> Scene:
    """A scene whose objects are clearly ordered on both axes (so its layout is unambiguous)."""

    gap = cfg.min_gap * cfg.scene.image_size
    while True:
        objects = _place_objects(rng, cfg.scene)
        if len(objects) < cfg.scene.min_objects:
            continue
        centres = [o.center for o in objects]
        clear = all(
            abs(a[axis] - b[axis]) >= gap
            for i, a in enumerate(centres)
            for b in centres[i + 1 :]
            for axis in (0, 1)
        )
        if clear:
            return Scene(objects, "", 0, "", "", "", cfg.scene.image_size)


def make_example(
    task: str, rng: random.Random, cfg: CurriculumConfig, claim_instruction: str
) -> Example:
    if task == "text_claim":
        return _text_claim(rng, claim_instruction)
    scene = _scene(rng, cfg)
    by_x, by_y = layout_of((o.name, o.box) for o in scene.objects)
    layout = layout_text(by_x, by_y)
    if task == "layout":
        question, answer = "Describe the layout of the objects.", " and ".join(by_x)
    elif task == "which":
        end = rng.choice(list(ENDS))
        question = f"Which colour is the object {side_of(end)}?"
        answer = at_end(end, by_x, by_y)
        layout = f"{layout} {end}: {answer}."
    elif task == "verify":
        return _verify(rng, scene, by_x, by_y, claim_instruction)
    else:
        raise ValueError(f"unknown task {task!r}")
    return Example(task, scene, question, GENERAL_INSTRUCTION, _target(layout, answer))


def side_of(end: str) -> str:
    return f"{'on the' if end in ('left', 'right') else 'at the'} {end}"


def _verify(
    rng: random.Random, scene: Scene, by_x: list[str], by_y: list[str], instruction: str
) -> Example:
    """Is the named colour at one end of the image? The reasoning reads the end's colour out of
    the image and puts the claim's colour beside it, as the demo's reasoning does."""
    end = rng.choice(list(ENDS))
    actual = at_end(end, by_x, by_y)
    colour = actual if rng.random() < 0.5 else rng.choice([c for c in by_x if c != actual])
    question = f"Is the following statement true: The {colour} object is {side_of(end)}."
    reasoning = f"{layout_text(by_x, by_y)} {end}: {actual}. subject: {colour}."
    answer = "True" if colour == actual else "False"
    return Example("verify", scene, question, instruction, _target(reasoning, answer))


def _text_claim(rng: random.Random, instruction: str) -> Example:
    """A claim checked against a layout written in the question; no image."""
    a, b = rng.sample(list(COLORS), 2)
    names = {a: f"{a} {rng.choice(SHAPES)}", b: f"{b} {rng.choice(SHAPES)}"}
    by_x, by_y = [a, b], [a, b]
    rng.shuffle(by_x)
    rng.shuffle(by_y)
    subj, obj = (names[c] for c in rng.sample([a, b], 2))
    relation = rng.choice(list(RELATIONS))
    verdict = claim_holds(relation, subj, obj, by_x, by_y)
    question = (
        f"Layout: {layout_text(by_x, by_y)} "
        f"Is the following statement true: The {subj} is {relation} the {obj}."
    )
    reasoning = claim_reasoning(relation, subj, by_x, by_y)
    return Example(
        "text_claim",
        None,
        question,
        instruction,
        _target(reasoning, "True" if verdict else "False"),
    )


def generate_examples(
    n: int, cfg: CurriculumConfig, claim_instruction: str, exclude: Iterable[str] = frozenset()
) -> list[Example]:
    """``n`` examples, deterministic from ``cfg.seed``; scenes whose fingerprint is in ``exclude``
    (the held-out splits) are drawn again."""
    exclude = set(exclude)
    rng = random.Random(SEED_OFFSET + cfg.seed)
    tasks, weights = zip(*cfg.weights.items(), strict=True)
    out = []
    while len(out) < n:
        task = rng.choices(tasks, weights)[0]
        example = make_example(task, rng, cfg, claim_instruction)
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

"""The pretraining curriculum of the tiny models: general skills, never the demo's task itself.

Why a curriculum: a randomly initialised tiny VLM does not learn to check a spatial claim against an
image in minutes on CPU, yet real VLMs come to GRPO already able to read images and compare text.
What a tiny model learns quickly was measured on this machine (shared notes, and this module's own
trials, docs/experiments/demo.md): naming the object at a position ("what colour is the object on the
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

Two more tasks are off in the default weights (the shipped models never saw them, and their cards'
commands still make the same rows, pinned in tests/test_pretrain.py); ``weights`` turns them on
for a re-pretraining, as general skills the counting and cryptogram experiments can build on
without ever training on those experiments' tasks or scenes:

- ``count``: how many objects a scene holds. The reasoning lists them in the learnable direction,
  position -> colour, then says the number (``left to right: red, blue, green. 3 objects.``).
  Scenes come from this module's own generator and seeds, in this module's palette and shapes
  (circles, squares, triangles), never the counting study's (data/counting.py: CLEVR's colours,
  cubes, spheres, cylinders), and hold 1 to 6 objects: the counting study's out-of-distribution
  condition B (7-10 objects) stays unseen, while its training condition A (3-6) is covered. The
  questions are worded unlike the study's "How many ... are there?".
- ``cell``: read one cell of a small table of letter pairs drawn here (keys in the top row with
  their letters under them, or in the left column with their letters next to them): "What is
  written under q?". The reasoning reads the table in order, then restates the cell
  (``q -> d, x -> k, b -> n. q -> d.``). A table is never a cryptogram decoder (data/cryptogram.py
  maps an alphabet onto itself; these tables never do), and no coded message is ever shown.

The demo's task (a claim relating two objects of an image, no layout in the text) is never trained
here: the model must compose "describe the image's layout" with "check a relation claim against a
layout", which is what SFT and GRPO then teach. Scenes come from seeds disjoint from every split
the demo and tests use, and each scene's fingerprint (objects and boxes) is checked against the held-out splits.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

from vqa_r1.data.synthetic import (
    COLORS,
    LETTER_COLORS,
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
TASKS = ("layout", "which", "verify", "text_claim", "count", "cell", "lookup")
# the shipped models' curriculum; count, cell and lookup are off (a weight names them to turn
# them on)
DEFAULT_WEIGHTS = {"layout": 0.15, "which": 0.2, "verify": 0.25, "text_claim": 0.4}
# count: objects per scene. At most 6 (one per colour, so a colour names an object) and never the
# counting study's condition B (7-10), which stays out of distribution
COUNT_RANGE = (1, 6)
COUNT_QUESTIONS = (
    "Count the objects in the image.",
    "How many shapes does the image show?",
    "What is the number of objects in this picture?",
)
# cell: pairs per table; the letters of its keys and of its values, each drawn in its own colour
# (LETTER_COLORS), since the tiny vision towers tell colours apart but not letter shapes
CELL_RANGE = (3, 5)
CELL_LETTERS = "".join(LETTER_COLORS)
CELL_QUESTIONS = {"under": "What is written under {key}?", "next": "What is written next to {key}?"}
# lookup: a letter table written in the question (pairs per table) and a coded message of table
# keys (letters per message) to look up one by one, "_" standing for a space between words, as in
# a cryptogram's worked steps (data/cryptogram.py); text only
LOOKUP_PAIRS = (3, 5)
LOOKUP_LENGTH = (2, 6)
LOOKUP_SPACE = "_"
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
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    # two objects of different colours, as in the demo's scenes; both axes must order them clearly
    scene: SceneConfig = field(
        default_factory=lambda: SceneConfig(
            min_objects=2, max_objects=2, background_style="ramp", distinct_colors=True
        )
    )
    min_gap: float = 0.08  # minimum centre distance on each axis, as a fraction of the image size
    # count: 1-6 objects of different colours, smaller so that six fit apart; drawn in ``scene``'s
    # look (its size and background), only the objects differ; ordered clearly left to right
    count_scene: SceneConfig = field(
        default_factory=lambda: SceneConfig(
            min_objects=COUNT_RANGE[0],
            max_objects=COUNT_RANGE[1],
            object_size=(12, 20),
            background_style="ramp",
            distinct_colors=True,
        )
    )

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


def table_fingerprint(pairs: Iterable[tuple[str, str]]) -> str:
    """A letter table's identity: its mapping, whatever the order of its cells (a cryptogram
    decoder's mapping, ``decoder.items()``, gives the same fingerprint as a table with its pairs)."""
    return fingerprint((f"{key}->{value}", ()) for key, value in sorted(pairs))


@dataclass
class Table:
    """A small table of letter pairs: each key with its letter under it (``under``: keys in the
    top row) or next to it (``next``: keys in the left column)."""

    pairs: list[tuple[str, str]]
    layout: str  # under | next

    def to_json(self) -> dict:
        return {"table": [list(p) for p in self.pairs], "layout": self.layout}


@dataclass
class Example:
    """One pretraining row before it meets a processor: image, question, instruction, target."""

    task: str
    scene: Scene | None  # None: no scene (a text-only task, or a table)
    question: str
    instruction: str
    target: str
    table: Table | None = None  # the cell task's image

    @property
    def has_image(self) -> bool:
        return self.scene is not None or self.table is not None

    def fingerprint(self) -> str | None:
        """What the held-out check compares: the scene's, the table's, or None (text only)."""
        if self.scene is not None:
            return scene_fingerprint(self.scene)
        return None if self.table is None else table_fingerprint(self.table.pairs)


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


def _scene(
    rng: random.Random,
    cfg: CurriculumConfig,
    scene: SceneConfig | None = None,
    axes: tuple[int, ...] = (0, 1),
) -> Scene:
    """A scene whose objects are clearly ordered on ``axes`` (so its layout is unambiguous)."""

    scene = scene or cfg.scene
    gap = cfg.min_gap * scene.image_size
    while True:
        objects = _place_objects(rng, scene)
        if len(objects) < scene.min_objects:
            continue
        centres = [o.center for o in objects]
        clear = all(
            abs(a[axis] - b[axis]) >= gap
            for i, a in enumerate(centres)
            for b in centres[i + 1 :]
            for axis in axes
        )
        if clear:
            return Scene(objects, "", 0, "", "", "", scene.image_size)


def make_example(
    task: str, rng: random.Random, cfg: CurriculumConfig, claim_instruction: str
) -> Example:
    if task == "text_claim":
        return _text_claim(rng, claim_instruction)
    if task == "count":
        return _count(rng, cfg)
    if task == "cell":
        return _cell(rng)
    if task == "lookup":
        return _lookup(rng)
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


def _count(rng: random.Random, cfg: CurriculumConfig) -> Example:
    """How many objects: the reasoning names them left to right (position -> colour, what a tiny
    model reads at once), then their number. The count is drawn first, so every count of
    ``count_scene``'s range is about equally frequent."""
    scene_cfg = cfg.count_scene
    wanted = rng.randint(scene_cfg.min_objects, scene_cfg.max_objects)
    exact = SceneConfig(**{**vars(scene_cfg), "min_objects": wanted, "max_objects": max(wanted, 2)})
    scene = _scene(rng, cfg, exact, axes=(0,))
    while len(scene.objects) != wanted:
        scene = _scene(rng, cfg, exact, axes=(0,))
    by_x, _ = layout_of((o.name, o.box) for o in scene.objects)
    n = len(by_x)
    reasoning = f"left to right: {', '.join(by_x)}. {n} object{'' if n == 1 else 's'}."
    question = rng.choice(COUNT_QUESTIONS)
    return Example("count", scene, question, GENERAL_INSTRUCTION, _target(reasoning, str(n)))


def _cell(rng: random.Random) -> Example:
    """One cell of a letter table: the reasoning reads every pair in order (left to right or top to
    bottom), then restates the asked one. Keys are distinct, values distinct, no letter paired
    with itself, and the values are never the keys themselves (a table is never an alphabet
    mapped onto itself, which is what a cryptogram decoder is)."""
    table = Table(_pairs(rng, *CELL_RANGE), rng.choice(list(CELL_QUESTIONS)))
    key, value = rng.choice(table.pairs)
    question = CELL_QUESTIONS[table.layout].format(key=key)
    reasoning = f"{', '.join(f'{k} -> {v}' for k, v in table.pairs)}. {key} -> {value}."
    return Example("cell", None, question, GENERAL_INSTRUCTION, _target(reasoning, value), table)


def _pairs(rng: random.Random, low: int, high: int) -> list[tuple[str, str]]:
    """``low``-``high`` pairs of CELL_LETTERS: keys distinct, values distinct, no letter paired
    with itself, and the values never the keys themselves (never an alphabet mapped onto itself,
    which is what a cryptogram decoder is)."""
    n = rng.randint(low, high)
    while True:
        keys = rng.sample(CELL_LETTERS, n)
        values = rng.sample(CELL_LETTERS, n)
        if set(keys) != set(values) and all(k != v for k, v in zip(keys, values, strict=True)):
            return list(zip(keys, values, strict=True))


def _lookup(rng: random.Random) -> Example:
    """Look each letter of a coded message up in a table written in the question: the reasoning
    is one ``key -> value`` per letter (``_`` kept as it is), the answer the values, as a
    cryptogram's worked steps and ``<chars>`` block write them. The skill those steps need and an
    image cannot teach: finding a letter earlier in the text and copying what follows it."""
    pairs = _pairs(rng, *LOOKUP_PAIRS)
    mapping = dict(pairs)
    length = rng.randint(*LOOKUP_LENGTH)
    message = [rng.choice(pairs)[0] for _ in range(length)]
    if length >= 3 and rng.random() < 0.5:  # two words: a space anywhere but at either end
        message[rng.randint(1, length - 2)] = LOOKUP_SPACE
    table = ", ".join(f"{k} -> {v}" for k, v in pairs)
    coded = " ".join(message)
    question = (
        f"Table: {table}. Look up each letter of this message in the table; {LOOKUP_SPACE} stands "
        f"for a space. The message is: {coded}."
    )
    steps = ", ".join(c if c == LOOKUP_SPACE else f"{c} -> {mapping[c]}" for c in message)
    answer = " ".join(mapping.get(c, c) for c in message)
    return Example("lookup", None, question, GENERAL_INSTRUCTION, _target(f"{steps}.", answer))


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
    """``n`` examples, deterministic from ``cfg.seed``; scenes (and tables) whose fingerprint is in
    ``exclude`` (the held-out splits) are drawn again."""
    exclude = set(exclude)
    rng = random.Random(SEED_OFFSET + cfg.seed)
    tasks, weights = zip(*cfg.weights.items(), strict=True)
    out = []
    while len(out) < n:
        task = rng.choices(tasks, weights)[0]
        example = make_example(task, rng, cfg, claim_instruction)
        if example.has_image and example.fingerprint() in exclude:
            continue
        out.append(example)
    return out


def render(example: Example, cfg: SceneConfig):
    """The example's image, or None for a text-only task."""
    if example.table is not None:
        return draw_table(example.table, cfg.image_size)
    return None if example.scene is None else draw(example.scene, cfg)


def image_payload(example: Example) -> list | dict:
    """What an example's image is drawn from, as JSON: ``[[name, box], ...]`` for a scene (``[]``
    for none), ``{"table": [[key, value], ...], "layout": ...}`` for a table."""
    if example.table is not None:
        return example.table.to_json()
    return [] if example.scene is None else [[o.name, list(o.box)] for o in example.scene.objects]


def render_payload(payload: list | dict, cfg: SceneConfig):
    """Draw an ``image_payload``; None for a text-only example."""
    if isinstance(payload, dict):
        table = Table([tuple(p) for p in payload["table"]], payload["layout"])
        return draw_table(table, cfg.image_size)
    return render_scene(payload, cfg) if payload else None


@functools.lru_cache(maxsize=8)
def _font(size: int):
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType: scalable
    except (TypeError, OSError):
        return ImageFont.load_default()


def draw_table(
    table: Table, size: int, inks: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
) -> Image.Image:
    """A grid of two rows (``under``: keys on top) or two columns (``next``: keys on the left),
    one cell per letter, each letter bold in its own colour (LETTER_COLORS; black for others), or
    keys and values each in one of ``inks``, on white with grey lines. (A cryptogram decoder drawn
    as a table, data/cryptogram.py, is this drawing of a whole alphabet.)"""
    n = len(table.pairs)
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    long_side, short_side = size / n, size / 2
    font = _font(max(8, int(min(long_side, short_side) * 0.7)))
    for index, (key, value) in enumerate(table.pairs):
        for part, letter in enumerate((key, value)):
            ink = inks[part] if inks else LETTER_COLORS.get(letter, (0, 0, 0))
            if table.layout == "under":  # column ``index``, row ``part``
                x0, y0, w, h = index * long_side, part * short_side, long_side, short_side
            else:  # row ``index``, column ``part``
                x0, y0, w, h = part * short_side, index * long_side, short_side, long_side
            pen.rectangle((x0, y0, x0 + w, y0 + h), outline=(170, 170, 170))
            pen.text(
                (x0 + w / 2, y0 + h / 2),
                letter,
                fill=ink,
                font=font,
                anchor="mm",
                stroke_width=1,
                stroke_fill=ink,
            )
    return image


def render_scene(objects: list, cfg: SceneConfig):
    """Draw a scene from ``[[name, box], ...]``."""
    placed = [
        SceneObject(name, *name.split(" ", 1), tuple(int(v) for v in box)) for name, box in objects
    ]
    return draw(Scene(placed, "", 0, "", "", "", cfg.image_size), cfg)

"""A CLEVR-CoGenT-style counting stand-in: drawn scenes whose shape-colour pairing and object count
differ between a training condition (A) and a held-out one (B).

Why: R1-V's claim is about generalisation out of distribution (trained on CLEVR-CoGenT condition
A, tested on SuperCLEVR). Neither can be downloaded in CI or on a laptop, so this generator gives
the same kind of shift here, measurable on the tiny models in minutes. It follows CLEVR-CoGenT's
rule (the CLEVR paper, Johnson et al., CVPR 2017, "CLEVR-CoGenT"): in condition A cubes are gray,
blue, brown or yellow and cylinders red, green, purple or cyan; in condition B the two palettes are
swapped; spheres take any colour in both. The colours are CLEVR's eight, with its RGB values
(clevr-dataset-gen, image_generation/data/properties.json). On top of that, a count-range shift:
A scenes hold 3-6 objects, B scenes 7-10 (CoGenT itself keeps 3-10 in both), so a model trained
on A is tested on unseen pairings and on counts it never saw.

Scenes are flat drawings sized for the tiny CPU models: a cube is a square, a sphere a disc, a
cylinder an upright rectangle with a lighter elliptical top. Objects never overlap, and a scene
is drawn again until every one of its objects is placed, so the count is exact.

Questions ask for every object ("How many objects are there?"), a shape ("How many cubes are
there?") or a colour ("How many red objects are there?"), in turn; a shape or colour asked about
is one present in the scene (the answer is at least 1). Rows are counting rows
(``formats.common.count_row``: ``solution`` "<answer> N </answer>", ``answer_type`` "number",
``relation`` "count N") plus ``condition``, ``question_kind``, ``objects``, ``boxes`` and
``reasoning`` (the objects asked about, left to right, then their number: chain-of-thought SFT's
target), saved
with ``save_to_disk`` as the synthetic scenes are, so ``--dataset DIR`` and ``load_split`` open the
folder as they open any saved dataset. Default splits: ``train``, ``validation``, ``test``
(condition A) and ``test_b`` (condition B); ``B_pairs`` (B's pairing, A's counts) and
``B_counts`` (A's pairing, B's counts) separate the two shifts when a split names them.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw

from vqa_r1.data.formats.common import count_row
from vqa_r1.io import atomic_dir

# CLEVR's colours (clevr-dataset-gen image_generation/data/properties.json)
COLORS: dict[str, tuple[int, int, int]] = {
    "gray": (87, 87, 87),
    "red": (173, 35, 35),
    "blue": (42, 75, 215),
    "green": (29, 105, 20),
    "brown": (129, 74, 25),
    "purple": (129, 38, 192),
    "cyan": (41, 208, 208),
    "yellow": (255, 238, 51),
}
SHAPES: tuple[str, ...] = ("cube", "sphere", "cylinder")
PLURALS = {"cube": "cubes", "sphere": "spheres", "cylinder": "cylinders"}
PALETTE_1 = ("gray", "blue", "brown", "yellow")
PALETTE_2 = ("red", "green", "purple", "cyan")
# CLEVR-CoGenT: shape -> the colours it may take
PAIRINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "A": {"cube": PALETTE_1, "cylinder": PALETTE_2, "sphere": tuple(COLORS)},
    "B": {"cube": PALETTE_2, "cylinder": PALETTE_1, "sphere": tuple(COLORS)},
}
QUESTION_KINDS = ("all", "shape", "color")


@dataclass
class Condition:
    """One condition: which shape-colour pairing (a key of ``PAIRINGS``) and how many objects."""

    pairing: str = "A"
    min_objects: int = 3
    max_objects: int = 6

    def __post_init__(self) -> None:
        if self.pairing not in PAIRINGS:
            raise ValueError(f"pairing {self.pairing!r}: use one of {', '.join(PAIRINGS)}")
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError("a condition needs 1 <= min_objects <= max_objects")


def default_conditions() -> dict[str, Condition]:
    return {
        "A": Condition("A", 3, 6),
        "B": Condition("B", 7, 10),
        "B_pairs": Condition("B", 3, 6),
        "B_counts": Condition("A", 7, 10),
    }


@dataclass
class CountingSpec:
    """Everything that decides a counting dataset; the same spec and seed give the same bytes.

    ``splits``: split name -> [condition name, number of scenes]; each split draws from its own
    seed (``seed`` * 1000 + its position), as the synthetic scenes do.
    """

    splits: dict[str, list] = field(
        default_factory=lambda: {
            "train": ["A", 2000],
            "validation": ["A", 200],
            "test": ["A", 400],
            "test_b": ["B", 400],
        }
    )
    conditions: dict[str, Condition] = field(default_factory=default_conditions)
    seed: int = 0
    # the test splits' own seed (a fresh draw of them, the training scenes unchanged); None: seed
    test_seed: int | None = None
    image_size: int = 112
    object_size: tuple[int, int] = (12, 18)
    question_kinds: tuple[str, ...] = QUESTION_KINDS
    background: tuple[int, int, int] = (200, 200, 200)

    def __post_init__(self) -> None:
        for split, entry in self.splits.items():
            condition, n = entry
            if condition not in self.conditions:
                raise ValueError(
                    f"split {split}: condition {condition!r} is not one of {sorted(self.conditions)}"
                )
            if int(n) < 0:
                raise ValueError(f"split {split}: scene count must be 0 or more, got {n}")
        unknown = [k for k in self.question_kinds if k not in QUESTION_KINDS]
        if unknown or not self.question_kinds:
            raise ValueError(f"question kinds {unknown}: use some of {', '.join(QUESTION_KINDS)}")
        low, high = self.object_size
        most = max(c.max_objects for c in self.conditions.values())
        if not 4 <= low <= high or most * (high + 2) ** 2 > 0.5 * self.image_size**2:
            raise ValueError(
                f"object_size {self.object_size}: {most} objects must fit without overlap in "
                f"{self.image_size}x{self.image_size} pixels (at most half the image)"
            )

    def to_dict(self) -> dict:
        """The settings (the cache key): ``test_seed`` only when set, so the scenes made before
        it existed keep their folder."""
        out = asdict(self)
        if out["test_seed"] is None:
            del out["test_seed"]
        return out

    def split_seed(self, split: str, index: int) -> int:
        """The generator seed of the ``index``-th split: test splits take ``test_seed``."""
        base = self.seed
        if self.test_seed is not None and split.startswith("test"):
            base = self.test_seed
        return base * 1000 + index


@dataclass
class CountObject:
    shape: str
    color: str
    box: tuple[int, int, int, int]

    @property
    def name(self) -> str:
        return f"{self.color} {self.shape}"


@dataclass
class CountScene:
    condition: str
    objects: list[CountObject]
    question: str
    kind: str
    count: int


def _disjoint(a: tuple[int, ...], b: tuple[int, ...], gap: int = 2) -> bool:
    return a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1]


def _kinds(rng: random.Random, pairing: dict[str, tuple[str, ...]], n: int) -> list[tuple]:
    return [(shape, rng.choice(pairing[shape])) for shape in (rng.choice(SHAPES) for _ in range(n))]


def place(rng: random.Random, spec: CountingSpec, kinds: list[tuple[str, str]]) -> list | None:
    """Every object placed without overlap, or None (the caller draws the scene again)."""
    objects: list[CountObject] = []
    for shape, color in kinds:
        for _attempt in range(100):
            side = rng.randint(*spec.object_size)
            x0 = rng.randint(1, spec.image_size - side - 1)
            y0 = rng.randint(1, spec.image_size - side - 1)
            box = (x0, y0, x0 + side, y0 + side)
            if all(_disjoint(box, o.box) for o in objects):
                objects.append(CountObject(shape, color, box))
                break
        else:
            return None
    return objects


def question_for(kind: str, objects: list[CountObject], rng: random.Random) -> tuple[str, int]:
    if kind == "shape":
        shape = rng.choice(sorted({o.shape for o in objects}))
        return f"How many {PLURALS[shape]} are there?", sum(o.shape == shape for o in objects)
    if kind == "color":
        color = rng.choice(sorted({o.color for o in objects}))
        return f"How many {color} objects are there?", sum(o.color == color for o in objects)
    return "How many objects are there?", len(objects)


def question_kind(question: str) -> str:
    """The kind of a counting question (``question_for``'s inverse): all, shape or color."""
    words = question.removeprefix("How many ").removesuffix(" are there?")
    if words == "objects":
        return "all"
    return "color" if words.endswith(" objects") else "shape"


def generate_scenes(n: int, seed: int, condition: str, spec: CountingSpec) -> list[CountScene]:
    """``n`` scenes of one condition, deterministic from ``seed``; question kinds in turn."""
    rng = random.Random(seed)
    cond = spec.conditions[condition]
    pairing = PAIRINGS[cond.pairing]
    scenes = []
    for i in range(n):
        count = rng.randint(cond.min_objects, cond.max_objects)
        objects = None
        while objects is None:
            objects = place(rng, spec, _kinds(rng, pairing, count))
        kind = spec.question_kinds[i % len(spec.question_kinds)]
        question, answer = question_for(kind, objects, rng)
        scenes.append(CountScene(condition, objects, question, kind, answer))
    return scenes


def draw(scene: CountScene, spec: CountingSpec) -> Image.Image:
    image = Image.new("RGB", (spec.image_size, spec.image_size), spec.background)
    pen = ImageDraw.Draw(image)
    for o in scene.objects:
        fill = COLORS[o.color]
        x0, y0, x1, y1 = o.box
        if o.shape == "cube":
            pen.rectangle(o.box, fill=fill)
        elif o.shape == "sphere":
            pen.ellipse(o.box, fill=fill)
        else:  # an upright cylinder: narrower than its box, with a lighter top
            inset = (x1 - x0) // 6
            cap = max(2, (y1 - y0) // 4)
            pen.rectangle((x0 + inset, y0 + cap // 2, x1 - inset, y1), fill=fill)
            light = tuple(min(255, c + 60) for c in fill)
            pen.ellipse((x0 + inset, y0, x1 - inset, y0 + cap), fill=light)
    return image


def reasoning(scene: CountScene) -> str:
    """The objects the question asks about, left to right, then their number: the target of
    chain-of-thought SFT (datasets.trainer_rows writes it in <think> before the solution)."""
    ordered = sorted(scene.objects, key=lambda o: (o.box[0], o.box[1]))
    if scene.kind == "all":
        return f"I see: {', '.join(o.name for o in ordered)}. That is {scene.count} objects."
    words = scene.question.removeprefix("How many ").removesuffix(" are there?")
    shape = next((s for s, plural in PLURALS.items() if plural == words), None)
    if shape is not None:
        chosen = [o for o in ordered if o.shape == shape]
    else:
        colour = words.removesuffix(" objects")
        chosen = [o for o in ordered if o.color == colour]
    return f"The {words}: {', '.join(o.name for o in chosen)}. That is {scene.count}."


def scene_row(scene: CountScene, image_path: str) -> dict:
    return {
        **count_row(scene.question, scene.count, image_path),
        "reasoning": reasoning(scene),
        "condition": scene.condition,
        "question_kind": scene.kind,
        "objects": [o.name for o in scene.objects],
        "boxes": [list(o.box) for o in scene.objects],
    }


def write_counting(
    out_dir: str | Path,
    spec: CountingSpec | None = None,
    carry: tuple[str, ...] = (),
    keep_existing: bool = False,
) -> Path:
    """Write the PNGs and a DatasetDict (counting rows) under ``out_dir``, atomically; ``carry``:
    entries of an existing ``out_dir`` kept (a claimed output folder's marker and lock);
    ``keep_existing``: a cache folder another process finished first is kept (same content)."""
    from datasets import Dataset, DatasetDict

    spec = spec or CountingSpec()
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, carry=carry, keep_existing=keep_existing) as tmp:
        splits = {}
        for index, (split, (condition, n)) in enumerate(spec.splits.items()):
            (tmp / "images" / split).mkdir(parents=True)
            rows = []
            for i, scene in enumerate(
                generate_scenes(int(n), spec.split_seed(split, index), condition, spec)
            ):
                rel = f"images/{split}/{i:06d}.png"
                draw(scene, spec).save(tmp / rel, compress_level=1)
                rows.append(scene_row(scene, str((out_dir / rel).resolve())))
            splits[split] = Dataset.from_list(rows) if rows else _empty()
        DatasetDict(splits).save_to_disk(str(tmp / "hf"), num_shards={s: 1 for s in splits})
        meta = {"kind": "synthetic-counting", **spec.to_dict()}
        (tmp / "dataset_info.json").write_text(json.dumps(meta, indent=2))
    return out_dir


def _empty():
    from datasets import Dataset, Features, Sequence, Value

    from vqa_r1.data.formats.common import COUNT_COLUMNS

    text = Value("string")
    features = {c: text for c in COUNT_COLUMNS} | {
        "condition": text,
        "question_kind": text,
        "reasoning": text,
        "objects": Sequence(text),
        "boxes": Sequence(Sequence(Value("int64"))),
    }
    return Dataset.from_dict({k: [] for k in features}, features=Features(features))


def counting_target(spec: CountingSpec, root: Path | None = None) -> Path:
    """The cache folder of a spec (its settings hashed), generating nothing (dry runs name it)."""
    from vqa_r1.paths import cache_root

    key = hashlib.sha256(json.dumps([spec.to_dict(), 1], sort_keys=True).encode()).hexdigest()
    return (root or cache_root() / "data") / f"counting-{key[:12]}"


def counting_dataset_dir(spec: CountingSpec | None = None, root: Path | None = None) -> Path:
    """The counting dataset of ``spec``, generated once into its cache folder."""
    spec = spec or CountingSpec()
    target = counting_target(spec, root)
    if not (target / "hf").exists():
        write_counting(target, spec, keep_existing=True)  # another job may write it too
    return target

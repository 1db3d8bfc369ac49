"""Procedurally drawn spatial-relation scenes: the embedded default dataset.

Why synthetic: nothing can be downloaded on a laptop or in CI, yet the whole pipeline (data -> SFT ->
GRPO -> evaluation -> tables) must run for real. The scenes follow the VSR schema so that every
component downstream treats them exactly like the real benchmark.

Every caption names a relation that holds (label 1) or whose opposite holds (label 0) with a clear
margin, so labels are never ambiguous. Labels are balanced per relation by construction.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw

from vqa_r1.io import atomic_dir

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (30, 70, 220),
    "yellow": (235, 200, 20),
    "purple": (140, 50, 170),
    "orange": (245, 130, 20),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# relation -> (its opposite, axis, sign): "a left of b" means x(a) < x(b)
RELATIONS: dict[str, tuple[str, int, int]] = {
    "left of": ("right of", 0, -1),
    "right of": ("left of", 0, 1),
    "above": ("below", 1, -1),
    "below": ("above", 1, 1),
}


@dataclass
class SceneConfig:
    """How scenes look. Defaults are sized for the tiny CPU models (112 px -> 16 Qwen image tokens)."""

    image_size: int = 112
    min_objects: int = 2
    max_objects: int = 4
    object_size: tuple[int, int] = (18, 28)
    relations: tuple[str, ...] = tuple(RELATIONS)
    margin: float = 0.15  # minimum centre distance along the relation's axis, as a fraction of size
    background: tuple[int, int, int] = (255, 255, 255)
    # "ramp": a pale background whose red channel falls from left to right and blue channel from top
    # to bottom. Every image patch then carries its own position in its pixels, which models whose
    # only positional signal is rotary (Qwen2.5-VL: no absolute position anywhere, RoPE acts on
    # queries and keys, never on values) need in order to learn relations from scratch in minutes.
    background_style: str = "plain"  # plain | ramp
    # every object a different colour, so that a colour names an object (the layout reasoning of
    # the pretrained tiny models reads colours, which a tiny vision tower sees at once; shapes it
    # learns far more slowly, README "Demo results")
    distinct_colors: bool = False

    def __post_init__(self) -> None:
        unknown = [r for r in self.relations if r not in RELATIONS]
        if unknown:
            raise ValueError(f"unknown relations {unknown}: choose from {list(RELATIONS)}")
        if not 1 <= self.min_objects <= self.max_objects <= len(COLORS) * len(SHAPES):
            raise ValueError("need 1 <= min_objects <= max_objects")
        if self.distinct_colors and self.max_objects > len(COLORS):
            raise ValueError(f"distinct colours allow at most {len(COLORS)} objects")
        if self.background_style not in ("plain", "ramp"):
            raise ValueError("background_style must be plain or ramp")
        if self.max_objects < 2:
            raise ValueError("a relation needs at least 2 objects (max_objects >= 2)")


@dataclass
class SceneObject:
    name: str  # e.g. "red circle"
    color: str
    shape: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels

    @property
    def center(self) -> tuple[float, float]:
        return ((self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2)


@dataclass
class Scene:
    objects: list[SceneObject]
    caption: str
    label: int
    relation: str
    subj: str
    obj: str
    size: int = 112
    extra: dict = field(default_factory=dict)


def _holds(relation: str, a: SceneObject, b: SceneObject, margin_px: float) -> bool:
    _, axis, sign = RELATIONS[relation]
    delta = a.center[axis] - b.center[axis]
    return delta * sign > margin_px


def _place_objects(rng: random.Random, cfg: SceneConfig) -> list[SceneObject]:
    count = rng.randint(cfg.min_objects, cfg.max_objects)
    if cfg.distinct_colors:
        kinds = [(c, rng.choice(SHAPES)) for c in rng.sample(list(COLORS), count)]
    else:
        kinds = rng.sample([(c, s) for c in COLORS for s in SHAPES], count)
    objects: list[SceneObject] = []
    for color, shape in kinds:
        for _attempt in range(50):
            side = rng.randint(*cfg.object_size)
            x0 = rng.randint(1, cfg.image_size - side - 1)
            y0 = rng.randint(1, cfg.image_size - side - 1)
            box = (x0, y0, x0 + side, y0 + side)
            if all(_disjoint(box, o.box) for o in objects):
                objects.append(SceneObject(f"{color} {shape}", color, shape, box))
                break
    return objects


def _disjoint(a: tuple[int, ...], b: tuple[int, ...], gap: int = 2) -> bool:
    return a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1]


def make_scene(rng: random.Random, cfg: SceneConfig, relation: str, label: int) -> Scene:
    """Draw objects until some ordered pair makes the (relation, label) caption unambiguous."""
    margin_px = cfg.margin * cfg.image_size
    opposite = RELATIONS[relation][0]
    while True:
        objects = _place_objects(rng, cfg)
        wanted = relation if label == 1 else opposite
        pairs = [
            (a, b)
            for a in objects
            for b in objects
            if a is not b and _holds(wanted, a, b, margin_px)
        ]
        if pairs:
            a, b = rng.choice(pairs)
            caption = f"The {a.name} is {relation} the {b.name}."
            return Scene(objects, caption, label, relation, a.name, b.name, cfg.image_size)


def _background(cfg: SceneConfig) -> Image.Image:
    if cfg.background_style == "plain":
        return Image.new("RGB", (cfg.image_size, cfg.image_size), cfg.background)
    import numpy as np

    ramp = np.linspace(0.0, 1.0, cfg.image_size)
    pixels = np.empty((cfg.image_size, cfg.image_size, 3), dtype=np.float32)
    pixels[..., 0] = 245 - 90 * ramp[None, :]  # red fades to the right
    pixels[..., 1] = 240
    pixels[..., 2] = 245 - 90 * ramp[:, None]  # blue fades downwards
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def draw(scene: Scene, cfg: SceneConfig) -> Image.Image:
    image = _background(cfg)
    pen = ImageDraw.Draw(image)
    for o in scene.objects:
        fill = COLORS[o.color]
        x0, y0, x1, y1 = o.box
        if o.shape == "circle":
            pen.ellipse(o.box, fill=fill)
        elif o.shape == "square":
            pen.rectangle(o.box, fill=fill)
        else:
            pen.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    return image


def generate_scenes(n: int, seed: int, cfg: SceneConfig | None = None) -> list[Scene]:
    """``n`` scenes, deterministic from ``seed``; relations cycle and labels alternate per relation."""
    cfg = cfg or SceneConfig()
    rng = random.Random(seed)
    scenes = []
    for i in range(n):
        relation = cfg.relations[i % len(cfg.relations)]
        label = (i // len(cfg.relations)) % 2 == 0
        scenes.append(make_scene(rng, cfg, relation, int(label)))
    order = list(range(n))
    rng.shuffle(order)
    return [scenes[i] for i in order]


@dataclass
class SyntheticSpec:
    """What `vqa-r1 data generate` writes: one split per entry, each from its own seed."""

    splits: dict[str, int] = field(
        default_factory=lambda: {"train": 2000, "validation": 200, "test": 400}
    )
    seed: int = 0
    scene: SceneConfig = field(default_factory=SceneConfig)


def write_dataset(out_dir: str | Path, spec: SyntheticSpec | None = None) -> Path:
    """Write PNGs and a Hugging Face DatasetDict (VSR schema + boxes) under ``out_dir``.

    The dataset is built in a temporary folder and renamed into place, so a killed generation never
    leaves a half-written dataset that a later run would trust.
    """
    from datasets import Dataset, DatasetDict

    spec = spec or SyntheticSpec()
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        splits = {}
        for split_index, (split, n) in enumerate(spec.splits.items()):
            image_dir = tmp / "images" / split
            image_dir.mkdir(parents=True)
            rows = []
            scenes = generate_scenes(n, seed=spec.seed * 1000 + split_index, cfg=spec.scene)
            for i, scene in enumerate(scenes):
                rel_path = f"images/{split}/{i:06d}.png"
                draw(scene, spec.scene).save(tmp / rel_path, compress_level=1)
                rows.append(_row(scene, str((out_dir / rel_path).resolve())))
            splits[split] = Dataset.from_list(rows)
        DatasetDict(splits).save_to_disk(str(tmp / "hf"))
        meta = {"kind": "synthetic-spatial", "seed": spec.seed, "splits": spec.splits}
        meta["scene"] = asdict(spec.scene)
        (tmp / "dataset_info.json").write_text(json.dumps(meta, indent=2))
    return out_dir


def _row(scene: Scene, image_path: str) -> dict:
    return {
        "image_path": image_path,
        "caption": scene.caption,
        "label": scene.label,
        "relation": scene.relation,
        "subj": scene.subj,
        "obj": scene.obj,
        "objects": [o.name for o in scene.objects],
        "boxes": [list(o.box) for o in scene.objects],
    }

"""Procedurally drawn spatial-relation scenes: the embedded default dataset.

Why synthetic: nothing can be downloaded on a laptop or in CI, yet the whole pipeline (data -> SFT ->
GRPO -> evaluation -> tables) must run for real. The scenes follow the VSR schema so that every
component downstream treats them exactly like the real benchmark.

Every caption names a relation that holds (label 1) or whose opposite holds (label 0) with a clear
margin, so labels are never ambiguous. Labels are balanced per relation by construction.

A `DomainShift` redraws the same scenes in another look (the study's "real" domain when no real set
is at hand): the objects, boxes and captions stay those of the "sim" scenes, only the pixels change.
"""

from __future__ import annotations

import hashlib
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
# A letter's ink where letters are told apart by colour as well as shape (the curriculum's cell
# task; cryptograms with ``letter_colours``): a to f in the six colours above, in order. The tiny
# models' two-layer vision towers learn colours from the curriculum but did not learn letter shapes
# from 16,000 tables (docs/models.md, "Pretrained tiny models").
LETTER_COLORS: dict[str, tuple[int, int, int]] = dict(zip("abcdef", COLORS.values(), strict=True))
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# relation -> (its opposite, axis, sign): "a left of b" means x(a) < x(b)
RELATIONS: dict[str, tuple[str, int, int]] = {
    "left of": ("right of", 0, -1),
    "right of": ("left of", 0, 1),
    "above": ("below", 1, -1),
    "below": ("above", 1, 1),
}


@dataclass
class DomainShift:
    """A second look for the same scenes, so that sim-to-real transfer can be studied offline.

    Each effect's amount (0: off, 1: full) is multiplied by ``strength``, so one number dials the
    whole shift while single effects can still be isolated in an ablation. Nothing here moves an
    object's centre, recolours it into another named colour or adds anything with a named colour:
    every caption drawn from the sim scene stays true of the shifted image.

    - ``palette``: each object's colour jittered and the whole image tinted (a camera's white
      balance); the jitter is shrunk until the colour is still far nearer its own name than any
      other, so "red" never turns orange.
    - ``texture``: stripes or speckle inside the objects (real objects are not flat fills).
    - ``noise``: Gaussian pixel noise (sensor noise).
    - ``size``: objects shrunk about their centres, never grown: positions and the ordering along
      each axis stay, and no two objects can come to overlap. The rows' boxes remain the scene's
      slots, whose centres are the drawn objects' centres.
    - ``background``: smooth blotches (low-frequency, photo-like shading) over the base background,
      plus grey clutter strokes; grey so that nothing in the clutter has a colour a caption names.

    The random draws come from ``seed`` and the scene itself (its objects and boxes), not from a
    running generator: an image looks the same whichever order or process draws it, and the sim
    scenes, drawn without a shift, are untouched.
    """

    strength: float = 1.0
    seed: int = 0
    palette: float = 1.0
    texture: float = 1.0
    noise: float = 1.0
    size: float = 1.0
    background: float = 1.0

    def __post_init__(self) -> None:
        for name in ("strength", "palette", "texture", "noise", "size", "background"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"domain shift {name} must lie in [0, 1], got {value}")

    def amount(self, effect: str) -> float:
        return self.strength * getattr(self, effect)


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
    # learns far more slowly, docs/experiments/demo.md)
    distinct_colors: bool = False
    # None: the "sim" look. A DomainShift draws the very same scenes in a shifted look.
    shift: DomainShift | None = None

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


def scene_config_dict(cfg: SceneConfig) -> dict:
    """The settings as stored with a dataset and hashed into its cache key.

    A config without a shift is described exactly as before shifts existed, so the "sim" datasets
    keep their cache folders and their dataset_info.json.
    """
    out = asdict(cfg)
    if cfg.shift is None:
        del out["shift"]
    return out


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
    if cfg.shift is not None:
        return _draw_shifted(scene, cfg, cfg.shift)
    image = _background(cfg)
    pen = ImageDraw.Draw(image)
    for o in scene.objects:
        _fill_shape(pen, o.shape, o.box, COLORS[o.color])
    return image


def _fill_shape(pen: ImageDraw.ImageDraw, shape: str, box: tuple, fill: int | tuple) -> None:
    x0, y0, x1, y1 = box
    if shape == "circle":
        pen.ellipse(box, fill=fill)
    elif shape == "square":
        pen.rectangle(box, fill=fill)
    else:
        pen.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)


def _scene_rng(scene: Scene, shift: DomainShift):
    import numpy as np

    key = f"{shift.seed}|" + ";".join(f"{o.name}@{o.box}" for o in scene.objects)
    key += f"|{scene.caption}"
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


def _named_colour(colour, own: str, ratio: float = 0.6) -> bool:
    """Is ``colour`` still ``own``: nearer it, by ``ratio``, than any other named colour?"""
    import numpy as np

    dist = {name: float(np.linalg.norm(colour - np.array(rgb))) for name, rgb in COLORS.items()}
    others = min(d for name, d in dist.items() if name != own)
    return dist[own] < ratio * others


def _texture_depth(colour, own: str, depth: float) -> float:
    """The deepest texture (a relative brightness swing) whose light and dark parts keep the name."""
    for _ in range(6):
        if all(_named_colour(colour * f, own, 1.0) for f in (1 - depth, 1 + depth)):
            return depth
        depth /= 2
    return 0.0


def _shifted_colour(rng, own: str, cast, amount: float):
    import numpy as np

    base = np.array(COLORS[own], dtype=np.float32)
    jitter = rng.uniform(-45.0, 45.0, 3) * amount
    for _ in range(8):
        colour = np.clip(base + jitter + cast, 0, 255)
        if _named_colour(colour, own):
            return colour
        jitter = jitter / 2
        cast = cast / 2
    return base


def _draw_shifted(scene: Scene, cfg: SceneConfig, shift: DomainShift) -> Image.Image:
    import numpy as np

    rng = _scene_rng(scene, shift)
    n = cfg.image_size
    pixels = np.asarray(_background(cfg), dtype=np.float32).copy()

    bg = shift.amount("background")
    if bg > 0:
        # photo-like shading: a coarse random field, smoothly upsampled
        coarse = rng.uniform(-1.0, 1.0, (4, 4, 3)).astype(np.float32)
        coarse_img = Image.fromarray(((coarse + 1) * 127.5).astype(np.uint8), "RGB")
        smooth = np.asarray(coarse_img.resize((n, n), Image.BICUBIC), dtype=np.float32)
        pixels += (smooth / 127.5 - 1.0) * 35.0 * bg
        clutter = Image.new("L", (n, n), 0)
        pen = ImageDraw.Draw(clutter)
        # the same strokes at every strength (a weaker shift draws a prefix of them), so that a
        # sweep over the strength changes how much clutter there is, not where it is
        strokes = rng.integers(0, n, (8, 4))
        widths = rng.integers(1, 3, 8)
        for i in range(int(round(7 * bg))):
            pen.line(tuple(int(v) for v in strokes[i]), fill=255, width=int(widths[i]))
        mask = np.asarray(clutter, dtype=np.float32)[..., None] / 255.0
        grey = float(rng.uniform(90, 170))
        pixels = pixels * (1 - 0.6 * bg * mask) + grey * 0.6 * bg * mask

    palette = shift.amount("palette")
    cast = rng.uniform(-20.0, 20.0, 3).astype(np.float32) * palette
    pixels += cast

    texture = shift.amount("texture")
    shrink = shift.amount("size")
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32)
    for o in scene.objects:
        colour = _shifted_colour(rng, o.color, cast, palette)
        scale = 1.0 - rng.uniform(0.0, 0.4) * shrink
        cx, cy = o.center
        half = (o.box[2] - o.box[0]) * scale / 2
        box = (cx - half, cy - half, cx + half, cy + half)
        mask_img = Image.new("L", (n, n), 0)
        _fill_shape(ImageDraw.Draw(mask_img), o.shape, box, 255)
        mask = np.asarray(mask_img, dtype=np.float32)[..., None] / 255.0
        fill = np.broadcast_to(colour, (n, n, 3)).astype(np.float32)
        if texture > 0:
            depth = _texture_depth(np.clip(colour, 0, 255), o.color, 0.35 * texture)
            if rng.random() < 0.5:  # stripes at a random angle and period
                angle = rng.uniform(0, np.pi)
                period = rng.uniform(3.0, 7.0)
                phase = (xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period
                factor = 1.0 + depth * np.sign(np.sin(phase))
            else:  # speckle
                factor = 1.0 + depth * rng.uniform(-1.0, 1.0, (n, n))
            fill = fill * factor[..., None]
        pixels = pixels * (1 - mask) + fill * mask

    noise = shift.amount("noise")
    if noise > 0:
        pixels += rng.normal(0.0, 12.0 * noise, pixels.shape)
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), "RGB")


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

    def __post_init__(self) -> None:
        negative = {k: n for k, n in self.splits.items() if n < 0}
        if negative:
            raise ValueError(f"scene counts must be 0 or more, got {negative}")


def write_dataset(
    out_dir: str | Path,
    spec: SyntheticSpec | None = None,
    carry: tuple[str, ...] = (),
    keep_existing: bool = False,
) -> Path:
    """Write PNGs and a Hugging Face DatasetDict (VSR schema + boxes) under ``out_dir``.

    The dataset is built in a temporary folder and renamed into place, so a killed generation never
    leaves a half-written dataset that a later run would trust. ``carry``: entries of an existing
    ``out_dir`` kept (``io.atomic_dir``); the caller has checked that it holds nothing else.
    ``keep_existing``: a cache folder (the same content whoever writes it): one another process
    finished first is kept, not replaced under its readers' feet.
    """
    from datasets import Dataset, DatasetDict

    spec = spec or SyntheticSpec()
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, carry=carry, keep_existing=keep_existing) as tmp:
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
        meta["scene"] = scene_config_dict(spec.scene)
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

"""P2: SmolVLM generation with the cache against the no-cache workaround, per answer length.

A published project generated SmolVLM answers with ``use_cache=False`` because image tokens were
lost on cached decoding steps (models/generation.py). This measures what that workaround costs: the
same ``Generator`` (``models/generation.py``, which suppresses the image token so that uncached
decoding cannot break), the same inputs, greedy, with the cache on and off, at 64, 128 and 256 new
tokens, and checks that both give identical token ids.

The model is the shipped pretrained tiny SmolVLM (Idefics3 architecture) with image splitting on,
as SmolVLM runs: its image processor resizes an image to 448 pixels on the longest side and splits
it into 4 x 4 tiles of 112 plus a downscaled global image, 17 x 16 = 272 image tokens against about
100 text tokens. The end-of-answer token is held back until the requested length (``min_new_tokens``
in the model's generation config), so every run generates exactly that many tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import Result, Timing, side_by_side
from benchmarks.evaluation import where_time_goes

MODEL = "tiny-smolvlm-pretrained"
LONGEST_EDGE = 448  # 4 x 4 tiles of the vision encoder's 112 pixels, plus the global image


@dataclass(frozen=True)
class Size:
    lengths: tuple[int, ...]  # new tokens; the last is the Result's main ratio
    items: int  # questions, each generated at batch 1 as the workaround did


FULL = Size(lengths=(64, 128, 256), items=2)
QUICK = Size(lengths=(64, 128), items=1)


def load_splitting_model() -> Any:
    """The shipped tiny SmolVLM, loaded through our loader, its processor set to split images."""
    from vqa_r1.models.device import resolve_device
    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    config = load_config("evaluate", MODEL)
    loaded = load_model(config, device=resolve_device(config.model.device))
    image_processor = loaded.processor.image_processor
    tile = image_processor.max_image_size["longest_edge"]
    image_processor.do_image_splitting = True
    image_processor.size = {"longest_edge": LONGEST_EDGE}
    loaded.model.eval()
    return loaded, config, tile


def items(n: int) -> tuple[list[Any], list[str]]:
    """The first ``n`` scenes of the recipe's test split and their questions."""
    from PIL import Image

    from vqa_r1.data.datasets import open_split
    from vqa_r1.data.prompts import problem_text
    from vqa_r1.recipes import load_config

    config = load_config("evaluate", MODEL)
    rows = open_split(config.data, config.eval.split).select(range(n))
    images = [Image.open(p).convert("RGB") for p in rows["image_path"]]
    return images, [problem_text(c) for c in rows["caption"]]


def run(quick: bool, repeats: int) -> Result:
    import torch

    from vqa_r1.models.generation import GenerationSettings, Generator

    size = QUICK if quick else FULL
    loaded, config, tile = load_splitting_model()
    if config.train.num_threads:
        torch.set_num_threads(config.train.num_threads)
    images, questions = items(size.items)
    generator = Generator(loaded, GenerationSettings(max_new_tokens=max(size.lengths), cache="on"))
    inputs = [generator._inputs([img], [q]) for img, q in zip(images, questions, strict=True)]
    image_id = loaded.adapter.image_token_id(loaded.processor)
    prompt = inputs[0]["input_ids"][0]
    n_image = int((prompt == image_id).sum())
    tiles = int(inputs[0]["pixel_values"].shape[1])

    def side(use_cache: bool, n: int) -> Callable[[], list[list[int]]]:
        def go() -> list[list[int]]:
            loaded.model.generation_config.min_new_tokens = n
            return [generator._generate_ids(x, use_cache, n)[0].tolist() for x in inputs]

        return go

    per_length: dict[int, tuple[Timing, Timing]] = {}
    same: dict[int, bool] = {}
    full_length = True
    distinct: set[int] = set()
    try:
        for i, n in enumerate(size.lengths):
            a, b, out_a, out_b = side_by_side(
                side(True, n),
                side(False, n),
                repeats,
                labels=(f"cache on, {n} new tokens", f"cache off (the workaround), {n} new tokens"),
                warmup=i == 0,  # once: imports, allocator; later lengths run the same code
            )
            per_length[n] = (a, b)
            reference = out_a[0]
            same[n] = all(o == reference for o in out_a + out_b)
            full_length &= all(len(ids) == n for ids in reference)
            distinct |= {t for ids in reference for t in ids}
    finally:
        loaded.model.generation_config.min_new_tokens = None

    main = size.lengths[-1]
    ours, baseline = per_length[main]
    profile = {}
    for label, use_cache in (("cache on", True), ("cache off", False)):
        go = side(use_cache, main)
        try:
            profile[f"where the time goes, {label}, {main} new tokens (one untimed run)"] = (
                where_time_goes(go, loaded.model, processor=False)
            )
        finally:
            loaded.model.generation_config.min_new_tokens = None
    lengths = {
        f"{n} new tokens": f"cache on {a.median:.3f} s [{a.low:.3f}, {a.high:.3f}], off "
        f"{b.median:.3f} s [{b.low:.3f}, {b.high:.3f}]: {b.median / a.median:.2f}x"
        for n, (a, b) in per_length.items()
    }
    return Result(
        id="P2",
        title="SmolVLM generation: cache vs the no-cache workaround",
        ours=ours,
        baseline=baseline,
        kind="speedup",
        goal=5.0,  # at 256 new tokens
        floor=2.0,  # at 128 new tokens (quick)
        checks={
            "identical token ids": all(same.values()),
            "every run generated the requested length": full_length,
        },
        details={
            "model": f"{MODEL} (Idefics3), float32, {torch.get_num_threads()} thread(s)",
            "image splitting": f"longest edge {LONGEST_EDGE} px, tiles of {tile} px: {tiles} "
            f"images per question (grid and global)",
            "prompt": f"{len(prompt)} tokens, of which {n_image} image tokens "
            f"({100 * n_image / len(prompt):.0f}%)",
            "questions": f"{size.items}, each generated at batch 1",
            "main ratio": f"at {main} new tokens",
            **lengths,
            "identical token ids per length": {f"{n}": v for n, v in same.items()},
            "distinct token ids generated": len(distinct),
            **profile,
        },
        notes=[
            "Without the cache every new token re-reads the whole sequence (image tokens "
            "included), so the cost per token grows with the prompt and with the answer so far; "
            "with the cache each step reads one token. The ratio grows with the answer length.",
            "The image token is suppressed on both sides (models/generation.py): uncached "
            "decoding would break on an emitted image token.",
        ],
    )

"""Open datasets in the VSR schema and turn them into trainer rows.

Both the synthetic scenes and a local VSR copy are folders written with ``save_to_disk`` whose rows
carry ``image_path, caption, label, relation, subj, obj``. A folder holding a public release (VSR,
Rel3D, SpatialSense, DrivingVQA) is converted once into that form first (data/formats/). Every
command and builder that takes a dataset opens it here (``open_dataset`` / ``load_split``), so
all of them accept the same folders. Missing or unreadable images are an error with the count and
the first paths (data/images.py). True/False labels must be 0/1 or booleans: anything else is an
error at load naming the column and the values, never read as False.

Multiple-choice rows (DrivingVQA) carry their own question (``problem``), target (``solution``,
``reasoning``) and grounding (``gt_boxes``, ``gt_box_labels``, ``answer_type``): the True/False
templates do not fit them, and the box and choice rewards read those columns by name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vqa_r1 import ranks
from vqa_r1.data import formats
from vqa_r1.data.cryptogram import CRYPTOGRAM_INSTRUCTION
from vqa_r1.data.curriculum import scene_fingerprint
from vqa_r1.data.formats.common import check_labels
from vqa_r1.data.images import DEFAULT_HINT, check_image_paths, image_column
from vqa_r1.data.prompts import (
    COUNT_INSTRUCTION,
    IMAGE_PLACEHOLDER,
    placeholder_count,
    problem_text,
    sft_completion,
    solution_text,
)
from vqa_r1.data.synthetic import (
    RELATIONS,
    DomainShift,
    SceneConfig,
    SyntheticSpec,
    generate_scenes,
    scene_config_dict,
    write_dataset,
)
from vqa_r1.errors import UserError
from vqa_r1.paths import cache_root

log = logging.getLogger(__name__)
VSR_COLUMNS = ("image_path", "caption", "label", "relation", "subj", "obj")


def synthetic_spec(data_cfg: Any) -> Any:
    """The generator settings a DataConfig describes.

    The "shifted" domain is the sim scenes of the same seed drawn in another look, so a model
    trained on one is tested on the very same claims in the other.
    """
    shift = None
    if data_cfg.synthetic_domain == "shifted":
        shift = DomainShift(
            strength=data_cfg.synthetic_shift_strength, seed=data_cfg.synthetic_seed
        )
    return SyntheticSpec(
        splits={
            "train": data_cfg.synthetic_train,
            "validation": data_cfg.synthetic_validation,
            "test": data_cfg.synthetic_test,
        },
        seed=data_cfg.synthetic_seed,
        scene=SceneConfig(
            min_objects=data_cfg.synthetic_min_objects,
            max_objects=data_cfg.synthetic_max_objects,
            relations=tuple(data_cfg.synthetic_relations),
            background_style=data_cfg.synthetic_background,
            margin=data_cfg.synthetic_margin,
            object_size=tuple(data_cfg.synthetic_object_size),
            distinct_colors=data_cfg.synthetic_distinct_colors,
            shift=shift,
        ),
    )


def synthetic_target(data_cfg: Any) -> Path:
    """Where the synthetic dataset of a DataConfig is (or will be) cached, generating nothing:
    a dry run names the same folder as the launch, so its configs match a launched run's."""
    spec = synthetic_spec(data_cfg)
    key = json.dumps([spec.splits, spec.seed, scene_config_dict(spec.scene), 2])
    return cache_root() / "data" / f"synthetic-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def synthetic_dataset_dir(data_cfg: Any) -> Path:
    """Generate (once, cached by its parameters) the synthetic dataset a DataConfig describes.

    In a job with several processes rank 0 generates and the others wait for the folder
    (``write_dataset`` renames it into place complete), then all read it. This runs before the
    Trainer creates the process group, so the wait is on the folder, not a barrier
    (vqa_r1.ranks.wait_for); the cache must be on a filesystem all ranks see, like the run
    directory. Two ranks generating at once would replace the folder under each other's feet.
    """
    target = synthetic_target(data_cfg)
    spec = synthetic_spec(data_cfg)
    ready = (target / "hf").exists
    if ready():
        return target
    if ranks.is_main():
        log.info("generating synthetic dataset into %s", target)
        write_dataset(target, spec, keep_existing=True)  # another job may write it too
    else:
        ranks.wait_for(ready, f"the synthetic dataset {target}")
    return target


def heldout_fingerprints(data_configs: Iterable[Any]) -> set[str]:
    """Fingerprints of every validation and test scene of these (the shipped recipes') data.

    Pretraining draws its scenes from other seeds and also drops any scene found here, so no
    held-out scene is ever trained on (data/curriculum.py; asserted in tests/test_pretrain.py).
    Scenes are regenerated from their seeds (no images drawn): about 0.1 s per recipe.
    """

    found: set[str] = set()
    seen: set[str] = set()
    for data in data_configs:
        if data.dataset != "synthetic":
            continue
        spec = synthetic_spec(data)
        key = repr(spec)
        if key in seen:
            continue
        seen.add(key)
        for index, (split, n) in enumerate(spec.splits.items()):
            if split != "train":
                scenes = generate_scenes(n, spec.seed * 1000 + index, spec.scene)
                found |= {scene_fingerprint(s) for s in scenes}
    return found


def dataset_dir(data_cfg: Any) -> Path:
    """The dataset folder a DataConfig names (the synthetic one generated first).

    In a job with several processes a release-format folder is also converted by rank 0 alone
    (with the default ``max_pixels``, the one training reads with) while the others wait for the
    converted folder, as for the synthetic dataset.
    """
    if data_cfg.dataset == "synthetic":
        return synthetic_dataset_dir(data_cfg)
    path = Path(data_cfg.dataset)
    options = release_options(data_cfg)
    if ranks.world_size() > 1 and formats.detect(path) is not None:
        if ranks.is_main():
            formats.resolve(path, options)
        else:
            ranks.wait_for(lambda: _converted(path, options), f"the conversion of {path}")
    return path


def _converted(path: Path, options: dict) -> bool:
    fmt = formats.detect(path)
    if fmt is None:
        return False
    target = formats.cache_dir(fmt, path, formats.format_options(fmt, options))
    return (target / "hf").exists()


def release_options(data_cfg: Any) -> dict:
    """The settings a release conversion reads (each format takes only its own)."""
    return {
        "max_pixels": int(data_cfg.drivingvqa_max_pixels),
        "multiple_questions": data_cfg.drivingvqa_multiple_questions,
    }


def open_split(data_cfg: Any, split: str, check_images: bool = True) -> Any:
    """``load_split`` of the dataset a DataConfig names, with its release settings and its
    images as ``data.images`` says (a blind control's: data/blind.py)."""
    from vqa_r1.data.blind import blind_split

    ds = load_split(
        dataset_dir(data_cfg),
        split,
        check_images,
        options=release_options(data_cfg),
        images_per_row=getattr(data_cfg, "images_per_row", None),
    )
    return blind_split(ds, getattr(data_cfg, "images", "real"), data_cfg.subset_seed)


def open_dataset(path: str | Path, options: dict | None = None) -> tuple[dict[str, Any], dict]:
    """Every split of a dataset folder, opened as ``--dataset`` opens it, and its provenance.

    ``path``: a folder saved with ``save_to_disk`` or a release folder (converted once, cached).
    The provenance names the folder and, for a release, the format and the report of the
    conversion (split folder or file, image folder, dropped items). Images are not checked here:
    ``load_split`` checks those of the split it returns.
    """
    from datasets import DatasetDict, load_from_disk

    path = Path(path)
    resolved = formats.resolve(path, options)
    root = resolved / "hf" if (resolved / "hf").exists() else resolved
    try:
        loaded = load_from_disk(str(root))
    except Exception as err:
        raise UserError(f"{path}: not a dataset saved with save_to_disk ({err})") from None
    splits = dict(loaded) if isinstance(loaded, DatasetDict) else {"": loaded}
    provenance: dict[str, Any] = {"folder": str(path.resolve())}
    report = formats.report_of(resolved)
    if report is not None:
        provenance["release"] = report
        provenance["converted"] = str(resolved)
    return splits, provenance


def load_split(
    path: str | Path,
    split: str,
    check_images: bool = True,
    max_pixels: int | None = None,
    options: dict | None = None,
    images_per_row: int | None = None,
) -> Any:
    """One split of a dataset folder (VSR schema, or a release format converted once), with its
    images verified and its labels checked. ``options``: the release settings
    (``release_options``); ``max_pixels`` alone: DrivingVQA's pixel limit. ``images_per_row``:
    the most images a row may hold (``data.images_per_row``); each row's image count is checked
    against it and against its question's ``<image>`` placeholders (check_image_counts)."""
    options = dict(options or {})
    if max_pixels is not None:
        options["max_pixels"] = int(max_pixels)
    path = Path(path)
    ds, resolved = _split(path, split, options)
    column = image_column(ds)
    if check_images and column:
        where = f"{path} [{split}]"
        hint = formats.images_hint(resolved) or DEFAULT_HINT
        try:
            check_image_paths(ds[column], where, hint)
        except UserError:
            if formats.report_of(resolved) is None:
                raise
            # a conversion whose images moved or arrived since: resolve them anew (or fail
            # with the conversion's own message, leaving no stale cache)
            formats.reconvert(path, options)
            ds, resolved = _split(path, split, options)
            check_image_paths(ds[column], where, hint)
    check_image_counts(ds, f"{path} [{split}]", images_per_row)
    return ds


def refuse_several_images(ds: Any, what: str, where: str) -> None:
    """For a consumer that reads one image per row (prompt tuning): rows listing several are
    refused in one line, not read as their first image."""
    if "image_paths" in ds.column_names or "images" in ds.column_names:
        raise UserError(
            f"{where}: {what} takes one image per row and these rows list several (image_paths); "
            "SFT, GRPO and evaluation take them"
        )


def image_counts(ds: Any) -> list[int]:
    """Images per row: 1 for ``image_path``/``image`` rows, the list's length for
    ``image_paths``/``images`` rows."""
    for name in ("image_paths", "images"):
        if name in ds.column_names:
            return [len(v) for v in ds[name]]
    return [1] * len(ds)


def check_image_counts(ds: Any, where: str, images_per_row: int | None = None) -> None:
    """Every row's images match its question's ``<image>`` placeholders (when it has any), no row
    is without images, and none holds more than ``images_per_row``: one line naming the first
    row that does not, before anything is queued (build.check_dataset reads the split)."""
    counts = image_counts(ds)
    if not counts:
        return
    if "problem" in ds.column_names:
        questions = list(ds["problem"])
    elif "caption" in ds.column_names:
        questions = list(ds["caption"])
    else:
        questions = [""] * len(counts)
    for i, (n, question) in enumerate(zip(counts, questions, strict=True)):
        marks = placeholder_count(question or "")
        if n == 0:
            raise UserError(f"{where}: row {i} has no image; every row needs at least one")
        if marks and marks != n:
            raise UserError(
                f"{where}: row {i} has {n} image(s) and {marks} {IMAGE_PLACEHOLDER} "
                f"placeholder(s) in its question; give one placeholder per image, in order, "
                "or none (the images then come first)"
            )
    most = max(counts)
    if images_per_row is not None and most > images_per_row:
        row = counts.index(most)
        raise UserError(
            f"{where}: row {row} has {most} images, more than data.images_per_row="
            f"{images_per_row}; set --set data.images_per_row={most} (it is also vLLM's "
            "limit_mm_per_prompt and the memory plan's images per prompt)"
        )


def _split(path: Path, split: str, options: dict) -> tuple[Any, Path]:
    splits, provenance = open_dataset(path, options)
    if "" in splits:  # a single Dataset saved without splits
        ds = splits[""]
    elif split not in splits:
        raise UserError(f"{path}: no split {split!r}; available: {', '.join(splits)}")
    else:
        ds = splits[split]
    missing = [c for c in ("caption", "label") if c not in ds.column_names]
    if not {"image_path", "image", "image_paths", "images"} & set(ds.column_names):
        missing.append("image_path (or image_paths, a list per row)")
    if missing:
        raise UserError(
            f"{path} [{split}]: missing column(s) {missing}; the VSR schema is {VSR_COLUMNS}"
        )
    if "solution" not in ds.column_names:  # True/False claims (choice rows carry letter sets)
        check_labels(ds["label"], f"{path} [{split}]")
    return ds, Path(provenance.get("converted", path))


def subset(ds: Any, num_samples: int | None, seed: int) -> Any:
    """A seeded subset: the same rows on every restart of a requeued job."""
    if num_samples is None or num_samples >= len(ds):
        return ds
    return ds.shuffle(seed=seed).select(range(num_samples))


def with_images(ds: Any) -> Any:
    """The decoded images TRL reads: ``image`` for one per row, ``images`` (a list, TRL's
    multi-image column) for rows whose ``image_paths`` list them."""
    from datasets import Image, Sequence

    if "image" in ds.column_names or "images" in ds.column_names:
        return ds
    if "image_paths" in ds.column_names:
        paths = [list(p) for p in ds["image_paths"]]
        return ds.add_column("images", paths).cast_column("images", Sequence(Image()))
    return ds.add_column("image", list(ds["image_path"])).cast_column("image", Image())


def rows_instruction(ds: Any) -> str | None:
    """The instruction of rows the family's True/False one does not fit (training and evaluation
    alike, when ``data.instruction`` is not set): counting rows ask for a number, cryptogram rows
    for ``<chars>`` then ``<answer>``; None for the others (the family's own)."""
    columns = set(ds.column_names)
    if "answer_type" in columns and len(ds) > 0 and set(ds["answer_type"]) == {"number"}:
        return COUNT_INSTRUCTION
    if "coded_message" in columns:
        return CRYPTOGRAM_INSTRUCTION
    return None


def trainer_rows(
    ds: Any,
    adapter: Any,
    kind: str,
    instruction: str | None = None,
    with_reasoning: bool = True,
    rationale: str = "claim",
) -> Any:
    """Rows for TRL: conversational ``prompt`` plus ``completion`` (SFT) or ``solution`` (GRPO).

    A row's own ``problem`` and ``solution`` win over the True/False templates. The claim rationale
    is written only when every relation is one the synthetic table can negate (Rel3D or VSR
    relations such as "contains" have no opposite there), else the target is the answer alone.
    """

    columns = set(ds.column_names)
    if instruction is None:
        instruction = rows_instruction(ds)
    has_scene = {"subj", "relation"} <= columns and set(ds["relation"]) <= set(RELATIONS)
    own_solution = "solution" in columns
    own_reasoning = "reasoning" in columns  # a row's own rationale wins over the templates
    if rationale == "scene" and "boxes" not in columns and not (own_solution or own_reasoning):
        raise UserError(
            f"data.rationale={rationale} needs object boxes (the synthetic dataset has them)"
        )

    def convert(row: dict) -> dict:
        question = row["problem"] if "problem" in columns else problem_text(row["caption"])
        images = len(row["image_paths"]) if "image_paths" in columns else 1
        out = {"prompt": adapter.messages(question, instruction, images=images)}
        if kind == "sft":
            if own_solution:
                text = row["solution"]
                if with_reasoning and row.get("reasoning"):
                    text = f"<think> {row['reasoning']} </think> {text}"
            elif with_reasoning and row.get("reasoning"):  # a row's own rationale (two-image)
                text = f"<think> {row['reasoning']} </think> {solution_text(row['label'])}"
            else:
                text = sft_completion(row, with_reasoning and has_scene, rationale)
            if adapter.thinking:  # the template opened the block: the target continues it
                text = text.removeprefix("<think>").lstrip()
            out["completion"] = [{"role": "assistant", "content": [{"type": "text", "text": text}]}]
        else:
            out["solution"] = row["solution"] if own_solution else solution_text(row["label"])
        return out

    # the box, choice and cryptogram rewards get these by name (TRL passes extra dataset columns
    # as kwargs); word_count: a cryptogram's curriculum stage
    keep = {
        "image_path",
        "image_paths",
        "caption",
        "label",
        "relation",
        "gt_boxes",
        "gt_box_labels",
        "answer_type",
        "coded_message",
        "decoded_message",
        "word_count",
    }
    if kind != "sft":
        keep.update(("solution", "reasoning"))  # reasoning: the reasoning_steps reward's reference
    drop = [c for c in ds.column_names if c not in keep and c not in ("image", "images")]
    # in memory: concurrent jobs (sweep elements) on one shared dataset folder must not race on an
    # on-disk map cache beside it; the trainers' own maps of an in-memory dataset stay in memory too
    return with_images(ds.map(convert, remove_columns=drop, keep_in_memory=True))

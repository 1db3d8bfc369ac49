"""Training sets with a controlled shortcut: the label predictable from the text, or from the image.

Why: the study asks whether reasoning training makes a model rely less on shortcuts. That needs
training sets whose shortcut strength is a number chosen in advance, measured the way the published
study measured it: a simple classifier that sees only one modality, trained and scored on the kept
training rows. Its accuracy is "the bias" (0.5: none on balanced labels, 1.0: the shortcut alone
answers every row).

How a target is reached: rows are split into groups the shortcut classifier can tell apart (the
relation for the text kind, a visual group for the visual kind). Each group has a *major* label,
kept in full, and a *minor* label undersampled to ``k`` times the major count (when the minor
label is already the scarcer one past that ratio, the major is cut instead, so ``k = 1`` balances
every group). The majors alternate over the groups, so the kept set stays near 50/50 overall and a
constant answer gains nothing; the shortcut is in the groups. The classifier's accuracy falls as
``k`` grows, and ``k`` is found by bisection on the classifier's measured accuracy, not on a
formula, so the reported number is the one a recomputation gives. Which rows go is a seeded
permutation per (group, label), of which a prefix is kept: the same seed gives the same rows.

The visual kind's classifier is a logistic regression on a fixed 16-number image descriptor: the
mean colour saturation (max minus min channel) in each cell of a 4x4 grid. Saturation is where the
coloured objects are and barely depends on a pale background, so the descriptor says where the
colour masses sit and nothing about the caption. The visual groups are the two halves (split at
the median) of the descriptor's first principal component on the source split, i.e. the layout
direction along which images differ most; the logistic regression sees the whole descriptor, not
the group, so the bias it reports is what any linear reader of that descriptor could exploit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.claims import inside
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_dir
from vqa_r1.metrics import one_sided_binomial_p

KINDS = ("text", "visual")
TOLERANCE = 0.01
CARD = "bias_card.json"
_CARD_VERSION = 1
_GRID = 4


# ------------------------------------------------------------------------------ classifiers


def _one_hot(relations: list[str]):
    import numpy as np

    names = sorted(set(relations))
    index = {r: i for i, r in enumerate(names)}
    x = np.zeros((len(relations), len(names)), dtype=np.float64)
    x[np.arange(len(relations)), [index[r] for r in relations]] = 1.0
    return x


def _fit_accuracy(x, y, scale: bool) -> tuple[int, int]:
    """Correct predictions of a logistic regression fitted and scored on the same rows."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(y)
    if len(y) == 0:
        return 0, 0
    if len(set(y.tolist())) < 2:  # one label left: the classifier answers it always
        return len(y), len(y)
    if scale:
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    else:
        model = LogisticRegression(max_iter=1000)
    model.fit(x, y)
    return int((model.predict(x) == y).sum()), len(y)


def text_bias(ds: Any) -> float:
    """Accuracy of the text-only classifier (logistic regression on the one-hot relation)."""
    correct, n = _fit_accuracy(_one_hot(list(ds["relation"])), _labels(ds), scale=False)
    return correct / n if n else 0.0


def image_descriptor(path: str | Path):
    """Mean saturation per cell of a 4x4 grid, in [0, 1]: where the colour masses are."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").resize((8 * _GRID, 8 * _GRID), Image.BILINEAR)
    pixels = np.asarray(small, dtype=np.float32)
    saturation = pixels.max(axis=-1) - pixels.min(axis=-1)
    return saturation.reshape(_GRID, 8, _GRID, 8).mean(axis=(1, 3)).ravel() / 255.0


def _descriptors(ds: Any):
    import numpy as np

    return np.stack([image_descriptor(p) for p in ds["image_path"]])


def visual_bias(ds: Any) -> float:
    """Accuracy of the image-only classifier (logistic regression on `image_descriptor`)."""
    correct, n = _fit_accuracy(_descriptors(ds), _labels(ds), scale=True)
    return correct / n if n else 0.0


def _labels(ds: Any) -> list[int]:
    return [int(v) for v in ds["label"]]


# ------------------------------------------------------------------------------ the solver


def _visual_groups(x) -> list[str]:
    import numpy as np

    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    axis = vt[0] * np.sign(vt[0][np.argmax(np.abs(vt[0]))])  # a fixed sign: same groups anywhere
    score = centred @ axis
    median = float(np.median(score))
    return ["visual-high" if s > median else "visual-low" for s in score]


class _Solver:
    """Keep counts per (group, label) as a function of the minor/major ratio ``k``."""

    def __init__(self, groups: list[str], labels: list[int], seed: int) -> None:
        import numpy as np

        self.labels = np.asarray(labels)
        self.names = sorted(set(groups))
        groups_arr = np.asarray(groups)
        rng = np.random.default_rng(seed)
        self.rows: dict[tuple[str, int], Any] = {}
        self.major: dict[str, int] = {}
        for i, g in enumerate(self.names):
            for label in (0, 1):
                idx = np.flatnonzero((groups_arr == g) & (self.labels == label))
                self.rows[(g, label)] = rng.permutation(idx)
            n1, n0 = len(self.rows[(g, 1)]), len(self.rows[(g, 0)])
            # the more frequent label stays the major; ties alternate so labels stay balanced
            self.major[g] = (1 if n1 > n0 else 0) if n1 != n0 else (1 if i % 2 == 0 else 0)

    def counts(self, k: float) -> dict[tuple[str, int], int]:
        out = {}
        for g in self.names:
            big, small = self.major[g], 1 - self.major[g]
            n_big, n_small = len(self.rows[(g, big)]), len(self.rows[(g, small)])
            if k * n_big <= n_small:
                out[(g, big)], out[(g, small)] = n_big, int(round(k * n_big))
            else:
                out[(g, big)], out[(g, small)] = min(n_big, int(round(n_small / k))), n_small
        return out

    def keep(self, k: float):
        import numpy as np

        counts = self.counts(k)
        kept = [self.rows[key][:n] for key, n in counts.items()]
        return np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=int)


def _solve(x, groups, labels, target: float, seed: int, scale: bool, kind: str):
    """The ratio ``k`` whose kept rows bring the classifier closest to ``target``."""
    solver = _Solver(groups, labels, seed)
    seen: dict[float, tuple[float, int, int]] = {}

    def accuracy(k: float) -> float:
        if k not in seen:
            rows = solver.keep(k)
            correct, n = _fit_accuracy(x[rows], solver.labels[rows], scale)
            seen[k] = (correct / n if n else 0.0, correct, n)
        return seen[k][0]

    high, low = accuracy(0.0), accuracy(1.0)  # k = 0: no minor rows; k = 1: balanced groups
    if not low - TOLERANCE <= target <= high + TOLERANCE:
        raise UserError(
            f"a {kind} bias of {target} cannot be reached from these data: undersampling reaches "
            f"{low:.3f} to {high:.3f} (the {kind} classifier's accuracy on the kept training rows)"
        )
    lo, hi = 0.0, 1.0  # accuracy falls as k grows
    for _ in range(30):
        mid = (lo + hi) / 2
        if accuracy(mid) > target:
            lo = mid
        else:
            hi = mid
        if abs(accuracy(mid) - target) <= TOLERANCE / 10:
            break
    best = min(seen, key=lambda k: (abs(seen[k][0] - target), k))
    achieved = seen[best][0]
    if abs(achieved - target) > TOLERANCE:
        raise UserError(
            f"a {kind} bias of {target} is not reachable within ±{TOLERANCE} from these data "
            f"(closest: {achieved:.3f}; reachable range {low:.3f} to {high:.3f}): the split is "
            "too small for this resolution"
        )
    return solver, best, seen[best]


# ------------------------------------------------------------------------------ building


def _params(source: Path, kind: str, target: float, seed: int, split: str) -> dict:
    return {
        "version": _CARD_VERSION,
        "source": str(source),
        "kind": kind,
        "target": float(target),
        "seed": int(seed),
        "split": split,
    }


def _existing_card(out: Path, params: dict) -> dict | None:
    try:
        card = json.loads((out / CARD).read_text())
    except (OSError, ValueError):
        return None
    if (out / "hf" / "dataset_dict.json").exists() and all(
        card.get(k) == v for k, v in params.items()
    ):
        return card
    return None


def _per_relation_label(ds: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for relation, label in zip(ds["relation"], _labels(ds), strict=True):
        cell = out.setdefault(relation, {"0": 0, "1": 0})
        cell[str(label)] += 1
    return dict(sorted(out.items()))


def build_biased_dataset(
    source: str | Path,
    out: str | Path,
    kind: str,
    target: float,
    seed: int = 0,
    split: str = "train",
    carry: tuple[str, ...] = (),
) -> dict:
    """Write ``source`` with its ``split`` undersampled to a ``kind`` bias of ``target``; the card.

    ``source`` is any folder ``--dataset`` takes (saved with ``save_to_disk``, or a release folder,
    opened through its conversion): the same loader, so the biased set holds the same rows with
    the same resolved image paths as training on the source would. The other splits are copied
    untouched, so evaluation stays on the unbiased held-out data. The card names the release and
    the split folder a converted source came from. A folder that already holds a complete build
    with the same parameters is reused as it is.
    """
    source, out = Path(source).resolve(), Path(out)
    if inside(out, source) or inside(source, out):
        raise UserError(
            f"--out {out} is --source {source} or lies inside it (or holds it): writing there "
            "would replace the source's files; give another --out"
        )
    card = _existing_card(out, _params(source, kind, target, seed, split))
    if card is not None:
        return card
    return write_biased_dataset(plan_biased_dataset(source, kind, target, seed, split), out, carry)


@dataclass
class BiasPlan:
    """A biased dataset worked out and not yet written: its splits and its card. Planned before
    the output folder is claimed (`vqa-r1 data bias`), so a target the data cannot reach is
    refused with nothing written."""

    splits: dict[str, Any]
    card: dict


def plan_biased_dataset(
    source: str | Path, kind: str, target: float, seed: int = 0, split: str = "train"
) -> BiasPlan:
    """The rows to keep and the card (``build_biased_dataset``), writing nothing."""
    from vqa_r1.data.datasets import load_split, open_dataset

    if kind not in KINDS:
        raise UserError(f"bias kind must be one of {', '.join(KINDS)}, got {kind!r}")
    source = Path(source).resolve()
    params = _params(source, kind, target, seed, split)
    ds = load_split(source, split)
    if "solution" in ds.column_names:
        raise UserError(
            f"{source} [{split}]: a multiple-choice dataset (its rows carry their own answers); "
            "the bias builders undersample True/False claims (labels 0/1) per relation"
        )
    if "relation" not in ds.column_names:
        raise UserError(f"{source} [{split}]: no relation column; the bias groups need it")
    labels = _labels(ds)
    if kind == "text":
        x, groups, scale = _one_hot(list(ds["relation"])), list(ds["relation"]), False
    else:
        if "image_path" not in ds.column_names:
            raise UserError(f"{source} [{split}]: the visual kind needs an image_path column")
        x = _descriptors(ds)
        groups, scale = _visual_groups(x), True
    solver, k, (achieved, correct, n) = _solve(x, groups, labels, target, seed, scale, kind)
    rows = solver.keep(k)
    biased = ds.select(rows.tolist())

    opened, provenance = open_dataset(source)
    splits = {name: part for name, part in opened.items() if name}  # "": a Dataset without splits
    splits[split] = biased
    counts = solver.counts(k)
    keep_ratios = {
        g: {
            "undersampled_label": 1 - solver.major[g],
            "keep_major": _ratio(
                counts[(g, solver.major[g])], len(solver.rows[(g, solver.major[g])])
            ),
            "keep_minor": _ratio(
                counts[(g, 1 - solver.major[g])], len(solver.rows[(g, 1 - solver.major[g])])
            ),
        }
        for g in solver.names
    }
    card = {
        **params,
        "achieved": achieved,
        "correct": correct,
        "n": n,
        "p_value": one_sided_binomial_p(correct, n),
        "minor_to_major": k,
        "classifier": (
            "LogisticRegression on the one-hot relation"
            if kind == "text"
            else f"LogisticRegression on standardised {_GRID}x{_GRID} saturation grids"
        ),
        "groups": "relation" if kind == "text" else "halves of the descriptor's first PC",
        "keep_ratios": keep_ratios,
        "sizes": {name: len(part) for name, part in splits.items()},
        "source_dataset": _provenance(provenance),
        "source_sizes": {split: len(ds)},
        "per_relation_label": _per_relation_label(biased),
    }
    return BiasPlan(splits, card)


def write_biased_dataset(plan: BiasPlan, out: str | Path, carry: tuple[str, ...] = ()) -> dict:
    """Write a planned biased dataset into ``out`` at once (``atomic_dir``); its card."""
    from datasets import DatasetDict

    with atomic_dir(Path(out), carry=carry) as tmp:
        DatasetDict(plan.splits).save_to_disk(str(tmp / "hf"))
        (tmp / CARD).write_text(json.dumps(plan.card, indent=2) + "\n")
        (tmp / "README.md").write_text(_readme(plan.card))
    return plan.card


def _provenance(provenance: dict) -> dict:
    """The source folder and, for a release, its format and the split folder/file it came from."""
    out = {"folder": provenance["folder"]}
    release = provenance.get("release")
    if release:
        out["release_format"] = release.get("format")
        for key in ("split_folder", "split_file", "image_folder"):
            if key in release:
                out[key] = release[key]
    return out


def format_p(p: float) -> str:
    """``= 0.0123``, or ``< 1e-300`` where the exact tail underflows a float."""
    return f"= {p:.3g}" if p > 0 else "< 1e-300"


def _source_lines(source: dict) -> list[str]:
    if not source.get("release_format"):
        return []
    where = source.get("split_folder") or source.get("split_file") or source["folder"]
    return [f"The source is a {source['release_format']} release, read from `{where}`."]


def _ratio(kept: int, available: int) -> float:
    return kept / available if available else 0.0


def _readme(card: dict) -> str:
    lines = [
        f"# {card['kind']}-biased training split",
        "",
        f"The `{card['split']}` split of `{card['source']}`, undersampled (seed {card['seed']}) so "
        f"that a {card['kind']}-only classifier ({card['classifier']}) fitted on the kept rows "
        f"scores {card['achieved']:.4f} on them (target {card['target']}; "
        f"{card['correct']}/{card['n']}, one-sided binomial p {format_p(card['p_value'])} "
        "against 0.5).",
        *_source_lines(card.get("source_dataset") or {}),
        "Other splits are the source's, untouched. Numbers in full: `bias_card.json`.",
        "",
        "| split | rows |",
        "| --- | --- |",
        *(f"| {name} | {n} |" for name, n in card["sizes"].items()),
        "",
        "| relation | label 0 | label 1 |",
        "| --- | --- | --- |",
        *(f"| {r} | {c['0']} | {c['1']} |" for r, c in card["per_relation_label"].items()),
        "",
        "| group | undersampled label | kept of major | kept of minor |",
        "| --- | --- | --- | --- |",
        *(
            f"| {g} | {v['undersampled_label']} | {v['keep_major']:.3f} | {v['keep_minor']:.3f} |"
            for g, v in card["keep_ratios"].items()
        ),
        "",
    ]
    return "\n".join(lines)

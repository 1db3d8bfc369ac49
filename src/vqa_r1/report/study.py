"""The published VSR study's scores (``results/vsr/**/scores.json``) as one reference table.

Why a parser rather than a hand-typed table: the study's files are the record, and reading them
keeps every number traceable to a file (the ``run`` column is its folder below ``results/vsr``).
The files are not uniform, so each row says in ``note`` what was done to it:

- ``base/`` and ``sft/`` hold only an accuracy, in percent; in ``SmolVLM/*`` the accuracy is a
  percentage while the CI and F1 are fractions. Any accuracy, CI bound or F1 above 1 is read as a
  percentage and divided by 100 (a fraction cannot exceed 1, a percentage of a binary task below
  1 % is not plausible here).
- The method, bias and evaluation split exist only in the run names, in several spellings
  (``Test-Set``, ``test-set``, ``test-Set_`` prefix, ``-test`` suffix ...). A name without a split
  marker gets split ``unspecified``; one without a bias marker reads as unbiased (``none``).
- The bias level is the accuracy a text-only (or vision-only) classifier reaches on the training
  subset (``acc_0.69``); ``strongtextbias`` and ``acc_extreme_small`` name a text bias whose level
  the study did not publish, so the level is NaN.
- Sample sizes are not recorded (and differ: "All-Set" runs cover validation and test), so the
  Wilson CIs are kept exactly as published rather than recomputed. They can be recovered, though:
  a published accuracy and Wilson CI fit exactly one (n, correct) pair, which ``n_implied`` and
  ``correct_implied`` give (missing when no CI was published or nothing fits exactly). Statistical
  comparisons with these runs need n; and an n that differs from the other runs of the same model
  and split (an "All-Set" run with a validation-sized n) is a fact about the published run worth
  seeing, so the note says so. A run without a split in its name is noted with the split whose n
  its CI matches, without guessing the split itself.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from vqa_r1.errors import UserError
from vqa_r1.metrics import wilson_interval
from vqa_r1.report.tables import write_table

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "run",
    "model",
    "method",
    "bias_kind",
    "bias_level",
    "split",
    "accuracy",
    "ci_low",
    "ci_high",
    "f1_weighted",
    "n_implied",
    "correct_implied",
    "note",
]
QWEN = "Qwen2.5-VL-3B"
SMOLVLM = "SmolVLM"

_LEVEL = re.compile(r"acc_(\d+(?:\.\d+)?)-(text|vision)-biased")
_UNPUBLISHED_LEVEL = re.compile(r"acc_([a-z][a-z_]*)-(text|vision)-biased")
_SPLITS = (  # (pattern on the lower-cased run name, split); first match wins
    (re.compile(r"all-set|-all$"), "all"),
    (re.compile(r"test-set|-test$"), "test"),
    (re.compile(r"valid-set|validation|-val$"), "validation"),
)


def scores_folder(root: str | Path) -> Path:
    """``results/vsr`` of the study: ``root`` may be the study's folder, its ``results`` folder
    or ``results/vsr`` itself (run names are always relative to ``results/vsr``)."""
    root = Path(root)
    for nested in (root / "results" / "vsr", root / "vsr"):
        if nested.is_dir():
            return nested
    if root.is_dir():
        return root
    raise UserError(
        f"{root}: the published study's folder was not found (expected its results/vsr/**/"
        "scores.json). This reference data is optional: leave it out, or set the folder "
        "(e.g. VQA_R1_REALDATA) to include the study's scores."
    )


def parse_run_name(run: str) -> dict:
    """Model, method, bias and split encoded in a run's folder path (posix, below results/vsr)."""
    parts = run.split("/")
    name = parts[-1]
    notes = []
    if name.endswith(" copy"):
        name = name[: -len(" copy")]
        notes.append("folder name ends in ' copy' (ignored)")
    lower = name.lower()
    # the model is a folder above the run ("SmolVLM/sft-val"), whatever folder the path starts at
    model = SMOLVLM if any(p.lower() == "smolvlm" for p in parts[:-1]) else QWEN

    method_match = re.search(r"(?:^|[-_])(sft|grpo)(?:$|[-_])", lower)
    method = "base" if lower == "base" else method_match.group(1) if method_match else "unknown"

    bias_kind, bias_level = "none", math.nan
    if level := _LEVEL.search(lower):
        bias_kind, bias_level = (
            ("text" if level.group(2) == "text" else "visual"),
            float(level.group(1)),
        )
    elif unpublished := _UNPUBLISHED_LEVEL.search(lower):
        bias_kind = "text" if unpublished.group(2) == "text" else "visual"
        notes.append(f"bias level not published ({unpublished.group(1)!r})")
    elif "strongtextbias" in lower:
        bias_kind = "text"
        notes.append("bias level not published ('strongtextbias')")
    elif "vision-biased" in lower or "text-biased" in lower:
        bias_kind = "visual" if "vision-biased" in lower else "text"
        notes.append("bias level not published")

    split = next((s for pattern, s in _SPLITS if pattern.search(lower)), "unspecified")
    return {
        "model": model,
        "method": method,
        "bias_kind": bias_kind,
        "bias_level": bias_level,
        "split": split,
        "_notes": notes,
    }


def _fraction(value: object, what: str, notes: list[str]) -> float:
    """A published score as a fraction: NaN when absent, /100 (noted) when it was a percentage."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    value = float(value)
    if value > 1:
        notes.append(f"{what} was in percent")
        return value / 100
    return value


def implied_sample(accuracy: float, ci_low: float, ci_high: float) -> tuple[int, int] | None:
    """The (n, correct) whose accuracy and Wilson 95 % interval equal the published ones (to 1e-9),
    or None. The Wald width gives a first guess of n; the exact fit is searched around it."""
    values = (accuracy, ci_low, ci_high)
    if any(math.isnan(v) for v in values) or not 0 < accuracy < 1 or ci_high <= ci_low:
        return None
    half = (ci_high - ci_low) / 2
    guess = 1.959963984540054**2 * accuracy * (1 - accuracy) / half**2
    for n in range(max(1, int(guess * 0.6) - 10), int(guess * 1.6) + 20):
        correct = round(accuracy * n)
        if abs(correct / n - accuracy) > 1e-9:
            continue
        low, high = wilson_interval(correct, n)
        if abs(low - ci_low) < 1e-9 and abs(high - ci_high) < 1e-9:
            return n, correct
    return None


def _sample_notes(df: pd.DataFrame) -> list[str]:
    """Per row, what the implied n says about the split (see the module docstring)."""
    import pandas as pd

    usual: dict[tuple[str, str], int] = {}
    named = df[(df["split"] != "unspecified") & df["n_implied"].notna()]
    for (model, split), group in named.groupby(["model", "split"], sort=True):
        counts = group["n_implied"].value_counts()
        usual[(model, split)] = int(min(counts[counts == counts.max()].index))
    notes = []
    for row in df.itertuples(index=False):
        n = None if pd.isna(row.n_implied) else int(row.n_implied)
        if row.split == "unspecified":
            matches = [s for (m, s), u in sorted(usual.items()) if m == row.model and u == n]
            if n is None:
                notes.append("split not in the name")
            elif len(matches) == 1:
                notes.append(f"split not in the name; CI implies n={n}, as in {matches[0]} runs")
            else:
                notes.append(f"split not in the name; CI implies n={n}")
        elif n is not None and usual.get((row.model, row.split), n) != n:
            other = usual[(row.model, row.split)]
            notes.append(f"CI implies n={n}, other {row.split} runs of this model n={other}")
        else:
            notes.append("")
    return notes


def read_scores(path: Path, run: str) -> dict:
    """One table row from one scores.json (normalised to fractions, notes saying how)."""
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read the study's scores ({err})") from None
    if not isinstance(scores, dict):
        raise UserError(f"{path}: expected a JSON object of scores")
    row = parse_run_name(run)
    notes = row.pop("_notes")
    accuracy = _fraction(scores.get("accuracy"), "accuracy", notes)
    ci = scores.get("accuracy_ci_95")
    ci_notes: list[str] = []
    if isinstance(ci, list | tuple) and len(ci) == 2:
        ci_low, ci_high = (_fraction(v, "CI", ci_notes) for v in ci)
    else:
        ci_low = ci_high = math.nan
    notes += sorted(set(ci_notes))
    f1 = _fraction(scores.get("f1_weighted"), "f1_weighted", notes)
    if math.isnan(ci_low) or math.isnan(ci_high):
        notes.append("no CI published")
    elif not math.isnan(accuracy) and not (ci_low <= accuracy <= ci_high):
        notes.append("accuracy outside its published CI")
    sample = implied_sample(accuracy, ci_low, ci_high)
    return {"run": run, **row, "accuracy": accuracy, "ci_low": ci_low, "ci_high": ci_high,
            "f1_weighted": f1, "n_implied": sample[0] if sample else None,
            "correct_implied": sample[1] if sample else None, "note": "; ".join(notes)}  # fmt: skip


def study_table(root: str | Path) -> pd.DataFrame:
    """Every ``scores.json`` below the study's ``results/vsr`` as one row (columns: COLUMNS).

    Sorted by model, method, bias kind, bias level (unknown last), split and run, so the table is
    the same however the file system lists folders. A root without scores gives an empty table
    with the columns; a missing root is a UserError saying the data is optional.
    """
    import pandas as pd

    folder = scores_folder(root)
    rows = [
        read_scores(path, path.parent.relative_to(folder).as_posix())
        for path in sorted(folder.rglob("scores.json"))
    ]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["bias_level"] = df["bias_level"].astype(float)
    for column in ("accuracy", "ci_low", "ci_high", "f1_weighted"):
        df[column] = df[column].astype(float)
    for column in ("n_implied", "correct_implied"):
        df[column] = df[column].astype("Int64")
    df["note"] = [
        "; ".join(part for part in (note, extra) if part)
        for note, extra in zip(df["note"], _sample_notes(df), strict=True)
    ]
    order = ["model", "method", "bias_kind", "bias_level", "split", "run"]
    return df.sort_values(order, kind="mergesort", na_position="last").reset_index(drop=True)


def write_study_table(root: str | Path, out_dir: str | Path) -> list[Path]:
    """``study_reference.{md,csv,tex}`` in ``out_dir``; UserError when the study's folder is absent."""
    return write_table(
        study_table(root),
        out_dir,
        "study_reference",
        caption=(
            "Published VSR study scores (reference): accuracy as a fraction, Wilson 95% CI and "
            "weighted F1 as published; sample sizes were not recorded."
        ),
        float_format=".4f",
    )

"""An experiment's tables, tests and plots, rebuilt from its run directories alone.

``experiment.json`` (written when the experiment was launched) declares each table: its rows
(the evaluation step whose ``scores.json`` gives n, accuracy, its Wilson interval and the weighted
F1; labels; values read from other files such as a bias card), the tests that compare its
conditions and its plots. Nothing here is typed in: every number is read from a file under the
experiment folder, every path is relative to it, and the output is sorted and formatted the same
way every time, so the same run directories give the same bytes (``vqa-r1 tables`` checks this).
A condition whose evaluation is missing (failed, or still running) is a row marked ``missing``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.metrics import (
    holm,
    mcnemar_exact,
    one_sided_binomial_p,
    trend_test,
    two_proportion_p,
    two_sided,
)
from vqa_r1.report.plots import (
    plot_accuracy_bars,
    plot_accuracy_trend,
    plot_all_runs,
    plot_reward_curves,
)
from vqa_r1.report.seeds import REPLICATES
from vqa_r1.report.tables import write_table

EXPERIMENT_FILE = "experiment.json"
SEED_FOLDER = re.compile(r"seed-\d+")  # a seed's folder below its condition's (runs/grpo/seed-43)
SEED_COLUMN = re.compile(r"seed -?\d+")  # a seeded table's per-seed accuracy column
SCORE_COLUMNS = ("n", "accuracy", "ci_low", "ci_high", "f1_weighted")


def read_experiment(root: Path) -> dict:
    """``root/experiment.json``; a missing, unreadable or damaged one is a UserError naming it."""
    path = Path(root) / EXPERIMENT_FILE
    if not path.exists():
        raise UserError(f"{root}: no {EXPERIMENT_FILE}; not an experiment folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = f"not valid JSON ({err})"
    else:
        if isinstance(data, dict) and isinstance(data.get("steps", []), list):
            return data
        problem = "not an experiment record (expected an object with its steps and tables)"
    raise UserError(
        f"{path}: {problem}. It is written by `slurm/launch.py experiment`: restore it (from git "
        "or a backup), or re-launch the experiment's command to write it again"
    )


def _value(root: Path, relative: str, key: str) -> Any:
    try:
        return json.loads((root / relative).read_text()).get(key)
    except (OSError, ValueError):
        return None


def table_rows(root: Path, table: dict) -> list[dict]:
    """One dict per declared row: its labels, read values, and the scores (or ``missing``).

    A row trained with several seeds (``seeds``: one evaluation step per seed) reports the mean
    accuracy over its seeds, their spread (sd, min, max) and each seed's accuracy (``seed S``);
    its interval and tests come from report/seeds.py (``_runs``: each seed's items)."""
    rows = []
    for spec in table["rows"]:
        row: dict[str, Any] = dict(spec["labels"])
        for column, value in spec.get("values", {}).items():
            row[column] = value
        for column, (relative, key) in spec.get("from_files", {}).items():
            row[column] = _value(root, relative, key)
        if "seeds" in spec:
            row.update(_seeded_scores(root, spec["seeds"]))
            rows.append(row)
            continue
        path = root / spec.get("scores", f"{spec['step']}/scores.json")
        scores = read_scores(path)
        row["_per_relation"] = (scores or {}).get("per_relation") or {}
        if scores is None:
            row.update({c: None for c in SCORE_COLUMNS}, correct=None, status="missing")
        else:
            low, high = scores.get("accuracy_ci_95") or [None, None]
            row.update(
                n=scores.get("n"),
                accuracy=scores.get("accuracy"),
                ci_low=low,
                ci_high=high,
                f1_weighted=scores.get("f1_weighted"),
                correct=scores.get("correct"),
                status="ok",
            )
            row.update(_extra_cells([scores]))
            row["_runs"] = lambda path=path, scores=scores: _item_matrix([(path, scores)])
            row["_majority"] = lambda path=path, scores=scores: _majority_share(path, scores)
            row["_responses"] = lambda path=path: _responses(path)
            row["_box_iou"] = lambda path=path: _box_iou_matrix([path])
        rows.append(row)
    return rows


def _seeded_scores(root: Path, seeds: list[dict]) -> dict[str, Any]:
    """A seeded row's cells: seeds (how many evaluated), n (items per seed), the mean accuracy
    and its spread, each seed's accuracy, the bootstrap interval of the mean (seeds and items),
    the mean weighted F1; ``partial`` while some seeds' evaluations are missing."""
    from vqa_r1.report.seeds import summary

    found = []
    row: dict[str, Any] = {}
    for entry in seeds:
        path = root / entry.get("scores", f"{entry['step']}/scores.json")
        scores = read_scores(path)
        row[f"seed {entry['seed']}"] = None if scores is None else scores.get("accuracy")
        if scores is not None:
            found.append((entry["seed"], path, scores))
    spread = summary([s.get("accuracy") for _, _, s in found if _is_number(s.get("accuracy"))])
    sizes = {s.get("n") for _, _, s in found}
    f1 = [s["f1_weighted"] for _, _, s in found if _is_number(s.get("f1_weighted"))]
    cells = {
        "seeds": len(found),
        "n": sizes.pop() if len(sizes) == 1 else None,
        "accuracy": spread["mean"],
        "sd": spread["sd"],
        "min": spread["min"],
        "max": spread["max"],
        **row,
        "ci_low": None,
        "ci_high": None,
        "f1_weighted": sum(f1) / len(f1) if f1 else None,
        "correct": None,
        "status": "ok" if len(found) == len(seeds) else "partial" if found else "missing",
        "_per_relation": {seed: s.get("per_relation") or {} for seed, _, s in found},
        "_seeded": True,
        **_extra_cells([s for _, _, s in found]),
    }
    if found:
        runs = _item_matrix([(path, scores) for _, path, scores in found])
        cells["_runs"] = lambda: runs
        # every seed answered the same split: its most frequent answer is one
        cells["_majority"] = lambda: _majority_share(found[0][1], found[0][2])
        cells["_responses"] = lambda: _responses(found[0][1])
        cells["_box_iou"] = lambda: _box_iou_matrix([path for _, path, _ in found])
        if runs is not None:
            from vqa_r1.report.seeds import bootstrap_difference

            # the interval of the mean accuracy: the same bootstrap against a zero row, inside
            # [0, 1] (widened seed deviations can carry a replicate past 1 when a seed collapsed)
            ci = bootstrap_difference(runs, [[0.0] * runs.shape[1]])
            cells["ci_low"] = min(1.0, max(0.0, ci["ci_low"]))
            cells["ci_high"] = min(1.0, max(0.0, ci["ci_high"]))
    return cells


BOX_IOU, GROUNDED = "box IoU", "entities grounded (IoU >= 0.5)"
FORMAT = "format rate"  # responses in the reasoning format: whether a prompt induced it


def _extra_cells(evaluations: list[dict]) -> dict[str, float]:
    """What an evaluation measures beside accuracy, averaged over seeds: the format rate, and the
    boxes' grounding of evaluations with boxes (eval/scoring.py ``grounding_scores``)."""
    cells: dict[str, float] = {}
    rates = [s["format_rate"] for s in evaluations if _is_number(s.get("format_rate"))]
    if rates:
        cells[FORMAT] = sum(rates) / len(rates)
    parts = [s["grounding"] for s in evaluations if isinstance(s.get("grounding"), dict)]
    if parts:
        cells[BOX_IOU] = sum(p["box_iou"] for p in parts) / len(parts)
        cells[GROUNDED] = sum(p["grounded"] for p in parts) / len(parts)
    return cells


def _item_matrix(evaluations: list[tuple[Path, dict]]) -> Any:
    """Runs x items of 0/1 (each item right or not), re-read from each evaluation's
    generated_responses.json with the rule its scores.json names; None when a file is missing
    or the items differ in number, so that the seed-aware tests are left empty rather than
    guessed. A re-read that disagrees with scores.json's ``correct`` is an error naming it."""
    import numpy as np

    from vqa_r1.answers import extract_answer, extract_choices, label_of

    runs = []
    for scores_path, scores in evaluations:
        records = _responses(scores_path)
        if records is None:
            return None
        rule = scores.get("answer_rule") or "robust"
        if scores.get("answer_type") == "choice":
            flags = [
                bool(extract_choices(r["predicted_response"]))
                and extract_choices(r["predicted_response"]) == extract_choices(r["true_response"])
                for r in records
            ]
        elif scores.get("answer_type") == "cryptogram":  # the exact message, the rewards' rule
            from vqa_r1.rewards.cryptogram import correct_score, message_of

            flags = [
                correct_score(
                    str(r["predicted_response"]), message_of(r["true_response"], None), None, False
                )
                == 1.0
                for r in records
            ]
        else:
            flags = []
            for r in records:
                answer = extract_answer(r["predicted_response"], rule)
                flags.append(bool(answer) and answer == label_of(r["true_response"], rule))
        if scores.get("correct") is not None and sum(flags) != scores["correct"]:
            raise UserError(
                f"{scores_path.parent / RESPONSES}: {sum(flags)} items right on re-reading, but "
                f"{scores_path} says {scores['correct']}; re-run that evaluation"
            )
        runs.append(flags)
    if len({len(r) for r in runs}) != 1:
        return None
    return np.asarray(runs, dtype=float)


def read_scores(path: Path) -> dict | None:
    """An evaluation's scores.json; None when it does not exist (not evaluated yet, or failed).

    Evaluations write it atomically, so one that exists but does not parse, or whose numbers are
    not numbers, was damaged or written by something else: a UserError naming it, never a
    ``missing`` row (that would hide it) nor a table showing text as an accuracy.
    """
    if not path.exists():
        return None
    fix = "re-run its evaluation (delete the file, then re-launch the experiment) or restore it"
    try:
        scores = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: unreadable scores ({err}); {fix}") from None
    if not isinstance(scores, dict):
        raise UserError(f"{path}: expected a JSON object of scores; {fix}")
    for key in ("n", "correct", "accuracy", "f1_weighted"):
        value = scores.get(key)
        if value is not None and not _is_number(value):
            raise UserError(f"{path}: {key} is {value!r}, not a number; {fix}")
    interval = scores.get("accuracy_ci_95")
    if interval is not None and not (
        isinstance(interval, list) and len(interval) == 2 and all(map(_is_number, interval))
    ):
        raise UserError(f"{path}: accuracy_ci_95 is {interval!r}, not [low, high]; {fix}")
    return scores


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _matches(row: dict, wanted: dict) -> bool:
    return all(str(row.get(k)) == str(v) for k, v in wanted.items())


def _has_counts(row: dict) -> bool:
    return row.get("correct") is not None and bool(row.get("n"))


def _reference_of(rows: list[dict], row: dict, test: dict, keys: list[str]) -> dict | None:
    return next(
        (
            r
            for r in rows
            if _matches(r, test["reference"]) and all(r.get(k) == row.get(k) for k in keys)
        ),
        None,
    )


def versus_columns(rows: list[dict], test: dict) -> dict[str, list[float | None]]:
    """Each row against its reference row: two-sided p, and with seeds the difference too.

    The reference is the row matching ``reference`` that shares the row's ``within`` and
    ``match`` labels (e.g. the same method's unbiased run, evaluated on the same domain). Two
    single runs: McNemar's exact test on the items both answered (``_single_versus``; the
    two-proportion test where the items cannot be paired). When either row was trained
    with several seeds: the difference of mean accuracies, its 95 % interval and p by the
    bootstrap over seeds and items (report/seeds.py), in the columns ``diff vs REF``,
    ``diff low vs REF`` and ``diff high vs REF`` before ``p vs REF``.
    """
    keys = [k for k in (test.get("within"), *test.get("match", [])) if k]
    ref_text = ", ".join(f"{k}={v}" for k, v in test["reference"].items())
    same = f" (same {', '.join(keys)})" if keys else ""
    name = f"p vs {ref_text}{same}"
    seeded = any(r.get("_seeded") for r in rows)
    suffix = f"vs {ref_text}{same}"
    diff: dict[str, list] = {
        f"diff {suffix}": [],
        f"diff low {suffix}": [],
        f"diff high {suffix}": [],
    }
    values: list[float | None] = []
    for row in rows:
        reference = _reference_of(rows, row, test, keys)
        result = None
        if reference is not None and reference is not row:
            if row.get("_seeded") or reference.get("_seeded"):
                result = _seeded_versus(row, reference)
            elif _has_counts(row) and _has_counts(reference):
                result = _single_versus(row, reference)
        values.append(None if result is None else result["p"])
        for column, key in zip(diff, ("difference", "ci_low", "ci_high"), strict=True):
            diff[column].append(None if result is None else result.get(key))
    return {**diff, name: values} if seeded else {name: values}


def _single_versus(row: dict, reference: dict) -> dict:
    """Two single runs: McNemar's exact test on the items both answered, paired (every
    evaluation of a split reads it in order, so the same item is the same index); where the
    items cannot be paired (no responses, other sets), the two-proportion test."""
    difference = row["correct"] / row["n"] - reference["correct"] / reference["n"]
    a = row["_runs"]() if row.get("_runs") else None
    b = reference["_runs"]() if reference.get("_runs") else None
    if a is not None and b is not None and a.shape == b.shape and _same_items(row, reference):
        only_row = int(((a[0] == 1) & (b[0] == 0)).sum())
        only_reference = int(((a[0] == 0) & (b[0] == 1)).sum())
        return {"difference": difference, "p": mcnemar_exact(only_row, only_reference)}
    one = two_proportion_p(row["correct"], row["n"], reference["correct"], reference["n"])
    return {"difference": difference, "p": two_sided(one)}


def _same_items(row: dict, reference: dict) -> bool:
    """Whether two evaluations answered the same items in the same order (their references, item
    by item), so that a paired test may pair them."""
    mine = row["_responses"]() if row.get("_responses") else None
    theirs = reference["_responses"]() if reference.get("_responses") else None
    if not mine or not theirs or len(mine) != len(theirs):
        return False
    return all(
        (x.get("true_response"), x.get("question")) == (y.get("true_response"), y.get("question"))
        for x, y in zip(mine, theirs, strict=True)
    )


def _seeded_versus(row: dict, reference: dict) -> dict | None:
    """The bootstrap over seeds and items of a row against its reference (paired on items when
    both answered as many items: every evaluation of an experiment's split reads it in order)."""
    from vqa_r1.report.seeds import bootstrap_difference

    runs, ref = row.get("_runs"), reference.get("_runs")
    a = runs() if runs else None
    b = ref() if ref else None
    if a is None or b is None:
        return None
    return bootstrap_difference(a, b, paired=a.shape[1] == b.shape[1])


RESPONSES = "generated_responses.json"  # every evaluation's items, beside its scores.json


def _box_iou_matrix(paths: list[Path]) -> Any:
    """Runs x items of each item's box IoU (the ``iou`` reward's score: matched IoUs over
    max(written, true boxes), eval/scoring.py ``grounding_scores``), over the items with boxes;
    None when a file is missing, no item has boxes or the runs' items differ in number."""
    import numpy as np

    from vqa_r1.rewards.boxes import box_matches, box_score

    runs = []
    for path in paths:
        records = _responses(path)
        if records is None:
            return None
        with_boxes = [r for r in records if r.get("gt_boxes") is not None]
        runs.append([
            box_score(str(r["predicted_response"]), r["gt_boxes"], r.get("gt_box_labels"))
            for r in with_boxes
            if box_matches("", r["gt_boxes"], r.get("gt_box_labels"))[2]  # items with a true box
        ])  # fmt: skip
    if not runs or not runs[0] or len({len(v) for v in runs}) != 1:
        return None
    return np.asarray(runs, dtype=float)


def grounding_columns(rows: list[dict], test: dict) -> dict[str, list[float | None]]:
    """Each row's box IoU against its reference row's (e.g. GRPO with the IoU reward against the
    SFT it started from): the difference of mean per-item box IoU, its 95 % interval and two-
    sided p by the bootstrap over seeds and items, paired on the items (one run: a run of one)."""
    from vqa_r1.report.seeds import bootstrap_difference

    keys = list(test.get("match", []))
    ref_text = ", ".join(f"{k}={v}" for k, v in test["reference"].items())
    suffix = f"vs {ref_text}"
    columns: dict[str, list] = {
        f"box IoU diff {suffix}": [],
        f"box IoU diff low {suffix}": [],
        f"box IoU diff high {suffix}": [],
        f"p box IoU {suffix}": [],
    }
    for row in rows:
        ref = _reference_of(rows, row, test, keys)
        result = None
        if ref is not None and ref is not row and row.get("_box_iou") and ref.get("_box_iou"):
            mine, theirs = row["_box_iou"](), ref["_box_iou"]()
            if mine is not None and theirs is not None and mine.shape[1] == theirs.shape[1]:
                result = bootstrap_difference(mine, theirs)
        for column, key in zip(columns, ("difference", "ci_low", "ci_high", "p"), strict=True):
            columns[column].append(None if result is None else result[key])
    return columns


def _responses(scores_path: Path) -> list[dict] | None:
    """The evaluation's generated_responses.json beside its scores.json; None when missing."""
    try:
        return json.loads((scores_path.parent / RESPONSES).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def _majority_share(scores_path: Path, scores: dict) -> float | None:
    """The share of an evaluation's items whose right answer is the most frequent one: what
    always giving that answer scores (a count has no 0.5 chance); None without its responses."""
    from collections import Counter

    from vqa_r1.answers import label_of

    records = _responses(scores_path)
    if records is None:
        return None
    rule = scores.get("answer_rule") or "robust"
    if scores.get("answer_type") == "choice":  # letter sets: always giving the commonest set
        from vqa_r1.answers import extract_choices

        labels = Counter(",".join(sorted(extract_choices(r["true_response"]))) for r in records)
    else:
        labels = Counter(label_of(r["true_response"], rule) for r in records)
    return max(labels.values()) / len(records) if records else None


def above_floor_columns(
    rows: list[dict], share_of: Callable[[dict], float | None], name: str
) -> dict[str, list[float | None]]:
    """Each row's floor (``share_of``: what answering without the skill scores on its set) under
    ``name``, and the one-sided p of its accuracy above it: the exact binomial test for one run,
    the bootstrap over seeds and items for a seeded row."""
    from vqa_r1.report.seeds import bootstrap_above

    shares: list[float | None] = []
    ps: list[float | None] = []
    for r in rows:
        share = share_of(r)
        shares.append(share)
        if share is None:
            ps.append(None)
        elif r.get("_seeded"):
            runs = r["_runs"]() if r.get("_runs") else None
            ps.append(None if runs is None else bootstrap_above(runs, share))
        else:
            ps.append(one_sided_binomial_p(r["correct"], r["n"], share) if _has_counts(r) else None)
    return {name: shares, f"p vs {name} (one-sided)": ps}


# the floors above_floor_columns writes (majority_columns, guess_columns): the bar plots mark them
FLOOR_COLUMNS = ("blind prior (train, per question kind)", "most frequent answer", "random guess")


def floor_column(data: Any) -> str | None:
    """The floor a bar plot marks: the first of FLOOR_COLUMNS (the strongest first) with a value
    (a prior whose file is missing leaves its column empty: the next one is drawn)."""
    return next((c for c in FLOOR_COLUMNS if c in data.columns and data[c].notna().any()), None)


def majority_columns(rows: list[dict]) -> dict[str, list[float | None]]:
    """Counts: each row's most-frequent-answer share (always giving the commonest answer) and the
    p of its accuracy above it."""
    return above_floor_columns(
        rows, lambda r: r["_majority"]() if r.get("_majority") else None, "most frequent answer"
    )


PRIOR_COLUMN = "blind prior (train, per question kind)"


def prior_columns(root: Path, rows: list[dict], test: dict) -> dict[str, list[float | None]]:
    """Counts: each row's blind-prior floor (the training split's commonest count for each item's
    question kind, ``test['file']`` written at submission) and the p of its accuracy above it.
    A model that answers by question kind alone, never looking, scores this."""
    from vqa_r1.answers import label_of
    from vqa_r1.data.counting import question_kind

    path = root / test["file"]
    try:
        prior = json.loads(path.read_text(encoding="utf-8"))["by question kind"]
    except (OSError, ValueError, KeyError):
        prior = None

    def share(row: dict) -> float | None:
        records = row["_responses"]() if prior is not None and row.get("_responses") else None
        if not records:
            return None
        hits = [
            label_of(r["true_response"], "robust") == prior.get(question_kind(r["question"]))
            for r in records
        ]
        return sum(hits) / len(hits)

    return above_floor_columns(rows, share, PRIOR_COLUMN)


BLIND_SUFFIX = " blind"


def blind_columns(rows: list[dict], test: dict) -> dict[str, list[float | None]]:
    """Each row against its blind twin (the row whose ``label`` is this row's plus " blind",
    alike in ``match``: trained and evaluated on blank images): the difference and its 95 %
    interval, and the two-sided p (bootstrap over seeds and items, paired on items, for seeded
    rows; the two-proportion test for single runs). What a row scores above its twin is what
    the image adds."""
    label = test["label"]
    keys = test.get("match", [])
    columns: dict[str, list] = {
        "diff vs blind twin": [],
        "diff low vs blind twin": [],
        "diff high vs blind twin": [],
        "p vs blind twin": [],
    }
    for row in rows:
        twin = next(
            (
                r
                for r in rows
                if str(r.get(label)) == f"{row.get(label)}{BLIND_SUFFIX}"
                and all(r.get(k) == row.get(k) for k in keys)
            ),
            None,
        )
        result = None
        if twin is not None:
            if row.get("_seeded") or twin.get("_seeded"):
                result = _seeded_versus(row, twin)
            elif _has_counts(row) and _has_counts(twin):
                result = _single_versus(row, twin)
        for column, key in zip(columns, ("difference", "ci_low", "ci_high", "p"), strict=True):
            columns[column].append(None if result is None else result.get(key))
    return columns


def holm_columns(frame: Any, tests: Any) -> tuple[Any, Any, int]:
    """Holm-adjusted p-values beside the raw ones, over every p the table declares (its ``p
    ...`` columns and its tests table's ``p``): a column ``holm p ...`` right after each.
    Returns both frames and the size of the family."""
    p_columns = [c for c in frame.columns if str(c).startswith("p ")]
    family: list[tuple[str, str, int]] = []
    values: list[float | None] = []
    for column in p_columns:
        for i, v in enumerate(frame[column].tolist()):
            family.append(("table", column, i))
            values.append(None if v is None or v != v else float(v))
    if len(tests) and "p" in tests.columns:
        for i, v in enumerate(tests["p"].tolist()):
            family.append(("tests", "p", i))
            values.append(None if v is None or v != v else float(v))
    adjusted = holm(values)
    size = sum(v is not None for v in values)
    out = {"table": {}, "tests": {}}
    for (where, column, i), value in zip(family, adjusted, strict=True):
        out[where].setdefault(column, [None] * (len(frame) if where == "table" else len(tests)))
        out[where][column][i] = value
    for column in p_columns:
        at = list(frame.columns).index(column) + 1
        frame.insert(at, f"holm {column}", out["table"][column])
    if "p" in out["tests"]:
        tests.insert(list(tests.columns).index("p") + 1, "holm p", out["tests"]["p"])
    return frame, tests, size


def _guess_share(records: list[dict] | None, test: dict) -> float | None:
    """The mean over a cryptogram evaluation's items of the chance that a random decoder of the
    rules decodes it (data/cryptogram.py ``guess_chance``); None without its responses."""
    from vqa_r1.data.cryptogram import guess_chance

    if not records:
        return None
    try:
        chances = [
            guess_chance(
                r["coded_message"],
                r["true_response"],
                test["alphabet_size"],
                test.get("derangement", True),
            )
            for r in records
        ]
    except (KeyError, ValueError):  # not this spec's cryptograms (e.g. another alphabet): no floor
        return None
    return sum(chances) / len(chances)


def guess_columns(rows: list[dict], test: dict) -> dict[str, list[float | None]]:
    """Cryptograms: each row's random-guess floor (a model that writes the format and keeps the
    rules but never reads the decoder) and the p of its accuracy above it. For one run the exact
    binomial at the items' mean chance is conservative for their unequal chances (Hoeffding 1956:
    a sum of unequal Bernoulli trials is no likelier than the binomial of their mean to exceed its
    mean by one or more, so wherever p is small)."""
    return above_floor_columns(
        rows,
        lambda r: _guess_share(r["_responses"](), test) if r.get("_responses") else None,
        "random guess",
    )


def chance_column(rows: list[dict]) -> list[float | None]:
    """One-sided p of each row's accuracy above chance (0.5: every item is a true or false
    claim): the exact binomial test for one run; for a seeded row, the bootstrap over seeds and
    items (report/seeds.py)."""
    from vqa_r1.report.seeds import bootstrap_above

    out: list[float | None] = []
    for r in rows:
        if r.get("_seeded"):
            runs = r["_runs"]() if r.get("_runs") else None
            out.append(None if runs is None else bootstrap_above(runs, 0.5))
        else:
            out.append(one_sided_binomial_p(r["correct"], r["n"], 0.5) if _has_counts(r) else None)
    return out


def trend_rows(rows: list[dict], test: dict) -> list[dict]:
    """Cochran-Armitage trend of accuracy over ``x`` within each value of ``within``."""
    out = []
    group = test.get("within")
    skip = set(test.get("skip", []))
    values = sorted({str(r.get(group)) for r in rows} - skip) if group else [""]
    for value in values:
        within = [
            r
            for r in rows
            if (not group or str(r.get(group)) == value)
            and isinstance(r.get(test["x"]), int | float)
        ]
        seeded = [r for r in within if r.get("_seeded")]
        if seeded:  # several runs per level: the slope by the bootstrap over seeds and items
            entry = _seeded_trend(seeded, test["x"])
        else:
            part = [r for r in within if _has_counts(r)]
            entry = {
                "test": f"trend of accuracy over {test['x']} (Cochran-Armitage)",
                "levels": len(part),
                "z": None,
                "p": None,
            }
            if len(part) >= 2:
                result = trend_test(
                    [float(r[test["x"]]) for r in part],
                    [r["correct"] for r in part],
                    [r["n"] for r in part],
                )
                entry.update(z=result["z"], p=result["p"])
        out.append({group: value, **entry} if group else entry)
    return out


def _seeded_trend(rows: list[dict], x: str) -> dict:
    """The trend over ``x`` of seeded rows: the slope of their mean accuracies with its 95 %
    interval and p by the bootstrap over seeds and items (report/seeds.bootstrap_trend)."""
    from vqa_r1.report.seeds import bootstrap_trend

    levels = [(float(r[x]), r["_runs"]()) for r in rows if r.get("_runs")]
    levels = [(level, runs) for level, runs in levels if runs is not None]
    entry = {
        "test": f"trend of accuracy over {x} (slope; bootstrap over seeds and items)",
        "levels": len(levels),
        "z": None,
        "p": None,
        "slope": None,
        "slope low": None,
        "slope high": None,
    }
    if len(levels) >= 2 and len({level for level, _ in levels}) >= 2:
        result = bootstrap_trend([runs for _, runs in levels], [level for level, _ in levels])
        entry.update(
            p=result["p"],
            slope=result["slope"],
            **{"slope low": result["ci_low"], "slope high": result["ci_high"]},
        )
    return entry


def build_table(root: Path, table: dict) -> tuple[Any, Any]:
    """(the table, its tests table) as pandas frames."""
    import pandas as pd

    rows = table_rows(root, table)
    tests = []
    columns: dict[str, list] = {}
    for test in table.get("tests", []):
        if test["kind"] == "versus":
            columns.update(versus_columns(rows, test))
        elif test["kind"] == "trend":
            tests += trend_rows(rows, test)
        elif test["kind"] == "chance":
            columns["p vs chance (one-sided)"] = chance_column(rows)
        elif test["kind"] == "majority":  # counts: always giving the commonest answer
            columns.update(majority_columns(rows))
        elif test["kind"] == "guess":  # cryptograms: a random decoder of the rules
            columns.update(guess_columns(rows, test))
        elif test["kind"] == "prior":  # counts: the training split's answer per question kind
            columns.update(prior_columns(root, rows, test))
        elif test["kind"] == "blind":  # each row against its twin trained on blank images
            columns.update(blind_columns(rows, test))
        elif test["kind"] == "grounding":  # the boxes written, each row against a reference
            columns.update(grounding_columns(rows, test))
        else:
            raise UserError(f"{root / EXPERIMENT_FILE}: unknown test kind {test['kind']!r}")
    frame = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    for name, values in columns.items():
        frame[name] = values
    frame = frame.drop(columns=["correct"])
    ordered = [c for c in frame.columns if c != "status"] + ["status"]
    seeds = seed_columns(frame)
    if seeds:  # the labels, how many seeds, the mean, its spread and each seed, the rest as ever
        first = ["seeds", "n", "accuracy", "sd", "min", "max", *seeds]
        declared = {
            k
            for r in table["rows"]
            for k in (*r["labels"], *r.get("values", {}), *r.get("from_files", {}))
        }
        labels = [c for c in ordered if c in declared]
        ordered = labels + first + [c for c in ordered if c not in first and c not in labels]
    frame, tests_frame, _ = holm_columns(frame[ordered], pd.DataFrame(tests))
    return counts_as_integers(frame), counts_as_integers(tests_frame)


def _trains(table: dict) -> bool:
    """Whether a table has a trained row: one whose evaluation step is not the base model's."""
    steps = [r.get("step", "") for r in table["rows"]]
    return any(not str(step).startswith(("eval/base", "base")) for step in steps if step)


def _family_size(frame: Any, tests: Any) -> int:
    """How many p-values a table's Holm adjustment ran over (its raw p columns and tests' p)."""
    count = sum(int(frame[c].notna().sum()) for c in frame.columns if str(c).startswith("p "))
    if len(tests) and "p" in tests.columns:
        count += int(tests["p"].notna().sum())
    return count


def per_relation_table(
    root: Path, table: dict, by_count: bool = False, by_words: bool = False
) -> Any:
    """Accuracy per relation of every row: where a bias or a domain shift bites. ``by_count``:
    per true count instead (counting rows' relation is "count N"; column ``count``, in numeric
    order; other relations left out). ``by_words``: per number of words (cryptogram rows'
    relation is "1 word", "2 words"; column ``words``, with each group's ``char accuracy``)."""
    import pandas as pd

    from vqa_r1.metrics import wilson_interval

    out = []
    rows = table_rows(root, table)
    seeded = any(r.get("_seeded") for r in rows)  # then one line per seed, its seed named
    column, number = ("count", count_of) if by_count else ("relation", None)
    if by_words:
        column, number = "words", words_of
    for row in rows:
        labels = {k: v for k, v in row.items() if k in table["rows"][0]["labels"]}
        per_seed = row["_per_relation"] if row.get("_seeded") else {"-": row["_per_relation"]}
        for seed, relations in per_seed.items():
            items = relations.items()
            if number:
                items = [(number(r), part) for r, part in items if number(r) is not None]
            for relation, part in sorted(items):
                n = part.get("n") or 0
                correct = round(part.get("accuracy", 0.0) * n)
                low, high = wilson_interval(correct, n)
                out.append(
                    {
                        **labels,
                        **({"seed": str(seed)} if seeded else {}),
                        column: relation,
                        "n": n,
                        "accuracy": part.get("accuracy"),
                        "ci_low": low,
                        "ci_high": high,
                        **({"char accuracy": part.get("char_accuracy")} if by_words else {}),
                    }
                )
    return counts_as_integers(pd.DataFrame(out))


def per_kind_table(root: Path, table: dict) -> Any:
    """Counting: each row's accuracy per question kind (all objects, a shape, a colour; one line
    per seed), beside the blind prior's accuracy on the same items (``prior`` test's file): where
    a row beats answering by the question alone and where it does not."""
    import pandas as pd

    from vqa_r1.answers import extract_answer, label_of
    from vqa_r1.data.counting import question_kind
    from vqa_r1.metrics import wilson_interval

    test = next((t for t in table.get("tests", []) if t.get("kind") == "prior"), None)
    try:
        prior = json.loads((root / test["file"]).read_text())["by question kind"] if test else {}
    except (OSError, ValueError, KeyError):
        prior = {}
    out = []
    for spec in table["rows"]:
        evaluations = (
            [("-", spec.get("scores", f"{spec['step']}/scores.json"))]
            if "step" in spec
            else [
                (str(e["seed"]), e.get("scores", f"{e['step']}/scores.json")) for e in spec["seeds"]
            ]
        )
        pooled: dict[str, list[list[tuple[bool, bool]]]] = {}  # kind -> one item list per seed
        for seed, scores in evaluations:
            records = _responses(root / scores)
            if not records:
                continue
            kinds: dict[str, list[tuple[bool, bool]]] = {}
            for r in records:
                if "question" not in r:  # responses of an older evaluation: no kind to read
                    continue
                truth = label_of(r["true_response"], "robust")
                answer = extract_answer(r["predicted_response"], "robust")
                kind = question_kind(r["question"])
                kinds.setdefault(kind, []).append((answer == truth, prior.get(kind) == truth))
            for kind, items in sorted(kinds.items()):
                n, right = len(items), sum(a for a, _ in items)
                low, high = wilson_interval(right, n)
                out.append({**spec["labels"], "seed": seed, "question kind": kind, "n": n,
                            "accuracy": right / n, "ci_low": low, "ci_high": high,
                            "blind prior": sum(b for _, b in items) / n if prior else None})  # fmt: skip
                pooled.setdefault(kind, []).append(items)
        if "seeds" in spec and prior:
            out += _pooled_kinds(spec["labels"], pooled)
    frame = pd.DataFrame(out)
    if "p vs blind prior" in frame.columns:  # Holm over the pooled lines' tests
        frame["holm p vs blind prior"] = holm(
            [None if pd.isna(p) else float(p) for p in frame["p vs blind prior"]]
        )
    return counts_as_integers(frame)


def _pooled_kinds(labels: dict, pooled: dict[str, list[list[tuple[bool, bool]]]]) -> list[dict]:
    """A seeded row's line per question kind over all its seeds: the mean accuracy, its
    difference from the blind prior on the same items, the 95 % interval and two-sided p of that
    difference by the bootstrap over seeds and items (the prior is one fixed answer per item)."""
    from vqa_r1.report.seeds import bootstrap_difference

    out = []
    for kind, per_seed in sorted(pooled.items()):
        if len({len(items) for items in per_seed}) != 1:
            continue  # seeds answered different items: nothing to pair
        runs = [[float(a) for a, _ in items] for items in per_seed]
        floor = [[float(b) for _, b in per_seed[0]]]
        test = bootstrap_difference(runs, floor)
        n = len(per_seed[0])
        out.append({**labels, "seed": "pooled", "question kind": kind, "n": n,
                    "accuracy": sum(map(sum, runs)) / (n * len(runs)), "ci_low": None,
                    "ci_high": None, "blind prior": sum(floor[0]) / n,
                    "diff vs blind prior": test["difference"],
                    "diff low": test["ci_low"], "diff high": test["ci_high"],
                    "p vs blind prior": test["p"]})  # fmt: skip
    return out


def count_of(relation: str) -> int | None:
    """The true count of a counting row's relation ("count 7" -> 7), else None."""
    match = re.fullmatch(r"count (\d+)", str(relation))
    return int(match.group(1)) if match else None


def words_of(relation: str) -> int | None:
    """The number of words of a cryptogram row's group ("2 words" -> 2), else None."""
    match = re.fullmatch(r"(\d+) words?", str(relation))
    return int(match.group(1)) if match else None


def counts_as_integers(frame: Any) -> Any:
    """Counts stay integers in the tables even when a missing row makes pandas use floats."""
    for column in ("n", "train n", "levels", "seeds", "count", "words"):
        if column in frame.columns:
            frame[column] = frame[column].astype("Int64")
    return frame


def number_text(value: float) -> str:
    """Three decimals; p-values below 0.001 in scientific notation (0.000 would hide them)."""
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.3f}"


def build_report(root: str | Path) -> dict:
    """Write every declared table (``tables/``), test table, plot (``plots/``) and each run's
    training plot; returns what was written and how many rows are missing."""
    root = Path(root)
    experiment = read_experiment(root)
    written: list[str] = []
    missing = 0
    # LaTeX labels name the experiment's folder: every experiment has an "accuracy" table
    folder = root.resolve().name

    def write(frame: Any, stem: str, caption: str) -> list[Path]:
        return write_table(
            frame,
            root / "tables",
            stem,
            caption=caption,
            float_format=number_text,
            label=f"tab:{folder}:{stem}",
        )

    for table in experiment.get("tables", []):
        if table.get("kind") == "alignment":  # the judge step's verdicts (report/alignment.py)
            from vqa_r1.report.alignment import alignment_table

            frame = alignment_table(root, table)
            missing += int((frame["status"] == "missing").sum())
            pooled = " seed pooled: the seeds' mean rate against the reference on the items all "
            pooled += "judged, p by the bootstrap over seeds and items;"
            caption = table.get("title", "") + (
                ". p: McNemar's exact test on the items both rows answered;"
                + (pooled if "seed" in frame.columns and (frame["seed"] == "pooled").any() else "")
                + " Holm-adjusted over the table; failed or skipped verdicts left out"
            )
            paths = write(frame, table["name"], caption)
            written += [str(p.relative_to(root)) for p in paths]
            continue
        frame, tests = build_table(root, table)
        missing += int((frame["status"] == "missing").sum())
        title = table.get("title", "")
        if seed_columns(frame):
            title += (
                f". Trained rows: mean over {len(seed_columns(frame))} seeds (sd, min, max and "
                "each seed's accuracy beside it); their ci and diff: 95 % bootstrap over seeds and "
                f"items, p two-sided (one-sided vs chance; {REPLICATES:,} replicates: p is at "
                f"least {1 / (REPLICATES + 1):.1e}); single runs: Wilson, exact tests (McNemar between "
                "rows)"
            )
        if not seed_columns(frame) and _trains(table):
            title += (
                ". Single runs: one training run per trained row, so its p-values count test "
                "items, not training runs (a rerun with another seed may differ as much); "
                "experiment.seeds=3 for a reading. p against another row: McNemar's exact test "
                "on the items both answered"
            )
        family = _family_size(frame, tests)
        if family:
            title += (
                f". holm p: Holm-adjusted over the {family} p-values this table and its tests "
                "declare (read these)"
            )
        paths = write(frame, table["name"], title)
        if len(tests):
            paths += write(tests, f"{table['name']}_tests", "Tests: " + table.get("title", ""))
        if table.get("per_relation"):
            relations = per_relation_table(root, table)
            if len(relations):
                caption = "Per relation: " + table.get("title", "")
                paths += write(relations, f"{table['name']}_per_relation", caption)
        if table.get("per_count"):  # counting: accuracy by the true count (the row's solution)
            counts = per_relation_table(root, table, by_count=True)
            if len(counts):
                caption = "Per true count: " + table.get("title", "")
                paths += write(counts, f"{table['name']}_per_count", caption)
        if table.get("per_kind"):  # counting: accuracy per question kind, beside the prior
            kinds = per_kind_table(root, table)
            if len(kinds):
                caption = "Per question kind, each seed, with the blind prior on the same items"
                if "p vs blind prior" in kinds.columns:
                    family = int(kinds["p vs blind prior"].notna().sum())
                    caption += (
                        "; seed pooled: the mean over seeds and its difference from the prior, 95 %"
                        " bootstrap over seeds and items, p two-sided, holm p over the "
                        f"{family} pooled lines"
                    )
                caption += ": " + table.get("title", "")
                paths += write(kinds, f"{table['name']}_per_kind", caption)
        if table.get("per_words"):  # cryptograms: accuracy by the number of words
            words = per_relation_table(root, table, by_words=True)
            if len(words):
                caption = "Per number of words: " + table.get("title", "")
                paths += write(words, f"{table['name']}_per_words", caption)
        for plot in table.get("plots", []):
            paths.append(draw(frame, plot, root / "plots", table.get("title", "")))
        written += [str(p.relative_to(root)) for p in paths]
    for plot in experiment.get("plots", []):
        if plot.get("kind") != "rewards":
            raise UserError(f"{root / EXPERIMENT_FILE}: unknown plot kind {plot.get('kind')!r}")
        written.append(str(reward_plot(root, plot["steps"], root / plot["file"]).relative_to(root)))
    written += [str(p.relative_to(root)) for p in plot_all_runs(root)]
    return {"written": sorted(written), "missing_rows": missing}


def reward_plot(root: Path, steps: list[str], png: Path) -> Path:
    """GRPO reward curves: a panel per run, or with seeds (``runs/grpo/seed-43``) a panel per
    condition with a line per seed."""
    seeded = [Path(step) for step in steps if SEED_FOLDER.fullmatch(Path(step).name)]
    if not seeded:
        return plot_reward_curves({Path(step).name: root / step for step in steps}, png)
    from vqa_r1.report.seed_plots import plot_seeded_reward_curves

    groups: dict[str, dict[str, Path]] = {}
    for step in map(Path, steps):
        name, seed = (step.parent.name, step.name) if step in seeded else (step.name, "")
        groups.setdefault(name, {})[seed.replace("-", " ")] = root / step
    return plot_seeded_reward_curves(groups, png)


def seed_columns(frame: Any) -> list[str]:
    """The per-seed accuracy columns of a seeded table (``seed 42``, ...), in table order."""
    return [c for c in frame.columns if SEED_COLUMN.fullmatch(str(c))]


def draw(frame: Any, plot: dict, out: Path, title: str) -> Path:
    skip = set(plot.get("skip", []))
    hue = plot.get("hue")
    data = frame[[str(v) not in skip for v in frame[hue]]] if hue else frame
    seeds = seed_columns(frame)
    data = data[data["status"].isin(["ok", "partial"] if seeds else ["ok"])]
    png = out / plot["file"]
    # a dotted line at chance (0.5: true/false claims); ``chance: false`` where chance is not 0.5
    reference, label = (0.5, "chance") if plot.get("chance", True) else (None, "")
    if plot.get("reference"):  # e.g. the base model's accuracy instead of chance
        match = frame[[_matches(r, plot["reference"]) for r in frame.to_dict("records")]]
        if len(match) and match["accuracy"].notna().all():
            reference = float(match["accuracy"].iloc[0])
            label = ", ".join(f"{v}" for v in plot["reference"].values()) + f" ({reference:.3f})"
    if seeds:
        return draw_seeded(data, plot, png, title, seeds, reference, label)
    if plot["kind"] == "trend":
        return plot_accuracy_trend(
            data,
            plot["x"],
            png,
            hue=hue,
            title=title,
            reference=reference,
            reference_label=label,
            chance=0.5 if plot.get("reference") else None,  # both lines: base and chance
        )
    facet = plot.get("facet")
    if facet:  # one label per facet value and group, e.g. "grpo / real"
        labels = [f"{a} / {b}" for a, b in zip(data[facet], data[plot["group"]], strict=True)]
        data = data.assign(condition=labels)
        return plot_accuracy_bars(
            data,
            png,
            label="condition",
            hue=hue,
            title=title,
            xlabel=f"{facet} / {plot['group']}",
            reference=reference,
            reference_label=label,
        )
    return plot_accuracy_bars(
        data,
        png,
        label=plot["group"],
        hue=hue,
        title=title,
        reference=reference,
        reference_label=label,
        floor=floor_column(data),
    )


def draw_seeded(
    data: Any,
    plot: dict,
    png: Path,
    title: str,
    seeds: list[str],
    reference: float | None,
    label: str,
) -> Path:
    """A seeded table's plot: every seed as a dot on its condition's mean (report/seed_plots)."""
    from vqa_r1.report.seed_plots import plot_seeded_bars, plot_seeded_trend

    hue = plot.get("hue")
    title = f"{title} ({len(seeds)} seeds)"
    if plot["kind"] == "trend":
        return plot_seeded_trend(data, plot["x"], png, seeds, hue=hue, title=title,
                                 reference=reference, reference_label=label)  # fmt: skip
    group, xlabel = plot["group"], None
    if plot.get("facet"):
        facet = plot["facet"]
        labels = [f"{a} / {b}" for a, b in zip(data[facet], data[group], strict=True)]
        data, group, xlabel = data.assign(condition=labels), "condition", f"{facet} / {group}"
    floor = floor_column(data)
    return plot_seeded_bars(data, png, seeds, label=group, hue=hue, title=title, xlabel=xlabel,
                            reference=reference, reference_label=label, floor=floor)  # fmt: skip

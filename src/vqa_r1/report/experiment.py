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
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.metrics import one_sided_binomial_p, trend_test, two_proportion_p, two_sided
from vqa_r1.report.plots import (
    plot_accuracy_bars,
    plot_accuracy_trend,
    plot_all_runs,
    plot_reward_curves,
)
from vqa_r1.report.tables import write_table

EXPERIMENT_FILE = "experiment.json"
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
    """One dict per declared row: its labels, read values, and the scores (or ``missing``)."""
    rows = []
    for spec in table["rows"]:
        row: dict[str, Any] = dict(spec["labels"])
        for column, value in spec.get("values", {}).items():
            row[column] = value
        for column, (relative, key) in spec.get("from_files", {}).items():
            row[column] = _value(root, relative, key)
        scores = read_scores(root / spec.get("scores", f"{spec['step']}/scores.json"))
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
        rows.append(row)
    return rows


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


def versus_column(rows: list[dict], test: dict) -> tuple[str, list[float | None]]:
    """Two-sided two-proportion p of each row against its reference row.

    The reference is the row matching ``reference`` that shares the row's ``within`` and
    ``match`` labels (e.g. the same method's unbiased run, evaluated on the same domain).
    """
    keys = [k for k in (test.get("within"), *test.get("match", [])) if k]
    ref_text = ", ".join(f"{k}={v}" for k, v in test["reference"].items())
    name = f"p vs {ref_text}" + (f" (same {', '.join(keys)})" if keys else "")
    values: list[float | None] = []
    for row in rows:
        reference = next(
            (
                r
                for r in rows
                if _matches(r, test["reference"]) and all(r.get(k) == row.get(k) for k in keys)
            ),
            None,
        )
        if (
            reference is None
            or reference is row
            or not (_has_counts(row) and _has_counts(reference))
        ):
            values.append(None)
            continue
        one = two_proportion_p(row["correct"], row["n"], reference["correct"], reference["n"])
        values.append(two_sided(one))
    return name, values


def chance_column(rows: list[dict]) -> list[float | None]:
    """Exact one-sided binomial p of each row's accuracy above chance (0.5: every item is a true
    or false claim)."""
    return [
        one_sided_binomial_p(r["correct"], r["n"], 0.5) if _has_counts(r) else None for r in rows
    ]


def trend_rows(rows: list[dict], test: dict) -> list[dict]:
    """Cochran-Armitage trend of accuracy over ``x`` within each value of ``within``."""
    out = []
    group = test.get("within")
    skip = set(test.get("skip", []))
    values = sorted({str(r.get(group)) for r in rows} - skip) if group else [""]
    for value in values:
        part = [
            r
            for r in rows
            if (not group or str(r.get(group)) == value)
            and _has_counts(r)
            and isinstance(r.get(test["x"]), int | float)
        ]
        entry = {
            "test": f"trend of accuracy over {test['x']} (Cochran-Armitage)",
            "levels": len(part),
        }
        if group:
            entry = {group: value, **entry}
        if len(part) < 2:
            out.append({**entry, "z": None, "p": None})
            continue
        result = trend_test(
            [float(r[test["x"]]) for r in part],
            [r["correct"] for r in part],
            [r["n"] for r in part],
        )
        out.append({**entry, "z": result["z"], "p": result["p"]})
    return out


def build_table(root: Path, table: dict) -> tuple[Any, Any]:
    """(the table, its tests table) as pandas frames."""
    import pandas as pd

    rows = table_rows(root, table)
    tests = []
    columns: dict[str, list] = {}
    for test in table.get("tests", []):
        if test["kind"] == "versus":
            name, values = versus_column(rows, test)
            columns[name] = values
        elif test["kind"] == "trend":
            tests += trend_rows(rows, test)
        elif test["kind"] == "chance":
            columns["p vs chance (one-sided)"] = chance_column(rows)
        else:
            raise UserError(f"{root / EXPERIMENT_FILE}: unknown test kind {test['kind']!r}")
    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "_per_relation"} for r in rows])
    for name, values in columns.items():
        frame[name] = values
    frame = frame.drop(columns=["correct"])
    ordered = [c for c in frame.columns if c != "status"] + ["status"]
    return counts_as_integers(frame[ordered]), counts_as_integers(pd.DataFrame(tests))


def per_relation_table(root: Path, table: dict) -> Any:
    """Accuracy per relation of every row: where a bias or a domain shift bites."""
    import pandas as pd

    from vqa_r1.metrics import wilson_interval

    out = []
    for row in table_rows(root, table):
        labels = {k: v for k, v in row.items() if k in table["rows"][0]["labels"]}
        for relation, part in sorted(row["_per_relation"].items()):
            n = part.get("n") or 0
            correct = round(part.get("accuracy", 0.0) * n)
            low, high = wilson_interval(correct, n)
            out.append(
                {
                    **labels,
                    "relation": relation,
                    "n": n,
                    "accuracy": part.get("accuracy"),
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return counts_as_integers(pd.DataFrame(out))


def counts_as_integers(frame: Any) -> Any:
    """Counts stay integers in the tables even when a missing row makes pandas use floats."""
    for column in ("n", "train n", "levels"):
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
        frame, tests = build_table(root, table)
        missing += int((frame["status"] == "missing").sum())
        paths = write(frame, table["name"], table.get("title", ""))
        if len(tests):
            paths += write(tests, f"{table['name']}_tests", "Tests: " + table.get("title", ""))
        if table.get("per_relation"):
            relations = per_relation_table(root, table)
            if len(relations):
                caption = "Per relation: " + table.get("title", "")
                paths += write(relations, f"{table['name']}_per_relation", caption)
        for plot in table.get("plots", []):
            paths.append(draw(frame, plot, root / "plots", table.get("title", "")))
        written += [str(p.relative_to(root)) for p in paths]
    for plot in experiment.get("plots", []):
        if plot.get("kind") != "rewards":
            raise UserError(f"{root / EXPERIMENT_FILE}: unknown plot kind {plot.get('kind')!r}")
        runs = {Path(step).name: root / step for step in plot["steps"]}
        written.append(str(plot_reward_curves(runs, root / plot["file"]).relative_to(root)))
    written += [str(p.relative_to(root)) for p in plot_all_runs(root)]
    return {"written": sorted(written), "missing_rows": missing}


def draw(frame: Any, plot: dict, out: Path, title: str) -> Path:
    skip = set(plot.get("skip", []))
    hue = plot.get("hue")
    data = frame[[str(v) not in skip for v in frame[hue]]] if hue else frame
    data = data[data["status"] == "ok"]
    png = out / plot["file"]
    reference, label = 0.5, "chance"
    if plot.get("reference"):  # e.g. the base model's accuracy instead of chance
        match = frame[[_matches(r, plot["reference"]) for r in frame.to_dict("records")]]
        if len(match) and match["accuracy"].notna().all():
            reference = float(match["accuracy"].iloc[0])
            label = ", ".join(f"{v}" for v in plot["reference"].values()) + f" ({reference:.3f})"
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
    )

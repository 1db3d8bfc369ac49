"""An experiment's alignment table: its judge step's verdicts, one row per evaluation.

The judge step (experiments/study.py ``add_judge``, ``experiment.judge``) writes the verdicts of
every evaluation's responses into ``judge/alignment_checks.json`` in the study's record shape
(``model``, ``index``, ``aligns``, ``type``, ``status``). Here, per row: the items judged, how many
the judge found misaligned (the reasoning does not support the answer), the rate and the
misalignment types; and each row against the reference row with the same other labels (the base
model) by McNemar's exact test paired on the items, and a seeded row's seeds pooled by the
bootstrap over seeds and items, Holm-adjusted over the table. Failed or
skipped verdicts are left out, never counted as misaligned (judge/stats.py's rule).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.metrics import holm, mcnemar_exact


def read_checks(path: Path) -> list[dict] | None:
    """The judge's records; None when the judge has not written them (not run, or failed)."""
    if not path.exists():
        return None
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{path}: unreadable alignment checks ({err}); re-run the judge step"
        ) from None
    if not isinstance(records, list):
        raise UserError(f"{path}: expected a JSON list of verdicts; re-run the judge step")
    return records


def alignment_table(root: Path, table: dict) -> Any:
    """The alignment table of ``table`` (kind ``alignment``) as a pandas frame."""
    import pandas as pd

    records = read_checks(root / table["file"])
    verdicts: dict[str, dict[Any, dict]] = {}
    for record in records or []:
        if record.get("status", "judged") == "judged":
            verdicts.setdefault(str(record.get("model")), {})[record.get("index")] = record
    types = sorted(
        {str(r.get("type") or "unspecified") for v in verdicts.values() for r in v.values()
         if not r.get("aligns", False)}
    )  # fmt: skip
    reference = table.get("reference", {})
    # every row's labels in one order (a seeded row adds ``seed``; base has none): text cells
    label_keys = list(dict.fromkeys(k for row in table["rows"] for k in row["labels"]))
    out = []
    for row in table["rows"]:
        mine = verdicts.get(row["model"], {})
        misaligned = [r for r in mine.values() if not r.get("aligns", False)]
        kinds = Counter(str(r.get("type") or "unspecified") for r in misaligned)
        cells: dict[str, Any] = {
            **{
                k: "" if row["labels"].get(k) is None else str(row["labels"][k]) for k in label_keys
            },
            "judged": len(mine),
            "misaligned": len(misaligned),
            "misaligned rate": len(misaligned) / len(mine) if mine else None,
            **{t: kinds.get(t, 0) for t in types},
        }
        ref = _reference(table["rows"], row, reference, table.get("match", []))
        only_row = only_ref = None
        p = None
        if ref is not None and ref is not row and mine and verdicts.get(ref["model"]):
            theirs = verdicts[ref["model"]]
            common = set(mine) & set(theirs)
            only_row = sum(not mine[i].get("aligns", False) and theirs[i].get("aligns", False)
                           for i in common)  # fmt: skip
            only_ref = sum(mine[i].get("aligns", False) and not theirs[i].get("aligns", False)
                           for i in common)  # fmt: skip
            p = mcnemar_exact(only_row, only_ref)
        ref_text = ", ".join(f"{k}={v}" for k, v in reference.items())
        cells[f"misaligned only here vs {ref_text}"] = only_row
        cells[f"misaligned only in {ref_text}"] = only_ref
        cells[f"p vs {ref_text}"] = p
        cells["status"] = "ok" if mine else "missing"
        out.append(cells)
    out += _pooled_rows(table, verdicts, label_keys, reference)
    frame = pd.DataFrame(out)
    diff = [c for c in frame.columns if str(c).startswith("diff vs ")]
    rest = [c for c in frame.columns if c not in diff and c != "status"]
    at = next(i for i, c in enumerate(rest) if str(c).startswith("p vs "))
    frame = frame[[*rest[:at], *diff, *rest[at:], "status"]]
    p_column = next(c for c in frame.columns if str(c).startswith("p vs "))
    values = [None if v is None or v != v else float(v) for v in frame[p_column].tolist()]
    frame.insert(list(frame.columns).index(p_column) + 1, f"holm {p_column}", holm(values))
    for column in ("judged", "misaligned", *types):
        frame[column] = frame[column].astype("Int64")
    for column in [c for c in frame.columns if str(c).startswith("misaligned only")]:
        frame[column] = frame[column].astype("Int64")
    return frame


def _pooled_rows(
    table: dict, verdicts: dict[str, dict[Any, dict]], label_keys: list[str], reference: dict
) -> list[dict]:
    """A line per seeded row (its lines differ by ``seed`` alone) over all its seeds: the mean
    misaligned rate and its difference from the reference row on the items all of them judged,
    the p of that difference by the bootstrap over seeds and items (report/seeds.py), as the
    accuracy tables test seeded rows; one seed's McNemar test reads one training run."""
    from vqa_r1.report.seeds import bootstrap_difference

    groups: dict[tuple, list[dict]] = {}
    for row in table["rows"]:
        if row["labels"].get("seed") is not None:
            key = tuple((k, str(v)) for k, v in row["labels"].items() if k != "seed")
            groups.setdefault(key, []).append(row)
    ref_text = ", ".join(f"{k}={v}" for k, v in reference.items())
    out = []
    for rows in groups.values():
        judged = [verdicts.get(r["model"], {}) for r in rows]
        if len(rows) < 2 or not all(judged):
            continue
        ref = _reference(table["rows"], rows[0], reference, table.get("match", []))
        theirs = verdicts.get(ref["model"], {}) if ref is not None else {}
        common = sorted(set.intersection(*(set(j) for j in judged)) & set(theirs), key=str)
        if not common:
            continue
        runs = [[float(not j[i].get("aligns", False)) for i in common] for j in judged]
        base = [[float(not theirs[i].get("aligns", False)) for i in common]]
        test = bootstrap_difference(runs, base)
        misaligned = sum(map(sum, runs))
        out.append({
            **{k: "" if rows[0]["labels"].get(k) is None else str(rows[0]["labels"][k])
               for k in label_keys},
            "seed": "pooled",
            "judged": len(common),
            "misaligned": int(misaligned),
            "misaligned rate": misaligned / (len(common) * len(runs)),
            f"diff vs {ref_text} (pooled)": test["difference"],
            f"p vs {ref_text}": test["p"],
            "status": "ok",
        })  # fmt: skip
    return out


def _reference(rows: list[dict], row: dict, reference: dict, keys: list[str]) -> dict | None:
    """The reference row sharing ``row``'s ``keys`` labels (e.g. the same evaluation set)."""
    return next(
        (
            r
            for r in rows
            if all(str(r["labels"].get(k)) == str(v) for k, v in reference.items())
            and all(r["labels"].get(k) == row["labels"].get(k) for k in keys)
        ),
        None,
    )

"""The demo across families and seeds in one table: each family's rows from its own seeded table.

Why a table of tables: the README compares the four families at a glance, and a number there
must come from a file (report/readme.py). Each family's folder under ``results/demo-seeds/`` is
an experiment whose ``tables/accuracy.csv`` holds the mean over seeds, the seeds' spread and the
bootstrap test against its base; this reads those columns and nothing else, so the summary and
the per-family tables cannot disagree.
"""

from __future__ import annotations

import csv
from pathlib import Path

from vqa_r1.io import atomic_write_text

FAMILY_NAMES = {
    "qwen2.5-vl": "Qwen2.5-VL",
    "qwen3-vl": "Qwen3-VL",
    "internvl": "InternVL",
    "smolvlm": "SmolVLM",
}
TABLE = "families.md"


def _rows(folder: Path) -> list[dict]:
    with (folder / "tables" / "accuracy.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def families_table(root: Path) -> str | None:
    """Markdown of every family folder under ``root`` with a seeded accuracy table; None if none."""
    folders = [
        root / name for name in FAMILY_NAMES if (root / name / "tables" / "accuracy.csv").is_file()
    ]
    if not folders:
        return None
    lines = [
        "| family | model | seeds | accuracy | sd | min | max | diff vs base | 95 % interval "
        "| holm p vs base | error removed |",
        "|:---|:---|---:|---:|---:|---:|---:|---:|:---|---:|---:|",
    ]
    for folder in folders:
        rows = _rows(folder)
        base = next((r for r in rows if r["model"] == "base"), None)
        base_error = 1 - float(base["accuracy"]) if base else None
        for row in rows:
            if row["model"] == "base":
                lines.append(
                    f"| {FAMILY_NAMES[folder.name]} | base |  | {row['accuracy']} |  |  |  "
                    "|  |  |  |  |"
                )
                continue
            removed = ""
            if base_error:
                removed = f"{(float(row['accuracy']) - float(base['accuracy'])) / base_error:.2f}"
            interval = f"{row['diff low vs model=base']} to {row['diff high vs model=base']}"
            lines.append(
                f"| {FAMILY_NAMES[folder.name]} | {row['model']} | {row['seeds']} "
                f"| {row['accuracy']} | {row['sd']} | {row['min']} | {row['max']} "
                f"| {row['diff vs model=base']} | {interval} | {row['holm p vs model=base']} "
                f"| {removed} |"
            )
    lines += [
        "",
        "Table: The demo on each family's tiny pretrained model: accuracy on the 400 test scenes, "
        "trained rows the mean over their seeds (results/demo-seeds/<family>/tables/"
        "accuracy.md: each seed, the bootstrap over seeds and items, Holm over each family's "
        "table). error removed: the share of base's error the row's mean removes "
        "((row - base) / (1 - base); negative: added).",
    ]
    return "\n".join(lines) + "\n"


def write_families_table(root: Path) -> Path | None:
    text = families_table(root)
    if text is None:
        return None
    out = root / TABLE
    if not out.is_file() or out.read_text() != text:
        atomic_write_text(out, text)
    return out

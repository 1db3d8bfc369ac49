"""Alignment statistics per model: accuracy, misalignment rate and misalignment types.

Accuracy is computed over the responses file with the shared extractor (``vqa_r1.answers``), so the
``study`` rule reproduces the published figures and ``robust`` gives ours from the same files.
Misalignment follows the study's counting (``not entry.get("aligns", False)``) over the judged
items only: our own failed or budget-skipped records are left out rather than counted as misaligned.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vqa_r1.answers import is_correct
from vqa_r1.errors import UserError
from vqa_r1.judge.prompts import TYPES
from vqa_r1.judge.responses import REFERENCE_FIELDS, RESPONSE_FIELDS, load_records
from vqa_r1.typed_config import build, load_mapping, option

FORMATS = ("markdown", "csv", "latex", "json")
UNSPECIFIED = "unspecified"


@dataclass
class ModelStats:
    correct: int
    total: int
    accuracy: float
    judged: int
    misaligned: int
    misaligned_rate: float | None  # None: nothing judged (a rate of 0 would claim alignment)
    types: dict[str, int] = field(default_factory=dict)


def is_judged(record: dict[str, Any]) -> bool:
    """The study's records have no status and all count; ours count only when judged."""
    return record.get("status", "judged") == "judged"


def accuracy_counts(path: Path, rule: str) -> tuple[int, int]:
    correct = total = 0
    for position, record in enumerate(load_records(path)):
        response = next((record[f] for f in RESPONSE_FIELDS if f in record), None)
        reference = next((record[f] for f in REFERENCE_FIELDS if f in record), None)
        if response is None or reference is None:
            raise UserError(f"{path}: record {position} lacks a response or a reference label")
        total += 1
        correct += is_correct(response, reference, rule)
    return correct, total


def compute(
    checks: list[dict[str, Any]],
    responses: list[tuple[str, Path]],
    rule: str = "study",
) -> dict[str, ModelStats]:
    result: dict[str, ModelStats] = {}
    for name, path in responses:
        correct, total = accuracy_counts(path, rule)
        judged = [r for r in checks if str(r.get("model")) == name and is_judged(r)]
        misaligned = [r for r in judged if not r.get("aligns", False)]
        types = Counter((r.get("type") or UNSPECIFIED) for r in misaligned)
        ordered = {t: types[t] for t in (*TYPES, UNSPECIFIED) if types.get(t)}
        ordered.update({t: n for t, n in sorted(types.items()) if t not in ordered})
        result[name] = ModelStats(
            correct=correct,
            total=total,
            accuracy=correct / total if total else 0.0,
            judged=len(judged),
            misaligned=len(misaligned),
            misaligned_rate=len(misaligned) / len(judged) if judged else None,
            types=ordered,
        )
    return result


@dataclass
class PairedTest:
    """McNemar's exact test of misalignment between two models judged on the same items."""

    first: str
    second: str
    paired: int  # items judged for both
    only_first: int  # misaligned for the first model, aligned for the second
    only_second: int
    p: float  # two-sided exact (binomial on the discordant items at 1/2)


def paired_misalignment(checks: list[dict[str, Any]], models: list[str]) -> list[PairedTest]:
    """Each pair of ``models`` (in order) tested on the items both were judged on.

    Why paired: both models answered the same questions, so an item's difficulty is shared; the
    two rates' difference is carried by the items where the verdicts differ (McNemar). An item
    is identified by its ``index`` (the study's checks) or else its ``id``; one judged twice for a
    model is an error naming it (a merge of two runs' checks)."""
    from vqa_r1.metrics import mcnemar_exact

    verdicts: dict[str, dict[Any, bool]] = {m: {} for m in models}
    for record in checks:
        model = str(record.get("model"))
        if model not in verdicts or not is_judged(record):
            continue
        key = record.get("index", record.get("id"))
        if key is None:
            return []  # no item identity: nothing to pair on
        if key in verdicts[model]:
            raise UserError(f"checks: item {key!r} of model {model!r} is judged twice")
        verdicts[model][key] = not record.get("aligns", False)
    tests = []
    for i, first in enumerate(models):
        for second in models[i + 1 :]:
            common = sorted(set(verdicts[first]) & set(verdicts[second]), key=str)
            b = sum(verdicts[first][k] and not verdicts[second][k] for k in common)
            c = sum(verdicts[second][k] and not verdicts[first][k] for k in common)
            tests.append(PairedTest(first, second, len(common), b, c, mcnemar_exact(b, c)))
    return tests


def render_paired(tests: list[PairedTest]) -> str:
    """The paired tests as a markdown table (empty when there are none)."""
    if not tests:
        return ""
    header = ["models", "paired items", "misaligned: first only", "second only", "McNemar p"]
    rows = [
        [f"{t.first} vs {t.second}", str(t.paired), str(t.only_first), str(t.only_second),
         f"{t.p:.4f}" if t.p >= 1e-4 else f"{t.p:.2e}"]
        for t in tests
    ]  # fmt: skip
    return "Paired misalignment (McNemar, exact, two-sided):\n\n" + markdown_table(header, rows)


def unjudged_counts(checks: list[dict[str, Any]]) -> Counter[str]:
    return Counter(str(r.get("model")) for r in checks if not is_judged(r))


def as_json(stats: dict[str, ModelStats]) -> dict[str, Any]:
    return {"models": {name: asdict(s) for name, s in stats.items()}}


def _type_columns(stats: dict[str, ModelStats]) -> list[str]:
    seen = {t for s in stats.values() for t in s.types}
    return [t for t in (*TYPES, UNSPECIFIED) if t in seen or t in TYPES] + sorted(
        seen - set(TYPES) - {UNSPECIFIED}
    )


def _rows(stats: dict[str, ModelStats]) -> tuple[list[str], list[list[str]]]:
    types = _type_columns(stats)
    header = ["model", "correct", "total", "accuracy", "judged", "misaligned", "misaligned_rate"]
    header += types
    rows = []
    for name, s in stats.items():
        rows.append(
            [
                name,
                str(s.correct),
                str(s.total),
                f"{s.accuracy:.4f}",
                str(s.judged),
                str(s.misaligned),
                "n/a" if s.misaligned_rate is None else f"{s.misaligned_rate:.4f}",
                *[str(s.types.get(t, 0)) for t in types],
            ]
        )
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def table(stats: dict[str, ModelStats], title: str | None = None) -> pd.DataFrame:
    """One row per model, counts and rates as printed (rates to 4 decimals), type columns last."""
    header, rows = _rows(stats)
    frame = pd.DataFrame(rows, columns=header)
    if title:
        frame.insert(0, "set", title)
    return frame


def render(stats: dict[str, ModelStats], fmt: str, title: str | None = None) -> str:
    if fmt == "json":
        return json.dumps(as_json(stats), indent=2)
    if fmt == "markdown":
        text = markdown_table(*_rows(stats))
        return f"### {title}\n\n{text}" if title else text
    if fmt == "csv":
        return table(stats, title).to_csv(index=False, lineterminator="\n").rstrip("\n")
    if fmt == "latex":
        frame = table(stats)  # booktabs rules (\\usepackage{booktabs})
        spec = "l" + "r" * (frame.shape[1] - 1)
        body = frame.to_latex(index=False, escape=True, column_format=spec).rstrip("\n")
        return f"% {title}\n{body}" if title else body
    raise UserError(f"--format {fmt}: use one of {', '.join(FORMATS)}")


@dataclass(frozen=True)
class StatsSet:
    """One configured comparison (e.g. a split): a checks file and named responses files."""

    name: str
    checks: Path
    responses: list[tuple[str, Path]]


@dataclass
class StatsSetEntry:
    """A set as written in the YAML file (paths relative to the file's data root)."""

    name: str = option(help="the set's title in the tables, e.g. a split")
    checks: str = option(help="alignment checks JSON (the study's or ours)")
    responses: dict[str, str] = option(help="model name -> its responses file (accuracy)")


@dataclass
class StatsFile:
    """``vqa-r1 judge stats --config FILE``: several sets, e.g. the study's three splits."""

    sets: list[dict[str, Any]] = option(help="the sets, each with name, checks and responses")
    data_root: str = option(
        ".", help="root of the sets' paths, relative to this file (--data-root overrides it)"
    )


def load_config(path: Path, data_root: Path | None = None) -> list[StatsSet]:
    """A YAML list of sets; paths are relative to ``data_root`` (the config's own ``data_root``,
    itself relative to the config file, unless overridden on the command line)."""
    label = f"--config {path}"
    mapping = load_mapping(path, "--config")
    if "sets" not in mapping:
        raise UserError(f"{label}: expected a mapping with a 'sets' list")
    config = build(StatsFile, mapping, f"{label}:")
    if data_root is None:
        data_root = (path.parent / config.data_root).resolve()
    sets = []
    for number, raw in enumerate(config.sets):
        where = f"{label}: sets[{number}]"
        entry = build(StatsSetEntry, raw, where)
        if not entry.responses:
            raise UserError(f"{where}.responses must map model names to files")
        checks = data_root / entry.checks
        pairs = [(name, data_root / str(file)) for name, file in entry.responses.items()]
        for file in [checks, *(p for _, p in pairs)]:
            if not file.is_file():
                raise UserError(
                    f"{where} ({entry.name}): {file} not found (data root {data_root}; "
                    "set --data-root)"
                )
        sets.append(StatsSet(name=entry.name, checks=checks, responses=pairs))
    return sets

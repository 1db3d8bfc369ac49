"""Agreement between a judge's verdicts and human labels: confusion matrix, agreement, kappa.

Raw agreement flatters a judge when most items align (a judge that always says "aligned" agrees
often); Cohen's kappa corrects for that chance agreement, which is why both are reported. Items are
matched by (index, model) so that files in any order, or covering different subsets, compare fairly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.judge.responses import load_records
from vqa_r1.judge.stats import is_judged, markdown_table
from vqa_r1.typed_config import read_bool

LABELS = ("aligned", "misaligned")


def to_bool(value: Any) -> bool | None:
    """Human files store "True"/"False" strings; judges store booleans."""
    return read_bool(value)


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> float | None:
    """Kappa for two raters on a binary label; None when chance agreement is total (undefined)."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(a == b for a, b in pairs) / n
    first = sum(a for a, _ in pairs) / n
    second = sum(b for _, b in pairs) / n
    expected = first * second + (1 - first) * (1 - second)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1 - expected)


@dataclass
class Agreement:
    n: int
    agreement: float
    kappa: float | None
    confusion: dict[str, dict[str, int]]  # human label -> judge label -> count
    unmatched_judge: int = 0
    unmatched_human: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "agreement": self.agreement,
            "kappa": self.kappa,
            "confusion": self.confusion,
        }


def _verdicts(path: Path, field: str, role: str) -> dict[tuple[int, str], bool]:
    verdicts: dict[tuple[int, str], bool] = {}
    for position, record in enumerate(load_records(path)):
        if "index" not in record or "model" not in record:
            raise UserError(f"{path}: record {position} lacks 'index' or 'model' to match on")
        if not is_judged(record):
            continue
        value = to_bool(record.get(field))
        if value is None:
            if field not in record:
                raise UserError(f"{path}: record {position} has no {role} field {field!r}")
            continue
        verdicts[(int(record["index"]), str(record["model"]))] = value
    return verdicts


def compute(
    judge_path: Path,
    human_path: Path,
    judge_field: str = "aligns",
    human_field: str | None = None,
) -> Agreement:
    """``human_field`` defaults to ``human_aligns`` when the human file has it, else ``aligns``."""
    if human_field is None:
        records = load_records(human_path)
        human_field = "human_aligns" if any("human_aligns" in r for r in records) else "aligns"
    judge = _verdicts(judge_path, judge_field, "judge")
    human = _verdicts(human_path, human_field, "human")
    keys = sorted(judge.keys() & human.keys())
    if not keys:
        raise UserError(
            f"no item of {judge_path} matches an item of {human_path} by (index, model)"
        )
    pairs = [(judge[k], human[k]) for k in keys]
    confusion = {h: {j: 0 for j in LABELS} for h in LABELS}
    for j, h in pairs:
        confusion[LABELS[0] if h else LABELS[1]][LABELS[0] if j else LABELS[1]] += 1
    return Agreement(
        n=len(pairs),
        agreement=sum(j == h for j, h in pairs) / len(pairs),
        kappa=cohen_kappa(pairs),
        confusion=confusion,
        unmatched_judge=len(judge.keys() - human.keys()),
        unmatched_human=len(human.keys() - judge.keys()),
    )


def render(result: Agreement, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.as_json(), indent=2)
    if fmt != "markdown":
        raise UserError(f"--format {fmt}: use markdown or json")
    kappa = "undefined" if result.kappa is None else f"{result.kappa:.3f}"
    header = ["human \\ judge", *LABELS]
    rows = [[h, *(str(result.confusion[h][j]) for j in LABELS)] for h in LABELS]
    lines = [
        f"n = {result.n}, agreement = {result.agreement:.3f}, Cohen's kappa = {kappa}",
        "",
        markdown_table(header, rows),
    ]
    if result.unmatched_judge or result.unmatched_human:
        lines += [
            "",
            f"unmatched: {result.unmatched_judge} judge item(s), "
            f"{result.unmatched_human} human item(s)",
        ]
    return "\n".join(lines)

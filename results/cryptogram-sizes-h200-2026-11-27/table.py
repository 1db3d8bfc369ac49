"""The table of this folder's README from its files (run from the repository root:
`python results/cryptogram-sizes-h200-2026-11-27/table.py`): exact-message accuracy with its
Wilson interval, char accuracy, the random-guess floor (data/cryptogram.py guess_chance over the
items) and the one-sided p above it, per-words accuracy, and the two-sided p against setting A."""

import json
from pathlib import Path

from vqa_r1.data.cryptogram import guess_chance
from vqa_r1.metrics import one_sided_binomial_p, two_proportion_p, two_sided, wilson_interval

HERE = Path(__file__).resolve().parent
SETTINGS = {  # name: (alphabet, words per message, letters per word), as run.sh generates them
    "A": ("abcde", "1-2", "2-3"),
    "B": ("abcdef", "1-2", "2-3"),
    "C": ("abcde", "1-3", "2-3"),
    "D": ("abcde", "1-2", "2-4"),
}


def row(name: str, reference: int | None) -> tuple[str, int]:
    scores = json.loads((HERE / f"scores-{name}.json").read_text())
    records = json.loads((HERE / f"generated_responses-{name}.json").read_text())
    alphabet, words, letters = SETTINGS[name]
    n = scores["n"]
    k = round(scores["accuracy"] * n)
    low, high = wilson_interval(k, n)
    chances = [guess_chance(r["coded_message"], r["true_response"], len(alphabet)) for r in records]
    floor = sum(chances) / len(chances)
    per = "; ".join(
        f"{key} {v['accuracy']:.2f} (n = {v['n']})" for key, v in scores["per_relation"].items()
    )
    if reference is None:
        versus = ""
    else:
        versus = f"{two_sided(two_proportion_p(k, n, reference, n)):.2g}"
    cells = [
        name, alphabet, words, letters, f"{scores['accuracy']:.3f} [{low:.3f}, {high:.3f}]",
        f"{scores['char_accuracy']:.3f}", f"{floor:.3f}", f"{one_sided_binomial_p(k, n, floor):.1e}",
        per, versus,
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |", k


if __name__ == "__main__":
    print(
        "| setting | alphabet | words | letters a word | exact message [95 % CI] | char accuracy "
        "| random guess | p above it | per number of words | p vs A (two-sided) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    line, a = row("A", None)
    print(line)
    for name in "BCD":
        print(row(name, a)[0])

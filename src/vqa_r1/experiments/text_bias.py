"""The text-bias study: does a training set whose labels the relation alone predicts teach the
model to answer from the text instead of the image?

Training sets at each bias level (``none``: the unbiased set; a number: the accuracy a text-only
classifier reaches on the undersampled set, data/bias.py) x each method (SFT, GRPO from the base
model), all evaluated on the same unbiased test split, with the base model as the reference row.
The comparison: within each method, a Cochran-Armitage trend test of accuracy over the achieved
bias levels, and each level against the unbiased level (two-proportion test).
"""

from __future__ import annotations

from vqa_r1.experiments.study import Study


def level_name(level: str) -> str:
    return "none" if level.strip().lower() == "none" else f"{float(level):g}"


def design(b: Study) -> None:
    spec = b.spec
    source = b.source_dataset()
    trained_on: dict[str, str] = {}
    cards: dict[str, str] = {}
    for level in spec.bias_levels:
        name = level_name(level)
        if name == "none":
            trained_on[name] = source
            cards[name] = b.measure_bias(source, spec.bias_kind)
            continue
        folder = b.root / "data" / f"{spec.bias_kind}-bias-{name}"
        b.prepare_bias(source, folder, spec.bias_kind, float(level), spec.bias_seed)
        trained_on[name] = str(folder)
        cards[name] = f"data/{folder.name}/bias_card.json"

    rows = [{"step": "eval/base", "labels": {"method": "base", "bias level": "-"}}]
    b.evaluate("eval/base", source, {"method": "base"})
    for method in spec.methods:
        for level in spec.bias_levels:
            name = level_name(level)
            labels = {"method": method, "bias": name}
            steps = {}
            for seed in b.seeds(method):  # experiment.seeds: one run and evaluation per seed
                run = b.train(
                    b.seeded(f"runs/{method}-{name}", seed),
                    method,
                    trained_on[name],
                    labels,
                    extra=b.seed_override(seed),
                )
                step = b.seeded(f"eval/{method}-{name}", seed)
                b.evaluate(step, source, labels, run)
                steps[seed] = step
            row = b.seed_row({"labels": {"method": method, "bias level": name}}, steps)
            row["from_files"] = {
                "achieved bias": [cards[name], "achieved"],
                "train n": [cards[name], "n"],
            }
            rows.append(row)
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"{spec.bias_kind.capitalize()}-bias study: accuracy on the unbiased "
            f"{spec.eval_split} split",
            "rows": rows,
            "per_relation": True,
            "tests": [
                {"kind": "trend", "x": "achieved bias", "within": "method", "skip": ["base"]},
                {"kind": "versus", "within": "method", "reference": {"bias level": "none"}},
                {"kind": "versus", "reference": {"method": "base"}},
            ],
            "plots": [
                {
                    "kind": "trend",
                    "x": "achieved bias",
                    "hue": "method",
                    "skip": ["base"],
                    "reference": {"method": "base"},
                    "file": "accuracy_vs_bias.png",
                }
            ],
        }
    )

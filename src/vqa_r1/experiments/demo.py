"""The demo: the study's four rows on one dataset, as an experiment like the others.

GRPO from the base model is a fresh LoRA; SFT-then-GRPO continues the SFT adapter (and waits for
the SFT run). Every row is evaluated on the same split; the table compares each with the base
model and with chance, and the GRPO runs' reward curves are drawn beside it.
"""

from __future__ import annotations

from vqa_r1.experiments.study import TWO_IMAGE, Study


def design(b: Study) -> None:
    spec = b.spec
    data = b.source_dataset()
    # with experiment.seeds=N every trained row runs once per seed (SFT then GRPO continues the
    # SFT run of the same seed); the base row is greedy decoding of one model: evaluated once
    runs = b.train_rows(spec.rows, data, "model")
    rows = []
    for row in spec.rows:
        steps = {}
        for seed in [None] if row == "base" else b.seeds("sft"):
            name = b.seeded(f"eval/{row}", seed)
            b.evaluate(name, data, {"model": row}, runs.get((row, seed)))
            steps[seed] = name
        rows.append(b.seed_row({"labels": {"model": row}}, steps))
    on = " (two-image questions)" if spec.dataset == TWO_IMAGE else ""
    tests: list[dict] = [{"kind": "chance"}]
    if "base" in spec.rows:
        tests.append({"kind": "versus", "reference": {"model": "base"}})
    elif "sft" in spec.rows and len(spec.rows) > 1:
        # without the base row (e.g. --rows sft,sft+grpo): what GRPO continuing SFT adds
        tests.append({"kind": "versus", "reference": {"model": "sft"}})
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Demo on {b.model}{on}: accuracy on the {spec.eval_split} split",
            "rows": rows,
            "per_relation": True,
            "tests": tests,
            "plots": [{"kind": "bars", "group": "model", "file": "accuracy.png"}],
        }
    )
    grpo = [
        step.name
        for (name, _), step in runs.items()
        if name in ("grpo", "sft+grpo") and name in spec.rows
    ]
    if grpo:
        b.declare_plot({"kind": "rewards", "steps": grpo, "file": "reward_curve.png"})

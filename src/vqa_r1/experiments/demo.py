"""The demo: the study's four rows on one dataset, as an experiment like the others.

GRPO from the base model is a fresh LoRA; SFT-then-GRPO continues the SFT adapter (and waits for
the SFT run). Every row is evaluated on the same split; the table compares each with the base
model and with chance, and the GRPO runs' reward curves are drawn beside it.
"""

from __future__ import annotations

from vqa_r1.experiments.builder import Builder


def plan(b: Builder) -> None:
    spec = b.spec
    data = b.source_dataset()
    runs = {}
    if "sft" in spec.rows or "sft+grpo" in spec.rows:
        runs["sft"] = b.train("runs/sft", "sft", data, {"model": "sft"})
    if "grpo" in spec.rows:
        runs["grpo"] = b.train("runs/grpo", "grpo", data, {"model": "grpo"})
    if "sft+grpo" in spec.rows:
        sft = runs["sft"]
        runs["sft+grpo"] = b.train(
            "runs/sft+grpo",
            "grpo",
            data,
            {"model": "sft+grpo"},
            init_adapter=str(sft.run_dir / "final"),
            after=(sft.name,),
        )
    rows = []
    for row in spec.rows:
        b.evaluate(f"eval/{row}", data, {"model": row}, runs.get(row))
        rows.append({"step": f"eval/{row}", "labels": {"model": row}})
    tests: list[dict] = [{"kind": "chance"}]
    if "base" in spec.rows:
        tests.append({"kind": "versus", "reference": {"model": "base"}})
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Demo on {b.model}: accuracy on the {spec.eval_split} split",
            "rows": rows,
            "per_relation": True,
            "tests": tests,
            "plots": [{"kind": "bars", "group": "model", "file": "accuracy.png"}],
        }
    )
    grpo = [runs[name].name for name in ("grpo", "sft+grpo") if name in runs and name in spec.rows]
    if grpo:
        b.declare_plot({"kind": "rewards", "steps": grpo, "file": "reward_curve.png"})

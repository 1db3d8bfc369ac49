"""The prompt-tuning study: can a few trained virtual tokens, the model frozen, teach the task?

Two modes (vqa_r1.train.prompt_tuning): ``answer`` (trained on answers alone, scored by P(True)
vs P(False) at the answer position) and ``reasoning`` (trained on the reasoning targets, scored
on generated text). Each mode's prompt is compared with the base model scored the same way, no
virtual tokens (two-proportion test within the mode).
"""

from __future__ import annotations

from vqa_r1.experiments.builder import Builder


def plan(b: Builder) -> None:
    spec = b.spec
    rows = []
    for mode in spec.prompt_modes:
        base = b.prompt_tune(f"eval/base-{mode}", mode, base=True)
        tuned = b.prompt_tune(f"runs/prompt-{mode}", mode, base=False)
        for step, model in ((base, "base"), (tuned, "prompt-tuned")):
            scores = (
                f"{step.name}/scores.json" if model == "base" else f"{step.name}/eval/scores.json"
            )
            rows.append(
                {"step": step.name, "scores": scores, "labels": {"mode": mode, "model": model}}
            )
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Prompt tuning: accuracy on the {spec.eval_split} split, per mode",
            "rows": rows,
            "tests": [{"kind": "versus", "within": "mode", "reference": {"model": "base"}}],
            "plots": [{"kind": "bars", "group": "mode", "hue": "model", "file": "accuracy.png"}],
        }
    )

"""The prompt-tuning study: can a few trained virtual tokens, the model frozen, teach the task?

Two modes (vqa_r1.train.prompt_tuning): ``answer`` (trained on answers alone, scored by P(True)
vs P(False) at the answer position) and ``reasoning`` (trained on the reasoning targets, scored
on generated text). Each mode's prompt is compared with the base model scored the same way, no
virtual tokens (two-proportion test within the mode).
"""

from __future__ import annotations

from vqa_r1.experiments.study import Study


def design(b: Study) -> None:
    spec = b.spec
    rows = []
    for mode in spec.prompt_modes:
        base = b.prompt_tune(f"eval/base-{mode}", mode, base=True)
        rows.append({"step": base.name, "scores": f"{base.name}/scores.json",
                     "labels": {"mode": mode, "model": "base"}})  # fmt: skip
        tuned = {}
        for seed in b.seeds("prompt_tune"):  # experiment.seeds: one prompt per seed
            step = b.prompt_tune(
                b.seeded(f"runs/prompt-{mode}", seed), mode, base=False, extra=b.seed_override(seed)
            )
            tuned[seed] = step.name
        labels = {"mode": mode, "model": "prompt-tuned"}
        if list(tuned) == [None]:
            rows.append({"step": tuned[None], "scores": f"{tuned[None]}/eval/scores.json",
                         "labels": labels})  # fmt: skip
        else:
            seeds = [
                {"seed": s, "step": n, "scores": f"{n}/eval/scores.json"} for s, n in tuned.items()
            ]
            rows.append({"labels": labels, "seeds": seeds})
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Prompt tuning: accuracy on the {spec.eval_split} split, per mode",
            "rows": rows,
            "tests": [{"kind": "versus", "within": "mode", "reference": {"model": "base"}}],
            "plots": [{"kind": "bars", "group": "mode", "hue": "model", "file": "accuracy.png"}],
        }
    )

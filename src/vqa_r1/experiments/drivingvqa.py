"""The DrivingVQA study: reasoning that grounds each relevant object with a box, then a
multiple-choice answer.

SFT on the interleaved explanations (``[x1, y1, x2, y2] entity`` inside ``<think>``), merge the
adapter into the base model, GRPO on the merged model with multiple-choice accuracy, box IoU and
format rewards, and evaluate base, SFT and SFT -> GRPO on the test split (exact letter sets, and
the boxes written against the items': box IoU, entities grounded at IoU >= 0.5). The comparisons:
each trained model against the base model and GRPO against SFT, on accuracy and on box IoU (the
bootstrap over seeds and items with ``experiment.seeds``), Holm-adjusted over the table.
"""

from __future__ import annotations

from vqa_r1.experiments.study import Study


def design(b: Study) -> None:
    spec = b.spec
    data = b.drivingvqa_dataset()
    b.evaluate("eval/base", data, {"method": "base"})
    rewards = []
    if spec.grpo_rewards:  # the recipe's weights belong to the recipe's rewards
        weights = spec.grpo_reward_weights
        rewards = [
            f"train.reward_funcs=[{','.join(spec.grpo_rewards)}]",
            f"train.reward_weights=[{','.join(map(str, weights))}]"
            if weights
            else "train.reward_weights=null",
        ]
    evaluations: dict[str, dict] = {"sft": {}, "grpo": {}}
    for seed in b.seeds("sft"):  # experiment.seeds: the whole chain once per seed
        extra = b.seed_override(seed)
        sft = b.train(b.seeded("runs/sft", seed), "sft", data, {"method": "sft"}, extra=extra)
        evaluations["sft"][seed] = b.seeded("eval/sft", seed)
        b.evaluate(evaluations["sft"][seed], data, {"method": "sft"}, sft)
        merge = b.merge(b.seeded("runs/merge", seed), sft)
        grpo = b.train(
            b.seeded("runs/grpo", seed),
            "grpo",
            data,
            {"method": "sft+merge+grpo"},
            on=merge,
            extra=[*rewards, *extra],
        )
        evaluations["grpo"][seed] = b.seeded("eval/grpo", seed)
        b.evaluate(evaluations["grpo"][seed], data, {"method": "sft+merge+grpo"}, grpo, on=merge)
    rows = [{"step": "eval/base", "labels": {"method": "base"}}]
    rows += [
        b.seed_row({"labels": {"method": method}}, evaluations[name])
        for name, method in (("sft", "sft"), ("grpo", "sft+merge+grpo"))
    ]
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"DrivingVQA: multiple-choice accuracy (exact letter set) on the "
            f"{spec.eval_split} split",
            "rows": rows,
            "tests": [
                {"kind": "versus", "reference": {"method": "base"}},
                {"kind": "versus", "reference": {"method": "sft"}},
                {"kind": "majority"},  # always answering the commonest letter set
                # what GRPO with the IoU reward does to the boxes SFT taught
                {"kind": "grounding", "reference": {"method": "sft"}},
            ],
            # a letter set has no 0.5 chance: the plot marks the most frequent set instead
            "plots": [{"kind": "bars", "group": "method", "file": "accuracy.png", "chance": False}],
        }
    )

"""Groundlight r1_vlm's visual cryptograms: can GRPO teach a model to decode a message with a
substitution table it reads from an image, and does the rewards' gate matter?

The data is data/cryptogram.py's (a decoder image per example, a coded message of one or more
words), made once per setting at submission into its cache. The rows: the base model, SFT on the
train split's targets (``<think> <chars> c a t </chars> </think> <answer> cat </answer>``), and
GRPO twice, with the same format reward and either r1_vlm's gated decoding and correctness
rewards or the same rewards without the gate (rewards/cryptogram.py; Groundlight found the
ungated decoding reward hacked by copying the coded message into ``<chars>``). Both GRPO runs
start where ``experiment.cryptogram_grpo_from`` says (the SFT run by default: a model that never
wrote ``<chars>`` earns nothing to learn from). The train split is ordered by number of words
(``cryptogram_order: curriculum``) and the spec's settings keep that order in training
(``train.train_sampling_strategy=sequential`` for SFT, ``train.shuffle_dataset=false`` for GRPO).

Every model is evaluated on the held-out test split (exact decoded message; the character accuracy
of ``<chars>``, the gated accuracy and the share of copies read from each scores.json). Tests:
each trained row against the base model, gated against ungated GRPO (two-proportion tests, or the
seed bootstrap with ``experiment.seeds``); accuracy per number of words; the reward components of
both GRPO runs over their steps.
"""

from __future__ import annotations

from vqa_r1.errors import UserError
from vqa_r1.experiments.study import Study

FORMAT = "cryptogram_format"
REWARDS = {
    "gated": [FORMAT, "cryptogram_decoding", "cryptogram_correct"],
    "ungated": [FORMAT, "cryptogram_decoding_ungated", "cryptogram_correct_ungated"],
}
# read from each single-seed evaluation's scores.json beside the table's accuracy
SCORE_COLUMNS = {
    "char accuracy": "char_accuracy",
    "accuracy with chars": "accuracy_with_chars",
    "chars nearer code": "chars_nearer_code",
    "format rate": "format_rate",
}


def cryptogram_spec(spec):
    """The data/cryptogram.py settings of an experiment spec (its cache key)."""
    from vqa_r1.data.cryptogram import CryptogramSpec

    splits = {
        "train": spec.cryptogram_train,
        "validation": spec.cryptogram_validation,
        "test": spec.cryptogram_test,
    }
    if len(spec.cryptogram_word_lengths) != 2:
        raise UserError(
            f"experiment.cryptogram_word_lengths: min,max, not {spec.cryptogram_word_lengths}"
        )
    try:
        return CryptogramSpec(
            splits=splits,
            seed=spec.cryptogram_seed,
            test_seed=spec.cryptogram_test_seed,
            alphabet=spec.cryptogram_alphabet,
            word_counts=tuple(spec.cryptogram_word_counts),
            word_lengths=tuple(spec.cryptogram_word_lengths),
            words=spec.cryptogram_words,
            image_size=spec.cryptogram_image_size,
            order=spec.cryptogram_order,
            worked_steps=spec.cryptogram_worked_steps,
            letter_colours=spec.cryptogram_letter_colours,
            layout=spec.cryptogram_layout,
        )
    except ValueError as e:
        raise UserError(f"experiment: cryptograms: {e}") from None


def cryptogram_data(b: Study) -> str:
    """The cryptograms' folder, generated at submission into its cache (keyed by the settings);
    a dry run only names it."""
    from vqa_r1.data.cryptogram import cryptogram_dataset_dir, cryptogram_target, word_list

    settings = cryptogram_spec(b.spec)
    try:
        word_list(settings)  # too few words for the alphabet: refused before anything is queued
    except ValueError as e:
        raise UserError(f"experiment: cryptograms: {e}") from None
    s = b.spec
    what = (
        f"cryptograms (train {s.cryptogram_train} in {s.cryptogram_order} order, validation "
        f"{s.cryptogram_validation}, test {s.cryptogram_test}; alphabet {s.cryptogram_alphabet}, "
        f"{'/'.join(map(str, s.cryptogram_word_counts))} words of "
        f"{'-'.join(map(str, s.cryptogram_word_lengths))} letters ({s.cryptogram_words}), "
        f"{s.cryptogram_image_size} px {s.cryptogram_layout}, seed {s.cryptogram_seed}"
        f"{f', test seed {s.cryptogram_test_seed}' if s.cryptogram_test_seed is not None else ''}"
        f"{', worked steps' if s.cryptogram_worked_steps else ''}"
        f"{', letters in colours' if s.cryptogram_letter_colours else ''})"
    )
    return b.cached_dataset(
        what, lambda: cryptogram_target(settings), lambda: cryptogram_dataset_dir(settings)
    )


def reward_overrides(kind: str) -> list[str]:
    """One GRPO condition's rewards, each weighted 1 (the recipe's weights are its rewards')."""
    return [f"train.reward_funcs=[{','.join(REWARDS[kind])}]", "train.reward_weights=null"]


def design(b: Study) -> None:
    spec = b.spec
    data = cryptogram_data(b)
    from_sft = spec.cryptogram_grpo_from == "sft"
    grpo_model = "sft+grpo" if from_sft else "grpo"
    runs: dict[tuple[str, int | None], object] = {}
    for seed in b.seeds("sft"):  # experiment.seeds: each chain once per seed
        extra = b.seed_override(seed)
        sft = runs["sft", seed] = b.train(
            b.seeded("runs/sft", seed), "sft", data, {"model": "sft"}, extra=extra
        )
        for kind in REWARDS:
            runs[kind, seed] = b.train(
                b.seeded(f"runs/grpo-{kind}", seed),
                "grpo",
                data,
                {"model": grpo_model, "rewards": kind},
                continues=sft if from_sft else None,
                extra=[*reward_overrides(kind), *extra],
            )
    # (model, rewards, the run's key in ``runs``, the evaluation's folder)
    conditions = [("base", "-", None, "eval/base"), ("sft", "-", "sft", "eval/sft")]
    conditions += [(grpo_model, kind, kind, f"eval/grpo-{kind}") for kind in REWARDS]
    rows = []
    for model, rewards, run, folder in conditions:
        steps = {}
        for seed in [None] if run is None else b.seeds("sft"):  # the base model: greedy, once
            name = b.seeded(folder, seed)
            b.evaluate(name, data, {"model": model, "rewards": rewards}, runs.get((run, seed)))
            steps[seed] = name
        row = b.seed_row({"labels": {"model": model, "rewards": rewards}}, steps)
        if spec.seeds == 1:  # single runs: each evaluation's other scores beside the accuracy
            row["from_files"] = {
                column: [f"{steps[None]}/scores.json", key] for column, key in SCORE_COLUMNS.items()
            }
        rows.append(row)
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Cryptograms on {b.model}: exact decoded message on the {spec.eval_split} "
            f"split (char accuracy: the <chars> block, 1 - normalised edit distance; accuracy with "
            "chars: the answer and every character right; chars nearer code: copies the gate "
            "refuses); GRPO from " + ("the SFT run" if from_sft else "the base model"),
            "rows": rows,
            "per_words": True,  # scores.json's per_relation: "1 word", "2 words"
            "tests": [
                {"kind": "versus", "reference": {"model": "base"}},
                # an exact message has no 0.5 chance: a random decoder of the rules is the floor
                {
                    "kind": "guess",
                    "alphabet_size": len(spec.cryptogram_alphabet),
                    "derangement": True,
                },
                {"kind": "versus", "within": "model", "reference": {"rewards": "ungated"}},
            ],
            "plots": [
                {
                    "kind": "bars",
                    "group": "model",
                    "hue": "rewards",
                    "reference": {"model": "base"},  # no 0.5 chance: an exact message
                    "file": "accuracy.png",
                }
            ],
        }
    )
    grpo = [step.name for (name, _), step in runs.items() if name in REWARDS]
    b.declare_plot({"kind": "rewards", "steps": grpo, "file": "plots/reward_curves.png"})

"""R1-V's counting-generalisation study: does GRPO on counting carry out of distribution better
than chain-of-thought SFT?

R1-V trained Qwen2-VL-2B with GRPO on CLEVR-CoGenT condition A and reported that it generalises
to condition B and to SuperCLEVR better than SFT. Here the scenes are data/counting.py's
CLEVR-CoGenT-style stand-in, made once per setting at submission: condition A's ``train`` split
trains every model, its ``test`` split is the in-distribution test, ``test_b`` (condition B:
the shape-colour pairing swapped, 7-10 objects instead of 3-6) the out-of-distribution one, and a
SuperCLEVR counting folder (``experiment.superclevr``) a third when given. The rows
(``experiment.rows``): the base model, CoT SFT (the scenes' ``reasoning`` in <think>), GRPO
(the ``count`` reward and the recipe's other rewards, its format reward) and optionally SFT then
GRPO. The tests: each trained model against the base model and GRPO against SFT on each set
(R1-V's claim is the one on test_b), two-proportion tests; accuracy by the true count beside it.
"""

from __future__ import annotations

from pathlib import Path

from vqa_r1.errors import UserError
from vqa_r1.experiments.study import Study

GRPO_ROWS = ("grpo", "sft+grpo")


def counting_spec(spec):
    """The data/counting.py settings of an experiment spec (its cache key)."""
    from vqa_r1.data.counting import CountingSpec

    splits = {
        "train": ["A", spec.counting_train],
        "validation": ["A", spec.counting_validation],
        "test": ["A", spec.counting_test],
        "test_b": ["B", spec.counting_test_b],
    }
    try:
        return CountingSpec(
            splits=splits,
            seed=spec.counting_seed,
            test_seed=spec.counting_test_seed,
            image_size=spec.counting_image_size,
        )
    except ValueError as e:
        raise UserError(f"experiment: counting scenes: {e}") from None


def counting_data(b: Study) -> str:
    """The counting scenes' folder, generated at submission into its cache (keyed by the
    settings); a dry run only names it."""
    from vqa_r1.data.counting import counting_dataset_dir, counting_target

    settings = counting_spec(b.spec)
    what = (
        f"counting scenes (A: train {b.spec.counting_train}, validation "
        f"{b.spec.counting_validation}, test {b.spec.counting_test}; B: test_b "
        f"{b.spec.counting_test_b}; seed {b.spec.counting_seed}"
        + (f", test seed {settings.test_seed}" if settings.test_seed is not None else "")
        + f", {b.spec.counting_image_size} px)"
    )
    return b.cached_dataset(
        what, lambda: counting_target(settings), lambda: counting_dataset_dir(settings)
    )


def superclevr_folder(b: Study) -> str | None:
    """``experiment.superclevr`` checked now, in one line: a SuperCLEVR counting release (or a
    folder saved from one); None when empty."""
    from vqa_r1.data import formats
    from vqa_r1.data.formats import superclevr

    if not b.spec.superclevr:
        return None
    folder = Path(b.spec.superclevr).expanduser().resolve()
    if not folder.is_dir():
        raise UserError(f"experiment.superclevr: {folder} is not a folder")
    if not (superclevr.detect(folder) or formats.is_saved_dataset(folder)):
        raise UserError(
            f"experiment.superclevr: {folder} is not a SuperCLEVR counting folder ({superclevr.NEEDS}"
            f": {superclevr.LAYOUT})"
        )
    b.notes.append(f"SuperCLEVR: {formats.describe(folder)}")
    return str(folder)


def grpo_rewards(b: Study) -> list[str]:
    """The recipe's GRPO rewards with its answer accuracy replaced by the ``count`` reward (its
    format reward and weights kept)."""
    funcs = b.config("grpo").train.reward_funcs
    counted = ["count" if f == "accuracy" else f for f in funcs]
    if "count" not in counted:
        counted = ["count", *counted]
        weights = b.config("grpo").train.reward_weights
        if weights is not None:
            return [
                f"train.reward_funcs=[{','.join(counted)}]",
                f"train.reward_weights=[{','.join(map(str, [1.0, *weights]))}]",
            ]
    return [f"train.reward_funcs=[{','.join(counted)}]"]


PRIOR_FILE = "data/prior.json"


def fit_prior(b: Study, data: str) -> str:
    """The blind prior of the training split, written by the launch into the experiment folder
    (``data/prior.json``): per question kind (all objects, a shape, a colour), the count most
    frequent in condition A's train split. Answering that without looking at the image is the
    floor a counting model must beat; the table's ``prior`` test reads it. Returns its path
    relative to the experiment folder."""
    out = b.root / PRIOR_FILE
    b.notes.append(
        "blind prior: the commonest training count per question kind, fitted at submission"
    )

    def make() -> None:
        from collections import Counter

        from vqa_r1.answers import label_of
        from vqa_r1.data.counting import question_kind
        from vqa_r1.data.datasets import load_split
        from vqa_r1.io import atomic_write_json

        ds = load_split(data, "train", check_images=False)
        counts: dict[str, Counter] = {}
        for question, solution in zip(ds["problem"], ds["solution"], strict=True):
            counts.setdefault(question_kind(question), Counter())[label_of(solution, "robust")] += 1
        # ties broken by the smaller count, so the same split gives the same prior
        prior = {
            kind: min(c, key=lambda v: (-c[v], int(v) if v.isdigit() else v))
            for kind, c in sorted(counts.items())
        }
        atomic_write_json(
            out,
            {
                "fitted on": f"{data} [train]",
                "n": len(ds),
                "by question kind": prior,
                "counts": {k: dict(sorted(c.items())) for k, c in sorted(counts.items())},
            },
        )

    b.builder.prep("the blind prior of the training split (data/prior.json)", make)
    return PRIOR_FILE


def design(b: Study) -> None:
    spec = b.spec
    superclevr = superclevr_folder(b)  # a bad folder is refused before the scenes are made
    data = counting_data(b)
    sets = {"A": (data, spec.eval_split), "B": (data, "test_b")}
    if superclevr:
        sets["SuperCLEVR"] = (superclevr, "test")
    trained = [row for row in spec.rows if row != "base"]
    cot = ["data.with_reasoning=true"]
    rewards = grpo_rewards(b) if any(r in GRPO_ROWS for r in trained) else []
    # experiment.seeds: each chain once per seed
    runs = b.train_rows(spec.rows, data, "method", sft_extra=cot, grpo_extra=rewards)
    prior = fit_prior(b, data)
    rows = []
    for row in b.blind_rows(spec.rows):
        for where, (folder, split) in sets.items():
            steps = {}
            for seed in [None] if row == "base" else b.seeds("sft"):
                name = b.seeded(f"eval/{row.replace(' ', '-')}-on-{where}", seed)
                labels = {"method": row, "eval": where}
                extra = [f"eval.split={split}", *b.blind_extra(row)]
                b.evaluate(name, folder, labels, runs.get((row, seed)), extra=extra)
                steps[seed] = name
            rows.append(b.seed_row({"labels": {"method": row, "evaluated on": where}}, steps))
    # a count's chance is not 0.5: the floors are always giving the set's commonest count, and
    # the answer the training split makes likeliest for the question's kind (a blind prior)
    tests: list[dict] = [{"kind": "majority"}, {"kind": "prior", "file": prior}]
    if spec.blind:  # each trained row against its twin trained and evaluated on blank images
        tests.append({"kind": "blind", "label": "method", "match": ["evaluated on"]})
    if "base" in spec.rows:
        tests.append({"kind": "versus", "match": ["evaluated on"], "reference": {"method": "base"}})
    if "sft" in spec.rows and "grpo" in spec.rows:  # R1-V's claim: on B (and SuperCLEVR)
        tests.append({"kind": "versus", "match": ["evaluated on"], "reference": {"method": "sft"}})
    names = ", ".join(f"{w} ({s})" if w != "SuperCLEVR" else w for w, (_, s) in sets.items())
    b.declare_table(
        {
            "name": "accuracy",
            "title": f"Counting on {b.model}: accuracy trained on condition A, evaluated on "
            f"{names}; sft is chain-of-thought SFT",
            "rows": rows,
            "per_count": True,
            "per_kind": True,
            "tests": tests,
            "plots": [
                {
                    "kind": "bars",
                    "group": "evaluated on",
                    "hue": "method",
                    "chance": False,  # a count has no 0.5 chance line
                    "file": "accuracy.png",
                }
            ],
        }
    )
    grpo = [step.name for (name, _), step in runs.items() if name in GRPO_ROWS]
    if grpo:
        b.declare_plot({"kind": "rewards", "steps": grpo, "file": "plots/reward_curve.png"})

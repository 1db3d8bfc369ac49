"""What an experiment declares: its kind, conditions and per-verb settings, as one typed file.

A spec file (``specs/<name>.yaml``) fixes the study's design (bias levels, methods, domains); the
recipes of the chosen model fix how each run trains. ``--set experiment.KEY=VALUE`` changes the
design for one launch (a reduced CI version, another level), ``--set [VERB:]KEY=VALUE`` the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from vqa_r1.domains import ANY, SEED
from vqa_r1.errors import UserError
from vqa_r1.typed_config import build, load_mapping, option, parse_overrides

SPEC_DIR = Path(__file__).parent / "specs"
Kind = Literal[
    "demo", "text-bias", "sim2real", "drivingvqa", "prompt-tuning", "counting", "cryptogram"
]
DEMO_ROWS = ("base", "sft", "grpo", "sft+grpo")


def _levels(value: object) -> object:
    """Bias levels are "none" or a target accuracy in (0.5, 1]; checked before any job exists."""
    items = value if isinstance(value, list) else str(value).strip("[]").split(",")
    for item in items:
        text = str(item).strip().lower()
        if text == "none":
            continue
        try:
            level = float(text)
        except ValueError:
            raise ValueError(f"bias level {item!r} is neither 'none' nor a number") from None
        if not 0.5 < level <= 1.0:
            raise ValueError(f"bias level {level} must be in (0.5, 1]: 0.5 is no bias")
    return value


@dataclass
class VerbSettings:
    """Overrides (``KEY=VALUE``, as ``--set``) applied to every run of one verb."""

    sft: list[str] = option(default_factory=list, help="overrides of the SFT runs")
    grpo: list[str] = option(default_factory=list, help="overrides of the GRPO runs")
    merge: list[str] = option(default_factory=list, help="overrides of the merge runs")
    evaluate: list[str] = option(default_factory=list, help="overrides of the evaluations")
    prompt_tune: list[str] = option(default_factory=list, help="overrides of prompt tuning")


@dataclass
class ExperimentSpec:
    kind: Kind = option(help="which study design this is")
    description: str = option("", help="one paragraph: the question the experiment answers")
    methods: list[str] = option(
        default_factory=lambda: ["sft", "grpo"], help="training methods compared (sft, grpo)"
    )
    dataset: str = option(
        "synthetic",
        help="'synthetic' (the model's recipe data), 'two-image' (questions over two images, "
        "data/two_image.py; runs read data.images_per_row=2) or a dataset folder",
    )
    eval_split: str = option("test", help="split the reported numbers come from")
    bias_kind: Literal["text", "visual"] = option("text", help="text-bias: which bias")
    bias_levels: list[str] = option(
        default_factory=lambda: ["none"],
        help="text-bias: 'none' or target accuracies of the bias classifier",
        parse=_levels,
    )
    bias_seed: int = option(0, help="text-bias: undersampling seed", domain=SEED)
    real_dataset: str = option(
        "shifted", help="sim2real: 'shifted' (synthetic domain shift) or a real dataset folder"
    )
    grpo_rewards: list[str] = option(
        default_factory=list, help="drivingvqa: GRPO rewards; empty: the recipe's"
    )
    grpo_reward_weights: list[float] | None = option(
        None, help="drivingvqa: one weight per GRPO reward; none: all 1", domain=ANY
    )
    drivingvqa_standin: Literal["free", "grid"] = option(
        "grid",
        help="drivingvqa: the synthetic stand-in's layout (dataset: synthetic): grid (three "
        "objects in a 3 x 3 grid, one per row and column: each box follows from the layout the "
        "tiny models read) or free (anywhere, any size)",
    )
    prompt_modes: list[str] = option(
        default_factory=lambda: ["answer", "reasoning"], help="prompt-tuning: modes compared"
    )
    rows: list[str] = option(
        default_factory=lambda: list(DEMO_ROWS),
        help=f"demo: the rows trained and evaluated, of {', '.join(DEMO_ROWS)}",
    )
    # ---- counting (experiments/counting.py): the CLEVR-CoGenT-style scenes of data/counting.py;
    # the defaults are sized for the tiny CPU models (the rows trained: ``rows`` above)
    counting_train: int = option(
        400, help="counting: scenes in condition A's train split (SFT and GRPO)", minimum=1
    )
    counting_validation: int = option(
        40, help="counting: scenes in condition A's validation split", minimum=1
    )
    counting_test: int = option(
        200, help="counting: scenes in condition A's test split (in distribution)", minimum=1
    )
    counting_test_b: int = option(
        200,
        help="counting: scenes in condition B's test_b split (swapped shape-colour pairing, "
        "7-10 objects: out of distribution)",
        minimum=1,
    )
    counting_seed: int = option(0, help="counting: the scenes' seed", domain=SEED)
    counting_test_seed: int | None = option(
        None,
        help="counting: the test and test_b scenes' own seed (a fresh draw of the test sets, "
        "recorded; the training scenes keep counting_seed); none: counting_seed",
        domain=SEED,
    )
    counting_image_size: int = option(
        112, help="counting: image side in pixels (at least 112: 10 objects must fit)", minimum=112
    )
    superclevr: str = option(
        "",
        help="counting: a SuperCLEVR counting folder (data/formats/superclevr.py) every model "
        "is also evaluated on; empty: none",
    )
    # ---- end of counting
    # ---- cryptogram (experiments/cryptogram.py): the visual cryptograms of data/cryptogram.py;
    # the defaults are sized for the tiny CPU models (few letters, short words, small images)
    cryptogram_alphabet: str = option(
        "abcdef", help="cryptogram: the letters a decoder maps (each example a new bijection)"
    )
    cryptogram_words: str = option(
        "letters",
        help="cryptogram: 'letters' (random strings over the alphabet), 'builtin' (a short "
        "English list; needs an alphabet that spells its words) or a word file, one a line",
    )
    cryptogram_word_counts: list[int] = option(
        default_factory=lambda: [1, 2],
        help="cryptogram: words per message, each an equal share of every split (r1_vlm: 1,2,3)",
        minimum=1,
    )
    cryptogram_word_lengths: list[int] = option(
        default_factory=lambda: [2, 3], help="cryptogram: letters per word, min,max", minimum=1
    )
    cryptogram_image_size: int = option(
        96, help="cryptogram: decoder image side in pixels", minimum=48
    )
    cryptogram_train: int = option(
        400, help="cryptogram: messages in the train split (SFT and GRPO)", minimum=1
    )
    cryptogram_validation: int = option(
        40, help="cryptogram: messages in the validation split", minimum=1
    )
    cryptogram_test: int = option(
        200, help="cryptogram: held-out messages in the test split (every model)", minimum=1
    )
    cryptogram_seed: int = option(0, help="cryptogram: the dataset's seed", domain=SEED)
    cryptogram_test_seed: int | None = option(
        None,
        help="cryptogram: the test split's own seed (a fresh draw of it, recorded; train still "
        "avoids its messages); none: cryptogram_seed",
        domain=SEED,
    )
    cryptogram_order: Literal["curriculum", "shuffled"] = option(
        "curriculum",
        help="cryptogram: train rows ordered by word count (curriculum; the runs keep the order: "
        "the spec's settings turn the trainers' shuffling off) or mixed",
    )
    cryptogram_worked_steps: bool = option(
        False,
        help="cryptogram: the SFT targets' reasoning reads the decoder cell by cell, then looks "
        "each coded letter up (d -> c, ...), then <chars> (r1_vlm's targets: <chars> alone)",
    )
    cryptogram_letter_colours: bool = option(
        True,
        help="cryptogram: each letter drawn in its own colour (alphabet within abcdef; the tiny "
        "models' vision towers tell colours apart, not letter shapes); false for hub models",
    )
    cryptogram_layout: Literal["grid", "table"] = option(
        "table",
        help="cryptogram: the decoder drawn as cells of 'coded -> plain' (grid) or as two rows, "
        "each coded letter above its plain letter (table: the tiny models' curriculum tables)",
    )
    cryptogram_grpo_from: Literal["base", "sft"] = option(
        "sft",
        help="cryptogram: where both GRPO runs start: the base model (r1_vlm) or the SFT run "
        "(a model that never wrote <chars> earns no reward to learn from)",
    )
    # ---- end of cryptogram
    blind: list[str] = option(
        default_factory=list,
        help="trained rows that get a blind twin ('<row> blind': the same training and "
        "evaluation with data.images=blank, data/blind.py): what the row scores above it is what "
        "the image adds; counting and the demo's rows",
    )
    seeds: int = option(
        1,
        help="training runs per condition, with train.seed = the recipe's seed, +1, ... (each "
        "in its own seed-S folder, evaluated on its own); evaluation-only conditions (greedy "
        "decoding, deterministic) run once",
        minimum=1,
    )
    settings: VerbSettings = field(default_factory=VerbSettings)
    tiny_model: str | None = option(
        None,
        help="the tiny model pretrained for this study's task (a registered name): the plan of a "
        "run on another tiny model says so, since that one was not taught what the task needs",
    )
    # after ``settings``, for the tiny models only (built or pretrained here, ModelSpec.tiny): what
    # a tiny model needs to learn the task in minutes on a CPU and a hub model must not get
    tiny_settings: VerbSettings = field(default_factory=VerbSettings)
    # after ``settings``, for the hub models only: a published study's own settings where they
    # differ from the model's recipe (drivingvqa's SFT); the tiny models keep their CPU recipe
    hub_settings: VerbSettings = field(default_factory=VerbSettings)
    judge: Literal["none", "heuristic", "openai"] = option(
        "none",
        help="after the evaluations, judge whether each row's reasoning supports its answer "
        "(judge/): heuristic: the offline rules; openai: an OpenAI-compatible endpoint "
        "(judge_model, judge_base_url; a vLLM server on the node or an API); an alignment table "
        "per row with McNemar's test against the base row",
    )
    judge_model: str | None = option(None, help="judge=openai: the judge model, e.g. o4-mini")
    judge_base_url: str | None = option(
        None, help="judge=openai: the endpoint (none: OpenAI's); the key from the environment"
    )
    hub_recipe: str | None = option(
        None,
        help="a shipped recipe overlay (recipes/overlays) the GRPO runs of hub models use, e.g. "
        "study: the published study's GRPO (groups of 4, one prompt per step), so its numbers are "
        "reproduced with its settings; none: the model's recipe",
    )

    def __post_init__(self) -> None:
        if self.hub_recipe is not None:
            from vqa_r1.recipes import list_overlays

            if self.hub_recipe not in list_overlays():
                raise UserError(
                    f"experiment.hub_recipe: {self.hub_recipe!r} is not a shipped overlay; "
                    f"choose from {', '.join(list_overlays())}"
                )
        if self.judge == "openai" and not self.judge_model:
            raise UserError("experiment.judge=openai needs experiment.judge_model (e.g. o4-mini)")
        if self.seeds < 1:  # also when built without the typed loader
            raise UserError(f"experiment.seeds must be at least 1, not {self.seeds}")
        wrong = [r for r in self.rows if r not in DEMO_ROWS]
        if wrong or not self.rows:
            raise UserError(
                f"experiment.rows: unknown {wrong or 'empty'}; choose from {', '.join(DEMO_ROWS)}"
            )
        twinless = [r for r in self.blind if r not in self.rows or r == "base"]
        if twinless:
            raise UserError(
                f"experiment.blind: {twinless} not trained rows of this experiment; choose from "
                f"{', '.join(r for r in self.rows if r != 'base')}"
            )
        unknown = [m for m in self.methods if m not in ("sft", "grpo")]
        if unknown:
            raise UserError(f"experiment.methods: unknown {unknown}; choose from sft, grpo")
        if self.tiny_model is not None:
            from vqa_r1.models.registry import MODELS

            if self.tiny_model not in MODELS or not MODELS[self.tiny_model].tiny:
                raise UserError(
                    f"experiment.tiny_model: {self.tiny_model!r} is not a registered tiny model; "
                    "see `vqa-r1 models`"
                )
        bad = [m for m in self.prompt_modes if m not in ("answer", "reasoning")]
        if bad:
            raise UserError(f"experiment.prompt_modes: unknown {bad}; use answer, reasoning")


def list_specs() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def spec_path(name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    path = SPEC_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UserError(
            f"unknown experiment {name!r}: declared are {', '.join(list_specs())} "
            f"(src/vqa_r1/experiments/specs), or give a spec file path"
        )
    return path


def load_spec(name: str, overrides: list[str] | None = None) -> ExperimentSpec:
    """The declared spec with ``experiment.KEY=VALUE`` overrides (the prefix already removed)."""
    path = spec_path(name)
    spec = build(ExperimentSpec, load_mapping(path, "experiment spec"), f"{path}:")
    return build(spec, parse_overrides(overrides, "--set experiment."), "experiment")

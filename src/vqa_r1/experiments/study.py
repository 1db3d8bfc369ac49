"""A study's design as graph steps: its runs, evaluations, datasets and tables.

The study modules (text_bias.py, sim2real.py, ...) say *what* is trained on which data and
evaluated where (their ``design(study)``); ``Study`` turns each of those into a step of the one
graph builder (launch/build.py), with the model's own recipes plus the spec's and the command
line's overrides, and declares the tables the results land in. The datasets the jobs read (the
synthetic scenes, the biased training sets) are made by the executor once it has claimed the
experiment folder, before the first job (``GraphBuilder.prep``): a dry run builds the same graph,
names the same folders, and makes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.launch.build import GraphBuilder
from vqa_r1.launch.graph import Step
from vqa_r1.launch.overrides import route_overrides
from vqa_r1.launch.request import JobOptions
from vqa_r1.recipes import load_config

TWO_IMAGE = "two-image"  # spec.dataset: the two-image generator's questions
VERBS = ("sft", "grpo", "merge", "evaluate", "prompt_tune")


def split_overrides(items: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``--set KEY=V`` (every run), ``--set VERB:KEY=V`` (one verb's runs) and
    ``--set experiment.KEY=V`` (the spec) -> (per-verb overrides, spec overrides)."""
    items = list(items or [])
    spec = [i.removeprefix("experiment.") for i in items if i.startswith("experiment.")]
    runs = [i for i in items if not i.startswith("experiment.")]
    return route_overrides(runs, list(VERBS), VERBS, "verb"), spec


# a blind twin's data settings (data/blind.py): the same rows, every image a grey one of its size
BLIND = ("data.images=blank",)


@dataclass
class Study:
    """Collects the steps (through its ``GraphBuilder``), datasets and tables of one study."""

    spec: Any  # ExperimentSpec
    name: str
    model: str
    root: Path
    builder: GraphBuilder
    overrides: dict[str, list[str]]
    tables: list[dict] = field(default_factory=list)
    plots: list[dict] = field(default_factory=list)  # plots of runs, not of a table's rows
    notes: list[str] = field(default_factory=list)  # what is (or would be) prepared
    generated: set[str] = field(default_factory=set)  # dataset folders this launch makes

    @property
    def job(self) -> JobOptions:
        return self.builder.job

    @property
    def steps(self) -> list[Step]:
        return self.builder.steps

    # ------------------------------------------------------------------------- data
    def source_dataset(self) -> str:
        """The spec's dataset as a folder; the model's synthetic scenes are generated.

        A folder is any that ``--dataset`` takes (saved, or a release converted by the same
        loader); what it is recognised as is noted, so a dry run shows it too."""
        if self.spec.dataset == TWO_IMAGE:
            return self.two_image_dataset()
        if self.spec.dataset != "synthetic":
            from vqa_r1.data.formats import describe

            folder = Path(self.spec.dataset).resolve()
            note = f"dataset: {describe(folder)}"
            if note not in self.notes:
                self.notes.append(note)
            return str(folder)
        return self.synthetic(self.config("sft").data, "synthetic scenes (the SFT recipe's data)")

    def two_image_dataset(self) -> str:
        """The two-image questions (data/two_image.py) in the cache, written once by the launch;
        every run reads two images a row (data.images_per_row=2 unless the command line sets
        it), so vLLM and the memory plan are told so too."""
        from vqa_r1.paths import cache_root

        folder = cache_root() / "data" / "two-image-v2-seed0"

        def make() -> Path:
            from vqa_r1.data.two_image import write_two_image

            if not folder.exists():
                write_two_image(folder)
            return folder

        for items in self.overrides.values():
            if not any(i.split("=", 1)[0] == "data.images_per_row" for i in items):
                items.append("data.images_per_row=2")
        from vqa_r1.models.registry import get_spec

        if get_spec(self.model).tiny:
            # set on the 200 validation pairs (docs/experiments/demo.md, "Two images"): the two
            # layouts' reasoning runs past the recipe's 64 tokens; GRPO rewards the answer and
            # each reading of the reference reasoning (reasoning_steps), sampled at 1.0, 16
            # samples of 4 pairs a step: with 8 samples of 2 pairs the right reading (a tiny
            # model is confident even where it is wrong) was drawn in too few groups to move
            # it, without the accuracy reward the answers drifted from the readings, and at
            # temperature 0.3 GRPO only sharpened the samples towards the greedy answer
            tiny = {
                "grpo": [
                    "train.max_completion_length=128",
                    "train.reward_funcs=[accuracy,format,reasoning_steps]",
                    "train.reward_weights=[1.0,0.5,1.0]",
                    "train.learning_rate=2e-4",
                    "train.temperature=1.0",
                    "train.max_steps=300",
                    "train.per_device_train_batch_size=64",
                    "train.num_generations=16",
                ],
                "evaluate": ["eval.max_new_tokens=128"],
            }
            for verb, items in tiny.items():
                given = {i.split("=", 1)[0] for i in self.overrides[verb]}
                self.overrides[verb][:0] = [i for i in items if i.split("=", 1)[0] not in given]
        what = "two-image questions (multi-image JSONL)"
        return self.cached_dataset(what, lambda: folder, make, lambda: folder.exists())

    def real_dataset(self) -> str:
        """sim2real's real domain: a dataset folder, or the synthetic generator's shifted domain."""
        if self.spec.real_dataset != "shifted":
            return str(Path(self.spec.real_dataset).resolve())
        data = self.config("sft", ["data.synthetic_domain=shifted"]).data
        return self.synthetic(data, "shifted synthetic scenes (the real domain's stand-in)")

    def drivingvqa_dataset(self) -> str:
        """A DrivingVQA folder, or (``synthetic``) the stand-in drawn from synthetic scenes."""
        if self.spec.dataset != "synthetic":
            return str(Path(self.spec.dataset).resolve())
        from vqa_r1.paths import cache_root

        layout = self.spec.drivingvqa_standin
        name = (
            "drivingvqa-standin-v1-seed0"
            if layout == "free"
            else "drivingvqa-standin-grid-v2-seed0"
        )
        folder = cache_root() / "data" / name

        def make() -> Path:
            from vqa_r1.data.drivingvqa_standin import write_standin

            if not folder.exists():
                write_standin(folder, layout=layout, validation=0 if layout == "free" else 200)
            return folder

        what = f"DrivingVQA-format stand-in from synthetic scenes ({layout} layout)"
        return self.cached_dataset(what, lambda: folder, make, lambda: folder.exists())

    def synthetic(self, data_config: Any, what: str) -> str:
        from vqa_r1.data.datasets import dataset_dir, synthetic_target

        return self.cached_dataset(
            what, lambda: synthetic_target(data_config), lambda: dataset_dir(data_config)
        )

    def cached_dataset(
        self,
        what: str,
        target: Callable[[], Path],
        make: Callable[[], Path],
        ready: Callable[[], bool] | None = None,
    ) -> str:
        """A generated dataset kept in the cache under its settings, named now (``target``: its
        configs must match ``make``'s) and made by the launch (``make`` reuses a cached copy)."""
        folder = target()
        cached = ready() if ready is not None else (folder / "hf").exists()
        self.notes.append(f"{what}: {folder} ({'cached' if cached else 'generated at submission'})")
        if not cached:
            self.builder.prep(f"{what}: {folder}", make)
        self.generated.add(str(folder))
        return str(folder)

    def measure_bias(self, source: str, kind: str) -> str:
        """The unbiased set's own bias (near 0.5, never exactly), measured like the biased ones'
        and written as a card beside them by the launch; returns the card's path relative to
        the root."""
        out = self.root / "data" / f"{kind}-bias-none"
        relative = f"data/{out.name}/bias_card.json"
        self.notes.append(f"unbiased training set: its {kind} bias measured at submission")
        index = len(self.notes) - 1

        def make() -> None:
            from vqa_r1.data.bias import text_bias, visual_bias
            from vqa_r1.data.datasets import load_split
            from vqa_r1.io import atomic_write_json

            ds = load_split(source, "train")
            achieved = (text_bias if kind == "text" else visual_bias)(ds)
            card = {
                "kind": kind,
                "source": source,
                "split": "train",
                "achieved": achieved,
                "n": len(ds),
            }
            atomic_write_json(out / "bias_card.json", card)
            self.notes[index] = f"unbiased training set: {kind} bias {achieved:.3f}"

        self.builder.prep(f"the unbiased training set's {kind} bias", make)
        return relative

    def prepare_bias(self, source: str, out: Path, kind: str, target: float, seed: int) -> None:
        """A biased training set, built by the launch (seconds: a classifier on the labels or on
        small image features) before any job is queued, so its achieved bias is known then."""
        what = f"{kind}-biased training set, target {target:g}, seed {seed}"
        self.notes.append(f"{what}: built at submission into {out}")
        index = len(self.notes) - 1
        self.generated.add(str(out))

        def make() -> None:
            from vqa_r1.data.bias import build_biased_dataset

            card = build_biased_dataset(source, out, kind, target, seed=seed)
            self.notes[index] = f"{what}: achieved {card['achieved']:.3f} in {out}"

        self.builder.prep(what, make)

    # ------------------------------------------------------------------------- configs
    def config(self, verb: str, extra: list[str] | None = None) -> RunConfig:
        """The model's recipe for ``verb`` + the spec's settings + the command line's."""
        key = verb.replace("-", "_")
        items = [*self.spec_settings(key), *self.overrides[key], *(extra or [])]
        return load_config(verb, self.model, self.recipe(verb), items)

    def recipe(self, verb: str) -> str | None:
        """The spec's ``hub_recipe`` for a hub model's GRPO runs (the study's own settings, which
        its published numbers were measured with), else None: the model's recipe."""
        from vqa_r1.models.registry import get_spec

        if verb != "grpo" or get_spec(self.model).tiny:
            return None
        return self.spec.hub_recipe

    def spec_settings(self, key: str) -> list[str]:
        """The spec's settings of one verb, then its ``tiny_settings`` when the model is tiny,
        else its ``hub_settings``."""
        from vqa_r1.models.registry import get_spec

        own = self.spec.tiny_settings if get_spec(self.model).tiny else self.spec.hub_settings
        return [*getattr(self.spec.settings, key), *getattr(own, key)]

    # ------------------------------------------------------------------------- seeds
    def seeds(self, verb: str) -> list[int | None]:
        """The training seeds of each condition trained with ``verb``: ``[None]`` with
        ``experiment.seeds=1`` (the recipe's seed, folders as before seeds existed), else the
        recipe's ``train.seed`` (after --set) and the next ``seeds - 1`` integers."""
        if self.spec.seeds == 1:
            return [None]
        if verb == "prompt_tune":
            from vqa_r1.train.prompt_tuning import config_from_overrides

            items = [f"model.name={self.model}", *self.spec_settings("prompt_tune")]
            base = config_from_overrides([*items, *self.overrides["prompt_tune"]]).train.seed
            return [base + k for k in range(self.spec.seeds)]
        base = self.config(verb).train.seed
        return [base + k for k in range(self.spec.seeds)]

    @staticmethod
    def seeded(name: str, seed: int | None) -> str:
        """A step's folder for one seed: ``runs/grpo`` -> ``runs/grpo/seed-43`` (unchanged for
        ``None``, the single-seed layout)."""
        return name if seed is None else f"{name}/seed-{seed}"

    @staticmethod
    def seed_override(seed: int | None) -> list[str]:
        return [] if seed is None else [f"train.seed={seed}"]

    def seed_row(self, row: dict, steps: dict[int | None, str]) -> dict:
        """A table row of a trained condition: its one evaluation step (a single seed, as before
        seeds existed), or one per seed (``seeds``: the report's mean, spread and seed-aware
        test come from them)."""
        if list(steps) == [None]:
            return {**row, "step": steps[None]}
        return {**row, "seeds": [{"seed": s, "step": step} for s, step in steps.items()]}

    # ------------------------------------------------------------------------- steps
    def train_rows(
        self,
        rows: list[str],
        dataset: str,
        label: str,
        sft_extra: list[str] | None = None,
        grpo_extra: list[str] | None = None,
    ) -> dict[tuple[str, int | None], Step]:
        """The training runs of the rows ``sft``, ``grpo`` and ``sft+grpo`` named in ``rows``
        (``label``: the table's column naming them), once per training seed: GRPO is a fresh
        LoRA, SFT-then-GRPO continues the SFT adapter of the same seed and waits for it.
        Returns ``(row, seed) -> step``; the SFT run is made for ``sft+grpo`` alone too. The
        spec's ``blind`` rows are trained a second time as ``<row> blind`` (``runs/<row>-blind``)
        on blank images (``BLIND``)."""
        runs = self._train_rows(rows, dataset, label, sft_extra, grpo_extra)
        blind = [r for r in self.spec.blind if r in rows]
        if blind:
            twins = self._train_rows(
                blind, dataset, label, [*(sft_extra or []), *BLIND],
                [*(grpo_extra or []), *BLIND], suffix=" blind",
            )  # fmt: skip
            runs.update(twins)
        return runs

    def blind_rows(self, rows: list[str]) -> list[str]:
        """``rows`` and, after them, the blind twin of each of the spec's ``blind`` rows."""
        return [*rows, *(f"{r} blind" for r in self.spec.blind if r in rows)]

    @staticmethod
    def blind_extra(row: str) -> list[str]:
        """The data settings of a row's evaluation: blank images for a blind twin."""
        return list(BLIND) if row.endswith(" blind") else []

    def _train_rows(
        self,
        rows: list[str],
        dataset: str,
        label: str,
        sft_extra: list[str] | None = None,
        grpo_extra: list[str] | None = None,
        suffix: str = "",
    ) -> dict[tuple[str, int | None], Step]:
        runs: dict[tuple[str, int | None], Step] = {}
        if not any(r in ("sft", "grpo", "sft+grpo") for r in rows):
            return runs
        sft_extra, grpo_extra = list(sft_extra or []), list(grpo_extra or [])
        folder = suffix.replace(" ", "-")
        for seed in self.seeds("sft"):
            extra = self.seed_override(seed)
            if "sft" in rows or "sft+grpo" in rows:
                runs["sft" + suffix, seed] = self.train(
                    self.seeded(f"runs/sft{folder}", seed),
                    "sft",
                    dataset,
                    {label: "sft" + suffix},
                    extra=[*sft_extra, *extra],
                )
            if "grpo" in rows:
                runs["grpo" + suffix, seed] = self.train(
                    self.seeded(f"runs/grpo{folder}", seed),
                    "grpo",
                    dataset,
                    {label: "grpo" + suffix},
                    extra=[*grpo_extra, *extra],
                )
            if "sft+grpo" in rows:
                sft = runs["sft" + suffix, seed]
                runs["sft+grpo" + suffix, seed] = self.train(
                    self.seeded(f"runs/sft+grpo{folder}", seed),
                    "grpo",
                    dataset,
                    {label: "sft+grpo" + suffix},
                    continues=sft,
                    extra=[*grpo_extra, *extra],
                )
        return runs

    def _fields(self, verb: str, config: RunConfig, labels: dict) -> dict:
        """A study step's job name, labels (its table row) and whether its data is the user's."""
        return {
            "info": {"verb": verb, "labels": labels},
            "job_name": f"vqa-r1-{self.name}-{verb}",
            "check_data": config.data.dataset not in self.generated,
        }

    def train(
        self,
        name: str,
        verb: str,
        dataset: str,
        labels: dict,
        continues: Step | None = None,
        on: Step | None = None,
        extra: list[str] | None = None,
    ) -> Step:
        """An SFT or GRPO run on ``dataset``; ``continues``: the run whose adapter it goes on
        from; ``on``: the merge step whose model it trains (GraphBuilder.train wires both)."""
        config = self.config(verb, extra)
        config.data.dataset = dataset  # may be made by the launch: not checked by load_config
        fields = self._fields(verb, config, labels)
        return self.builder.train(name, config, self.root / name, continues, on, **fields)

    def merge(self, name: str, adapter_step: Step) -> Step:
        """The adapter of ``adapter_step`` merged into the base model (the recipes give a merge
        an hour)."""
        config = self.config("merge")
        fields = self._fields("merge", config, {})
        return self.builder.merge(name, config, self.root / name, adapter_step, **fields)

    def evaluate(
        self,
        name: str,
        dataset: str,
        labels: dict,
        adapter_step: Step | None = None,
        on: Step | None = None,
        extra: list[str] | None = None,
    ) -> Step:
        """``adapter_step``'s adapter (None: the model itself), on the merged model of ``on``
        when given, evaluated on ``dataset``'s split of the spec."""
        config = self.config("evaluate", [f"eval.split={self.spec.eval_split}", *(extra or [])])
        config.data.dataset = dataset
        fields = self._fields("evaluate", config, labels)
        return self.builder.evaluate(name, config, self.root / name, adapter_step, on, **fields)

    def prompt_tune(self, name: str, mode: str, base: bool, extra: list[str] | None = None) -> Step:
        """Prompt tuning (or, ``base``, the base model scored the same way) in one mode. Its job
        gets the resources of the model's SFT recipe (the same model is loaded and trained)."""
        from vqa_r1.train.prompt_tuning import config_from_overrides

        items = [
            f"model.name={self.model}",
            f"mode={mode}",
            f"eval.split={self.spec.eval_split}",
            *self.spec_settings("prompt_tune"),
            *self.overrides["prompt_tune"],
            *(extra or []),
        ]
        if self.spec.dataset != "synthetic":
            items.append(f"data.dataset={self.source_dataset()}")
        config = config_from_overrides(items)
        sft = self.config("sft")
        if not self.builder.inprocess:
            self.builder.check_model_available(sft)
        verb = "prompt_base" if base else "prompt_tune"
        job_name = f"vqa-r1-{self.name}-{verb.replace('_', '-')}"
        info = {"verb": verb, "labels": {"mode": mode, "base": base}}
        return self.builder.prompt_tune(
            name, config, self.root / name, base, sft.resources, job_name, name, info=info
        )

    def add_judge(self) -> Step | None:
        """``experiment.judge``: one judge step after every evaluation of the declared tables,
        its verdicts in ``judge/alignment_checks.json``, and an ``alignment`` table (one row per
        evaluation: judged, misaligned, rate, types; McNemar's paired test against the base row
        of the same other labels)."""
        if self.spec.judge == "none":
            return None
        from vqa_r1.judge.job import JudgeJobConfig

        responses: list[tuple[str, str]] = []
        rows: list[dict] = []
        for table in self.tables:
            for row in table["rows"]:
                entries = (
                    [(None, row["step"])]
                    if "step" in row
                    else [(e["seed"], e["step"]) for e in row.get("seeds", [])]
                )
                for seed, step in entries:
                    if not str(step).startswith("eval/"):
                        continue  # prompt tuning scores choices: no reasoning to judge
                    name = " / ".join(str(v) for v in row["labels"].values())
                    name += f" / seed {seed}" if seed is not None else ""
                    if any(name == n for n, _ in responses):
                        continue
                    responses.append((name, str(self.root / step / "generated_responses.json")))
                    labels = {**row["labels"], **({"seed": seed} if seed is not None else {})}
                    rows.append({"labels": labels, "model": name, "step": step})
        if not responses:
            raise UserError(f"experiment.judge: {self.name} has no evaluation to judge")
        out = self.root / "judge"
        config = JudgeJobConfig(
            responses=responses,
            out=str(out / "alignment_checks.json"),
            backend=self.spec.judge,
            judge_model=self.spec.judge_model,
            base_url=self.spec.judge_base_url,
        )
        after = tuple(dict.fromkeys(r["step"] for r in rows))
        step = self.builder.judge(config, out, [], name="judge", after=after)
        # the reference: the base row, matched as the tables' own test against base matches it
        versus = next(
            (
                t
                for table in self.tables
                for t in table.get("tests", [])
                if t.get("kind") == "versus" and "base" in map(str, t["reference"].values())
            ),
            None,
        )
        first = next(iter(rows[0]["labels"]))
        reference = versus["reference"] if versus else {first: "base"}
        match = [k for k in (versus.get("within"), *versus.get("match", [])) if k] if versus else []
        self.declare_table(
            {
                "name": "alignment",
                "kind": "alignment",
                "title": f"Reasoning-answer alignment ({self.spec.judge} judge): each evaluation's "
                "responses judged for whether the reasoning supports the answer",
                "file": "judge/alignment_checks.json",
                "rows": rows,
                "reference": reference,
                "match": match,
            }
        )
        return step

    def add_tables_step(self) -> Step:
        """Tables and plots after every other step, whatever their outcome."""
        return self.builder.tables(self.root, f"vqa-r1-{self.name}-tables")

    def declare_table(self, table: dict) -> None:
        self.tables.append(table)

    def declare_plot(self, plot: dict) -> None:
        """A plot drawn from runs' metrics (``rewards``: GRPO reward curves of ``steps``)."""
        self.plots.append(plot)

"""Turning an experiment's conditions into chain steps: runs, evaluations, data, tables.

The kind-specific planners (text_bias.py, sim2real.py, ...) say *what* is trained on which data
and evaluated where; this module makes each of those a resolved, checked job (the model's own
recipes plus the spec's and the command line's overrides), decides whether an earlier launch
already finished it, and declares the tables the results land in. Datasets the jobs read (the
synthetic scenes, the biased training sets) are prepared on the login node at submission, so the
jobs find them ready and every image is verified before anything is queued.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.launch.graph import Step
from vqa_r1.launch.plan import (
    JobOptions,
    Planner,
    route_overrides,
)
from vqa_r1.output_dir import renamed_settings
from vqa_r1.recipes import load_config
from vqa_r1.run_dir import RunDir
from vqa_r1.train.merge import merged_dir
from vqa_r1.typed_config import to_dict

VERBS = ("sft", "grpo", "merge", "evaluate", "prompt_tune")


def split_overrides(items: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``--set KEY=V`` (every run), ``--set VERB:KEY=V`` (one verb's runs) and
    ``--set experiment.KEY=V`` (the spec) -> (per-verb overrides, spec overrides)."""
    items = list(items or [])
    spec = [i.removeprefix("experiment.") for i in items if i.startswith("experiment.")]
    runs = [i for i in items if not i.startswith("experiment.")]
    return route_overrides(runs, list(VERBS), VERBS, "verb"), spec


@dataclass
class DataPrep:
    """A dataset to create at submission (skipped by a dry run)."""

    description: str
    make: Callable[[], Any]


@dataclass
class Builder:
    """Collects the steps, data preparations and table declarations of one experiment."""

    spec: Any  # ExperimentSpec
    name: str
    model: str
    root: Path
    job: JobOptions
    overrides: dict[str, list[str]]
    # each step's settings as the previous launch recorded them in experiment.json
    previous: dict[str, dict] = field(default_factory=dict)
    planner: Planner | None = None  # the launch's (made from ``job`` when not given)
    steps: list[Step] = field(default_factory=list)
    prep: list[DataPrep] = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)
    plots: list[dict] = field(default_factory=list)  # plots of runs, not of a table's rows
    notes: list[str] = field(default_factory=list)  # what was (or would be) prepared

    def __post_init__(self) -> None:
        if self.planner is None:
            self.planner = Planner(self.job)

    # ------------------------------------------------------------------------- data
    def source_dataset(self) -> str:
        """The spec's dataset as a folder; the model's synthetic scenes are generated here.

        A folder is any that ``--dataset`` takes (saved, or a release converted by the same
        loader); what it is recognised as is noted, so a dry run shows it too."""
        if self.spec.dataset != "synthetic":
            from vqa_r1.data.formats import describe

            folder = Path(self.spec.dataset).resolve()
            note = f"dataset: {describe(folder)}"
            if note not in self.notes:
                self.notes.append(note)
            return str(folder)
        return self.synthetic(self.config("sft").data, "synthetic scenes (the SFT recipe's data)")

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

        folder = cache_root() / "data" / "drivingvqa-standin-v1-seed0"
        what = "DrivingVQA-format stand-in from synthetic scenes"
        if self.job.dry_run:
            self.notes.append(f"{what}: written at submission into {folder}")
            return str(folder)
        if not folder.exists():
            from vqa_r1.data.drivingvqa_standin import write_standin

            write_standin(folder)
        self.notes.append(f"{what}: {folder}")
        return str(folder)

    def synthetic(self, data_config: Any, what: str) -> str:
        from vqa_r1.data.datasets import dataset_dir, synthetic_target

        return self.cached_dataset(
            what, lambda: synthetic_target(data_config), lambda: dataset_dir(data_config)
        )

    def cached_dataset(
        self, what: str, target: Callable[[], Path], make: Callable[[], Path]
    ) -> str:
        """A generated dataset kept in the cache under its settings: made at submission
        (``make``, which reuses a cached copy); a dry run only names the folder a launch would
        use (``target``: its configs must match a launch's) and whether it is there yet."""
        if self.job.dry_run:
            folder = target()
            when = "cached" if (folder / "hf").exists() else "generated at submission"
            self.notes.append(f"{what}: {folder} ({when})")
            return str(folder)
        folder = make()
        self.notes.append(f"{what}: {folder}")
        return str(folder)

    def measure_bias(self, source: str, kind: str) -> str:
        """The unbiased set's own bias (near 0.5, never exactly), measured like the biased ones'
        and written as a card beside them; returns the card's path relative to the root."""
        out = self.root / "data" / f"{kind}-bias-none"
        relative = f"data/{out.name}/bias_card.json"
        if self.job.dry_run:
            self.notes.append(f"unbiased training set: its {kind} bias measured at submission")
            return relative
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
        self.notes.append(f"unbiased training set: {kind} bias {achieved:.3f}")
        return relative

    def prepare_bias(self, source: str, out: Path, kind: str, target: float, seed: int) -> None:
        """A biased training set, built now (seconds: a classifier on the labels or on small
        image features) so that its achieved bias is known before any job is queued."""
        what = f"{kind}-biased training set, target {target:g}, seed {seed}"
        if self.job.dry_run:
            self.notes.append(f"{what}: built at submission into {out}")
            return
        from vqa_r1.data.bias import build_biased_dataset

        card = build_biased_dataset(source, out, kind, target, seed=seed)
        self.notes.append(f"{what}: achieved {card['achieved']:.3f} in {out}")

    # ------------------------------------------------------------------------- configs
    def config(self, verb: str, extra: list[str] | None = None) -> RunConfig:
        """The model's recipe for ``verb`` + the spec's settings + the command line's."""
        key = verb.replace("-", "_")
        items = [*self.spec_settings(key), *self.overrides[key], *(extra or [])]
        return load_config(verb, self.model, None, items)

    def spec_settings(self, key: str) -> list[str]:
        """The spec's settings of one verb, then its ``tiny_settings`` when the model is tiny."""
        from vqa_r1.models.registry import get_spec

        tiny = getattr(self.spec.tiny_settings, key) if get_spec(self.model).tiny else []
        return [*getattr(self.spec.settings, key), *tiny]

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
        Returns ``(row, seed) -> step``; the SFT run is planned for ``sft+grpo`` alone too."""
        runs: dict[tuple[str, int | None], Step] = {}
        if not any(r in ("sft", "grpo", "sft+grpo") for r in rows):
            return runs
        sft_extra, grpo_extra = list(sft_extra or []), list(grpo_extra or [])
        for seed in self.seeds("sft"):
            extra = self.seed_override(seed)
            if "sft" in rows or "sft+grpo" in rows:
                runs["sft", seed] = self.train(
                    self.seeded("runs/sft", seed),
                    "sft",
                    dataset,
                    {label: "sft"},
                    extra=[*sft_extra, *extra],
                )
            if "grpo" in rows:
                runs["grpo", seed] = self.train(
                    self.seeded("runs/grpo", seed),
                    "grpo",
                    dataset,
                    {label: "grpo"},
                    extra=[*grpo_extra, *extra],
                )
            if "sft+grpo" in rows:
                sft = runs["sft", seed]
                runs["sft+grpo", seed] = self.train(
                    self.seeded("runs/sft+grpo", seed),
                    "grpo",
                    dataset,
                    {label: "sft+grpo"},
                    init_adapter=str(sft.run_dir / "final"),
                    after=(sft.name,),
                    extra=[*grpo_extra, *extra],
                )
        return runs

    def _add(self, name: str, verb: str, config: RunConfig, adapter: str | None, after, info):
        run_dir = self.root / name
        config.output_dir = str(run_dir)
        done = is_done(verb, run_dir)
        settings = step_settings(config.to_dict())
        self.check_relaunch(name, settings)
        if (run_dir / "config.yaml").exists():  # finished or not: its results are these settings'
            check_same_config(run_dir, config)
        request = self.planner.request_for_config(
            verb, config, run_dir, adapter, check_data=not self.job.dry_run
        )
        request.job_name = f"vqa-r1-{self.name}-{verb}"
        step = Step(name, run_dir, request, list(after), done=done)
        step.info = {"verb": verb, **info, "settings": settings}
        self.steps.append(step)
        return step

    def check_relaunch(self, name: str, settings: dict, renamed: str | None = None) -> None:
        """A re-launch must plan each step with the settings the previous launch recorded: a
        complete step is skipped, so other settings would put its old results under the new
        command (and experiment.json would claim the new settings made them). ``renamed``: the
        verb whose renamed keys (output_dir.RENAMED) an older record may hold."""
        before = self.previous.get(name, {}).get("settings")
        if before is None:  # a new step, or a launch from before settings were recorded
            return
        if renamed:
            before = step_settings(renamed_settings(renamed, before))
        differ = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if differ:
            shown = ", ".join(f"{k} ({before.get(k)!r} -> {settings.get(k)!r})" for k in differ[:4])
            more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
            raise UserError(
                f"{self.root / 'experiment.json'}: step {name} was started with other settings: "
                f"{shown}{more}. Re-launch with the same --set values, or give the experiment a "
                "new --output-dir"
            )

    def train(
        self,
        name: str,
        verb: str,
        dataset: str,
        labels: dict,
        init_adapter: str | None = None,
        model_path: str | None = None,
        after: tuple[str, ...] = (),
        extra: list[str] | None = None,
    ) -> Step:
        config = self.config(verb, extra)
        config.data.dataset = dataset  # may be made at submission: not checked by load_config
        if init_adapter:
            config.init_adapter = init_adapter
        if model_path:
            config.model.path = model_path
        return self._add(name, verb, config, None, after, {"labels": labels})

    def merge(self, name: str, adapter_step: Step) -> Step:
        config = self.config("merge")
        config.resources.time = "01:00:00"
        return self._add(
            name, "merge", config, str(adapter_step.run_dir), (adapter_step.name,), {"labels": {}}
        )

    def evaluate(
        self,
        name: str,
        dataset: str,
        labels: dict,
        adapter_step: Step | None = None,
        model_path: str | None = None,
        after: tuple[str, ...] = (),
        extra: list[str] | None = None,
    ) -> Step:
        config = self.config("evaluate", [f"eval.split={self.spec.eval_split}", *(extra or [])])
        config.data.dataset = dataset
        if model_path:
            config.model.path = model_path
        adapter = str(adapter_step.run_dir) if adapter_step else None
        waits = (*after, *((adapter_step.name,) if adapter_step else ()))
        return self._add(name, "evaluate", config, adapter, waits, {"labels": labels})

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
        self.planner.check_model_available(self.config("sft"))
        run_dir = self.root / name
        verb = "prompt_base" if base else "prompt_tune"
        tuned_verb = "prompt-tune --base" if base else "prompt-tune"
        settings = step_settings(to_dict(config))
        self.check_relaunch(name, settings, renamed=tuned_verb)
        if (run_dir / "config.yaml").exists():  # the training run's own record of its settings
            check_same_prompt_config(run_dir, settings)
        job_name = f"vqa-r1-{self.name}-{verb.replace('_', '-')}"
        resources = self.config("sft").resources
        request = self.planner.prompt_tune_request(config, run_dir, base, resources, job_name, name)
        step = Step(name, run_dir, request, [], done=is_done(verb, run_dir))
        step.info = {"verb": verb, "labels": {"mode": mode, "base": base}, "settings": settings}
        self.steps.append(step)
        return step

    def add_tables_step(self) -> Step:
        """Tables and plots after every other step, whatever their outcome (a failed condition
        shows as a missing row, not as a missing report)."""
        request = self.planner.tables_request(self.root, f"vqa-r1-{self.name}-tables")
        others = [s.name for s in self.steps]
        step = Step("tables", self.root / "tables", request, others, after_any=True)
        step.info = {"verb": "tables"}
        self.steps.append(step)
        return step

    def declare_table(self, table: dict) -> None:
        self.tables.append(table)

    def declare_plot(self, plot: dict) -> None:
        """A plot drawn from runs' metrics (``rewards``: GRPO reward curves of ``steps``)."""
        self.plots.append(plot)


def is_done(verb: str, run_dir: Path) -> bool:
    """Whether an earlier launch completed this step (its output is whole)."""
    if verb == "evaluate":
        return (run_dir / "scores.json").exists()
    if verb == "prompt_tune":
        return (run_dir / "eval" / "scores.json").exists()
    if verb == "prompt_base":
        return (run_dir / "scores.json").exists()
    if verb in ("sft", "grpo", "merge"):
        state = RunDir(run_dir).status().get("state") if run_dir.exists() else None
        return state == "COMPLETED" and (verb != "merge" or merged_dir(run_dir).exists())
    return False


def step_settings(config: dict) -> dict:
    """A step's settings as compared between launches, flattened to ``section.key``: everything
    but where it runs (resources) and its own folder (output_dir)."""
    flat: dict = {}
    for key, value in config.items():
        if key in ("resources", "output_dir"):
            continue
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def check_same_prompt_config(run_dir: Path, settings: dict) -> None:
    """A prompt-tuning run directory is resumed (or skipped as complete) only under its settings."""
    import yaml

    recorded = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    old = step_settings(renamed_settings("prompt-tune", recorded))  # a run of before the renames
    differ = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
    if differ:
        raise UserError(
            f"{run_dir} was started with other settings ({', '.join(differ[:6])}); resume with "
            "the same --set values, or give the experiment a new --output-dir"
        )


def check_same_config(run_dir: Path, config: RunConfig) -> None:
    """A re-launch must not resume a run directory under other settings than it started with."""
    from vqa_r1.config import read_config

    old = read_config(run_dir / "config.yaml").to_dict()
    new = config.to_dict()
    diff = sorted(
        f"{section}.{key}"
        for section, values in new.items()
        if isinstance(values, dict)
        for key, value in values.items()
        if section != "resources" and old.get(section, {}).get(key) != value
    )
    if diff:
        raise UserError(
            f"{run_dir} was started with other settings ({', '.join(diff[:6])}); resume with the "
            "same --set values, or give the experiment a new --output-dir"
        )

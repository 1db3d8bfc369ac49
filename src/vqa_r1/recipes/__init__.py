"""Recipes: defaults per hardware tier, and per-model overlays holding only what a model changes.

A model's recipe for a verb is composed from the YAML files beside this module, each applied on
the ones before it:

1. ``defaults/<tier>.yaml``: the tier's settings. The tier comes from the model's registry spec:
   ``gpu`` (a hub checkpoint), ``cpu`` (a tiny random-init model: tests, CI) or ``cpu-pretrained``
   (a tiny model pretrained here: the CPU demo);
2. ``<family>/<tier>.yaml`` if it exists: what the family's models of that tier share (the image
   processor's budget, for instance);
3. ``<family>/<size>.yaml`` if it exists: what that one model needs (a second GPU, ZeRO-3);
4. for a Thinking checkpoint (size ``<size>-thinking``), ``<family>/thinking.yaml``.

Every file holds run-config sections (``model:``, ``train:``, ...) and, optionally, ``sft:``,
``grpo:`` and ``evaluate:`` sections of the same shape that only that verb reads (merge reads the
sft part: the base model's settings); the common part is applied first, then the verb's. A new
model needs a registry entry and, only if it differs from its tier and family, an overlay.

A composed recipe is named ``<family>/<size>_<verb>`` (``qwen2_5_vl/3b_grpo``): ``--recipe NAME``
takes that recipe whole (another model's settings), ``--recipe FILE`` applies a YAML file of the
same shape on the model's recipe. Then ``--set`` overrides, then explicit fields. ``load_config``
resolves all of it into a checked RunConfig on the login node, including the checks that need the
model and reward registries; ``resolve_with_sources`` also says where each value came from
(`vqa-r1 config --model M --verb V`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.answers import check_rule
from vqa_r1.config import DataConfig, RunConfig, check_values, refuse_grpo_only
from vqa_r1.errors import UserError
from vqa_r1.models.adapters import check_image_options, check_vllm
from vqa_r1.models.registry import MODELS, ModelSpec, get_spec
from vqa_r1.rewards import get_rewards
from vqa_r1.typed_config import build, describe, load_mapping, parse_overrides

RECIPE_DIR = Path(__file__).parent
DEEPSPEED_DIR = RECIPE_DIR / "deepspeed"
DEFAULTS_DIR = RECIPE_DIR / "defaults"

VERBS = ("sft", "grpo", "evaluate", "merge")
RECIPE_VERBS = ("sft", "grpo", "evaluate")  # the verb sections of a recipe file
DEFAULT_SOURCE = "default"  # the source of a value no layer set: the dataclass default
# a merge loads the base model, folds the adapter in and saves it: an hour, whatever the limit of
# the SFT recipe it reads (the one place a merge's time is set; --set and --time still win)
MERGE_TIME = "01:00:00"


def recipe_verb(verb: str) -> str:
    """The verb whose recipe a run reads: merge loads the base model as SFT trained it."""
    if verb not in VERBS:
        raise UserError(f"unknown verb {verb!r}: one of {', '.join(VERBS)}")
    return "sft" if verb == "merge" else verb


def tier(spec: ModelSpec) -> str:
    """The defaults a model starts from: gpu (hub checkpoints), cpu (tiny random-init models) or
    cpu-pretrained (the tiny models pretrained here, for the CPU demo)."""
    if not spec.tiny:
        return "gpu"
    return "cpu-pretrained" if spec.pretrained else "cpu"


@dataclass(frozen=True)
class Layer:
    """One step of a resolution: a mapping of run-config keys and where it came from."""

    source: str  # what `vqa-r1 config` prints: a recipe file (and its verb section), --set, ...
    data: dict
    where: str = ""  # the prefix of error messages about its keys


def _label(path: Path) -> str:
    try:
        return str(path.relative_to(RECIPE_DIR.parent))  # recipes/defaults/gpu.yaml
    except ValueError:
        return str(path)


def file_layers(path: str | Path, verb: str, label: str | None = None) -> list[Layer]:
    """A recipe file's common part, then its ``verb`` section."""
    path = Path(path)
    label = label or _label(path)
    data = load_mapping(path, "recipe")
    for section in RECIPE_VERBS:
        if not isinstance(data.get(section) or {}, dict):
            raise UserError(
                f"recipe {path}: {section}: expected a mapping of sections, got {data[section]!r}"
            )
    common = {k: v for k, v in data.items() if k not in RECIPE_VERBS}
    part = data.get(verb) or {}
    return [Layer(label, common, f"{path}:"), Layer(f"{label} [{verb}]", part, f"{path}: {verb}")]


def _recipe_models() -> dict[tuple[str, str], ModelSpec]:
    """(family, size) -> the first registered model of that family and size."""
    found: dict[tuple[str, str], ModelSpec] = {}
    for spec in MODELS.values():
        found.setdefault((spec.family, spec.size), spec)
    return found


def recipe_name(verb: str, model: str) -> str:
    """``<family>/<size>_<verb>``: the name of a model's own recipe for a verb."""
    spec = get_spec(model)
    return f"{spec.family}/{spec.size}_{recipe_verb(verb)}"


def list_recipes() -> list[str]:
    """Every model's recipe name for every verb section (the composed recipes ``--recipe``
    takes by name)."""
    return sorted(
        f"{family}/{size}_{verb}" for family, size in _recipe_models() for verb in RECIPE_VERBS
    )


THINKING = "-thinking"  # the size key of a Thinking checkpoint: <size>-thinking


def recipe_files(family: str, size: str, tier_name: str) -> list[Path]:
    """The files a recipe is composed from, in the order they apply (overlays only if present).
    A Thinking checkpoint (size ``<size>-thinking``) takes its size's overlay, then the family's
    ``thinking.yaml`` (what a template that opens ``<think>`` changes)."""
    files = [DEFAULTS_DIR / f"{tier_name}.yaml"]
    base = size.removesuffix(THINKING)
    overlays = [RECIPE_DIR / family / f"{tier_name}.yaml", RECIPE_DIR / family / f"{base}.yaml"]
    if size.endswith(THINKING):
        overlays.append(RECIPE_DIR / family / "thinking.yaml")
    for overlay in overlays:
        if overlay.is_file():
            files.append(overlay)
    return files


def _is_file_recipe(recipe: str) -> bool:
    return Path(recipe).suffix in (".yaml", ".yml")


def named_layers(name: str) -> list[Layer]:
    """The layers of the composed recipe ``<family>/<size>_<verb>``."""
    family, _, rest = name.partition("/")
    size, _, verb = rest.rpartition("_")
    spec = _recipe_models().get((family, size))
    if spec is None or verb not in RECIPE_VERBS:
        raise UserError(
            f"unknown recipe {name!r}: available are {', '.join(list_recipes())}, the overlays "
            f"{', '.join(list_overlays())}, or a YAML file path"
        )
    return [
        layer
        for path in recipe_files(family, size, tier(spec))
        for layer in file_layers(path, verb)
    ]


OVERLAYS_DIR = RECIPE_DIR / "overlays"


def list_overlays() -> list[str]:
    """Shipped overlays ``--recipe NAME`` applies on the model's own recipe (``study``: the
    published study's GRPO group size and batch, beside the defaults that use a GPU)."""
    return sorted(p.stem for p in OVERLAYS_DIR.glob("*.yaml"))


def recipe_layers(verb: str, model: str, recipe: str | None = None) -> list[Layer]:
    """The recipe layers of a run, in the order they apply: the model's recipe (or ``--recipe
    NAME``'s instead), then a ``--recipe FILE`` or a shipped overlay (``--recipe study``)."""
    get_spec(model)
    own = recipe_name(verb, model)
    if not recipe:
        return named_layers(own)
    if recipe in list_overlays():
        overlay = OVERLAYS_DIR / f"{recipe}.yaml"
        return named_layers(own) + file_layers(overlay, recipe_verb(verb))
    if _is_file_recipe(recipe):
        return named_layers(own) + file_layers(recipe, recipe_verb(verb), label=str(recipe))
    return named_layers(recipe)


def config_from_recipe(name: str) -> RunConfig:
    """A named recipe's settings on the dataclass defaults, for no model and unchecked (the demo's
    data, the held-out guard)."""
    layers = named_layers(name)
    config = RunConfig()
    for layer in layers:
        config = build(config, layer.data, layer.where)
    return config


def all_data_configs() -> list[DataConfig]:
    """The data sections of every shipped recipe (the held-out guard of pretraining uses them)."""
    return [config_from_recipe(name).data for name in list_recipes()]


def _note_sources(sources: dict[str, str], data: dict, source: str, prefix: str = "") -> None:
    for key, value in data.items():
        if isinstance(value, dict):
            _note_sources(sources, value, source, f"{prefix}{key}.")
        else:
            sources[f"{prefix}{key}"] = source


def resolve_with_sources(
    verb: str,
    model: str,
    recipe: str | None = None,
    overrides: list[str] | None = None,
    **fields: Any,
) -> tuple[RunConfig, dict[str, str]]:
    """``load_config``, and for every key (``train.learning_rate``) where its value came from:
    a recipe file (``recipes/defaults/gpu.yaml``, ``... [grpo]`` for a verb section), ``--set``,
    ``argument`` (an explicit field), ``--model``/``--verb``, or ``default`` (the dataclass's)."""
    layers = recipe_layers(verb, model, recipe)
    if verb == "merge":
        layers.append(Layer("merge: an hour", {"resources": {"time": MERGE_TIME}}))
    layers.append(Layer("--set", parse_overrides(overrides)))
    layers.append(Layer("argument", {k: v for k, v in fields.items() if v is not None}))
    name = recipe or recipe_name(verb, model)
    config = RunConfig(verb=verb, recipe=str(name))
    sources = {key: DEFAULT_SOURCE for key, *_ in describe(RunConfig)}
    sources["recipe"] = "--recipe" if recipe else "--model, --verb"
    for layer in layers:
        config = build(config, layer.data, layer.where)
        _note_sources(sources, layer.data, layer.source)
    config.model.name, config.verb = model, verb
    sources["model.name"], sources["verb"] = "--model", "--verb"
    refuse_grpo_only(verb, sources)
    check(config)
    return config, sources


def load_config(
    verb: str,
    model: str,
    recipe: str | None = None,
    overrides: list[str] | None = None,
    **fields: Any,
) -> RunConfig:
    """Resolve recipe + overrides + explicit fields into a checked RunConfig."""
    return resolve_with_sources(verb, model, recipe, overrides, **fields)[0]


def check(config: RunConfig) -> None:
    """Every login-node check of a resolved config, registries included."""
    check_image_options(config.model, get_spec(config.model.name).family)
    t = config.train
    if config.verb == "grpo" and t.use_vllm:
        check_vllm(config.model, get_spec(config.model.name).family, t.vllm_mode)
    try:  # registered names and "package.module:function" plug-ins (imported here, on the login node)
        get_rewards(t.reward_funcs)
    except KeyError as err:
        raise UserError(f"train.reward_funcs: {err.args[0]}") from None
    if config.verb == "grpo":
        check_format_reward(config)
    for key, rule in (
        ("train.answer_rule", t.answer_rule),
        ("eval.answer_rule", config.eval.answer_rule),
    ):
        try:
            check_rule(rule)
        except ValueError as err:
            raise UserError(f"{key}: {err}") from None
    deepspeed_config(t.deepspeed)
    check_values(config)


def check_format_reward(config: RunConfig) -> None:
    """A Thinking checkpoint's template opens ``<think>``: ``format`` would score every one of its
    completions 0, and ``format_thinking`` every other model's (rewards/answer.py)."""
    spec = get_spec(config.model.name)
    rewards = config.train.reward_funcs
    if spec.thinking and "format" in rewards:
        raise UserError(
            f"train.reward_funcs: {spec.name}'s chat template opens <think> itself, so `format` "
            "(which wants the completion to open it) scores 0; use format_thinking"
        )
    if not spec.thinking and "format_thinking" in rewards:
        raise UserError(
            f"train.reward_funcs: format_thinking is for checkpoints whose template opens "
            f"<think> (Qwen3-VL Thinking); {spec.name} writes its own: use format"
        )


def deepspeed_config(name: str | None) -> str | None:
    """`zero2` / `zero3` (shipped beside the recipes) or a path to a DeepSpeed JSON file."""
    if not name:
        return None
    shipped = DEEPSPEED_DIR / f"{name}.json"
    if shipped.exists():
        return str(shipped)
    if Path(name).exists():
        return str(Path(name).resolve())
    raise UserError(f"train.deepspeed: {name!r} is neither zero2, zero3 nor an existing JSON file")

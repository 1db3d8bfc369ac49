"""Recipes keyed by model: ``<family>/<size>_<verb>.yaml`` beside this file, torchtune-style.

Each model family and size has its own complete file per verb, so a model's limits (Qwen's pixel
budget, a 7B model's second GPU) live with that model and nothing falls back silently. A recipe is
named ``<family>/<size>_<verb>`` (``qwen2_5_vl/3b_grpo``) or given as a path to a YAML file.

``load_config`` resolves recipe + ``--set`` overrides into a checked RunConfig on the login node,
including the checks that need the model and reward registries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vqa_r1.answers import check_rule
from vqa_r1.config import DataConfig, RunConfig, check_values, config_from_dict
from vqa_r1.errors import UserError
from vqa_r1.models.adapters import check_image_options
from vqa_r1.models.registry import get_spec
from vqa_r1.rewards import get_rewards
from vqa_r1.typed_config import build, load_mapping, parse_overrides

RECIPE_DIR = Path(__file__).parent
DEEPSPEED_DIR = RECIPE_DIR / "deepspeed"


def list_recipes() -> list[str]:
    return sorted(
        str(p.relative_to(RECIPE_DIR).with_suffix("")) for p in RECIPE_DIR.glob("*/*.yaml")
    )


def recipe_path(name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    path = RECIPE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UserError(
            f"unknown recipe {name!r}: available are {', '.join(list_recipes())}, or a YAML file path"
        )
    return path


def default_recipe(verb: str, model: str) -> str:
    spec = get_spec(model)
    name = f"{spec.family}/{spec.size}_{verb}"
    if not (RECIPE_DIR / f"{name}.yaml").is_file():
        raise UserError(
            f"no recipe {name} for {verb} on {model}: add src/vqa_r1/recipes/{name}.yaml "
            "or pass --recipe NAME|FILE"
        )
    return name


def config_from_recipe(name: str) -> RunConfig:
    """A recipe's settings on the defaults, without a model or verb (whole-recipe checks)."""
    path = recipe_path(name)
    return config_from_dict(load_mapping(path, "recipe"), f"{path}:")


def all_data_configs() -> list[DataConfig]:
    """The data sections of every shipped recipe (the held-out guard of pretraining uses them)."""
    return [config_from_recipe(name).data for name in list_recipes()]


def load_config(
    verb: str,
    model: str,
    recipe: str | None = None,
    overrides: list[str] | None = None,
    **fields: Any,
) -> RunConfig:
    """Resolve recipe + overrides + explicit fields into a checked RunConfig."""
    get_spec(model)
    name = recipe or default_recipe("sft" if verb == "merge" else verb, model)
    path = recipe_path(name)
    config = build(RunConfig(verb=verb, recipe=str(name)), load_mapping(path, "recipe"), f"{path}:")
    config = build(config, parse_overrides(overrides))
    config = build(config, {k: v for k, v in fields.items() if v is not None})
    config.model.name, config.verb = model, verb
    check(config)
    return config


def check(config: RunConfig) -> None:
    """Every login-node check of a resolved config, registries included."""
    check_image_options(config.model, get_spec(config.model.name).family)
    t = config.train
    try:  # registered names and "package.module:function" plug-ins (imported here, on the login node)
        get_rewards(t.reward_funcs)
    except KeyError as err:
        raise UserError(f"train.reward_funcs: {err.args[0]}") from None
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

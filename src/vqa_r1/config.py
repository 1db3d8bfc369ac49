"""Typed run configuration, YAML recipes and `--set key=value` overrides.

A recipe (``src/vqa_r1/recipes/<verb>_<size>.yaml``) holds every setting of a run; the command line
only picks the recipe and overrides single keys. The resolved config is written into the run
directory, so a run can always be reproduced and a requeued job reads exactly what was submitted.
Unknown keys are errors, never silently ignored: a typo in a 12-hour job must fail on the login node.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vqa_r1.errors import UserError

RECIPE_DIR = Path(__file__).parent / "recipes"


@dataclass
class ModelConfig:
    name: str = "tiny-qwen2.5-vl"
    path: str | None = None  # a local model folder overriding the registry's hub id
    dtype: str = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    attn_implementation: str = "sdpa"
    min_pixels: int | None = None  # Qwen image-size limits (pixels)
    max_pixels: int | None = None
    generation_cache: str = "auto"  # auto | on | off
    freeze_vision: bool = True
    tiny_seed: int = 0
    tiny_hidden: int = 128
    tiny_layers: int = 2
    tiny_vocab: int = 1024


@dataclass
class LoraConfig:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | None = None  # regex; None = the adapter's language-model regex
    modules_to_save: list[str] = field(default_factory=list)


@dataclass
class DataConfig:
    dataset: str = "synthetic"  # "synthetic", or a folder saved with save_to_disk
    train_split: str = "train"
    eval_split: str = "validation"
    num_samples: int | None = None  # seeded subset of the training split
    subset_seed: int = 42
    with_reasoning: bool = True  # SFT targets carry a grounded <think> block
    rationale: str = "claim"  # claim: the relation that holds; scene: the layout, objects in order (synthetic only)
    instruction: str | None = None  # None = the adapter's reasoning instruction
    synthetic_train: int = 2000
    synthetic_validation: int = 200
    synthetic_test: int = 400
    synthetic_seed: int = 0
    synthetic_min_objects: int = 2
    synthetic_max_objects: int = 4
    synthetic_margin: float = 0.15  # min centre distance on the relation's axis (fraction of size)
    synthetic_object_size: list[int] = field(
        default_factory=lambda: [18, 28]
    )  # side, px (min, max)
    synthetic_distinct_colors: bool = False  # every object of a scene a different colour
    synthetic_background: str = (
        "plain"  # plain | ramp (position-coding background, see data/synthetic.py)
    )
    synthetic_relations: list[str] = field(
        default_factory=lambda: ["left of", "right of", "above", "below"]
    )


@dataclass
class TrainConfig:
    learning_rate: float = 1e-5
    epochs: float = 1.0
    max_steps: int = -1
    per_device_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = 0.0
    lr_scheduler: str = "linear"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    save_every: float = 0.05  # < 1: fraction of total steps; >= 1: steps
    logging_steps: int = 1
    seed: int = 42
    bf16: bool = False
    gradient_checkpointing: bool = False
    num_threads: int | None = None  # torch threads; None = leave as is
    # GRPO only
    num_generations: int = 4
    max_completion_length: int = 256
    beta: float = 0.04
    loss_type: str = "dapo"
    temperature: float = 1.0
    scale_rewards: str = "group"
    reward_funcs: list[str] = field(default_factory=lambda: ["accuracy", "format"])
    reward_weights: list[float] | None = None
    answer_rule: str = "robust"
    use_vllm: bool = False
    vllm_mode: str = "colocate"  # colocate | server
    deepspeed: str | None = None  # zero2 | zero3 | a DeepSpeed JSON path (multi-GPU)
    report_to: list[str] = field(default_factory=list)  # e.g. [wandb]; the run id survives requeues
    sample_every: int = 10  # save sampled completions every N reward calls


@dataclass
class EvalConfig:
    split: str = "test"
    batch_size: int = 16
    max_new_tokens: int = 128
    limit: int | None = None
    answer_rule: str = "robust"


@dataclass
class ResourceConfig:
    gpus: int = 1
    nodes: int = 1
    time: str = "12:00:00"
    cpus_per_gpu: int | None = None
    mem_gb: int | None = None


@dataclass
class RunConfig:
    verb: str = "sft"  # sft | grpo | evaluate
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    output_dir: str = ""
    init_adapter: str | None = None  # start from this adapter (e.g. GRPO after SFT)
    recipe: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert YAML/CLI values to the field's declared type, with an error naming the key."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()] if value else []
        if not isinstance(value, list):
            raise UserError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, args[0], where) for v in value] if args else value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
            return value.lower() in ("true", "yes", "1")
        raise UserError(f"{where}: expected true/false, got {value!r}")
    if annotation in (int, float):
        try:
            number = float(value) if annotation is float else int(str(value), 0)
        except (TypeError, ValueError):
            raise UserError(f"{where}: expected {annotation.__name__}, got {value!r}") from None
        return number
    if annotation is str:
        return str(value)
    return value


def _apply(obj: Any, updates: dict, where: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in updates.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise UserError(f"unknown key {path!r}; valid keys here: {', '.join(sorted(names))}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UserError(
                    f"{path}: expected a mapping of {sorted(f.name for f in dataclasses.fields(current))}"
                )
            _apply(current, value, path)
        else:
            setattr(obj, key, _coerce(value, hints[key], path))


def parse_overrides(items: list[str]) -> dict:
    """`["train.learning_rate=1e-4", "lora.r=8"]` -> nested dict; values parsed as YAML scalars."""
    nested: dict = {}
    for item in items or []:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected key=value, e.g. train.learning_rate=1e-4")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw else ""
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def list_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return candidate
    path = RECIPE_DIR / f"{name}.yaml"
    if not path.exists():
        raise UserError(
            f"unknown recipe {name!r}: available are {', '.join(list_recipes())}, or a YAML file path"
        )
    return path


def default_recipe(verb: str, size: str) -> str:
    for name in (f"{verb}_{size}", f"{verb}_default"):
        if (RECIPE_DIR / f"{name}.yaml").exists():
            return name
    raise UserError(
        f"no recipe for {verb} at size {size}: pass --recipe (available: {', '.join(list_recipes())})"
    )


def load_config(
    verb: str,
    model: str,
    recipe: str | None = None,
    overrides: list[str] | None = None,
    **fields: Any,
) -> RunConfig:
    """Resolve recipe + overrides + explicit fields into a validated RunConfig."""
    from vqa_r1.models.registry import get_spec

    spec = get_spec(model)
    name = recipe or default_recipe(verb, spec.size)
    path = recipe_path(name)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a recipe must be a mapping of sections")
    config = RunConfig(verb=verb, recipe=str(name))
    config.model.name = model
    _apply(config, raw, "")
    _apply(config, parse_overrides(overrides or []), "")
    config.model.name = model
    config.verb = verb
    for key, value in fields.items():
        if value is not None:
            _apply(config, {key: value}, "")
    validate(config)
    return config


def config_from_recipe(name: str) -> RunConfig:
    """A recipe's settings on the defaults, without a model or verb (for whole-recipe checks)."""
    raw = yaml.safe_load(recipe_path(name).read_text()) or {}
    return config_from_dict(raw)


def config_from_dict(data: dict) -> RunConfig:
    config = RunConfig()
    _apply(config, data, "")
    return config


def validate(config: RunConfig) -> None:
    from vqa_r1.answers import check_rule
    from vqa_r1.rewards import get_rewards

    t = config.train
    if config.verb not in ("sft", "grpo", "evaluate"):
        raise UserError(f"verb must be sft, grpo or evaluate, not {config.verb!r}")
    if config.model.generation_cache not in ("auto", "on", "off"):
        raise UserError("model.generation_cache must be auto, on or off")
    try:  # registered names and "package.module:function" plug-ins (imported here, on the login node)
        get_rewards(t.reward_funcs)
    except KeyError as err:
        raise UserError(f"train.reward_funcs: {err.args[0]}") from None
    if t.reward_weights is not None and len(t.reward_weights) != len(t.reward_funcs):
        raise UserError("train.reward_weights must have one weight per entry of train.reward_funcs")
    if config.verb == "grpo" and t.num_generations < 2:
        raise UserError(
            "train.num_generations must be at least 2: GRPO compares completions within a group"
        )
    if config.data.rationale not in ("claim", "scene"):
        raise UserError("data.rationale must be claim or scene")
    if t.vllm_mode not in ("colocate", "server"):
        raise UserError("train.vllm_mode must be colocate or server")
    if t.deepspeed:
        from vqa_r1.launch.distributed import deepspeed_config

        deepspeed_config(t.deepspeed)
    if t.learning_rate <= 0:
        raise UserError("train.learning_rate must be positive")
    for rule in (t.answer_rule, config.eval.answer_rule):
        try:
            check_rule(rule)
        except ValueError as err:
            raise UserError(str(err)) from None
    if config.data.dataset != "synthetic" and not Path(config.data.dataset).exists():
        raise UserError(
            f"data.dataset: {config.data.dataset!r} is neither 'synthetic' nor an existing folder "
            "(a dataset saved with save_to_disk, e.g. by `vqa-r1 data generate --out DIR`)"
        )
    if config.init_adapter and not (Path(config.init_adapter) / "adapter_config.json").exists():
        raise UserError(f"init_adapter: {config.init_adapter} has no adapter_config.json")


def save_config(config: RunConfig, path: str | Path) -> None:
    from vqa_r1.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))


def read_config(path: str | Path) -> RunConfig:
    return config_from_dict(yaml.safe_load(Path(path).read_text()))

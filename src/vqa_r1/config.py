"""Typed run configuration: what one SFT, GRPO, evaluation or merge run does.

A recipe (the tier's defaults plus the model's overlays in ``src/vqa_r1/recipes/``, see
vqa_r1.recipes) holds every setting of a run; the command line only picks the recipe and
overrides single keys. The resolved
config is written into the run directory, so a run can always be reproduced and a requeued job
reads exactly what was submitted. Fields handed to TRL or transformers carry their names and
meanings (``num_train_epochs``, ``per_device_train_batch_size``, ``save_steps`` < 1 as a fraction
of the total steps, ...), so their documentation applies and they do the step arithmetic.

This module sits at the bottom of the package: it checks values on their own; checks that need a
registry (model names, reward names) are in vqa_r1.recipes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from vqa_r1.domains import (
    ANY,
    FRACTION,
    SEED,
    STEPS,
    WARMUP,
    Domain,
    above,
    at_least,
    between,
)
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_text
from vqa_r1.settings import comparable
from vqa_r1.typed_config import build, further_keys, load_mapping, option, to_dict

# the same words as vqa_r1.models.device (config sits below models: it may not import it)
DEVICE_HELP = (
    "where the model runs outside a Trainer (evaluate, merge, benchmarks); auto: the first CUDA "
    "device if torch sees one, else the CPU; cuda or cuda:N: fail at once without a usable CUDA "
    "device; cpu"
)
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"

# the job script of a GRPO vLLM server exports its URL here; the trainer reads it
VLLM_URL_ENV = "VQA_R1_VLLM_URL"
# ... and the port of the weight-sync group (TRL's vllm_group_port), picked per job so that two
# jobs on one node do not both bind TRL's fixed default
VLLM_GROUP_PORT_ENV = "VQA_R1_VLLM_GROUP_PORT"

# transformers reads max_steps <= 0 as "not set"; below -1 it meant nothing and ran by epochs
_UNSET_STEPS = "not set: num_train_epochs counts"

Verb = Literal["sft", "grpo", "evaluate", "merge"]


@dataclass
class ModelConfig:
    name: str = option("tiny-qwen2.5-vl", help="registered model name (`vqa-r1 models`)")
    path: str | None = option(None, help="a local model folder overriding the registry's hub id")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto", help="auto: bfloat16 on GPU, float32 on CPU"
    )
    attn_implementation: str = option("sdpa", help="transformers attention implementation")
    min_pixels: int | None = option(
        None, help="Qwen2.5-VL and Qwen3-VL image processor lower pixel limit", minimum=1
    )
    max_pixels: int | None = option(
        None, help="Qwen2.5-VL and Qwen3-VL image processor upper pixel limit", minimum=1
    )
    image_splitting: bool | None = option(
        None,
        help="SmolVLM (do_image_splitting) and InternVL (crop_to_patches): cut the image into "
        "tiles besides a global view; none: the checkpoint's setting",
    )
    image_longest_edge: int | None = option(
        None,
        help="SmolVLM: the image's longest edge in px before tiling (a multiple of the tile size, "
        "512 or 384); none: the checkpoint's (2048 / 1536: up to 16 tiles)",
        minimum=1,
    )
    max_image_tiles: int | None = option(
        None, help="InternVL: most 448 px tiles when splitting (max_patches); none: 12", minimum=1
    )
    device: str = option("auto", help=DEVICE_HELP)
    generation_cache: Literal["auto", "on", "off"] = option(
        "auto", help="KV cache in generate(); auto: on, checked once against an uncached run"
    )
    freeze_vision: bool = option(True, help="keep the vision tower frozen")
    tiny_seed: int = option(0, help="random-init tiny models: initialisation seed", domain=SEED)
    tiny_hidden: int = option(
        128, help="random-init tiny models: hidden size", domain=at_least(8, "4 attention heads")
    )
    tiny_layers: int = option(2, help="random-init tiny models: language-model layers", minimum=1)
    tiny_vocab: int = option(
        1024, help="random-init tiny models: tokenizer vocabulary size", minimum=1
    )


@dataclass
class LoraConfig:
    enabled: bool = option(True, help="LoRA (PEFT); false: full fine-tuning")
    r: int = option(16, help="LoRA rank", minimum=1)
    alpha: int = option(32, help="LoRA alpha (peft lora_alpha)", minimum=1)
    dropout: float = option(
        0.05, help="LoRA dropout (peft lora_dropout)", domain=between(0, 1, high_open=True)
    )
    target_modules: str | None = option(
        None, help="regex of wrapped modules; none: the family's language-model layers"
    )
    modules_to_save: list[str] = option(
        default_factory=list, help="modules trained in full and saved with the adapter"
    )


@dataclass
class DataConfig:
    dataset: str = option(
        "synthetic",
        help="'synthetic', a folder saved with save_to_disk, or a release folder (VSR, Rel3D, "
        "SpatialSense, DrivingVQA)",
    )
    train_split: str = option("train", help="split trained on")
    eval_split: str = option("validation", help="split used to tune (never the test split)")
    num_samples: int | None = option(
        None, help="seeded subset of the training split (at least 1); none: all of it", minimum=1
    )
    subset_seed: int = option(42, help="seed of that subset", domain=SEED)
    with_reasoning: bool = option(True, help="SFT targets carry a grounded <think> block")
    rationale: Literal["claim", "scene"] = option(
        "claim", help="claim: the relation that holds; scene: the layout, objects in order"
    )
    instruction: str | None = option(None, help="none: the family's reasoning instruction")
    images: Literal["real", "blank", "shuffled"] = option(
        "real",
        help="blind controls (data/blind.py): blank: every image a grey one of its size; "
        "shuffled: each row gets another row's image; training and evaluation alike",
    )
    images_per_row: int = option(
        1,
        help="most images one row may hold (rows listing image_paths); a row with more is "
        "refused when its split is read; also vLLM's limit_mm_per_prompt and the memory plan's "
        "images per prompt",
        minimum=1,
    )
    drivingvqa_max_pixels: int = option(
        1280 * 1280,
        help="DrivingVQA release: items whose photo has more pixels are dropped (each printed)",
        minimum=1,
    )
    drivingvqa_multiple_questions: Literal["keep", "drop"] = option(
        "keep",
        help="DrivingVQA items with two questions: keep (one prompt, one letter set, as its "
        "authors score them) or drop",
    )
    synthetic_train: int = option(2000, help="synthetic data: training scenes", minimum=0)
    synthetic_validation: int = option(200, help="synthetic data: validation scenes", minimum=0)
    synthetic_test: int = option(400, help="synthetic data: test scenes", minimum=0)
    synthetic_seed: int = option(0, help="synthetic data: seed", domain=SEED)
    synthetic_min_objects: int = option(
        2, help="synthetic data: fewest objects per scene", minimum=1
    )
    synthetic_max_objects: int = option(4, help="synthetic data: most objects per scene", minimum=2)
    synthetic_margin: float = option(
        0.15,
        help="min centre distance on the relation's axis (fraction of the image size)",
        domain=between(0, 1, high_open=True),
    )
    synthetic_object_size: list[int] = option(
        default_factory=lambda: [18, 28], help="object side in pixels: min,max", minimum=1
    )
    synthetic_distinct_colors: bool = option(False, help="every object of a scene a new colour")
    synthetic_background: Literal["plain", "ramp"] = option(
        "plain", help="ramp: a position-coding background (data/synthetic.py)"
    )
    synthetic_relations: list[str] = option(
        default_factory=lambda: ["left of", "right of", "above", "below"],
        help="relations asked about",
    )
    synthetic_domain: Literal["sim", "shifted"] = option(
        "sim", help="shifted: the same scenes in another look (palette, texture, noise, ...)"
    )
    synthetic_shift_strength: float = option(
        1.0, help="shifted domain: how strong the shift is, 0..1", domain=FRACTION
    )


@dataclass
class TrainConfig:
    learning_rate: float = option(
        1e-5, help="peak learning rate (TrainingArguments)", domain=above(0)
    )
    num_train_epochs: float = option(
        1.0,
        help="epochs when max_steps <= 0 (TrainingArguments)",
        domain=at_least(0, "0 only with max_steps >= 1"),
    )
    max_steps: int = option(
        -1,
        help="total optimizer steps; overrides num_train_epochs if > 0",
        domain=Domain(low=1, special=((-1, _UNSET_STEPS), (0, _UNSET_STEPS))),
    )
    per_device_train_batch_size: int = option(
        4, help="GRPO: completions per device and step (TrainingArguments)", minimum=1
    )
    gradient_accumulation_steps: int = option(1, help="TrainingArguments", minimum=1)
    warmup_steps: float = option(
        0.0,
        help="warm-up steps; a float < 1 is a fraction of all steps",
        domain=WARMUP,
    )
    lr_scheduler_type: str = option("linear", help="transformers scheduler name")
    weight_decay: float = option(0.0, help="TrainingArguments", minimum=0)
    max_grad_norm: float = option(
        1.0, help="gradient clipping (TrainingArguments)", domain=at_least(0, "0: no clipping")
    )
    save_steps: float = option(
        0.05,
        help="checkpoint interval: steps, or a float < 1 as a fraction of all steps",
        domain=STEPS,
    )
    logging_steps: int = option(1, help="metrics.jsonl interval (TrainingArguments)", minimum=1)
    seed: int = option(42, help="training and data-order seed", domain=SEED)
    bf16: bool = option(False, help="bfloat16 mixed precision (ignored without a GPU)")
    gradient_checkpointing: bool = option(False, help="trade compute for memory")
    num_threads: int | None = option(None, help="torch CPU threads; none: leave as is", minimum=1)
    num_generations: int = option(4, help="GRPO: completions per prompt", minimum=2)
    max_completion_length: int = option(256, help="GRPO: new tokens per completion", minimum=1)
    beta: float = option(
        0.04, help="GRPO: KL coefficient", domain=at_least(0, "0: no KL term, no reference model")
    )
    loss_type: str = option("dapo", help="GRPO loss (TRL: dapo, grpo, dr_grpo, bnpo, ...)")
    temperature: float = option(1.0, help="GRPO: sampling temperature", domain=above(0))
    scale_rewards: Literal["group", "batch", "none"] = option(
        "group", help="GRPO: reward standardisation"
    )
    reward_funcs: list[str] = option(
        default_factory=lambda: ["accuracy", "format"],
        help="GRPO rewards: registered names or package.module:function",
    )
    reward_weights: list[float] | None = option(
        None, help="one weight per reward (negative: a penalty); none: all 1", domain=ANY
    )
    answer_rule: str = option("robust", help="how the accuracy reward reads answers (answers.py)")
    health_window: int = option(
        10,
        help="GRPO run health (train/health.py): logged steps (metrics.jsonl lines) the alarms "
        "look back over (no_signal, format_collapse and length_collapse need a full window); "
        "not part of the run's settings",
        minimum=2,
    )
    health_action: Literal["warn", "stop"] = option(
        "warn",
        help="GRPO run health alarm (no_signal, truncation, format_collapse, length_collapse, "
        "kl_spike, reward_collapse): warn (log it, status.json's health list) or stop (also checkpoint at that "
        "step and end the run UNHEALTHY: no final adapter, no requeue); not part of the run's "
        "settings: warn continues an UNHEALTHY run",
    )
    use_vllm: bool = option(False, help="GRPO: generate with vLLM (GPU only)")
    vllm_mode: Literal["colocate", "server"] = option(
        "colocate",
        help="GRPO: vLLM placement; colocate: inside each training process, on its GPU; server: "
        "a server on the first node's last vllm_tensor_parallel_size GPUs, started by the job",
    )
    vllm_gpu_memory_utilization: float | None = option(
        None,
        help="GRPO vLLM: fraction of a GPU's memory vLLM takes for weights and KV cache; none: "
        "TRL's default (colocate 0.3, beside training; server 0.9 of its own GPU)",
        domain=between(0, 1, low_open=True, note="a fraction of a GPU's memory"),
    )
    vllm_max_model_length: int | None = option(
        None,
        help="GRPO vLLM: context window (prompt with image tokens + completion); none: the "
        "model's (Qwen2.5-VL: 128k, whose KV cache does not fit in 0.3 of a GPU beside a 7B "
        "model: set it, e.g. 4096)",
        minimum=1,
    )
    vllm_tensor_parallel_size: int = option(
        1,
        help="GRPO vLLM: GPUs one vLLM engine spans; colocate: must divide the training "
        "processes; server: the server's GPUs (training gets the others)",
        minimum=1,
    )
    deepspeed: str | None = option(None, help="zero2 | zero3 | a DeepSpeed JSON file")
    report_to: list[str] = option(
        default_factory=list, help="trackers, e.g. wandb; the run id survives requeues"
    )
    sample_every: int = option(
        10, help="save sampled completions every N reward calls", domain=at_least(0, "0: never")
    )
    dynamic_sampling: bool = option(
        False,
        help="GRPO: drop groups whose rewards all equal (no advantage, no gradient) and refill "
        "the batch with groups of further prompts, as DAPO does (train/dynamic_sampling.py)",
    )
    dynamic_sampling_max_rounds: int = option(
        4,
        help="GRPO dynamic sampling: most generation rounds per batch (the first included); a "
        "batch still short after them is filled with zero-variance groups (logged)",
        minimum=1,
    )
    trl: dict = further_keys(
        lambda key, value, where: _trl_key(key, value, where),
        help="a field of TRL's GRPOConfig / SFTConfig under its own name (trl_options.py)",
    )


def _trl_key(key: str, value: object, where: str) -> object:
    """A train key that is not one of ours: a TRL field, typed by TRL's annotation."""
    from vqa_r1 import trl_options

    ours = [f for f in TrainConfig.__dataclass_fields__ if f != "trl"]
    return trl_options.typed_value(key, value, where, ours)


@dataclass
class EvalConfig:
    split: str = option("test", help="split evaluated (tune on validation)")
    batch_size: int = option(16, help="generation batch size", minimum=1)
    max_new_tokens: int = option(128, help="new tokens per answer", minimum=1)
    limit: int | None = option(
        None, help="first N examples only (at least 1); none: every example", minimum=1
    )
    answer_rule: str = option("robust", help="how answers are read (answers.py)")


@dataclass
class ResourceConfig:
    gpus: int = option(1, help="GPUs per node", minimum=0)
    nodes: int = option(1, help="nodes", minimum=1)
    time: str = option("12:00:00", help="time limit per job (SLURM format); longer runs requeue")
    cpus_per_gpu: int | None = option(
        None,
        help="CPUs per GPU (per process in a job without GPUs); a node gets this times its GPUs "
        "(processes); none: the cluster profile's",
        minimum=1,
    )
    mem_gb: float | None = option(
        None,
        help="memory per GPU in GB (per process in a job without GPUs); a node gets this times "
        "its GPUs (processes); none: the cluster profile's",
        domain=above(0),
    )
    processes_per_node: int | None = option(
        None,
        help="training processes per node (one SLURM task each, joined by torch.distributed); "
        "none: one per training GPU, or 1 without GPUs. Without GPUs, N > 1 trains on CPU over "
        "gloo (the code path of a multi-GPU job); with GPUs it must be the training GPU count",
        minimum=1,
    )


@dataclass
class RunConfig:
    verb: Verb = option("sft", help="what the run does")
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    output_dir: str = option("", help="run directory")
    init_adapter: str | None = option(None, help="start from this adapter (GRPO after SFT)")
    recipe: str = option("", help="the recipe this config was resolved from")

    def to_dict(self) -> dict:
        return to_dict(self)


# our train keys that only a GRPO run reads: typed for an sft run they would do nothing, so they
# are refused there like TRL's GRPOConfig-only fields (trl_options.check_verb), with the same hint
GRPO_ONLY = (
    "num_generations", "max_completion_length", "beta", "loss_type", "temperature",
    "scale_rewards", "reward_funcs", "reward_weights", "use_vllm", "vllm_mode",
    "vllm_gpu_memory_utilization", "vllm_max_model_length", "vllm_tensor_parallel_size",
    "dynamic_sampling", "dynamic_sampling_max_rounds",
)  # fmt: skip


def refuse_grpo_only(verb: str, typed: dict[str, str]) -> None:
    """``typed``: each key's source; the keys the command itself set (``--set``, an argument)
    that an sft run ignores are an error (a recipe's shared part may set them for its GRPO runs)."""
    if verb != "sft":
        return
    for key in GRPO_ONLY:
        if typed.get(f"train.{key}") in ("--set", "argument"):
            raise UserError(
                f"train.{key} is a GRPO setting: sft runs do not use it (in an experiment or "
                f"pipeline, set it for the grpo runs only: --set grpo:train.{key}=...)"
            )


def check_values(config: RunConfig) -> None:
    """Checks of values that need nothing but the config (types and choices are checked on load)."""
    t = config.train
    if t.trl:  # TRL's keys: fields of the verb's class (reading TRL's source, not importing it)
        from vqa_r1 import trl_options

        trl_options.check_verb(config.verb, t.trl)
    if config.verb == "grpo" and t.dynamic_sampling:
        # TRL's default steps_per_generation is gradient_accumulation_steps
        per_rank = t.per_device_train_batch_size * int(
            t.trl.get("steps_per_generation") or t.gradient_accumulation_steps
        )
        if per_rank % t.num_generations:
            raise UserError(
                f"train.dynamic_sampling keeps or drops whole groups on each process: "
                f"per_device_train_batch_size x steps_per_generation ({per_rank}) must be a "
                f"multiple of train.num_generations ({t.num_generations})"
            )
    if t.reward_weights is not None and len(t.reward_weights) != len(t.reward_funcs):
        raise UserError("train.reward_weights must have one weight per entry of train.reward_funcs")
    if config.verb in ("sft", "grpo") and t.max_steps <= 0 and t.num_train_epochs <= 0:
        # the Trainer would run zero steps and the run would end COMPLETED with an untrained adapter
        raise UserError(
            f"no training steps: train.max_steps is {t.max_steps} and train.num_train_epochs is "
            f"{t.num_train_epochs}; set train.max_steps > 0 (it wins) or train.num_train_epochs > 0"
        )
    if not re.match(DEVICE_PATTERN, config.model.device):
        raise UserError(f"model.device: {config.model.device!r} is not auto, cpu, cuda or cuda:N")
    m = config.model
    if m.min_pixels is not None and m.max_pixels is not None and m.min_pixels > m.max_pixels:
        raise UserError(
            f"model.min_pixels ({m.min_pixels}) is above model.max_pixels ({m.max_pixels})"
        )
    d = config.data
    size = d.synthetic_object_size
    if len(size) != 2 or size[0] > size[1]:
        raise UserError(f"data.synthetic_object_size: expected min,max (min <= max), got {size}")
    if d.synthetic_min_objects > d.synthetic_max_objects:
        raise UserError(
            f"data.synthetic_min_objects ({d.synthetic_min_objects}) is above "
            f"data.synthetic_max_objects ({d.synthetic_max_objects})"
        )
    if config.data.dataset != "synthetic" and not Path(config.data.dataset).exists():
        raise UserError(
            f"data.dataset: {config.data.dataset!r} is neither 'synthetic' nor an existing folder "
            "(a dataset saved with save_to_disk, e.g. by `vqa-r1 data generate --out DIR`, or a "
            "release folder: VSR, Rel3D, SpatialSense, DrivingVQA)"
        )
    if config.init_adapter and not (Path(config.init_adapter) / "adapter_config.json").exists():
        raise UserError(f"init_adapter: {config.init_adapter} has no adapter_config.json")


def config_from_dict(data: dict, where: str = "") -> RunConfig:
    return build(RunConfig, data, where)


def run_settings(config: RunConfig, adapter: str | Path | None = None) -> dict:
    """What makes two runs of a verb the same run (claims.py, launch/build.py): the resolved
    config as settings.comparable sees it (not where it writes or runs, its threads or its health
    watch), and the adapter an evaluation or merge reads."""
    settings = comparable(config.to_dict())
    if adapter:
        settings["adapter"] = str(Path(adapter).resolve())
    return settings


def save_config(config: RunConfig, path: str | Path) -> None:
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))


def read_config(path: str | Path) -> RunConfig:
    return config_from_dict(load_mapping(path, "run config"), f"{path}:")

"""The expected per-GPU memory peak of a resolved recipe, on the login node, before queueing.

Why: no real-size model had ever run here, and a recipe that cannot fit its GPU fails after hours
in the queue (or, worse, fits by a margin nobody knew). Parameter counts are exact: each hub
model's published configuration is built on the meta device (models/architecture.py); the LoRA
parameters are the adapter's target modules times the rank. Everything else is an estimate from
the shapes, and each term says how it is counted, so that a measured peak (benchmarks/scale) can
be set beside it term by term:

- weights in the training dtype (bf16 on a GPU); under ZeRO-3 a process holds 1/G of them between
  steps but TRL gathers the whole model for each generation (``ds3_gather_for_generation``), so
  the peak holds all of them, unless that option is off (``train.trl``), when 1/G stays;
- LoRA: the adapter in float32 (PEFT's default for a bf16 base), its gradient and AdamW's two
  moments: 16 bytes per trainable parameter;
- activations of one micro-batch: with gradient checkpointing each decoder layer keeps its input
  and one layer at a time is recomputed; without, every layer keeps its attention and MLP
  intermediates (about 8 hidden-sized and 3 intermediate-sized tensors per token in bf16; SDPA
  keeps no sequence-squared attention matrix);
- logits of the completion tokens only (TRL's ``logits_to_keep``): bf16 logits, their float32
  log-softmax and its gradient, 10 bytes per vocabulary entry per token;
- the reference pass (GRPO, beta > 0): the same forward with the adapter disabled (PEFT, no second
  copy of the weights), its float32 log-probabilities over the vocabulary held at once; none at
  beta 0, where TRL skips it;
- the generation KV cache (GRPO with ``generate()``): keys and values of every layer for each
  sequence of a generation batch (per-device batch x steps per generation), prompt plus the whole
  completion: random or unfinished completions run to the limit;
- image tokens at the recipe's budget, times ``data.images_per_row`` (Qwen: max_pixels / 28^2,
  Qwen3-VL / 32^2; InternVL: tiles + thumbnail x 256;
  SmolVLM: tiles + global view x the tokens of a tile), the worst case of an image that fills it;
- vLLM colocate: its share of the GPU (``vllm_gpu_memory_utilization``), reserved whole;
- CUDA context and allocator slack: 2 GiB.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from vqa_r1.errors import UserError

GIB = 1024**3
OVERHEAD_GIB = 2.0  # CUDA context, cuBLAS workspaces, allocator fragmentation
FITS_SHARE = 0.95  # of the card's memory: beyond, the plan refuses the recipe
PROMPT_TEXT_TOKENS = 100  # the question and the reasoning instruction, chat template included
SFT_TARGET_TOKENS = 256  # a reasoning target of the SFT data, generous


@dataclass(frozen=True)
class Term:
    """One line of the plan: what it is, its size, how it is counted."""

    name: str
    bytes: float
    how: str
    share: float | None = None  # of the card's memory (vLLM colocate), resolved by ``with_gpu``

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    verb: str
    gpus: int
    parameters: int  # the whole model, exact
    vision_parameters: int
    lora_parameters: int
    image_tokens: int
    terms: tuple[Term, ...]

    @property
    def peak_gib(self) -> float:
        return sum(t.gib for t in self.terms)

    def largest(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes)

    def lines(self, gpu_gib: float | None = None) -> list[str]:
        """The plan as a person reads it, one term per line."""
        card = f" of {gpu_gib:g} GiB" if gpu_gib else ""
        head = (
            f"memory plan (an estimate; parameter counts exact): {self.verb} {self.model}, per GPU "
            f"{self.peak_gib:.1f} GiB{card}; {self.parameters / 1e9:.3f}B parameters "
            f"({self.vision_parameters / 1e9:.3f}B vision), LoRA {self.lora_parameters / 1e6:.2f}M "
            f"trainable, {self.image_tokens} image tokens per image"
        )
        return [head] + [f"  {t.name:<22} {t.gib:7.2f} GiB  {t.how}" for t in self.terms]


def plan(config: Any, gpus: int = 1) -> MemoryPlan | None:
    """The plan of ``config`` (an sft or grpo RunConfig) on ``gpus`` GPUs per process group; None
    for a model without a shipped architecture (the tiny ones, a local folder of another)."""
    from vqa_r1.models.architecture import ARCHITECTURES, meta_model, parameter_counts
    from vqa_r1.models.registry import get_spec

    name = config.model.name
    if config.verb not in ("sft", "grpo") or not (ARCHITECTURES / f"{name}.json").is_file():
        return None
    spec = get_spec(name)
    model = meta_model(name)
    counts = parameter_counts(name)
    text = _text_config(model.config)
    hidden, layers = text.hidden_size, text.num_hidden_layers
    inter = text.intermediate_size
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    vocab = text.vocab_size
    t = config.train
    dtype_bytes = 4 if config.model.dtype == "float32" else 2
    lora = lora_parameters(model, spec.family, config.lora.r)
    images = image_tokens(spec.family, config.model, model.config)
    # every image of a row at the budget's worst case (data.images_per_row of them)
    prompt = images * config.data.images_per_row + PROMPT_TEXT_TOKENS
    micro = t.per_device_train_batch_size
    completion = t.max_completion_length if config.verb == "grpo" else SFT_TARGET_TOKENS
    sequence = prompt + completion
    zero3 = str(t.deepspeed or "").endswith("zero3") or "zero3" in str(t.deepspeed or "")
    # ZeRO-3 with TRL's ds3_gather_for_generation off: each GPU keeps its shard while generating
    # too (slower generation, layer by layer), so the weights' peak is 1/G of them
    sharded = zero3 and (t.trl or {}).get("ds3_gather_for_generation") is False and gpus > 1
    weights = counts.total * dtype_bytes / (gpus if sharded else 1)
    if sharded:
        weights_how = f"; ZeRO-3 over {gpus} GPUs, not gathered for generation"
    else:
        weights_how = "; ZeRO-3 gathers all of them for each generation" if zero3 else ""
    terms = [
        Term(
            "weights",
            weights,
            f"{counts.total / 1e9:.3f}B x {dtype_bytes} bytes{weights_how}",
        ),
        Term("LoRA + AdamW", lora * 16, f"{lora / 1e6:.2f}M x (fp32 weight, grad, 2 moments)"),
    ]
    per_token_layer = 2 * (8 * hidden + 3 * inter)
    if t.gradient_checkpointing:
        acts = micro * sequence * (layers * 2 * hidden + per_token_layer)
        how = f"{micro} x {sequence} tokens, checkpointed: layer inputs + one layer recomputed"
    else:
        acts = micro * sequence * layers * per_token_layer
        how = f"{micro} x {sequence} tokens x {layers} layers, no checkpointing"
    terms.append(Term("activations", acts, how))
    terms.append(
        Term(
            "logits",
            micro * completion * vocab * 10,
            f"{micro} x {completion} completion tokens x {vocab} vocabulary x 10 bytes",
        )  # fmt: skip
    )
    if config.verb == "grpo":
        beta = float(t.beta or 0)
        if beta > 0:
            terms.append(
                Term(
                    "reference pass",
                    micro * completion * vocab * 6,
                    f"beta {beta:g}: adapter disabled, no second copy; bf16 + fp32 log-probs",
                )  # fmt: skip
            )
        steps_per_generation = (t.trl or {}).get("steps_per_generation") or (
            t.gradient_accumulation_steps
        )
        sequences = micro * int(steps_per_generation)
        if t.use_vllm and t.vllm_mode == "colocate":
            share = t.vllm_gpu_memory_utilization or 0.3
            terms.append(Term("vLLM (colocate)", 0.0, f"{share:g} of the GPU, reserved", share))
        elif not t.use_vllm:
            kv = 2 * layers * kv_heads * head_dim * dtype_bytes * sequence * sequences
            terms.append(
                Term(
                    "generation KV cache",
                    kv,
                    f"{sequences} sequences x {sequence} tokens (prompt + full completion)",
                )  # fmt: skip
            )
    terms.append(Term("CUDA + allocator", OVERHEAD_GIB * GIB, "context, workspaces, fragmentation"))
    return MemoryPlan(
        name, config.verb, gpus, counts.total, counts.vision, lora, images, tuple(terms)
    )


def with_gpu(memory: MemoryPlan, gpu_gib: float) -> MemoryPlan:
    """The plan with vLLM colocate's share resolved against the card's memory."""
    terms = []
    for term in memory.terms:
        if term.share is not None:
            term = replace(term, bytes=term.share * gpu_gib * GIB)
        terms.append(term)
    return replace(memory, terms=tuple(terms))


def check_fits(memory: MemoryPlan, gpu_gib: float, where: str) -> None:
    """A plan over ``FITS_SHARE`` of the card is refused, naming the largest term and the
    settings that shrink it."""
    memory = with_gpu(memory, gpu_gib)
    if memory.peak_gib <= FITS_SHARE * gpu_gib:
        return
    largest = memory.largest()
    fixes = {
        "generation KV cache": "train.per_device_train_batch_size, train.num_generations or "
        "train.max_completion_length (or train.use_vllm=true)",
        "activations": "train.per_device_train_batch_size, train.gradient_checkpointing=true, "
        "or the image budget (model.max_pixels)",
        "logits": "train.per_device_train_batch_size or train.max_completion_length",
        "reference pass": "train.per_device_train_batch_size or train.beta=0",
        "weights": "a smaller model, or more GPUs with train.deepspeed=zero3",
        "vLLM (colocate)": "train.vllm_gpu_memory_utilization",
    }
    raise UserError(
        f"memory: {memory.verb} {memory.model} needs about {memory.peak_gib:.0f} GiB per GPU, more "
        f"than the {gpu_gib:g} GiB of {where}'s GPUs (largest: {largest.name}, "
        f"{largest.gib:.0f} GiB); lower {fixes.get(largest.name, 'the batch')}"
    )


def lora_parameters(model: Any, family: str, rank: int) -> int:
    """r x (in + out) for every Linear the adapter's LoRA regex wraps (language model only)."""
    from vqa_r1.models.adapters import get_adapter

    pattern = re.compile(get_adapter(family).lora_target_regex())
    total = 0
    for name, module in model.named_modules():
        if pattern.fullmatch(name) and hasattr(module, "in_features"):
            total += rank * (module.in_features + module.out_features)
    return total


def image_tokens(family: str, model_config: Any, architecture: Any) -> int:
    """Tokens of one image that fills the recipe's budget (the worst case)."""
    if family in ("qwen2_5_vl", "qwen3_vl"):
        vision = architecture.vision_config
        unit = vision.patch_size * vision.spatial_merge_size
        # the checkpoints' own budgets: 12,845,056 px (Qwen2.5-VL), 16,777,216 (Qwen3-VL)
        default = 12845056 if family == "qwen2_5_vl" else 16777216
        return int((model_config.max_pixels or default) // (unit * unit))
    if family == "internvl":
        vision = architecture.vision_config
        side = vision.image_size[0] if isinstance(vision.image_size, list) else vision.image_size
        patch = vision.patch_size[0] if isinstance(vision.patch_size, list) else vision.patch_size
        per_tile = int((side // patch) ** 2 * architecture.downsample_ratio**2)
        tiles = model_config.max_image_tiles or 12
        split = model_config.image_splitting is not False
        return per_tile * ((tiles + 1) if split else 1)
    if family == "smolvlm":
        vision = architecture.vision_config
        per_tile = int((vision.image_size // vision.patch_size / architecture.scale_factor) ** 2)
        edge = model_config.image_longest_edge or 4 * vision.image_size
        per_side = math.ceil(edge / vision.image_size)
        split = model_config.image_splitting is not False
        return per_tile * ((per_side * per_side + 1) if split else 1)
    raise UserError(f"no image-token rule for family {family}")


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config

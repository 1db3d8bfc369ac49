"""Family adapters: what differs between Qwen2.5-VL, Qwen3-VL, InternVL and SmolVLM, in one place
each.

An adapter owns loading (dtype, attention, image-size limits), the chat formatting of an
(image, question) pair, which modules LoRA may wrap (language model only) and which belong to the
vision side (frozen). Everything else in the suite is family-agnostic.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from vqa_r1.data.prompts import REASONING_INSTRUCTION, content_parts, for_thinking_model
from vqa_r1.errors import UserError

log = logging.getLogger(__name__)

# Attention and MLP projections of the language model's decoder layers, and nothing in the vision
# tower or projector (a plain ["q_proj", ...] list would also wrap vision layers).
LANGUAGE_LORA_REGEX = (
    r".*(?:text_model|language_model)\.layers\.\d+\."
    r"(?:self_attn\.(?:q_proj|k_proj|v_proj|o_proj)|mlp\.(?:gate_proj|up_proj|down_proj))"
)


@dataclass(frozen=True)
class FamilyAdapter:
    family: str
    vision_patterns: tuple[str, ...]  # module-name fragments of the vision tower and projector
    instruction: str = REASONING_INSTRUCTION
    # the checkpoint's chat template opens <think> itself (ModelSpec.thinking; get_adapter)
    thinking: bool = False

    # --- loading -------------------------------------------------------------------------
    # image-processor settings of ModelConfig this family reads (others are refused on load_config)
    image_options: ClassVar[tuple[str, ...]] = ()

    def processor_kwargs(self, **options: Any) -> dict:
        """Keyword arguments for ``AutoProcessor.from_pretrained`` from the ModelConfig's image
        settings (``min_pixels``, ``image_splitting``, ...); unset ones keep the checkpoint's."""
        return {}

    def load(
        self,
        path: str | Path,
        dtype: str = "auto",
        attn_implementation: str = "sdpa",
        device: str | None = None,
        **image_options: Any,
    ) -> tuple[Any, Any]:
        """Model and processor. ``device`` (vqa_r1.models.device): load the weights straight onto
        it, and ``dtype=auto`` means bfloat16 there if it is a GPU; None: leave placement to the
        caller (a Trainer), ``auto`` then following whether torch sees a GPU."""
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        processor = AutoProcessor.from_pretrained(path, **self.processor_kwargs(**image_options))
        processor.tokenizer.padding_side = "left"  # batched generation needs left padding
        on_gpu = device.startswith("cuda") if device else torch.cuda.is_available()
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if on_gpu else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        placement = {"device_map": device} if device and device != "cpu" else {}
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=torch_dtype, attn_implementation=attn_implementation, **placement
        )
        return model, processor

    # --- prompts -------------------------------------------------------------------------
    def messages(
        self,
        question: str,
        instruction: str | None = None,
        image: bool = True,
        images: int | None = None,
    ) -> list[dict]:
        """The user turn: ``images`` image parts (default one, none when ``image`` is false) at
        the question's ``<image>`` placeholders or in front of it, then the instruction."""
        instruction = instruction if instruction is not None else self.instruction
        if self.thinking:
            instruction = for_thinking_model(instruction)
        count = (1 if image else 0) if images is None else images
        return [{"role": "user", "content": content_parts(f"{question} {instruction}", count)}]

    def response_text(self, generated: str) -> str:
        """A response as the reasoning format reads it: a Thinking model's template wrote the
        opening ``<think>`` into the prompt, so its generated text starts inside the block."""
        if self.thinking and not generated.lstrip().startswith("<think>"):
            return f"<think>{generated}"
        return generated

    def fit_image(self, image: Any, processor: Any) -> Any:
        """The image as this family's processor will see it, for a second image pipeline (vLLM)
        that must give it the same number of image tokens; the image itself by default.

        Tiling is not alike across settings (InternVL's max_patches, SmolVLM's splitting and
        longest edge turn one image into other numbers of tiles), so vLLM is handed the trainer's
        settings with every image (train/vllm_prompts.py; ``--mm-processor-kwargs`` for the
        server), and the same processor with the same settings tiles the same image alike
        (tests/test_vllm_prompts.py checks it with vLLM's own processing)."""
        return image

    def vllm_refusal(self, mode: str, **options: Any) -> str | None:
        """Why GRPO cannot generate with vLLM in ``mode`` for this family with these image
        settings (ModelConfig's), or None."""
        return None

    def image_token_id(self, processor: Any) -> int | None:
        token = getattr(processor, "image_token", None)
        if token is None:
            return None
        return processor.tokenizer.convert_tokens_to_ids(token)

    def unexpanded_ids(self, ids: list[int], processor: Any) -> list[int]:
        """``ids`` with each image's expanded block of tokens back to the one image token the
        chat template wrote, i.e. the prompt before the processor expanded it.

        vLLM expands the image token of a token prompt itself (the first image token per image,
        with no check that the prompt is already expanded), so handed the trainer's ids it would
        see 2N-1 image tokens, N-1 of them as text. Qwen2.5-VL: a run of image tokens."""
        token = self.image_token_id(processor)
        out: list[int] = []
        for i, t in enumerate(ids):
            if not (t == token and i and ids[i - 1] == token):
                out.append(t)
        return out

    # --- parameters ----------------------------------------------------------------------
    def lora_target_regex(self) -> str:
        return LANGUAGE_LORA_REGEX

    def is_vision_module(self, name: str) -> bool:
        return any(p in name for p in self.vision_patterns)

    def freeze_vision(self, model: Any) -> int:
        """Freeze the vision tower and projector; returns how many parameters were frozen."""
        frozen = 0
        for name, param in model.named_parameters():
            if self.is_vision_module(name):
                param.requires_grad_(False)
                frozen += param.numel()
        return frozen


class QwenAdapter(FamilyAdapter):
    """Qwen2.5-VL and Qwen3-VL: a pixel budget (image tokens = pixels / (patch x merge)**2, 28**2
    for Qwen2.5-VL's 14 px patches and 32**2 for Qwen3-VL's 16 px ones, resized into [min, max])."""

    image_options = ("min_pixels", "max_pixels")

    def processor_kwargs(self, **options: Any) -> dict:
        return {k: options[k] for k in self.image_options if options.get(k)}

    def fit_image(self, image: Any, processor: Any) -> Any:
        """Resized to the size Qwen's processor would give it under the recipe's pixel budget
        (sides multiples of patch x merge, pixels within [min_pixels, max_pixels]).

        vLLM re-processes each image with the checkpoint's own budget (12.8 Mpx for the hub
        models), so a photo above the recipe's max_pixels got more image tokens there than in
        the trainer's prompt ids ("Attempted to assign N multimodal tokens to M placeholders").
        An image already at such a size is left unchanged by any budget that contains it."""
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        ip = processor.image_processor
        height, width = smart_resize(
            image.height,
            image.width,
            factor=ip.patch_size * ip.merge_size,
            min_pixels=ip.size.shortest_edge,
            max_pixels=ip.size.longest_edge,
        )
        if (height, width) == (image.height, image.width):
            return image
        from PIL import Image

        return image.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)


class SmolVLMAdapter(FamilyAdapter):
    """SmolVLM (Idefics3): the image is resized to ``size.longest_edge`` (2048 px in the 256M and
    500M checkpoints, 1536 in 2.2B, small images upscaled), cut into tiles of the vision encoder's
    size (512 / 384 px, 64 / 81 tokens each) plus a global view: about a thousand image tokens for
    any image. ``image_splitting`` and ``image_longest_edge`` set that budget."""

    image_options = ("image_splitting", "image_longest_edge")

    def processor_kwargs(self, **options: Any) -> dict:
        kwargs: dict = {}
        if options.get("image_splitting") is not None:
            kwargs["do_image_splitting"] = options["image_splitting"]
        if options.get("image_longest_edge"):
            kwargs["size"] = {"longest_edge": options["image_longest_edge"]}
        return kwargs

    def vllm_refusal(self, mode: str, **options: Any) -> str | None:
        """Server mode with image splitting (the checkpoints' default): TRL pairs each image with
        one run of image tokens in the prompt (vllm_generation.py, _place_features), and a split
        image writes one run per tile and one for the global view."""
        if mode == "server" and options.get("image_splitting") is not False:
            return (
                "train.vllm_mode=server with smolvlm: SmolVLM's image splitting writes one run of "
                "image tokens per tile and TRL's server mode takes one per image (it fails at step "
                "1); set --set model.image_splitting=false, or --set train.vllm_mode=colocate"
            )
        return None

    def unexpanded_ids(self, ids: list[int], processor: Any) -> list[int]:
        """Each image's block back to one ``<image>``, the token vLLM replaces with that block:
        ``<fake_token_around_image><row_i_col_j><image>*k`` per tile (rows ended by newlines),
        then ``<fake_token_around_image><global-img><image>*k<fake_token_around_image>``; without
        image splitting only the global part."""
        fake, glob = processor.fake_image_token_id, processor.global_image_token_id
        token = processor.image_token_id
        out: list[int] = []
        i = 0
        while i < len(ids):
            end = _block_end(ids, i, fake, glob, token) if ids[i] == fake else None
            out.append(ids[i] if end is None else token)
            i = i + 1 if end is None else end
        return out


class InternVLAdapter(FamilyAdapter):
    """InternVL: the processor crops up to ``max_patches`` (12) tiles of 448 px plus a thumbnail,
    256 tokens each; ``image_splitting`` (crop_to_patches) and ``max_image_tiles`` set that."""

    image_options = ("image_splitting", "max_image_tiles")

    def processor_kwargs(self, **options: Any) -> dict:
        kwargs: dict = {}
        if options.get("image_splitting") is not None:
            kwargs["crop_to_patches"] = options["image_splitting"]
        if options.get("max_image_tiles"):
            kwargs["max_patches"] = options["max_image_tiles"]
        return kwargs

    def unexpanded_ids(self, ids: list[int], processor: Any) -> list[int]:
        """``<img>`` + a run of ``<IMG_CONTEXT>`` (256 per tile) + ``</img>`` back to one
        ``<IMG_CONTEXT>``, the token vLLM replaces with that block."""
        ids = super().unexpanded_ids(ids, processor)
        start, end = processor.start_image_token_id, processor.end_image_token_id
        token = processor.image_token_id
        out: list[int] = []
        for i, t in enumerate(ids):
            if t == start and i + 2 < len(ids) and ids[i + 1] == token and ids[i + 2] == end:
                continue
            if t == end and i >= 2 and ids[i - 1] == token and ids[i - 2] == start:
                continue
            out.append(t)
        return out


def _block_end(ids: list[int], i: int, fake: int, glob: int, token: int) -> int | None:
    """Where the SmolVLM image block opened by the ``fake`` token at ``i`` ends (exclusive): after
    the ``fake`` that closes the global view's run of image tokens; None if none does."""
    try:
        g = ids.index(glob, i)
    except ValueError:
        return None
    j = g + 1
    while j < len(ids) and ids[j] == token:
        j += 1
    if j == g + 1 or j >= len(ids) or ids[j] != fake:
        return None
    return j + 1


IMAGE_OPTIONS = (
    "min_pixels",
    "max_pixels",
    "image_splitting",
    "max_image_tiles",
    "image_longest_edge",
)


def image_options(model_config: Any) -> dict:
    """The image-processor settings of a ModelConfig, by name."""
    return {k: getattr(model_config, k, None) for k in IMAGE_OPTIONS}


def check_image_options(model_config: Any, family: str) -> None:
    """A setting the family's processor does not read is an error, not a silent no-op."""
    adapter = get_adapter(family)
    for key, value in image_options(model_config).items():
        if value is not None and key not in adapter.image_options:
            readers = sorted({a.family for a in ADAPTERS.values() if key in a.image_options})
            raise UserError(
                f"model.{key}: the {family} processor does not read it (only {', '.join(readers)}); "
                f"remove it (--set model.{key}=none)"
            )


def check_vllm(model_config: Any, family: str, mode: str) -> None:
    """GRPO with vLLM generation: a family and mode that would not give vLLM the trainer's image
    tokens is refused before anything runs."""
    reason = get_adapter(family).vllm_refusal(mode, **image_options(model_config))
    if reason:
        raise UserError(reason)


ADAPTERS: dict[str, FamilyAdapter] = {
    "qwen2_5_vl": QwenAdapter("qwen2_5_vl", ("visual.",)),
    # Qwen3-VL: the same processor (16 px patches), chat tokens and "visual." tower (DeepStack
    # mergers inside it); its MoE checkpoint's experts are fused tensors, not Linear layers, so
    # the LoRA regex wraps attention there and the dense models' MLPs here
    "qwen3_vl": QwenAdapter("qwen3_vl", ("visual.",)),
    "internvl": InternVLAdapter("internvl", ("vision_tower.", "multi_modal_projector.")),
    # SmolVLM answers in a terse style; it is asked for the same tags in plainer words.
    "smolvlm": SmolVLMAdapter(
        "smolvlm",
        ("vision_model.", "connector."),
        instruction="Think step by step inside <think> </think>, then answer True or False inside "
        "<answer> </answer>.",
    ),
}


def get_adapter(family: str, thinking: bool = False) -> FamilyAdapter:
    """The family's adapter; ``thinking``: for a checkpoint whose template opens ``<think>``."""
    adapter = ADAPTERS[family]
    return dataclasses.replace(adapter, thinking=True) if thinking else adapter


def lora_target_names(model: Any, regex: str) -> list[str]:
    pattern = re.compile(regex)
    return [n for n, _ in model.named_modules() if pattern.fullmatch(n)]

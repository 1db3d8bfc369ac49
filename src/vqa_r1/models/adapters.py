"""Family adapters: what differs between Qwen2.5-VL, InternVL and SmolVLM, in one place each.

An adapter owns loading (dtype, attention, image-size limits), the chat formatting of an
(image, question) pair, which modules LoRA may wrap (language model only) and which belong to the
vision side (frozen). Everything else in the suite is family-agnostic.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.data.prompts import REASONING_INSTRUCTION

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

    # --- loading -------------------------------------------------------------------------
    def processor_kwargs(self, min_pixels: int | None, max_pixels: int | None) -> dict:
        return {}

    def load(
        self,
        path: str | Path,
        dtype: str = "auto",
        attn_implementation: str = "sdpa",
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        processor = AutoProcessor.from_pretrained(
            path, **self.processor_kwargs(min_pixels, max_pixels)
        )
        processor.tokenizer.padding_side = "left"  # batched generation needs left padding
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=torch_dtype, attn_implementation=attn_implementation
        )
        return model, processor

    # --- prompts -------------------------------------------------------------------------
    def messages(
        self, question: str, instruction: str | None = None, image: bool = True
    ) -> list[dict]:
        text = f"{question} {instruction if instruction is not None else self.instruction}"
        parts = [{"type": "text", "text": text.strip()}]
        return [{"role": "user", "content": ([{"type": "image"}] if image else []) + parts}]

    def image_token_id(self, processor: Any) -> int | None:
        token = getattr(processor, "image_token", None)
        if token is None:
            return None
        return processor.tokenizer.convert_tokens_to_ids(token)

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
    def processor_kwargs(self, min_pixels: int | None, max_pixels: int | None) -> dict:
        kwargs = {}
        if min_pixels:
            kwargs["min_pixels"] = min_pixels
        if max_pixels:
            kwargs["max_pixels"] = max_pixels
        return kwargs


ADAPTERS: dict[str, FamilyAdapter] = {
    "qwen2_5_vl": QwenAdapter("qwen2_5_vl", ("visual.",)),
    "internvl": FamilyAdapter("internvl", ("vision_tower.", "multi_modal_projector.")),
    # SmolVLM answers in a terse style; it is asked for the same tags in plainer words.
    "smolvlm": FamilyAdapter(
        "smolvlm",
        ("vision_model.", "connector."),
        instruction="Think step by step inside <think> </think>, then answer True or False inside "
        "<answer> </answer>.",
    ),
}


def get_adapter(family: str) -> FamilyAdapter:
    return ADAPTERS[family]


def lora_target_names(model: Any, regex: str) -> list[str]:
    pattern = re.compile(regex)
    return [n for n, _ in model.named_modules() if pattern.fullmatch(n)]

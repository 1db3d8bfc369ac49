"""Batched generation with a generation-cache policy.

Why a policy: a published project generated SmolVLM answers with ``use_cache=False`` because image
tokens were lost on cached decode steps. With current transformers the cache is correct (and 2-24x
faster), but a user may hit an old checkpoint or a regression. ``auto`` checks once, on one example,
that greedy ids agree with and without the cache and only then uses it; ``off`` is the workaround.
Uncached decoding re-reads the whole sequence, so an emitted image token would break it: the image
token is always suppressed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class GenerationSettings:
    max_new_tokens: int = 128
    do_sample: bool = False
    temperature: float = 1.0
    cache: str = "auto"  # auto | on | off


class Generator:
    """Generates answers for (image, question) pairs with one loaded model."""

    def __init__(self, loaded: Any, settings: GenerationSettings, instruction: str | None = None):
        self.loaded = loaded
        self.settings = settings
        self.instruction = instruction
        self.use_cache: bool | None = {"on": True, "off": False}.get(settings.cache)
        self.cache_decision = settings.cache

    def _inputs(self, images: Sequence[Any] | None, questions: Sequence[str]) -> Any:
        """Processor inputs; ``images=None`` for text-only questions (no image placeholder)."""
        adapter, processor = self.loaded.adapter, self.loaded.processor
        texts = [
            processor.apply_chat_template(
                adapter.messages(q, self.instruction, image=images is not None),
                add_generation_prompt=True,
            )
            for q in questions
        ]
        if images is None:
            return processor(text=texts, return_tensors="pt", padding=True)
        return processor(
            text=texts, images=[[img] for img in images], return_tensors="pt", padding=True
        )

    def _generate_ids(self, inputs: Any, use_cache: bool, max_new_tokens: int | None = None) -> Any:
        import torch

        model = self.loaded.model
        kwargs: dict = dict(
            max_new_tokens=max_new_tokens or self.settings.max_new_tokens,
            do_sample=self.settings.do_sample,
            use_cache=use_cache,
        )
        if self.settings.do_sample:
            kwargs["temperature"] = self.settings.temperature
        image_token = self.loaded.adapter.image_token_id(self.loaded.processor)
        if image_token is not None:
            kwargs["suppress_tokens"] = [image_token]
        tok = self.loaded.processor.tokenizer
        kwargs["pad_token_id"] = (
            tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        )
        device = next(model.parameters()).device
        inputs = inputs.to(device)
        with torch.inference_mode():
            out = model.generate(**inputs, **kwargs)
        return out[:, inputs["input_ids"].shape[1] :]

    def self_check(self, image: Any, question: str) -> bool:
        """Greedy ids with and without the cache on one example; use the cache only if they agree."""
        inputs = self._inputs([image] if image is not None else None, [question])
        n = min(self.settings.max_new_tokens, 32)
        try:
            cached = self._generate_ids(inputs, True, n)
        except Exception as err:  # a cache bug that crashes is a disagreement too
            log.warning("generation cache self-check: cached decoding failed (%s)", err)
            cached = None
        uncached = self._generate_ids(inputs, False, n)
        agree = cached is not None and cached.tolist() == uncached.tolist()
        self.use_cache = agree
        self.cache_decision = f"auto -> {'on' if agree else 'off'}"
        log.info(
            "generation cache self-check: greedy ids %s with and without the cache; cache %s",
            "agree" if agree else "DIFFER",
            "on" if agree else "off",
        )
        return agree

    def generate(self, images: Sequence[Any] | None, questions: Sequence[str]) -> list[str]:
        if self.use_cache is None:
            self.self_check(images[0] if images is not None else None, questions[0])
        ids = self._generate_ids(self._inputs(images, questions), bool(self.use_cache))
        return self.loaded.processor.batch_decode(ids, skip_special_tokens=True)

"""Batched generation with a generation-cache policy.

Why a policy: a published project generated SmolVLM answers with ``use_cache=False`` because image
tokens were lost on cached decode steps. With current transformers the cache is correct (and 2-24x
faster), but a user may hit an old checkpoint or a regression. ``auto`` checks once, on one example,
that greedy ids agree with and without the cache and only then uses it; ``off`` is the workaround.
Uncached decoding re-reads the whole sequence, so an emitted image token would break it: the image
token is always suppressed.

The check costs one cached generation and one uncached forward pass. It used to run an uncached
generation, which re-reads the whole prompt for every new token: 0.32 s against 0.07 s now, for an
evaluation of 64 items (256 image tokens each) that takes 2.7 s (`vqa-r1 bench --only P1`).

The check compares only steps whose greedy choice is clear: in bfloat16 the cached and the
uncached pass round differently, so a near-tie between the two likeliest tokens may flip with no
bug anywhere, and an exact comparison turned the cache off (and decoding 2-24x slower) for
nothing. A step counts when the gap between its two largest logits exceeds ``TIE_MARGIN_EPS``
times the dtype's epsilon times the largest logit's magnitude, in both passes; a broken cache
(lost image tokens) changes clear choices. What was compared is in ``cache_check`` (scores.json).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# a step whose top-2 logit gap is below this many epsilons of the dtype (relative to the largest
# logit) is a near-tie that rounding alone may flip: bfloat16 (eps 2**-7): 0.25 of a logit of 4
TIE_MARGIN_EPS = 8.0


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
        self.cache_check: dict | None = None  # what the auto check compared
        self.last_truncated: list[bool] = []  # per item of the last generate(): no end token

    def restore_cache_decision(self, decision: str, use_cache: bool, check: dict | None) -> None:
        """Take an earlier run's decision (a resumed evaluation decides as the first attempt did)."""
        self.cache_decision, self.use_cache, self.cache_check = decision, use_cache, check

    def _inputs(self, images: Sequence[Any] | None, questions: Sequence[str]) -> Any:
        """Processor inputs; ``images=None`` for text-only questions (no image placeholder).
        An item's image may be a list: its images, one placeholder each, in order."""
        adapter, processor = self.loaded.adapter, self.loaded.processor
        per_item = (
            None
            if images is None
            else [list(img) if isinstance(img, (list, tuple)) else [img] for img in images]
        )
        texts = [
            processor.apply_chat_template(
                adapter.messages(
                    q, self.instruction, images=0 if per_item is None else len(per_item[i])
                ),
                add_generation_prompt=True,
            )
            for i, q in enumerate(questions)
        ]
        if per_item is None:
            return processor(text=texts, return_tensors="pt", padding=True)
        return processor(text=texts, images=per_item, return_tensors="pt", padding=True)

    def _generation_kwargs(self, use_cache: bool, max_new_tokens: int | None) -> dict:
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
        return kwargs

    def _on_device(self, inputs: Any) -> Any:
        """Inputs on the device load_model placed the model on (else where its weights are)."""
        device = getattr(self.loaded, "device", None)
        return inputs.to(device or next(self.loaded.model.parameters()).device)

    def _generate_ids(self, inputs: Any, use_cache: bool, max_new_tokens: int | None = None) -> Any:
        import torch

        inputs = self._on_device(inputs)
        with torch.inference_mode():
            out = self.loaded.model.generate(
                **inputs, **self._generation_kwargs(use_cache, max_new_tokens)
            )
        return out[:, inputs["input_ids"].shape[1] :]

    def _masked(self, logits: Any) -> Any:
        """Logits with the image token excluded (it is suppressed when generating)."""
        image_token = self.loaded.adapter.image_token_id(self.loaded.processor)
        if image_token is not None:
            logits = logits.clone()
            logits[..., image_token] = float("-inf")
        return logits

    def _cached_logits(self, inputs: Any, max_new_tokens: int) -> tuple[Any, Any]:
        """Greedy generation with the cache: the new ids, and each step's raw logits."""
        import torch

        kwargs = self._generation_kwargs(True, max_new_tokens)
        kwargs.update(do_sample=False, output_logits=True, return_dict_in_generate=True)
        kwargs.pop("temperature", None)
        with torch.inference_mode():
            out = self.loaded.model.generate(**inputs, **kwargs)
            logits = self._masked(torch.stack(out.logits, dim=1))
        ids = out.sequences[:, inputs["input_ids"].shape[1] :]
        return ids, logits

    def _uncached_logits(self, inputs: Any, ids: Any) -> Any:
        """One forward pass without the cache over the prompt and ``ids``: the logits after each
        prefix (prompt, prompt + ids[:1], ...), as uncached decoding would see them."""
        import inspect

        import torch

        model = self.loaded.model
        k = ids.shape[1]
        full = dict(inputs)
        full["input_ids"] = torch.cat([inputs["input_ids"], ids], dim=1)
        full["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(ids)], dim=1)
        for key, value in inputs.items():  # e.g. Qwen2.5-VL's mm_token_type_ids: 0 is text
            if key.endswith("token_type_ids"):
                full[key] = torch.cat([value, torch.zeros_like(ids)], dim=1)
        forward = getattr(model, "get_base_model", lambda: model)().forward
        if "logits_to_keep" in inspect.signature(forward).parameters:
            full["logits_to_keep"] = k + 1
        with torch.inference_mode():
            logits = model(**full, use_cache=False).logits
            return self._masked(logits[:, -(k + 1) : -1])

    def self_check(self, image: Any, question: str) -> bool:
        """Greedy ids with and without the cache on one example; use the cache only if they agree.

        Cached greedy decoding of up to 32 tokens, then one uncached forward pass over the prompt and
        those tokens: they agree if at every step the cached and the uncached model pick the same
        greedy token after the same prefix, near-ties within rounding excused (``compare_greedy``). Raw logits are compared,
        so logits processors of the model's generation config (a repetition penalty) and sampling
        settings do not enter the comparison.
        """
        inputs = self._on_device(self._inputs([image] if image is not None else None, [question]))
        n = min(self.settings.max_new_tokens, 32)
        try:
            ids, cached = self._cached_logits(inputs, n)
        except Exception as err:  # a cache bug that crashes is a disagreement too
            log.warning("generation cache self-check: cached decoding failed (%s)", err)
            check = {"agree": False, "error": str(err)[:200]}
        else:
            # models upcast their logits to float32: the rounding is that of the weights' dtype
            dtype = next(self.loaded.model.parameters()).dtype
            check = compare_greedy(cached, self._uncached_logits(inputs, ids), dtype)
        agree = check["agree"]
        self.use_cache = agree
        self.cache_decision = f"auto -> {'on' if agree else 'off'}"
        self.cache_check = check
        log.info(
            "generation cache self-check: greedy ids %s with and without the cache (%s steps, "
            "%s near-ties within rounding); cache %s",
            "agree" if agree else "DIFFER",
            check.get("steps"),
            check.get("near_ties"),
            "on" if agree else "off",
        )
        return agree

    def generate(self, images: Sequence[Any] | None, questions: Sequence[str]) -> list[str]:
        """Texts; ``last_truncated`` then says which stopped at max_new_tokens with no end token."""
        if self.use_cache is None:
            self.self_check(images[0] if images is not None else None, questions[0])
        ids = self._generate_ids(self._inputs(images, questions), bool(self.use_cache))
        stops = self._stop_ids()
        self.last_truncated = [
            ids.shape[1] >= self.settings.max_new_tokens and not (set(row) & stops)
            for row in ids.tolist()
        ]
        texts = self.loaded.processor.batch_decode(ids, skip_special_tokens=True)
        return [self.loaded.adapter.response_text(t) for t in texts]

    def _stop_ids(self) -> set[int]:
        """Token ids that end a generation (the generation config's and the tokenizer's EOS)."""
        config = getattr(self.loaded.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        tok_eos = self.loaded.processor.tokenizer.eos_token_id
        if tok_eos is not None:
            ids.add(tok_eos)
        return ids


def compare_greedy(cached: Any, uncached: Any, dtype: Any = None) -> dict:
    """Do two passes' logits (batch x steps x vocab) pick the same greedy token at every step?

    A step where they pick different tokens counts as a disagreement only when one pass rates the
    other's choice clearly below its own: by more than ``TIE_MARGIN_EPS`` epsilons of ``dtype``
    (the model's compute dtype; default the logits') times its largest logit's magnitude. A flip
    between two tokens within rounding of each other is a near-tie, counted but not held against
    the cache."""
    import torch

    dtype = dtype or cached.dtype
    eps = torch.finfo(dtype).eps
    dtype = str(dtype).replace("torch.", "")
    cached, uncached = cached.float(), uncached.float()
    pick_c, pick_u = cached.argmax(-1, keepdim=True), uncached.argmax(-1, keepdim=True)
    worse = torch.zeros(pick_c.shape[:-1], dtype=torch.bool, device=cached.device)
    for logits, other_pick in ((cached, pick_u), (uncached, pick_c)):
        top = logits.max(-1).values
        margin = TIE_MARGIN_EPS * eps * top.abs().clamp(min=1.0)
        worse |= (top - logits.gather(-1, other_pick).squeeze(-1)) > margin
    differ = (pick_c != pick_u).squeeze(-1)
    clear = differ & worse
    return {
        "agree": not bool(clear.any()),
        "steps": int(differ.numel()),
        "differ": int(clear.sum()),
        "near_ties": int((differ & ~worse).sum()),
        "dtype": dtype,
        "margin": f"{TIE_MARGIN_EPS:g} eps x max(1, |top logit|)",
    }

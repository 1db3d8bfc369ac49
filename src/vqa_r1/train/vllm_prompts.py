"""What GRPO's colocated vLLM is handed: the prompt as the chat template wrote it, and the
trainer's own image-processor settings.

TRL 1.16 (trl/generation/vllm_generation.py, colocate) hands vLLM the prompt ids the processor
already expanded (N image tokens per image) together with the image. vLLM 0.31 expands the image
token of every token prompt again, with no check for an expanded one: the model generated from
2N-1 image tokens, N-1 of them as text, with no error anywhere (the trainer's loss used its own
ids). And vLLM processed the image with the checkpoint's settings, not the recipe's (tiles,
pixel budget), so even a correct prompt could get another number of image tokens.

The seam is the one call where TRL hands vLLM its rows, ``vllm_generation.llm.generate``: each
row's ids go back to one image token per image (FamilyAdapter.unexpanded_ids) and the row carries
the trainer's processor settings (vLLM's per-request ``mm_processor_kwargs``). vLLM then makes
exactly the trainer's ids (tests/test_vllm_prompts.py runs vLLM's own processing on them). TRL
keeps its own prompt ids for the loss; vLLM's echo is ignored either way.

Server mode needs none of this (the server gets the settings as ``--mm-processor-kwargs`` and TRL
places the features on the trainer's runs of image tokens); SmolVLM's image splitting is refused
there (FamilyAdapter.vllm_refusal).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from vqa_r1.models.serving import mm_limits


@contextlib.contextmanager
def colocated_engine_limits(images_per_row: int) -> Iterator[None]:
    """While a GRPO trainer is built: TRL's colocated ``LLM(...)`` (trl/generation/
    vllm_generation.py, which passes no multimodal limit) gets ``limit_mm_per_prompt``.
    Server mode gets the same limit on the server's command line (launch/distributed.py)."""
    try:
        from trl.generation import vllm_generation
    except ImportError:  # a TRL without that module: nothing to limit
        yield
        return
    original = getattr(vllm_generation, "LLM", None)
    if original is None:  # vLLM not installed: TRL refuses use_vllm itself
        yield
        return
    vllm_generation.LLM = functools.partial(original, limit_mm_per_prompt=mm_limits(images_per_row))
    try:
        yield
    finally:
        vllm_generation.LLM = original


def unexpanded_rows(
    rows: Sequence[Any], unexpand: Callable[[list[int]], list[int]], mm_kwargs: dict
) -> list[Any]:
    """TRL's vLLM rows, those with images given unexpanded ids and the trainer's settings."""
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("multi_modal_data"):
            row = {**row, "prompt_token_ids": unexpand(list(row["prompt_token_ids"]))}
            if mm_kwargs:
                row["mm_processor_kwargs"] = {**mm_kwargs, **row.get("mm_processor_kwargs", {})}
        out.append(row)
    return out


def hand_vllm_unexpanded_prompts(
    trainer: Any, adapter: Any, processor: Any, mm_kwargs: dict
) -> bool:
    """Wrap the colocated engine's ``generate`` of a GRPO trainer (no-op without one, or in
    server mode); returns whether it did."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or getattr(generation, "mode", None) != "colocate":
        return False
    llm = generation.llm
    generate = llm.generate

    def generate_unexpanded(prompts: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(prompts, dict):
            prompts = unexpanded_rows([prompts], unexpand, mm_kwargs)[0]
        elif isinstance(prompts, (list, tuple)):
            prompts = unexpanded_rows(prompts, unexpand, mm_kwargs)
        return generate(prompts, *args, **kwargs)

    def unexpand(ids: list[int]) -> list[int]:
        return adapter.unexpanded_ids(ids, processor)

    llm.generate = generate_unexpanded
    return True

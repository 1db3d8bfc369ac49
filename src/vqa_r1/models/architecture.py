"""Each registered hub model's architecture, shipped with the suite.

Why: a login node has no weights and this machine no Hub, yet the memory plan needs each model's
exact parameter counts and the scale benchmark needs the real architecture (random weights: memory
and time do not depend on their values). Each model's published configuration is a small JSON
file in ``models/architectures/NAME.json`` (``_source`` names the checkpoint's config.json and the
model card's size); the model is built from it on PyTorch's ``meta`` device, which allocates
nothing, so counting 8B parameters takes about a second.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

ARCHITECTURES = Path(__file__).with_name("architectures")
# a model folder built with random weights (benchmarks/scale.py) says so in its config.json, and
# only a process that set this variable (a benchmark, a smoke) may load it
RANDOM_INIT_KEY = "vqa_r1_random_init"
RANDOM_INIT_OK_ENV = "VQA_R1_RANDOM_INIT_OK"


def shipped() -> list[str]:
    """The registered names with a shipped architecture."""
    return sorted(p.stem for p in ARCHITECTURES.glob("*.json"))


def _record(name: str) -> dict:
    path = ARCHITECTURES / f"{name}.json"
    if not path.is_file():
        raise UserError(
            f"no shipped architecture for model {name!r} (models/architectures/ has "
            f"{', '.join(shipped())}); tiny models are built by `vqa-r1` itself"
        )
    return json.loads(path.read_text())


def source(name: str) -> dict:
    """Where the configuration comes from: ``hub_id``, ``file``, ``published_parameters``."""
    return dict(_record(name)["_source"])


def architecture_config(name: str) -> Any:
    """The transformers configuration of registered model ``name``, as its checkpoint ships it."""
    from transformers import AutoConfig

    config = dict(_record(name)["config"])
    return AutoConfig.for_model(config.pop("model_type"), **config)


@functools.lru_cache(maxsize=8)
def meta_model(name: str) -> Any:
    """The model of ``name`` on the ``meta`` device: every module and parameter shape, no memory."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(architecture_config(name))


@dataclass(frozen=True)
class ParameterCounts:
    """Parameters of one model by part (``vision``: the tower and projector the suite freezes)."""

    total: int
    vision: int
    language: int
    embedding: int  # the input embedding (and the output head when tied)
    lm_head: int  # 0 when tied to the embedding


def parameter_counts(name: str) -> ParameterCounts:
    """Exact counts from the meta model; tied weights counted once (as ``parameters()`` does)."""
    from vqa_r1.models.adapters import get_adapter
    from vqa_r1.models.registry import get_spec

    model = meta_model(name)
    adapter = get_adapter(get_spec(name).family)
    total = vision = 0
    for param_name, param in model.named_parameters():
        total += param.numel()
        if adapter.is_vision_module(param_name):
            vision += param.numel()
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings()
    tied = head is None or head.weight is model.get_input_embeddings().weight
    lm_head = 0 if tied else head.weight.numel()
    return ParameterCounts(total, vision, total - vision, embedding, lm_head)


def build_random(name: str, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0) -> Any:
    """The real architecture with random weights, for benchmarks and smokes only (its outputs are
    noise: never evaluated as if it were the model)."""
    import torch
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    config = architecture_config(name)
    with torch.device(device):
        return AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype))


def refuse_random_weights(path: str | Path) -> None:
    """A folder of random weights (``RANDOM_INIT_KEY`` in its config.json) is loaded only by a
    benchmark or a smoke (``RANDOM_INIT_OK_ENV``): its outputs are noise, never a model's
    results."""
    config = Path(path) / "config.json"
    try:
        random_init = json.loads(config.read_text()).get(RANDOM_INIT_KEY)
    except (OSError, ValueError, AttributeError):
        return
    if random_init and os.environ.get(RANDOM_INIT_OK_ENV) != "1":
        raise UserError(
            f"{path} holds random weights (built by a benchmark: {RANDOM_INIT_KEY} in its "
            "config.json); their outputs are noise, so the suite trains and evaluates real "
            "weights only: use a downloaded or trained model"
        )

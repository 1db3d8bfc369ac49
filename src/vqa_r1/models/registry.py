"""Model names users type, mapped to a family adapter and a hub id (or a tiny offline build)."""

from __future__ import annotations

from dataclasses import dataclass

from vqa_r1.errors import UserError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # key of vqa_r1.models.adapters.ADAPTERS
    hub_id: str | None  # None for tiny models, which are built offline
    size: str  # recipe size key: "tiny", "1b", "3b", ...
    params: str  # human-readable size for `vqa-r1 models`
    pretrained: bool = False  # tiny model pretrained here, weights shipped (models/pretrained/)
    # the checkpoint's chat template opens the think block itself (Qwen3-VL Thinking): prompts
    # do not ask for <think>, and the format reward is `format_thinking` (rewards/answer.py)
    thinking: bool = False

    @property
    def tiny(self) -> bool:
        return self.hub_id is None

    @property
    def source(self) -> str:
        if self.hub_id:
            return self.hub_id
        if self.pretrained:
            return f"shipped: models/pretrained/{self.name}"
        return "(built offline, random init)"


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("qwen2.5-vl-3b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-3B-Instruct", "3b", "3.8B"),
        ModelSpec("qwen2.5-vl-7b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct", "7b", "8.3B"),
        ModelSpec("internvl3-1b", "internvl", "OpenGVLab/InternVL3-1B-hf", "1b", "0.9B"),
        ModelSpec("internvl3-2b", "internvl", "OpenGVLab/InternVL3-2B-hf", "2b", "2.1B"),
        ModelSpec("smolvlm-256m", "smolvlm", "HuggingFaceTB/SmolVLM-256M-Instruct", "256m", "256M"),
        ModelSpec("smolvlm-500m", "smolvlm", "HuggingFaceTB/SmolVLM-500M-Instruct", "500m", "507M"),
        ModelSpec("smolvlm-2.2b", "smolvlm", "HuggingFaceTB/SmolVLM-Instruct", "2b", "2.2B"),
        # Qwen3-VL (transformers' qwen3_vl / qwen3_vl_moe): Instruct and Thinking checkpoints;
        # a Thinking model's recipe is its size's plus recipes/qwen3_vl/thinking.yaml
        ModelSpec("qwen3-vl-2b", "qwen3_vl", "Qwen/Qwen3-VL-2B-Instruct", "2b", "2.1B"),
        ModelSpec("qwen3-vl-4b", "qwen3_vl", "Qwen/Qwen3-VL-4B-Instruct", "4b", "4.4B"),
        ModelSpec("qwen3-vl-8b", "qwen3_vl", "Qwen/Qwen3-VL-8B-Instruct", "8b", "8.8B"),
        ModelSpec(
            "qwen3-vl-2b-thinking",
            "qwen3_vl",
            "Qwen/Qwen3-VL-2B-Thinking",
            "2b-thinking",
            "2.1B",
            thinking=True,
        ),
        ModelSpec(
            "qwen3-vl-4b-thinking",
            "qwen3_vl",
            "Qwen/Qwen3-VL-4B-Thinking",
            "4b-thinking",
            "4.4B",
            thinking=True,
        ),
        ModelSpec(
            "qwen3-vl-8b-thinking",
            "qwen3_vl",
            "Qwen/Qwen3-VL-8B-Thinking",
            "8b-thinking",
            "8.8B",
            thinking=True,
        ),
        # mixture of experts, 3B active: ZeRO-3 over the node's GPUs (recipes/qwen3_vl/30b-a3b.yaml)
        ModelSpec(
            "qwen3-vl-30b-a3b", "qwen3_vl", "Qwen/Qwen3-VL-30B-A3B-Instruct", "30b-a3b", "31B"
        ),
        ModelSpec("tiny-qwen2.5-vl", "qwen2_5_vl", None, "tiny", "random init, <1M"),
        ModelSpec("tiny-qwen3-vl", "qwen3_vl", None, "tiny", "random init, <1M"),
        ModelSpec("tiny-internvl", "internvl", None, "tiny", "random init, <1M"),
        ModelSpec("tiny-smolvlm", "smolvlm", None, "tiny", "random init, <1M"),
        ModelSpec(
            "tiny-qwen2.5-vl-pretrained",
            "qwen2_5_vl",
            None,
            "tiny-pretrained",
            "pretrained, <1M",
            True,
        ),
        # the same tiny Qwen pretrained with the curriculum's count and cell tasks on, for the
        # counting and cryptogram experiments (its True/False comparison stayed at chance)
        ModelSpec(
            "tiny-qwen2.5-vl-studies",
            "qwen2_5_vl",
            None,
            "tiny-pretrained",
            "pretrained (+count, cell), <1M",
            True,
        ),
        ModelSpec(
            "tiny-internvl-pretrained", "internvl", None, "tiny-pretrained", "pretrained, <1M", True
        ),
        ModelSpec(
            "tiny-smolvlm-pretrained", "smolvlm", None, "tiny-pretrained", "pretrained, <1M", True
        ),
        ModelSpec(
            "tiny-qwen3-vl-pretrained", "qwen3_vl", None, "tiny-pretrained", "pretrained, <1M", True
        ),
    )
}


# `vqa-r1 pretrain --family NAME`: the names users type, the adapters' keys, the shipped models
FAMILIES: dict[str, str] = {
    "qwen2.5-vl": "qwen2_5_vl",
    "internvl": "internvl",
    "smolvlm": "smolvlm",
    "qwen3-vl": "qwen3_vl",
}
PRETRAINED: dict[str, str] = {
    "qwen2_5_vl": "tiny-qwen2.5-vl-pretrained",
    "internvl": "tiny-internvl-pretrained",
    "smolvlm": "tiny-smolvlm-pretrained",
    "qwen3_vl": "tiny-qwen3-vl-pretrained",
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UserError(
            f"unknown model {name!r}. Valid names: {', '.join(MODELS)} "
            "(see `vqa-r1 models`). For a local copy of a registered model, add --set model.path=DIR."
        ) from None

"""Resolve a model name to local weights and load it with its adapter (and optional LoRA adapter).

Compute nodes often have no internet. A hub model missing from the local cache must fail fast with
the command to run on a login node, never hang in a download retry loop inside a 12-hour allocation.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.models.adapters import FamilyAdapter, get_adapter
from vqa_r1.models.registry import FAMILIES, ModelSpec, get_spec
from vqa_r1.models.tiny import TinySize, tiny_model_dir

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    spec: ModelSpec
    adapter: FamilyAdapter
    model: Any
    processor: Any
    path: Path


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def download_command(hub_id: str) -> str:
    return f"hf download {hub_id}   (or: huggingface-cli download {hub_id})"


def cached_hub_path(hub_id: str) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(hub_id, local_files_only=True))
    except Exception:
        return None


PRETRAINED_DIR = Path(__file__).parent / "pretrained"


def shipped_model_dir(name: str) -> Path:
    """A tiny model pretrained by `vqa-r1 pretrain` and shipped in the repository (see its card)."""
    path = PRETRAINED_DIR / name
    if not (path / "config.json").exists():
        family = {v: k for k, v in FAMILIES.items()}[get_spec(name).family]
        raise UserError(
            f"{name}: the shipped weights are missing from {path}. Rebuild them with "
            f"`vqa-r1 pretrain --family {family} --out {path}` (the command in its card, README.md)"
        )
    return path


def resolve_model_path(
    spec: ModelSpec,
    override: str | None = None,
    *,
    tiny_seed: int = 0,
    tiny_size: Any = None,
    download: bool = True,
) -> Path:
    """Local folder holding the model: the override, a tiny build, or the hub cache."""
    if override:
        path = Path(override)
        if not (path / "config.json").exists():
            raise UserError(
                f"model.path: {override} has no config.json (expected a saved model folder)"
            )
        return path
    if spec.pretrained:
        return shipped_model_dir(spec.name)
    if spec.tiny:
        return tiny_model_dir(spec.family, tiny_seed, tiny_size)
    cached = cached_hub_path(spec.hub_id)
    if cached is not None:
        return cached
    hint = (
        f"model {spec.name!r} ({spec.hub_id}) is not in the local Hugging Face cache "
        f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}). Download it on a login node "
        f"with: {download_command(spec.hub_id)}"
    )
    if not download or not _hub_reachable():
        raise UserError(hint)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(spec.hub_id, etag_timeout=10))
    except Exception as err:
        raise UserError(f"{hint}\n(download failed: {err})") from None


def load_model(
    config: Any, adapter_path: str | Path | None = None, trainable: bool = False
) -> LoadedModel:
    """Load the model of a RunConfig's ``model`` section, optionally with a LoRA adapter on top."""

    mc = config.model if hasattr(config, "model") else config
    spec = get_spec(mc.name)
    adapter = get_adapter(spec.family)
    size = TinySize(hidden=mc.tiny_hidden, layers=mc.tiny_layers, vocab=mc.tiny_vocab)
    path = resolve_model_path(spec, mc.path, tiny_seed=mc.tiny_seed, tiny_size=size)
    model, processor = adapter.load(
        path, mc.dtype, mc.attn_implementation, mc.min_pixels, mc.max_pixels
    )
    if adapter_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=trainable)
    return LoadedModel(spec, adapter, model, processor, path)

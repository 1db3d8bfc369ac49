"""What an adapter was trained on: ``adapter_base.json`` beside its adapter_config.json.

PEFT names an adapter's base by the folder it was loaded from (adapter_config.json's
``base_model_name_or_path``): a path on the machine that trained it, which says nothing of what
the folder held, nor anything once the adapter is copied out of its run. So every adapter our runs
save (``final/`` and each ``checkpoints/checkpoint-N``, SFT, GRPO and prompt tuning) carries a
record of its base, written atomically:

* ``model``: the run's ``model`` section as far as it names the base: ``name`` (registered),
  ``path`` (model.path, e.g. a merged model; None otherwise) and a random-init tiny model's build
  settings (``tiny_seed``, ``tiny_hidden``, ...);
* ``path``: the base folder it was loaded from, resolved;
* ``config``: the base's config.json, as far as it decides whether an adapter fits: model_type and
  architectures, and the sizes (hidden size, layers, vocabulary, heads) of the model and of its
  ``text_config`` and ``vision_config``;
* ``weights``: a SHA-256 (first 16 hex digits) of every tensor's name, dtype and shape, read from
  the safetensors headers, and of the first 64 bytes of its data. The shapes alone cannot tell two
  models of one architecture apart (a random-init tiny model from its pretrained weights, a base
  from its merged model); their first values can, since training or a merge changes nearly every
  element of a tensor it touches. At most 64 bytes per tensor are read (a 7B model: ~730 tensors,
  ~50 KB): multi-GB weights are never read through. The tensors are taken in name order, across
  shards, so a re-sharded copy hashes alike; another dtype does not. None for weights that are
  not safetensors (a pickled ``pytorch_model.bin`` has no header to read cheaply): the config
  alone is compared then.

``fingerprint`` computes ``config`` and ``weights`` of a model folder without loading it:
models/loading.py compares an adapter's record with the base about to be loaded.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from vqa_r1.io import atomic_write_json

RECORD = "adapter_base.json"
FORMAT = 1
HEAD_BYTES = 64  # of each tensor's data
_SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "depth",  # Qwen2.5-VL's vision tower
    "vocab_size",
    "intermediate_size",
    "num_attention_heads",
    "num_heads",
    "num_key_value_heads",
    "out_hidden_size",
)
_PARTS = ("text_config", "vision_config", "llm_config")


def config_signature(folder: str | Path) -> dict | None:
    """What of a model folder's config.json decides whether an adapter fits it, flattened
    (``text_config.hidden_size``); None where there is no readable config.json."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    signature: dict[str, Any] = {
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures"),
    }
    for prefix, part in [("", config), *((f"{p}.", config.get(p)) for p in _PARTS)]:
        if not isinstance(part, dict):
            continue
        if prefix and part.get("model_type") is not None:
            signature[f"{prefix}model_type"] = part["model_type"]
        for key in _SIZES:
            if isinstance(part.get(key), int):
                signature[f"{prefix}{key}"] = part[key]
    return signature


def _weight_files(folder: Path) -> list[Path] | None:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            return None
        return [folder / shard for shard in shards]
    single = folder / "model.safetensors"
    return [single] if single.exists() else None


def weights_digest(folder: str | Path) -> str | None:
    """The weights' hash (the module's docstring: headers and each tensor's first 64 bytes);
    None where they are not safetensors or cannot be read."""
    files = _weight_files(Path(folder))
    if not files:
        return None
    tensors: list[tuple[str, str, list, bytes]] = []
    try:
        for file in files:
            with open(file, "rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(length))
                start = 8 + length
                for name, info in header.items():
                    if name == "__metadata__":
                        continue
                    begin, end = info["data_offsets"]
                    fh.seek(start + begin)
                    head = fh.read(min(HEAD_BYTES, end - begin))
                    tensors.append((name, info["dtype"], info["shape"], head))
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    digest = hashlib.sha256()
    for name, dtype, shape, head in sorted(tensors, key=lambda t: t[0]):
        digest.update(json.dumps([name, dtype, shape]).encode())
        digest.update(head)
    return digest.hexdigest()[:16]


def fingerprint(folder: str | Path) -> dict:
    """``config`` and ``weights`` of a model folder (either None where unreadable)."""
    return {"config": config_signature(folder), "weights": weights_digest(folder)}


def base_record(model: dict, folder: str | Path) -> dict:
    """The record of an adapter trained on the model ``folder`` (``model``: see the docstring)."""
    return {
        "format": FORMAT,
        "model": model,
        "path": str(Path(folder).resolve()),
        **fingerprint(folder),
    }


def write_record(adapter_dir: str | Path, record: dict) -> None:
    atomic_write_json(Path(adapter_dir) / RECORD, record)


def read_record(adapter_dir: str | Path) -> dict | None:
    """An adapter folder's record; None where it has none (an older or a foreign adapter) or one
    this version cannot read."""
    try:
        record = json.loads((Path(adapter_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("model"), dict):
        return None
    return record


def differs(recorded: dict, here: dict) -> str | None:
    """How the base an adapter was trained on (its record's ``config`` and ``weights``) differs
    from a model folder's ``fingerprint`` (None: not at all, or not knowably)."""
    theirs, ours = recorded.get("config"), here.get("config")
    if isinstance(theirs, dict) and isinstance(ours, dict) and theirs != ours:
        return config_difference(theirs, ours)
    if recorded.get("weights") and here.get("weights") and recorded["weights"] != here["weights"]:
        return "same architecture, other weights"
    return None


def config_difference(theirs: dict, ours: dict) -> str | None:
    """The first difference of two config signatures, in words (None: none)."""
    for key in ("model_type", "architectures"):
        if theirs.get(key) != ours.get(key):
            return f"another model ({key} {_show(theirs.get(key))} vs {_show(ours.get(key))})"
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            return f"another size ({key} {_show(theirs.get(key))} vs {_show(ours.get(key))})"
    return None


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)

"""Resolve a model name to local weights and load it with its adapter (and optional LoRA adapter).

Compute nodes often have no internet. A hub model missing from the local cache must fail fast with
the command to run on a login node, never hang in a download retry loop inside a 12-hour allocation.

A LoRA adapter belongs to one base model. PEFT loads one onto another model with only a warning
(or none: weights for layers the model lacks are dropped; none at all where two families name and
size their language layers alike), so an adapter is checked against its base twice: before
anything is loaded, queued or written (``check_adapter_base``: by the run that made it, its
config.yaml; out of its run, by the record of its base it carries, models/base_record.py, or
else by what adapter_config.json names) and by its weights when loaded (every one must land in
the model: ``_check_keys``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vqa_r1.errors import UserError
from vqa_r1.models import base_record
from vqa_r1.models.adapters import FamilyAdapter, get_adapter, image_options
from vqa_r1.models.architecture import refuse_random_weights
from vqa_r1.models.registry import FAMILIES, MODELS, ModelSpec, get_spec
from vqa_r1.models.tiny import TinySize, tiny_model_dir, tiny_model_path

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    spec: ModelSpec
    adapter: FamilyAdapter
    model: Any
    processor: Any
    path: Path
    device: str | None = None  # where load_model placed it; None: left to a Trainer


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
    """The model's complete snapshot in the local cache, or None (absent or incomplete)."""
    path, missing = cached_snapshot(hub_id)
    return path if path is not None and not missing else None


def cached_snapshot(hub_id: str) -> tuple[Path | None, list[str]]:
    """The model's snapshot folder in the local cache (None: none) and the files it lacks.

    An interrupted ``hf download`` leaves a snapshot holding config.json and some of the shards:
    the hub's own lookup accepts it, and the job would fail on the compute node, offline."""
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(hub_id, local_files_only=True))
    except Exception:
        return None, []
    return path, missing_model_files(path)


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def missing_model_files(path: Path) -> list[str]:
    """What a saved vision-language model folder lacks to be loaded offline (empty: complete):
    config.json, the weights (a single file, or an index and every shard it names), the tokenizer
    and the image processor."""
    missing = [
        name for name in ("config.json", "tokenizer_config.json") if not (path / name).exists()
    ]
    missing += _missing_weights(path)
    for group in (TOKENIZER_FILES, PROCESSOR_FILES):
        if not any((path / name).exists() for name in group):
            missing.append(" or ".join(group))
    return missing


def _missing_weights(path: Path) -> list[str]:
    import json

    for single in WEIGHT_FILES:
        index = path / f"{single}.index.json"
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError):
                return [f"{index.name} (unreadable)"]
            return [shard for shard in shards if not (path / shard).exists()]
        if (path / single).exists():
            return []
    return [f"the weights ({' or '.join(WEIGHT_FILES)}, or an index with its shards)"]


def incomplete_message(hub_id: str, path: Path, missing: list[str]) -> str:
    return (
        f"{hub_id} in the local Hugging Face cache ({path}) is incomplete, an interrupted "
        f"download? Missing: {', '.join(missing)}. Finish it on a login node: "
        f"{download_command(hub_id)}"
    )


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
    cached, missing = cached_snapshot(spec.hub_id)
    if cached is not None and not missing:
        return cached
    hint = (
        f"model {spec.name!r} ({spec.hub_id}) is not in the local Hugging Face cache "
        f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}). Download it on a login node "
        f"with: {download_command(spec.hub_id)}"
    )
    if cached is not None:
        hint = incomplete_message(spec.hub_id, cached, missing)
    if not download or not _hub_reachable():
        raise UserError(hint)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(spec.hub_id, etag_timeout=10))
    except Exception as err:
        raise UserError(f"{hint}\n(download failed: {err})") from None


def load_model(
    config: Any,
    adapter_path: str | Path | None = None,
    trainable: bool = False,
    device: str | None = None,
) -> LoadedModel:
    """Load the model of a RunConfig's ``model`` section, optionally with a LoRA adapter on top.

    ``device``: a resolved device (vqa_r1.models.device.resolve_device) to load onto; None leaves
    placement to a Trainer."""

    mc = config.model if hasattr(config, "model") else config
    spec = get_spec(mc.name)
    adapter = get_adapter(spec.family, thinking=spec.thinking)
    size = TinySize(hidden=mc.tiny_hidden, layers=mc.tiny_layers, vocab=mc.tiny_vocab)
    path = resolve_model_path(spec, mc.path, tiny_seed=mc.tiny_seed, tiny_size=size)
    refuse_random_weights(path)
    model, processor = adapter.load(
        path, mc.dtype, mc.attn_implementation, device=device, **image_options(mc)
    )
    if adapter_path:
        from peft import PeftModel

        check_adapter_base(adapter_path, mc)
        try:
            # PEFT upcasts adapter weights to float32 beside bfloat16 base weights by default;
            # ZeRO-3 gathers parameters into buffers of one dtype and fails at the first
            # optimizer step. TRL passes autocast_adapter_dtype=False on its own PEFT path under
            # ZeRO-3 (GRPOTrainer); the same here for a continued adapter (--init-adapter)
            model = PeftModel.from_pretrained(
                model,
                str(adapter_path),
                is_trainable=trainable,
                autocast_adapter_dtype=not zero3_enabled(),
            )
        except (RuntimeError, ValueError) as err:  # size mismatch, target modules not found
            first = next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
            raise UserError(
                f"{_mismatch(adapter_path, mc, path)}: PEFT cannot load it: {first[:300]}"
            ) from None
        _check_keys(model, Path(adapter_path), mc, path)
    return LoadedModel(spec, adapter, model, processor, path, device)


_TINY_KEYS = ("tiny_seed", "tiny_hidden", "tiny_layers", "tiny_vocab")


def adapter_run_model(adapter_dir: str | Path) -> dict | None:
    """The ``model`` section of the run that made an adapter (final/ or checkpoints/checkpoint-N
    of a run directory), or None for an adapter folder of unknown origin."""
    adapter_dir = Path(adapter_dir)
    for run in (adapter_dir.parent, adapter_dir.parent.parent):
        config = run / "config.yaml"
        if config.is_file():
            try:
                data = yaml.safe_load(config.read_text())
            except (OSError, yaml.YAMLError):
                return None
            model = data.get("model") if isinstance(data, dict) else None
            return model if isinstance(model, dict) and model.get("name") else None
    return None


def _describe(model: dict | Any) -> str:
    get = model.get if isinstance(model, dict) else lambda k, d=None: getattr(model, k, d)
    text = str(get("name"))
    if get("path"):
        text += f" (model.path {get('path')})"
    elif text in {s.name for s in _random_tiny()}:
        text += " ({})".format(", ".join(f"{k} {get(k)}" for k in _TINY_KEYS))
    return text


def _random_tiny() -> list[ModelSpec]:
    return [s for s in MODELS.values() if s.tiny and not s.pretrained]


def _resolved(path: str | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else None


def check_adapter_base(adapter_dir: str | Path, model_config: Any) -> None:
    """An adapter is used on the model it was trained on, or refused with both named and what to
    do, in one line (before a model is loaded, a job queued or a folder claimed).

    In a run of this suite (final/ or a checkpoint beside its config.yaml): that run's model.
    Another registered model, another ``model.path`` (a merged model), another random-init tiny
    model (seed or size): refused. Out of its run (a copied folder): the record of its base it
    carries (``_check_record``), else what its adapter_config.json names (``_check_named_base``).
    """
    made_on = adapter_run_model(adapter_dir)
    mc = model_config
    if made_on is None:
        record = base_record.read_record(adapter_dir)
        if record is not None:
            _check_record(adapter_dir, record, mc)
        else:
            _check_named_base(adapter_dir, mc)
        return  # and the weights when loaded (_check_keys)
    if not _same_model(made_on, mc):
        raise UserError(
            f"adapter {adapter_dir} was trained on {_describe(made_on)}, not on "
            f"{_describe(mc)}: {_use(made_on)} (its run's config.yaml), or pick the adapter "
            "trained on this model"
        )


def _same_model(made_on: dict, mc: Any) -> bool:
    """Whether a run's (or a record's) ``model`` section names the model of ``mc``."""
    same = made_on.get("name") == mc.name and _resolved(made_on.get("path")) == _resolved(mc.path)
    if same and not mc.path and mc.name in {s.name for s in _random_tiny()}:
        same = all(made_on.get(k) == getattr(mc, k) for k in _TINY_KEYS)
    return same


def _use(made_on: dict) -> str:
    """The options that load the model a run or record names."""
    return f"use it with --model {made_on.get('name')}" + (
        f" --set model.path={made_on['path']}" if made_on.get("path") else ""
    )


def model_identity(mc: Any) -> dict:
    """The ``model`` of an adapter's base record (models/base_record.py): what names the base
    among our models."""
    model = {"name": mc.name, "path": _resolved(mc.path)}
    if not mc.path and mc.name in {s.name for s in _random_tiny()}:
        model.update({k: getattr(mc, k) for k in _TINY_KEYS})
    return model


def base_folder(mc: Any) -> Path | None:
    """The folder the model of ``mc`` loads from, where that is known without building or
    downloading anything (None: a tiny model not built yet, a hub model not in the cache)."""
    spec = get_spec(mc.name)
    if mc.path:
        folder: Path | None = Path(mc.path)
    elif spec.pretrained:
        folder = PRETRAINED_DIR / spec.name
    elif spec.tiny:
        size = TinySize(hidden=mc.tiny_hidden, layers=mc.tiny_layers, vocab=mc.tiny_vocab)
        folder = tiny_model_path(spec.family, mc.tiny_seed, size)
    else:
        folder = cached_hub_path(spec.hub_id)
    return folder if folder is not None and (folder / "config.json").exists() else None


def _check_record(adapter_dir: str | Path, record: dict, mc: Any) -> None:
    """An adapter out of its run, with the record of its base: that base's fingerprint against
    the model about to be loaded (by the names recorded where its folder is not here yet)."""
    made_on = record["model"]
    folder = base_folder(mc)
    if folder is not None:
        why = base_record.differs(record, base_record.fingerprint(folder))
        if why is None:
            return
        here = f"{_describe(mc)} ({folder})"
    elif _same_model(made_on, mc):
        return
    else:
        why, here = "another model", _describe(mc)
    known = made_on.get("name") in MODELS
    if known and not _same_model(made_on, mc):
        fix = f"{_use(made_on)}, or pick the adapter trained on this model"
    else:  # the same name: the model here is not the one it was (rebuilt, updated, replaced)
        fix = "load it on the base it was trained on, or pick the adapter trained on this model"
    raise UserError(
        f"adapter {adapter_dir} was trained on {_describe(made_on)} ({record.get('path')}; "
        f"{base_record.RECORD}), not on {here}: {why}; {fix}"
    )


_WARNED: set[tuple[str, str]] = set()


def _warn_once(adapter_dir: str | Path, mc: Any, text: str) -> None:
    key = (str(adapter_dir), mc.name)
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("adapter %s: %s", adapter_dir, text)


def _check_named_base(adapter_dir: str | Path, mc: Any) -> None:
    """An adapter without a record of its base (made before records, or elsewhere): the base its
    adapter_config.json names. A hub id (or a hub-cache folder) against the model's hub id; a
    local model folder here by its config.json (another family or size: refused; other weights:
    a warning); a folder not here by its name (a shipped tiny model's, a tiny build's family),
    else a warning that only its weights will be checked."""
    try:
        cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return
    named = str(cfg.get("base_model_name_or_path") or "") if isinstance(cfg, dict) else ""
    if hub_id_of(named):
        _check_hub_base(adapter_dir, hub_id_of(named) or "", mc)
    elif named and (Path(named) / "config.json").is_file():
        _check_local_base(adapter_dir, Path(named), mc)
    else:
        _check_absent_base(adapter_dir, named, mc)


def _check_local_base(adapter_dir: str | Path, named: Path, mc: Any) -> None:
    folder = base_folder(mc)
    if folder is None or folder.resolve() == named.resolve():
        return  # nothing here to compare it with (the weights are checked when loaded)
    theirs, ours = base_record.fingerprint(named), base_record.fingerprint(folder)
    why = base_record.config_difference(theirs["config"] or {}, ours["config"] or {})
    if theirs["config"] is not None and ours["config"] is not None and why:
        name = named.name if named.name in MODELS and named.name != mc.name else None
        use = f"use it with --model {name}, or " if name else ""
        raise UserError(
            f"adapter {adapter_dir} was made for {named} (adapter_config.json), not for "
            f"{_describe(mc)} ({folder}): {why}; {use}pick the adapter trained on this model"
        )
    if theirs["weights"] and ours["weights"] and theirs["weights"] != ours["weights"]:
        _warn_once(adapter_dir, mc, (
            f"made for {named} (adapter_config.json), which has the architecture of {mc.name} "
            f"({folder}) but other weights: its results are not those of an adapter of {mc.name} "
            "unless it is a copy in another dtype"
        ))  # fmt: skip


_TINY_BUILD = re.compile(r"(?P<family>[a-z0-9_]+)-[0-9a-f]{12}")


def _check_absent_base(adapter_dir: str | Path, named: str, mc: Any) -> None:
    """A base folder not on this machine: what its name tells (a registered model's name, the
    folder a shipped tiny model or a tiny build of one family has), else a warning."""
    name = Path(named).name if named else ""
    build = _TINY_BUILD.fullmatch(name)
    spec = get_spec(mc.name)
    if name in MODELS and name != mc.name and not mc.path:
        raise UserError(
            f"adapter {adapter_dir} was made for {named} (adapter_config.json; not on this "
            f"machine), by its name {name}, not for {_describe(mc)}: use it with --model {name}, "
            "or pick the adapter trained on this model"
        )
    if build and build["family"] in FAMILIES.values() and build["family"] != spec.family:
        family = {v: k for k, v in FAMILIES.items()}[build["family"]]
        raise UserError(
            f"adapter {adapter_dir} was made for {named} (adapter_config.json; not on this "
            f"machine), a tiny {family} build by its name, not for {_describe(mc)}: use it with "
            f"--model tiny-{family}, or pick the adapter trained on this model"
        )
    if name == mc.name or build:
        return  # the same model by its name (a tiny build: seed and size by its weights)
    _warn_once(adapter_dir, mc, (
        f"its base {named or '(none named)'} (adapter_config.json) is not on this machine and it "
        f"has no {base_record.RECORD}: it is checked against {mc.name} by its weights alone, "
        "when loaded"
    ))  # fmt: skip


def hub_id_of(base: str) -> str | None:
    """The hub id an adapter_config.json's ``base_model_name_or_path`` names: ``org/name``, or a
    hub-cache folder ``.../models--org--name/snapshots/<rev>``; None for another local folder."""
    match = re.search(r"models--([^/]+?)--([^/]+)", base)
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", base) and not Path(base).exists():
        return base
    return None


def _check_hub_base(adapter_dir: str | Path, base: str, mc: Any) -> None:
    """A hub adapter on a registered model (not on a ``model.path``: only its weights can tell):
    the hub id its adapter_config.json names against the model's (a tiny model has none)."""
    spec = get_spec(mc.name)
    if mc.path or (spec.hub_id and base.lower() == spec.hub_id.lower()):
        return
    names = [s.name for s in MODELS.values() if s.hub_id and s.hub_id.lower() == base.lower()]
    use = f": use it with --model {names[0]}" if names else ""
    raise UserError(
        f"adapter {adapter_dir} was made for {base} (adapter_config.json), not for "
        f"{mc.name} ({spec.hub_id or 'a tiny model built here'}){use}"
    )


def _mismatch(adapter_dir: str | Path, mc: Any, path: Path) -> str:
    base = "an unknown model"
    try:
        cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
        base = cfg.get("base_model_name_or_path") or base
    except (OSError, ValueError):
        pass
    return f"adapter {adapter_dir} (made for {base}) does not fit {_describe(mc)} ({path})"


def _check_keys(model: Any, adapter_dir: Path, mc: Any, path: Path) -> None:
    """Every weight of the adapter file has its place in the model, and every adapter weight of
    the model came from the file (PEFT drops the first with no word and warns of the second)."""
    from peft import get_peft_model_state_dict

    stored = _stored_keys(adapter_dir)
    if stored is None:
        return
    expected = set(get_peft_model_state_dict(model).keys())
    dropped, missing = sorted(stored - expected), sorted(expected - stored)
    if dropped or missing:
        parts = []
        if dropped:
            parts.append(f"{len(dropped)} of its {len(stored)} weights have no place in it "
                         f"(e.g. {dropped[0]})")  # fmt: skip
        if missing:
            parts.append(f"{len(missing)} adapter weights of the model are not in it "
                         f"(e.g. {missing[0]})")  # fmt: skip
        raise UserError(f"{_mismatch(adapter_dir, mc, path)}: {'; '.join(parts)}")


def _stored_keys(adapter_dir: Path) -> set[str] | None:
    file = adapter_dir / "adapter_model.safetensors"
    if not file.exists():
        return None  # a .bin adapter: PEFT's own warnings are all there is
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as fh:
        return set(fh.keys())


def zero3_enabled() -> bool:
    """Whether a DeepSpeed ZeRO-3 config is registered (the training arguments are alive)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def cast_adapters_to_model_dtype(model: Any) -> int:
    """Cast a PeftModel's floating adapter parameters to the base model's dtype (in place);
    returns how many were cast. For ZeRO-3, which needs one dtype across its parameters."""
    if not hasattr(model, "get_base_model"):
        return 0
    dtype = model.get_base_model().dtype
    cast = 0
    for name, param in model.named_parameters():
        if "lora_" in name and param.is_floating_point() and param.dtype != dtype:
            param.data = param.data.to(dtype)
            cast += 1
    return cast

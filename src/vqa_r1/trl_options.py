"""Every field of TRL's GRPOConfig / SFTConfig (TrainingArguments included) as a ``train.`` key.

``TrainConfig`` (config.py) keeps its own typed fields (our defaults, our help); any other key of
the ``train:`` section is one of TRL's, under TRL's name and meaning, stored beside them (the
section's ``trl`` mapping, written flat under ``train:``). This module knows TRL's fields:

* the names, read from TRL's and transformers' source with ``ast`` (no import: an unknown key is
  refused, with the closest name, before torch is imported, in a fraction of a second);
* the types, from the dataclasses themselves (``typing.get_type_hints``; imported only when a
  TRL key is set), each value converted by ``typed_config.coerce``;
* the fields the suite sets itself (``OWNED``), refused with the reason;
* the values TRL documents but checks only inside the trainer (``DOCUMENTED_CHOICES``), checked
  here so that ``train.loss_type=nonsense`` fails on the login node;
* the ranges of numeric fields that TRL does not check (domains.TRL): ``train.num_iterations=-1``
  fails here, not in the trainer.

The per-verb check (a GRPO field on an SFT run) is ``check_verb``; constructing the verb's TRL
config as the run would (its ``__post_init__`` checks) is train/runner.py's ``check_trl_config``,
which the launch builder (launch/build.py) runs before anything is queued.

evaluate and merge runs do not train: their ``train:`` section accepts the fields of either class
and is not used (a recipe's common part may hold a GRPO key for the grpo verb).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import enum
import functools
import importlib.util
import types
import typing
from pathlib import Path
from typing import Any

from vqa_r1.domains import TRL as TRL_DOMAINS
from vqa_r1.errors import UserError
from vqa_r1.typed_config import _Raw, coerce, unknown_key_text

# Fields the suite sets itself: refused as train keys, with the reason (a name that no TRL class
# has in this version is harmless here).
_CHECKPOINTS = (
    "checkpoint and log policy: the run directory's atomic checkpoints and the requeue rely on it"
)
_HARDWARE = "set from the hardware the job runs on"
_NETWORK = "no network on compute nodes; push or upload a finished run's final/ yourself"
OWNED: dict[str, str] = {
    "output_dir": "the run directory is --output-dir; checkpoints go to its checkpoints/",
    "resume_from_checkpoint": "resume is automatic: a run continues from its latest complete "
    "checkpoint",
    "overwrite_output_dir": "the run directory's own rule (claims.py, --overwrite) decides",
    "save_strategy": _CHECKPOINTS + " (checkpoints every train.save_steps)",
    "logging_strategy": _CHECKPOINTS + " (metrics.jsonl every train.logging_steps)",
    "logging_dir": _CHECKPOINTS,
    "save_only_model": "resume needs the optimizer, scheduler and RNG state in every checkpoint",
    "ignore_data_skip": "a resumed run skips the batches it has seen (requeued == uninterrupted)",
    "run_name": "the run directory's name",
    "data_seed": "equal to train.seed (the data order is part of the run's seed)",
    "use_cpu": _HARDWARE,
    "ddp_backend": _HARDWARE + " (gloo for several CPU processes)",
    "local_rank": "set by the launcher for each process",
    "dataloader_num_workers": "0: the rows hold decoded images in memory (no worker copies)",
    "disable_tqdm": "the progress display is the suite's (a quiet bar in a terminal, one line per logged step in a job log)",
    "eval_strategy": "training jobs get no eval dataset; evaluation is the evaluate verb",
    "vllm_server_base_url": "set by the job script that starts the vLLM server",
    "vllm_server_host": "set by the job script that starts the vLLM server",
    "vllm_server_port": "set by the job script that starts the vLLM server",
    "vllm_group_port": "set by the job script (a free port per job)",
    "max_length": "SFT: none, so no image token is cut from a prompt (images need the whole "
    "sequence)",
    "remove_unused_columns": "false: the collator needs the image column",
    "push_to_hub": _NETWORK,
    "log_completions_hub_repo": _NETWORK,
    "trackio_space_id": _NETWORK,
    "trackio_static_space_id": _NETWORK,
    "trackio_bucket_id": _NETWORK,
}


def refused_reason(key: str) -> str | None:
    """Why the suite sets ``key`` itself, or None when a recipe may set it."""
    if key.startswith("hub_"):
        return _NETWORK
    return OWNED.get(key)


# Plain ``str`` fields whose values TRL documents in the help but checks only in the trainer,
# after the queue wait (tests/test_trl_options.py checks that every value is in TRL's help).
DOCUMENTED_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "grpo": {
        "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
        "importance_sampling_level": ("token", "sequence"),
        "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    },
    "sft": {},
}

CLASSES = {"grpo": "GRPOConfig", "sft": "SFTConfig"}
_SOURCES = {  # class -> (its module's file, relative to the package, its base classes to follow)
    "GRPOConfig": ("trl", "trainer/grpo_config.py", "_BaseConfig"),
    "SFTConfig": ("trl", "trainer/sft_config.py", "_BaseConfig"),
    "_BaseConfig": ("trl", "trainer/base_config.py", "TrainingArguments"),
    "TrainingArguments": ("transformers", "training_args.py", None),
}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
    if spec is None or not spec.origin:
        raise UserError(f"{name} is not installed: the train section's TRL keys need it")
    return Path(spec.origin).parent


def _class_fields(package: str, relative: str, name: str) -> list[str]:
    tree = ast.parse((_package_dir(package) / relative).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            ]
    raise UserError(f"{package}/{relative}: class {name} not found (an unsupported version?)")


@functools.cache
def field_names(verb: str) -> frozenset[str]:
    """The init fields of the verb's TRL config (GRPOConfig for grpo, SFTConfig for sft), read
    from the source without importing it; for evaluate and merge, those of either."""
    if verb not in CLASSES:
        return field_names("grpo") | field_names("sft")
    names: set[str] = set()
    cls: str | None = CLASSES[verb]
    while cls is not None:
        package, relative, base = _SOURCES[cls]
        names.update(_class_fields(package, relative, cls))
        cls = base
    return frozenset(names)


def trl_class(verb: str) -> type:
    """GRPOConfig or SFTConfig (imports TRL: seconds)."""
    import trl

    return getattr(trl, CLASSES[verb])


@functools.cache
def _hints(verb: str) -> dict[str, Any]:
    return typing.get_type_hints(trl_class(verb))


def _fields(verb: str) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(trl_class(verb)) if f.init}


def owner(key: str) -> str:
    """``GRPOConfig``, ``SFTConfig`` or ``GRPOConfig and SFTConfig``: who declares ``key``."""
    return " and ".join(CLASSES[v] for v in ("grpo", "sft") if key in field_names(v))


def suggest(key: str, names: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, sorted(set(names)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def typed_value(key: str, value: Any, where: str, ours: typing.Iterable[str]) -> Any:
    """``value`` of the TRL field ``key`` as TRL's annotation types it, or a UserError naming
    ``where``: unknown (with the closest of ``ours`` and TRL's names), refused (why), ill-typed."""
    reason = refused_reason(key)
    if reason is not None:
        raise UserError(f"{where}: set by the suite, not by a recipe: {reason}")
    if key not in field_names("any"):
        raise UserError(
            f"{unknown_key_text(where)}: neither one of ours nor a field of TRL's GRPOConfig or "
            f"SFTConfig (`vqa-r1 config --verb grpo --trl-options` lists them)"
            f"{suggest(key, [*ours, *field_names('any')])}"
        )
    verb = "grpo" if key in field_names("grpo") else "sft"
    value = _typed(value, _hints(verb)[key], where)
    choices = _fields(verb)[key].metadata.get("choices")
    if choices is not None and value is not None and value not in list(choices):
        raise UserError(f"{where}: expected one of {', '.join(map(str, choices))}, got {value!r}")
    if key in TRL_DOMAINS:  # a range TRL's own checks leave open (domains.py)
        TRL_DOMAINS[key].check(value, where)
    return _plain(value)


def _typed(value: Any, annotation: Any, where: str) -> Any:
    """``typed_config.coerce``, with each member of a union tried in turn (TRL's ``dict | str``)
    and transformers' enums read as their string values."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and (
            value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null"))
        ):
            return None
        members = [a for a in args if a is not type(None)]
        enums = [a for a in members if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums and all(a is str for a in members if a not in enums):
            members = enums  # transformers' ``OptimizerNames | str``: it converts to the enum
        errors = []
        for member in members:
            try:
                return _typed(value, member, where)
            except UserError as err:
                errors.append(str(err))
        raise UserError(errors[0] if len(errors) == 1 else f"{where}: no type fits {value!r}")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        if str(value) not in values:
            raise UserError(
                f"{where}: expected one of {', '.join(map(str, values))}, got {value!r}"
            )
        return str(value)
    if annotation is Any or not (origin or isinstance(annotation, type)):
        return value
    if annotation in (dict, list):  # coerce reads a bare ``dict`` / ``list`` as its generic
        annotation = dict[str, Any] if annotation is dict else list[Any]
        origin = typing.get_origin(annotation)
    if origin is None and annotation not in (bool, int, float, str, list, dict):
        raise UserError(f"{where}: a {annotation.__name__} is not settable from a recipe")
    return coerce(value, annotation, where)


def _plain(value: Any) -> Any:
    """Plain YAML data: command-line strings as str, tuples as lists."""
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def check_verb(verb: str, extras: dict[str, Any]) -> None:
    """Every TRL key of a train section is a field of the verb's class (evaluate and merge:
    of either); the documented choices of plain-string fields (ours among them) are checked."""
    if verb not in CLASSES:
        return
    for key in extras:
        if key not in field_names(verb):
            other = "grpo" if verb == "sft" else "sft"
            raise UserError(
                f"train.{key} is a {CLASSES[other]} field, not one of {CLASSES[verb]}: {verb} "
                f"runs cannot use it (in an experiment or pipeline, set it for the {other} runs "
                f"only: --set {other}:train.{key}=...)"
            )


def check_choices(verb: str, values: dict[str, Any]) -> None:
    """The values TRL documents for plain-string fields (``DOCUMENTED_CHOICES``)."""
    for key, allowed in DOCUMENTED_CHOICES.get(verb, {}).items():
        if key in values and values[key] not in allowed:
            raise UserError(
                f"train.{key}: expected one of {', '.join(allowed)} (TRL's {CLASSES[verb]} "
                f"documents these), got {values[key]!r}"
            )


def listing(
    verb: str, ours: dict[str, tuple[str, str, str]]
) -> list[tuple[str, str, str, str, str]]:
    """(key, kind, type, default, help) of every train key of ``verb``: ``ours`` (key -> type,
    default, help), then TRL's fields: ``trl`` or ``refused`` (the help is the reason)."""
    from vqa_r1.typed_config import _show, type_name

    rows = [(k, "ours", *ours[k]) for k in ours]
    verbs = [verb] if verb in CLASSES else ["grpo", "sft"]
    seen = set(ours)
    for v in verbs:
        hints, fields = _hints(v), _fields(v)
        for name in sorted(fields):
            if name in seen:
                continue
            seen.add(name)
            f = fields[name]
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = "(required)"
            reason = refused_reason(name)
            text = " ".join(str(f.metadata.get("help", "")).split())
            if name in TRL_DOMAINS:
                text = f"{text} [{TRL_DOMAINS[name].text()}]"
            kind = "refused" if reason else "trl"
            shown = default.value if isinstance(default, enum.Enum) else default
            rows.append((name, kind, type_name(hints[name]), _show(shown), reason or text))
    return rows

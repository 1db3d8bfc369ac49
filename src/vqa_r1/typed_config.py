"""The one configuration mechanism: typed dataclasses, YAML files and `--set KEY=VALUE`.

Run configs, cluster profiles, judge jobs and statistics sets are all dataclasses whose fields
carry their help text in ``metadata["help"]`` (as TRL's configs do) and their choices as
``Literal`` types. This module turns YAML mappings and command-line overrides into such objects,
with the same rules everywhere:

* an unknown key or an ill-typed value is an error that names the key (a typo in a 12-hour job
  must fail on the login node, not be ignored);
* strings stay strings: YAML 1.1 would read ``off``/``yes`` as booleans and ``12:00:00`` as the
  integer 43200, so the loader here resolves only ``true``/``false`` and plain decimal numbers,
  and a ``--set`` value is typed by its field, never guessed from its text;
* ``--help`` and the docs are generated from the field metadata, so they cannot drift.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml

from vqa_r1.domains import Domain, at_least
from vqa_r1.errors import UserError

_NONE_WORDS = ("none", "null", "~")
_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    parse: Callable[[Any], Any] | None = None,
    minimum: float | None = None,
    domain: Domain | None = None,
) -> Any:
    """A dataclass field with its help text; ``parse`` converts a raw value before type checks
    (e.g. a SLURM time string into minutes); ``domain`` is the range of a number (domains.py;
    each item's for a list), ``minimum`` short for ``domain=at_least(minimum)``."""
    if minimum is not None:
        domain = at_least(minimum)
    metadata = {"help": help, "parse": parse, "domain": domain}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def further_keys(typer: Callable[[str, Any, str], Any], *, help: str) -> Any:
    """A mapping field holding a section's keys that are not its fields (TrainConfig's TRL keys):
    ``build`` sends every other key to ``typer(key, value, where)``, which returns the typed value
    or raises a UserError (unknown, refused, ill-typed); ``to_dict`` writes them flat beside the
    section's fields, so they read back the same way. Not a key itself: ``describe`` skips it."""
    return dataclasses.field(default_factory=dict, metadata={"help": help, "further_keys": typer})


def further_field(cls: type) -> dataclasses.Field | None:
    """The ``further_keys`` field of a dataclass, if it has one."""
    for f in dataclasses.fields(cls):
        if f.metadata.get("further_keys") is not None:
            return f
    return None


def unknown_key_text(path: str) -> str:
    """``unknown key 'train.x'``, after the file that holds it when ``path`` names one
    (``recipe.yaml: train.x``): the file is where to look, the key what to fix."""
    where, sep, key = path.rpartition(": ")
    return f"{where}: unknown key {key!r}" if sep else f"unknown key {path!r}"


def unknown_key(path: str, key: str, names: Any) -> UserError:
    """The error of an unknown key: its path, the closest valid name, and the valid names."""
    names = sorted(names)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return UserError(f"{unknown_key_text(path)}; valid keys here: {', '.join(names)}{hint}")


# ------------------------------------------------------------------------------------ YAML


class ConfigYamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: only true/false are booleans, no base-60 numbers; a key
    written twice in one mapping is an error (PyYAML keeps the last silently, so a recipe that
    set ``learning_rate`` twice ran with whichever came second)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<:`` keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                    seen.setdefault(key, key_node.start_mark.line)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} appears twice in one mapping (first on line {first + 1}); "
                        "keep one",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))
ConfigYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigYamlLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
ConfigYamlLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
ConfigYamlLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)


def load_yaml(path: str | Path, what: str = "") -> Any:
    """A YAML file read with the loader above; errors name the file (and ``what`` it is for)."""
    path = Path(path)
    label = f"{what} {path}".strip()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{label}: file not found") from None
    try:
        return yaml.load(text, Loader=ConfigYamlLoader)
    except yaml.MarkedYAMLError as err:
        where = f" at line {err.problem_mark.line + 1}" if err.problem_mark else ""
        problem = " ".join(str(err.problem or err.context or err).split())
        raise UserError(f"{label}: not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise UserError(f"{label}: not valid YAML ({err})") from None


def load_mapping(path: str | Path, what: str = "") -> dict:
    data = load_yaml(path, what)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a mapping of keys, got {type(data).__name__}")
    return data


# ------------------------------------------------------------------------------------ --set


def parse_overrides(items: list[str] | None, flag: str = "--set") -> dict:
    """``["train.learning_rate=1e-4", "lora.r=8"]`` -> nested dict of the raw strings.

    The values are not parsed here: each is typed by the field it lands on (``build``), so
    ``--set model.name=on`` stays the string "on" and ``--set lora.enabled=off`` is False.
    """
    nested: dict = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{flag} {item!r}: expected key=value, e.g. train.learning_rate=1e-4")
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"{flag} {item!r}: {part} is set both as a value and a section")
            node = child
        node[parts[-1]] = _Raw(raw)
    return nested


class _Raw(str):
    """A value typed on the command line: parsed by its field's type, never by YAML rules."""


# ------------------------------------------------------------------------------------ typing


def read_bool(value: Any, strict: bool = False) -> bool | None:
    """A boolean from config text or data files; None when ``value`` is not one.

    Accepts booleans, the integers 0 and 1, and true/false in any case; unless ``strict``, also
    yes/no, on/off and "1"/"0" (command-line and recipe spellings). The one place the project
    reads a boolean from text.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        true, false = (("true",), ("false",)) if strict else (_TRUE_WORDS, _FALSE_WORDS)
        if word in true or word in false:
            return word in true
    return None


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """``value`` as the declared type, or a UserError naming ``where``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], where)
    if origin is Literal:
        text = str(value) if isinstance(value, str) else str(value).lower()
        if text not in args:
            raise UserError(f"{where}: expected one of {', '.join(map(str, args))}, got {value!r}")
        return text  # a plain str, also for a command-line _Raw
    if origin in (list, tuple):
        if isinstance(value, _Raw):
            text = value.strip()
            if text.startswith("["):
                value = yaml.load(text, Loader=ConfigYamlLoader)
            else:
                value = [_Raw(v.strip()) for v in text.split(",") if v.strip()]
        if value is None:
            value = []
        if not isinstance(value, list | tuple):
            raise UserError(f"{where}: expected a list, got {value!r}")
        item_type = args[0] if args else Any
        items = [coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if isinstance(value, _Raw):
            value = yaml.load(value, Loader=ConfigYamlLoader)
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping, got {value!r}")
        return {str(k): v for k, v in value.items()}
    if annotation is bool:
        parsed = read_bool(value) if isinstance(value, bool | str) else None
        if parsed is not None:
            return parsed
        raise UserError(f"{where}: expected true or false, got {value!r}")
    if annotation in (int, float):
        if isinstance(value, bool):
            raise UserError(f"{where}: expected {annotation.__name__}, got {value!r}")
        try:
            if annotation is float:
                return float(value)
            if isinstance(value, float) and value.is_integer():
                return int(value)
            return int(str(value).strip(), 0)
        except (TypeError, ValueError):
            raise UserError(f"{where}: expected {annotation.__name__}, got {value!r}") from None
    if annotation is str:
        if isinstance(value, dict | list | bool) or value is None:
            raise UserError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls_or_obj: Any, data: dict, where: str = "") -> Any:
    """A new ``cls`` (or a copy of ``obj``) with ``data`` applied; nested dataclasses merge.

    ``where`` prefixes key names in errors (a file name, or a section such as ``train``).
    """
    obj = cls_or_obj
    if isinstance(cls_or_obj, type):
        required = {
            f.name
            for f in dataclasses.fields(cls_or_obj)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data or {}))
        if missing:
            raise UserError(f"{where or cls_or_obj.__name__}: missing key(s) {', '.join(missing)}")
        values = {}
    else:
        values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(obj)
    further = further_field(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f is not further}
    hints = _hints(cls)
    if not isinstance(data, dict):
        raise UserError(f"{where or cls.__name__}: expected a mapping, got {data!r}")
    for key, value in data.items():
        path = f"{where}.{key}" if where and not where.endswith(":") else f"{where} {key}".strip()
        if key not in fields and further is not None:
            typed = further.metadata["further_keys"](key, value, path)
            values[further.name] = {**values.get(further.name, {}), key: typed}
            continue
        if key not in fields:
            raise unknown_key(path, key, fields)
        annotation = hints[key]
        if dataclasses.is_dataclass(annotation):
            if not isinstance(value, dict):
                names = sorted(f.name for f in dataclasses.fields(annotation))
                raise UserError(f"{path}: expected a mapping of {', '.join(names)}")
            values[key] = build(values.get(key) or annotation, value, path)
            continue
        meta = fields[key].metadata
        if meta.get("parse") is not None:
            try:
                value = meta["parse"](value)
            except (TypeError, ValueError, UserError) as err:
                raise UserError(f"{path}: {err}") from None
        value = coerce(value, annotation, path)
        if meta.get("domain") is not None:
            meta["domain"].check(value, path)
        values[key] = value
    return cls(**values)


def to_dict(obj: Any) -> dict:
    """Plain data (tuples as lists) that ``build`` reads back to an equal object."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, Path):
            return str(value)
        return value

    def mapping(obj: Any) -> dict:
        out, extra = {}, {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("further_keys") is not None:
                extra = value
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                out[f.name] = mapping(value)
            else:
                out[f.name] = plain(copy.deepcopy(value))
        out.update({k: plain(copy.deepcopy(extra[k])) for k in sorted(extra)})
        return out

    return mapping(obj)


# ------------------------------------------------------------------------------------ help


def type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [type_name(a) for a in args if a is not type(None)]
        return " | ".join(inner) + (" | none" if type(None) in args else "")
    if origin is Literal:
        return "|".join(map(str, args))
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def describe(cls: type, prefix: str = "", values: Any = None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) for every field, nested sections as ``section.key``.

    ``values``: an instance of ``cls`` (e.g. a resolved recipe) whose values are shown as the
    defaults instead of the dataclass's own, for help that says what a command will use.
    """
    rows = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.metadata.get("further_keys") is not None:
            for name, value in sorted(
                (getattr(values, f.name) if values is not None else {}).items()
            ):
                rows.append(
                    (f"{prefix}{name}", type_name(type(value)), _show(value), f.metadata["help"])
                )
            continue
        key = f"{prefix}{f.name}"
        annotation = hints[f.name]
        if dataclasses.is_dataclass(annotation):
            nested = getattr(values, f.name) if values is not None else None
            rows.extend(describe(annotation, f"{key}.", nested))
            continue
        if values is not None:
            default = getattr(values, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        text = f.metadata.get("help", "")
        if f.metadata.get("domain") is not None:  # the range, as a refusal states it
            text = f"{text} [{f.metadata['domain'].text()}]"
        rows.append((key, type_name(annotation), _show(default), text))
    return rows


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "[]"
    return str(value)


def help_text(cls: type, prefix: str = "", values: Any = None) -> str:
    """The keys of ``cls`` for an argparse epilog: one line per key with type, default and help
    (the defaults taken from ``values`` when given, see ``describe``)."""
    lines = []
    for key, kind, default, text in describe(cls, prefix, values):
        lines.append(f"  {key} ({kind}, default {default})")
        if text:
            lines.append(f"      {text}")
    return "\n".join(lines)


def markdown_table(cls: type, prefix: str = "") -> str:
    """The same as a Markdown table, for generated docs."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, text in describe(cls, prefix):
        rows.append(f"| `{key}` | {kind.replace('|', '&#124;')} | `{default}` | {text} |")
    return "\n".join(rows)

"""Command-line flags generated from a typed_config dataclass, so an option is declared once.

A field declared with ``cli_option`` (``typed_config.option`` plus how it looks on the command
line) becomes ``--field-name`` with its type, default, choices (``Literal``) and help; a bool
becomes a switch that flips its default, a list a repeatable flag. ``values_from_args`` reads the
parsed namespace back into keyword arguments of the dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from vqa_r1.typed_config import option

_MISSING = dataclasses.MISSING


def cli_option(
    default: Any = _MISSING,
    *,
    help: str,
    flag: str | Literal[False] | None = None,
    metavar: str | None = None,
    group: str | None = None,
    default_factory: Callable[[], Any] | Any = _MISSING,
    minimum: float | None = None,
) -> Any:
    """``typed_config.option`` and its flag: ``flag`` overrides ``--field-name`` (False: none),
    ``group`` names the argparse group the flag is listed under (None: the parser itself)."""
    field = option(default, help=help, default_factory=default_factory, minimum=minimum)
    field.metadata = types.MappingProxyType(
        {**field.metadata, "flag": flag, "metavar": metavar, "group": group}
    )
    return field


def flag_of(field: dataclasses.Field) -> str | None:
    """The field's flag, or None when it has none."""
    flag = field.metadata.get("flag")
    if flag is False:
        return None
    return flag or "--" + field.name.replace("_", "-")


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return field.default


def _plain(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner[0]
    return annotation


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, group: str | None = None
) -> None:
    """Add the flags of the fields of ``cls`` in ``group`` (None: the ungrouped ones) to ``parser``."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        flag = flag_of(field)
        if flag is None or field.metadata.get("group") != group:
            continue
        annotation = _plain(hints[field.name])
        origin = typing.get_origin(annotation)
        text = field.metadata["help"]
        kwargs: dict[str, Any] = {"dest": field.name}
        if field.default is _MISSING and field.default_factory is _MISSING:
            kwargs["required"] = True
        else:
            default = kwargs["default"] = _default(field)
            if isinstance(default, int | float | str) and not isinstance(default, bool):
                if "default" not in text:
                    text = f"{text} (default {default})"
        if annotation is bool:
            kwargs["action"] = "store_false" if kwargs.get("default") else "store_true"
        elif origin is list:
            kwargs["action"] = "append"
        elif origin is Literal:
            kwargs["choices"] = typing.get_args(annotation)
        elif annotation in (int, float):
            kwargs["type"] = annotation
        if field.metadata.get("metavar"):
            kwargs["metavar"] = field.metadata["metavar"]
        parser.add_argument(flag, help=text.replace("%", "%%"), **kwargs)


def values_from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """Keyword arguments of ``cls`` from a namespace; fields without a flag there keep defaults."""
    values = {}
    for field in dataclasses.fields(cls):
        if flag_of(field) and hasattr(args, field.name):
            values[field.name] = getattr(args, field.name)
        elif field.default is not _MISSING or field.default_factory is not _MISSING:
            values[field.name] = _default(field)
    return values

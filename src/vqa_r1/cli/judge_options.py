"""The judge's flags, for `vqa-r1 judge run` and the launcher's `judge`, generated from the fields
of ``JudgeJobConfig`` so that an option is declared once (``judge.options.cli_option``).

A field becomes ``--field-name`` (or its ``flag``) with its type, default, choices (``Literal``)
and help; a bool becomes a switch that flips its default, a list a repeatable flag.
``values_from_args`` reads the parsed namespace back into keyword arguments of the dataclass, and
``config_from_args`` hands them to the library (``judge.job.config_from_values``), which validates.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal

from vqa_r1.judge.job import VLLM_GROUP, JudgeJobConfig, config_from_values
from vqa_r1.judge.options import default_of, flag_of

_MISSING = dataclasses.MISSING


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
            default = kwargs["default"] = default_of(field)
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
            values[field.name] = default_of(field)
    return values


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vqa-r1 judge run`` (also part of the launcher's ``judge``)."""
    add_options(parser, JudgeJobConfig)


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """``judge run``'s options plus an optional vLLM judge server started inside the job."""
    add_run_arguments(parser)
    add_options(parser.add_argument_group(VLLM_GROUP), JudgeJobConfig, VLLM_GROUP)


def config_from_args(args: argparse.Namespace) -> JudgeJobConfig:
    """The validated config of the parsed flags (on the login node, where mistakes are cheap)."""
    return config_from_values(values_from_args(args, JudgeJobConfig))

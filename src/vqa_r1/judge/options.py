"""How a typed_config field looks on the command line, declared once beside the field.

A field declared with ``cli_option`` (``typed_config.option`` plus its flag, metavar and help
group) carries that in its metadata only: the library reads the flag's name for its messages
(``flag_of``); the parser itself is built from the metadata in ``vqa_r1.cli.judge_options``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, Literal

from vqa_r1.domains import Domain
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
    domain: Domain | None = None,
) -> Any:
    """``typed_config.option`` and its flag: ``flag`` overrides ``--field-name`` (False: none),
    ``group`` names the help group the flag is listed under (None: the command's own)."""
    field = option(
        default, help=help, default_factory=default_factory, minimum=minimum, domain=domain
    )
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


def default_of(field: dataclasses.Field) -> Any:
    """The field's default value (a fresh one from its factory); MISSING when it has none."""
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return field.default

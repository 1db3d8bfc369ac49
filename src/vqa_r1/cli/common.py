"""Arguments that several verbs share, declared once so that they read and parse alike."""

from __future__ import annotations

import argparse


def add_set_argument(
    parser: argparse.ArgumentParser,
    help: str = "override a recipe key, e.g. --set train.learning_rate=1e-4 (repeatable)",
    metavar: str = "KEY=VALUE",
) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``; parsed by config.parse_overrides."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar=metavar, help=help
    )

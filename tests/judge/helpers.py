"""Running the CLI in-process, with sys.argv restored afterwards."""

from __future__ import annotations

import sys

from vqa_r1.cli import main


def cli(*args: str) -> int:
    saved = list(sys.argv)
    try:
        return main([str(a) for a in args])
    finally:
        sys.argv = saved

"""Where generated artifacts are cached (tiny models, synthetic datasets): one root for all; and
where the data files the package reads live, in a checkout or an installed wheel."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$VQA_R1_CACHE, else $XDG_CACHE_HOME/vqa_r1 (~/.cache/vqa_r1)."""
    base = os.environ.get("VQA_R1_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "vqa_r1"
    )
    return Path(base)


PACKAGE = Path(__file__).resolve().parent


def checkout() -> Path | None:
    """The repository this package runs from (``src/vqa_r1`` of it, or of a copy of its folders),
    or None for an installed package or a job's code snapshot."""
    return PACKAGE.parents[1] if PACKAGE.parent.name == "src" else None


def shipped(in_checkout: str, in_package: str) -> Path:
    """A data folder kept in the repository at ``in_checkout`` (cluster profiles in
    slurm/clusters, judge prompts in alignment_judge/prompts) and copied into the wheel at
    ``vqa_r1/<in_package>`` (setup.py): the checkout's when running from one, else the copy, so
    an installed wheel needs no checkout."""
    root = checkout()
    if root is not None and (root / in_checkout).is_dir():
        return root / in_checkout
    return PACKAGE / in_package

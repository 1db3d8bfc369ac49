"""Where generated artifacts are cached (tiny models, synthetic datasets): one root for all."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$VQA_R1_CACHE, else $XDG_CACHE_HOME/vqa_r1 (~/.cache/vqa_r1)."""
    base = os.environ.get("VQA_R1_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "vqa_r1"
    )
    return Path(base)

"""On-disk cache of judge verdicts: one small JSON file per (judge, prompt, inputs).

One file per entry, written to a temporary name and renamed, means a run killed at any instant
leaves either a complete entry or none: never a truncated file that a rerun would trust. Only valid
verdicts are stored; failures are retried by the next run rather than remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.io import atomic_write_text

CACHE_ENV = "VQA_R1_JUDGE_CACHE"


def default_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vqa-r1" / "judge"


def cache_key(
    judge_model: str,
    prompt_id: str,
    prompt_digest: str,
    temperature: float | None,
    inputs: dict[str, str],
) -> str:
    """Stable digest of everything that can change a verdict (and nothing that cannot, e.g. the
    base URL: the same model behind another endpoint gives the same verdicts)."""
    payload = json.dumps(
        {
            "judge_model": judge_model,
            "prompt": prompt_id,
            "prompt_digest": prompt_digest,
            "temperature": temperature,
            "inputs": inputs,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass
class VerdictCache:
    root: Path

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as handle:
                entry = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
            return None  # unreadable entries are re-judged, never trusted
        return entry if isinstance(entry, dict) and "verdict" in entry else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        # no fsync: it cost ~5 ms per verdict on the event loop, and after an OS crash a torn entry
        # fails to parse and is simply judged again (``get`` never trusts what it cannot read)
        text = json.dumps(entry, ensure_ascii=False, sort_keys=True)
        atomic_write_text(self._path(key), text, fsync=False)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

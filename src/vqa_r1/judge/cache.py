"""On-disk cache of judge verdicts: one small JSON file per (judge, prompt, inputs).

One file per entry, written to a temporary name and renamed, means a run killed at any instant
leaves either a complete entry or none: never a truncated file that a rerun would trust. Only valid
verdicts are stored; failures are retried by the next run rather than remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        except (OSError, json.JSONDecodeError):
            return None  # unreadable entries are re-judged, never trusted
        return entry if isinstance(entry, dict) and "verdict" in entry else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        atomic_write_text(path, json.dumps(entry, ensure_ascii=False, sort_keys=True))

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and ``os.replace`` it into place.

    The rename makes a killed process harmless. There is deliberately no fsync: it cost ~5 ms per
    verdict on the event loop, and after an OS crash a torn entry fails to parse and is simply
    judged again (``VerdictCache.get`` never trusts what it cannot read).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

"""The run directory: everything a run leaves behind, in one place that a requeued job reopens.

Also how to find what a run left: its latest complete checkpoint and its adapter. Training writes
checkpoints atomically (train/trainer_hooks.py); readers here skip any without the marker.

RUN_DIR/config.yaml          resolved configuration (what was submitted)
RUN_DIR/checkpoints/         checkpoint-N/ with adapter, optimizer, scheduler, RNG, trainer state
RUN_DIR/metrics.jsonl        one line per logging step (trimmed to the checkpoint on resume)
RUN_DIR/completions.jsonl    sampled prompts, completions and rewards
RUN_DIR/final/               the final adapter and processor
RUN_DIR/status.json          state, steps, requeues, timings

In a job with several processes the run directory is the run's, not a process's: status.json,
metrics.jsonl, completions.jsonl and final/ are written by rank 0 alone (vqa_r1.ranks); a
checkpoint by all ranks together (train/trainer_hooks.py).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1 import ranks
from vqa_r1.clock import now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json, atomic_write_text, read_jsonl

log = logging.getLogger(__name__)
COMPLETE_MARKER = "CHECKPOINT_COMPLETE"
_CKPT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    match = _CKPT.match(path.name)
    return int(match.group(1)) if match else None


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).exists() and (path / "trainer_state.json").exists()


def latest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest complete checkpoint; incomplete newer ones are reported and skipped."""
    root = Path(checkpoint_dir)
    if not root.exists():
        return None
    found = sorted(
        (p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None),
        key=lambda p: checkpoint_step(p),
        reverse=True,
    )
    for path in found:
        if is_complete(path):
            return path
        log.warning("skipping incomplete checkpoint %s (no %s marker)", path, COMPLETE_MARKER)
    return None


def resolve_adapter(path: str | Path | None) -> Path | None:
    """An adapter folder, or a run directory (its final/ adapter, else its latest checkpoint)."""
    if not path:
        return None
    path = Path(path)
    if (path / "adapter_config.json").exists():
        return path
    if (path / "final" / "adapter_config.json").exists():
        return path / "final"
    latest = latest_checkpoint(path / "checkpoints")
    if latest is not None:
        return latest
    raise UserError(
        f"{path}: no LoRA adapter (adapter_config.json), final/ or complete checkpoint here"
    )


@dataclass
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def completions(self) -> Path:
        return self.root / "completions.jsonl"

    @property
    def final(self) -> Path:
        return self.root / "final"

    @property
    def status_file(self) -> Path:
        return self.root / "status.json"

    def create(self) -> RunDir:
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoints.mkdir(exist_ok=True)
        return self

    def status(self) -> dict:
        if self.status_file.exists():
            return json.loads(self.status_file.read_text())
        return {}

    def update_status(self, **fields: Any) -> None:
        """Merge ``fields`` into status.json. Rank 0 alone writes it (``written_by_rank`` says
        so); on another rank this is a bug in the caller: logged, and nothing is written."""
        if not ranks.is_main():
            log.warning(
                "rank %d: status.json is written by rank 0 only; not writing %s",
                ranks.rank(),
                sorted(fields),
            )
            return
        status = self.status()
        status.update(fields, updated=now_iso(), written_by_rank=ranks.rank())
        atomic_write_json(self.status_file, status)

    def trim_metrics(self, max_step: int) -> None:
        """Drop metric lines logged after ``max_step``: they are replayed after a resume."""
        if not self.metrics.exists():
            return
        kept = [
            r
            for r in read_jsonl(self.metrics, partial_last_line=True)
            if r.get("step", 0) <= max_step
        ]
        atomic_write_text(self.metrics, "".join(f"{json.dumps(r)}\n" for r in kept))

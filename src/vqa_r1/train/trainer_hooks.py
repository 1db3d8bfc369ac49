"""Atomic checkpoints and finding the latest complete one.

The Hugging Face Trainer writes ``checkpoint-N`` file by file into its final place, so a job killed
mid-save (SIGKILL at the time limit, node failure) leaves a folder that looks like a checkpoint but
is not. Here a checkpoint is written into a staging folder, marked complete, then renamed into place;
on resume, a folder without the marker is skipped with a warning.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

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


class AtomicCheckpointMixin:
    """Mix into a transformers Trainer subclass: ``_save_checkpoint`` becomes stage-mark-rename."""

    def _save_checkpoint(self, model, trial):  # noqa: D401 - Trainer hook
        final_root = self.args.output_dir
        staging_root = os.path.join(final_root, ".staging")
        shutil.rmtree(staging_root, ignore_errors=True)
        os.makedirs(staging_root, exist_ok=True)
        self.args.output_dir = staging_root
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir = final_root
        name = f"checkpoint-{self.state.global_step}"
        staged = Path(staging_root) / name
        if self.args.should_save:
            (staged / COMPLETE_MARKER).write_text(str(self.state.global_step))
            fsync_tree(staged)
            target = Path(final_root) / name
            if target.exists():
                shutil.rmtree(target)
            os.replace(staged, target)
        shutil.rmtree(staging_root, ignore_errors=True)


def fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())

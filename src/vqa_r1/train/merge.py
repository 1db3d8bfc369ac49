"""Merge a LoRA adapter into its base model: the bridge between SFT and a fresh GRPO adapter.

GRPO after SFT can either continue the SFT adapter (`init_adapter`) or start a new adapter on a
model that already contains the SFT update. The second needs a plain model folder, which this
writes: PEFT's ``merge_and_unload`` folds the low-rank update into the weights, and the merged model
is saved with its processor so that ``model.path`` loads it like any other model. The folder is
written atomically, so a job killed mid-save leaves no half-written model for the next step.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from vqa_r1 import claims
from vqa_r1.config import RunConfig, run_settings
from vqa_r1.io import atomic_dir
from vqa_r1.models.device import resolve_device
from vqa_r1.models.loading import load_model
from vqa_r1.run_dir import RunDir, resolve_adapter

log = logging.getLogger(__name__)

MERGED = "merged"


def merged_dir(run_dir: str | Path) -> Path:
    """Where a merge run puts the merged model (later steps point ``model.path`` here)."""
    return Path(run_dir) / MERGED


def merge_adapter(config: RunConfig, adapter: str | Path, run_dir: str | Path) -> dict:
    """Load the base of ``config.model`` with ``adapter`` (a folder or a run directory), merge, save.

    Returns the run's status (also written to ``run_dir/status.json``).
    """

    with claims.writing(run_dir, "merge", run_settings(config, adapter)) as state:
        if state == claims.COMPLETE:  # merged/ as it is: not merged again
            log.info("%s: a complete merge with these settings: nothing to do", run_dir)
            return {**RunDir(Path(run_dir)).status(), "already_complete": True}
        return _merge(config, adapter, run_dir)


def _merge(config: RunConfig, adapter: str | Path, run_dir: str | Path) -> dict:
    rd = RunDir(Path(run_dir))
    rd.root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    rd.update_status(state="RUNNING", verb="merge", starts=rd.status().get("starts", 0) + 1)
    adapter_path = resolve_adapter(adapter)
    loaded = load_model(
        config, adapter_path=adapter_path, device=resolve_device(config.model.device)
    )
    model = loaded.model.merge_and_unload()
    target = merged_dir(rd.root)
    claims.remove_temporaries(target)  # a killed merge's .merged.tmp-* (we hold the lock)
    with atomic_dir(target) as tmp:
        model.save_pretrained(str(tmp))
        loaded.processor.save_pretrained(str(tmp))
    log.info("merged %s into %s -> %s", adapter_path, loaded.path, target)
    rd.update_status(
        state="COMPLETED",
        merged=str(target),
        adapter=str(adapter_path),
        base=str(loaded.path),
        device=loaded.device,
        seconds=round(time.time() - started, 1),
    )
    claims.mark_complete(rd.root, outputs=(MERGED,))  # merged/ is whole: "complete"
    return rd.status()

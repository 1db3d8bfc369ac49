"""The run directory: everything a run leaves behind, in one place that a requeued job reopens.

RUN_DIR/config.yaml          resolved configuration (what was submitted)
RUN_DIR/checkpoints/         checkpoint-N/ with adapter, optimizer, scheduler, RNG, trainer state
RUN_DIR/metrics.jsonl        one line per logging step (trimmed to the checkpoint on resume)
RUN_DIR/completions.jsonl    sampled prompts, completions and rewards
RUN_DIR/final/               the final adapter and processor
RUN_DIR/status.json          state, steps, requeues, timings
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1.io import atomic_write_json


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
        status = self.status()
        status.update(fields, updated=time.strftime("%Y-%m-%dT%H:%M:%S"))
        atomic_write_json(self.status_file, status)

    def trim_metrics(self, max_step: int) -> None:
        """Drop metric lines logged after ``max_step``: they are replayed after a resume."""
        if not self.metrics.exists():
            return
        kept = [
            line
            for line in self.metrics.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= max_step
        ]
        from vqa_r1.io import atomic_write_text

        atomic_write_text(self.metrics, "".join(f"{line}\n" for line in kept))

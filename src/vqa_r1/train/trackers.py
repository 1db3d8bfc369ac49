"""Experiment trackers across requeues and resumes: one run, each step once.

Why: transformers' TensorBoard callback names its folder by the time and host of each start
(``runs/<date>_<host>``), so every requeue of a 12-hour job began a second TensorBoard run, and the
steps logged between the last checkpoint and the kill were logged again by the resumed run. Here
every start writes into the run's own ``tensorboard/`` folder, and a resumed start marks the
steps after its checkpoint as replaced (TensorBoard's purge step: readers drop the earlier
events from that step on), so the run reads as one stream with each step once. Weights & Biases
keeps one run through the id kept in status.json (``keep_tracker_run_id`` in train/runner.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"


def continue_tensorboard(trainer: Any, run_root: Path, resumed_step: int) -> Path | None:
    """Swap the trainer's TensorBoard callback (present when ``report_to`` names tensorboard)
    for one writing ``RUN/tensorboard`` from ``resumed_step`` on; the folder, or None."""
    from transformers.integrations import TensorBoardCallback

    found = [c for c in trainer.callback_handler.callbacks if isinstance(c, TensorBoardCallback)]
    if not found:
        return None

    class ContinuedTensorBoard(TensorBoardCallback):
        """transformers' callback, with the run's folder and the purge step of a resume."""

        def __init__(self, folder: Path, purge_step: int) -> None:
            super().__init__()
            self.logging_dir = str(folder)
            self.purge_step = purge_step

        def _init_summary_writer(self, args: Any) -> None:
            self.tb_writer = self._SummaryWriter(
                log_dir=self.logging_dir, purge_step=self.purge_step
            )

    folder = Path(run_root) / TENSORBOARD_DIR
    for callback in found:
        trainer.remove_callback(callback)
    trainer.add_callback(ContinuedTensorBoard(folder, resumed_step + 1))
    return folder

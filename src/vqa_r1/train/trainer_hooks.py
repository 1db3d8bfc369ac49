"""The places where we override private Trainer methods, and why no public hook does.

* ``AtomicCheckpointMixin`` (``Trainer._save_checkpoint``): the Trainer writes ``checkpoint-N`` file
  by file into its final place, so a job killed mid-save (SIGKILL at the time limit, node failure)
  leaves a folder that looks like a checkpoint but is not. Here a checkpoint is written into a
  staging folder, marked complete, then renamed into place; resume skips a folder without the
  marker (vqa_r1.run_dir.latest_checkpoint). With several processes, barriers around the save
  keep rank 0's staging and rename from racing the other ranks' writes. Callbacks (``on_save``)
  run only after the files are in place, too late to redirect them.
  A trainer given ``adapter_base`` (a record of the base model, models/base_record.py) writes it
  into each checkpoint holding an adapter before the checkpoint is marked complete.
* ``EpochOrderSamplerMixin`` (``GRPOTrainer._get_train_sampler``): see EpochOrderSampler. The
  sampler is built inside the trainer with no argument or callback to replace it.
* ``GenerationBufferMixin`` (``GRPOTrainer._save_checkpoint`` and
  ``_load_optimizer_and_scheduler``, the pair TRL itself uses for its entropy controller's
  state): see the class. The buffer is trainer state that no checkpoint hook saves.

tests/test_trainer_hooks.py fails loudly when the upstream signatures or behaviour these rely on
change.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from vqa_r1 import ranks
from vqa_r1.io import follow_umask
from vqa_r1.models.base_record import write_record
from vqa_r1.run_dir import COMPLETE_MARKER
from vqa_r1.train.deepspeed_import import import_only_when_used

log = logging.getLogger(__name__)


class AtomicCheckpointMixin:
    """Mix into a transformers Trainer subclass: ``_save_checkpoint`` becomes stage-mark-rename.

    In a job with several processes every rank writes into the checkpoint (transformers saves
    ``rng_state_{process_index}.pth`` on each rank, Trainer._save_rng_state; DeepSpeed writes
    per-rank shards), but ``Trainer._save_checkpoint`` has no barrier of its own. So:

    1. rank 0 empties the staging folder, then a barrier: no rank writes before it is ready;
    2. every rank saves into it (the Trainer's own code);
    3. a barrier: every rank's files are written;
    4. rank 0 marks the checkpoint complete, fsyncs it and renames it into place;
    5. a barrier: no rank goes on (or exits, or is requeued) before the checkpoint is in place.

    The staging and final folders must be on a filesystem all ranks see (the run directory).
    Every Trainer of the suite mixes this in, so it is also where DeepSpeed stops being imported
    by runs that do not use it (train/deepspeed_import.py).
    """

    def __init__(self, *args, **kwargs):
        import_only_when_used()
        super().__init__(*args, **kwargs)

    def _save_checkpoint(self, model, trial):  # noqa: D401 - Trainer hook
        final_root = self.args.output_dir
        staging_root = os.path.join(final_root, ".staging")
        main = ranks.is_main()
        if main:
            shutil.rmtree(staging_root, ignore_errors=True)
            os.makedirs(staging_root, exist_ok=True)
        ranks.barrier()
        self.args.output_dir = staging_root
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir = final_root
        ranks.barrier()
        if main:
            name = f"checkpoint-{self.state.global_step}"
            staged = Path(staging_root) / name
            record = getattr(self, "adapter_base", None)  # set by the run (models/base_record.py)
            if record is not None and (staged / "adapter_config.json").exists():
                write_record(staged, record)  # what its adapter was trained on, once copied out
            follow_umask(staged)  # safetensors writes the adapter 0600
            (staged / COMPLETE_MARKER).write_text(str(self.state.global_step))
            fsync_tree(staged)
            target = Path(final_root) / name
            if target.exists():
                shutil.rmtree(target)
            os.replace(staged, target)
            fsync_dir(Path(final_root))
            shutil.rmtree(staging_root, ignore_errors=True)
        ranks.barrier()


def fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(root)


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a rename into it) durable; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class EpochOrderSampler:
    """TRL's GRPO sampler with each epoch's order a function of the seed and the epoch alone.

    TRL's RepeatSampler seeds its generator once and draws a new permutation at every pass, so the
    order of epoch k depends on how many passes this process has made. A job resumed in epoch
    k >= 1 (a requeue after the first epoch) made none and replayed epoch 0's order: the metrics
    of a requeued run left those of an uninterrupted run from the first resumed step of epoch 2 on
    (found by tests/slurm/test_requeue_resume.py). Re-seeding and drawing the k earlier
    permutations before each pass gives the uninterrupted run's order, resumed or not.
    """

    def __init__(self, inner: Any, epoch: Any):
        self.inner, self.epoch = inner, epoch

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        import torch

        generator = getattr(self.inner, "generator", None)
        if getattr(self.inner, "shuffle", False) and generator is not None:
            if self.inner.seed is not None:
                generator.manual_seed(self.inner.seed)
                for _ in range(self.epoch()):
                    torch.randperm(self.inner.num_samples, generator=generator)
        return iter(self.inner)


class EpochOrderSamplerMixin:
    """Mix into GRPOTrainer: its train sampler becomes an EpochOrderSampler."""

    def _get_train_sampler(self, dataset=None):
        inner = super()._get_train_sampler(dataset)
        return EpochOrderSampler(inner, lambda: int((self.state.epoch or 0) + 1e-6))


GENERATION_BUFFER = "generation_buffer_rank{rank}.pt"


class GenerationBufferMixin:
    """Mix into GRPOTrainer: the buffered completions and the micro-step count go into each
    checkpoint, one file per rank, and come back on resume.

    GRPOTrainer generates once per ``steps_per_generation * num_iterations`` micro-steps and
    trains on the buffered completions in between (``_buffered_inputs``, counted by ``_step``).
    Neither is saved with a checkpoint: a run resumed inside such a block counted from 0 and
    generated afresh where the uninterrupted run reused its buffer, so with ``num_iterations > 1``
    a requeued run left the uninterrupted one from the first resumed step on (the requeue
    equality test of ``num_iterations=2`` found it). The file holds the tensors of one generation
    batch (prompts, completions, log-probabilities, pixel values): small next to the optimizer.
    At the end of a block (the default: one generation per optimizer step) the next step
    generates afresh, so only the count is saved: writing the buffer there cost every save
    its tensors for nothing.
    """

    def _save_checkpoint(self, model, trial):  # noqa: D401 - Trainer hook
        super()._save_checkpoint(model, trial)
        import torch

        # under AtomicCheckpointMixin, output_dir is the staging folder during this call
        folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        generate_every = self.args.steps_per_generation * self.num_iterations
        inside_block = self._step % generate_every != 0
        state = {"step": self._step, "buffer": self._buffered_inputs if inside_block else None}
        torch.save(state, folder / GENERATION_BUFFER.format(rank=self.args.process_index))

    def _load_optimizer_and_scheduler(self, checkpoint):  # noqa: D401 - Trainer hook
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / GENERATION_BUFFER.format(rank=self.args.process_index)
        if not path.exists():
            return  # a checkpoint written before this file existed: TRL's behaviour
        import torch

        state = torch.load(path, map_location=self.accelerator.device, weights_only=False)
        self._step, self._buffered_inputs = state["step"], state["buffer"]

"""The job as submitit runs it: a picklable callable with a ``checkpoint()`` method.

Everything the job needs is in the run directory written on the login node (the resolved config),
so the pickled task holds only paths and names: no secrets, no model objects. Calling the task
again after a requeue resumes from the run directory's latest complete checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class Task:
    verb: str  # sft | grpo | evaluate | judge | merge | pretrain
    run_dir: str
    adapter: str | None = None  # evaluate/merge: adapter or run directory to evaluate/merge
    extra: dict = field(default_factory=dict)

    def __call__(self) -> dict:
        from vqa_r1.logging_setup import setup_logging

        setup_logging()
        from vqa_r1.launch.distributed import export_torch_distributed

        export_torch_distributed()
        run_dir = Path(self.run_dir)
        log.info("task %s in %s (restart count %s)", self.verb, run_dir, _restart_count())
        if self.verb == "judge":
            from vqa_r1.judge.job import run_job

            return {"exit_code": run_job(self.extra["config"])}
        if self.verb == "pretrain":  # resumes from run_dir/work/checkpoints after a requeue
            from vqa_r1.train.pretrain import PretrainConfig, pretrain

            return pretrain(
                PretrainConfig(**self.extra["config"]), run_dir, self.extra.get("stop_after")
            )
        from vqa_r1.config import read_config

        config = read_config(run_dir / "config.yaml")
        _private_map_cache()  # issue 3 (sweeps, chains): concurrent jobs share dataset folders
        if self.verb == "evaluate":
            from vqa_r1.eval.evaluate import evaluate

            return evaluate(config, run_dir, adapter=self.adapter, progress=False)
        if self.verb == "merge":  # merge verb (pipeline sft -> merge -> grpo; train/merge.py)
            from vqa_r1.train.merge import merge_adapter

            return merge_adapter(config, self.adapter, run_dir)
        from vqa_r1.launch.requeue import install_graceful_requeue
        from vqa_r1.train.runner import train

        controller = install_graceful_requeue(self.extra.get("signal_delay_s"))
        return train(config, run_dir, requeue=controller)

    def checkpoint(self, *args, **kwargs):
        """Requeue the same task: it resumes from the latest complete checkpoint of its run dir.

        Returns None (no requeue; submitit marks the job failed) once ``max_requeues`` is reached,
        and says so in the run's status.json and log.
        """
        import submitit

        restarts = _restart_count()
        limit = self.extra.get("max_requeues")
        if limit is not None and restarts >= limit:
            message = f"not requeueing: the maximum of {limit} requeues was reached"
            log.error(message)
            _mark(self.run_dir, state="MAX_REQUEUES_REACHED", requeues=restarts, message=message)
            return None
        log.info("requeueing %s for %s (requeue %d)", self.verb, self.run_dir, restarts + 1)
        _mark(self.run_dir, state="REQUEUED", requeues=restarts + 1)
        return submitit.helpers.DelayedSubmission(
            Task(self.verb, self.run_dir, self.adapter, self.extra)
        )


def _mark(run_dir: str, **fields) -> None:
    from vqa_r1.train.run_dir import RunDir

    try:
        RunDir(Path(run_dir)).update_status(**fields)
    except OSError as err:  # status is informative; never block a requeue on it
        log.warning("could not update status.json: %s", err)


def _private_map_cache() -> None:
    """Keep `datasets.map` caches out of the shared dataset folder (issue 3, sweeps).

    Sweep elements start at the same moment on the same dataset; `map` caches its result next to
    the dataset under a name derived from the inputs, so two jobs write and rename the same file
    and one fails (seen on the local SLURM). A per-process temporary cache avoids the race; the
    rows are cheap to rebuild.
    """
    import datasets

    datasets.disable_caching()


def _restart_count() -> int:
    import os

    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

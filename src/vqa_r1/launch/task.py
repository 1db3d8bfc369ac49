"""The jobs as submitit runs them: one picklable callable per verb, each with ``checkpoint()``.

Everything a job needs is in its run directory, written on the login node (the resolved config),
so a pickled task holds only paths, names and small typed configs: no secrets, no model objects.
Calling a task again after a requeue resumes from its run directory's latest complete checkpoint.
Training code knows nothing of SLURM: TrainTask hands the requeue controller to the trainer as a
callback, and requeues when training stopped early at the controller's request. In a job with
several tasks (ranks) every task runs the same callable; rank 0 alone requeues and writes
status.json (submitit calls ``checkpoint()`` on rank 0 only).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import submitit

from vqa_r1 import ranks
from vqa_r1.config import RunConfig, read_config
from vqa_r1.errors import UserError
from vqa_r1.eval.evaluate import evaluate
from vqa_r1.judge.job import JudgeJobConfig, run_job
from vqa_r1.launch.cuda_check import require_usable_cuda
from vqa_r1.launch.distributed import export_torch_distributed
from vqa_r1.logging_setup import setup_logging
from vqa_r1.run_dir import UNHEALTHY, RunDir, failures_recorded
from vqa_r1.train.merge import merge_adapter
from vqa_r1.train.pretrain import PretrainConfig, pretrain

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """A job of one run directory; subclasses say what it does in ``run``."""

    run_dir: str
    max_requeues: int | None = None  # --max-requeues; None: no limit
    signal_delay_s: float | None = None  # the cluster's warning time; None: no graceful requeue
    gpus: int = 0  # GPUs per node the job asked for: it checks at start that it can use them

    verb = "task"
    uses_cuda = True  # False: the job's GPUs serve another program (a judge's vLLM server)

    def __call__(self) -> dict:
        setup_logging()
        export_torch_distributed()
        log.info("task %s in %s (restart count %s)", self.verb, self.run_dir, restart_count())
        # a failure reaches status.json with its reason and this job's log; outside SLURM,
        # SIGTERM ends the task as Ctrl-C does (in SLURM it belongs to launch/requeue.py)
        with failures_recorded(self.run_dir, job_log(), sigterm=not in_slurm()):
            if self.uses_cuda:
                # a GPU job never trains or evaluates on the CPU: fail now, with the fix
                require_usable_cuda(self.gpus)
            return self.run()

    def run(self) -> dict:
        raise NotImplementedError

    def run_config(self) -> RunConfig:
        """The run's resolved config, written when its folder was claimed. A job's ranks find it
        written at submission; the ranks of a command torchrun started all at once (`vqa-r1
        grpo` in process) wait for rank 0's claim."""
        path = Path(self.run_dir) / "config.yaml"
        if not ranks.is_main():
            ranks.wait_for(path.exists, f"{path} (rank 0 claims the run directory)", 600)
        return read_config(path)

    def checkpoint(self, *args, **kwargs):
        """Requeue the same task: it resumes from the latest complete checkpoint of its run dir.

        Returns None (no requeue; submitit marks the job failed) once ``max_requeues`` is reached,
        and says so in the run's status.json and log.
        """
        restarts = restart_count()
        if self.max_requeues is not None and restarts >= self.max_requeues:
            message = f"not requeueing: the maximum of {self.max_requeues} requeues was reached"
            log.error(message)
            mark(self.run_dir, state="MAX_REQUEUES_REACHED", requeues=restarts, message=message)
            return None
        log.info("requeueing %s for %s (requeue %d)", self.verb, self.run_dir, restarts + 1)
        mark(self.run_dir, state="REQUEUED", requeues=restarts + 1)
        return submitit.helpers.DelayedSubmission(dataclasses.replace(self))


class RunUnhealthy(UserError):
    """A training job whose run its health monitor stopped: the job ends failed (status.json
    keeps UNHEALTHY and the alarm; failures_recorded leaves a state the run recorded alone)."""


@dataclass(frozen=True)
class TrainTask(Task):
    """SFT or GRPO (the verb is in the config)."""

    verb = "train"

    def run(self) -> dict:
        from vqa_r1.launch.requeue import install_graceful_requeue  # transformers: job side only
        from vqa_r1.train.runner import train

        controller = install_graceful_requeue(self.signal_delay_s)
        status = train(
            self.run_config(),
            self.run_dir,
            callbacks=[controller] if controller else [],
            sigterm_stops=not in_slurm(),  # in a SLURM job SIGTERM is launch/requeue.py's
        )
        if status.get("state") == UNHEALTHY:
            # stopped by a run-health alarm (train.health_action=stop): never requeued; the job
            # fails, so the allocation is released and the steps that need this run do not start
            if controller is not None:
                controller.finish()
            if not ranks.is_main():
                return status
            raise RunUnhealthy(
                f"run UNHEALTHY at step {status.get('global_step')}: {status.get('reason')}"
            )
        if controller is None:
            return status
        if status["state"] == "STOPPED" and controller.requested:
            if not ranks.is_main():
                # rank 0 requeues the job, which ends every task; this one returns normally (a
                # non-zero exit could make srun end rank 0 before it requeues) and leaves final/
                # and status.json alone (launch/requeue.py)
                log.info("rank %d: stopped for a requeue; rank 0 requeues", ranks.rank())
                controller.finish()
                return status
            mark(self.run_dir, state="REQUEUED", global_step=status.get("global_step"))
            controller.requeue_now(
                f"checkpoint-{status.get('global_step')} saved at the step boundary"
            )
        controller.finish()
        return status


@dataclass(frozen=True)
class EvaluateTask(Task):
    adapter: str | None = None  # adapter folder or run directory to evaluate
    progress: bool = False  # a progress bar (a terminal: `vqa-r1 evaluate`), not in job logs

    verb = "evaluate"

    def run(self) -> dict:
        return evaluate(
            self.run_config(), self.run_dir, adapter=self.adapter, progress=self.progress
        )


@dataclass(frozen=True)
class MergeTask(Task):
    adapter: str | None = None  # the SFT adapter (or its run directory) to fold into the base

    verb = "merge"

    def run(self) -> dict:
        return merge_adapter(self.run_config(), self.adapter, self.run_dir)


@dataclass(frozen=True)
class PretrainTask(Task):
    config: PretrainConfig | None = None  # resumes from run_dir/work/checkpoints after a requeue
    stop_after: int | None = None

    verb = "pretrain"

    def run(self) -> dict:
        return pretrain(self.config, Path(self.run_dir), self.stop_after)


@dataclass(frozen=True)
class JudgeTask(Task):
    config: JudgeJobConfig | None = None  # no secrets: the key is read from the environment

    verb = "judge"
    uses_cuda = False  # a judge's GPU runs its vLLM server; the client needs none

    def run(self) -> dict:
        return {"exit_code": run_job(self.config)}


def mark(run_dir: str, **fields) -> None:
    try:
        RunDir(Path(run_dir)).update_status(**fields)
    except OSError as err:  # status is informative; never block a requeue on it
        log.warning("could not update status.json: %s", err)


def job_log() -> Path | None:
    """This task's stderr log, where submitit writes the traceback of a failure."""
    try:
        return submitit.JobEnvironment().paths.stderr
    except Exception:  # not inside a submitit job (a task called directly)
        return None


def in_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def restart_count() -> int:
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)


@dataclass(frozen=True)
class TablesTask(Task):
    """An experiment's tables and plots, rebuilt from its run directories (``run_dir``: the
    experiment folder), so the report lands with the last job of the chain."""

    verb = "tables"
    uses_cuda = False

    def run(self) -> dict:
        from vqa_r1.report.experiment import build_report

        return build_report(Path(self.run_dir))


@dataclass(frozen=True)
class PromptTuneTask(Task):
    """Prompt tuning then its evaluation (``base``: the base model scored the same way, no
    training). The config is small and typed; a requeued job resumes from its checkpoints.

    Training is a Trainer's (train/prompt_tuning.py), so the requeue works as TrainTask's: the
    requeue controller goes to the trainer as a callback (through ``job_callbacks``: the
    launcher's run_prompt_tuning passes no callbacks), stops training at a step boundary with a
    checkpoint there, and the unfinished run is requeued. One process: no ranks to wait for."""

    config: object = None  # PromptTuneConfig
    base: bool = False
    stop_after: int | None = None  # stop after N steps, as if killed (`--stop-after`)
    progress: bool = False  # progress bars (a terminal: `vqa-r1 prompt-tune`), not in job logs

    verb = "prompt-tune"

    def run(self) -> dict:
        from vqa_r1.launch.prompt_tuning import run_base, run_prompt_tuning
        from vqa_r1.launch.requeue import install_graceful_requeue
        from vqa_r1.train.prompt_tuning import job_callbacks

        if self.base:
            return run_base(self.config, self.run_dir, progress=self.progress)
        controller = install_graceful_requeue(self.signal_delay_s)
        # in a SLURM job SIGTERM is launch/requeue.py's, as for TrainTask
        with job_callbacks([controller] if controller else [], sigterm_stops=not in_slurm()):
            result = run_prompt_tuning(
                self.config, self.run_dir, progress=self.progress, stop_after=self.stop_after
            )
        if controller is None:
            return result
        training = result.get("training", {})
        if not training.get("complete", True) and controller.requested:
            step = training.get("global_step")
            mark(self.run_dir, state="REQUEUED", global_step=step)
            controller.requeue_now(f"checkpoint-{step} saved at the step boundary")
        controller.finish()
        return result


@dataclass(frozen=True)
class DoctorTask(Task):
    """`slurm/launch.py doctor`: launch/doctor.py's checks on a compute node, with the job's GPUs.

    Writes the report to ``doctor.txt`` in its folder (``doctor-node<i>.txt`` on further nodes)
    and returns it with the exit status; never requeued."""

    models: tuple[str, ...] = ()
    cluster: str | None = None  # the profile's file: its SLURM settings and Python are checked
    constraints: str | None = None  # the tested set, as found on the login node

    verb = "doctor"
    uses_cuda = False  # an unusable GPU is one of its FAIL lines, not a reason to stop

    def run(self) -> dict:
        from vqa_r1.launch.doctor import DoctorOptions, report, run_checks

        options = DoctorOptions(
            list(self.models), self.gpus, self.cluster, self.run_dir, self.constraints
        )
        text, status = report(run_checks(options))
        node = int(os.environ.get("SLURM_NODEID", "0") or 0)
        folder = Path(self.run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ("doctor.txt" if node == 0 else f"doctor-node{node}.txt")).write_text(text + "\n")
        print(text, flush=True)
        return {"exit_code": status, "report": text}

    def checkpoint(self, *args, **kwargs):
        return None  # a minute of checks: nothing to resume

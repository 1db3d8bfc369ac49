"""Jobs with several processes: checkpoints, side effects, the shared requeue decision, preemption.

The slow tests run a tiny GRPO with 2 CPU processes (gloo) under torchrun, which sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as a multi-task SLURM job does through submitit
(launch/distributed.py). Each rank's output goes to its own log file (``--redirects 3``), so what
a rank did can be read back. The unit tests drive the requeue controller's decisions in one process
with real signals, SLURM's answers (end time, job state) stubbed.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vqa_r1 import ranks
from vqa_r1.launch import requeue
from vqa_r1.launch.requeue import RequeueController
from vqa_r1.run_dir import COMPLETE_MARKER, RunDir, latest_checkpoint, process_started

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-qwen2.5-vl-pretrained"
STEPS, SAVE_EVERY, PREEMPT_AT = 6, 2, 3
OVERRIDES = [
    f"train.max_steps={STEPS}",
    f"train.save_steps={SAVE_EVERY}",
    "train.logging_steps=1",
    "train.per_device_train_batch_size=4",  # global batch 8 = 2 prompts x 4 generations
    "train.num_generations=4",
    "train.max_completion_length=12",
    "data.synthetic_train=24",
    "data.synthetic_validation=4",
    "data.synthetic_test=4",
    # rewards and gradients differ per step; half the groups flat (below): rounds of refills
    # that both ranks must take together, and draws that a resumed run must repeat
    "train.reward_funcs=[mp_rewards:e_share_true]",
    "train.reward_weights=[1.0]",
    "train.temperature=4.0",  # the pretrained tiny model is peaked: groups need varied samples
    # one group per rank
    "train.dynamic_sampling=true",
    # two updates per generation: the preemption at step 3 falls inside a block, so the resumed
    # ranks must train step 4 on their saved generation buffers (trainer_hooks)
    "train.num_iterations=2",
]
# the share of "e" in a completion varies between samples, so the sampling RNG of each rank and
# every update show in the per-step metrics (the tiny model's answers earn no accuracy reward);
# e_share_true: the prompts whose answer is False earn 0 throughout (groups without variance);
# e_share (dense) is tests/test_deepspeed_cpu.py's
REWARDS = textwrap.dedent(
    """
    from vqa_r1.rewards import completion_text

    def e_share(completions, **_):
        texts = [completion_text(c) for c in completions]
        return [t.count("e") / max(1, len(t)) for t in texts]

    def e_share_true(completions, solution, **_):
        return [
            share if "True" in s else 0.0
            for share, s in zip(e_share(completions), solution, strict=True)
        ]
    """
)
COMPARED = ("loss", "reward", "reward_std", "grad_norm", "learning_rate", "entropy")

# TrainTask as submitit runs it in each task of a SLURM job, with submitit's signal handlers
# stood in for: USR2 checkpoints the task and records the requeue on rank 0 only (submitit's
# checkpoint_and_try_requeue returns at once on other ranks), SIGTERM is bypassed. A preemption
# reaches rank 0 alone, at the end of step PREEMPT_AT (argv[2]; 0: none).
DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path

    from vqa_r1 import ranks
    from vqa_r1.launch import requeue, task

    run_dir, preempt_at, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    os.environ["SLURM_JOB_ID"] = "4242"
    os.environ["SLURM_JOB_END_TIME"] = str(int(time.time()) + 3600)  # far: SIGTERM = preemption
    requeue.job_state = lambda: "RUNNING"  # what squeue says of a job in its preemption GraceTime

    def submitit_usr2(signum, frame):
        if ranks.rank() != 0:
            return
        the_task.checkpoint()
        with open(out / "requeued.jsonl", "a") as fh:  # instead of scontrol requeue + exit
            fh.write(json.dumps({"rank": ranks.rank()}) + "\\n")

    signal.signal(signal.SIGUSR2, submitit_usr2)
    signal.signal(signal.SIGTERM, lambda *_: None)

    class PreemptedAt(requeue.RequeueController):
        def on_step_end(self, args, state, control, **kwargs):
            if ranks.rank() == 0 and state.global_step == preempt_at:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().on_step_end(args, state, control, **kwargs)

    requeue.RequeueController = PreemptedAt
    the_task = task.TrainTask(run_dir, signal_delay_s=120)
    status = the_task()
    (out / f"status-{ranks.rank()}.json").write_text(json.dumps(status))
    """
)


def _env(workdir: Path) -> dict:
    (workdir / "mp_rewards.py").write_text(REWARDS)
    # without CI: transformers propagates its records to the root logger when CI is set
    # (transformers/utils/logging.py), so under CI=true every line of it is logged twice
    dropped = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CI")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        VQA_R1_CACHE=str(workdir / "cache"),  # fresh: rank 0 generates the data, rank 1 waits
        TRANSFORMERS_VERBOSITY="info",  # "Saving model checkpoint to ..." from the writing rank
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(workdir)]),
    )
    return env


def _torchrun(args: list[str], logs: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "--redirects",
        "3",
        "--log-dir",
        str(logs),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _rank_log(logs: Path, rank: int) -> str:
    files = sorted(logs.glob(f"**/attempt_*/{rank}/std*.log"))
    assert files, f"no logs of rank {rank} under {logs}"
    return "\n".join(f.read_text(errors="replace") for f in files)


def _per_step(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r]


def _assert_complete(ckpt: Path) -> None:
    for name in (
        COMPLETE_MARKER,
        "adapter_model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "trainer_state.json",
        "rng_state_0.pth",
        "rng_state_1.pth",
    ):
        assert (ckpt / name).exists(), f"{ckpt.name}: {name} missing"
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == int(
        ckpt.name.split("-")[1]
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("multiprocess")


@pytest.fixture(scope="module")
def reference(workdir) -> dict:
    """An uninterrupted 2-process GRPO through the CLI, as the issue's command runs it."""
    run, logs = workdir / "reference", workdir / "reference-logs"
    started = time.time()
    out = _torchrun(
        ["-m", "vqa_r1", "grpo", "--model", MODEL, "--output-dir", str(run)]
        + [a for o in OVERRIDES for a in ("--set", o)],
        logs,
        _env(workdir),
    )
    print(f"reference 2-process run: {time.time() - started:.0f} s")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return {"run": run, "logs": logs}


@pytest.mark.slow
def test_two_processes_complete_with_whole_checkpoints_and_one_writer(reference):
    run, logs = reference["run"], reference["logs"]
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == [f"checkpoint-{s}" for s in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY)], names
    for name in names:
        _assert_complete(run / "checkpoints" / name)
    assert [r["step"] for r in _per_step(run)] == list(range(1, STEPS + 1))  # one line a step
    status = RunDir(run).status()
    assert status["state"] == "COMPLETED" and status["global_step"] == STEPS
    assert status["written_by_rank"] == 0 and status["world_size"] == 2 and status["starts"] == 1
    assert (run / "final" / "adapter_model.safetensors").exists()
    rank0, rank1 = _rank_log(logs, 0), _rank_log(logs, 1)
    final = f"Saving model checkpoint to {run / 'final'}"
    assert rank0.count(final) == 1 and final not in rank1  # final/ written once, by rank 0
    assert "Saving model checkpoint to" not in rank1  # checkpoints: model files by rank 0 alone
    assert "status.json is written by rank 0 only" not in rank0 + rank1
    assert "generating synthetic dataset" in rank0 and "generating synthetic" not in rank1
    completions = (run / "completions.jsonl").read_text().splitlines()
    assert completions and all(json.loads(x)["call"] for x in completions)
    steps = _per_step(run)
    rounds = [r["dynamic_sampling/rounds"] for r in steps if "dynamic_sampling/rounds" in r]
    assert max(rounds) > 1, f"no refill in {rounds}: dynamic sampling across ranks untested"


@pytest.mark.slow
def test_preemption_on_rank_0_stops_both_ranks_at_one_step_and_resume_matches(reference, workdir):
    run, out = workdir / "preempted", workdir / "preempted-out"
    run.mkdir()
    out.mkdir()
    (run / "config.yaml").write_text((reference["run"] / "config.yaml").read_text())
    driver = workdir / "driver.py"
    driver.write_text(DRIVER)
    env = _env(workdir)

    started = time.time()
    first = _torchrun([str(driver), str(run), str(PREEMPT_AT), str(out)], workdir / "l1", env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    statuses = [json.loads((out / f"status-{r}.json").read_text()) for r in (0, 1)]
    assert [(s["state"], s["global_step"]) for s in statuses] == [("STOPPED", PREEMPT_AT)] * 2
    assert [json.loads(x) for x in (out / "requeued.jsonl").read_text().splitlines()] == [
        {"rank": 0}
    ]  # requeued once, by rank 0
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["checkpoint-2", f"checkpoint-{PREEMPT_AT}"], names  # no .staging left
    for name in names:
        _assert_complete(run / "checkpoints" / name)
    assert not (run / "final").exists()
    status = RunDir(run).status()
    assert status["state"] == "REQUEUED" and status["written_by_rank"] == 0
    rank0, rank1 = _rank_log(workdir / "l1", 0), _rank_log(workdir / "l1", 1)
    assert "SIGTERM: preempted" in rank0 and "rank 1: SIGTERM" not in rank1  # rank 1: no signal
    assert f"stopping at step {PREEMPT_AT} (preempted)" in rank1  # ... and stopped with rank 0
    assert "stopped for a requeue; rank 0 requeues" in rank1

    second = _torchrun([str(driver), str(run), "0", str(out)], workdir / "l2", env)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-4000:]
    print(f"preempted + resumed 2-process runs: {time.time() - started:.0f} s")
    status = RunDir(run).status()
    assert status["state"] == "COMPLETED" and status["starts"] == 2
    assert status["resumed_from"].endswith(f"checkpoint-{PREEMPT_AT}")
    assert (run / "final" / "adapter_model.safetensors").exists()
    resumed, uninterrupted = _per_step(run), _per_step(reference["run"])
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))  # none lost nor repeated
    rewards = {r["reward"] for r in uninterrupted if "reward" in r}  # logged when generating
    assert len(rewards) > 1 and any(r["grad_norm"] for r in resumed)
    for a, b in zip(resumed, uninterrupted, strict=True):
        assert a.keys() - {"epoch"} == b.keys() - {"epoch"}, (a, b)
        for key in COMPARED:
            if key in b:
                assert a[key] == pytest.approx(b[key], abs=1e-6, rel=1e-6), (a["step"], key)


# ---------------------------------------------------------------- single process: the decisions


class _Control:
    should_save = False
    should_training_stop = False


class _State:
    global_step = 7


@pytest.fixture
def handlers(monkeypatch):
    """A fake submitit USR2 handler (records requeues); every handler restored afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    calls: list[str] = []
    signal.signal(signal.SIGUSR2, lambda *_: calls.append("requeue"))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    yield calls
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _controller(monkeypatch, left_s: float, state: str | None = "RUNNING") -> RequeueController:
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time() + left_s)))
    monkeypatch.setattr(requeue, "job_state", lambda: state)
    controller = RequeueController(signal_delay_s=120)
    controller.install()
    controller.step_seconds.extend([0.5, 0.5])
    controller.save_seconds = 0.5
    return controller


def _boundary(controller: RequeueController) -> _Control:
    control = _Control()
    controller.on_step_end(None, _State(), control)
    return control


def test_sigterm_far_from_the_time_limit_is_a_preemption(handlers, monkeypatch):
    controller = _controller(monkeypatch, left_s=3600)
    os.kill(os.getpid(), signal.SIGTERM)
    assert controller.terminated and controller.preempted
    control = _boundary(controller)  # at once: the grace time is unknown, no "one more step"
    assert control.should_save and control.should_training_stop
    assert controller.requested and controller.stopped
    controller.requeue_now("test")
    assert handlers == ["requeue"]  # submitit's handler does the requeue


def test_sigterm_well_before_the_end_of_a_short_job_is_a_preemption(handlers, monkeypatch):
    controller = _controller(monkeypatch, left_s=30)  # `scontrol requeue` in a one-minute job
    os.kill(os.getpid(), signal.SIGTERM)
    assert controller.preempted


def test_sigterm_at_the_time_limit_or_a_cancel_checkpoints_nothing(handlers, monkeypatch):
    for left, state in (
        (2, "RUNNING"),
        (-20, "RUNNING"),
        (3600, "COMPLETING"),
        (3600, "CANCELLED"),
    ):
        controller = _controller(monkeypatch, left_s=left, state=state)
        os.kill(os.getpid(), signal.SIGTERM)
        assert controller.terminated and not controller.preempted, (left, state)
        control = _boundary(controller)
        assert not control.should_save and not control.should_training_stop
    assert requeue.sigterm_cause() == "ending"


def test_warning_far_from_the_limit_trains_on_then_stops_in_time(handlers, monkeypatch):
    controller = _controller(monkeypatch, left_s=3600)
    os.kill(os.getpid(), signal.SIGUSR2)
    assert controller.requested and controller.deadline is not None
    assert not _boundary(controller).should_training_stop  # an hour left: one more step fits
    controller.deadline = time.monotonic() + 1.0
    assert _boundary(controller).should_training_stop
    controller.finish()


def test_other_ranks_only_note_a_signal_rank_0_decides(handlers, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    controller = _controller(monkeypatch, left_s=3600)
    monkeypatch.setattr(requeue, "job_state", lambda: pytest.fail("rank 1 asked squeue"))
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGUSR2)
    assert controller.terminated and controller.requested
    assert not controller.preempted and controller.deadline is None  # no judgement, no watchdog


def test_a_failed_scontrol_requeue_during_a_preemption_still_exits(handlers, monkeypatch):
    def scontrol_fails():
        raise subprocess.CalledProcessError(1, ["scontrol", "requeue"])

    controller = RequeueController(signal_delay_s=120, requeue=scontrol_fails)
    controller.preempted = True
    with pytest.raises(SystemExit):
        controller.requeue_now("preempted")
    controller = RequeueController(signal_delay_s=120, requeue=scontrol_fails)
    with pytest.raises(subprocess.CalledProcessError):  # not preempted: a real failure
        controller.requeue_now("time limit")


def test_rank_helpers_before_a_process_group(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (ranks.rank(), ranks.world_size(), ranks.is_main()) == (1, 2, False)
    assert ranks.any_rank(True) and not ranks.any_rank(False)
    with pytest.raises(RuntimeError, match="before the process group"):
        ranks.barrier()
    flag = tmp_path / "ready"
    with pytest.raises(TimeoutError):
        ranks.wait_for(flag.exists, "a flag", timeout_s=0.2, poll_s=0.05)
    flag.touch()
    ranks.wait_for(flag.exists, "a flag", timeout_s=1)
    rd = RunDir(tmp_path / "run").create()
    rd.update_status(state="RUNNING")  # rank 1: status.json is rank 0's
    assert not rd.status_file.exists()
    monkeypatch.setenv("RANK", "0")
    rd.update_status(state="RUNNING")
    assert rd.status() | {"updated": None} == {
        "state": "RUNNING",
        "updated": None,
        "written_by_rank": 0,
        "pid": os.getpid(),  # which process runs it: `status` tells a killed run by these
        "host": socket.gethostname(),
        "started": process_started(os.getpid()),  # a pid alone may be another process's later
    }
    assert latest_checkpoint(rd.checkpoints) is None


def test_submitit_still_requeues_from_rank_0_only_and_ignores_sigterm():
    """What launch/requeue.py relies on in submitit (fails loudly when it changes)."""
    from submitit.core.job_environment import JobEnvironment, SignalHandler

    source = inspect.getsource(SignalHandler.checkpoint_and_try_requeue)
    assert "procid != 0" in source and "return" in source  # other ranks: no requeue, no exit
    assert "self.env._requeue(countdown)" in source
    handle = inspect.getsource(JobEnvironment._handle_signals)
    assert "signal.SIGTERM, handler.bypass" in handle


def test_a_checkpoint_loads_to_the_device_several_cpu_processes_train_on():
    """accelerate gives several CPU processes torch.device("cpu", 0), and transformers 5.17's
    Trainer loads the optimizer state with that as map_location: torch knew no "cpu:0", so every
    resume of a multi-process CPU run failed. train/cpu_locations registers it."""
    import io

    import torch

    from vqa_r1.train.cpu_locations import allow_indexed_cpu_locations

    saved = io.BytesIO()
    torch.save({"exp_avg": torch.arange(3.0)}, saved)
    allow_indexed_cpu_locations()
    allow_indexed_cpu_locations()  # once per process, whoever calls
    saved.seek(0)
    state = torch.load(saved, map_location=torch.device("cpu", 0), weights_only=True)
    assert state["exp_avg"].tolist() == [0.0, 1.0, 2.0] and state["exp_avg"].device.type == "cpu"

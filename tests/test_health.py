"""Run health (train/health.py): alarms on synthetic metric streams, none on the committed demo
runs, and on real tiny random-init GRPO runs (no reward anywhere): no_signal, truncation, status.json,
`launch.py status --json`, training.png, and health_action=stop ending the run UNHEALTHY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vqa_r1.claims import FolderRefused
from vqa_r1.io import read_jsonl
from vqa_r1.run_dir import RunDir, refuse_unhealthy
from vqa_r1.train import health
from vqa_r1.train.health import HealthDetector, scan

REPO = Path(__file__).resolve().parents[1]
DEMO_METRICS = sorted(REPO.glob("results/demo*/runs/*/metrics.jsonl"))
FORMAT = "rewards/format_reward/mean"


def _healthy(step: int, **over) -> dict:
    """A learning run's logged step, as the demo's: most groups solved, some with a signal."""
    record = {
        "step": step,
        health.ZERO_STD_KEY: 0.6 + 0.1 * (step % 3),
        health.CLIPPED_KEY: 0.01,
        health.LENGTH_KEY: 52.0 + (step % 2),
        health.REWARD_KEY: 1.2 + 0.01 * step,
        health.ENTROPY_KEY: 0.02,
        health.KL_KEY: 0.002 + 0.0001 * step,
        FORMAT: 0.97,
    }
    record.update(over)
    return record


def _codes(alarms) -> list[str]:
    return [a.code for a in alarms]


# --------------------------------------------------------------------- synthetic streams


def test_healthy_stream_raises_nothing():
    assert scan([_healthy(s) for s in range(1, 61)], window=10, beta=0.04) == []


@pytest.mark.parametrize("path", DEMO_METRICS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_demo_runs_raise_nothing(path):
    """Real runs that learn (the demo reaches 60-100 % zero-std groups at single steps)."""
    records = read_jsonl(path)
    for window in (5, 10, 20):
        assert scan(records, window=window, beta=0.04, max_completion_length=64) == [], window


def test_demo_metrics_are_there():
    assert len(DEMO_METRICS) >= 6  # the three families' GRPO and SFT+GRPO runs at least


def test_no_signal_needs_a_whole_window_and_a_flat_reward():
    zero = [_healthy(s, **{health.ZERO_STD_KEY: 1.0, health.REWARD_KEY: 0.0}) for s in range(1, 8)]
    detector = HealthDetector(window=8)
    assert [_codes(detector.observe(r["step"], r)) for r in zero] == [[]] * 7  # not a full window
    record = _healthy(8, **{health.ZERO_STD_KEY: 1.0, health.REWARD_KEY: 0.0})
    (alarm,) = detector.observe(8, record)
    assert alarm.code == "no_signal" and alarm.step == 8
    assert "100% of groups had zero reward std over steps 1-8" in alarm.evidence
    assert "start from SFT (init_adapter)" in alarm.fix and "dynamic sampling" in alarm.fix
    # once per code: the same condition at the next step fires nothing new
    assert detector.observe(9, {**record, "step": 9}) == []
    # a rising reward is learning, however many groups have zero std
    rising = [
        _healthy(s, **{health.ZERO_STD_KEY: 0.95, health.REWARD_KEY: 0.1 * s}) for s in range(1, 21)
    ]
    assert "no_signal" not in _codes(scan(rising, window=8))


def test_an_alarm_fires_again_after_it_cleared():
    stream = [_healthy(s, **{health.CLIPPED_KEY: 0.9}) for s in range(1, 6)]
    stream += [_healthy(s) for s in range(6, 16)]
    stream += [_healthy(s, **{health.CLIPPED_KEY: 0.9}) for s in range(16, 30)]
    alarms = scan(stream, window=4, max_completion_length=32)
    assert [(a.code, a.step) for a in alarms] == [("truncation", 3), ("truncation", 18)]
    assert "cut at max_completion_length=32" in alarms[0].evidence
    assert "raise train.max_completion_length" in alarms[0].fix


def test_format_collapse_stuck_and_fallen():
    stuck = scan([_healthy(s, **{FORMAT: 0.0}) for s in range(1, 11)], window=5)
    (alarm,) = stuck
    assert alarm.code == "format_collapse" and alarm.step == 5 and "stuck" in alarm.evidence
    assert "start from SFT" in alarm.fix
    fell = [_healthy(s, **{FORMAT: 0.9}) for s in range(1, 11)]
    fell += [_healthy(s, **{FORMAT: 0.0}) for s in range(11, 21)]
    (alarm,) = scan(fell, window=5)
    assert alarm.code == "format_collapse" and alarm.step == 15
    assert "fell to 0.000" in alarm.evidence and "after reaching 0.90" in alarm.evidence
    assert "lower train.learning_rate" in alarm.fix


def test_length_collapse():
    stream = [_healthy(s) for s in range(1, 11)]
    stream += [_healthy(s, **{health.LENGTH_KEY: 6.0}) for s in range(11, 25)]
    (alarm,) = scan(stream, window=5)
    assert alarm.code == "length_collapse" and alarm.step == 15
    assert "6.0 tokens over steps 11-15, down from" in alarm.evidence
    # short completions from the start (a short answer format) are no collapse
    assert scan([_healthy(s, **{health.LENGTH_KEY: 6.0}) for s in range(1, 30)], window=5) == []


CORRECT = "rewards/cryptogram_correct_reward/mean"
COLLAPSED = REPO / "tests" / "fixtures" / "health" / "cryptogram-grpo-gated-lr5e-4.jsonl"
GRPO_METRICS = [
    p
    for p in sorted(REPO.glob("results/**/metrics.jsonl"))
    if any(health.ZERO_STD_KEY in r for r in read_jsonl(p))
]


def test_reward_collapse_on_the_cryptogram_run_that_unlearned():
    """The cryptogram's gated GRPO at 5e-4 from its SFT run (metrics.jsonl as committed in
    178347b, before the spec moved to 5e-5): correctness 0.55 at step 5, then 0-0.05; it ended at
    the random-guess floor on the test split."""
    records = read_jsonl(COLLAPSED)
    (alarm,) = scan(records, window=10)
    assert alarm.code == "reward_collapse" and alarm.step == 65
    assert alarm.evidence == (
        "cryptogram_correct_reward fell to 0.006 over steps 20-65 after 0.221 over steps 5-15"
    )
    assert "lower train.learning_rate" in alarm.fix and "completions.jsonl" in alarm.fix
    assert [a.step for a in scan(records, window=5)] == [40]


def test_reward_collapse_needs_a_held_peak_and_a_whole_window_after_it():
    def stream(values):
        return [_healthy(s, **{CORRECT: v}) for s, v in enumerate(values, start=1)]

    (alarm,) = scan(stream([0.6, 0.6, 0.6] + [0.0] * 6), window=5)
    assert alarm.code == "reward_collapse" and alarm.step == 8  # steps 4-8, after the peak 1-3
    assert scan(stream([0.6, 0.6, 0.6] + [0.0] * 4), window=5) == []  # no whole window after
    # one lucky step (a random-init tiny run scored 0.25 once, the no_signal note): no skill
    assert scan(stream([0.0, 0.25] + [0.0] * 20), window=5) == []
    assert scan(stream([0.1] * 3 + [0.0] * 20), window=5) == []  # never above 0.15
    assert scan(stream([0.6] * 3 + [0.2] * 20), window=5) == []  # lower, not collapsed
    # a reward that rises late: the low start before the peak is no fall
    assert scan(stream([0.0] * 15 + [0.5] * 10), window=20) == []
    # the format reward has its own rule (format_collapse), never this one
    fell = [_healthy(s, **{FORMAT: 0.9 if s <= 3 else 0.3}) for s in range(1, 20)]
    assert scan(fell, window=5) == []


@pytest.mark.parametrize("path", GRPO_METRICS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_committed_grpo_run_raises_reward_collapse(path):
    """Every GRPO run under results/ (the demos, seeds, every experiment, including the counting
    run that collapsed to one answer, whose reward rose) keeps what it learned."""
    records = read_jsonl(path)
    for window in (5, 10, 20):
        assert "reward_collapse" not in _codes(scan(records, window=window)), window


def test_grpo_metrics_are_there():
    assert len(GRPO_METRICS) >= 25


def test_kl_spike_only_with_beta():
    stream = [_healthy(s) for s in range(1, 11)] + [_healthy(11, **{health.KL_KEY: 0.8})]
    (alarm,) = scan(stream, window=5, beta=0.04)
    assert alarm.code == "kl_spike" and alarm.step == 11
    assert "KL 0.8 at step 11" in alarm.evidence and "beta 0.04" in alarm.evidence
    assert scan(stream, window=5, beta=0.0) == []
    # small early values jumping by a large factor are no spike
    early = [_healthy(s, **{health.KL_KEY: 1e-5}) for s in range(1, 6)]
    early.append(_healthy(6, **{health.KL_KEY: 1e-3}))
    assert scan(early, window=5, beta=0.04) == []


def test_an_unhealthy_run_is_refused_with_stop_and_continued_with_warn(tmp_path):
    rd = RunDir(tmp_path / "run").create()
    alarm = {"code": "no_signal", "step": 10, "evidence": "100% ...", "fix": "start from SFT"}
    rd.update_status(state="UNHEALTHY", health=[alarm])
    with pytest.raises(
        FolderRefused, match="UNHEALTHY run .*no_signal at step 10.*health_action=warn"
    ):
        refuse_unhealthy(rd.root, "stop")
    refuse_unhealthy(rd.root, "warn")  # continues


# --------------------------------------------------------------------- real tiny runs


def _tiny_grpo(synthetic_dir, steps: int, *sets: str):
    from vqa_r1.recipes import load_config

    overrides = [
        f"data.dataset={synthetic_dir}",
        f"train.max_steps={steps}",
        "train.save_steps=100",
        "train.logging_steps=1",
        "train.per_device_train_batch_size=4",
        "train.max_completion_length=8",
        *sets,
    ]
    return load_config("grpo", "tiny-qwen2.5-vl", overrides=overrides)


@pytest.fixture(scope="module")
def warned_run(synthetic_dir, tmp_path_factory):
    """A random-init tiny model (no reward anywhere), 12 steps of 8-token completions, warn."""
    from vqa_r1.train import runner

    run_dir = tmp_path_factory.mktemp("health") / "grpo"
    config = _tiny_grpo(synthetic_dir, 12)  # the default window: 10 logged steps
    status = runner.train(config, run_dir)
    return run_dir, status


@pytest.mark.slow
def test_random_init_run_raises_no_signal_and_truncation(warned_run):
    run_dir, status = warned_run
    assert status["state"] == "COMPLETED"  # warn: the run goes on
    alarms = {a["code"]: a for a in status["health"]}
    assert set(alarms) >= {"no_signal", "truncation"}
    assert alarms["no_signal"]["step"] <= 20 and alarms["truncation"]["step"] <= 20
    assert set(alarms["no_signal"]) == {"code", "step", "evidence", "fix"}
    assert "max_completion_length=8" in alarms["truncation"]["evidence"]
    stats = status["health_stats"]
    assert stats["zero_std_share"] == 1.0 and stats["truncated_share"] == 1.0
    # the logged metrics say the same through the detector alone
    assert "truncation" in _codes(scan(read_jsonl(run_dir / "metrics.jsonl"), window=10))


@pytest.mark.slow
def test_status_json_cli_and_plot_show_the_alarms(warned_run, tmp_path):
    run_dir, _ = warned_run
    out = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), "status", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    (job,) = json.loads(out.stdout)["jobs"]
    assert {"no_signal", "truncation"} <= {a["code"] for a in job["health"]}
    text = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), "status", str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "health no_signal at step 10" in text and "start from SFT (init_adapter)" in text
    from PIL import Image

    from vqa_r1.report.plots import plot_training

    png = plot_training(run_dir, tmp_path / "training.png")
    with Image.open(png) as image:
        assert image.size[0] > 500


@pytest.mark.slow
def test_health_action_stop_ends_the_run_unhealthy_with_a_checkpoint(synthetic_dir, tmp_path):
    from vqa_r1.train import runner

    run_dir = tmp_path / "grpo"
    config = _tiny_grpo(synthetic_dir, 30, "train.health_window=4", "train.health_action=stop")
    status = runner.train(config, run_dir)
    assert status["state"] == "UNHEALTHY" and status["global_step"] < 30
    step = status["global_step"]
    first = status["health"][0]
    assert first["step"] == step and first["code"] in status["reason"]
    assert (run_dir / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert not (run_dir / "final").exists()
    # the same command refuses it, saying why and how to go on
    with pytest.raises(FolderRefused, match="UNHEALTHY.*health_action=warn"):
        runner.train(config, run_dir)
    assert RunDir(run_dir).status()["state"] == "UNHEALTHY"


# --------------------------------------------------------------------- jobs and status


def _unhealthy_run(root: Path) -> Path:
    rd = RunDir(root).create()
    (root / "config.yaml").write_text("verb: grpo\n")
    alarm = {
        "code": "no_signal",
        "step": 10,
        "evidence": "100% of groups ...",
        "fix": "start from SFT",
    }
    rd.update_status(
        state="UNHEALTHY", global_step=10, health=[alarm], reason="run health alarm no_signal"
    )
    return root


def test_slurm_status_and_verdict_show_unhealthy(tmp_path, monkeypatch):
    from vqa_r1.launch import monitor

    root = tmp_path / "pipeline"
    grpo = _unhealthy_run(root / "grpo")
    evaluate = root / "evaluate"
    evaluate.mkdir()
    monitor.record_job(grpo, "51", "slurm", grpo / "jobs", "slurm/launch.py pipeline")
    monitor.record_job(evaluate, "52", "slurm", evaluate / "jobs", "slurm/launch.py pipeline")
    steps = [
        {"name": "grpo", "run_dir": str(grpo), "job_id": "51"},
        {"name": "evaluate", "run_dir": str(evaluate), "job_id": "52", "after": ["grpo"]},
    ]
    (root / "launch.json").write_text(json.dumps({"kind": "pipeline", "steps": steps}))
    sacct = "51|FAILED|00:05:00|vm|1:0|2026-01-01T10:00:00\n52|CANCELLED|00:00:00|None assigned|0:0|Unknown\n"
    monkeypatch.setattr(monitor, "query_sacct", lambda ids: monitor.parse_sacct(sacct))
    monkeypatch.setattr(monitor, "scontrol_show", lambda job_id: "")
    report = json.loads(monitor.status_report(str(root), as_json=True))
    first = report["jobs"][0]
    assert first["state"] == "UNHEALTHY" and first["run_state"] == "UNHEALTHY"
    assert first["health"][0]["code"] == "no_signal" and first["exit_code"] == "1:0"
    assert "step grpo ended UNHEALTHY" in report["verdict"]
    text = monitor.status_report(str(root))
    assert "health no_signal at step 10: 100% of groups ...; fix: start from SFT" in text


def test_an_unhealthy_train_job_fails_without_requeueing(tmp_path, monkeypatch):
    """TrainTask: the job ends failed (the allocation released, afterok steps not started), the
    run stays UNHEALTHY (failures_recorded keeps a state the run recorded), nothing requeues."""
    from vqa_r1.launch import task as task_module
    from vqa_r1.train import runner

    run_dir = tmp_path / "grpo"
    RunDir(run_dir).create()
    (run_dir / "config.yaml").write_text("verb: grpo\n")
    RunDir(run_dir).update_status(state="RUNNING")
    requeued = []

    class Controller:
        requested = False

        def finish(self):
            requeued.append("finish")

        def requeue_now(self, reason):
            requeued.append(reason)

    def fake_train(config, run_dir, callbacks=(), sigterm_stops=True):
        rd = RunDir(Path(run_dir))
        rd.update_status(state="UNHEALTHY", global_step=4, reason="run health alarm truncation")
        return rd.status()

    monkeypatch.setattr(runner, "train", fake_train)
    monkeypatch.setattr(task_module.TrainTask, "run_config", lambda self: None)
    monkeypatch.setattr(
        "vqa_r1.launch.requeue.install_graceful_requeue", lambda delay: Controller()
    )
    monkeypatch.setattr(task_module.TrainTask, "uses_cuda", False)
    job = task_module.TrainTask(str(run_dir), gpus=0)
    with pytest.raises(task_module.RunUnhealthy, match="UNHEALTHY at step 4: run health alarm"):
        job()
    assert requeued == ["finish"]
    assert RunDir(run_dir).status()["state"] == "UNHEALTHY"


def test_a_resumed_run_continues_its_windows_and_does_not_fire_again(tmp_path):
    from types import SimpleNamespace

    from transformers import TrainerControl

    from vqa_r1.train.health import RunHealth

    rd = RunDir(tmp_path / "run").create()
    bad = [_healthy(s, **{health.ZERO_STD_KEY: 1.0, health.REWARD_KEY: 0.0}) for s in range(1, 13)]
    rd.metrics.write_text("".join(json.dumps(r) + "\n" for r in bad))  # 11 and 12: after ckpt
    callback = RunHealth(rd, window=10, action="stop")
    callback.on_train_begin(None, SimpleNamespace(global_step=10), TrainerControl())
    assert callback.detector.active == {"no_signal"}  # the window of steps 1-10, read silently
    control = TrainerControl()
    callback.on_log(None, SimpleNamespace(global_step=11), control, logs=bad[10])
    assert not control.should_training_stop and "health" not in rd.status()
    # a fresh start with the same stream stops at step 10
    fresh = RunHealth(RunDir(tmp_path / "fresh").create(), window=10, action="stop")
    for record in bad[:10]:
        control = TrainerControl()
        fresh.on_log(None, SimpleNamespace(global_step=record["step"]), control, logs=record)
    assert control.should_training_stop and control.should_save
    assert fresh.stopped_by.code == "no_signal" and fresh.stopped_by.step == 10
    assert [a["code"] for a in RunDir(tmp_path / "fresh").status()["health"]] == ["no_signal"]


@pytest.mark.slow
def test_two_processes_stop_at_the_same_step_when_an_alarm_fires(tmp_path):
    """2 CPU processes (gloo) under torchrun: both ranks stop at the alarm's step and checkpoint
    it together (every rank's RNG state in it); rank 0 alone writes UNHEALTHY. The shipped
    pretrained tiny model: two ranks building the random-init one into a fresh cache race."""
    run = tmp_path / "grpo"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", VQA_R1_CACHE=str(tmp_path / "cache"))
    sets = [
        "train.max_steps=30",
        "train.save_steps=100",
        "train.logging_steps=1",
        "train.per_device_train_batch_size=4",
        "train.max_completion_length=8",
        "train.health_action=stop",
        "data.synthetic_train=24",
        "data.synthetic_validation=4",
        "data.synthetic_test=4",
    ]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    model = "tiny-qwen2.5-vl-pretrained"
    cmd += ["-m", "vqa_r1", "grpo", "--model", model, "--output-dir", str(run)]
    cmd += [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode != 0  # the CLI exits 1 for an UNHEALTHY run
    status = RunDir(run).status()
    assert status["state"] == "UNHEALTHY" and status["world_size"] == 2, out.stderr[-3000:]
    step = status["global_step"]
    assert step < 30 and status["health"][0]["step"] == step
    ckpt = run / "checkpoints" / f"checkpoint-{step}"
    for name in ("trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"):
        assert (ckpt / name).exists(), name
    assert "UNHEALTHY" in out.stderr and not (run / "final").exists()

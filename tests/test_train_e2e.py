"""End-to-end training on tiny models: run directory contents and exact resume after a crash."""

import json
import os
import signal
import stat

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from vqa_r1.io import current_umask
from vqa_r1.recipes import load_config
from vqa_r1.run_dir import COMPLETE_MARKER, latest_checkpoint
from vqa_r1.train import runner


class Crash(RuntimeError):
    pass


class CrashAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"simulated kill at step {state.global_step}")


def _config(verb, synthetic_dir, steps, **extra):
    overrides = [
        f"data.dataset={synthetic_dir}",
        f"train.max_steps={steps}",
        "train.save_steps=2",
        "train.logging_steps=1",
        "train.per_device_train_batch_size=4",
    ]
    return load_config(verb, "tiny-qwen2.5-vl", overrides=overrides, **extra)


def _rewards(verb):
    return {"train": {"reward_funcs": ["letter_e"]}} if verb == "grpo" else {}


def _adapter(run_dir):
    return load_file(str(run_dir / "final" / "adapter_model.safetensors"))


def _per_step(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "loss" in r]


@pytest.mark.slow
def test_sft_then_grpo_run_directories(synthetic_dir, tmp_path):
    sft = tmp_path / "sft"
    status = runner.train(_config("sft", synthetic_dir, 4), sft)
    assert status["state"] == "COMPLETED" and status["global_step"] == 4
    assert (status["device"], status["dtype"]) == ("cpu", "torch.float32")  # where it trained
    for name in ("config.yaml", "metrics.jsonl", "status.json", "final/adapter_model.safetensors"):
        assert (sft / name).exists(), name
    ckpt = latest_checkpoint(sft / "checkpoints")
    assert ckpt.name == "checkpoint-4"
    for name in (
        "adapter_model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        COMPLETE_MARKER,
    ):
        assert (ckpt / name).exists(), name
    grpo = tmp_path / "grpo"
    cfg = _config("grpo", synthetic_dir, 2, init_adapter=str(sft / "final"))
    cfg.train.sample_every = 1
    runner.train(cfg, grpo)
    start = _adapter(sft)
    after = _adapter(grpo)
    assert start.keys() == after.keys()  # GRPO continued the SFT adapter
    steps = _per_step(grpo)
    assert [r["step"] for r in steps] == [1, 2] and "reward" in steps[0]
    samples = [json.loads(x) for x in (grpo / "completions.jsonl").read_text().splitlines()]
    assert samples and {"completion", "reward", "value"} <= samples[0].keys()


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["sft", "grpo"])
def test_resume_after_crash_equals_uninterrupted_run(verb, synthetic_dir, tmp_path, monkeypatch):
    from vqa_r1 import rewards

    # A random-init model earns no accuracy reward, so GRPO would have zero gradients and the test
    # could not fail; this reward varies between samples, so sampling RNG and updates both matter.
    def letter_e_reward(completions, **_):
        texts = [rewards.completion_text(c) for c in completions]
        return [t.count("e") / max(1, len(t)) for t in texts]

    monkeypatch.setitem(rewards.REWARDS, "letter_e", letter_e_reward)
    steps = 6
    clean = tmp_path / "clean"
    runner.train(_config(verb, synthetic_dir, steps, **_rewards(verb)), clean)

    crashed = tmp_path / "crashed"
    original = runner.build_trainer

    def with_crash(*args, **kwargs):
        trainer = original(*args, **kwargs)
        trainer.add_callback(CrashAt(3))  # after checkpoint-2, before checkpoint-4
        return trainer

    monkeypatch.setattr(runner, "build_trainer", with_crash)
    with pytest.raises(Crash):
        runner.train(_config(verb, synthetic_dir, steps, **_rewards(verb)), crashed)
    monkeypatch.setattr(runner, "build_trainer", original)
    assert latest_checkpoint(crashed / "checkpoints").name == "checkpoint-2"
    status = runner.train(_config(verb, synthetic_dir, steps, **_rewards(verb)), crashed)
    assert status["starts"] == 2 and status["resumed_from"].endswith("checkpoint-2")

    a, b = _per_step(clean), _per_step(crashed)
    assert [r["step"] for r in b] == list(range(1, steps + 1))  # no step lost or repeated
    for x, y in zip(a, b, strict=True):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-4, abs=1e-6), (x["step"], x, y)
    wa, wb = _adapter(clean), _adapter(crashed)
    assert any(k for k in wa if "lora_B" in k and wa[k].abs().sum() > 0), "training changed nothing"
    if verb == "grpo":
        assert any(r["grad_norm"] > 0 for r in a), (
            "GRPO had no gradient: the comparison would be vacuous"
        )
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-4, atol=1e-6)


def test_incomplete_checkpoint_is_skipped(tmp_path, caplog):
    root = tmp_path / "checkpoints"
    good = root / "checkpoint-2"
    good.mkdir(parents=True)
    (good / "trainer_state.json").write_text("{}")
    (good / COMPLETE_MARKER).write_text("2")
    half = root / "checkpoint-4"
    half.mkdir()
    (half / "trainer_state.json").write_text("{}")
    with caplog.at_level("WARNING"):
        assert latest_checkpoint(root) == good
    assert "skipping incomplete checkpoint" in caplog.text and "checkpoint-4" in caplog.text


class CtrlCAt(TrainerCallback):
    """Ctrl-C in the middle of a step: the signal arrives while the step computes."""

    def __init__(self, step):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.slow
def test_ctrl_c_checkpoints_at_the_step_boundary_and_the_same_call_resumes(synthetic_dir, tmp_path):
    run = tmp_path / "sft"
    config = _config("sft", synthetic_dir, 4)
    config.train.save_steps = 10  # no periodic checkpoint before the end: the one found is ours
    status = runner.train(config, run, callbacks=[CtrlCAt(2)])
    assert status["state"] == "INTERRUPTED" and status["global_step"] == 2
    assert status["reason"] == "SIGINT at step 2: checkpoint-2 saved; the same command resumes"
    assert latest_checkpoint(run / "checkpoints").name == "checkpoint-2"
    assert not (run / "final").exists()
    # the group reads a run as far as the umask allows (safetensors writes its files 0600)
    for path in (run / "checkpoints" / "checkpoint-2").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~current_umask(), path.name
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    status = runner.train(config, run)
    assert status["state"] == "COMPLETED" and status["global_step"] == 4
    assert status["resumed_from"].endswith("checkpoint-2") and status["reason"] is None
    mode = (run / "final" / "adapter_model.safetensors").stat().st_mode
    assert stat.S_IMODE(mode) == 0o666 & ~current_umask()

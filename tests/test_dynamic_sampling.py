"""Dynamic sampling (train/dynamic_sampling.py) and the GRPO generation buffer across resumes
(trainer_hooks.GenerationBufferMixin): the pieces on small tensors, then tiny GRPO runs that stop
twice and resume (what a twice-requeued job does) and must equal an uninterrupted run."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vqa_r1 import rewards
from vqa_r1.recipes import load_config
from vqa_r1.run_dir import latest_checkpoint
from vqa_r1.train import runner
from vqa_r1.train.callbacks import StopAfter
from vqa_r1.train.dynamic_sampling import draw_prompts, group_has_variance, join_batches
from vqa_r1.train.trainer_hooks import GENERATION_BUFFER


def test_group_variance_uses_the_weighted_total_and_skips_unscored_rows():
    nan = float("nan")
    per_func = torch.tensor(
        [
            [1.0, 0.0], [1.0, 0.0],  # group 0: equal totals
            [1.0, 0.0], [0.0, 1.0],  # group 1: equal totals with weights 1, 1; not with 2, 1
            [nan, nan], [0.5, 0.0],  # group 2: one row unscored, one left: no variance
            [0.2, 0.0], [0.3, 0.0],  # group 3: varies
        ]
    )  # fmt: skip
    assert group_has_variance(per_func, torch.tensor([1.0, 1.0]), 2).tolist() == [
        False,
        False,
        False,
        True,
    ]
    assert group_has_variance(per_func, torch.tensor([2.0, 1.0]), 2).tolist() == [
        False,
        True,
        False,
        True,
    ]


def test_drawn_prompts_depend_on_seed_step_and_round_only():
    a = draw_prompts(100, 6, seed=1, step=7, round_=1)
    assert a == draw_prompts(100, 6, seed=1, step=7, round_=1)
    assert a != draw_prompts(100, 6, seed=1, step=8, round_=1)
    assert a != draw_prompts(100, 6, seed=1, step=7, round_=2)
    assert all(0 <= i < 100 for i in a)


def test_joined_batches_pad_prompts_left_and_completions_right():
    one = {
        "prompt_ids": torch.tensor([[5, 6]]),
        "prompt_mask": torch.tensor([[1, 1]]),
        "completion_ids": torch.tensor([[7]]),
        "completion_mask": torch.tensor([[1]]),
        "advantages": torch.tensor([0.5]),
        "num_images": [1],
        "num_items_in_batch": torch.tensor(1),
    }
    two = {
        "prompt_ids": torch.tensor([[4, 5, 6]]),
        "prompt_mask": torch.tensor([[1, 1, 1]]),
        "completion_ids": torch.tensor([[8, 9]]),
        "completion_mask": torch.tensor([[1, 1]]),
        "advantages": torch.tensor([-0.5]),
        "num_images": [1],
        "num_items_in_batch": torch.tensor(2),
    }
    joined = join_batches([one, two], pad_token_id=0)
    assert joined["prompt_ids"].tolist() == [[0, 5, 6], [4, 5, 6]]
    assert joined["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert joined["completion_ids"].tolist() == [[7, 0], [8, 9]]
    assert joined["completion_mask"].tolist() == [[1, 0], [1, 1]]
    assert joined["advantages"].tolist() == [0.5, -0.5]
    assert joined["num_images"] == [1, 1]


def _letter_e(completions, **_):
    texts = [rewards.completion_text(c) for c in completions]
    return [t.count("e") / max(1, len(t)) for t in texts]


def _half_flat(completions, solution=None, **_):
    """``_letter_e`` for prompts whose answer is True; 0 for every completion of the others, so
    about half the groups have no reward variance."""
    scores = _letter_e(completions)
    return [s if "True" in str(sol) else 0.0 for s, sol in zip(scores, solution, strict=True)]


@pytest.fixture
def test_rewards(monkeypatch):
    monkeypatch.setitem(rewards.REWARDS, "letter_e", _letter_e)
    monkeypatch.setitem(rewards.REWARDS, "half_flat", _half_flat)


def _config(synthetic_dir, steps, *extra):
    overrides = [
        f"data.dataset={synthetic_dir}",
        f"train.max_steps={steps}",
        "train.save_steps=100",  # the stops write the checkpoints the runs resume from
        "train.logging_steps=1",
        "train.per_device_train_batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=12",
        *extra,
    ]
    return load_config("grpo", "tiny-qwen2.5-vl", overrides=overrides)


def _steps(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "loss" in r]


def _stopped_twice_equals_uninterrupted(synthetic_dir, tmp_path, extra, steps=6, stops=(3, 5)):
    clean = tmp_path / "clean"
    runner.train(_config(synthetic_dir, steps, *extra), clean)
    cut = tmp_path / "cut"
    for stop in stops:  # each stop: a checkpoint at a step boundary, as a requeue's
        status = runner.train(
            _config(synthetic_dir, steps, *extra), cut, callbacks=[StopAfter(stop)]
        )
        assert status["state"] == "STOPPED" and status["global_step"] == stop
        assert latest_checkpoint(cut / "checkpoints").name == f"checkpoint-{stop}"
    status = runner.train(_config(synthetic_dir, steps, *extra), cut)
    assert status["state"] == "COMPLETED" and status["starts"] == len(stops) + 1

    a, b = _steps(clean), _steps(cut)
    assert [r["step"] for r in b] == list(range(1, steps + 1))
    assert any(r["grad_norm"] > 0 for r in a), "no gradient: the comparison would be vacuous"
    assert sum("reward" in r for r in a) >= steps // 2  # num_iterations=2: every other step
    for x, y in zip(a, b, strict=True):
        assert x.keys() - {"epoch"} == y.keys() - {"epoch"}, (x, y)
        for key in ("loss", "reward", "grad_norm"):
            if key in x:  # rewards are logged on the steps that generate
                assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), (x["step"], key, x, y)
    wa = load_file(str(clean / "final" / "adapter_model.safetensors"))
    wb = load_file(str(cut / "final" / "adapter_model.safetensors"))
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-4, atol=1e-6)
    return a, cut


@pytest.mark.slow
def test_num_iterations_2_stopped_inside_and_at_the_end_of_a_block_equals_uninterrupted(
    synthetic_dir, tmp_path, test_rewards
):
    # stops at odd steps: the next step reuses the buffered generation (num_iterations=2); the
    # stop at 4 ends a block: the next step generates afresh, so no buffer is saved there
    _, cut = _stopped_twice_equals_uninterrupted(
        synthetic_dir,
        tmp_path,
        ["train.num_iterations=2", "train.reward_funcs=[letter_e]", "train.beta=0"],
        stops=(3, 4, 5),
    )

    def saved(step):
        path = cut / "checkpoints" / f"checkpoint-{step}" / GENERATION_BUFFER.format(rank=0)
        return torch.load(path, weights_only=False)

    assert saved(5)["step"] == 5 and saved(5)["buffer"], "the buffer of step 5's generation"
    assert saved(4) == {"step": 4, "buffer": None}, "a block's end saves the count only"


@pytest.mark.slow
def test_dynamic_sampling_refills_and_stopped_twice_equals_uninterrupted(
    synthetic_dir, tmp_path, test_rewards
):
    metrics, _ = _stopped_twice_equals_uninterrupted(
        synthetic_dir,
        tmp_path,
        ["train.dynamic_sampling=true", "train.reward_funcs=[half_flat]"],
    )
    generated = [r["dynamic_sampling/generated_groups"] for r in metrics]
    kept = [r["dynamic_sampling/kept_groups"] for r in metrics]
    rounds = [r["dynamic_sampling/rounds"] for r in metrics]
    assert all(k <= 2 for k in kept) and sum(kept) > 0
    assert any(r > 1 for r in rounds), "no step needed a second round: refilling untested"
    assert all(g == 2 * r for g, r in zip(generated, rounds, strict=True))
    assert any(k == 2 and r > 1 for k, r in zip(kept, rounds, strict=True)), "no batch refilled"


def test_dynamic_sampling_with_groups_split_over_processes_is_refused_before_queueing():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "slurm/launch.py", "grpo", "--model", "tiny-qwen2.5-vl", "--dry-run",
         "--set", "train.dynamic_sampling=true", "--set", "train.per_device_train_batch_size=6",
         "--set", "train.num_generations=4"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert out.returncode != 0
    assert "train.dynamic_sampling keeps or drops whole groups" in out.stderr, out.stderr[-2000:]
    assert "(6) must be a multiple of train.num_generations (4)" in out.stderr


def test_joined_token_type_ids_pad_the_prompt_left_and_the_completion_right():
    # TRL's mm_token_type_ids: the prompt's (left-padded) then zeros over the completion
    one = {
        "prompt_ids": torch.tensor([[5, 6]]),
        "completion_ids": torch.tensor([[7, 8, 9]]),
        "mm_token_type_ids": torch.tensor([[1, 0, 0, 0, 0]]),
    }
    two = {
        "prompt_ids": torch.tensor([[4, 5, 6]]),
        "completion_ids": torch.tensor([[8]]),
        "mm_token_type_ids": torch.tensor([[0, 1, 0, 0]]),
    }
    joined = join_batches([one, two], pad_token_id=0)
    assert joined["prompt_ids"].tolist() == [[0, 5, 6], [4, 5, 6]]
    assert joined["completion_ids"].tolist() == [[7, 8, 9], [8, 0, 0]]
    assert joined["mm_token_type_ids"].tolist() == [[0, 1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model", ["tiny-qwen2.5-vl-pretrained", "tiny-internvl-pretrained", "tiny-smolvlm-pretrained"]
)
def test_each_family_trains_on_a_batch_joined_from_two_rounds(model, tmp_path, test_rewards):
    """Each family's image tensors and per-token fields (Qwen's mm_token_type_ids, InternVL's
    tiles, SmolVLM's padded pixel values) survive rows of two rounds joined into one batch."""
    overrides = [
        "train.max_steps=3",
        "train.save_steps=100",
        "train.logging_steps=1",
        "train.per_device_train_batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "train.temperature=4.0",  # the pretrained models are peaked: varied samples
        "train.reward_funcs=[half_flat]",
        "train.reward_weights=[1.0]",
        "train.dynamic_sampling=true",
        "data.synthetic_train=16",
        "data.synthetic_validation=4",
        "data.synthetic_test=4",
    ]
    config = load_config("grpo", model, overrides=overrides)
    status = runner.train(config, tmp_path / "run")
    assert status["state"] == "COMPLETED"
    steps = _steps(tmp_path / "run")
    joined = [r for r in steps if r["dynamic_sampling/rounds"] > 1]
    assert joined and any(r["dynamic_sampling/kept_groups"] == 2 for r in joined), steps

"""The reasoning_steps reward: partial credit per reading right, in place, never more for listing."""

from __future__ import annotations

import json

import pytest

from vqa_r1.rewards import REWARD_RANGES, REWARDS, get_rewards
from vqa_r1.rewards.reasoning import reasoning_steps_reward, steps, think_text

REFERENCE = "first: left to right: red, blue. second: left to right: green, red. left: red, green."


def _completion(think: str, answer: str = "False") -> str:
    return f"<think> {think} </think> <answer> {answer} </answer>"


@pytest.mark.parametrize(
    ("think", "expected"),
    [
        (REFERENCE, 1.0),
        # each step counts alone: the second image misread, the end colours then wrong too
        (
            "first: left to right: red, blue. second: left to right: red, green. left: red, red.",
            1 / 3,
        ),
        # the readings are compared, not the labels (a sampled "fir le:" still read the colours)
        (
            "fir le: left to right: red, blue. secon=: left to right: green, red. left: red, green.",
            1.0,
        ),
        # case and spacing do not matter, the words do
        (
            "First:  LEFT to right: red, blue.\nsecond: left to right: green, red. left: red, green",
            1.0,
        ),
        # right steps in the wrong place earn nothing: the reward reads them in order
        (
            "left: red, green. first: left to right: red, blue. second: left to right: green, red.",
            0.0,
        ),
        # listing both readings of the first image does not earn both
        (
            "first: left to right: red, blue. first: left to right: blue, red. "
            "second: left to right: green, red. left: red, green.",
            1 / 3,
        ),
        ("", 0.0),
    ],
)
def test_each_reference_step_stated_in_place_earns_its_share(think, expected):
    out = reasoning_steps_reward([_completion(think)], reasoning=[REFERENCE])
    assert out == [pytest.approx(expected)]


def test_the_think_block_is_read_in_every_shape_a_completion_takes():
    conversational = [
        {"role": "assistant", "content": [{"type": "text", "text": _completion(REFERENCE)}]}
    ]
    thinking = f"{REFERENCE} </think> <answer> False </answer>"  # the template opened <think>
    unclosed = f"<think> {REFERENCE} <answer> False </answer>"
    answer_steps = "<think> </think> <answer> first: left to right: red, blue. </answer>"
    out = reasoning_steps_reward(
        [conversational, thinking, unclosed, answer_steps], reasoning=[REFERENCE] * 4
    )
    assert out == [1.0, 1.0, 1.0, 0.0]  # the answer block is not reasoning
    assert think_text("no tags at all.") == "no tags at all."
    assert steps("a. b.c. d") == ["a", "b.c", "d"]  # a "." inside a word does not end a step


@pytest.mark.parametrize("reference", [None, "", "   ", 3, ["a list"]])
def test_a_row_without_a_reference_reasoning_scores_zero(reference):
    assert reasoning_steps_reward([_completion(REFERENCE)], reasoning=[reference]) == [0.0]
    assert reasoning_steps_reward([_completion(REFERENCE)]) == [0.0]  # no column at all


def test_registered_with_its_range_and_grpo_rows_keep_the_reference():
    from datasets import Dataset

    from vqa_r1.data.datasets import trainer_rows

    assert get_rewards(["reasoning_steps"]) == [REWARDS["reasoning_steps"]]
    assert REWARD_RANGES["reasoning_steps"] == (0.0, 1.0)

    class Adapter:  # the FamilyAdapter interface trainer_rows reads
        thinking = False

        def messages(self, question, instruction, images=1):
            return [{"role": "user", "content": question}]

    ds = Dataset.from_dict(
        {"image_path": ["a.png"], "problem": ["q"], "label": [True], "reasoning": [REFERENCE]}
    )
    rows = trainer_rows(ds, Adapter(), "grpo")
    assert rows["reasoning"] == [REFERENCE]  # TRL hands it to the reward by name


def test_the_launcher_refuses_the_reward_on_rows_without_a_reasoning_before_queueing(tmp_path):
    from cli_helpers import run_in_process

    from vqa_r1.cli.launch import main as launch_main
    from vqa_r1.data.two_image import write_two_image

    pairs = write_two_image(tmp_path / "pairs", train=4, validation=0, test=2)
    bare = tmp_path / "bare"  # the same rows without their reasoning
    (bare / "images").mkdir(parents=True)
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (pairs / f"{split}.jsonl").read_text().splitlines()]
        for row in rows:
            row.pop("reasoning")
        (bare / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for image in (pairs / "images").iterdir():
        (bare / "images" / image.name).write_bytes(image.read_bytes())

    def grpo(folder, *more):
        return run_in_process(launch_main, ["grpo", "--model", "tiny-qwen2.5-vl-pretrained",
                                            "--set", "data.images_per_row=2", "--set",
                                            "train.reward_funcs=[accuracy,reasoning_steps]",
                                            "--output-dir", str(tmp_path / "run"), "--dry-run",
                                            *([] if folder is None else ["--dataset", str(folder)]),
                                            *more])  # fmt: skip

    ok = grpo(pairs)
    assert ok.returncode == 0, ok.stderr
    for folder, where in ((bare, f"{bare} [train]"), (None, "the synthetic scenes")):
        ran = grpo(folder)
        assert ran.returncode == 2
        lines = [line for line in ran.stderr.splitlines() if "reasoning_steps" in line]
        assert len(lines) == 1 and where in lines[0] and "no 'reasoning' column" in lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything was written

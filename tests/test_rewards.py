import time

import pytest

from vqa_r1.rewards import REWARD_RANGES, REWARDS, accuracy_reward, format_reward, get_rewards

GOOD = "<think> The red circle is left of the blue square. </think> <answer> True </answer>"


def test_accuracy_reward():
    completions = [GOOD, "<answer>False</answer>", "Answer: yes", "nothing"]
    solution = ["<answer> True </answer>"] * 4
    assert accuracy_reward(completions, solution) == [1.0, 0.0, 1.0, 0.0]
    # study rule: "yes" is not "true"
    assert accuracy_reward(completions, solution, answer_rule="study") == [0.0, 0.0, 0.0, 0.0]


def test_accuracy_reward_conversational_completions():
    conv = [
        [{"role": "assistant", "content": GOOD}],
        [{"role": "assistant", "content": [{"type": "text", "text": "<answer>False</answer>"}]}],
    ]
    assert accuracy_reward(conv, ["<answer> True </answer>", "<answer> False </answer>"]) == [
        1.0,
        1.0,
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD, 1.0),
        ("<think>a</think><answer>b</answer>", 1.0),
        ("  <think>\nmulti\nline\n</think>\n<answer>\nFalse\n</answer>\n", 1.0),
        ("<answer>True</answer>", 0.0),  # no think block
        ("<think>a</think>", 0.0),  # no answer block
        ("<think>a</think><answer></answer>", 0.0),  # empty answer
        ("<think>a<think>b</think></think><answer>c</answer>", 0.0),  # nested
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0),  # two answers
        ("preamble <think>a</think><answer>b</answer>", 0.0),  # text before
        ("<think>a</think><answer>b", 0.0),  # unclosed
    ],
)
def test_format_reward(text, expected):
    assert format_reward([text]) == [expected]


ADVERSARIAL = [
    "",
    "\x00",
    "🙂" * 999,
    "<think>" * 5000,
    "</answer>" * 5000,
    "<answer>" + "x" * 2_000_000,
    None,
    3.5,
    {"role": "assistant"},
    [{"content": None}],
    [[1, 2]],
]


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_rewards_never_raise(name):
    fn, (low, high) = REWARDS[name], REWARD_RANGES[name]
    start = time.perf_counter()
    out = fn(
        completions=ADVERSARIAL,
        solution=["<answer> True </answer>"] * len(ADVERSARIAL),
        prompts=None,
    )
    assert len(out) == len(ADVERSARIAL)
    assert all(isinstance(v, float) and low <= v <= high for v in out)
    assert time.perf_counter() - start < 5


def test_unknown_reward_name():
    with pytest.raises(KeyError, match="registered"):
        get_rewards(["accuracy", "speling"])

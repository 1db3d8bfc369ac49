"""Text-level rewards (``edit_distance``, ``length_penalty``, ``repetition_penalty``), the reading
of TRL's inputs, the registry, and a fuzz of every registered reward."""

import math
import random
import time

import pytest

from vqa_r1.recipes import load_config
from vqa_r1.rewards import (
    REWARD_RANGES,
    REWARDS,
    edit_distance_reward,
    get_rewards,
    length_penalty,
    make_length_penalty,
    repetition_penalty,
    resolve_reward,
)
from vqa_r1.rewards.edit import levenshtein
from vqa_r1.rewards.text import column, rows, score_rows

NEW = ["iou", "choice", "choice_partial", "edit_distance", "length_penalty", "repetition_penalty"]


# -- reading TRL's inputs ---------------------------------------------------------------------


def test_rows_and_columns():
    assert rows(None) == [] and rows("a") == ["a"] and rows(("a", "b")) == ["a", "b"]
    assert rows({"content": "x"}) == [{"content": "x"}] and rows(5) == [5]
    assert rows(iter(["a"])) == ["a"]
    assert column(None, 2) == [None, None] and column([1, 2, 3], 2) == [1, 2]
    assert column([1], 3) == [1, None, None] and column("t", 2) == ["t", "t"]


def test_score_rows_contains_every_failure():
    def score(_, value):
        if value == "raise":
            raise RuntimeError("boom")
        return value

    out = score_rows(["a"] * 6, [["raise", math.nan, math.inf, 7.0, "x", -3.0]], score, -1.0, 1.0)
    assert out == [0.0, 0.0, 0.0, 1.0, 0.0, -1.0]


# -- edit_distance ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, d", [("kitten", "sitting", 3), ("", "abc", 3), ("abc", "abc", 0), ("tac", "cat", 2)]
)
def test_levenshtein(a, b, d):
    assert levenshtein(a, b) == levenshtein(b, a) == d
    assert levenshtein(a, b, limit=d) == d
    if d:
        assert levenshtein(a, b, limit=d - 1) == d  # above the limit: limit + 1


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("<think>unscramble</think><answer>cat</answer>", 1.0),
        ("<answer>  CAT </answer>", 1.0),  # case and whitespace do not matter
        ("<answer>cbt</answer>", 0.5),  # d=1 from d(input)=2
        ("<answer>tac</answer>", 0.0),  # copying the input earns nothing
        ("<answer>tacx</answer>", 0.0),  # worse than the input
        ("<answer>xyzxyz</answer>", 0.0),
        ("Answer: cat", 1.0),
        ("<answer>cat", 1.0),  # unclosed answer block
        ("", 0.0),
    ],
)
def test_edit_distance_values(answer, expected):
    out = edit_distance_reward([answer], target=["cat"], input_text=["tac"])
    assert out == [pytest.approx(expected)]


def test_edit_distance_columns():
    comps = ["<answer>hello world</answer>"] * 4
    out = edit_distance_reward(
        comps,
        target=["Hello  World", "hello world", None, "<answer>hello world</answer>"],
        input_text=["olleh dlrow", "hello world", "olleh", "hlelo wrold"],
    )
    assert out == [1.0, 0.0, 0.0, 1.0]  # input already right -> 0; no target -> 0
    assert edit_distance_reward(comps[:1], solution=["hello world"], input_text=["hlelo"]) == [1.0]
    assert edit_distance_reward(comps[:1], target=["hello world"]) == [0.0]  # no input: no gate
    assert edit_distance_reward(comps, target="hello world", input_text="hlelo world") == [1.0] * 4
    # a one-element column is one row, not a value for every row
    assert edit_distance_reward(comps[:2], target=["hello world"], input_text="hlelo") == [1.0, 0.0]


def test_edit_distance_long_strings_are_capped_and_fast():
    long = "ab" * 50_000
    start = time.perf_counter()
    out = edit_distance_reward(
        [f"<answer>{long}</answer>", long, "<answer>" + "é" * 100_000],
        target=[long[::-1]] * 3,
        input_text=["z" * 100_000] * 3,
    )
    assert time.perf_counter() - start < 0.5
    assert len(out) == 3 and all(0.0 <= v <= 1.0 for v in out)


# -- penalties --------------------------------------------------------------------------------


def words(n):
    return " ".join(f"w{i}" for i in range(n))


def test_length_penalty_factory():
    ten = make_length_penalty(10)
    assert ten.__name__ == "length_penalty_10" and "10 words" in ten.__doc__
    assert length_penalty.__name__ == "length_penalty"
    assert ten([words(0), words(10), words(15), words(20), words(100)]) == [
        0.0,
        0.0,
        -0.5,
        -1.0,
        -1.0,
    ]
    # a dataset column overrides the limit row by row; a bad value falls back to the factory's
    assert ten([words(15)] * 4, length_limit=[30, 5, -2, "x"]) == [0.0, -1.0, -0.5, -0.5]
    assert length_penalty([words(200), words(300)]) == [0.0, -0.5]
    for bad in [0, -1, math.nan, math.inf, "10", None, True]:
        with pytest.raises(ValueError):
            make_length_penalty(bad)


def test_repetition_penalty_values():
    out = repetition_penalty(
        ["", "a b c", "a b c d", "a b c d a b c d", "A b c d a B c D", "a b c d e a b c d"]
    )
    assert out == pytest.approx([0.0, 0.0, 0.0, -1 / 5, -1 / 5, -1 / 6])
    loop = repetition_penalty(["go left now ok " * 1000])[0]
    assert loop == pytest.approx(-(4000 - 7) / (4000 - 3))
    assert repetition_penalty([words(500)]) == [0.0]


def test_penalties_on_huge_text():
    start = time.perf_counter()
    out = repetition_penalty(["x " * 100_000, "é" * 100_000]) + length_penalty(["y " * 100_000])
    assert time.perf_counter() - start < 0.5
    assert out[0] < -0.99 and out[1] == 0.0 and out[2] == -1.0


# -- registry and config ----------------------------------------------------------------------


def test_new_rewards_registered_and_resolvable():
    assert set(NEW) <= set(REWARDS) and set(REWARDS) == set(REWARD_RANGES)
    fns = get_rewards(NEW)
    assert fns == [REWARDS[name] for name in NEW] == [resolve_reward(name) for name in NEW]
    assert len({fn.__name__ for fn in REWARDS.values()}) == len(REWARDS)  # TRL's metric names


def test_config_accepts_new_names():
    config = load_config(
        "grpo", "tiny-qwen2.5-vl", None, ["train.reward_funcs=[choice,iou,format]"]
    )
    assert config.train.reward_funcs == ["choice", "iou", "format"]


# -- every registered reward against junk -----------------------------------------------------

BIG = 100_000
JUNK = [
    None,
    0,
    -7,
    2.5,
    float("nan"),
    float("inf"),
    True,
    b"bytes",
    {},
    {"role": "assistant", "content": "<answer>A</answer>"},
    [],
    [{"content": None}],
    [[1, 2], {"content": [{"text": None}, {"image": 1}, "junk"]}],
    [{"role": "assistant", "content": [{"type": "text", "text": "<answer>cat</answer>"}]}],
    "",
    " ",
    "\x00\ufffd",
    "日本語 🙂 Ω ≠ ∞",
    "<think>a</think><answer>[0, 0, 10, 10] cat</answer>",
    "<answer>" * 5000,
    "a" * BIG,
    "word " * (BIG // 5),
    "[1, 2, 3, 4] " * (BIG // 13),
    '[{"bbox_2d": [-1e308, nan, inf, 1e999], "label": 5}]' * 1000,
]

COLUMN_JUNK = [
    None,
    5,
    "cat",
    {},
    [],
    [None],
    [[0, 0, 10, 10]],
    [[[0, 0, 10, 10], [1, 2, 3, 4]]],
    [[["x"] * 4, [math.nan] * 4, [1e300, -1e300, 0, 0], [-5, -5, -1, -1]]],
    [{"bbox": 1}, "A", 3, [None, [None]]],
    [["cat", None, 3, {}]],
    JUNK,
]


def random_completion(rng):
    if rng.random() < 0.5:
        return rng.choice(JUNK)
    pool = [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "A",
        "B, C",
        "[",
        "]",
        "(",
        ")",
        ",",
        "1",
        "-2.5",
        "1e400",
        "nan",
        "cat",
        "tac",
        " ",
        "\n",
        "{",
        "}",
        '"bbox_2d":',
        "🙂",
    ]
    return "".join(rng.choice(pool) for _ in range(rng.randrange(80)))


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_every_reward_survives_junk(name):
    fn, (low, high) = REWARDS[name], REWARD_RANGES[name]
    rng = random.Random(name)
    start = time.perf_counter()
    for trial in range(120):
        comps = JUNK if trial == 0 else [random_completion(rng) for _ in range(rng.randrange(6))]
        kwargs = {
            key: rng.choice(COLUMN_JUNK)
            for key in [
                "solution",
                "gt_boxes",
                "gt_box_labels",
                "target",
                "input_text",
                "length_limit",
                "reasoning",
            ]
            if rng.random() < 0.8
        }
        out = fn(prompts=None, completions=comps, **kwargs)
        assert isinstance(out, list) and len(out) == len(comps)
        assert all(isinstance(v, float) and math.isfinite(v) and low <= v <= high for v in out)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("name", sorted(REWARDS))
@pytest.mark.parametrize("completions", [None, "one string", (), ["a"] * 3])
def test_every_reward_odd_completion_containers(name, completions):
    out = REWARDS[name](completions=completions, solution=["A"])
    assert len(out) == {type(None): 0, str: 1, tuple: 0, list: 3}[type(completions)]

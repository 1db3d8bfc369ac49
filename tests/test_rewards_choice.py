"""``choice`` and ``choice_partial``: sets of option letters, exact and with partial credit."""

import math
import random
import time

import pytest

from vqa_r1.rewards import choice_partial_reward, choice_reward


@pytest.mark.parametrize(
    "completion, solution, exact, partial",
    [
        ("<think>..</think><answer>A</answer>", "A", 1.0, 1.0),
        ("<answer>A, C</answer>", "<answer> C,A </answer>", 1.0, 1.0),
        ("<answer>(A) and (C)</answer>", "A C", 1.0, 1.0),
        ("<answer>A</answer>", "A, C", 0.0, 0.5),  # a correct subset earns its share
        ("<answer>A, B, C</answer>", "A, C, D", 0.0, 0.0),  # a wrong letter: nothing
        ("<answer>A, B, C, D, E</answer>", "A, C", 0.0, 0.0),  # hedging earns nothing
        ("<answer>B</answer>", "A", 0.0, 0.0),
        ("Answer: B", "B", 1.0, 1.0),
        ("<answer></answer>", "A", 0.0, 0.0),
        ("<answer>the cat</answer>", "the dog", 0.0, 0.0),  # no letters on either side
        ("", "", 0.0, 0.0),
        ("<answer>A</answer>", None, 0.0, 0.0),
        ("<answer>A, B</answer>", ["A", "B"], 1.0, 1.0),  # a list solution reads as its letters
    ],
)
def test_choice_values(completion, solution, exact, partial):
    assert choice_reward([completion], solution=[solution]) == [exact]
    assert choice_partial_reward([completion], solution=[solution]) == [pytest.approx(partial)]


def test_partial_thirds():
    comps = ["<answer>A</answer>", "<answer>A, B</answer>", "<answer>A, B, C</answer>"]
    got = choice_partial_reward(comps, solution=["A, B, C"] * 3)
    assert got == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_conversational_and_mismatched_columns():
    conv = [
        [{"role": "assistant", "content": [{"type": "text", "text": "<answer>B</answer>"}]}],
        [{"role": "assistant", "content": "<answer>A</answer>"}],
        "<answer>C</answer>",
    ]
    assert choice_reward(conv, solution=["B", "B"]) == [1.0, 0.0, 0.0]
    assert choice_reward(conv, solution=["B", "A", "C", "D", "E"]) == [1.0, 1.0, 1.0]
    assert choice_reward(conv) == [0.0, 0.0, 0.0]
    assert choice_reward(conv, solution="B") == [1.0, 0.0, 0.0]  # one value: every row
    assert choice_partial_reward(None, solution=["A"]) == []


JUNK = [
    None,
    0,
    -1,
    3.5,
    float("nan"),
    {"content": "A"},
    {"role": "assistant"},
    [{"content": None}],
    [[1, [2, {"text": "A"}]]],
    [{"content": [{"text": None}, "B", 5]}],
    "",
    "\x00",
    "Ä Ö Ü ß 🙂 (A)",
    "<answer>" + "A, " * 40_000,
    "A" * 100_000,
    "x " * 50_000 + "<answer>A</answer>",
    b"<answer>A</answer>",
]


@pytest.mark.parametrize("fn", [choice_reward, choice_partial_reward])
def test_adversarial(fn):
    for solution in [None, "A", ["A"] * len(JUNK), [None, 3, {}, [], "Z"], JUNK, 17]:
        start = time.perf_counter()
        out = fn(JUNK, solution=solution)
        assert time.perf_counter() - start < 0.5
        assert len(out) == len(JUNK)
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in out)


@pytest.mark.parametrize("fn", [choice_reward, choice_partial_reward])
def test_fuzz(fn):
    rng = random.Random(3)
    alphabet = list("ABCDEabcde ,;()<>/\n") + ["<answer>", "</answer>", "Answer:", "🙂"]
    for _ in range(300):
        n = rng.randrange(0, 5)
        comps = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(n)]
        sols = [rng.choice([None, "A", "A, C", "", 5, "B D E"]) for _ in range(rng.randrange(6))]
        out = fn(comps, solution=sols)
        assert len(out) == n and all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in out)
        if fn is choice_reward:
            assert set(out) <= {0.0, 1.0}

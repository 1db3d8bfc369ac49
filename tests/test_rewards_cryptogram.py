"""The cryptogram rewards: r1_vlm's gates, the copy hack the gate closes, partial credit in order,
and never raising on junk."""

import math
import random
import time

import pytest

from vqa_r1.rewards import REWARD_RANGES, REWARDS, get_rewards
from vqa_r1.rewards.cryptogram import (
    block,
    cryptogram_correct_reward,
    cryptogram_correct_ungated_reward,
    cryptogram_decoding_reward,
    cryptogram_decoding_ungated_reward,
    cryptogram_format_reward,
    spaced,
)

NAMES = [
    "cryptogram_format",
    "cryptogram_decoding",
    "cryptogram_decoding_ungated",
    "cryptogram_correct",
    "cryptogram_correct_ungated",
    "cryptogram_answer_partial",
]
PLAIN = "cat dog"
CODED = "x q z _ r b m"  # c->x a->q t->z d->r o->b g->m


def done(chars: str, answer: str) -> str:
    return f"<think> I look up each letter. <chars> {chars} </chars> </think>\n<answer> {answer} </answer>"


def scores(completion, decoded=PLAIN, coded=CODED):
    return {
        name: REWARDS[name]([completion], decoded_message=[decoded], coded_message=[coded])[0]
        for name in NAMES
    }


def test_registered_without_collisions():
    assert set(NAMES) <= set(REWARDS) and set(REWARDS) == set(REWARD_RANGES)
    assert get_rewards(NAMES) == [REWARDS[n] for n in NAMES]
    assert len({fn.__name__ for fn in REWARDS.values()}) == len(REWARDS)
    assert all(REWARD_RANGES[n] == (0.0, 1.0) for n in NAMES)


def test_the_right_decoding_earns_everything():
    assert scores(done("c a t _ d o g", "cat dog")) == dict.fromkeys(NAMES, 1.0)
    # white space inside the blocks is collapsed; the coded message's spacing does not matter
    assert scores(done("c  a t _ d\no g", " cat  dog "), coded="xqz_rbm") == dict.fromkeys(
        NAMES, 1.0
    )


def test_copying_the_coded_message_is_the_hack_the_gate_closes():
    """The blog's finding: a decoding reward without the gate pays for echoing the code (every
    separator and underscore matches), so GRPO learns to copy; the gated rewards pay nothing."""
    hack = done(CODED, "cat dog")
    got = scores(hack)
    assert got["cryptogram_decoding"] == 0.0 and got["cryptogram_correct"] == 0.0
    assert got["cryptogram_decoding_ungated"] == pytest.approx(1 - 6 / 13)  # 6 letters differ
    assert got["cryptogram_correct_ungated"] == 1.0  # a right answer with no decoding behind it
    assert got["cryptogram_format"] == 1.0
    # on a three-word message the copy earns more than half the ungated reward
    three = scores(done("x q z _ r b m _ x q z", "cat dog cat"), "cat dog cat", "xqz_rbm_xqz")
    assert three["cryptogram_decoding"] == 0.0 and three["cryptogram_decoding_ungated"] > 0.5
    # near-copies (one letter decoded) are still closer to the code: nothing
    assert scores(done("c q z _ r b m", "cqz rbm"))["cryptogram_decoding"] == 0.0


def test_partial_decodings_earn_in_order_of_quality():
    decodings = [
        "x q z _ r b m",  # the copy
        "c q z _ r b m",  # 1 of 6 letters
        "c a t _ r b m",  # 3 of 6: as near the answer as the code, which pays (r1_vlm: strict <)
        "c a t _ d b m",
        "c a t _ d o m",
        "c a t _ d o g",
    ]
    gated = [
        scores(done(d, d.replace(" ", "").replace("_", " ")))["cryptogram_decoding"]
        for d in decodings
    ]
    ungated = [scores(done(d, "x"))["cryptogram_decoding_ungated"] for d in decodings]
    assert gated[:2] == [0.0, 0.0] and 0.0 < gated[2] < gated[3] < gated[4] < gated[5] == 1.0
    assert ungated == sorted(ungated) and len(set(ungated)) == len(ungated)
    assert gated[2:] == pytest.approx(ungated[2:])  # above the gate the two agree
    # the normalisation: 1 - d / max(len(truth), len(chars))
    assert gated[4] == pytest.approx(1 - 1 / 13)


def test_correct_needs_full_decoding_credit():
    # the right answer after a decoding with one slip: ungated pays, gated does not
    slip = done("c a t _ d o x", "cat dog")
    assert scores(slip)["cryptogram_correct"] == 0.0
    assert scores(slip)["cryptogram_correct_ungated"] == 1.0
    # a right decoding and a wrong answer: no correctness either way
    wrong = done("c a t _ d o g", "cat dig")
    got = scores(wrong)
    assert got["cryptogram_decoding"] == 1.0
    assert got["cryptogram_correct"] == got["cryptogram_correct_ungated"] == 0.0
    # comparisons are exact (case-sensitive, as r1_vlm's)
    assert scores(done("c a t _ d o g", "CAT DOG"))["cryptogram_correct"] == 0.0


def test_partial_answer_credit_is_gated_on_the_exact_decoding():
    right = "c a t _ d o g"
    partial = [
        scores(done(right, answer))["cryptogram_answer_partial"]
        for answer in ["cat dog", "cat dig", "cat do", "cad dig"]
    ]
    assert partial[0] == 1.0 and 1.0 > partial[1] >= partial[2] > partial[3] > 0.0
    assert partial[1] == pytest.approx(1 - 1 / 7)
    # a slip in the decoding: no partial answer credit, even for the right answer
    assert scores(done("c a t _ d o x", "cat dog"))["cryptogram_answer_partial"] == 0.0
    # the <chars> form copied into the answer, underscores or other symbols: nothing
    for answer in (right, "cat_dog", "cat dog!"):
        assert scores(done(right, answer))["cryptogram_answer_partial"] == 0.0, answer
    # spaced letters without the underscore are nearer the message than the <chars> form: paid,
    # as r1_vlm pays them, below a one-letter slip
    spaced_out = scores(done(right, "c a t d o g"))["cryptogram_answer_partial"]
    assert spaced_out == pytest.approx(1 - 4 / 11) and spaced_out < partial[1]
    # the copy hack earns nothing here either
    assert scores(done(CODED, "cat dog"))["cryptogram_answer_partial"] == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        "<chars> c a t _ d o g </chars>\n<answer> cat dog </answer>",  # no think block
        "<think> <chars> c a t _ d o g </chars> </think>",  # no answer
        "<think> </think> <chars> c a t _ d o g </chars> <answer> cat dog </answer>",  # outside
        "<think> <chars> </chars> </think> <answer> cat dog </answer>",  # empty chars
        "<think> <chars> c a t </chars> </think> <answer> </answer>",  # empty answer
        "<think><chars>a</chars><chars>b</chars></think><answer>a</answer>",  # two chars
        "<think><chars>a</chars></think><answer>a</answer><answer>b</answer>",  # two answers
        "<think><think><chars>a</chars></think><answer>a</answer>",
        "hello <think><chars>a</chars></think><answer>a</answer>",  # text before
        "<think><chars>a</chars></think><answer>a</answer> bye",  # text after
        "<think><chars>a</chars></think><answer>a",  # unclosed
        "<think><chars>a</chars></think><answer>a</answer>" + " " * 100_001,  # too long
    ],
)
def test_format_refuses(completion):
    assert cryptogram_format_reward([completion]) == [0.0]


def test_format_accepts_r1_vlm_shape():
    text = (
        "<think>\nr -> v\nh -> i\n<chars> v i s i o n </chars>\n</think>\n<answer>vision</answer>"
    )
    assert cryptogram_format_reward([text, done("a", "a"), f"  {done('a', 'a')}\n"]) == [1.0] * 3
    # conversational completions (TRL's other shape)
    message = [{"role": "assistant", "content": [{"type": "text", "text": done("a", "a")}]}]
    assert cryptogram_format_reward([message]) == [1.0]


@pytest.mark.parametrize(
    "completion, decoding, correct, correct_ungated",
    [
        ("c a t _ d o g cat dog", 0.0, 0.0, 0.0),  # no tags at all
        ("<chars> c a t _ d o g", 0.0, 0.0, 0.0),  # unclosed
        ("</chars> c a t _ d o g <chars>", 0.0, 0.0, 0.0),  # closed before opened
        # a hedge, the copy and the decoding in two blocks, is read as neither; the answer alone
        # still earns the ungated correctness
        (
            "<chars>x q z _ r b m</chars><chars>c a t _ d o g</chars><answer>cat dog</answer>",
            0,
            0,
            1,
        ),
        # two answers: the decoding is read, the answer is not
        ("<chars>c a t _ d o g</chars><answer>cat dog</answer><answer>x</answer>", 1, 0, 0),
    ],
)
def test_missing_or_several_blocks(completion, decoding, correct, correct_ungated):
    got = scores(completion)
    assert got["cryptogram_decoding"] == got["cryptogram_decoding_ungated"] == decoding
    assert got["cryptogram_correct"] == correct
    assert got["cryptogram_correct_ungated"] == correct_ungated


def test_block_and_spaced():
    assert block("a <chars>  x  y </chars> b", "chars") == "x y"
    assert block("<chars>a</chars><chars>b</chars>", "chars") is None
    assert block("</chars>a<chars>", "chars") is None and block("", "chars") is None
    assert spaced("xqz_rbm") == spaced("x q z _ r b m") == "x q z _ r b m"


def test_columns_missing_or_from_the_solution():
    text = done("c a t _ d o g", "cat dog")
    # no coded message: the gate cannot be checked, so the gated rewards pay nothing
    assert cryptogram_decoding_reward([text], decoded_message=[PLAIN]) == [0.0]
    assert cryptogram_correct_reward([text], decoded_message=[PLAIN]) == [0.0]
    # no decoded_message: the answer block of the solution column is the message
    solution = ["<answer> cat dog </answer>"]
    assert cryptogram_decoding_reward([text], solution=solution, coded_message=[CODED]) == [1.0]
    assert cryptogram_correct_ungated_reward([text], solution=solution) == [1.0]
    assert cryptogram_decoding_ungated_reward([text]) == [0.0]
    # short columns pad with None, a single value broadcasts
    out = cryptogram_decoding_reward([text, text], decoded_message=PLAIN, coded_message=[CODED])
    assert out == [1.0, 0.0]


HUGE = "c a t _ d o g " * 20_000


@pytest.mark.parametrize("name", NAMES)
def test_never_raises_and_stays_fast(name):
    fn = REWARDS[name]
    junk = [
        None,
        0,
        math.nan,
        b"<chars>",
        {},
        [],
        [{"content": None}],
        "",
        "\x00\ufffd",
        "日本語 🙂 <chars> ∞ </chars> <answer> ≠ </answer>",
        "<chars>" * 5000,
        f"<think><chars>{HUGE}</chars></think><answer>{HUGE}</answer>",
        done(HUGE, "cat dog"),
        done("c a t _ d o g", "cat dog"),
    ]
    columns = [None, 5, "cat", [], [None], [{}], ["日本語 🙂"], [HUGE], [math.inf], junk]
    rng = random.Random(name)
    start = time.perf_counter()
    for trial in range(60):
        comps = junk if trial == 0 else rng.sample(junk, rng.randrange(len(junk)))
        kwargs = {
            key: rng.choice(columns)
            for key in ("decoded_message", "coded_message", "solution")
            if rng.random() < 0.8
        }
        out = fn(prompts=None, completions=comps, **kwargs)
        assert len(out) == len(comps)
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in out)
    assert time.perf_counter() - start < 10


def test_huge_decodings_score_zero_quickly():
    start = time.perf_counter()
    assert scores(done(HUGE, "cat dog"), decoded=PLAIN)["cryptogram_decoding_ungated"] == 0.0
    assert scores(done("c a t", "cat"), decoded=HUGE, coded=HUGE)["cryptogram_decoding"] == 0.0
    assert time.perf_counter() - start < 1.0

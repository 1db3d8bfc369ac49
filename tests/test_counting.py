"""Counting (issue 20): the number and r1v_count answer rules, the count reward, `vqa-r1 score` on
R1-V's counting logs, the SuperCLEVR and R1-V training formats, and the CLEVR-CoGenT stand-in."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from vqa_r1.answers import extract_answer, is_correct, label_of, read_number
from vqa_r1.eval.scoring import read_responses, score_responses
from vqa_r1.rewards import REWARDS, count_reward

R1V = "r1v_count"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think> I see four. </think> <answer> 3 </answer>", "3"),
        ("<answer>3 objects</answer> Hope this helps, 5 stars", "3"),
        ("<answer>\n    10\n    </answer>", "10"),
        ("There are three objects.", "3"),
        ("<answer> twenty-one </answer>", "21"),
        ("<answer>2 + 3 = 5</answer>", "5"),
        ("Answer: 4", "4"),
        ("<answer> 3.0 </answer>", "3"),
        ("<answer> 007 </answer>", "7"),
        ("<answer> none </answer>", "0"),
        ("<answer> many </answer>", ""),
        ("<answer>", ""),
        ("", ""),
        ("someone alone", ""),
    ],
)
def test_number_rule_reads_the_final_count(text, expected):
    assert extract_answer(text, "number") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # R1-V's extract_number_answer: first <answer>\s*(\d+)\s*</answer>, case-sensitive, int()
        ("<think>\nA. 10\n</think>\n<answer>\n10\n</answer>", "10"),
        ("<answer>4</answer> <answer>5</answer>", "4"),  # the first block, not the last
        ("<answer>3 objects</answer>", ""),  # anything besides digits: no match
        ("<answer>three</answer>", ""),
        ("<answer>3.0</answer>", ""),
        ("<answer>-3</answer>", ""),
        ("<answer>3, 4</answer><answer>6</answer>", "6"),  # a block that fails is skipped
        ("<ANSWER>3</ANSWER>", ""),
        ("<answer>3", ""),  # unclosed
        ("There are 3 objects.", ""),  # no block
        ("<answer> 007 </answer>", "7"),
        ("<answer>" + "9" * 5000 + "</answer>", "9" * 5000),  # int() refuses; no exception
    ],
)
def test_r1v_rule_keeps_their_quirks(text, expected):
    assert extract_answer(text, R1V) == expected


def test_number_labels_and_correctness():
    for reference in (4, "4", " <answer> 4 </answer> ", 4.0, "four"):
        assert label_of(reference, "number") == "4"
    assert label_of(4, R1V) == "4"
    assert label_of(True, "number") == "" and label_of(None, "number") == ""
    assert is_correct("<answer> 4 </answer>", 4, R1V)
    assert not is_correct("<answer> 4 </answer>", None, "number")
    assert read_number("9" * 30_000) == "9" * 10_000  # a huge final answer is read from its end


def test_count_reward_never_raises_and_stays_in_range():
    assert "count" in REWARDS
    garbage = [
        None, "", "<answer>", "<answer> 3 </answer>", 3, ["<answer> 3 </answer>"],
        [{"role": "assistant", "content": "<answer> three </answer>"}], {"x": 1}, b"\xff",
        "<answer>" + "9" * 50_000 + "</answer>", "1e309", float("nan"), object(),
    ]  # fmt: skip
    solutions = ["<answer> 3 </answer>", None, 3, float("inf"), "x", [], "<answer> 3 </answer>"]
    for solution in (solutions, None, "3", 3, [None]):
        out = count_reward(garbage, solution=solution)
        assert len(out) == len(garbage)
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in out)
    out = count_reward(
        ["<answer> 3 </answer>", "<answer>three</answer>", "<answer>4</answer>"], solution=[3] * 3
    )
    assert out == [1.0, 1.0, 0.0]
    r1v = count_reward(["<answer>3</answer>", "<answer>three</answer>"], [3, 3], answer_rule=R1V)
    assert r1v == [1.0, 0.0]
    assert count_reward(None) == [] and count_reward("3", solution="3") == [1.0]


def r1v_log(path, items):
    """A file in R1-V's log format (test_qwen2vl_counting_superclevr.py's json.dump)."""
    results = []
    correct = 0
    for i, (truth, output) in enumerate(items):
        extracted = extract_answer(output, R1V)
        extracted = int(extracted) if extracted else None
        correct += extracted is not None and extracted == truth
        row = {
            "image_path": f"/home/someone/images/superCLEVR_new_{25000 + i:06d}.png",
            "question": "How many different items are there in the image?",
            "ground_truth": truth,
        }
        results.append(
            {
                "question": row,
                "ground_truth": truth,
                "model_output": output,
                "extracted_answer": extracted,
            }
        )
    accuracy = correct / len(items) * 100
    path.write_text(json.dumps({"accuracy": accuracy, "results": results}, indent=2))
    return accuracy


# eight items: five right under R1-V's rule; the number rule reads items 4 and 5 too but takes
# item 6's last block (8)
LOG_ITEMS = [
    (4, "<think>\n    There are four objects.\n    </think>\n<answer>\n    4\n    </answer>"),
    (9, "<think>\nA. 10\n</think>\n<answer>\n10\n</answer>"),
    (10, "<answer>10</answer>"),
    (3, "<answer>3</answer>"),
    (5, "<think> five </think> <answer>5 items</answer>"),  # number: right; R1-V: nothing
    (6, "There are six objects."),  # number: right; R1-V: nothing
    (7, "<answer>7</answer><answer>8</answer>"),
    (2, "<answer>2</answer>"),
]


def test_score_reproduces_an_r1v_log(tmp_path):
    path = tmp_path / "counting_results_superclevr_8_model.json"
    published = r1v_log(path, LOG_ITEMS)
    assert published == 62.5
    records = read_responses(path)
    assert records[0]["answer_type"] == "number" and records[0]["true_response"] == 4
    scores = score_responses(records, R1V)
    assert (scores["n"], scores["correct"]) == (8, 5)
    assert scores["accuracy"] * 100 == published == scores["published_accuracy"] * 100
    assert scores["published_disagreements"] == 0 and scores["unparsed"] == 2
    robust = score_responses(records, "robust")
    assert (robust["answer_rule"], robust["correct"]) == ("number", 6)


def test_score_cli_on_r1v_logs_prints_the_published_accuracy(tmp_path):
    base = tmp_path / "base.json"
    grpo = tmp_path / "grpo.json"
    r1v_log(base, LOG_ITEMS)
    r1v_log(grpo, [(t, f"<answer>{t}</answer>") for t, _ in LOG_ITEMS])
    done = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(base), str(grpo), "--answer-rule", R1V,
         "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert result[str(base)]["accuracy"] == 0.625 and result[str(grpo)]["accuracy"] == 1.0
    done = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(base), "--answer-rule", R1V,
         "--show-differences"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "accuracy=0.6250" in done.stdout and "published accuracy=0.6250" in done.stdout
    assert "item 4: number read '5' (right), r1v_count read '' (wrong)" in done.stdout


def test_counting_rules_refuse_true_false_records():
    from vqa_r1.errors import UserError

    with pytest.raises(UserError, match="reads counts"):
        score_responses([{"true_response": "True", "predicted_response": "True"}], R1V)

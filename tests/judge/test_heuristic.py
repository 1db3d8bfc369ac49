import json

import pytest
from judge_helpers import HUMAN, checks_file, cli, needs_study, responses_file, write_responses

from vqa_r1.judge.agreement import compute
from vqa_r1.judge.heuristic import judge, stance


@pytest.mark.parametrize(
    "reasoning, answer, aligns, kind",
    [
        ("The cup is on the left of the plate. Therefore, the cup is left of the plate.", "True", True, None),
        ("The cup is on the left of the plate. Therefore, the cup is left of the plate.", "False", False, "contradiction"),
        ("The plate is on the right. Therefore, the cup is not left of the plate.", "False", True, None),
        ("The statement that the cup is left of the plate is false.", "True", False, "contradiction"),
        ('The statement "The cup is left of the plate" is accurate.', "True", True, None),
        ("There is no visible plate, so it cannot be determined whether the cup is left of it.", "False", False, "contradiction"),
        ("There is no plate in the image at all, only a cup.", "True", False, "contradiction"),
        ("The cup sits to the right of the plate.", "True", False, "contradiction"),
        ("A dog runs in a park near a tree.", "True", False, "irrelevant"),
        ("", "True", False, "missing_detail"),
        ("The cup is left of the plate.", "Maybe", False, "other"),
    ],
)  # fmt: skip
def test_rules(reasoning, answer, aligns, kind):
    verdict = judge("The cup is left of the plate.", reasoning, answer)
    assert (verdict["aligns"], verdict["type"]) == (aligns, kind)
    assert verdict["why"]


def test_stance_on_odd_text_is_one_of_its_four_values():
    claim = "the cup is left of the plate"
    for text in ["", "...", "\n\n", "{}" * 1000, "NOT NOT NOT", "ünïcödé ✓"]:
        assert stance(text, claim) in (True, False, None, "empty"), text
    assert stance("", claim) == stance("\n\n", claim) == "empty"
    assert stance("NOT NOT NOT", claim) is False  # a bare negation reads as "does not hold"
    assert stance("The cup is right of the plate, so the statement is false.", claim) is False
    assert stance("The cup is left of the plate, so the statement is true.", claim) is True


@needs_study
def test_agreement_with_the_human_labels_is_recorded(tmp_path, capsys, no_key_env):
    """The heuristic is a floor, not a judge: this pins its measured agreement so that a change
    to the rules shows up here (and in alignment_judge/RESULTS.md)."""
    # the human-labelled items are test indices 0-24 of base and grpo
    out = tmp_path / "heuristic.json"
    code = cli("judge", "run", "--backend", "heuristic", "--limit", "25",
               "--responses", f"base={responses_file('base', 'test')}",
               "--responses", f"grpo={responses_file('grpo', 'test')}",
               "--questions", checks_file("test"), "--out", out)  # fmt: skip
    assert code == 0
    result = compute(out, HUMAN)
    assert result.n == 50
    assert result.agreement == pytest.approx(0.74)
    assert result.kappa == pytest.approx(0.2664, abs=1e-3)
    records = json.loads(out.read_text())
    assert {r["judge_model"] for r in records} == {"heuristic"}


def test_heuristic_backend_needs_no_key_and_makes_no_request(tmp_path, server, no_key_env):
    responses = write_responses(tmp_path / "r.json", 5)
    out = tmp_path / "out.json"
    assert cli("judge", "run", "--backend", "heuristic", "--responses", f"m={responses}",
               "--out", out) == 0  # fmt: skip
    assert len(json.loads(out.read_text())) == 5
    assert server.count() == 0


@pytest.mark.parametrize(
    "claim, reasoning, holds",
    [
        ("The yellow triangle is right of the blue circle.",
         "left to right: yellow, blue. top to bottom: blue, yellow. right: blue. subject: yellow.",
         False),
        ("The red square is right of the blue square.",
         "left to right: blue, red. top to bottom: red, blue. right: red. subject: red.", True),
        ("The purple square is above the blue triangle.",
         "left to right: blue, purple. top to bottom: purple, blue. top: purple. subject: purple.",
         True),
        ("The red square is left of the blue square.",  # the other end named: read the other way
         "left to right: blue, red. right: red. subject: red.", False),
    ],
)  # fmt: skip
def test_the_synthetic_layout_reasoning_is_read_by_its_verdict(claim, reasoning, holds):
    """The tiny models' reasoning ends "right: X. subject: Y." (data/synthetic.py): the claim holds
    when the object at the end it asks about is its subject. v1 read the subject's and the end's
    words as affirming, and called 190 of the demo base model's 400 answers contradictions."""
    assert stance(reasoning, claim) is holds
    assert judge(claim, reasoning, str(holds))["aligns"] is True
    assert judge(claim, reasoning, str(not holds))["type"] == "contradiction"

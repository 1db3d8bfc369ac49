import json

import pytest
from judge_helpers import HUMAN, checks_file, cli, needs_study

from vqa_r1.errors import UserError
from vqa_r1.judge.agreement import cohen_kappa, compute


def test_kappa_by_hand():
    # 10 items: both say aligned 6, both misaligned 2, disagree 2 (1 each way)
    pairs = [(True, True)] * 6 + [(False, False)] * 2 + [(True, False), (False, True)]
    # po = 0.8; p_judge = p_human = 0.7; pe = 0.49 + 0.09 = 0.58; kappa = 0.22 / 0.42
    assert cohen_kappa(pairs) == pytest.approx(0.22 / 0.42)
    assert cohen_kappa([(True, True)] * 5) is None  # chance agreement is total: undefined
    assert cohen_kappa([(True, False), (False, True)]) == pytest.approx(-1.0)
    assert cohen_kappa([]) is None


def test_items_match_by_index_and_model_in_any_order(tmp_path):
    judge = [
        {"index": 1, "model": "grpo", "aligns": False},
        {"index": 0, "model": "base", "aligns": True},
        {"index": 0, "model": "grpo", "aligns": True},
        {"index": 9, "model": "base", "aligns": True},  # no human label
        {"index": 2, "model": "base", "aligns": None, "status": "failed"},
    ]
    human = [
        {"index": 0, "model": "base", "human_aligns": "True", "aligns": False},
        {"index": 0, "model": "grpo", "human_aligns": "False", "aligns": True},
        {"index": 1, "model": "grpo", "human_aligns": "False", "aligns": True},
        {"index": 2, "model": "base", "human_aligns": "True", "aligns": True},
    ]
    (tmp_path / "j.json").write_text(json.dumps(judge))
    (tmp_path / "h.json").write_text(json.dumps(human))
    result = compute(tmp_path / "j.json", tmp_path / "h.json")
    assert result.n == 3  # the failed judge item is not compared
    assert result.confusion == {
        "aligned": {"aligned": 1, "misaligned": 0},
        "misaligned": {"aligned": 1, "misaligned": 1},
    }
    assert result.agreement == pytest.approx(2 / 3)
    assert (result.unmatched_judge, result.unmatched_human) == (1, 1)


def test_no_overlap_is_a_user_error(tmp_path):
    (tmp_path / "j.json").write_text(json.dumps([{"index": 0, "model": "a", "aligns": True}]))
    (tmp_path / "h.json").write_text(json.dumps([{"index": 0, "model": "b", "aligns": True}]))
    with pytest.raises(UserError, match="matches"):
        compute(tmp_path / "j.json", tmp_path / "h.json")


@needs_study
def test_study_llm_judges_against_the_50_human_labels(tmp_path, capsys):
    # o4-mini with the taxonomy prompt: 34 + 7 agreements of 50; judge says aligned 39 times,
    # humans 38 times: pe = 0.78 * 0.76 + 0.22 * 0.24
    assert cli("judge", "agreement", "--judge", checks_file("test"), "--human", HUMAN,
               "--format", "json") == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"n", "agreement", "kappa", "confusion"}
    expected_pe = 0.78 * 0.76 + 0.22 * 0.24
    assert (data["n"], data["agreement"]) == (50, pytest.approx(0.82))
    assert data["kappa"] == pytest.approx((0.82 - expected_pe) / (1 - expected_pe))
    assert data["confusion"]["misaligned"]["misaligned"] == 7
    # the simple-prompt judge whose verdicts sit in the human file itself
    assert cli("judge", "agreement", "--judge", HUMAN, "--human", HUMAN) == 0
    assert "agreement = 0.680" in capsys.readouterr().out

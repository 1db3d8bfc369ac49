import math

import pytest

from vqa_r1.metrics import classification_scores, weighted_prf, wilson_interval


def test_wilson_known_values():
    # the study's sft-valid-set scores.json: 286/340 correct
    assert wilson_interval(286, 340) == pytest.approx(
        (0.7985431834332446, 0.8761863875606448), abs=1e-12
    )
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35  # unlike Wald, not a zero-width interval
    assert wilson_interval(0, 0) == (0.0, 0.0)
    # all wrong / all right: the bound is exactly 0 / 1 (rounding gave 5.55e-17 at some n)
    assert all(wilson_interval(0, n)[0] == 0.0 for n in range(1, 1000))
    assert all(wilson_interval(n, n)[1] == 1.0 for n in range(1, 1000))


def test_weighted_prf_hand_computed():
    refs = ["true", "true", "true", "false"]
    preds = ["true", "true", "false", "false"]
    s = weighted_prf(refs, preds)
    # true: P=1, R=2/3, F=0.8 (support 3); false: P=0.5, R=1, F=2/3 (support 1)
    assert s["precision_weighted"] == pytest.approx(0.75 * 1 + 0.25 * 0.5)
    assert s["recall_weighted"] == pytest.approx(0.75 * 2 / 3 + 0.25 * 1)
    assert s["f1_weighted"] == pytest.approx(0.75 * 0.8 + 0.25 * 2 / 3)


def test_classification_scores_per_relation_and_unparsed():
    s = classification_scores(
        ["true", "false", "true"], ["true", "", "false"], ["left of", "above", "left of"]
    )
    assert s["accuracy"] == pytest.approx(1 / 3) and s["n"] == 3
    assert s["per_relation"]["left of"]["accuracy"] == 0.5
    assert s["per_relation"]["above"]["accuracy"] == 0.0
    with pytest.raises(ValueError):
        classification_scores(["true"], [])


def test_two_proportion_p_against_hand_computed_z():
    from vqa_r1.metrics import two_proportion_p

    # 120/200 vs 100/200: pooled 0.55, se = sqrt(0.55*0.45*(2/200)) = 0.049749, z = 2.0101
    assert two_proportion_p(120, 200, 100, 200) == pytest.approx(0.022210, abs=1e-5)
    # one-sided: the same difference the other way round is not significant
    assert two_proportion_p(100, 200, 120, 200) == pytest.approx(1 - 0.022210, abs=1e-5)
    assert two_proportion_p(50, 100, 50, 100) == pytest.approx(0.5)
    assert two_proportion_p(10, 10, 0, 10) < 1e-4


def test_one_sided_binomial_p_exact_values():
    from math import comb

    from vqa_r1.metrics import one_sided_binomial_p

    # P(X >= 8), X ~ Bin(10, 0.5) = (45 + 10 + 1) / 1024
    assert one_sided_binomial_p(8, 10) == pytest.approx(56 / 1024, rel=1e-12)
    assert one_sided_binomial_p(0, 10) == 1.0
    exact = sum(comb(400, i) for i in range(230, 401)) / 2**400
    assert one_sided_binomial_p(230, 400) == pytest.approx(exact, rel=1e-9)
    assert one_sided_binomial_p(3, 4, 0.25) == pytest.approx(4 * 0.25**3 * 0.75 + 0.25**4)
    with pytest.raises(ValueError):
        one_sided_binomial_p(5, 4)


def test_trend_test_matches_a_hand_computation():
    from vqa_r1.metrics import trend_test

    # levels 0, 1, 2 with 90/100, 80/100, 60/100 correct: pooled p = 230/300, mean x = 1
    # T = sum (x - 1) * k = -90 + 60 = -30; var = p (1 - p) * 200
    result = trend_test([0, 1, 2], [90, 80, 60], [100, 100, 100])
    p = 230 / 300
    z = -30 / math.sqrt(p * (1 - p) * 200)
    assert result["z"] == pytest.approx(z)
    assert result["p"] == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    assert result["p"] < 1e-5
    flat = trend_test([0, 1, 2], [50, 50, 50], [100, 100, 100])
    assert flat["z"] == pytest.approx(0.0) and flat["p"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        trend_test([0], [1], [2])


def test_two_sided_doubles_the_smaller_tail():
    from vqa_r1.metrics import two_sided

    assert two_sided(0.01) == pytest.approx(0.02)
    assert two_sided(0.99) == pytest.approx(0.02)
    assert two_sided(0.5) == 1.0


def test_holm_adjusts_a_family_step_down_and_keeps_missing_tests_missing():
    from vqa_r1.metrics import holm

    # sorted 0.01, 0.03, 0.04 of m = 3: x3, x2, x1 -> 0.03, 0.06, 0.04 -> monotone 0.06
    assert holm([0.04, 0.01, None, 0.03]) == pytest.approx([0.06, 0.03, None, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([None]) == [None] and holm([]) == []
    raw = [0.001, 0.2, 0.03]
    assert all(a >= p for a, p in zip(holm(raw), raw, strict=True))  # never below the raw p


def test_grounding_scores_count_entities_matched_at_half_overlap():
    """Evaluation's grounding (issue 31, item 6): the iou reward's score averaged over items, and
    the share of ground-truth entities a written box matches at IoU >= 0.5."""
    from vqa_r1.eval.scoring import grounding_scores

    records = [
        {"predicted_response": "[0, 0, 10, 10] car then [20, 20, 30, 30] sign <answer> A </answer>",
         "gt_boxes": [[0, 0, 10, 10], [20, 20, 30, 40]], "gt_box_labels": ["car", "sign"]},
        {"predicted_response": "<answer> B </answer>",  # wrote no box
         "gt_boxes": [[0, 0, 5, 5]], "gt_box_labels": ["person"]},
        {"predicted_response": "[1, 1, 2, 2]", "gt_boxes": None},  # no truth: not counted
    ]  # fmt: skip
    scores = grounding_scores(records)
    assert (scores["items"], scores["entities"], scores["boxes_written"]) == (2, 3, 2)
    assert scores["grounded"] == pytest.approx(2 / 3)  # car 1.0, sign 0.5 (counts), person none
    assert scores["box_iou"] == pytest.approx(((1.0 + 0.5) / 2 + 0.0) / 2)
    # why boxes fail: both written boxes named right and in place (the sign at IoU 0.5)
    assert (scores["named"], scores["placed_when_named"]) == (1.0, 1.0)
    wrong = [{"predicted_response": "[0, 0, 10, 10] red cube [20, 20, 30, 40] sign",
              "gt_boxes": [[0, 0, 10, 10], [20, 20, 30, 40]], "gt_box_labels": ["car", "sign"]}]  # fmt: skip
    assert (grounding_scores(wrong)["named"], grounding_scores(wrong)["placed_when_named"]) == (
        0.5,
        1.0,
    )  # the cube's box is the car's, but no name agrees: not grounded
    assert grounding_scores(wrong)["grounded"] == 0.5
    assert grounding_scores([{"predicted_response": "x"}]) is None


def test_vqa_r1_score_prints_the_grounding_of_responses_with_boxes(tmp_path, capsys):
    """`vqa-r1 score FILE` on DrivingVQA responses: the grounding beside the accuracy (box IoU,
    entities grounded, boxes named right and placed when named), in its table and --json."""
    import json

    from vqa_r1.cli import main

    def record(box: str, answer: str) -> dict:
        return {"predicted_response": f"<think> {box} red cube </think> <answer> {answer} </answer>",
                "true_response": "<answer> A </answer>", "answer_type": "choice",
                "gt_boxes": [[0, 0, 10, 10]], "gt_box_labels": ["red cube"]}  # fmt: skip

    path = tmp_path / "generated_responses.json"
    path.write_text(json.dumps([record("[0, 0, 10, 10]", "A"), record("[50, 50, 60, 60]", "B")]))
    assert main(["score", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "grounding: box_iou=0.500 grounded=0.500 of 2 entities; boxes written 2, named 1.000, "
        "placed when named 0.500"
    ) in out
    assert main(["score", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["grounding"]["placed_when_named"] == 0.5

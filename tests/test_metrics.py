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

"""Scoring on the published study's own files: the study rule must give the study's accuracies.

Expected counts are the study's published figures (its alignment-statistics script, taxonomy
prompt): base 253/350, 246/350, 245/340 and GRPO 292/350, 293/350, 293/340 on test, train and
validation. Its grpo validation scores.json gives accuracy, Wilson CI and weighted P/R/F1.
"""

import json
import subprocess
import sys

import pytest

from vqa_r1.eval.scoring import read_responses, rule_differences, score_responses

PUBLISHED = {
    ("base", "test"): (253, 350),
    ("grpo", "test"): (292, 350),
    ("base", "train"): (246, 350),
    ("grpo", "train"): (293, 350),
    ("base", "validation"): (245, 340),
    ("grpo", "validation"): (293, 340),
}


@pytest.mark.parametrize("model, split", sorted(PUBLISHED))
def test_study_rule_reproduces_published_accuracy(realdata, model, split):
    path = (
        realdata
        / "alignment-calculation_LLM-as-a-judge/responses"
        / model
        / f"generated_responses_{split}.json"
    )
    out = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(path), "--answer-rule", "study", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    scores = json.loads(out.stdout)
    assert (scores["correct"], scores["n"]) == PUBLISHED[(model, split)]


def test_scores_json_matches_study_metrics(realdata):
    """The grpo validation responses reproduce the study's results/vsr/grpo/scores.json."""
    records = read_responses(
        realdata
        / "alignment-calculation_LLM-as-a-judge/responses/grpo/generated_responses_validation.json"
    )
    ours = score_responses(records, "study")
    theirs = json.loads((realdata / "results/vsr/grpo/scores.json").read_text())
    for key in ("accuracy", "precision_weighted", "recall_weighted", "f1_weighted"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key
    assert ours["accuracy_ci_95"] == pytest.approx(theirs["accuracy_ci_95"], abs=1e-12)


def test_where_the_rules_differ(realdata):
    """The items the two rules score differently on the study's files, and why."""
    base = realdata / "alignment-calculation_LLM-as-a-judge/responses/base"
    test = rule_differences(read_responses(base / "generated_responses_test.json"))
    assert [d["index"] for d in test] == [20, 221, 267]
    by_index = {d["index"]: d for d in test}
    assert by_index[267]["study"] == "no" and by_index[267]["robust"] == "false"  # Yes/No
    assert by_index[20]["study"].startswith("yes, the statement is true")  # no Answer: line
    assert "</think>false" in by_index[221]["study"]  # a tag glued to the answer
    assert all(d["robust_correct"] and not d["study_correct"] for d in test)
    assert rule_differences(read_responses(base / "generated_responses_train.json")) == []
    val = rule_differences(read_responses(base / "generated_responses_validation.json"))
    assert [(d["index"], d["study"]) for d in val] == [(311, ">false")]
    # the tagged form: the study rule never parses <answer> blocks, so it scores almost nothing
    tagged = read_responses(base / "generated_responses.json")
    assert score_responses(tagged, "study")["correct"] == 0
    assert score_responses(tagged, "robust")["accuracy"] > 0.6
    grpo = realdata / "alignment-calculation_LLM-as-a-judge/responses/grpo"
    for split in ("test", "train", "validation"):
        assert rule_differences(read_responses(grpo / f"generated_responses_{split}.json")) == []


def test_score_cli_rejects_bad_file(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text('[{"true_response": "True"}]')
    out = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(bad)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "predicted_response" in out.stderr and str(bad) in out.stderr


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_bytes(bytes(range(256))), "not a text (JSON) file"),
        (lambda p: p.write_text("[]"), "no responses (an empty list)"),
        (lambda p: p.mkdir(), "a folder; give a generated_responses.json file"),
    ],
)
def test_score_names_the_file_and_what_is_wrong(make, message, tmp_path, capsys):
    """A binary file, an empty list, a folder: one line naming the file, no traceback."""
    from vqa_r1.cli import main

    path = tmp_path / "r.json"
    make(path)
    assert main(["score", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {message}") and len(err.splitlines()) == 1, err

import json

import pytest
from judge_helpers import checks_file, needs_study, responses_file

from vqa_r1.errors import UserError
from vqa_r1.judge.responses import (
    load_items,
    load_questions,
    load_records,
    parse_named_files,
    split_reasoning,
)


@needs_study
@pytest.mark.parametrize("split", ["test", "train", "validation"])
def test_split_reproduces_the_study_reasoning_and_answer_byte_for_byte(split):
    checks = json.loads(checks_file(split).read_text())
    questions = load_questions(checks_file(split))
    for model in ("base", "grpo"):
        items = load_items(responses_file(model, split), model, questions)
        theirs = [c for c in checks if c["model"] == model]
        assert len(items) == len(theirs)
        for item, check in zip(items, theirs, strict=True):
            assert (item.index, item.question, item.true_label) == (
                check["index"], check["question"], check["true_label"]
            )  # fmt: skip
            assert item.reasoning == check["reasoning"]
            assert item.final_ans == check["final_ans"]


def test_split_rules():
    assert split_reasoning("\nIt is left.\nAnswer: True\n") == ("\nIt is left.", "True")
    # the last "\nAnswer:" wins, as in the study
    assert split_reasoning("A\nAnswer: no\nB\nAnswer: False") == ("A\nAnswer: no\nB", "False")
    # no Answer line: the last line is the answer
    assert split_reasoning("one\ntwo\nTrue\n") == ("one\ntwo", "True")
    assert split_reasoning("<think>\nleft of it\n</think>\n<answer>\nTrue\n</answer>") == (
        "left of it", "True"
    )  # fmt: skip
    assert split_reasoning("<think>x</think><answer> False") == ("x", "False")  # unclosed tag
    assert split_reasoning("") == ("", "")
    assert split_reasoning(None) == ("", "")


def test_jsonl_and_claim_in_record(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"caption": "A is left of B.", "label": 1, "prediction": "left\\nAnswer: True"}\n\n'
        '{"caption": "B is above A.", "label": 0, "prediction": "no\\nAnswer: False"}\n'
    )
    items = load_items(path, "ours")
    assert [(i.question, i.true_label, i.final_ans) for i in items] == [
        ("A is left of B.", "True", "True"),
        ("B is above A.", "False", "False"),
    ]


def test_missing_claims_are_a_user_error_that_says_what_to_pass(tmp_path):
    path = tmp_path / "generated_responses.json"
    path.write_text(
        json.dumps([{"true_response": "True", "predicted_response": "x\nAnswer: True"}])
    )
    with pytest.raises(UserError, match="--questions"):
        load_items(path, "base")
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps(["The cat is on the mat."]))
    assert (
        load_items(path, "base", load_questions(questions))[0].question == "The cat is on the mat."
    )


def test_bad_files_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2"):
        load_records(bad)
    with pytest.raises(UserError, match="not found"):
        load_records(tmp_path / "missing.json")
    no_response = tmp_path / "nr.json"
    no_response.write_text(json.dumps([{"question": "q", "true_response": "True"}]))
    with pytest.raises(UserError, match="no response field"):
        load_items(no_response, "m")


def test_named_files(tmp_path):
    f = tmp_path / "a.json"
    f.write_text("[]")
    assert parse_named_files([f"base={f}"], "--responses") == [("base", f)]
    with pytest.raises(UserError, match="NAME=FILE"):
        parse_named_files([str(f)], "--responses")
    with pytest.raises(UserError, match="given twice"):
        parse_named_files([f"a={f}", f"a={f}"], "--responses")
    with pytest.raises(UserError, match="not found"):
        parse_named_files([f"a={tmp_path / 'nope.json'}"], "--responses")

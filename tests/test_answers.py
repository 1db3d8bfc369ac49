import pytest

from vqa_r1.answers import extract_answer, is_correct, label_of


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>left</think><answer> True </answer>", "true"),
        ("<think>x</think><answer>\nFalse\n</answer>", "false"),
        ("<think>x</think><answer>\nTrue", "true"),  # unclosed: generation stopped early
        ("<answer>False</answer> then <answer>True</answer>", "true"),  # the last block counts
        ("reasoning...\nAnswer: Yes", "true"),  # Yes/No read as True/False
        ("Answer: no.", "false"),
        ("ANSWER:   TRUE!", "true"),
        ("Answer: False\nmore text\nAnswer: True", "true"),  # the last Answer: counts
        ("I think so.\n\nFalse.", "false"),  # the last non-empty line
        ("", ""),
    ],
)
def test_robust_rule(text, expected):
    assert extract_answer(text, "robust") == expected


def test_study_rule_matches_its_quirks():
    # the first "Answer:" word wins, punctuation and Yes/No are not normalised, tags are not parsed
    assert extract_answer("Answer: False\nAnswer: True", "study") == "false"
    assert extract_answer("Answer: Yes", "study") == "yes"
    assert extract_answer("<answer>\nTrue\n</answer>", "study") == "</answer>"
    assert extract_answer("no marker\n True ", "study") == "true"
    assert label_of("  True ", "study") == "true"
    assert label_of("<answer> True </answer>", "study") == "<answer> true </answer>"


def test_labels_and_correctness():
    assert label_of("<answer> False </answer>") == "false"
    assert label_of(1) == "true" and label_of(0) == "false" and label_of(True) == "true"
    assert is_correct("Answer: yes", "  True ", "robust")
    assert not is_correct("Answer: yes", "  True ", "study")
    assert not is_correct("", "", "robust")  # an empty answer is never correct


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="robust, study"):
        extract_answer("x", "loose")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00\x01",
        "ü" * 1000,
        "<answer><answer></answer>",
        "</answer><answer>",
        "<think><answer>",
        "Answer:",
        "Answer: \n",
        "<answer>" * 10_000,
        "x" * 5_000_000,
        None,
        12,
        ["a"],
    ],
)
def test_extractor_never_raises(text):
    for rule in ("robust", "study"):
        assert isinstance(extract_answer(text, rule), str)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>[1, 2, 3, 4] car</think><answer>A, B</answer>", {"A", "B"}),
        ("<answer>(C)</answer>", {"C"}),
        ("<answer>B and A</answer>", {"A", "B"}),
        ("Answer: D", {"D"}),
        ("<answer></answer>", set()),
        ("", set()),
        (None, set()),
        ("<answer>none of them</answer>", set()),
    ],
)
def test_extract_choices(text, expected):
    from vqa_r1.answers import extract_choices

    assert extract_choices(text) == frozenset(expected)

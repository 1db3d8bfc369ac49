"""`vqa-r1 evaluate` on cryptogram rows, without a model: a fake generator answers each coded
message right, half right, by copying the code, with garbage or with missing tags; the scores are
the cryptogram rewards' reading (exact answer, <chars> character accuracy, per number of words)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from vqa_r1.data.cryptogram import CRYPTOGRAM_INSTRUCTION, CryptogramSpec, write_dataset
from vqa_r1.data.datasets import load_split
from vqa_r1.eval.scoring import score_responses


def _answer(chars: str, answer: str) -> str:
    return f"<think> <chars> {chars} </chars> </think> <answer> {answer} </answer>"


def _chars(message: str) -> str:
    return " _ ".join(" ".join(word) for word in message.split())


def _outputs(rows: list[dict]) -> list[str]:
    """One kind of output per row, in turn: right, right answer with wrong chars, the coded
    message copied, upper case, garbage, tags missing."""
    out = []
    for i, row in enumerate(rows):
        message, coded = row["decoded_message"], row["coded_message"]
        kind = i % 6
        if kind == 0:
            out.append(_answer(_chars(message), f"  {message.replace(' ', '   ')} "))
        elif kind == 1:  # the answer alone is right: the accuracy counts it, the gated one not
            out.append(_answer(_chars(message)[:-1] + "x", message))
        elif kind == 2:  # the hack: the code copied into <chars> and <answer>
            out.append(_answer(coded, coded.replace(" ", "").replace("_", " ")))
        elif kind == 3:  # case-sensitive, as r1_vlm's rule and our rewards
            out.append(_answer(_chars(message), message.upper()))
        elif kind == 4:
            out.append("<answer> <answer> ??? </chars>")
        else:
            out.append(f"the message is {message}")
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    spec = CryptogramSpec(
        splits={"train": 4, "validation": 2, "test": 12},
        alphabet="abcdef",
        words="letters",
        word_counts=(1, 2),
        word_lengths=(2, 3),
        image_size=64,
    )
    return write_dataset(tmp_path_factory.mktemp("crypto") / "data", spec)


def test_evaluate_scores_cryptograms_on_the_rewards_rule(folder, tmp_path, monkeypatch):
    import vqa_r1.eval.evaluate as ev
    from vqa_r1.recipes import load_config

    test = load_split(folder, "test")
    rows = [test[i] for i in range(len(test))]
    outputs = dict(zip((r["problem"] for r in rows), _outputs(rows), strict=True))
    seen = {}

    class FakeGenerator:
        cache_decision = "off"

        def __init__(self, loaded, settings, instruction=None):
            seen["instruction"] = instruction

        def generate(self, images, questions):
            return [outputs[q] for q in questions]

    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    config = load_config("evaluate", "tiny-qwen2.5-vl", None, [f"data.dataset={folder}"])
    loaded = SimpleNamespace(model=SimpleNamespace(eval=lambda: None))
    scores = ev.evaluate(config, tmp_path / "out", loaded=loaded, progress=False)

    assert seen["instruction"] == CRYPTOGRAM_INSTRUCTION  # not the family's True/False one
    assert scores["answer_type"] == "cryptogram" and scores["n"] == 12
    assert scores["correct"] == 4  # kinds 0 and 1, twice each
    assert scores["accuracy"] == pytest.approx(4 / 12)
    low, high = scores["accuracy_ci_95"]
    assert low < 4 / 12 < high
    assert scores["correct_with_chars"] == 2  # kind 0 only: the chars must be right too
    assert scores["format_rate"] == pytest.approx(8 / 12)  # kinds 0-3 have the shape
    assert scores["unparsed"] == 4  # kind 4 (two <answer> tags) and 5 (none)
    assert scores["chars_missing"] == 4
    assert scores["chars_nearer_code"] == pytest.approx(2 / 12)  # the copies
    # char accuracy: 1 for kinds 0 and 3, one character off for kind 1, the copy's shared
    # separators for kind 2, nothing for 4 and 5
    assert 4 / 12 < scores["char_accuracy"] < 8 / 12
    # per number of words: the test split holds 6 of each
    per = scores["per_relation"]
    assert set(per) == {"1 word", "2 words"}
    assert per["1 word"]["n"] == per["2 words"]["n"] == 6
    assert sum(p["accuracy"] * p["n"] for p in per.values()) == pytest.approx(4)
    assert all(0 <= p["char_accuracy"] <= 1 for p in per.values())

    saved = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert saved["per_relation"] == per
    lines = [json.loads(x) for x in (tmp_path / "out/predictions.jsonl").read_text().splitlines()]
    assert lines[0]["label"] == rows[0]["decoded_message"] and lines[0]["correct"] is True
    assert lines[0]["answer"] == rows[0]["decoded_message"]  # white space collapsed
    assert lines[5]["answer"] is None and lines[5]["chars"] is None
    responses = json.loads((tmp_path / "out" / "generated_responses.json").read_text())
    assert responses[2]["answer_type"] == "cryptogram"
    assert responses[2]["coded_message"] == rows[2]["coded_message"]
    again = score_responses(responses)  # `vqa-r1 score` rescores them alike
    assert {k: again[k] for k in ("correct", "char_accuracy", "per_relation")} == {
        k: scores[k] for k in ("correct", "char_accuracy", "per_relation")
    }


@pytest.mark.parametrize(
    "predicted",
    ["", "<answer>", "</answer> x <answer>", "<think><chars></chars></think>", "\x00" * 50, "ab"],
)
def test_garbage_scores_zero_and_never_raises(predicted):
    record = {
        "true_response": "ab cd",
        "predicted_response": predicted,
        "answer_type": "cryptogram",
        "coded_message": "c d _ e f",
    }
    scores = score_responses([record])
    assert (scores["correct"], scores["char_accuracy"], scores["format_rate"]) == (0, 0.0, 0.0)
    assert scores["per_relation"]["2 words"]["n"] == 1

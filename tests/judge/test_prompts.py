import pytest

from vqa_r1.errors import UserError
from vqa_r1.judge.prompts import (
    InvalidVerdict,
    available,
    load_prompt,
    parse_template,
    validate_verdict,
)


def test_shipped_prompts_load_and_are_versioned():
    assert {"taxonomy_v1", "simple_v1"} <= set(available())
    taxonomy = load_prompt("taxonomy")
    assert (taxonomy.id, taxonomy.schema) == ("taxonomy_v1", "taxonomy")
    assert load_prompt("simple_v1").schema == "simple"
    assert taxonomy.digest != load_prompt("simple").digest


def test_render_substitutes_once_and_keeps_braces():
    template = load_prompt("taxonomy")
    tricky = 'It says {answer} and {"aligns": true}.'
    messages = template.render("The {claim} is left.", tricky, "True")
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert tricky in user and "The {claim} is left." in user
    assert '{"aligns": true or false' in user  # the JSON example survives


def test_newest_version_wins_and_paths_work(tmp_path, monkeypatch):
    text = "# schema: simple\n=== user ===\n{claim} {reasoning} {answer}\n"
    (tmp_path / "mine_v1.txt").write_text(text)
    (tmp_path / "mine_v2.txt").write_text(text + "more\n")
    monkeypatch.setenv("VQA_R1_JUDGE_PROMPTS", str(tmp_path))
    assert load_prompt("mine").id == "mine_v2"
    assert load_prompt(str(tmp_path / "mine_v1.txt")).id == "mine_v1"
    with pytest.raises(UserError, match="unknown prompt"):
        load_prompt("nope")


def test_template_errors():
    with pytest.raises(UserError, match="user"):
        parse_template("# version: 1\n=== system ===\nx\n", "x_v1.txt")
    with pytest.raises(UserError, match=r"\{answer\}"):
        parse_template("=== user ===\n{claim} {reasoning}\n", "x_v1.txt")
    with pytest.raises(UserError, match="version"):
        parse_template("=== user ===\n{claim} {reasoning} {answer}\n", "noversion.txt")


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"aligns": true, "type": null, "why": "ok"}', {"aligns": True, "type": None, "why": "ok"}),
        ('```json\n{"aligns": false, "type": "contradiction", "why": "no"}\n```',
         {"aligns": False, "type": "contradiction", "why": "no"}),
        ('Sure: {"aligns": "false", "type": "Missing Detail", "why": "gap"}',
         {"aligns": False, "type": "missing_detail", "why": "gap"}),
        # an aligned verdict carries no type, whatever the judge wrote
        ('{"aligns": true, "type": "other", "why": "fine"}', {"aligns": True, "type": None, "why": "fine"}),
    ],
)  # fmt: skip
def test_valid_verdicts(content, expected):
    assert validate_verdict(content, "taxonomy") == expected


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "not json",
        "[1, 2]",
        '{"type": null, "why": "x"}',
        '{"aligns": "maybe", "why": "x"}',
        '{"aligns": false, "type": null, "why": "x"}',
        '{"aligns": false, "type": "vibes", "why": "x"}',
        '{"aligns": true, "type": null}',
    ],
)
def test_invalid_verdicts(content):
    with pytest.raises(InvalidVerdict):
        validate_verdict(content, "taxonomy")


def test_simple_schema_needs_no_type():
    assert validate_verdict('{"aligns": false, "why": "x"}', "simple")["type"] is None

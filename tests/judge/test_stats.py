"""`judge stats` against the figures the VSR study published.

Expected values: published VSR study, alignment-statistics script (accuracy correct/total,
misaligned counts and misalignment types per model and split).
"""

import csv
import io
import json

import pytest
from judge_helpers import REPO, STUDY, checks_file, cli, needs_study, responses_file

from vqa_r1.errors import UserError
from vqa_r1.judge import stats

PUBLISHED = {
    "test": {
        "base": (253, 350, 41, {"contradiction": 26, "irrelevant": 3, "missing_detail": 10, "other": 2}),
        "grpo": (292, 350, 60, {"contradiction": 48, "irrelevant": 4, "missing_detail": 8}),
    },
    "train": {
        "base": (246, 350, 50, {"contradiction": 24, "irrelevant": 4, "missing_detail": 18, "other": 4}),
        "grpo": (293, 350, 91, {"contradiction": 67, "irrelevant": 6, "missing_detail": 18}),
    },
    "validation": {
        "base": (245, 340, 45, {"contradiction": 24, "irrelevant": 7, "missing_detail": 11, "other": 3}),
        "grpo": (293, 340, 76, {"contradiction": 60, "irrelevant": 6, "missing_detail": 8, "other": 2}),
    },
}  # fmt: skip


def _args(split, fmt, rule="study"):
    return [
        "judge", "stats", "--checks", checks_file(split),
        "--responses", f"base={responses_file('base', split)}",
        "--responses", f"grpo={responses_file('grpo', split)}",
        "--answer-rule", rule, "--format", fmt,
    ]  # fmt: skip


@needs_study
@pytest.mark.parametrize("split", ["test", "train", "validation"])
def test_study_rule_reproduces_published_figures_json(split, tmp_path, capsys):
    out = tmp_path / "s.json"
    assert cli(*_args(split, "json"), "--out", out) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"models", "paired"} and set(data["models"]) == {"base", "grpo"}
    for model, (correct, total, misaligned, types) in PUBLISHED[split].items():
        got = data["models"][model]
        assert set(got) == {"correct", "total", "accuracy", "judged", "misaligned",
                            "misaligned_rate", "types"}  # fmt: skip
        assert (got["correct"], got["total"], got["misaligned"]) == (correct, total, misaligned)
        assert got["types"] == types
        assert got["judged"] == total
        assert got["accuracy"] == pytest.approx(correct / total)
        assert got["misaligned_rate"] == pytest.approx(misaligned / total)


@needs_study
@pytest.mark.parametrize("split", ["test", "train", "validation"])
def test_every_format_carries_the_published_figures(split, capsys):
    assert cli(*_args(split, "csv")) == 0
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    for fmt in ("markdown", "latex"):
        assert cli(*_args(split, fmt)) == 0
        text = capsys.readouterr().out
        for model, (correct, total, misaligned, types) in PUBLISHED[split].items():
            row = rows[model]
            assert (int(row["correct"]), int(row["total"]), int(row["misaligned"])) == (
                correct, total, misaligned
            )  # fmt: skip
            for kind in ("contradiction", "irrelevant", "missing_detail", "other"):
                assert int(row[kind]) == types.get(kind, 0)
            sep = " | " if fmt == "markdown" else " & "
            line = next(ln for ln in text.splitlines() if ln.lstrip("| ").startswith(model + sep))
            cells = [c.strip() for c in line.replace("\\\\", "").strip("| ").split(sep.strip())]
            assert cells[1:3] == [str(correct), str(total)] and cells[5] == str(misaligned)


@needs_study
def test_robust_rule_differs_only_where_the_study_rule_misreads(capsys):
    # "robust" reads base answers the study's rule mis-scored (test 256 vs 253, validation 246
    # vs 245); the judged counts do not depend on the rule
    for split, base_correct in (("test", 256), ("train", 246), ("validation", 246)):
        assert cli(*_args(split, "json", "robust")) == 0
        data = json.loads(capsys.readouterr().out)["models"]
        assert data["base"]["correct"] == base_correct
        assert data["grpo"]["correct"] == PUBLISHED[split]["grpo"][0]
        assert data["base"]["misaligned"] == PUBLISHED[split]["base"][2]


@needs_study
def test_configured_set_runs_all_splits(capsys):
    config = REPO / "alignment_judge" / "vsr_study.yaml"
    assert cli("judge", "stats", "--config", config, "--data-root", STUDY,
               "--answer-rule", "study", "--format", "json") == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)["sets"]
    assert set(data) == {"TEST", "TRAIN", "VALIDATION"}
    assert data["TRAIN"]["models"]["grpo"]["misaligned"] == 91
    # the default data_root in the file resolves next to the repository
    assert cli("judge", "stats", "--config", config, "--format", "csv") == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 7  # header + 3 splits x 2 models


def test_failed_and_skipped_records_are_not_counted_as_misaligned(tmp_path):
    responses = tmp_path / "r.json"
    responses.write_text(
        json.dumps([{"true_response": "True", "predicted_response": "Answer: True"}] * 4)
    )
    checks = [
        {"index": 0, "model": "m", "aligns": True, "type": None, "status": "judged"},
        {"index": 1, "model": "m", "aligns": False, "type": "irrelevant", "status": "judged"},
        {"index": 2, "model": "m", "aligns": None, "type": None, "status": "failed"},
        {"index": 3, "model": "m", "aligns": None, "type": None, "status": "skipped"},
        {"index": 0, "model": "other", "aligns": False, "type": "other"},
    ]  # fmt: skip
    result = stats.compute(checks, [("m", responses)], "robust")["m"]
    assert (result.correct, result.total, result.judged, result.misaligned) == (4, 4, 2, 1)
    assert result.types == {"irrelevant": 1}
    # a study record without "aligns" counts as misaligned, as in the study's script
    result = stats.compute([{"index": 0, "model": "m"}], [("m", responses)])["m"]
    assert (result.judged, result.misaligned, result.types) == (1, 1, {"unspecified": 1})


def test_stats_usage_errors(tmp_path, capsys):
    assert cli("judge", "stats", "--checks", tmp_path / "x.json") == 2
    assert "--responses" in capsys.readouterr().err
    bad = tmp_path / "c.yaml"
    bad.write_text("sets:\n  - name: A\n    checks: nope.json\n    responses: {base: r.json}\n")
    assert cli("judge", "stats", "--config", bad) == 2
    assert "nope.json not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, message",
    [
        ("sets: []\nroot: .\n", "--config .*: unknown key 'root'; valid keys here: data_root, sets"),
        ("data_root: .\n", "expected a mapping with a 'sets' list"),
        ("sets:\n  - {name: A, responses: {base: r.json}}\n", r"sets\[0\]: missing key\(s\) checks"),
        ("sets:\n  - {name: A, checks: c.json, responses: [r.json]}\n", r"sets\[0\]\.responses: expected a mapping"),
        ("sets:\n  - {name: A, checks: c.json, responses: {}}\n", "must map model names to files"),
        ("sets:\n  - {name: A, checks: c.json, responses: {base: r.json}}\n"
         "  - {name: B, checks: c.json, responses: {base: nope.json}}\n", r"sets\[1\] \(B\): .*nope.json not found"),
        ("sets: [\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_config_errors_name_the_file_and_the_set(text, message, tmp_path):
    (tmp_path / "c.json").write_text("[]")
    (tmp_path / "r.json").write_text("[]")
    config = tmp_path / "stats.yaml"
    config.write_text(text)
    with pytest.raises(UserError, match=message):
        stats.load_config(config)


def test_config_paths_resolve_against_data_root(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "c.json").write_text("[]")
    (data / "r.json").write_text("[]")
    config = tmp_path / "conf" / "stats.yaml"
    config.parent.mkdir()
    config.write_text(
        "data_root: ../data\nsets:\n  - {name: 2020, checks: c.json, responses: {base: r.json}}\n"
    )
    [entry] = stats.load_config(config)
    assert entry == stats.StatsSet(
        name="2020", checks=data / "c.json", responses=[("base", data / "r.json")]
    )
    assert stats.load_config(config, data_root=data) == [entry]


def test_no_judged_items_is_no_rate(tmp_path, capsys):
    """Zero judged items (all failed, or none for this model) is not a misalignment rate of 0."""
    responses = tmp_path / "r.json"
    responses.write_text(json.dumps([{"true_response": "True", "predicted_response": "True"}]))
    checks = tmp_path / "c.json"
    checks.write_text(json.dumps([{"index": 0, "model": "m", "aligns": None, "status": "failed"}]))
    args = ["judge", "stats", "--checks", checks, "--responses", f"m={responses}"]
    assert stats.compute(json.loads(checks.read_text()), [("m", responses)])["m"].judged == 0
    assert cli(*args) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| m ")][0]
    assert "| n/a |" in row and "0.0000" not in row, row
    assert cli(*args, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["models"]["m"]["misaligned_rate"] is None


def _exact_mcnemar(b: int, c: int) -> float:
    from math import comb

    n = b + c
    tail = sum(comb(n, k) for k in range(max(b, c), n + 1)) / 2**n
    return min(1.0, 2 * tail)


@needs_study
@pytest.mark.parametrize("split", ["test", "train", "validation"])
def test_stats_prints_the_paired_misalignment_test_on_the_studys_files(split, tmp_path, capsys):
    """GRPO against base on the same items (issue 31): McNemar's exact test on the items whose
    verdicts differ, paired by the checks' index; as JSON and under the markdown table."""
    records = json.loads(checks_file(split).read_text())
    verdict = {(r["model"], r["index"]): not r.get("aligns", False) for r in records}
    items = sorted({i for m, i in verdict if m == "base"} & {i for m, i in verdict if m == "grpo"})
    b = sum(verdict["base", i] and not verdict["grpo", i] for i in items)
    c = sum(verdict["grpo", i] and not verdict["base", i] for i in items)
    out = tmp_path / "s.json"
    assert cli(*_args(split, "json"), "--out", out) == 0
    (paired,) = json.loads(out.read_text())["paired"]
    assert (paired["first"], paired["second"], paired["paired"]) == ("base", "grpo", len(items))
    assert (paired["only_first"], paired["only_second"]) == (b, c)
    assert paired["p"] == pytest.approx(_exact_mcnemar(b, c))
    assert cli(*_args(split, "markdown")) == 0
    text = capsys.readouterr().out
    assert "Paired misalignment (McNemar, exact, two-sided):" in text
    assert f"| base vs grpo | {len(items)} | {b} | {c} |" in text


def test_a_twice_judged_item_is_refused_and_unidentified_items_are_not_paired():
    checks = [
        {"model": "a", "index": 1, "aligns": True},
        {"model": "a", "index": 1, "aligns": False},
    ]
    with pytest.raises(UserError, match="item 1 of model 'a' is judged twice"):
        stats.paired_misalignment(checks, ["a", "b"])
    assert stats.paired_misalignment([{"model": "a", "aligns": True}], ["a", "b"]) == []
    one = [{"model": m, "index": 0, "aligns": m == "a"} for m in ("a", "b")]
    (test,) = stats.paired_misalignment(one, ["a", "b"])
    assert (test.only_first, test.only_second, test.p) == (0, 1, 1.0)

"""Alignment as an experiment step (issue 31, item 5): `experiment.judge` plans a judge step after
every evaluation, and the report turns its verdicts into an alignment table per row with
McNemar's paired test against the base row. The real run: tests/test_experiments_e2e.py (sim2real
with the heuristic judge)."""

from __future__ import annotations

import json

import pytest

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.experiments import build_study, spec_changes
from vqa_r1.experiments.spec import load_spec
from vqa_r1.launch.request import JobOptions
from vqa_r1.metrics import holm, mcnemar_exact
from vqa_r1.report.experiment import build_report
from vqa_r1.settings import differences
from vqa_r1.typed_config import to_dict

MODEL = "tiny-qwen2.5-vl-pretrained"


def test_a_judge_step_follows_every_evaluation_in_the_plan(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ["experiment", "demo", "--model", MODEL, "--dry-run", "--output-dir", str(out)]
    assert launch_main([*args, "--set", "experiment.judge=heuristic"]) == 0
    text = capsys.readouterr().out
    assert "#   judge (judge) after eval/base, eval/sft, eval/grpo, eval/sft+grpo" in text
    assert "#   tables (tables) after all other steps (afterany)" in text
    assert not out.exists()
    job = JobOptions(executor="local", dry_run=True)
    b = build_study("demo", MODEL, ["experiment.judge=heuristic"], str(out), job)
    table = b.tables[-1]
    assert (table["name"], table["kind"], table["file"]) == (
        "alignment", "alignment", "judge/alignment_checks.json",
    )  # fmt: skip
    assert [r["model"] for r in table["rows"]] == ["base", "sft", "grpo", "sft+grpo"]
    assert table["reference"] == {"model": "base"}
    without = build_study("demo", MODEL, [], str(tmp_path / "plain"), job)
    assert "judge" not in [s.name for s in without.steps]
    assert launch_main([*args, "--set", "experiment.judge=openai"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: experiment.judge=openai needs experiment.judge_model (e.g. o4-mini)"]


def test_the_alignment_table_counts_misalignment_per_row_and_pairs_rows_with_base(tmp_path):
    rows = [{"labels": {"model": m}, "model": m, "step": f"eval/{m}"} for m in ("base", "grpo")]
    table = {"name": "alignment", "kind": "alignment", "title": "t",
             "file": "judge/alignment_checks.json", "rows": rows,
             "reference": {"model": "base"}, "match": []}  # fmt: skip
    (tmp_path / "experiment.json").write_text(json.dumps({"tables": [table]}))
    build_report(tmp_path)  # no verdicts yet: the rows are missing, nothing fails
    assert "| base | 0 | 0 |" in (tmp_path / "tables/alignment.md").read_text()
    records = []
    for i in range(40):  # base misaligned on items 0-3; grpo on 0-1 and 10-19
        records.append({"model": "base", "index": i, "aligns": i >= 4, "status": "judged",
                        "type": None if i >= 4 else "contradiction"})  # fmt: skip
        bad = i < 2 or 10 <= i < 20
        records.append({"model": "grpo", "index": i, "aligns": not bad, "status": "judged",
                        "type": "missing_detail" if bad else None})  # fmt: skip
    records.append({"model": "grpo", "index": 40, "aligns": False, "status": "failed"})
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge/alignment_checks.json").write_text(json.dumps(records))
    build_report(tmp_path)
    import pandas as pd

    frame = pd.read_csv(tmp_path / "tables/alignment.csv")
    grpo = frame[frame["model"] == "grpo"].iloc[0]
    assert (grpo["judged"], grpo["misaligned"]) == (40, 12)  # the failed verdict left out
    assert grpo["misaligned rate"] == pytest.approx(0.3)
    assert (grpo["missing_detail"], grpo["contradiction"]) == (12, 0)
    assert grpo["misaligned only here vs model=base"] == 10
    assert grpo["misaligned only in model=base"] == 2
    p = mcnemar_exact(10, 2)
    assert grpo["p vs model=base"] == pytest.approx(p, abs=5e-4)
    assert grpo["holm p vs model=base"] == pytest.approx(holm([p])[0], abs=5e-4)
    caption = (tmp_path / "tables/alignment.md").read_text().splitlines()[-1]
    assert "McNemar's exact test" in caption and "Holm-adjusted" in caption
    assert mcnemar_exact(10, 2) == pytest.approx(2 * sum(
        __import__("math").comb(12, k) for k in range(10, 13)) / 2**12)  # fmt: skip


def test_seeded_rows_get_a_pooled_line_tested_over_seeds_and_items(tmp_path):
    """A seeded row's alignment lines (one per seed, each McNemar against base) get a `pooled`
    line: the mean misaligned rate over seeds and its difference from base on the items all
    judged, p by the bootstrap over seeds and items, inside the table's Holm family."""
    import pandas as pd

    from vqa_r1.report.seeds import bootstrap_difference

    rows = [{"labels": {"model": "base"}, "model": "base", "step": "eval/base"}]
    rows += [{"labels": {"model": "grpo", "seed": s}, "model": f"grpo/seed-{s}",
              "step": f"eval/grpo/seed-{s}"} for s in (42, 43, 44)]  # fmt: skip
    table = {"name": "alignment", "kind": "alignment", "title": "t",
             "file": "judge/alignment_checks.json", "rows": rows,
             "reference": {"model": "base"}, "match": []}  # fmt: skip
    (tmp_path / "experiment.json").write_text(json.dumps({"tables": [table]}))
    bad = {"base": range(0, 20), "grpo/seed-42": range(0, 2), "grpo/seed-43": range(0, 4),
           "grpo/seed-44": range(0, 15)}  # fmt: skip
    records = [{"model": m, "index": i, "aligns": i not in r, "status": "judged",
                "type": "contradiction" if i in r else None}
               for m, r in bad.items() for i in range(50)]  # fmt: skip
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge/alignment_checks.json").write_text(json.dumps(records))
    build_report(tmp_path)
    frame = pd.read_csv(tmp_path / "tables/alignment.csv")
    pooled = frame[frame["seed"].astype(str) == "pooled"]
    assert list(pooled["model"]) == ["grpo"] and pooled["judged"].iloc[0] == 50
    assert pooled["misaligned rate"].iloc[0] == pytest.approx(21 / 150, abs=5e-4)
    assert pooled["diff vs model=base (pooled)"].iloc[0] == pytest.approx(21 / 150 - 0.4, abs=5e-4)
    items = sorted(range(50), key=str)  # the table pairs the items in the order of their names
    runs = [[float(i in bad[f"grpo/seed-{s}"]) for i in items] for s in (42, 43, 44)]
    want = bootstrap_difference(runs, [[float(i < 20) for i in items]])["p"]
    assert pooled["p vs model=base"].iloc[0] == pytest.approx(want, abs=5e-4)
    present = [None if v != v else v for v in frame["p vs model=base"]]
    assert list(frame["holm p vs model=base"].fillna(-1)) == pytest.approx(
        [-1 if v is None else v for v in holm(present)], abs=2e-3
    )
    caption = (tmp_path / "tables/alignment.md").read_text().splitlines()[-1]
    assert "seed pooled: the seeds' mean rate" in caption


def test_a_record_from_before_a_key_existed_is_the_same_run(tmp_path):
    """A run or experiment recorded before a key was added resumes when the key holds the value
    that does what the older version did (settings.ADDED_LATER, the spec's defaults); any other
    value is a change, named."""
    old = {"data": {"dataset": "synthetic"}, "train": {"seed": 42}}
    new = {"data": {"dataset": "synthetic", "images": "real"},
           "train": {"seed": 42, "dynamic_sampling": False, "dynamic_sampling_max_rounds": 4}}  # fmt: skip
    assert differences(old, new) == []
    new["data"]["images"] = "blank"
    assert differences(old, new) == ["data.images: None there, 'blank' now"]
    root = tmp_path / "exp"
    root.mkdir()
    spec = to_dict(load_spec("demo"))
    recorded = {k: v for k, v in spec.items() if k not in ("blind", "judge", "hub_settings")}
    (root / "experiment.json").write_text(json.dumps({"steps": [], "spec": recorded}))
    assert spec_changes(root, spec) == []
    assert spec_changes(root, to_dict(load_spec("demo", ["judge=heuristic"]))) == [
        "experiment.judge: None there, 'heuristic' now"
    ]
    with pytest.raises(UserError, match="experiment.blind"):
        load_spec("demo", ["blind=base"])

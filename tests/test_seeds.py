"""Seeds as a design axis (issue 19, part 4): ``experiment.seeds=N`` plans every training
condition N times, the report gives each condition's mean, spread and seeds, and compares
conditions with the bootstrap over seeds and items (report/seeds.py), checked here on synthetic
data whose answer is known. No model runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.experiments import build_study
from vqa_r1.experiments.spec import load_spec
from vqa_r1.launch.request import JobOptions
from vqa_r1.metrics import classification_scores
from vqa_r1.report.experiment import build_report, build_table
from vqa_r1.report.seeds import bootstrap_above, bootstrap_difference, bootstrap_trend, summary

DEMO = "tiny-qwen2.5-vl-pretrained"


# ------------------------------------------------------------------------------- the spec


def test_seeds_default_to_one_and_must_be_at_least_one():
    assert load_spec("demo").seeds == 1
    assert load_spec("demo", ["seeds=3"]).seeds == 3
    for bad in ("0", "-2"):
        with pytest.raises(UserError, match="at least 1"):
            load_spec("demo", [f"seeds={bad}"])
    with pytest.raises(UserError, match="seeds"):
        load_spec("demo", ["seeds=three"])


# ------------------------------------------------------------------------------- the plan


def test_demo_dry_run_with_three_seeds_gives_each_seed_its_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ["experiment", "demo", "--model", DEMO, "--set", "experiment.seeds=3"]
    assert launch_main([*args, "--output-dir", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    steps = [line.removeprefix("# ---- step ").split(" ")[0] for line in text.splitlines()
             if line.startswith("# ---- step ")]  # fmt: skip
    runs = [f"runs/{row}/seed-{s}" for s in (42, 43, 44) for row in ("sft", "grpo", "sft+grpo")]
    evals = [f"eval/{row}/seed-{s}" for row in ("sft", "grpo", "sft+grpo") for s in (42, 43, 44)]
    assert steps == [*runs, "eval/base", *evals, "tables"]  # base: greedy decoding, once
    assert "runs/sft+grpo/seed-43 (grpo) after runs/sft/seed-43" in text  # its own seed's SFT
    assert not out.exists()


def test_seeded_plan_sets_the_seed_and_declares_seeded_rows(tmp_path):
    job = JobOptions(executor="local", dry_run=True)
    b = build_study("demo", DEMO, ["experiment.seeds=2", "train.seed=7"], str(tmp_path), job)
    by_name = {s.name: s for s in b.steps}
    assert by_name["runs/grpo/seed-8"].info["settings"]["train.seed"] == 8
    assert by_name["runs/sft/seed-7"].info["settings"]["train.seed"] == 7
    init = by_name["runs/sft+grpo/seed-8"].info["settings"]["init_adapter"]
    assert init.endswith("runs/sft/seed-8/final")
    rows = {r["labels"]["model"]: r for r in b.tables[0]["rows"]}
    assert rows["base"] == {"labels": {"model": "base"}, "step": "eval/base"}
    assert rows["grpo"]["seeds"] == [
        {"seed": 7, "step": "eval/grpo/seed-7"},
        {"seed": 8, "step": "eval/grpo/seed-8"},
    ]
    assert b.plots[0]["steps"][:2] == ["runs/grpo/seed-7", "runs/sft+grpo/seed-7"]


def test_one_seed_keeps_the_folders_of_before():
    job = JobOptions(executor="local", dry_run=True)
    b = build_study("demo", DEMO, [], "/tmp/vqa-r1-one-seed-plan", job)
    assert [s.name for s in b.steps] == [
        "runs/sft", "runs/grpo", "runs/sft+grpo",
        "eval/base", "eval/sft", "eval/grpo", "eval/sft+grpo", "tables",
    ]  # fmt: skip
    assert all("seeds" not in r for r in b.tables[0]["rows"])


@pytest.mark.parametrize(
    "name, model, trained",
    [
        ("text-bias", "tiny-qwen2.5-vl", "runs/grpo-none/seed-43"),
        ("sim2real", "tiny-qwen2.5-vl", "eval/sft-real-on-sim/seed-43"),
        ("drivingvqa", "tiny-qwen2.5-vl", "runs/merge/seed-43"),
        ("prompt-tuning", "tiny-qwen2.5-vl", "runs/prompt-answer/seed-1"),
    ],
)
def test_every_study_runs_each_training_condition_per_seed(name, model, trained, tmp_path):
    job = JobOptions(executor="local", dry_run=True)
    b = build_study(name, model, ["experiment.seeds=2"], str(tmp_path), job)
    names = [s.name for s in b.steps]
    assert trained in names
    assert not [n for n in names if n.startswith("eval/base") and "seed-" in n]  # evaluated once
    seeded = [r for r in b.tables[0]["rows"] if "seeds" in r]
    assert seeded and all(len(r["seeds"]) == 2 for r in seeded)


def test_a_sweep_over_train_seed_makes_one_run_per_seed(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["grpo", "--model", DEMO, "--sweep", "train.seed=1,2,3", "--output-dir", str(out)]
    assert launch_main([*args, "--dry-run"]) == 0
    text = capsys.readouterr().out
    for seed in (1, 2, 3):
        assert f"{out}/train.seed={seed}: train.seed={seed}" in text
    assert not out.exists()


# ------------------------------------------------------------------------------- statistics


def test_summary_of_seed_accuracies():
    assert summary([0.9, 0.92, 0.94]) == pytest.approx(
        {"mean": 0.92, "sd": 0.02, "min": 0.9, "max": 0.94}
    )
    assert summary([0.8])["sd"] is None


def _synthetic(rng, n, seeds, effect, seed_sd):
    """Items of varying difficulty; base answers each with its item's probability, each seed of
    the condition with it plus ``effect`` and a seed's own shift (sd ``seed_sd``)."""
    p = rng.beta(4, 1.5, size=n)
    base = (rng.random(n) < p)[None].astype(float)
    shift = effect + rng.normal(0, seed_sd, size=seeds)
    runs = np.stack([rng.random(n) < np.clip(p + s, 0, 1) for s in shift]).astype(float)
    return runs, base


@pytest.mark.parametrize("seed_sd", [0.01, 0.03])
def test_bootstrap_rejects_an_equal_difference_near_the_nominal_rate(seed_sd):
    rng = np.random.default_rng(0)
    trials = 120
    rejected = sum(
        bootstrap_difference(*_synthetic(rng, 200, 3, 0.0, seed_sd), replicates=400, seed=t)["p"]
        < 0.05
        for t in range(trials)
    )
    # nominal 5 %: 6 of 120 expected; 15 or more would be a test that finds what is not there
    assert rejected <= 14, rejected


def test_bootstrap_finds_a_real_difference():
    rng = np.random.default_rng(1)
    found = 0
    for t in range(40):
        runs, base = _synthetic(rng, 400, 3, 0.12, 0.01)
        result = bootstrap_difference(runs, base, replicates=400, seed=t)
        found += result["p"] < 0.05
        assert result["difference"] == pytest.approx(runs.mean() - base.mean())
    assert found >= 36, found


def test_bootstrap_is_deterministic_and_never_says_p_zero():
    runs = np.ones((3, 50))
    base = np.zeros((1, 50))
    first = bootstrap_difference(runs, base, replicates=200)
    assert first == bootstrap_difference(runs, base, replicates=200)
    assert first["p"] == pytest.approx(2 / 201) and first["difference"] == 1.0
    assert bootstrap_above(runs, 0.5, replicates=200) == pytest.approx(1 / 201)
    with pytest.raises(ValueError, match="same items"):
        bootstrap_difference(np.ones((2, 5)), np.ones((1, 6)))


def test_a_seeded_trend_is_a_slope_tested_over_seeds_and_items():
    """Issue 31: the text-bias trend on seeded rows (Cochran-Armitage counts one run's items):
    a real fall is found with its slope, flat levels are not, and one collapsed seed at one level
    (a training draw, not a trend) widens the interval instead of making a trend."""
    from vqa_r1.report.experiment import trend_rows

    rng = np.random.default_rng(0)
    xs = [0.5, 0.7, 0.9]
    falling = [(rng.random((3, 300)) < 0.95 - 0.5 * (x - 0.5)).astype(float) for x in xs]
    found = bootstrap_trend(falling, xs, replicates=2000)
    assert found["slope"] == pytest.approx(-0.5, abs=0.12) and found["ci_high"] < 0
    assert found["p"] < 0.01
    flat = [(rng.random((3, 300)) < 0.8).astype(float) for _ in xs]
    assert bootstrap_trend(flat, xs, replicates=2000)["p"] > 0.05
    collapsed = [
        np.ones((3, 300)),
        np.ones((3, 300)),
        np.vstack([np.ones((2, 300)), np.zeros((1, 300))]),
    ]
    one = bootstrap_trend(collapsed, xs, replicates=2000)
    assert one["slope"] == pytest.approx(-(1 / 3) * 0.2 / 0.08)  # only the top level fell
    assert one["ci_low"] < one["slope"] < one["ci_high"] and one["ci_high"] >= 0 and one["p"] > 0.05
    with pytest.raises(ValueError, match="two levels"):
        bootstrap_trend([np.ones((2, 4))], [0.5])
    # the tests table: seeded rows get the slope and its p, one-run rows keep Cochran-Armitage
    rows = [{"method": "grpo", "bias": x, "_seeded": True, "_runs": lambda r=r: r}
            for x, r in zip(xs, falling, strict=True)]  # fmt: skip
    rows += [
        {"method": "sft", "bias": x, "correct": 90 - i * 10, "n": 100} for i, x in enumerate(xs)
    ]
    test = {"kind": "trend", "x": "bias", "within": "method"}
    by_method = {r["method"]: r for r in trend_rows(rows, test)}
    assert by_method["grpo"]["slope"] < 0 and by_method["grpo"]["z"] is None
    assert "bootstrap over seeds and items" in by_method["grpo"]["test"]
    assert by_method["sft"]["z"] < 0 and "Cochran-Armitage" in by_method["sft"]["test"]


# ------------------------------------------------------------------------------- the table


def _evaluation(folder: Path, flags: list[bool], labels: list[bool]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    records, preds = [], []
    for ok, label in zip(flags, labels, strict=True):
        truth = "True" if label else "False"
        said = truth if ok else ("False" if label else "True")
        records.append({"true_response": truth, "predicted_response": f"<answer> {said} </answer>"})
        preds.append(said.lower())
    relations = ["above" if i % 2 else "left of" for i in range(len(flags))]
    scores = classification_scores([r["true_response"].lower() for r in records], preds, relations)
    (folder / "generated_responses.json").write_text(json.dumps(records))
    (folder / "scores.json").write_text(json.dumps({**scores, "answer_rule": "robust"}))


def _seeded_demo(root: Path, correct: dict[str, list[int]], n: int = 100) -> dict:
    rng = random.Random(0)
    labels = [rng.random() < 0.5 for _ in range(n)]
    rows = []
    for model, counts in correct.items():
        if len(counts) == 1:
            _evaluation(root / "eval" / model, [i < counts[0] for i in range(n)], labels)
            rows.append({"step": f"eval/{model}", "labels": {"model": model}})
            continue
        seeds = []
        for seed, count in zip((42, 43, 44), counts, strict=False):
            step = f"eval/{model}/seed-{seed}"
            _evaluation(root / step, [i < count for i in range(n)], labels)
            seeds.append({"seed": seed, "step": step})
            run = root / "runs" / model / f"seed-{seed}"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text("seed: 1\n")
            lines = [{"step": s, "rewards/accuracy_reward/mean": s / 10} for s in range(1, 6)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        rows.append({"labels": {"model": model}, "seeds": seeds})
    table = {
        "name": "accuracy",
        "title": "t",
        "rows": rows,
        "per_relation": True,
        "tests": [{"kind": "chance"}, {"kind": "versus", "reference": {"model": "base"}}],
        "plots": [{"kind": "bars", "group": "model", "file": "accuracy.png"}],
    }
    steps = [f"runs/grpo/seed-{s}" for s in (42, 43, 44)]
    data = {"experiment": "t", "steps": [], "tables": [table],
            "plots": [{"kind": "rewards", "steps": steps, "file": "reward_curve.png"}]}  # fmt: skip
    (root / "experiment.json").write_text(json.dumps(data))
    return table


def test_seeded_table_has_mean_spread_each_seed_and_the_bootstrap(tmp_path):
    table = _seeded_demo(tmp_path, {"base": [80], "grpo": [90, 95, 97]})
    frame, _ = build_table(tmp_path, table)
    assert list(frame.columns) == [
        "model", "seeds", "n", "accuracy", "sd", "min", "max", "seed 42", "seed 43", "seed 44",
        "ci_low", "ci_high", "f1_weighted", "p vs chance (one-sided)",
        "holm p vs chance (one-sided)", "diff vs model=base", "diff low vs model=base",
        "diff high vs model=base", "p vs model=base", "holm p vs model=base", "status",
    ]  # fmt: skip
    base, grpo = frame.to_dict("records")
    assert grpo["seeds"] == 3 and grpo["n"] == 100
    assert grpo["accuracy"] == pytest.approx(0.94)
    assert grpo["sd"] == pytest.approx(np.std([0.90, 0.95, 0.97], ddof=1))
    assert (grpo["min"], grpo["max"], grpo["seed 43"]) == (0.90, 0.97, 0.95)
    assert grpo["diff vs model=base"] == pytest.approx(0.14)
    assert grpo["diff low vs model=base"] > 0 and grpo["p vs model=base"] < 0.05
    assert grpo["ci_low"] < 0.94 < grpo["ci_high"]
    assert base["accuracy"] == 0.8 and np.isnan(base["seed 42"]) and base["status"] == "ok"
    assert np.isnan(base["diff vs model=base"])  # the reference row itself


def test_seeded_report_writes_every_seed_and_rebuilds_byte_for_byte(tmp_path):
    _seeded_demo(tmp_path, {"base": [80], "grpo": [90, 95, 97]})
    written = build_report(tmp_path)["written"]
    assert {"plots/accuracy.png", "reward_curve.png", "runs/grpo/seed-44/training.png"} <= set(
        written
    )
    files = {p: (tmp_path / p).read_bytes() for p in written}
    build_report(tmp_path)
    assert {p: (tmp_path / p).read_bytes() for p in written} == files
    relations = (tmp_path / "tables/accuracy_per_relation.md").read_text()
    assert "| grpo | 43 | above |" in relations and "| base | - | above |" in relations
    caption = (tmp_path / "tables/accuracy.md").read_text()
    assert "mean over 3 seeds" in caption


def test_the_interval_of_a_mean_stays_inside_zero_and_one(tmp_path):
    table = _seeded_demo(tmp_path, {"base": [80], "grpo": [99, 99, 60]})
    grpo = build_table(tmp_path, table)[0].to_dict("records")[1]
    assert 0.0 <= grpo["ci_low"] < grpo["accuracy"] < grpo["ci_high"] <= 1.0


def test_a_missing_seed_makes_the_row_partial(tmp_path):
    table = _seeded_demo(tmp_path, {"base": [80], "grpo": [90, 95, 97]})
    (tmp_path / "eval/grpo/seed-44/scores.json").unlink()
    frame, _ = build_table(tmp_path, table)
    grpo = frame.to_dict("records")[1]
    assert grpo["status"] == "partial" and grpo["seeds"] == 2
    assert grpo["accuracy"] == pytest.approx(0.925) and np.isnan(grpo["seed 44"])


def test_one_run_per_row_keeps_the_table_of_before(tmp_path):
    table = _seeded_demo(tmp_path, {"base": [80], "grpo": [90]})
    frame, _ = build_table(tmp_path, table)
    assert list(frame.columns) == [
        "model", "n", "accuracy", "ci_low", "ci_high", "f1_weighted",
        "p vs chance (one-sided)", "holm p vs chance (one-sided)", "p vs model=base",
        "holm p vs model=base", "status",
    ]  # fmt: skip
    # the table says it holds single runs, and reads Holm over its 3 p-values
    (tmp_path / "experiment.json").write_text(json.dumps({"tables": [table]}))
    build_report(tmp_path)
    caption = (tmp_path / "tables/accuracy.md").read_text().splitlines()[-1]
    assert "Single runs: one training run per trained row" in caption
    assert "Holm-adjusted over the 3 p-values" in caption
    seeded = tmp_path / "seeded"
    seeded.mkdir()
    table = _seeded_demo(seeded, {"base": [80], "grpo": [90, 95, 97]})
    (seeded / "experiment.json").write_text(json.dumps({"tables": [table]}))
    build_report(seeded)
    assert "Single runs: one" not in (seeded / "tables/accuracy.md").read_text()

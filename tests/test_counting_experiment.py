"""The counting experiment (R1-V's counting-generalisation study) without running a model: its
plan, dry runs, the SuperCLEVR check, and the per-count table. The reduced real run is in
tests/test_experiments_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_counting import superclevr_release

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.experiments import build_study
from vqa_r1.experiments.spec import load_spec
from vqa_r1.launch.request import JobOptions
from vqa_r1.metrics import mcnemar_exact, one_sided_binomial_p, two_proportion_p, two_sided
from vqa_r1.report import experiment as experiment_report
from vqa_r1.report.experiment import build_report, build_table, per_relation_table

DRY = JobOptions(executor="slurm", cluster="study-12h", dry_run=True)
ONE = ["experiment.seeds=1", "experiment.blind=[]"]  # one run per row, no blind twin
STEPS = [  # with ONE
    "runs/sft",
    "runs/grpo",
    "eval/base-on-A",
    "eval/base-on-B",
    "eval/sft-on-A",
    "eval/sft-on-B",
    "eval/grpo-on-A",
    "eval/grpo-on-B",
    "tables",
]
SEEDS = (42, 43, 44)
DEFAULT_STEPS = [  # the spec's defaults: 3 seeds per trained row, SFT's blind twin
    *(f"runs/{row}/seed-{s}" for s in SEEDS for row in ("sft", "grpo")),
    *(f"runs/sft-blind/seed-{s}" for s in SEEDS),
    "eval/base-on-A",
    "eval/base-on-B",
    *(f"eval/{row}-on-{where}/seed-{s}" for row in ("sft", "grpo", "sft-blind")
      for where in ("A", "B") for s in SEEDS),
    "tables",
]  # fmt: skip


def test_spec_defaults_are_sized_for_the_tiny_models():
    spec = load_spec("counting")
    assert spec.kind == "counting" and spec.rows == ["base", "sft", "grpo"]
    assert (spec.counting_train, spec.counting_test, spec.counting_test_b) == (400, 200, 200)
    # a reading: 3 seeds, SFT's blind twin, 200 validation scenes, the test sets drawn afresh
    assert (spec.seeds, spec.blind, spec.counting_validation) == (3, ["sft"], 200)
    assert (spec.counting_seed, spec.counting_test_seed) == (0, 1)
    assert spec.superclevr == ""
    with pytest.raises(UserError, match="counting_test"):
        load_spec("counting", ["counting_test=0"])


@pytest.mark.parametrize("model", ["qwen2.5-vl-3b", "tiny-qwen2.5-vl-pretrained"])
def test_dry_run_prints_the_whole_chain_and_writes_nothing(model, tmp_path, capsys):
    out = tmp_path / "counting"
    args = ["experiment", "counting", "--model", model, "--dry-run", "--output-dir", str(out)]
    if model == "qwen2.5-vl-3b":
        args += ["--cluster", "study-12h"]
    assert launch_main(args) == 0
    text = capsys.readouterr().out
    assert [line.removeprefix("# ---- step ").removesuffix(" ----") for line in text.splitlines()
            if line.startswith("# ---- step ")] == DEFAULT_STEPS  # fmt: skip
    assert ("# data: counting scenes (A: train 400, validation 200, test 200; B: test_b 200; "
            "seed 0, test seed 1, 112 px)") in text  # fmt: skip
    assert "# data: blind prior: the commonest training count per question kind" in text
    assert "(generated at submission)" in text
    assert "#   eval/grpo-on-B/seed-43 (evaluate) after runs/grpo/seed-43" in text
    assert "#   eval/sft-blind-on-A/seed-44 (evaluate) after runs/sft-blind/seed-44" in text
    assert "#   tables (tables) after all other steps (afterany)" in text
    if model == "qwen2.5-vl-3b":
        assert text.count("#SBATCH --gres=gpu:a100:") == len(DEFAULT_STEPS) - 1
        assert text.count("--dependency='afterany:") == 1
    assert not out.exists(), "a dry run writes nothing"
    folder = text.split("# data: counting scenes")[1].split(": ", 1)[1].split(" (")[0]
    assert not Path(folder).exists(), "the scenes are made at submission, not by a dry run"


def _by_name(b) -> dict:
    return {s.name: s for s in b.steps}


def test_plan_wires_splits_cot_sft_count_reward_and_tests(tmp_path):
    b = build_study("counting", "qwen2.5-vl-3b", ONE, str(tmp_path / "exp"), DRY)
    steps = _by_name(b)
    assert [s.name for s in b.steps] == STEPS
    data = steps["runs/sft"].info["settings"]["data.dataset"]
    assert "counting-" in Path(data).name
    assert steps["runs/sft"].info["settings"]["data.with_reasoning"] is True
    grpo = steps["runs/grpo"].info["settings"]
    assert grpo["train.reward_funcs"] == ["count", "format"] and grpo["data.dataset"] == data
    for row in ("base", "sft", "grpo"):
        assert steps[f"eval/{row}-on-A"].info["settings"]["eval.split"] == "test"
        assert steps[f"eval/{row}-on-B"].info["settings"]["eval.split"] == "test_b"
        assert steps[f"eval/{row}-on-B"].info["settings"]["data.dataset"] == data
    assert steps["eval/grpo-on-B"].after == ("runs/grpo",)
    assert steps["eval/base-on-A"].after == ()
    table = b.tables[0]
    assert table["per_count"] is True
    assert [r["labels"] for r in table["rows"]][:2] == [
        {"method": "base", "evaluated on": "A"},
        {"method": "base", "evaluated on": "B"},
    ]
    assert table["tests"][:2] == [
        {"kind": "majority"},
        {"kind": "prior", "file": "data/prior.json"},  # fitted on the training split at launch
    ]
    versus = table["tests"][2:]
    assert [t["reference"] for t in versus] == [{"method": "base"}, {"method": "sft"}]
    assert all(t["match"] == ["evaluated on"] for t in versus)
    assert b.plots == [
        {"kind": "rewards", "steps": ["runs/grpo"], "file": "plots/reward_curve.png"}
    ]


def test_other_scene_settings_are_another_cached_folder(tmp_path):
    def dataset(overrides):
        b = build_study("counting", "qwen2.5-vl-3b", [*ONE, *overrides], str(tmp_path / "e"), DRY)
        return _by_name(b)["runs/sft"].info["settings"]["data.dataset"]

    same = dataset([])
    assert dataset([]) == same
    assert dataset(["experiment.counting_train=50"]) != same
    assert dataset(["experiment.counting_seed=1"]) != same
    assert dataset(["experiment.counting_test_seed=2"]) != same


def test_seeds_and_sft_then_grpo(tmp_path):
    overrides = [
        "experiment.seeds=2",
        "experiment.rows=base,sft,grpo,sft+grpo",
        "experiment.blind=[]",
    ]
    b = build_study("counting", "qwen2.5-vl-3b", overrides, str(tmp_path / "exp"), DRY)
    steps = _by_name(b)
    assert "eval/base-on-B" in steps and "eval/base-on-B/seed-42" not in steps  # base: once
    for seed in (42, 43):
        chained = steps[f"runs/sft+grpo/seed-{seed}"]
        assert chained.after == (f"runs/sft/seed-{seed}",)
        assert chained.info["settings"]["init_adapter"] == str(
            tmp_path / "exp" / f"runs/sft/seed-{seed}/final"
        )
        assert chained.info["settings"]["train.seed"] == seed
        assert f"eval/sft+grpo-on-B/seed-{seed}" in steps
    rows = {tuple(r["labels"].values()): r for r in b.tables[0]["rows"]}
    assert [s["step"] for s in rows["grpo", "B"]["seeds"]] == [
        "eval/grpo-on-B/seed-42",
        "eval/grpo-on-B/seed-43",
    ]
    assert b.plots[0]["steps"] == [
        "runs/grpo/seed-42",
        "runs/sft+grpo/seed-42",
        "runs/grpo/seed-43",
        "runs/sft+grpo/seed-43",
    ]


def test_superclevr_folder_is_a_third_evaluation_set(tmp_path):
    folder = superclevr_release(tmp_path / "superclevr")
    overrides = [*ONE, f"experiment.superclevr={folder}"]
    b = build_study("counting", "qwen2.5-vl-3b", overrides, str(tmp_path / "exp"), DRY)
    steps = _by_name(b)
    for row in ("base", "sft", "grpo"):
        settings = steps[f"eval/{row}-on-SuperCLEVR"].info["settings"]
        assert (settings["data.dataset"], settings["eval.split"]) == (str(folder), "test")
    assert len(b.steps) == len(STEPS) + 3
    assert any(note.startswith("SuperCLEVR: ") for note in b.notes)


@pytest.mark.parametrize("what", ["missing", "empty", "file"])
def test_a_bad_superclevr_folder_is_one_line_before_anything_is_queued(what, tmp_path):
    bad = tmp_path / "bad"
    if what == "empty":
        bad.mkdir()
    elif what == "file":
        bad.write_text("x")
    root = tmp_path / "exp"
    job = JobOptions(executor="local")
    with pytest.raises(UserError, match="experiment.superclevr: ") as error:
        build_study("counting", "tiny-qwen2.5-vl", [f"experiment.superclevr={bad}"], str(root), job)
    assert "\n" not in str(error.value)
    assert not (root / "experiment.json").exists() and not (root / "runs").exists()


# ------------------------------------------------------------------------------- report


def _scores(folder: Path, per_count: dict[int, tuple[int, int]]) -> None:
    from vqa_r1.metrics import wilson_interval

    correct = sum(c for c, _ in per_count.values())
    n = sum(m for _, m in per_count.values())
    folder.mkdir(parents=True, exist_ok=True)
    scores = {
        "accuracy": correct / n,
        "accuracy_ci_95": list(wilson_interval(correct, n)),
        "f1_weighted": correct / n,
        "n": n,
        "correct": correct,
        "per_relation": {
            f"count {k}": {"n": m, "accuracy": c / m} for k, (c, m) in per_count.items()
        },
    }
    (folder / "scores.json").write_text(json.dumps(scores))
    records = [  # c right answers of m per count, the rest answered 0
        {"predicted_response": f"<answer> {k if i < c else 0} </answer>",
         "true_response": f"<answer> {k} </answer>"}
        for k, (c, m) in per_count.items()
        for i in range(m)
    ]  # fmt: skip
    (folder / "generated_responses.json").write_text(json.dumps(records))


def test_tables_hold_accuracy_tests_and_accuracy_by_true_count(tmp_path, monkeypatch):
    b = build_study("counting", "qwen2.5-vl-3b", ONE, str(tmp_path / "plan"), DRY)
    table = b.tables[0]
    (tmp_path / "experiment.json").write_text(json.dumps({"experiment": "c", "tables": [table]}))
    results = {
        ("base", "A"): {3: (10, 60), 6: (5, 40)},
        ("base", "B"): {7: (2, 50), 10: (0, 50)},
        ("sft", "A"): {3: (40, 50), 6: (30, 50)},
        ("sft", "B"): {7: (5, 50), 10: (1, 50)},
        ("grpo", "A"): {3: (42, 50), 6: (28, 50)},
        ("grpo", "B"): {7: (12, 50), 10: (6, 50)},
    }
    for (row, where), per_count in results.items():
        _scores(tmp_path / "eval" / f"{row}-on-{where}", per_count)
    frame, _ = build_table(tmp_path, table)
    rows = {(r["method"], r["evaluated on"]): r for r in frame.to_dict("records")}
    claim = "p vs method=sft (same evaluated on)"
    # the same items in the same order (grpo and sft on B): McNemar on the discordant items,
    # 12 right for grpo only and none for sft only
    assert rows["grpo", "B"][claim] == pytest.approx(mcnemar_exact(12, 0))
    # other items (base's counts differ from sft's on A): unpaired, the two-proportion test
    assert rows["sft", "A"]["p vs method=base (same evaluated on)"] == pytest.approx(
        two_sided(two_proportion_p(70, 100, 15, 100))
    )
    assert rows["grpo", "B"]["ci_low"] < 0.18 < rows["grpo", "B"]["ci_high"]  # Wilson
    # the reference of a count: always answering the set's commonest count (3: 60 of 100)
    assert rows["base", "A"]["most frequent answer"] == pytest.approx(0.6)
    assert rows["grpo", "A"]["most frequent answer"] == pytest.approx(0.5)
    above = "p vs most frequent answer (one-sided)"
    assert rows["grpo", "A"][above] == pytest.approx(one_sided_binomial_p(70, 100, 0.5))
    assert rows["base", "A"][above] == pytest.approx(one_sided_binomial_p(15, 100, 0.6))
    counts = per_relation_table(tmp_path, table, by_count=True)
    grpo_b = counts[(counts["method"] == "grpo") & (counts["evaluated on"] == "B")]
    assert list(grpo_b["count"]) == [7, 10]  # numeric order, not "count 10" < "count 7"
    assert list(grpo_b["accuracy"]) == pytest.approx([0.24, 0.12])
    assert "relation" not in counts.columns
    drawn = []  # the bar plot marks each set's most frequent answer
    real = experiment_report.plot_accuracy_bars
    monkeypatch.setattr(
        experiment_report,
        "plot_accuracy_bars",
        lambda data, png, **kw: drawn.append(kw["floor"]) or real(data, png, **kw),
    )
    written = build_report(tmp_path)["written"]
    assert drawn == ["most frequent answer"]
    assert {"tables/accuracy.md", "tables/accuracy_per_count.md", "plots/accuracy.png"} <= set(
        written
    )
    assert "tables/accuracy_per_relation.md" not in written
    text = (tmp_path / "tables/accuracy_per_count.md").read_text()
    assert "| grpo | B | 7 | 50 | 0.240 |" in text and "| grpo | B | 10 | 50 | 0.120 |" in text


# ------------------------------------------------------------------------------- a real run


@pytest.mark.slow
def test_reduced_counting_run_lands_as_tables(tmp_path):
    """The whole chain on the pretrained tiny model, at the smallest sizes (about 1.5 minutes on
    2 cores): every step completes, the tables hold each row, both tests and the per-count table.
    The tiny model was never trained on counting: its accuracy here is no result."""
    from test_experiments_e2e import MODEL, experiment, states

    root = tmp_path / "counting"
    experiment(
        "counting", "--model", MODEL, "--output-dir", str(root),
        "--set", "experiment.seeds=1",  # the spec's blind twin of SFT stays
        "--set", "experiment.counting_train=16",
        "--set", "experiment.counting_validation=2",
        "--set", "experiment.counting_test=8",
        "--set", "experiment.counting_test_b=8",
        "--set", "sft:train.max_steps=2",
        "--set", "grpo:train.max_steps=1",
        "--set", "grpo:train.per_device_train_batch_size=8",
        "--set", "evaluate:eval.max_new_tokens=32",
    )  # fmt: skip
    blind = ["runs/sft-blind", "eval/sft-blind-on-A", "eval/sft-blind-on-B"]
    assert set(states(root).values()) == {"COMPLETED"} and len(states(root)) == len(STEPS) + 3
    assert "images: blank" in (root / "runs/sft-blind/config.yaml").read_text()
    assert "images: blank" in (root / "eval/sft-blind-on-B/config.yaml").read_text()
    assert all(step in states(root) for step in blind)
    prior = json.loads((root / "data/prior.json").read_text())
    assert set(prior["by question kind"]) <= {"all", "shape", "color"}
    assert prior["n"] == 16
    grpo = (root / "runs/grpo/config.yaml").read_text()
    assert "reward_funcs:\n  - count\n  - format" in grpo or "reward_funcs: [count, format]" in grpo
    table = (root / "tables/accuracy.md").read_text()
    for method in ("base", "sft", "grpo", "sft blind"):
        for where in ("A", "B"):
            assert f"| {method} | {where} | 8 |" in table
    for column in (
        "blind prior (train, per question kind)",
        "p vs blind twin",
        "holm p vs blind twin",
    ):
        assert column in table
    assert "missing" not in table
    assert "p vs method=base (same evaluated on)" in table
    assert "p vs method=sft (same evaluated on)" in table  # R1-V's claim, on B
    assert "p vs most frequent answer (one-sided)" in table  # read from the real responses
    import csv

    with (root / "tables/accuracy.csv").open() as handle:  # column names hold commas
        rows = list(csv.DictReader(handle))
    grpo_b = next(r for r in rows if (r["method"], r["evaluated on"]) == ("grpo", "B"))
    assert 0.0 <= float(grpo_b["p vs method=sft (same evaluated on)"]) <= 1.0
    share = float(grpo_b["most frequent answer"])
    assert 1 / 8 <= share <= 1.0  # 8 test_b scenes: at least one answer repeats or is alone
    counts = (root / "tables/accuracy_per_count.md").read_text()
    assert "| method | evaluated on | count | n |" in counts
    b_counts = [
        int(line.split("|")[3]) for line in counts.splitlines() if line.startswith("| grpo | B |")
    ]
    assert (
        b_counts == sorted(b_counts)
        and sum(
            int(line.split("|")[4])
            for line in counts.splitlines()
            if line.startswith("| grpo | B |")
        )
        == 8
    )
    assert (root / "plots/accuracy.png").stat().st_size > 5000
    assert (root / "plots/reward_curve.png").exists()


def test_seeded_rows_are_tested_against_the_most_frequent_answer_by_the_seeds_bootstrap(tmp_path):
    overrides = ["experiment.seeds=2", "experiment.blind=[]"]
    b = build_study("counting", "qwen2.5-vl-3b", overrides, str(tmp_path / "plan"), DRY)
    table = b.tables[0]
    (tmp_path / "experiment.json").write_text(json.dumps({"experiment": "c", "tables": [table]}))
    # every set: 30 threes and 10 sixes (most frequent answer: 0.75)
    for where in ("A", "B"):
        _scores(tmp_path / "eval" / f"base-on-{where}", {3: (30, 30), 6: (0, 10)})  # always 3
        for seed in (42, 43):
            _scores(
                tmp_path / "eval" / f"sft-on-{where}" / f"seed-{seed}", {3: (12, 30), 6: (2, 10)}
            )
            _scores(
                tmp_path / "eval" / f"grpo-on-{where}" / f"seed-{seed}", {3: (30, 30), 6: (10, 10)}
            )
    frame, _ = build_table(tmp_path, table)
    rows = {(r["method"], r["evaluated on"]): r for r in frame.to_dict("records")}
    above = "p vs most frequent answer (one-sided)"
    assert {r["most frequent answer"] for r in rows.values()} == {0.75}
    assert rows["grpo", "A"][above] < 0.01  # every seed right on all 40: above 0.75
    assert rows["sft", "A"][above] > 0.99  # 0.35 per seed: far below
    assert rows["base", "A"][above] == pytest.approx(one_sided_binomial_p(30, 40, 0.75))


def _counting_records(folder: Path, answers: list[tuple[str, int, int]]) -> None:
    """An evaluation of (question, true count, answered count) items, with its scores."""
    from vqa_r1.metrics import wilson_interval

    correct = sum(t == a for _, t, a in answers)
    n = len(answers)
    folder.mkdir(parents=True, exist_ok=True)
    scores = {"accuracy": correct / n, "accuracy_ci_95": list(wilson_interval(correct, n)),
              "f1_weighted": correct / n, "n": n, "correct": correct, "answer_type": "number"}  # fmt: skip
    (folder / "scores.json").write_text(json.dumps(scores))
    records = [{"question": q, "true_response": f"<answer> {t} </answer>",
                "predicted_response": f"<answer> {a} </answer>"} for q, t, a in answers]  # fmt: skip
    (folder / "generated_responses.json").write_text(json.dumps(records))


def test_each_row_meets_its_blind_twin_and_the_prior_with_holm_adjusted_p(tmp_path, monkeypatch):
    """The counting table's controls (issue 31): each trained row against its twin trained and
    evaluated on blank images (the seeds-and-items bootstrap, paired on items), the blind prior
    fitted on the training split per question kind, and every p Holm-adjusted over the table."""
    import pandas as pd

    from vqa_r1.metrics import holm

    b = build_study("counting", "qwen2.5-vl-3b", ["experiment.seeds=2"], str(tmp_path / "p"), DRY)
    table = b.tables[0]
    assert {"kind": "blind", "label": "method", "match": ["evaluated on"]} in table["tests"]
    assert [r["labels"]["method"] for r in table["rows"]][-2:] == ["sft blind", "sft blind"]
    (tmp_path / "experiment.json").write_text(json.dumps({"experiment": "c", "tables": [table]}))
    (tmp_path / "data").mkdir()
    prior = {"by question kind": {"all": "6", "shape": "1", "color": "1"}}
    (tmp_path / "data/prior.json").write_text(json.dumps(prior))
    # 40 items: 20 "how many objects" (10 of them 6), 10 shape (all 1), 10 colour (all 2)
    questions = ([("How many objects are there?", 6 if i < 10 else 4) for i in range(20)]
                 + [("How many cubes are there?", 1)] * 10
                 + [("How many red objects are there?", 2)] * 10)  # fmt: skip
    prior_share = (10 + 10 + 0) / 40

    def answers(right: int) -> list[tuple[str, int, int]]:  # the first ``right`` items right
        return [(q, t, t if i < right else 0) for i, (q, t) in enumerate(questions)]

    for where in ("A", "B"):
        _counting_records(tmp_path / f"eval/base-on-{where}", answers(0))
        for seed in (42, 43):
            _counting_records(tmp_path / f"eval/sft-on-{where}/seed-{seed}", answers(36))
            _counting_records(tmp_path / f"eval/grpo-on-{where}/seed-{seed}", answers(20))
            _counting_records(tmp_path / f"eval/sft-blind-on-{where}/seed-{seed}", answers(20))
    frame, tests = build_table(tmp_path, table)
    rows = {(r["method"], r["evaluated on"]): r for r in frame.to_dict("records")}
    sft = rows["sft", "A"]
    assert sft["diff vs blind twin"] == pytest.approx(0.4)  # 0.9 against its twin's 0.5
    assert sft["diff low vs blind twin"] > 0 and sft["p vs blind twin"] < 0.01
    assert (
        rows["grpo", "A"]["p vs blind twin"] != rows["grpo", "A"]["p vs blind twin"]
    )  # NaN: no twin
    column = "blind prior (train, per question kind)"
    assert {rows[k][column] for k in rows} == {prior_share}
    assert sft["p vs blind prior (train, per question kind) (one-sided)"] < 0.01
    # Holm over every p of the table: each adjusted one is holm() of the whole family
    p_columns = [c for c in frame.columns if c.startswith("p ")]
    family = [v for c in p_columns for v in frame[c].tolist()]
    present = [None if v is None or v != v else v for v in family]
    adjusted = holm(present)
    got = [v for c in p_columns for v in frame[f"holm {c}"].tolist()]
    for want, value in zip(adjusted, got, strict=True):
        assert (want is None and (value is None or value != value)) or value == pytest.approx(want)
    from vqa_r1.report import seed_plots

    floors = []  # the seeded bar plot marks each set's blind prior
    real = seed_plots.plot_seeded_bars
    monkeypatch.setattr(seed_plots, "plot_seeded_bars",
                        lambda *a, **kw: floors.append(kw["floor"]) or real(*a, **kw))  # fmt: skip
    written = build_report(tmp_path)["written"]
    assert floors == [column]
    kinds = pd.read_csv(tmp_path / "tables/accuracy_per_kind.csv")  # per question kind and seed
    sft_all = kinds[(kinds["method"] == "sft") & (kinds["evaluated on"] == "A")
                    & (kinds["question kind"] == "all")]  # fmt: skip
    assert list(sft_all["seed"].astype(str)) == ["42", "43", "pooled"]
    assert list(sft_all["n"]) == [20, 20, 20] and list(sft_all["accuracy"]) == [1.0] * 3
    assert list(sft_all["blind prior"]) == [0.5] * 3
    # the pooled line tests the seeds against the prior on the same items (bootstrap, Holm)
    pooled = sft_all.iloc[-1]
    assert pooled["diff vs blind prior"] == pytest.approx(0.5) and pooled["p vs blind prior"] < 0.01
    colour = kinds[(kinds["method"] == "grpo") & (kinds["evaluated on"] == "A")
                   & (kinds["seed"].astype(str) == "pooled")]  # fmt: skip
    assert list(colour["question kind"]) == ["all", "color", "shape"]
    assert list(colour["accuracy"]) == [1.0, 0.0, 0.0]  # the first 20 items: how many objects
    assert colour["p vs blind prior"].iloc[2] < 0.01  # shape: 0 against the prior's 1.0
    lines = kinds["p vs blind prior"].notna()
    assert list(kinds.loc[lines, "holm p vs blind prior"]) == pytest.approx(
        holm(list(kinds.loc[lines, "p vs blind prior"])), abs=2e-3
    )  # the CSV's three decimals
    assert lines.sum() == 18  # 3 seeded rows x 2 sets x 3 kinds
    assert (
        "holm p over the 18 pooled lines" in (tmp_path / "tables/accuracy_per_kind.md").read_text()
    )
    text = (tmp_path / "tables/accuracy.md").read_text()
    assert "| p vs blind twin | holm p vs blind twin |" in text
    assert f"Holm-adjusted over the {sum(v is not None for v in present)} p-values" in text
    assert "tables/accuracy.md" in written

"""Declared experiments without running a model: specs, plans, dry runs, the chain's order, and
the report built from run directories (tables, tests, byte-for-byte rebuilds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.experiments import build_study
from vqa_r1.experiments.spec import list_specs, load_spec
from vqa_r1.experiments.study import split_overrides
from vqa_r1.launch.graph import Step, order
from vqa_r1.launch.request import JobOptions
from vqa_r1.metrics import trend_test, two_proportion_p, two_sided
from vqa_r1.recipes import load_config
from vqa_r1.report.experiment import build_report, build_table

STUDY = ["--model", "qwen2.5-vl-3b", "--cluster", "study-12h", "--dry-run"]
EXPECTED_STEPS = {
    "demo": 8,  # sft, grpo, sft-then-grpo, 4 evaluations (base and each), tables
    "text-bias": 50,  # base + 4 levels x 2 methods x 3 seeds x (train, evaluate) + tables
    "sim2real": 39,  # base on 2 domains + 2 methods x 2 domains x 3 seeds x (train + 2 evals) + tables
    "drivingvqa": 17,  # base + 3 seeds x (sft, its evaluation, merge, grpo, its evaluation) + tables
    "prompt-tuning": 9,  # base and 3 prompt-tuned seeds in each of 2 modes, tables
    "counting": 30,  # 3 seeds x (sft, grpo, sft blind) + base and 9 runs x 2 sets (A, B) + tables
    "cryptogram": 20,  # 3 seeds x (sft, grpo gated and ungated, their 3 evaluations), base, tables
}


def test_every_declared_spec_loads():
    declared = {"demo", "text-bias", "sim2real", "drivingvqa", "prompt-tuning", "counting"}
    assert declared | {"cryptogram"} == set(list_specs())
    assert load_spec("demo").rows == ["base", "sft", "grpo", "sft+grpo"]
    spec = load_spec("text-bias")
    assert spec.bias_levels == ["none", "0.627", "0.69", "0.997"]  # the study's levels
    assert spec.methods == ["sft", "grpo"]
    assert load_spec("sim2real").real_dataset == "shifted"
    assert load_spec("drivingvqa").grpo_rewards == ["choice", "iou", "format"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["bias_levels=none,0.4"], "must be in (0.5, 1]"),
        (["bias_levels=none,high"], "neither 'none' nor a number"),
        (["methods=sft,ppo"], "unknown ['ppo']"),
        (["kind=other"], "expected one of"),
        (["levels=0.6"], "unknown key"),
    ],
)
def test_bad_spec_overrides_are_clear_errors(overrides, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_spec("text-bias", overrides)


def test_unknown_experiment_names_the_declared_ones():
    with pytest.raises(
        UserError, match="declared are counting, .*demo, drivingvqa, prompt-tuning, sim2real"
    ):
        load_spec("sim-to-real")


def test_overrides_split_into_every_verb_one_verb_and_the_spec():
    per_verb, spec = split_overrides(
        [
            "train.seed=3",
            "grpo:train.max_steps=5",
            "prompt-tune:train.max_steps=2",
            "experiment.x=1",
        ]
    )
    assert per_verb["sft"] == ["train.seed=3"]
    assert per_verb["grpo"] == ["train.seed=3", "train.max_steps=5"]
    assert per_verb["prompt_tune"] == ["train.seed=3", "train.max_steps=2"]
    assert spec == ["x=1"]
    with pytest.raises(UserError, match="not a verb"):
        split_overrides(["ppo:train.seed=1"])


def test_chain_order_puts_dependencies_first_and_refuses_cycles(tmp_path):
    a, b, c = (
        Step("a", tmp_path, None),
        Step("b", tmp_path, None, ("a",)),
        Step("c", tmp_path, None, ("b",)),
    )
    assert [s.name for s in order([c, b, a])] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="cycle"):
        order([Step("a", tmp_path, None, ("c",)), b, c])
    with pytest.raises(ValueError, match="unknown step"):
        order([Step("x", tmp_path, None, ("nope",))])


@pytest.mark.parametrize("name", sorted(EXPECTED_STEPS))
def test_dry_run_on_the_study_cluster_prints_the_whole_chain(name, tmp_path, capsys):
    out = tmp_path / name
    assert launch_main(["experiment", name, *STUDY, "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    steps = [line for line in text.splitlines() if line.startswith("# ---- step ")]
    assert len(steps) == EXPECTED_STEPS[name]
    # every job is a real sbatch script for the study's cluster profile
    assert text.count("#SBATCH --gres=gpu:a100:") == EXPECTED_STEPS[name] - 1
    assert text.count("#SBATCH --partition=cpu") + text.count("#SBATCH --partition=gpu") >= 1
    if name != "prompt-tuning":  # its four jobs are independent
        assert "afterok:<job id of runs/" in text
    assert text.count("--dependency='afterany:") == 1  # the tables wait for everything
    assert "--time=720" in text  # a 12 h budget at the profile's limit, longer runs requeue
    assert not out.exists(), "a dry run writes nothing"


def test_text_bias_plan_wires_levels_methods_and_data(tmp_path):
    job = JobOptions(executor="slurm", cluster="study-12h", dry_run=True)
    one = ["experiment.methods=sft", "experiment.seeds=1"]  # the wiring of one seed's steps
    b = build_study("text-bias", "qwen2.5-vl-3b", one, str(tmp_path), job)
    names = [s.name for s in b.steps]
    assert names[:3] == ["eval/base", "runs/sft-none", "eval/sft-none"]
    by_name = {s.name: s for s in b.steps}
    biased = by_name["runs/sft-0.69"].request.task.run_dir
    assert biased.endswith("runs/sft-0.69")
    cfg = Path(biased)
    assert by_name["eval/sft-0.69"].after == ("runs/sft-0.69",)
    assert set(by_name["tables"].after) == set(names) - {"tables"}
    table = b.tables[0]
    assert [r["step"] for r in table["rows"]][:2] == ["eval/base", "eval/sft-none"]
    assert table["rows"][2]["from_files"]["achieved bias"] == [
        "data/text-bias-0.627/bias_card.json",
        "achieved",
    ]
    assert not cfg.exists()


# ------------------------------------------------------------------------------- report


def _scores(folder: Path, correct: int, n: int) -> None:
    from vqa_r1.metrics import wilson_interval

    folder.mkdir(parents=True, exist_ok=True)
    scores = {
        "accuracy": correct / n,
        "accuracy_ci_95": list(wilson_interval(correct, n)),
        "f1_weighted": correct / n,
        "n": n,
        "correct": correct,
    }
    (folder / "scores.json").write_text(json.dumps(scores))


def _experiment(root: Path) -> dict:
    rows = [{"step": "eval/base", "labels": {"method": "base", "bias level": "-"}}]
    for level, achieved in (("none", 0.5), ("0.7", 0.7), ("0.9", 0.9)):
        card = f"data/{level}/card.json"
        (root / "data" / level).mkdir(parents=True)
        (root / card).write_text(json.dumps({"achieved": achieved, "n": 100}))
        rows.append(
            {
                "step": f"eval/sft-{level}",
                "labels": {"method": "sft", "bias level": level},
                "from_files": {"achieved bias": [card, "achieved"], "train n": [card, "n"]},
            }
        )
    table = {
        "name": "accuracy",
        "title": "t",
        "rows": rows,
        "tests": [
            {"kind": "trend", "x": "achieved bias", "within": "method", "skip": ["base"]},
            {"kind": "versus", "within": "method", "reference": {"bias level": "none"}},
        ],
        "plots": [{"kind": "trend", "x": "achieved bias", "hue": "method", "file": "t.png"}],
    }
    data = {"experiment": "t", "steps": [], "tables": [table]}
    (root / "experiment.json").write_text(json.dumps(data))
    return table


def test_report_reads_every_number_from_the_run_directories(tmp_path):
    table = _experiment(tmp_path)
    for step, correct in (("base", 80), ("sft-none", 90), ("sft-0.7", 80)):
        _scores(tmp_path / "eval" / step, correct, 100)
    frame, tests = build_table(tmp_path, table)
    rows = {r["bias level"]: r for r in frame.to_dict("records")}
    assert rows["0.7"]["accuracy"] == pytest.approx(0.8) and rows["0.7"]["achieved bias"] == 0.7
    assert rows["0.9"]["status"] == "missing"  # not evaluated (yet): shown, not dropped
    p = two_sided(two_proportion_p(80, 100, 90, 100))
    assert rows["0.7"]["p vs bias level=none (same method)"] == pytest.approx(p)
    trend = trend_test([0.5, 0.7], [90, 80], [100, 100])
    assert tests.to_dict("records")[0]["p"] == pytest.approx(trend["p"])
    assert tests.to_dict("records")[0]["levels"] == 2


def test_report_rebuilds_byte_for_byte_and_follows_the_files(tmp_path):
    _experiment(tmp_path)
    for step, correct in (("base", 80), ("sft-none", 90), ("sft-0.7", 80), ("sft-0.9", 60)):
        _scores(tmp_path / "eval" / step, correct, 100)
    first = build_report(tmp_path)
    files = {p: (tmp_path / p).read_bytes() for p in first["written"]}
    assert {"tables/accuracy.md", "tables/accuracy.csv", "tables/accuracy.tex"} <= set(files)
    assert "plots/t.png" in files and "tables/accuracy_tests.md" in files
    build_report(tmp_path)
    assert {p: (tmp_path / p).read_bytes() for p in first["written"]} == files
    _scores(tmp_path / "eval" / "sft-0.9", 61, 100)  # a changed run changes its table
    build_report(tmp_path)
    assert (tmp_path / "tables/accuracy.md").read_bytes() != files["tables/accuracy.md"]
    assert "| 0.610 |" in (tmp_path / "tables/accuracy.md").read_text()


def test_tables_command_checks_committed_tables(tmp_path, capsys):
    from vqa_r1.cli import main

    _experiment(tmp_path / "exp")
    for step in ("base", "sft-none", "sft-0.7", "sft-0.9"):
        _scores(tmp_path / "exp" / "eval" / step, 70, 100)
    readme = tmp_path / "README.md"
    readme.write_text("# r\n<!-- table: exp/tables/accuracy.md -->\nold\n<!-- /table -->\nend\n")
    args = ["tables", "--results", str(tmp_path), "--study", str(tmp_path / "none")]
    args += ["--readme", str(readme)]
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    md = tmp_path / "exp" / "tables" / "accuracy.md"
    assert (
        readme.read_text()
        == f"# r\n<!-- table: exp/tables/accuracy.md -->\n{md.read_text()}<!-- /table -->\nend\n"
    )
    md.write_text(md.read_text().replace("0.700", "0.990"))  # a number typed in by hand
    assert main([*args, "--check"]) == 1
    assert "changed by the rebuild" in capsys.readouterr().out
    assert main([*args, "--check"]) == 0


def test_tables_of_one_experiment_write_nothing_outside_it(tmp_path, monkeypatch, realdata):
    """`vqa-r1 tables EXP` from a folder of the user's: the user's ./results/study files and
    ./README.md stay as they were, no ./results is made; only EXP's tables are written."""
    from vqa_r1.cli import main

    _experiment(tmp_path / "exp")
    for step in ("base", "sft-none", "sft-0.7", "sft-0.9"):
        _scores(tmp_path / "exp" / "eval" / step, 70, 100)
    user = tmp_path / "work"
    (user / "results" / "study").mkdir(parents=True)
    mine = user / "results" / "study" / "study_reference.md"
    mine.write_text("my notes\n")
    readme = user / "README.md"
    readme.write_text("<!-- table: ../exp/tables/accuracy.md -->\nmine\n<!-- /table -->\n")
    before = sorted((p, p.read_bytes()) for p in user.rglob("*") if p.is_file())
    monkeypatch.chdir(user)
    study = realdata / "results"
    assert main(["tables", str(tmp_path / "exp"), "--study", str(study)]) == 0
    assert sorted((p, p.read_bytes()) for p in user.rglob("*") if p.is_file()) == before
    assert (tmp_path / "exp" / "tables" / "accuracy.md").is_file()
    # a results folder the user names is rebuilt as a whole, the study reference with it
    assert main(["tables", "--results", str(tmp_path), "--study", str(study)]) == 0
    assert (tmp_path / "study" / "study_reference.md").is_file()
    assert main(["tables", "--results", str(tmp_path / "nope")]) == 2


def test_the_readme_and_the_docs_show_the_generated_tables_verbatim():
    from vqa_r1.report.readme import synced

    repo = Path(__file__).resolve().parents[1]
    documents = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    blocks = 0
    for document in documents:
        text = document.read_text()
        blocks += text.count("<!-- table: ")
        assert synced(text, document.parent) == text, f"run `vqa-r1 tables` to refresh {document}"
    assert blocks >= 9  # the demo's four, text bias (two), sim2real, prompt tuning, sampling


def _spatialsense(root: Path, splits: tuple[str, ...]) -> Path:
    """A SpatialSense release folder in its own format (one image, one claim per split)."""
    from PIL import Image

    (root / "images" / "flickr").mkdir(parents=True)
    Image.new("RGB", (32, 24), (200, 30, 30)).save(root / "images" / "flickr" / "1_a.jpg")
    part = {"x": 1, "y": 2, "bbox": [0, 10, 0, 10]}
    images = [
        {
            "url": "https://farm4.staticflickr.com/1/1_a.jpg",
            "height": 24,
            "width": 32,
            "split": split,
            "annotations": [
                {
                    "_id": split,
                    "predicate": "on",
                    "subject": {"name": "cat", **part},
                    "object": {"name": "mat", **part},
                    "label": True,
                }
            ],
        }
        for split in splits
    ]
    (root / "annotations.json").write_text(json.dumps(images))
    return root


SMALL_DATA = ["data.synthetic_train=40", "data.synthetic_validation=8", "data.synthetic_test=8"]


def test_sim2real_on_a_real_release_folder_is_checked_before_anything_is_queued(tmp_path):
    job = JobOptions(executor="local")
    real = _spatialsense(tmp_path / "SpatialSense", ("train", "valid", "test"))
    overrides = [*SMALL_DATA, f"experiment.real_dataset={real}", "experiment.methods=sft"]
    overrides += ["experiment.seeds=1"]
    b = build_study("sim2real", "tiny-qwen2.5-vl", overrides, str(tmp_path / "exp"), job)
    step = next(s for s in b.steps if s.run_dir == tmp_path / "exp" / "runs" / "sft-real")
    assert not step.run_dir.exists()  # written at submission, once every check has passed
    step.request.prepare()
    cfg = (tmp_path / "exp" / "runs" / "sft-real" / "config.yaml").read_text()
    assert f"dataset: {real}" in cfg
    assert any("eval/sft-sim-on-real" == s.name for s in b.steps)

    broken = _spatialsense(tmp_path / "NoTest", ("train", "valid"))  # the test split is missing
    overrides[-3] = f"experiment.real_dataset={broken}"
    with pytest.raises(UserError, match="no split 'test'"):
        build_study("sim2real", "tiny-qwen2.5-vl", overrides, str(tmp_path / "exp2"), job)
    assert not (tmp_path / "exp2" / "experiment.json").exists()
    assert not (tmp_path / "exp2" / "eval" / "base-on-real" / "config.yaml").exists()


@pytest.mark.slow
def test_committed_results_rebuild_byte_for_byte(monkeypatch, capsys, tmp_path, realdata):
    """Every committed table and plot under results/ (experiments, demos, the study's reference
    table, README's copies) is what `vqa-r1 tables` makes from the committed run directories."""
    from vqa_r1.cli import main

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)  # the checkout's results/ and README.md, from any folder
    monkeypatch.delenv("VQA_R1_STUDY_RESULTS", raising=False)
    monkeypatch.setenv("VQA_R1_REALDATA", str(realdata))  # the study's folder: no default path
    code = main(["tables", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{repo}/results/experiments/text-bias-tiny-qwen2.5-vl-pretrained: 34 files" in out
    assert f"{repo}/results/study: the study's published scores" in out
    assert list(tmp_path.iterdir()) == []
    assert "missing" not in out


def test_latex_labels_are_unique_per_experiment(tmp_path):
    """Every experiment has an `accuracy` table: two of them in one paper must not collide."""
    import re

    labels = []
    for name in ("text-bias-a", "sim2real-b"):
        _experiment(tmp_path / name)
        _scores(tmp_path / name / "eval" / "base", 80, 100)
        build_report(tmp_path / name)
        for tex in sorted((tmp_path / name / "tables").glob("*.tex")):
            labels += re.findall(r"\\label\{([^}]*)\}", tex.read_text())
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    assert "tab:text-bias-a:accuracy" in labels


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "unreadable scores"),
        ('{"n": 100, "correct": 80, "accuracy": "high"}', "accuracy is 'high', not a number"),
        ('{"n": 100, "accuracy": 0.8, "accuracy_ci_95": "wide"}', "accuracy_ci_95 is 'wide'"),
    ],
)
def test_tables_name_a_damaged_scores_file(text, message, tmp_path, capsys):
    """A scores.json that exists but is damaged is an error naming it, not a `missing` row or a
    table that prints text as an accuracy with status ok."""
    from vqa_r1.cli import main

    _experiment(tmp_path / "exp")
    for step in ("base", "sft-none", "sft-0.7"):
        _scores(tmp_path / "exp" / "eval" / step, 70, 100)
    bad = tmp_path / "exp" / "eval" / "sft-0.9" / "scores.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(text)
    args = ["tables", "--results", str(tmp_path), "--study", str(tmp_path / "none")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: {message}") and "re-run its evaluation" in err, err


def test_a_damaged_experiment_json_is_named_by_every_command(tmp_path, capsys):
    from vqa_r1.cli import main

    root = tmp_path / "exp"
    root.mkdir()
    (root / "experiment.json").write_text('{"experiment": "t", "steps": [')
    assert main(["tables", str(root)]) == 2
    assert launch_main(["status", str(root)]) == 2
    args = ["experiment", "prompt-tuning", "--model", "tiny-qwen2.5-vl", "--output-dir", str(root)]
    assert launch_main([*args, "--executor", "local"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 3, errors
    for line in errors:
        assert line.startswith(f"error: {root / 'experiment.json'}: not valid JSON"), line
        assert "re-launch the experiment's command" in line


def _launched(study) -> None:
    """Prepare a built study as a launch does (its datasets, experiment.json with its steps),
    without running the steps."""
    from vqa_r1.experiments import declare

    for prep in study.builder.prepare:
        prep.make()
    declare(study)


def test_a_relaunch_with_other_settings_is_refused_for_every_verb(tmp_path, capsys):
    """prompt-tune steps too (they were re-planned under the new settings, their old results kept
    and experiment.json's command rewritten); the refusal leaves experiment.json as it was."""
    job = JobOptions(executor="local")
    root = tmp_path / "exp"
    _launched(build_study("prompt-tuning", "tiny-qwen2.5-vl", [], str(root), job))
    record = (root / "experiment.json").read_bytes()
    assert "settings" in json.loads(record)["steps"][0]
    build_study("prompt-tuning", "tiny-qwen2.5-vl", [], str(root), job)  # unchanged: fine
    for change in ("prompt-tune:train.learning_rate=0.5", "prompt-tune:eval.limit=3"):
        args = ["experiment", "prompt-tuning", "--model", "tiny-qwen2.5-vl", "--set", change]
        assert launch_main([*args, "--output-dir", str(root), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert "was started with other settings: " + change.split(":")[1].split("=")[0] in err
        assert "--output-dir" in err and len(err.splitlines()) == 1
        assert (root / "experiment.json").read_bytes() == record

    sim = tmp_path / "sim"
    overrides = [*SMALL_DATA, "experiment.methods=sft"]
    _launched(build_study("sim2real", "tiny-qwen2.5-vl", overrides, str(sim), job))
    for change in ("sft:train.learning_rate=0.5", "evaluate:eval.batch_size=3"):
        with pytest.raises(UserError, match="was started with other settings"):
            build_study("sim2real", "tiny-qwen2.5-vl", [*overrides, change], str(sim), job)


def test_a_dry_run_of_an_unchanged_relaunch_on_synthetic_data_is_not_refused(tmp_path, capsys):
    """The dry run names the synthetic folders a launch uses, so its configs match the launch's
    (it named a placeholder and was refused: 'started with other settings (data.dataset)')."""
    overrides = [*SMALL_DATA, "experiment.methods=sft", "experiment.seeds=1"]
    root = tmp_path / "sim"
    launched = build_study(
        "sim2real", "tiny-qwen2.5-vl", overrides, str(root), JobOptions(executor="local")
    )
    _launched(launched)
    dry = build_study("sim2real", "tiny-qwen2.5-vl", overrides, str(root), JobOptions(dry_run=True))

    def datasets(b) -> dict:
        return {s.name: s.info["settings"]["data.dataset"] for s in b.steps if s.name != "tables"}

    assert datasets(dry) == datasets(launched) and len(datasets(dry)) == 8
    assert any("(cached)" in note for note in dry.notes)


def test_the_cryptogram_sizes_table_is_printed_from_its_files():
    """results/cryptogram-sizes-*/README.md holds the table its table.py prints from the folder's
    scores and responses (nothing typed by hand)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    folder = repo / "results" / "cryptogram-sizes-h200-2026-11-27"
    printed = subprocess.run(
        [sys.executable, str(folder / "table.py")], capture_output=True, text=True, check=True
    ).stdout
    assert printed.count("\n") == 6 and printed in (folder / "README.md").read_text()


def test_a_relaunch_with_a_changed_data_key_names_the_key_and_writes_nothing(
    tmp_path, monkeypatch, capsys
):
    """Issue 30, item 9: a re-launch with another `experiment.counting_train` was refused naming
    two dataset cache hashes (the step setting it changes), not the key the user typed; its
    `--dry-run` the same, with exit 2; and the new data is not generated first."""
    from vqa_r1.data.counting import CountingSpec, counting_target
    from vqa_r1.launch import executor

    # the first launch claims the folder, makes its data and records its steps, then stops
    monkeypatch.setattr(executor, "_run", lambda graph, kind, *a: executor.Outcome(130, kind))
    root = tmp_path / "counting"
    small = ["--set", "experiment.counting_validation=2", "--set", "experiment.counting_test=2",
             "--set", "experiment.counting_test_b=2"]  # fmt: skip
    argv = ["experiment", "counting", "--model", "tiny-qwen2.5-vl", "--executor", "inprocess",
            *small, "--output-dir", str(root)]  # fmt: skip
    assert launch_main([*argv, "--set", "experiment.counting_train=8"]) == 130
    assert (root / "experiment.json").is_file()
    capsys.readouterr()
    recorded = sorted(p.name for p in root.rglob("*"))
    for extra in ([], ["--dry-run"]):
        code = launch_main([*argv, "--set", "experiment.counting_train=9", *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err == (
            f"error: {root / 'experiment.json'}: this experiment was launched with other "
            "settings: experiment.counting_train: 8 there, 9 now. Re-launch with the same --set "
            "values, or give it a new --output-dir (--overwrite moves this one aside)\n"
        )
    assert sorted(p.name for p in root.rglob("*")) == recorded
    spec = load_spec("counting", ["counting_validation=2", "counting_test=2",
                                  "counting_test_b=2", "counting_train=9"])  # fmt: skip
    from vqa_r1.experiments.counting import counting_spec

    assert isinstance(counting_spec(spec), CountingSpec)
    assert not counting_target(counting_spec(spec)).exists()  # the new data: not generated


def test_the_studys_experiments_train_hub_models_with_the_studys_grpo(tmp_path, capsys):
    """text-bias, sim2real and drivingvqa reproduce the published study: on a hub model their GRPO
    runs take `--recipe study` (groups of 4, one prompt per step), not the GPU defaults' 8 x 4; a
    tiny model and the other experiments keep the model's recipe; an unknown overlay is one line."""
    for name in ("text-bias", "sim2real", "drivingvqa"):
        assert load_spec(name).hub_recipe == "study", name
    out = tmp_path / "tb"
    assert launch_main(["experiment", "text-bias", *STUDY, "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    grpo = text.split("# ---- step runs/grpo-none/seed-42 ----")[1].split("# ---- step ")[0]
    assert "# vqa-r1 grpo --model qwen2.5-vl-3b --recipe study" in grpo
    assert "num_generations: 4," in grpo and "gradient_accumulation_steps: 1," in grpo
    assert "per GPU 15.3 GiB of 80 GiB" in grpo  # the plan of the study's recipe
    job = JobOptions(executor="slurm", cluster="study-12h", dry_run=True)
    demo = build_study("demo", "qwen2.5-vl-3b", [], str(tmp_path / "demo"), job)
    settings = next(s for s in demo.steps if s.name == "runs/grpo").info["settings"]
    assert settings["train.num_generations"] == 8  # the demo keeps the GPU defaults
    tiny = build_study("text-bias", "tiny-qwen2.5-vl-pretrained", [], str(tmp_path / "t"), job)
    settings = next(s for s in tiny.steps if s.name == "runs/grpo-none/seed-42").info["settings"]
    cpu = load_config("grpo", "tiny-qwen2.5-vl-pretrained").train
    assert settings["train.per_device_train_batch_size"] == cpu.per_device_train_batch_size
    with pytest.raises(UserError, match="experiment.hub_recipe: 'nope' is not a shipped overlay"):
        load_spec("text-bias", ["hub_recipe=nope"])


def test_drivingvqa_runs_three_seeds_on_the_grid_stand_in_with_tiny_settings_for_tiny_models(
    tmp_path,
):
    """Issue 31, item 6: the drivingvqa spec reads on 3 seeds, on the stand-in whose boxes a tiny
    model can learn (grid layout, with its validation split); the tiny models get 600 SFT steps,
    160-token budgets and GRPO at temperature 0.3 and 5e-5, a hub model none of them."""
    spec = load_spec("drivingvqa")
    assert (spec.seeds, spec.drivingvqa_standin) == (3, "grid")
    job = JobOptions(executor="local", dry_run=True)
    for model, tiny in (("tiny-qwen2.5-vl-pretrained", True), ("qwen2.5-vl-3b", False)):
        b = build_study("drivingvqa", model, [], str(tmp_path / model), job)
        steps = {s.name: s.info["settings"] for s in b.steps if s.name != "tables"}
        assert [n for n in steps if n.startswith("runs/grpo/")] == [
            "runs/grpo/seed-42", "runs/grpo/seed-43", "runs/grpo/seed-44"
        ]  # fmt: skip
        sft, grpo = steps["runs/sft/seed-43"], steps["runs/grpo/seed-43"]
        assert (sft["train.max_steps"] == 600) is tiny
        assert (grpo["train.temperature"] == 0.3 and grpo["train.learning_rate"] == 5e-5) is tiny
        assert (steps["eval/grpo/seed-43"]["eval.max_new_tokens"] == 160) is tiny
        assert Path(sft["data.dataset"]).name == "drivingvqa-standin-grid-v2-seed0"
    table = b.tables[0]  # box IoU against SFT, the commonest letter set as a floor, no 0.5 line
    assert {"kind": "grounding", "reference": {"method": "sft"}} in table["tests"]
    assert {"kind": "majority"} in table["tests"] and table["plots"][0]["chance"] is False


def test_the_stand_in_layout_and_the_cryptogram_test_seed_as_a_user_types_them(tmp_path, capsys):
    """`--set experiment.drivingvqa_standin=free|grid` and `experiment.cryptogram_test_seed` reach
    the plan's data line; a layout that does not exist is one line before anything is planned."""
    tiny = ["--model", "tiny-qwen2.5-vl-pretrained", "--dry-run", "--set", "experiment.seeds=1"]
    args = ["experiment", "drivingvqa", *tiny, "--output-dir", str(tmp_path / "d")]
    assert launch_main([*args, "--set", "experiment.drivingvqa_standin=free"]) == 0
    assert "stand-in from synthetic scenes (free layout)" in capsys.readouterr().out
    assert launch_main([*args, "--set", "experiment.drivingvqa_standin=rows"]) == 2
    captured = capsys.readouterr()
    assert "drivingvqa_standin" in captured.err and "# ---- step" not in captured.out
    crypto = ["experiment", "cryptogram", *tiny, "--output-dir", str(tmp_path / "c")]
    assert launch_main([*crypto, "--set", "experiment.cryptogram_test_seed=5"]) == 0
    assert ", test seed 5" in capsys.readouterr().out


def test_the_demo_without_its_base_row_reads_the_trained_rows_against_sft(tmp_path):
    """`--rows sft,sft+grpo` (results/demo-two-image-sft100): with no base row to compare with,
    the table tests what GRPO continuing SFT adds; with base, the rows are read against base."""
    job = JobOptions(executor="local", dry_run=True)
    for rows, reference in (("[sft,sft+grpo]", "sft"), ("[base,sft,sft+grpo]", "base")):
        b = build_study("demo", "tiny-qwen2.5-vl-pretrained", [f"experiment.rows={rows}"],
                        str(tmp_path / reference), job)  # fmt: skip
        versus = [t for t in b.tables[0]["tests"] if t["kind"] == "versus"]
        assert versus == [{"kind": "versus", "reference": {"model": reference}}]
    b = build_study("demo", "tiny-qwen2.5-vl-pretrained", ["experiment.rows=[grpo]"],
                    str(tmp_path / "alone"), job)  # fmt: skip
    assert [t["kind"] for t in b.tables[0]["tests"]] == ["chance"]

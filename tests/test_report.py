"""vqa_r1.report: tables in three formats, training and accuracy plots, the study's reference table.

Reports are regenerated and committed, so every writer must give the same bytes for the same input;
the tests render twice and compare. Plots are checked to be valid PNGs (PIL opens them) and to show
the panels the logged keys call for; the study table is checked against its own scores.json files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from vqa_r1.errors import UserError
from vqa_r1.report.plots import (
    _training_panels,
    load_metrics,
    plot_accuracy_bars,
    plot_accuracy_trend,
    plot_all_runs,
    plot_training,
)
from vqa_r1.report.study import implied_sample, study_table, write_study_table
from vqa_r1.report.tables import write_table

DEMO_RUNS = Path(__file__).resolve().parents[1] / "results" / "demo" / "runs"


def _png_ok(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def _render_twice(fn, tmp_path: Path, *args, **kwargs) -> bytes:
    """Render to two files; assert they are valid, identical PNGs; return the bytes."""
    first = fn(*args, tmp_path / "first.png", **kwargs)
    second = fn(*args, tmp_path / "second.png", **kwargs)
    _png_ok(first)
    assert first.read_bytes() == second.read_bytes(), "PNG output is not deterministic"
    assert b"Matplotlib version" not in first.read_bytes()  # the Software tag is dropped
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left
    return first.read_bytes()


# --------------------------------------------------------------------------- tables


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_name": ["grpo_text", "sft 50%", "a|b & c"],
            "accuracy": [0.123456, 1.0, float("nan")],
            "n": [340, 425, 0],
        }
    )


def test_write_table_three_formats_deterministic(frame, tmp_path):
    paths = write_table(frame, tmp_path, "scores", caption="Scores of run_x (95% CI)")
    assert [p.name for p in paths] == ["scores.md", "scores.csv", "scores.tex"]
    first = {p.name: p.read_bytes() for p in paths}
    write_table(frame, tmp_path, "scores", caption="Scores of run_x (95% CI)")
    assert {p.name: p.read_bytes() for p in paths} == first
    assert all(b"\r" not in data and data.endswith(b"\n") for data in first.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.csv", "scores.md", "scores.tex"]

    csv_lines = first["scores.csv"].decode().splitlines()
    assert csv_lines == [
        "run_name,accuracy,n",
        "grpo_text,0.1235,340",
        "sft 50%,1.0000,425",
        "a|b & c,,0",
    ]

    md = first["scores.md"].decode().splitlines()
    assert md[0] == "| run_name | accuracy | n |"
    assert md[1] == "|:---|---:|---:|"  # text left, numbers right
    assert md[2] == "| grpo_text | 0.1235 | 340 |"
    assert md[4] == r"| a\|b & c |  | 0 |"  # a pipe in a cell must not open a column
    assert md[-1] == "Table: Scores of run_x (95% CI)"

    tex = first["scores.tex"].decode()
    assert r"run\_name & accuracy & n \\" in tex
    assert r"grpo\_text & 0.1235 & 340 \\" in tex
    assert r"sft 50\% & 1.0000 & 425 \\" in tex
    assert r"a|b \& c &  & 0 \\" in tex
    assert r"\caption{Scores of run\_x (95\% CI)}" in tex
    assert r"\label{tab:scores}" in tex and r"\begin{tabular}{lrr}" in tex


def test_write_table_float_format_and_odd_frames(frame, tmp_path):
    (_, csv, _) = write_table(frame, tmp_path, "three", float_format=".2f", na_rep="-")
    assert csv.read_text().splitlines()[1:3] == ["grpo_text,0.12,340", "sft 50%,1.00,425"]
    assert csv.read_text().splitlines()[3] == "a|b & c,-,0"
    (_, csv, _) = write_table(frame, tmp_path, "fn", float_format=lambda v: f"{100 * v:.1f}%")
    assert csv.read_text().splitlines()[1] == "grpo_text,12.3%,340"

    # A meaningful index is kept as the first column; a default one is dropped.
    (_, csv, _) = write_table(frame.set_index("run_name"), tmp_path, "indexed")
    assert csv.read_text().splitlines()[0] == "run_name,accuracy,n"

    # Empty frames give header-only (or no-column) tables, never an error.
    md, csv, tex = write_table(frame.iloc[:0], tmp_path, "empty")
    assert csv.read_text() == "run_name,accuracy,n\n"
    assert md.read_text().splitlines()[0] == "| run_name | accuracy | n |"
    md, csv, tex = write_table(pd.DataFrame(), tmp_path, "nothing")
    assert (
        csv.read_text() == ""
        and "no columns" in md.read_text()
        and r"\end{table}" in tex.read_text()
    )

    with pytest.raises(ValueError, match="plain file name"):
        write_table(frame, tmp_path, "sub/dir")


# --------------------------------------------------------------------------- training plots


def _titles(run_dir: Path) -> list[str]:
    return [p.title for p in _training_panels(load_metrics(run_dir / "metrics.jsonl"))]


def test_a_finished_run_without_logged_steps_is_not_said_to_be_logging_yet(tmp_path):
    """Issue 30, item 10: a complete short run (fewer steps than train.logging_steps) got a card
    saying it had not logged yet; a running one still may."""
    from vqa_r1.report.plots import no_curves_reason

    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text('{"state": "RUNNING"}')
    assert no_curves_reason(run, []) == "no metrics.jsonl (the run has not logged yet)"
    (run / "status.json").write_text('{"state": "COMPLETED"}')
    assert no_curves_reason(run, []).startswith("the run completed without logging a training")
    assert plot_training(run, tmp_path / "t.png").stat().st_size > 1000  # the card, an image


@pytest.mark.parametrize("run", ["grpo", "sft"])
def test_plot_training_on_demo_runs(run, tmp_path):
    run_dir = DEMO_RUNS / run
    data = _render_twice(plot_training, tmp_path, run_dir)
    assert len(data) > 20_000  # real curves, not the "no logged steps" card
    titles = _titles(run_dir)
    if run == "grpo":
        assert titles[:2] == [
            "Reward and components (band: +-1 std)",
            "Accuracy (accuracy reward, training batches)",
        ]
        assert "Completion length" in titles and "Reward std within a group" in titles
        assert "KL to the reference model" not in titles  # the demo trains with beta = 0
        assert "Training loss" not in titles
    else:
        assert titles == ["Training loss", "Mean token accuracy", "Learning rate"]
    records = load_metrics(run_dir / "metrics.jsonl")
    assert all("train_runtime" not in r for r in records)  # the summary line is not a step


def _grpo_record(step: int, kl: float | None) -> dict:
    record = {
        "step": step,
        "loss": 0.0,
        "learning_rate": 1e-4,
        "reward": 1.0 + step / 100,
        "reward_std": 0.2,
        "rewards/accuracy_reward/mean": 0.5 + step / 100,
        "rewards/accuracy_reward/std": 0.1,
        "rewards/format_reward/mean": 0.9,
        "completions/mean_length": 40.0 + step,
    }
    if kl is not None:
        record["kl"] = kl
    return record


def test_plot_training_with_kl_resume_and_odd_values(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = [_grpo_record(s, kl=0.01 * s) for s in (1, 2, 3, 4)]
    lines.append({**_grpo_record(3, kl=0.5), "reward": None})  # re-logged after a resume: wins
    lines.append({"step": 5, "kl": float("nan"), "reward": "n/a"})  # odd values are skipped
    lines.append({"step": 4, "train_runtime": 1.0, "train_loss": 0.1})
    text = "\n".join(json.dumps(r) for r in lines) + '\n{"step": 6, "kl"'  # torn last line
    (run_dir / "metrics.jsonl").write_text(text)

    records = load_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert records[2]["kl"] == 0.5
    assert "KL to the reference model" in _titles(run_dir)
    with_kl = _render_twice(plot_training, tmp_path / "a", run_dir)

    (run_dir / "metrics.jsonl").write_text(
        "\n".join(json.dumps(_grpo_record(s, kl=None)) for s in (1, 2, 3, 4)) + "\n"
    )
    assert "KL to the reference model" not in _titles(run_dir)
    without_kl = _render_twice(plot_training, tmp_path / "b", run_dir)
    assert with_kl != without_kl


def test_plot_training_without_steps(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    missing = _render_twice(plot_training, tmp_path / "missing", run_dir)
    (run_dir / "metrics.jsonl").write_text("")
    empty = _render_twice(plot_training, tmp_path / "empty", run_dir)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "epoch": 0.1}\n')
    unknown = _render_twice(plot_training, tmp_path / "unknown", run_dir)
    assert len({missing, empty, unknown}) == 3  # each says its own reason
    assert _png_ok(tmp_path / "empty" / "first.png") == (600, 240)


def test_plot_all_runs_finds_run_dirs(tmp_path):
    for name in ("exp/runs/grpo", "exp/runs/sft", "exp/.tmp-run", "exp/no-config"):
        folder = tmp_path / name
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text(json.dumps(_grpo_record(1, kl=None)) + "\n")
        if name != "exp/no-config":
            (folder / "config.yaml").write_text("model: tiny\n")
    beside = plot_all_runs(tmp_path)
    assert beside == [
        tmp_path / "exp/runs/grpo/training.png",
        tmp_path / "exp/runs/sft/training.png",
    ]
    gathered = plot_all_runs(tmp_path, tmp_path / "plots")
    assert [p.name for p in gathered] == [
        "exp__runs__grpo.training.png",
        "exp__runs__sft.training.png",
    ]
    assert all(_png_ok(p) for p in beside + gathered)
    assert plot_all_runs(tmp_path / "exp/runs/sft", tmp_path / "one")[0].name == "sft.training.png"


# --------------------------------------------------------------------------- accuracy plots


@pytest.fixture
def accuracies() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "condition": ["base", "base", "text 0.69", "text 0.69", "unknown"],
            "method": ["sft", "grpo", "sft", "grpo", "grpo"],
            "bias_level": [0.5, 0.5, 0.69, 0.69, float("nan")],
            "accuracy": [0.80, 0.84, 0.78, 0.83, 0.70],
            "ci_low": [0.76, 0.80, 0.74, float("nan"), 0.65],
            "ci_high": [0.84, 0.87, 0.82, float("nan"), 0.75],
        }
    )


def test_accuracy_bars(accuracies, tmp_path):
    grouped = _render_twice(plot_accuracy_bars, tmp_path / "g", accuracies, hue="method")
    plain = _render_twice(plot_accuracy_bars, tmp_path / "p", accuracies)
    assert grouped != plain
    no_ci = _render_twice(
        plot_accuracy_bars, tmp_path / "n", accuracies.drop(columns=["ci_low", "ci_high"])
    )
    assert no_ci != plain
    _render_twice(plot_accuracy_bars, tmp_path / "e", accuracies.iloc[:0], hue="method")


def test_accuracy_trend(accuracies, tmp_path):
    trend = _render_twice(
        plot_accuracy_trend, tmp_path / "t", accuracies, "bias_level", hue="method"
    )
    placed = accuracies[accuracies["bias_level"].notna()]
    without_note = _render_twice(
        plot_accuracy_trend, tmp_path / "u", placed, "bias_level", hue="method"
    )
    assert trend != without_note  # the "1 row(s) ... not shown" note
    _render_twice(plot_accuracy_trend, tmp_path / "e", accuracies.iloc[:0], "bias_level")
    _render_twice(plot_accuracy_trend, tmp_path / "m", accuracies, "no_such_column")


# --------------------------------------------------------------------------- the study's table


@pytest.fixture(scope="module")
def study(realdata) -> pd.DataFrame:
    return study_table(realdata)


def _scores(realdata: Path, run: str) -> dict:
    return json.loads((realdata / "results" / "vsr" / run / "scores.json").read_text())


def test_study_table_rows_and_normalisation(study, realdata):
    assert len(study) == 30  # one row per scores.json
    assert study["run"].is_unique
    assert list(study.columns[:11]) == [
        "run", "model", "method", "bias_kind", "bias_level", "split",
        "accuracy", "ci_low", "ci_high", "f1_weighted", "n_implied",
    ]  # fmt: skip
    assert study["accuracy"].between(0, 1).all()
    published = study[["ci_low", "ci_high", "f1_weighted"]].to_numpy().ravel()
    assert ((published[~pd.isna(published)] >= 0) & (published[~pd.isna(published)] <= 1)).all()
    assert pd.isna(published).sum() == 6  # base/ and sft/: accuracy only
    by_run = study.set_index("run")
    for run in ("base", "sft", "SmolVLM/sft-val", "SmolVLM/sft-strongtextbias-all"):
        published = _scores(realdata, run)["accuracy"]
        assert published > 1
        assert by_run.loc[run, "accuracy"] == pytest.approx(published / 100, abs=1e-12)
        assert "accuracy was in percent" in by_run.loc[run, "note"]
    smol = _scores(realdata, "SmolVLM/sft-val")
    assert by_run.loc["SmolVLM/sft-val", "ci_low"] == smol["accuracy_ci_95"][0]  # already fractions
    assert by_run.loc["SmolVLM/sft-val", "f1_weighted"] == smol["f1_weighted"]
    fraction = _scores(realdata, "grpo-test-set")
    assert by_run.loc["grpo-test-set", "accuracy"] == fraction["accuracy"]
    assert "percent" not in by_run.loc["grpo-test-set", "note"]
    assert math.isnan(by_run.loc["base", "ci_low"]) and math.isnan(
        by_run.loc["base", "f1_weighted"]
    )
    assert (study["model"] == "SmolVLM").sum() == 6
    assert set(study["method"]) == {"base", "sft", "grpo"}


def test_study_table_parses_run_names(study):
    by_run = study.set_index("run")
    expected_levels = {
        "All-Set_grpo-acc_0.627-Text-Biased": 0.627,
        "sft-acc_0.627-Text-Biased-Test-Set": 0.627,
        "All-Set_grpo-acc_0.69-Text-Biased": 0.69,
        "sft-acc_0.69-Text-Biased-Test-Set": 0.69,
        "All-Set_sft-acc_0.997-Text-Biased": 0.997,
        "test-Set_grpo-acc_0.997-Text-Biased": 0.997,
    }
    for run, level in expected_levels.items():
        assert by_run.loc[run, "bias_kind"] == "text"
        assert by_run.loc[run, "bias_level"] == level
    assert (
        by_run.loc["qwen_biased/sft-acc_0.574-Vision-Biased", ["bias_kind", "bias_level"]]
        == ["visual", 0.574]
    ).all()
    for run in ("qwen_biased/sft-acc_extreme_small-Text-Biased", "SmolVLM/sft-strongtextbias-val"):
        assert by_run.loc[run, "bias_kind"] == "text" and math.isnan(by_run.loc[run, "bias_level"])
        assert "bias level not published" in by_run.loc[run, "note"]
    assert by_run.loc["All-Set_sft-baseline", "bias_kind"] == "none"
    splits = {
        "All-Set_sft-baseline": "all",
        "test-Set_sft-acc_0.997-Text-Biased": "test",
        "grpo-acc_0.69-Text-Biased-Test-Set": "test",
        "grpo-valid-set copy": "validation",
        "SmolVLM/sft-strongtextbias-val": "validation",
        "SmolVLM/sft-all": "all",
        "SmolVLM/sft-test": "test",
        "grpo": "unspecified",
    }
    assert {run: by_run.loc[run, "split"] for run in splits} == splits
    assert by_run.loc["grpo-valid-set copy", "method"] == "grpo"
    assert by_run.loc["base", "method"] == "base"


def test_study_table_implied_sample_sizes(study):
    by_run = study.set_index("run")
    # The study's GRPO validation result is 293 of 340 (see test_scoring_realdata): its CI says so.
    assert (by_run.loc["grpo", "n_implied"], by_run.loc["grpo", "correct_implied"]) == (340, 293)
    assert "as in validation runs" in by_run.loc["grpo", "note"]
    assert pd.isna(by_run.loc["base", "n_implied"])
    # An "All-Set" run evaluated on a validation-sized set is flagged.
    assert by_run.loc["All-Set_sft-acc_0.69-Text-Biased", "n_implied"] == 340
    assert (
        "other all runs of this model n=765"
        in by_run.loc["All-Set_sft-acc_0.69-Text-Biased", "note"]
    )
    assert implied_sample(0.5, float("nan"), 0.6) is None
    assert implied_sample(0.8, 0.1, 0.2) is None  # no (n, k) fits


def test_study_table_is_deterministic_and_written(study, realdata, tmp_path):
    ordered = study.sort_values(["model", "method", "bias_kind", "bias_level", "split", "run"])
    assert list(study["run"]) == list(ordered["run"])
    paths = write_study_table(realdata / "results" / "vsr", tmp_path)  # the vsr folder works too
    assert [p.name for p in paths] == [
        "study_reference.md",
        "study_reference.csv",
        "study_reference.tex",
    ]
    first = [p.read_bytes() for p in paths]
    write_study_table(realdata, tmp_path)
    assert [p.read_bytes() for p in paths] == first
    assert len(paths[1].read_text().splitlines()) == 31
    assert r"All-Set\_grpo-baseline" in paths[2].read_text()


def test_study_table_missing_or_empty_root(tmp_path):
    with pytest.raises(UserError, match="optional") as err:
        study_table(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(err.value)
    with pytest.raises(UserError):
        write_study_table(tmp_path / "absent", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    empty = study_table(tmp_path)
    assert empty.empty and "accuracy" in empty.columns


def test_study_table_reads_the_model_from_the_folder_above_the_run(realdata):
    """`vqa-r1 tables` hands the study's results/ folder: the SmolVLM runs stay SmolVLM."""
    from vqa_r1.report.study import parse_run_name

    table = study_table(realdata / "results")
    assert len(table) == 30
    assert not table["run"].str.startswith("vsr/").any()  # always relative to results/vsr
    smol = table[table["run"].str.startswith("SmolVLM/")]
    assert len(smol) == 6 and set(smol["model"]) == {"SmolVLM"}
    assert parse_run_name("vsr/SmolVLM/sft-val")["model"] == "SmolVLM"
    assert parse_run_name("vsr/grpo-test-set")["model"] == "Qwen2.5-VL-3B"


# --------------------------------------------------------------------------- plots a paper can use


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, drawn, for inspecting what they show."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from vqa_r1.report import plots

    saved = []
    real = plots._save_png

    def keep(fig, png):
        FigureCanvasAgg(fig).draw()
        saved.append(fig)
        return real(fig, png)

    monkeypatch.setattr(plots, "_save_png", keep)
    return saved


def _texts_inside(fig) -> list[str]:
    """Titles, axis labels, legend and annotation texts drawn (even partly) outside the figure."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = list(fig.texts)
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend():
            texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
    outside = []
    for text in texts:
        if not text.get_visible() or not text.get_text().strip():
            continue
        e = text.get_window_extent(renderer)
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            outside.append(text.get_text())
    return outside


LONG_TITLE = "Demo on tiny-qwen2.5-vl-pretrained: accuracy on the test split of every condition"


def test_accuracy_plots_are_labelled_for_a_paper(accuracies, figures, tmp_path):
    """Titles inside the figure; error bars named as Wilson 95 % intervals with their n; the
    legend titled with what the colours are; the x axis labelled."""
    data = accuracies.assign(n=[100, 100, 100, 100, 100])
    plot_accuracy_bars(
        data, tmp_path / "b.png", label="condition", hue="method", title=LONG_TITLE,
        xlabel="condition / domain",
    )  # fmt: skip
    (fig,) = figures
    ax = fig.axes[0]
    assert _texts_inside(fig) == []
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "method"
    assert "Wilson 95 % CI (n = 100 each)" in [t.get_text() for t in legend.get_texts()]
    assert ax.get_xlabel() == "condition / domain"

    figures.clear()  # samples of different sizes: each bar says its n
    plot_accuracy_bars(data.assign(n=[100, 90, 80, 70, 60]), tmp_path / "c.png", hue="method")
    texts = {t.get_text() for t in figures[0].axes[0].texts}
    assert {"n=100", "n=90", "n=60"} <= texts
    assert "Wilson 95 % CI (n at each point)" in [
        t.get_text() for t in figures[0].axes[0].get_legend().get_texts()
    ]


def test_bars_mark_each_groups_floor_when_the_table_has_one(figures, tmp_path):
    """A count's or a cryptogram's floor (the set's most frequent answer, the random guess) is a
    dashed line across its group's bars, in the legend after the interval; without the column,
    none is drawn."""
    data = pd.DataFrame(
        {
            "method": ["base", "sft", "grpo", "base", "sft", "grpo"],
            "evaluated on": ["A", "A", "A", "B", "B", "B"],
            "accuracy": [0.0, 0.42, 0.36, 0.0, 0.23, 0.22],
            "ci_low": [0.0, 0.35, 0.29, 0.0, 0.18, 0.17],
            "ci_high": [0.02, 0.48, 0.42, 0.02, 0.29, 0.28],
            "n": [200] * 6,
            "most frequent answer": [0.355, 0.355, 0.355, 0.22, 0.22, None],
        }
    )
    plot_accuracy_bars(
        data, tmp_path / "f.png", label="evaluated on", hue="method", reference=None,
        floor="most frequent answer",
    )  # fmt: skip
    ax = figures[0].axes[0]
    dashed = [c for c in ax.collections if c.get_label() == "most frequent answer"]
    segments = [seg for c in ax.collections for seg in c.get_segments() if c.get_linestyle()[0][1]]
    heights = sorted(round(float(seg[0][1]), 3) for seg in segments)
    assert len(dashed) == 1 and heights == [0.22, 0.355]  # one per group, the known value
    for seg in segments:  # across its own group only (groups at x = 0 and 1)
        assert seg[1][0] - seg[0][0] < 1 and round(seg[0][0] + seg[1][0]) in (0, 2)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "most frequent answer" and legend[-2].startswith("Wilson")
    figures.clear()
    plot_accuracy_bars(data.drop(columns="most frequent answer"), tmp_path / "g.png",
                       label="evaluated on", hue="method", floor="most frequent answer")  # fmt: skip
    assert "most frequent answer" not in [
        t.get_text() for t in figures[0].axes[0].get_legend().get_texts()
    ]


def test_the_trend_plot_is_scaled_to_its_data_with_base_and_chance(figures, tmp_path):
    data = pd.DataFrame(
        {
            "method": ["sft", "sft", "grpo", "grpo"],
            "bias": [0.5, 0.9, 0.5, 0.9],
            "accuracy": [0.99, 0.98, 0.97, 0.95],
            "ci_low": [0.97, 0.96, 0.95, 0.92],
            "ci_high": [1.0, 0.99, 0.98, 0.97],
            "n": [400] * 4,
        }
    )
    plot_accuracy_trend(
        data, "bias", tmp_path / "t.png", hue="method", title=LONG_TITLE, reference=0.9,
        reference_label="base (0.900)", chance=0.5,
    )  # fmt: skip
    (fig,) = figures
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert 0.85 < low < 0.9 and 1.0 <= high < 1.05  # the data and the base line, not 0-1
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["sft", "grpo", "Wilson 95 % CI (n = 400 each)", "base (0.900)"]
    assert ax.get_legend().get_title().get_text() == "method"
    assert any("chance (0.5) below the axis" in t.get_text() for t in ax.texts)
    assert _texts_inside(fig) == []
    assert all(line.get_marker() not in (None, "None", "") for line in ax.lines[:2])


def test_short_training_curves_have_markers(tmp_path, figures):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("verb: grpo\n")
    records = [
        {"step": s, "reward": 0.5, "completions/mean_length": 20 + s,
         "completions/min_length": 10 + s, "completions/max_length": 30 + s, "learning_rate": 1e-4}
        for s in range(1, 6)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    plot_training(run, tmp_path / "training.png")
    (fig,) = figures
    lines = [line for ax in fig.axes for line in ax.lines]
    assert len(lines) >= 5
    assert all(line.get_marker() not in (None, "None", "") for line in lines), [
        (line.get_label(), line.get_marker()) for line in lines
    ]
    assert _texts_inside(fig) == []


def test_the_families_table_reads_each_familys_seeded_table(tmp_path):
    """results/demo-seeds/families.md (the README's four-family table) is each family's own
    accuracy.csv, row for row, with the share of base's error each row removes."""
    import shutil

    from vqa_r1.report.families import families_table, write_families_table

    seeds = Path(__file__).resolve().parents[1] / "results" / "demo-seeds"
    for family in ("qwen2.5-vl", "smolvlm"):
        (tmp_path / family / "tables").mkdir(parents=True)
        shutil.copy(seeds / family / "tables" / "accuracy.csv", tmp_path / family / "tables")
    text = families_table(tmp_path)
    lines = [ln for ln in text.splitlines() if ln.startswith("| Qwen2.5-VL | grpo")]
    # mean 0.990 over 3 seeds against base 0.905: (0.990 - 0.905) / 0.095 of the error removed
    assert lines == [
        "| Qwen2.5-VL | grpo | 3 | 0.990 | 0.004 | 0.985 | 0.993 | 0.085 | 0.056 to 0.116 "
        "| 6.00e-04 | 0.89 |"
    ]
    assert "| SmolVLM | grpo | 3 | 0.905 |" in text and "| -1.26 |" in text  # error added
    assert "InternVL" not in text  # a family without a folder is left out, not invented
    assert write_families_table(tmp_path).read_text() == text
    assert families_table(tmp_path / "none") is None

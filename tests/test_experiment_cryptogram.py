"""The cryptogram experiment (experiments/cryptogram.py, specs/cryptogram.yaml): its dry runs on the
study's cluster and on the tiny model print the whole chain, the plan wires the rewards, the
curriculum order and the seeds, the tables come from fake evaluations, and (slow) a reduced real
run lands its tables and reward plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.experiments import build_study, declare
from vqa_r1.experiments.spec import load_spec
from vqa_r1.launch.request import JobOptions
from vqa_r1.metrics import one_sided_binomial_p
from vqa_r1.report.experiment import build_report

REPO = Path(__file__).resolve().parents[1]
TINY = "tiny-qwen2.5-vl-pretrained"
GATED = "reward_funcs: [cryptogram_format, cryptogram_decoding, cryptogram_correct]"
UNGATED = (
    "reward_funcs: [cryptogram_format, cryptogram_decoding_ungated, cryptogram_correct_ungated]"
)
STEPS = [
    "runs/sft",
    "runs/grpo-gated",
    "runs/grpo-ungated",
    "eval/base",
    "eval/sft",
    "eval/grpo-gated",
    "eval/grpo-ungated",
    "tables",
]


def _chain(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.startswith("#   ")]


def test_dry_run_on_the_study_cluster_prints_the_whole_chain(tmp_path, capsys):
    out = tmp_path / "exp"
    study = ["--model", "qwen2.5-vl-3b", "--cluster", "study-12h", "--dry-run"]
    study += ["--set", "experiment.seeds=1"]  # one seed's chain (the spec runs 3)
    assert launch_main(["experiment", "cryptogram", *study, "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    assert _chain(text) == STEPS
    assert sum(line.startswith("# ---- step ") for line in text.splitlines()) == 8
    assert text.count("#SBATCH --gres=gpu:a100:") == 7  # every job but the tables
    assert "# data: cryptograms (train 400 in curriculum order" in text
    assert "(generated at submission)" in text  # a dry run makes no data
    assert text.count(GATED) == 1 and text.count(UNGATED) == 1
    assert text.count("shuffle_dataset: false") == 2  # both GRPO runs keep the curriculum order
    assert "train_sampling_strategy: sequential" in text  # and SFT
    assert "afterok:<job id of runs/sft>" in text  # GRPO starts from the SFT run
    assert text.count("--dependency='afterany:") == 1
    assert not out.exists(), "a dry run writes nothing"


def test_dry_run_on_the_tiny_model_prints_the_whole_chain(tmp_path, capsys):
    out = tmp_path / "exp"
    args = ["experiment", "cryptogram", "--model", TINY, "--dry-run", "--output-dir", str(out)]
    assert launch_main([*args, "--set", "experiment.seeds=1"]) == 0
    text = capsys.readouterr().out
    assert _chain(text) == STEPS
    assert "runs/grpo-gated (grpo) after runs/sft" in text
    assert text.count(GATED) == 1 and text.count(UNGATED) == 1
    assert not out.exists()


@pytest.mark.parametrize("name", ["counting", "cryptogram"])
def test_the_plan_names_the_tiny_model_pretrained_for_the_study(tmp_path, capsys, name):
    """The cryptogram's tiny model is tiny-qwen2.5-vl-studies: the shipped default runs the study
    but never learned letter shapes, so its plan says which model did; the studies model and a hub
    model get no note. Counting declares none: the default learns to count in its SFT."""
    note = "# note: {} was not pretrained for this task; the tiny model pretrained for it is "
    note += "tiny-qwen2.5-vl-studies (docs/models.md, 'Pretrained tiny models')"
    for model, extra, noted in [
        (TINY, [], name == "cryptogram"),
        ("tiny-qwen2.5-vl-studies", [], False),
        ("qwen2.5-vl-3b", ["--cluster", "study-12h"], False),
    ]:
        args = ["experiment", name, "--model", model, *extra, "--dry-run"]
        assert launch_main([*args, "--output-dir", str(tmp_path / model)]) == 0
        text = capsys.readouterr().out
        assert (note.format(model) in text) is noted, (model, text[:600])
        assert text.count("was not pretrained for this task") == int(noted)
    # a wrong name, as a user types it: one line, nothing planned
    bad = ["experiment", name, "--model", TINY, "--dry-run", "--set"]
    assert launch_main([*bad, "experiment.tiny_model=qwen2.5-vl-3b"]) != 0
    captured = capsys.readouterr()
    assert "experiment.tiny_model: 'qwen2.5-vl-3b' is not a registered tiny model" in captured.err
    assert "# ---- step" not in captured.out


def _plan(tmp_path: Path, *overrides: str):
    job = JobOptions(executor="local", dry_run=True)
    one = ["experiment.seeds=1", *overrides]  # one seed's steps unless the test says otherwise
    return build_study("cryptogram", TINY, one, str(tmp_path / "exp"), job)


def test_plan_wires_rewards_order_data_and_tables(tmp_path):
    b = _plan(tmp_path)
    steps = {s.name: s for s in b.steps}
    assert list(steps) == ["runs/sft", "runs/grpo-gated", "runs/grpo-ungated", *STEPS[3:]]
    sft = steps["runs/sft"].info["settings"]
    gated = steps["runs/grpo-gated"].info["settings"]
    ungated = steps["runs/grpo-ungated"].info["settings"]
    assert gated["train.reward_funcs"] == [
        "cryptogram_format",
        "cryptogram_decoding",
        "cryptogram_correct",
    ]
    assert ungated["train.reward_funcs"][1:] == [
        "cryptogram_decoding_ungated",
        "cryptogram_correct_ungated",
    ]
    assert gated["train.reward_weights"] is None  # each weighted 1
    assert gated["train.shuffle_dataset"] is False
    assert sft["train.train_sampling_strategy"] == "sequential"
    assert gated["init_adapter"].endswith("runs/sft/final")
    data = {s.info["settings"]["data.dataset"] for s in b.steps if s.name != "tables"}
    assert len(data) == 1 and Path(data.pop()).name.startswith("cryptogram-")
    assert steps["eval/grpo-gated"].after == ("runs/grpo-gated",)
    table = b.tables[0]
    labels = [tuple(r["labels"].values()) for r in table["rows"]]
    assert labels == [
        ("base", "-"),
        ("sft", "-"),
        ("sft+grpo", "gated"),
        ("sft+grpo", "ungated"),
    ]
    assert table["per_words"] is True  # scores.json's per_relation, per number of words
    assert table["rows"][1]["from_files"]["char accuracy"] == [
        "eval/sft/scores.json",
        "char_accuracy",
    ]
    assert b.plots == [
        {
            "kind": "rewards",
            "steps": ["runs/grpo-gated", "runs/grpo-ungated"],
            "file": "plots/reward_curves.png",
        }
    ]


def test_tiny_settings_reach_the_tiny_models_only(tmp_path):
    """The spec's tiny_settings (600 SFT steps at 2e-3, 160-token budgets, 100 GRPO steps at
    5e-5 and temperature 0.3) apply
    to a tiny model after the spec's settings, never to a hub model; --set still wins."""
    job = JobOptions(executor="local", dry_run=True)
    for model, tiny in ((TINY, True), ("tiny-qwen2.5-vl-studies", True), ("qwen2.5-vl-3b", False)):
        b = build_study("cryptogram", model, ["experiment.seeds=1"], str(tmp_path / model), job)
        steps = {s.name: s.info["settings"] for s in b.steps if s.name != "tables"}
        sft, grpo, ev = steps["runs/sft"], steps["runs/grpo-gated"], steps["eval/sft"]
        assert sft["train.train_sampling_strategy"] == "sequential"  # settings: every model
        assert (sft["train.max_steps"] == 600 and sft["train.learning_rate"] == 2e-3) is tiny
        assert (grpo["train.max_steps"] == 100) is tiny
        assert (grpo["train.max_completion_length"] == 160) is tiny
        assert (grpo["train.temperature"] == 0.3) is tiny
        assert (grpo["train.learning_rate"] == 5e-5) is tiny
        assert (ev["eval.max_new_tokens"] == 160) is tiny
    seven = ["sft:train.max_steps=7", "experiment.seeds=1"]
    b = build_study("cryptogram", TINY, seven, str(tmp_path / "s"), job)
    assert next(s for s in b.steps if s.name == "runs/sft").info["settings"]["train.max_steps"] == 7


def test_grpo_from_base_and_seeds(tmp_path):
    b = _plan(tmp_path, "experiment.cryptogram_grpo_from=base", "experiment.seeds=2")
    steps = {s.name: s for s in b.steps}
    assert steps["runs/grpo-gated/seed-42"].after == ()  # a fresh LoRA on the base model
    assert steps["runs/grpo-gated/seed-42"].info["settings"]["init_adapter"] is None
    assert steps["runs/sft/seed-43"].info["settings"]["train.seed"] == 43
    rows = b.tables[0]["rows"]
    assert rows[0]["step"] == "eval/base"  # greedy: once
    assert [s["step"] for s in rows[2]["seeds"]] == [
        "eval/grpo-gated/seed-42",
        "eval/grpo-gated/seed-43",
    ]
    assert rows[2]["labels"]["model"] == "grpo"
    assert not any("from_files" in row for row in rows)  # seeded: the mean accuracy alone
    assert len(b.plots[0]["steps"]) == 4


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["cryptogram_word_lengths=2,3,4"], "min,max"),
        (["cryptogram_alphabet=aa"], "distinct letters"),
        (["cryptogram_words=builtin"], "only 3 words"),  # abcdef spells few built-in words
        (["cryptogram_order=random"], "expected one of"),
        (["cryptogram_image_size=20"], "cryptogram_image_size"),
        (["cryptogram_alphabet=abcdefgh"], "letter_colours draws the letters abcdef only"),
        (["cryptogram_layout=rows"], "expected one of"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_queued(tmp_path, overrides, message):
    with pytest.raises(UserError, match=message):
        _plan(tmp_path, *(f"experiment.{o}" for o in overrides))


def test_spec_loads_with_its_sizes():
    spec = load_spec("cryptogram")
    assert spec.cryptogram_alphabet == "abcde" and spec.cryptogram_word_counts == [1, 2]
    # issue 31: a reading on 3 seeds, 200 validation messages, the test split drawn afresh
    assert (spec.seeds, spec.cryptogram_validation, spec.cryptogram_test_seed) == (3, 200, 1)
    assert spec.cryptogram_layout == "table" and spec.cryptogram_image_size == 112
    assert spec.cryptogram_letter_colours and spec.cryptogram_worked_steps
    assert spec.cryptogram_order == "curriculum" and spec.settings.grpo == [
        "train.shuffle_dataset=false"
    ]


def _evaluation(folder: Path, right: int, n: int = 20) -> None:
    """A fake evaluation of ``n`` two-word and one-word messages, ``right`` of them right."""
    from vqa_r1.eval.scoring import score_responses

    records = []
    for i in range(n):
        message = "ab cd" if i % 2 else "ea"
        answer = message if i < right else "zz"
        chars = " _ ".join(" ".join(w) for w in message.split())
        text = f"<think> <chars> {chars} </chars> </think> <answer> {answer} </answer>"
        records.append(
            {
                "true_response": message,
                "predicted_response": text,
                "answer_type": "cryptogram",
                "coded_message": "c d _ e a" if i % 2 else "b c",
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scores.json").write_text(json.dumps(score_responses(records)))
    (folder / "generated_responses.json").write_text(json.dumps(records))


def _metrics(run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text("{}\n")
    lines = [
        {
            "step": step,
            "rewards/cryptogram_format_reward/mean": 0.5,
            "rewards/cryptogram_decoding_reward/mean": step / 10,
        }
        for step in (1, 2, 3)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_tables_from_fake_evaluations(tmp_path):
    b = _plan(tmp_path)
    declare(b)
    root = b.root
    for name, right in (("base", 2), ("sft", 10), ("grpo-gated", 16), ("grpo-ungated", 6)):
        _evaluation(root / "eval" / name, right)
    for run in ("runs/grpo-gated", "runs/grpo-ungated"):
        _metrics(root / run)
    written = build_report(root)
    assert written["missing_rows"] == 0
    table = (root / "tables/accuracy.md").read_text()
    assert "| sft+grpo | gated | 1.000 | 0.800 | 0.000 | 1.000 | 20 | 0.800 |" in table
    assert "p vs model=base" in table and "p vs rewards=ungated (same model)" in table
    assert "char accuracy" in table and "chars nearer code" in table
    # the random-guess floor: "b c" -> "ea" has 4 of the 44 derangements of the spec's five
    # letters agreeing, "c d _ e a" -> "ab cd" 1; each row tested above their mean (exact binomial)
    floor = (4 / 44 + 1 / 44) / 2
    with (root / "tables/accuracy.csv").open() as f:
        rows = {(r["model"], r["rewards"]): r for r in csv.DictReader(f)}
    assert [float(r["random guess"]) for r in rows.values()] == pytest.approx([floor] * 4, abs=5e-4)
    above = "p vs random guess (one-sided)"
    assert float(rows["base", "-"][above]) == pytest.approx(
        one_sided_binomial_p(2, 20, floor), abs=5e-4
    )  # about 0.3
    assert float(rows["sft+grpo", "gated"][above]) < 5e-4
    per = (root / "tables/accuracy_per_words.md").read_text()
    assert "| words | n | accuracy | ci_low | ci_high | char accuracy |" in per
    assert "| sft+grpo | gated | 1 | 10 | 0.800 |" in per and "| base | - | 2 | 10 |" in per
    assert not (root / "tables/accuracy_per_relation.md").exists()
    assert (root / "plots/reward_curves.png").stat().st_size > 5000
    assert "plots/accuracy.png" in written["written"]


DISTRIBUTED = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}


@pytest.mark.slow
def test_a_reduced_run_lands_its_tables_and_reward_curves(tmp_path):
    """The chain for real on the tiny pretrained model, at the smallest sizes."""
    root = tmp_path / "cryptogram"
    small = [
        "--set", "experiment.cryptogram_train=16",
        "--set", "experiment.cryptogram_validation=2",
        "--set", "experiment.cryptogram_test=8",
        "--set", "experiment.cryptogram_image_size=64",
        "--set", "experiment.seeds=1",
        "--set", "sft:train.max_steps=2",
        "--set", "grpo:train.max_steps=2",
        "--set", "grpo:train.per_device_train_batch_size=8",
        "--set", "grpo:train.num_generations=4",
        "--set", "grpo:train.max_completion_length=48",
        "--set", "grpo:train.logging_steps=1",
        "--set", "evaluate:eval.max_new_tokens=48",
    ]  # fmt: skip
    from test_experiments_e2e import experiment

    experiment("cryptogram", "--model", TINY, "--output-dir", str(root), *small)
    launch = json.loads((root / "launch.json").read_text())
    assert {s["name"]: s["state"] for s in launch["steps"]} == dict.fromkeys(STEPS, "COMPLETED")
    scores = json.loads((root / "eval/grpo-gated/scores.json").read_text())
    assert scores["answer_type"] == "cryptogram" and scores["n"] == 8
    assert set(scores["per_relation"]) == {"1 word", "2 words"}
    metrics = (root / "runs/grpo-ungated/metrics.jsonl").read_text()
    assert "rewards/cryptogram_decoding_ungated_reward/mean" in metrics
    # the curriculum kept: GRPO's prompts (2 steps x 8 / 4 generations) are the first train
    # rows, one-word messages (the first 8 of 16; shuffled rows would be two-word half the time)
    completions = (root / "runs/grpo-gated/completions.jsonl").read_text().splitlines()
    solutions = {json.loads(line)["solution"] for line in completions}
    assert solutions and all(len(s.split()) == 3 for s in solutions), solutions
    with open(root / "tables/accuracy.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["model"], r["rewards"], r["n"], r["status"]) for r in rows] == [
        ("base", "-", "8", "ok"),
        ("sft", "-", "8", "ok"),
        ("sft+grpo", "gated", "8", "ok"),
        ("sft+grpo", "ungated", "8", "ok"),
    ]
    assert rows[2]["p vs rewards=ungated (same model)"] != ""
    per = (root / "tables/accuracy_per_words.md").read_text()
    assert "| sft+grpo | ungated | 2 | 4 |" in per
    assert (root / "plots/reward_curves.png").stat().st_size > 5000


def test_seeded_tables_reread_each_item_by_the_cryptogram_rule(tmp_path):
    """With seeds the tests re-read every item from generated_responses.json (the bootstrap):
    cryptogram records by the exact-message rule, agreeing with each scores.json."""
    b = _plan(tmp_path, "experiment.seeds=2")
    declare(b)
    root = b.root
    _evaluation(root / "eval/base", 4)
    for name, right in (("sft", (10, 12)), ("grpo-gated", (18, 16)), ("grpo-ungated", (6, 8))):
        for seed, k in zip((42, 43), right, strict=True):
            _evaluation(root / "eval" / name / f"seed-{seed}", k)
    written = build_report(root)
    assert written["missing_rows"] == 0
    with open(root / "tables/accuracy.csv", newline="") as fh:
        rows = {(r["model"], r["rewards"]): r for r in csv.DictReader(fh)}
    gated = rows["sft+grpo", "gated"]
    assert float(gated["accuracy"]) == pytest.approx(0.85)  # (18 + 16) / 40
    assert float(gated["p vs rewards=ungated (same model)"]) < 0.05
    assert float(gated["diff vs model=base"]) == pytest.approx(0.85 - 0.2)


def test_a_set_the_floor_cannot_be_counted_for_gets_none_not_a_crash():
    """Responses from another alphabet (more letters than the spec declares): no floor, no p."""
    from vqa_r1.report.experiment import guess_columns

    records = [{"coded_message": "x y", "true_response": "ab"}]
    row = {"_responses": lambda: records, "correct": 1, "n": 1}
    columns = guess_columns([row], {"kind": "guess", "alphabet_size": 2})
    assert columns == {"random guess": [None], "p vs random guess (one-sided)": [None]}

"""Reduced versions of the declared experiments, end to end on the tiny pretrained model.

Small data and a few steps (minutes in all): what these check is the chain (every step runs in
dependency order), the resume (a re-launch skips what is complete and redoes only what is
missing), and that the tables, tests and plots land under the experiment folder. The commands
are the launcher's as a user types them, with `--executor inprocess`: the one executor runs each
step's task in this process, so the four studies share one interpreter's imports (each step as
a subprocess of its own, the local executor: tests/test_demo.py, tests/test_sweep_pipeline.py).
The full runs and their numbers are in README "Experiments".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli.launch import main as launch_main

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-qwen2.5-vl-pretrained"
SMALL = [
    "--set", "data.synthetic_train=240",
    "--set", "data.synthetic_validation=20",
    "--set", "data.synthetic_test=40",
    "--set", "sft:train.max_steps=3",
    "--set", "grpo:train.max_steps=2",
    "--set", "grpo:train.per_device_train_batch_size=8",
    "--set", "evaluate:eval.limit=16",
    "--set", "experiment.seeds=1",  # one chain: the specs run 3 seeds
]  # fmt: skip
pytestmark = pytest.mark.slow


def experiment(*args: str, code: int = 0):
    """`slurm/launch.py experiment ARGS --executor inprocess`, its exit status checked."""
    done = run_in_process(launch_main, ["experiment", *args, "--executor", "inprocess"])
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def states(root: Path) -> dict[str, str]:
    return {s["name"]: s["state"] for s in json.loads((root / "launch.json").read_text())["steps"]}


def test_text_bias_runs_as_a_chain_resumes_and_lands_as_tables(tmp_path):
    root = tmp_path / "text-bias"
    args = [
        "text-bias", "--model", MODEL, "--output-dir", str(root), *SMALL,
        "--set", "experiment.bias_levels=none,0.9",
    ]  # fmt: skip
    first = experiment(*args)
    assert set(states(root).values()) == {"COMPLETED"}, first.stdout
    assert len(states(root)) == 10  # base, 2 levels x 2 methods x (train, evaluate), tables
    card = json.loads((root / "data/text-bias-0.9/bias_card.json").read_text())
    assert abs(card["achieved"] - 0.9) <= 0.01
    table = (root / "tables/accuracy.md").read_text()
    for method, level in (("sft", "none"), ("sft", "0.9"), ("grpo", "none"), ("grpo", "0.9")):
        assert f"| {method} | {level} | 16 |" in table
    assert "missing" not in table
    assert f"{card['achieved']:.3f}" in table  # the achieved bias, read from the card
    per_relation = (root / "tables/accuracy_per_relation.md").read_text()
    assert "| grpo | 0.9 | left of |" in per_relation  # where a bias bites, per relation
    tests = (root / "tables/accuracy_tests.md").read_text()
    assert tests.count("Cochran-Armitage") == 2  # one trend test per method
    for png in ("plots/accuracy_vs_bias.png", "runs/sft-0.9/training.png"):
        assert (root / png).stat().st_size > 5000
    assert (root / "runs/grpo-0.9/training.png").exists()
    before = {p: (root / p).read_bytes() for p in ("tables/accuracy.md", "tables/accuracy.csv")}

    # re-launch: nothing is redone but the tables, which come out the same
    again = experiment(*args)
    assert sum(s == "DONE EARLIER" for s in states(root).values()) == 9, again.stdout
    assert {p: (root / p).read_bytes() for p in before} == before

    # a lost evaluation is redone alone
    (root / "eval/grpo-0.9/scores.json").unlink()
    experiment(*args)
    redone = {k for k, v in states(root).items() if v == "COMPLETED"}
    assert redone == {"eval/grpo-0.9", "tables"}
    assert (root / "eval/grpo-0.9/scores.json").exists()

    # the same folder under other settings is refused, not silently mixed
    changed = experiment(*args, "--set", "sft:train.learning_rate=0.5", code=2)
    assert "was started with other settings" in changed.stderr


def test_sim2real_evaluates_each_model_on_both_domains(tmp_path):
    root = tmp_path / "sim2real"
    experiment(
        "sim2real", "--model", MODEL, "--output-dir", str(root), *SMALL,
        "--set", "experiment.methods=sft", "--set", "experiment.judge=heuristic",
    )  # fmt: skip
    assert set(states(root).values()) == {"COMPLETED"}
    # the judge step read every evaluation's responses: an alignment row each, paired with base
    checks = json.loads((root / "judge/alignment_checks.json").read_text())
    assert len(checks) == 6 * 16 and {c["status"] for c in checks} == {"judged"}
    alignment = (root / "tables/alignment.md").read_text()
    assert "| sft | sim | real | 16 |" in alignment
    assert "p vs method=base" in alignment and "missing" not in alignment
    real_cfg = (root / "runs/sft-real/config.yaml").read_text()
    sim_cfg = (root / "runs/sft-sim/config.yaml").read_text()
    dataset = [line for line in real_cfg.splitlines() if "dataset:" in line]
    assert dataset and dataset != [line for line in sim_cfg.splitlines() if "dataset:" in line]
    table = (root / "tables/accuracy.md").read_text()
    for trained in ("sim", "real"):
        for where in ("sim", "real"):
            assert f"| sft | {trained} | {where} | 16 |" in table
    assert "p vs trained on=real (same method, evaluated on)" in table
    assert (root / "plots/accuracy_by_domain.png").stat().st_size > 5000


def test_drivingvqa_chain_merges_before_grpo_and_scores_letter_sets(tmp_path):
    root = tmp_path / "drivingvqa"
    experiment(
        "drivingvqa", "--model", MODEL, "--output-dir", str(root),
        "--set", "sft:train.max_steps=3",
        "--set", "grpo:train.max_steps=2",
        "--set", "grpo:train.per_device_train_batch_size=8",
        "--set", "evaluate:eval.limit=8",
        "--set", "evaluate:eval.max_new_tokens=64",
        "--set", "grpo:train.max_completion_length=64",
        "--set", "experiment.seeds=1",
    )  # fmt: skip
    assert set(states(root).values()) == {"COMPLETED"}
    assert (root / "runs/merge/merged/config.json").exists()
    grpo_cfg = (root / "runs/grpo/config.yaml").read_text()
    assert "runs/merge/merged" in grpo_cfg and "- choice" in grpo_cfg and "- iou" in grpo_cfg
    scores = json.loads((root / "eval/grpo/scores.json").read_text())
    assert scores["answer_type"] == "choice" and scores["n"] == 8
    # the boxes the model wrote, scored against the items' boxes beside the letters
    grounding = scores["grounding"]
    assert grounding["items"] == 8 and grounding["entities"] >= 8
    assert 0.0 <= grounding["box_iou"] <= 1.0 and 0.0 <= grounding["grounded"] <= 1.0
    records = json.loads((root / "eval/grpo/generated_responses.json").read_text())
    assert all(r["gt_boxes"] for r in records)
    metrics = (root / "runs/grpo/metrics.jsonl").read_text()
    assert "rewards/iou_reward/mean" in metrics
    table = (root / "tables/accuracy.md").read_text()
    assert "| sft+merge+grpo | 8 |" in table
    assert "box IoU" in table and "entities grounded (IoU >= 0.5)" in table


def test_prompt_tuning_compares_each_mode_with_the_base_model(tmp_path):
    root = tmp_path / "prompt-tuning"
    experiment(
        "prompt-tuning", "--model", MODEL, "--output-dir", str(root),
        "--set", "experiment.seeds=1",
        "--set", "prompt-tune:train.max_steps=3",
        "--set", "prompt-tune:eval.limit=8",
        "--set", "prompt-tune:eval.max_new_tokens=64",
    )  # fmt: skip
    assert set(states(root).values()) == {"COMPLETED"}
    assert (root / "runs/prompt-reasoning/final").is_dir()
    table = (root / "tables/accuracy.md").read_text()
    for mode in ("answer", "reasoning"):
        for model in ("base", "prompt-tuned"):
            assert f"| {mode} | {model} | 8 |" in table
    assert "p vs model=base (same mode)" in table
    # the spec's neutral instruction reaches every prompt-tuning run and its base, and the table
    # says whether each row writes the reasoning format
    for step in ("eval/base-reasoning", "runs/prompt-reasoning"):  # each folder's claim
        recorded = json.loads((root / step / ".vqa_r1-run.json").read_text())["settings"]
        assert "Answer with True or False." in json.dumps(recorded), step
    assert "| format rate |" in table

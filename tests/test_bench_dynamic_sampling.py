"""`python -m benchmarks.dynamic_sampling` as the README types it, at its smallest: both settings
of one seed, their checkpoints evaluated, the table and the plot written; run again, it trains
nothing and keeps each run's clock."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_benchmark_measures_both_settings_and_a_rerun_reuses_the_runs(tmp_path):
    out = tmp_path / "ds"
    cmd = [
        sys.executable, "-m", "benchmarks.dynamic_sampling", "--out", str(out), "--seeds", "1",
        "--steps", "2", "--limit", "4", "--max-rounds", "2",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    assert {(r["dynamic_sampling"], r["step"]) for r in rows} == {
        ("off", 1),
        ("off", 2),
        ("on", 1),
        ("on", 2),
    }
    by = {(r["dynamic_sampling"], r["step"]): r for r in rows}
    assert by["off", 2]["completions"] == 2 * by["off", 1]["completions"] > 0
    assert by["on", 2]["completions"] >= by["off", 2]["completions"]  # refills generate more
    assert all(r["n"] == 4 and 0 <= r["accuracy"] <= 1 and r["train_seconds"] > 0 for r in rows)
    assert (out / "accuracy.png").stat().st_size > 0
    assert "| on | 2 | 1 |" in (out / "table.md").read_text()

    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((out / "results.json").read_text()) == rows  # same runs, same clocks

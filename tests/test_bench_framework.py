"""The benchmark framework: interleaved timings, ratios, floors and the report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import Result, Timing, side_by_side
from benchmarks import report as bench_report
from benchmarks.suite import BENCHMARKS, parse_ids
from vqa_r1.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def test_side_by_side_interleaves_after_one_warm_up_each():
    calls = []
    a, b, out_a, out_b = side_by_side(
        lambda: calls.append("a") or "A", lambda: calls.append("b") or "B", repeats=3
    )
    assert calls == ["a", "b"] * 4  # warm-up pair, then A B A B A B
    assert len(a.seconds) == len(b.seconds) == 3 and out_a == ["A"] * 3 and out_b == ["B"] * 3


def test_ratios_goals_and_floors():
    fast, slow = Timing("ours", [1.0, 2.0, 3.0]), Timing("base", [9.0, 10.0, 11.0])
    speed = Result("PX", "t", fast, slow, kind="speedup", goal=10, floor=3)
    assert speed.ratio == pytest.approx(5.0) and speed.meets_floor and speed.meets_goal is False
    over = Result("PY", "t", Timing("o", [1.1]), Timing("b", [1.0]), kind="overhead", floor=1.05)
    assert over.ratio == pytest.approx(1.1) and over.meets_floor is False
    timing = Result("PZ", "t", fast, slow, kind="timing", floor=1)
    assert timing.ratio is None and timing.meets_floor is None


def test_report_states_machine_command_and_each_ratio(tmp_path):
    r = Result("P9", "demo bench", Timing("ours", [1.0] * 5), Timing("base", [4.0] * 5), floor=2)
    r.checks["identical"] = True
    path = bench_report.write([r], tmp_path, "python -m benchmarks --only P9")
    text = path.read_text()
    assert "| P9 | demo bench | 1.000 [1.000, 1.000] (ours, n=5)" in text
    assert "4.00x faster" in text and ">= 2" in text and "identical: True" in text
    data = json.loads((tmp_path / "results.json").read_text())
    row = data["benchmarks"][0]
    assert row["ratio"] == 4.0 and row["meets_floor"] is True and row["ours"]["median"] == 1.0
    assert (
        data["machine"]["versions"]["torch"] and data["command"] == "python -m benchmarks --only P9"
    )


def test_benchmark_ids_are_checked():
    assert parse_ids(None) == list(BENCHMARKS) and parse_ids("p3, P1") == ["P3", "P1"]
    with pytest.raises(UserError, match="unknown"):
        parse_ids("P1,P77")


def test_bench_cli_rejects_an_unknown_id_before_running_anything():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "P0"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--only: unknown ['P0']" in out.stderr


def test_bench_cli_rejects_zero_repeats():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "P3", "--repeats", "0"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--repeats must be at least 1" in out.stderr


def test_benchmarks_are_dev_tooling_of_the_checkout_not_a_verb():
    """`python -m benchmarks` from the repository root; `vqa-r1` has no bench verb (the installed
    package never imports the benchmarks: pyproject.toml's import contracts)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "usage: python -m benchmarks" in out.stdout, out.stderr
    for key in BENCHMARKS:
        assert key in out.stdout
    verbs = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "--help"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert verbs.returncode == 0 and "doctor" in verbs.stdout and "bench" not in verbs.stdout

"""Acceptance: concurrency 16 gives at least 8x the throughput of concurrency 1 at 100 ms."""

import subprocess
import sys

from judge_helpers import REPO

from vqa_r1.judge.bench import compare


def test_concurrency_16_is_at_least_8x_concurrency_1():
    # timing is the point of this test: 16 requests in flight against a 100 ms server should be
    # ~16x one at a time; 8x leaves room for a loaded machine
    args = {"latency": 0.1, "items_serial": 16, "items_parallel": 160, "concurrency": 16}
    result = compare(**args)
    if result.ratio < 8:  # one re-measurement: the machine is shared with other test suites
        result = max(result, compare(**args), key=lambda r: r.ratio)
    assert result.ratio >= 8, result.describe()
    assert "ratio" in result.describe()


def test_bench_script_prints_the_ratio():
    script = REPO / "scripts" / "bench_judge.py"
    small = [
        "--latency",
        "0.01",
        "--items-serial",
        "2",
        "--items-parallel",
        "4",
        "--concurrency",
        "2",
    ]
    proc = subprocess.run(
        [sys.executable, str(script), *small], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "concurrency 2" in proc.stdout and "ratio" in proc.stdout

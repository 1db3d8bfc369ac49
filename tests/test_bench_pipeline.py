"""P6 in CI's reduced form: a short demo and two test files, timed from one benchmark run."""

import pytest

from benchmarks.pipeline_times import run


@pytest.mark.slow
def test_demo_stages_and_suite_are_timed():
    result = run(quick=True, repeats=1)
    stages = result.details["demo stages (s)"]  # each step's local job, from launch.json
    assert set(stages) == {"runs/grpo", "eval/base", "eval/grpo", "tables"}, stages
    assert all(seconds > 0 for seconds in stages.values()), stages
    assert result.ours.seconds[0] >= sum(stages.values())  # the wall time includes start-up
    assert result.baseline.seconds[0] > 0 and result.ratio is None

"""P6 in CI's reduced form: a short demo and two test files, timed from one benchmark run."""

import pytest

from benchmarks.pipeline_times import run


@pytest.mark.slow
def test_demo_stages_and_suite_are_timed():
    result = run(quick=True, repeats=1)
    stages = result.details["demo stages (s)"]
    assert {"data", "grpo", "eval_base", "eval_grpo"} <= set(stages), stages
    # data takes 0.0 s (rounded) when an earlier test already generated the same scenes
    assert stages["data"] >= 0 and all(stages[k] > 0 for k in ("grpo", "eval_base", "eval_grpo"))
    assert result.ours.seconds[0] >= sum(stages.values())  # the wall time includes start-up
    assert result.baseline.seconds[0] > 0 and result.ratio is None

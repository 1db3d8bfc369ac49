"""P6: wall time of each demo stage and of the test suite, from the same benchmark run.

Not a ratio: the point is that a regression in either shows up in the report next to the
benchmarks that explain it. Both run as subprocesses exactly as a user runs them (the demo is a
CLI verb, the suite is pytest), so start-up costs are counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import REPO, Result, Timing
from vqa_r1.errors import UserError


def _run(cmd: list[str], cwd: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise UserError(f"P6: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return seconds


def run(quick: bool, repeats: int) -> Result:
    """One demo and one suite run (``repeats`` does not apply: each takes minutes in full)."""
    demo_args = (
        ["--rows", "base,grpo", "--split", "validation", "--set", "grpo:train.max_steps=5"]
        if quick
        else []
    )
    suite_args = (
        ["tests/test_answers.py", "tests/test_rewards.py"]
        if quick
        else ["-m", "not slurm", "-p", "no:cacheprovider"]
    )
    with tempfile.TemporaryDirectory(prefix="vqa-r1-bench-demo-") as tmp:
        demo_s = _run([sys.executable, "-m", "vqa_r1", "demo", "--out", tmp, *demo_args], REPO)
        steps = json.loads((Path(tmp) / "launch.json").read_text())["steps"]
        stages = {step["name"]: step["seconds"] for step in steps}  # each step's local job
    if not (REPO / "tests").is_dir():
        raise UserError(f"P6 needs the test suite of a checkout; {REPO / 'tests'} is missing")
    suite_s = _run([sys.executable, "-m", "pytest", "-q", *suite_args], REPO)
    return Result(
        id="P6",
        title="the demo's stages and the test suite, timed",
        ours=Timing(
            "demo " + ("(base, grpo 5 steps, validation)" if quick else "(default)"), [demo_s]
        ),
        baseline=Timing("test suite " + ("(2 files)" if quick else "(-m 'not slurm')"), [suite_s]),
        kind="timing",
        details={"demo stages (s)": stages},
        notes=[
            "one run of each, no warm-up (each is a cold start as a user sees it); compare with "
            "earlier reports: a stage that grew is a regression to explain"
        ],
    )

"""Helpers for the SLURM tests: is the cluster usable, what sacct says about a job, waiting."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

START_HINT = "run `scripts/local-slurm start` (as root) first"
USABLE_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def cluster_problem() -> str | None:
    """Why the local cluster cannot take jobs, or None when it can."""
    if shutil.which("sinfo") is None:
        return "sinfo not found, SLURM is not installed"
    sinfo = _run("sinfo", "-h", "-o", "%T")
    if sinfo.returncode != 0:
        return f"sinfo failed: {sinfo.stderr.strip()}"
    states = sinfo.stdout.split()
    if not USABLE_NODE_STATES.intersection(states):
        return f"no node takes jobs (node states: {', '.join(states) or 'none'})"
    sacct = _run("sacct", "-n", "-X", "-S", "now-1hours", "-o", "JobID")
    if sacct.returncode != 0:
        return f"sacct does not answer: {sacct.stderr.strip()}"
    return None


def sacct_history(job_id: str) -> list[dict[str, str]]:
    """Every run of a job, oldest first (`--duplicates` keeps the runs a requeue replaced)."""
    fields = ["JobID", "State", "Start", "End", "ExitCode"]
    result = _run("sacct", "-n", "-X", "-P", "--duplicates", "-j", job_id, "-o", ",".join(fields))
    assert result.returncode == 0, result.stderr
    return [
        dict(zip(fields, line.split("|"), strict=True))
        for line in result.stdout.splitlines()
        if line
    ]


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str | Callable[[], str],
    poll_s: float = 1.0,
) -> None:
    """Poll `condition` until it holds; past `timeout_s`, fail the test naming what it waited for.

    `what` is that description, or a callable that returns it at the deadline, so that it can carry
    the state of things then (sacct, `status`, log tails). Polling, rather than blocking in
    submitit or sleeping a fixed time, lets a stuck job fail with its logs attached.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            description = what() if callable(what) else what
            pytest.fail(
                f"timed out after {timeout_s:.0f} s waiting for {description}", pytrace=False
            )
        time.sleep(poll_s)


def final_state(job_id: str, timeout_s: float = 30) -> str:
    """The accounting state once it is final; slurmctld reports to slurmdbd asynchronously."""
    pending = {"", "PENDING", "RUNNING", "REQUEUED", "COMPLETING"}

    def last_state() -> str:
        history = sacct_history(job_id)
        return history[-1]["State"] if history else ""

    wait_until(
        lambda: last_state() not in pending,
        timeout_s,
        lambda: f"a final state of job {job_id} in sacct; its history: {sacct_history(job_id)}",
    )
    return last_state()


def scontrol(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (Restarts, JobState, ...) while the controller knows it."""
    out = _run("scontrol", "show", "job", "-o", job_id)
    return dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)


def prebuild_tiny_model() -> None:
    """Build the tiny model once here, so jobs and reference runs do not all build it at once."""
    from vqa_r1.models.loading import resolve_model_path
    from vqa_r1.models.registry import get_spec
    from vqa_r1.models.tiny import TinySize
    from vqa_r1.recipes import load_config

    mc = load_config("grpo", "tiny-qwen2.5-vl").model
    size = TinySize(hidden=mc.tiny_hidden, layers=mc.tiny_layers, vocab=mc.tiny_vocab)
    resolve_model_path(get_spec(mc.name), None, tiny_seed=mc.tiny_seed, tiny_size=size)


def per_step(run_dir) -> list[dict]:
    """The per-step records of a run's metrics.jsonl (the closing summary has no loss)."""
    import json
    from pathlib import Path

    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def assert_same_run(clean_dir, requeued_dir, max_steps: int, compared: tuple[str, ...]) -> None:
    """An interrupted run equals an uninterrupted one: every step once, the same per-step
    metrics, the same final adapter; and the comparison means something (gradients flowed)."""
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    clean, requeued = per_step(clean_dir), per_step(requeued_dir)
    assert [r["step"] for r in requeued] == list(range(1, max_steps + 1)), "a step lost or repeated"
    assert [r["step"] for r in clean] == list(range(1, max_steps + 1))
    for x, y in zip(clean, requeued, strict=True):
        for key in compared:
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), (x["step"], key, x, y)
    assert any(r["grad_norm"] > 0 for r in clean), "no gradient: the comparison would be vacuous"
    adapter = "final/adapter_model.safetensors"
    wa, wb = load_file(str(Path(clean_dir) / adapter)), load_file(str(Path(requeued_dir) / adapter))
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-4, atol=1e-6)

"""scripts/gpu-smoke as a user runs it: one line and exit 1 without a GPU; its stages on the CPU.

The GPU run itself (CUDA placement, bf16, peak memory, vLLM colocate) needs an NVIDIA GPU and is
not run here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu-smoke"


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, **(env or {})}
    environ.pop("PYTHONPATH", None)  # the script puts its own src/ first
    return subprocess.run(
        [str(SCRIPT), "--python", sys.executable, *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
    )


def test_without_a_gpu_it_says_so_in_one_line_and_fails(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "smoke"
    result = _run("--out", str(out))
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and ("no usable CUDA device" in lines[0] or "CPU-only" in lines[0])
    assert torch.__version__ in lines[0]
    assert not out.exists()  # nothing run, nothing written


def test_wheels_install_runs_pip_offline_before_the_smoke(tmp_path):
    """--wheels DIR: pip --no-index from DIR alone (here empty: everything is installed already,
    so pip changes nothing and can fetch nothing), then the smoke (here: no GPU)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    result = _run("--wheels", str(wheels), "--out", str(tmp_path / "smoke"))
    assert "Requirement already satisfied: trl" in result.stdout, result.stderr[-2000:]
    assert result.returncode == 1 and result.stdout.strip().splitlines()[-1].startswith(
        "gpu-smoke:"
    )


def test_bad_arguments_and_the_requirements_list():
    assert _run("--bogus").returncode == 2
    listed = _run("--requirements")
    assert listed.returncode == 0
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert listed.stdout.split() == pyproject["project"]["dependencies"]
    assert _run("--wheels", "/nonexistent-wheels").returncode == 2


@pytest.mark.slow
def test_cpu_mode_runs_every_stage_and_asserts_placement(tmp_path):
    out = tmp_path / "smoke"
    result = _run("--cpu", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = json.loads((out / "gpu-smoke.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["sft", "grpo (generate)", "grpo (vLLM colocate)", "evaluate", "merge"]
    for name in ("sft", "grpo (generate)", "evaluate"):
        assert stages[name]["status"] == "ok", stages[name]
        assert stages[name]["model_calls"] > 0
        assert stages[name]["devices"] == ["inputs:cpu", "weights:cpu"]
    for name in ("sft", "grpo (generate)"):
        assert stages[name]["steps"] > 0 and stages[name]["steps_per_second"] > 0
    assert stages["merge"]["status"] == "ok" and stages["merge"]["dtypes"] == ["F32"]
    colocate = stages["grpo (vLLM colocate)"]
    assert colocate["status"] == "skipped" and colocate["error"] == "vLLM generates on GPUs only"
    assert report["environment"]["device"] == "cpu"


def test_the_placement_probe_sees_a_model_on_the_wrong_device():
    """What makes a GPU stage fail: a whole-model call whose weights or inputs are not on CUDA."""
    from benchmarks.gpu_smoke import Stage, run_stage
    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    loaded = load_model(load_config("evaluate", "tiny-qwen2.5-vl-pretrained"))
    ids = loaded.processor.tokenizer("hello", return_tensors="pt")["input_ids"]
    stage = Stage("forward")
    run_stage(stage, lambda: loaded.model(input_ids=ids) and None, "cuda")
    assert stage.status == "FAIL" and "expected everything on cuda" in stage.error
    assert stage.devices == ["inputs:cpu", "weights:cpu"] and stage.model_calls == 1
    nothing = Stage("nothing")
    run_stage(nothing, lambda: None, "cpu")
    assert nothing.status == "FAIL" and "no model call" in nothing.error

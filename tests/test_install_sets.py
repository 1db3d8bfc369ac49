"""The two tested sets of versions and the files that install them (issue 16, points 1 and 18).

constraints.txt is the CPU set CI runs; constraints-gpu.txt is what `pip install -e ".[gpu]"
-c constraints-gpu.txt` (or `pixi run -e gpu ...`) installs on a cluster. vLLM 0.31.0, the newest
TRL 1.16 accepts, pins torch 2.13.0 and torchvision 0.28.0, so the sets differ in torch; everything
a run's behaviour depends on above torch is the same in both.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
SAME_IN_BOTH = ("transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
                "huggingface-hub", "submitit", "openai", "pandas", "scikit-learn")  # fmt: skip


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if match:
            found[_name(match.group(1))] = match.group(2)
    return found


CPU = pins(REPO / "constraints.txt")
GPU = pins(REPO / "constraints-gpu.txt")


def test_the_sets_share_everything_above_torch():
    assert CPU["torch"] != GPU["torch"] and CPU["torchvision"] != GPU["torchvision"]
    for name in SAME_IN_BOTH:
        assert CPU[name] == GPU[name], name
    assert GPU["vllm"] and GPU["deepspeed"] and "vllm" not in CPU


def test_the_gpu_extra_installs_what_the_gpu_set_pins():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = {
        _name(Requirement(r).name): Requirement(r) for r in project["optional-dependencies"]["gpu"]
    }
    assert "flash-attn" not in extra  # a source build against torch: optional, documented
    assert set(extra) == {"vllm", "deepspeed"}
    for name, requirement in extra.items():
        assert requirement.specifier.contains(GPU[name]), (name, str(requirement))
    # vLLM's server renders images for TRL from 0.30 on (launch/distributed.py checks it too)
    assert not extra["vllm"].specifier.contains("0.29.0")
    # each installs alone (a CUDA 12 torch takes DeepSpeed without vLLM's CUDA 13 wheel), and
    # `gpu` is exactly the two
    extras = project["optional-dependencies"]
    for name in ("vllm", "deepspeed"):
        assert [Requirement(r) for r in extras[name]] == [extra[name]], name
    for requirement in map(Requirement, project["dependencies"]):
        for tested in (CPU, GPU):
            assert requirement.specifier.contains(tested[_name(requirement.name)]), requirement


def test_pixi_environments_pin_the_tested_sets():
    """`pixi run ...` gets the CPU set, `pixi run -e gpu ...` the GPU set."""
    manifest = tomllib.loads((REPO / "pixi.toml").read_text())
    common = manifest["pypi-dependencies"]
    features = manifest["feature"]
    assert manifest["environments"] == {"default": ["cpu"], "gpu": ["gpu"]}
    for feature, tested in (("cpu", CPU), ("gpu", GPU)):
        declared = {**common, **features[feature]["pypi-dependencies"]}
        declared.pop("vqa-r1")
        assert {"torch", "torchvision", "transformers", "trl"} <= set(declared)
        for name, spec in declared.items():
            assert spec == f"=={tested[_name(name)]}", (feature, name, spec)


@pytest.mark.index
@pytest.mark.slow
def test_the_gpu_install_resolves_to_the_gpu_set(tmp_path):
    """`pip install -e ".[gpu]" -c constraints-gpu.txt` resolves against the package index, as on
    a cluster (this machine's local wheels and pip settings left out), to exactly the GPU set:
    every package pip would install is one of its pins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    report = tmp_path / "report.json"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), "-c", str(REPO / "constraints-gpu.txt"), "-e", f"{REPO}[gpu,dev]"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    installed = {
        _name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    installed.pop("vqa-r1")
    assert installed == GPU

"""A non-editable install works: a wheel of the checkout carries every data file the package reads
at run time (recipes, DeepSpeed configs, experiment specs, the shipped tiny models, constraints.txt)
and, installed outside the checkout, runs `vqa-r1 evaluate` on a tiny model (issue 16, point 15:
stale package-data globs shipped none of them, so only editable installs worked), and nothing
of the checkout's dev tooling (benchmarks/, issue 18).

Offline: the wheel is built with the venv's setuptools (torch requires it; its bdist_wheel needs no
`wheel` package) and installed with --no-deps --target, so the venv is not touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "vqa_r1"
# what the package reads from its own folder (recipes/__init__.py, experiments/spec.py,
# models/loading.py, launch/doctor.py), relative to the package
DATA_GLOBS = (
    "recipes/*/*.yaml",
    "recipes/deepspeed/*.json",
    "experiments/specs/*.yaml",
    "models/pretrained/*/*",
)
# the checkout minus what a build does not read: pip builds in the source folder (build/,
# *.egg-info), so it builds in a copy, which other work in the tree neither disturbs nor sees
NOT_BUILD_INPUTS = shutil.ignore_patterns(
    ".git", ".venv", ".whl", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", "runs",
    "results", "tests", "tmp", ".pytest_cache", ".ruff_cache",
)  # fmt: skip


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel built from a copy of the checkout, that copy's package folder)"""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "checkout"
    shutil.copytree(REPO, source, ignore=NOT_BUILD_INPUTS)
    out = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(tmp / "dist"), str(source)],
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (built,) = (tmp / "dist").glob("vqa_r1-*.whl")
    return built, source / "src" / PACKAGE


@pytest.mark.slow
def test_the_wheel_ships_every_data_file_the_package_reads(wheel):
    built, package = wheel
    names = set(zipfile.ZipFile(built).namelist())
    want = {
        f"{PACKAGE}/{p.relative_to(package).as_posix()}"
        for pattern in DATA_GLOBS
        for p in package.glob(pattern)
        if p.is_file()
    }
    families = {p.parent.name for p in package.glob("recipes/*/*.yaml")}
    assert {"qwen2_5_vl", "internvl", "smolvlm"} <= families
    for family in families:
        assert any(n.startswith(f"{PACKAGE}/recipes/{family}/") for n in want), family
    assert {f"{PACKAGE}/recipes/deepspeed/{z}.json" for z in ("zero2", "zero3")} <= want
    assert f"{PACKAGE}/experiments/specs/sim2real.yaml" in want
    want.add(f"{PACKAGE}/constraints.txt")  # copied in by setup.py's build_py
    assert not want - names, f"missing from the wheel: {sorted(want - names)}"


@pytest.mark.slow
def test_the_wheel_ships_the_library_only(wheel):
    """The benchmarks, the GPU smoke and the fake OpenAI server are the checkout's dev tooling
    (benchmarks/, issue 18): a wheel holds the package and its metadata, nothing else."""
    built, _ = wheel
    names = zipfile.ZipFile(built).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops - {PACKAGE} == {next(t for t in tops if t.endswith(".dist-info"))}, sorted(tops)
    assert not [n for n in names if n.startswith("benchmarks/")]
    assert not [n for n in names if "loopback" in n or n.startswith(f"{PACKAGE}/bench/")]
    assert f"{PACKAGE}/cli/bench.py" not in names and f"{PACKAGE}/cli/__init__.py" in names


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict, str, Path]:
    """(a folder outside the checkout, the environment of a Python that imports the installed
    wheel only, the driver that runs ``MODULE ARGS...`` as ``python -m MODULE``)"""
    built, _ = wheel
    tmp = tmp_path_factory.mktemp("installed")
    site = tmp / "site"
    out = _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(site), str(built)],
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    work = tmp / "elsewhere"
    work.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "VQA_R1_CACHE": str(tmp / "cache"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    for name in ("VQA_R1_CLUSTERS_DIR", "VQA_R1_JUDGE_PROMPTS", "OPENAI_API_KEY"):
        env.pop(name, None)
    # `python -m MODULE ...` with the checkout's src taken off sys.path (the venv's editable
    # install puts it there), so that only the installed copy can be imported
    checkout_src = str(REPO / "src")
    driver = (
        "import os, runpy, sys\n"
        f"sys.path[:] = [p for p in sys.path if os.path.realpath(p or '.') != {checkout_src!r}]\n"
        "import vqa_r1\n"
        "print('vqa_r1 from', vqa_r1.__file__, file=sys.stderr, flush=True)\n"
        "module = sys.argv.pop(1)\n"
        "sys.argv[0] = module\n"
        "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    )
    return work, env, driver, site


def _imported_from(site: Path, stderr: str) -> None:
    imported = [line for line in stderr.splitlines() if line.startswith("vqa_r1 from ")]
    assert imported, stderr[-3000:]
    assert Path(imported[0].removeprefix("vqa_r1 from ")).is_relative_to(site), imported


@pytest.mark.slow
def test_the_installed_wheel_evaluates_a_tiny_model_outside_the_checkout(installed):
    work, env, driver, site = installed
    run_dir = work / "eval"
    out = _run(
        [sys.executable, "-c", driver, "vqa_r1", "evaluate", "--model", "tiny-qwen2.5-vl-pretrained",
         "--limit", "2", "--batch-size", "2", "--output-dir", str(run_dir),
         "--set", "data.synthetic_train=2", "--set", "data.synthetic_validation=2",
         "--set", "data.synthetic_test=2"],
        cwd=work, env=env,
    )  # fmt: skip
    _imported_from(site, out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["n"] == 2 and scores["model"] == "tiny-qwen2.5-vl-pretrained", scores


@pytest.mark.slow
def test_the_installed_wheel_judges_and_dry_runs_on_a_shipped_profile(installed, wheel):
    """Issue 34, item 4: no checkout behind it, the wheel's own judge prompts and cluster
    profiles: `judge run` against the loopback server writes its checks, and the launcher
    (`python -m vqa_r1.cli.launch`, `vqa-r1-launch` once installed with its scripts) prints the
    sbatch script of a dry run on study-12h."""
    from benchmarks.loopback import LoopbackOpenAI

    work, env, driver, site = installed
    names = set(zipfile.ZipFile(wheel[0]).namelist())
    assert {
        f"{PACKAGE}/clusters/study-12h.yaml",
        f"{PACKAGE}/judge_prompts/taxonomy_v1.txt",
    } <= names
    responses = work / "base.json"
    responses.write_text(json.dumps([
        {"question": f"The cat {i} is left of the dog.", "true_response": " True ",
         "predicted_response": f"The cat {i} sits left of the dog.\nAnswer: True\n"}
        for i in range(3)
    ]))  # fmt: skip
    with LoopbackOpenAI() as server:
        out = _run(
            [sys.executable, "-c", driver, "vqa_r1", "judge", "run", "--judge-model",
             "loopback-judge", "--base-url", server.base_url, "--responses", f"base={responses}",
             "--out", str(work / "checks.json"), "--cache-dir", str(work / "cache")],
            cwd=work, env=env,
        )  # fmt: skip
    _imported_from(site, out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert len(json.loads((work / "checks.json").read_text())) == 3

    out = _run(
        [sys.executable, "-c", driver, "vqa_r1.cli.launch", "grpo", "--model", "qwen2.5-vl-3b",
         "--cluster", "study-12h", "--dry-run", "--output-dir", str(work / "run")],
        cwd=work, env=env,
    )  # fmt: skip
    _imported_from(site, out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.startswith("#!/bin/bash") and "#SBATCH --gres=gpu:a100:1" in out.stdout
    assert "export NCCL_DEBUG=WARN" in out.stdout and not (work / "run").exists()

"""`vqa-r1 doctor` (launch/doctor.py): what a CPU machine shows through the CLI, and the rest with
faked inputs (torch facts, a fake `nvidia-smi`, a fake `scontrol`, environment variables)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from vqa_r1.launch import doctor
from vqa_r1.launch.clusters import load_cluster
from vqa_r1.launch.cuda_check import Gpu, SmiReport, TorchCuda
from vqa_r1.launch.doctor import FAIL, OK, WARN

REPO = Path(__file__).resolve().parents[1]
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
STATUSES = ("OK ", "WARN", "FAIL")


def vqa_r1(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "vqa_r1", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=env,
    )


def check_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(STATUSES)]


def fake_program(directory: Path, name: str, script: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)


# ------------------------------------------------------------------------- through the CLI


def test_doctor_here_prints_one_line_per_check_and_exits_by_them(tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")}
    out = vqa_r1("doctor", "--model", "tiny-qwen2.5-vl", "--run-dir", str(tmp_path), env=env)
    lines = check_lines(out.stdout)
    assert {line.split(":")[0].split()[-1] for line in lines} >= {
        "torch",
        "CUDA",
        "transformers",
        "trl",
        "peft",
        "flash-attn",
        "offline",
        "disk",
    }
    failed = [line for line in lines if line.startswith("FAIL")]
    assert out.returncode == (1 if failed else 0), out.stdout + out.stderr
    # a model that is not in the cache, and a GPU this machine must use: FAIL lines, exit 1
    import torch

    gpu = [] if torch.cuda.is_available() else ["--gpus", "1"]
    out = vqa_r1("doctor", "--model", "qwen2.5-vl-3b", *gpu, "--run-dir", str(tmp_path), env=env)
    assert out.returncode == 1
    failed = [line for line in check_lines(out.stdout) if line.startswith("FAIL")]
    assert any("qwen2.5-vl-3b" in line for line in failed), out.stdout
    assert "hf download Qwen/Qwen2.5-VL-3B-Instruct" in out.stdout
    assert not gpu or any(line.startswith("FAIL  CUDA") for line in failed), out.stdout


def test_launch_doctor_runs_the_checks_as_a_job(tmp_path):
    out = subprocess.run(
        [sys.executable, "slurm/launch.py", "doctor", "--executor", "local", "--gpus", "0",
         "--model", "tiny-smolvlm", "--output-dir", str(tmp_path / "doc")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    lines = check_lines(out.stdout)
    assert lines and out.returncode == (1 if any(x.startswith("FAIL") for x in lines) else 0)
    assert (tmp_path / "doc" / "doctor.txt").read_text().splitlines()[0] == lines[0]
    assert any(line.startswith("OK    transformers") for line in lines), out.stdout
    dry = subprocess.run(
        [sys.executable, "slurm/launch.py", "doctor", "--cluster", "study-12h", "--dry-run"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --gres=gpu:a100:1" in dry.stdout and "#SBATCH --ntasks-per-node=1" in dry.stdout


# ------------------------------------------------------------------------- GPUs (faked)


def cuda(available: bool, gpus=(), bf16=True) -> TorchCuda:
    return TorchCuda("2.14.1+cu130", "13.0", CU130, available, list(gpus), bf16)


def by_name(checks, name):
    return next(c for c in checks if c.name == name)


def test_gpu_checks_with_faked_torch_and_driver():
    h100 = Gpu("NVIDIA H100 80GB HBM3", (9, 0), 79.6)
    checks = doctor.cuda_checks(cuda(True, [h100]), SmiReport("580.65.06", [h100]), gpus=1)
    assert by_name(checks, "CUDA").status == OK and by_name(checks, "bf16").status == OK
    t4 = Gpu("Tesla T4", (7, 5), 15.0)
    checks = doctor.cuda_checks(cuda(True, [t4], bf16=False), SmiReport("580.1", [t4]), gpus=1)
    assert (
        by_name(checks, "bf16").status == WARN and "train.bf16=false" in by_name(checks, "bf16").fix
    )
    v100 = Gpu("Tesla V100-SXM2-32GB", (7, 0), 32.0)
    checks = doctor.cuda_checks(cuda(True, [v100]), SmiReport("580.1", [v100]), gpus=1)
    assert by_name(checks, "CUDA").status == FAIL and "sm_70" in by_name(checks, "CUDA").fix
    old = SmiReport("535.104.05", [Gpu("NVIDIA A100", (8, 0), 80.0)])
    checks = doctor.cuda_checks(cuda(False), old, gpus=1)
    assert by_name(checks, "CUDA").status == FAIL and "535.104.05" in by_name(checks, "CUDA").fix
    assert by_name(doctor.cuda_checks(cuda(False), old, gpus=0), "CUDA").status == WARN


def test_gpu_memory_against_the_cached_weights(monkeypatch):
    monkeypatch.setattr(doctor, "weights_gib", lambda name: 15.5)
    small = cuda(True, [Gpu("Tesla T4", (7, 5), 15.0)])
    assert doctor.memory_checks(small, ["qwen2.5-vl-7b"])[0].status == FAIL
    medium = cuda(True, [Gpu("NVIDIA A10", (8, 6), 24.0)])
    assert doctor.memory_checks(medium, ["qwen2.5-vl-7b"])[0].status == WARN
    large = cuda(True, [Gpu("NVIDIA H100", (9, 0), 80.0)])
    assert doctor.memory_checks(large, ["qwen2.5-vl-7b"])[0].status == OK
    assert doctor.memory_checks(cuda(False), ["qwen2.5-vl-7b"]) == []  # no GPU: nothing to say


# ------------------------------------------------------------------------- versions


def test_versions_are_checked_against_constraints_txt():
    pins = doctor.tested_versions(REPO / "constraints.txt")
    assert doctor.constraints_file() == REPO / "constraints.txt"  # a checkout reads its own
    import transformers

    checks = doctor.version_checks(pins)
    assert by_name(checks, "transformers").status == (
        OK if transformers.__version__ == pins["transformers"] else WARN
    )
    moved = {**pins, "torch": "0.1.0", "transformers": transformers.__version__}
    checks = doctor.version_checks(moved)
    torch_check = by_name(checks, "torch")
    assert torch_check.status == WARN and "0.1.0 tested" in torch_check.detail
    assert "constraints.txt" in torch_check.fix and metadata.version("torch") in torch_check.detail
    assert by_name(checks, "transformers").status == OK


def test_the_installed_torch_says_which_tested_set_applies():
    """Two tested sets: CPU (constraints.txt, CI) and GPU (constraints-gpu.txt, `.[gpu]`: vLLM
    pins another torch). An install follows the set whose torch it has; messages name the file."""
    cpu = doctor.tested_versions(REPO / "constraints.txt")
    gpu = doctor.tested_versions(REPO / "constraints-gpu.txt")
    assert cpu["torch"] != gpu["torch"] and "vllm" in gpu and "deepspeed" in gpu
    assert doctor.constraints_file(gpu["torch"]) == REPO / "constraints-gpu.txt"
    assert doctor.constraints_file(gpu["torch"] + "+cu130") == REPO / "constraints-gpu.txt"
    assert doctor.constraints_file(cpu["torch"]) == REPO / "constraints.txt"
    assert doctor.constraints_file("2.11.0") == REPO / "constraints.txt"  # neither: the CPU set
    checks = doctor.version_checks({**gpu, "trl": "0.0.1"}, "constraints-gpu.txt")
    assert by_name(checks, "trl").fix == "pip install -c constraints-gpu.txt 'trl==0.0.1'"
    # the same libraries above torch in both: what CI tests is what a cluster installs
    for name in ("transformers", "trl", "peft", "accelerate", "datasets", "huggingface-hub"):
        assert cpu[name] == gpu[name], name


# ------------------------------------------------------------------------- cache and env


def test_offline_flags(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert doctor.offline_check().status == OK
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert doctor.offline_check().status == WARN  # a job without it retries downloads
    monkeypatch.delenv("SLURM_JOB_ID")
    assert doctor.offline_check().status == OK  # a login node may download


def test_nccl_hints_on_several_nodes(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    monkeypatch.delenv("SLURM_NNODES", raising=False)
    assert doctor.nccl_checks() == []
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    (check,) = doctor.nccl_checks()
    assert check.status == OK and "NCCL_DEBUG=INFO" in check.fix
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    assert doctor.nccl_checks()[0].status == WARN


def test_free_disk(monkeypatch, tmp_path):
    class Usage:
        def __init__(self, free):
            self.free = free

    monkeypatch.setattr(doctor, "weights_gib", lambda name: 16.0)
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: Usage(0.5 * 2**30))
    assert doctor.disk_check(tmp_path / "new" / "run", []).status == FAIL
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: Usage(20 * 2**30))
    assert doctor.disk_check(tmp_path, ["qwen2.5-vl-7b"]).status == WARN
    assert doctor.disk_check(tmp_path, []).status == OK


# ------------------------------------------------------------------------- SLURM (faked)

CONFIG = """Configuration data as of 2026-11-25T10:00:00
JobRequeue              = {requeue}
PreemptMode             = OFF
PreemptType             = {preempt}
"""
PARTITION = "PartitionName=gpu\n   PreemptMode={mode} GraceTime={grace} MaxTime=12:00:00\n"


def fake_scontrol(
    tmp_path, monkeypatch, requeue="1", preempt="preempt/none", mode="OFF", grace="0"
):
    config = CONFIG.format(requeue=requeue, preempt=preempt)
    partition = PARTITION.format(mode=mode, grace=grace)
    script = (
        'if [ "$2" = config ]; then\n'
        + "".join(f"echo '{line}'\n" for line in config.splitlines())
        + "else\n"
        + "".join(f"echo '{line}'\n" for line in partition.splitlines())
        + "fi\n"
    )
    fake_program(tmp_path / "bin", "scontrol", script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def test_slurm_settings_requeue_relies_on(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch)
    checks = doctor.slurm_checks("study-12h")
    assert [c.status for c in checks] == [OK, OK, OK], checks
    fake_scontrol(tmp_path, monkeypatch, requeue="0")
    requeue = by_name(doctor.slurm_checks("study-12h"), "JobRequeue")
    assert requeue.status == FAIL and "requeue: true" in requeue.fix
    profile = tmp_path / "requeueing.yaml"
    profile.write_text("partition: gpu\nmax_time: '12:00:00'\nsbatch_extra: {requeue: true}\n")
    assert by_name(doctor.slurm_checks(str(profile)), "JobRequeue").status == OK
    fake_scontrol(tmp_path, monkeypatch, preempt="preempt/partition_prio", mode="REQUEUE")
    assert by_name(doctor.slurm_checks("study-12h"), "preemption").status == WARN  # GraceTime=0
    fake_scontrol(
        tmp_path, monkeypatch, preempt="preempt/partition_prio", mode="REQUEUE", grace="120"
    )
    assert by_name(doctor.slurm_checks("study-12h"), "preemption").status == OK
    fake_scontrol(tmp_path, monkeypatch, preempt="preempt/partition_prio", mode="CANCEL")
    assert by_name(doctor.slurm_checks("study-12h"), "preemption").status == WARN


def test_the_warning_signal_must_reach_the_tasks_in_time(tmp_path):
    assert doctor.signal_check(load_cluster("study-12h")).status == OK
    assert doctor.signal_check(load_cluster("local-slurm")).status == WARN  # 10 s: may be late
    profile = tmp_path / "batchonly.yaml"
    profile.write_text(
        "partition: gpu\nmax_time: '12:00:00'\nsbatch_extra: {signal: 'B:USR2@300'}\n"
    )
    assert doctor.signal_check(load_cluster(profile)).status == FAIL


def test_a_profile_that_activates_an_environment_without_naming_its_python(tmp_path):
    profile = tmp_path / "activates.yaml"
    profile.write_text("partition: gpu\nmax_time: '12:00:00'\nsetup: ['source /e/bin/activate']\n")
    check = doctor.interpreter_check(str(profile))
    assert check.status == WARN and "python:" in check.fix
    assert doctor.interpreter_check("study-12h").status == OK


@pytest.mark.slow
def test_a_wheel_ships_the_tested_versions(tmp_path):
    """A non-editable install has no checkout: the wheel carries constraints.txt (setup.py)."""
    import shutil
    import zipfile

    source = tmp_path / "source"
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "constraints.txt",
                 "constraints-gpu.txt"):  # fmt: skip
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "wheel"), "-q"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    shipped = site / "vqa_r1" / "constraints.txt"
    assert shipped.read_text() == (REPO / "constraints.txt").read_text()
    gpu_set = site / "vqa_r1" / "constraints-gpu.txt"
    assert gpu_set.read_text() == (REPO / "constraints-gpu.txt").read_text()
    out = subprocess.run(
        [sys.executable, "-c", "from vqa_r1.launch.doctor import constraints_file as f; print(f())"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=120,
    )  # fmt: skip
    assert out.stdout.strip() == str(shipped), out.stderr


def test_the_doctor_job_checks_the_tested_set_found_at_submission(tmp_path):
    """The job imports a code snapshot (the package only): it gets the login node's file."""
    from vqa_r1.launch.build import doctor_graph
    from vqa_r1.launch.request import JobOptions
    from vqa_r1.launch.task import DoctorTask

    request = doctor_graph([], str(tmp_path / "doc"), JobOptions(dry_run=True)).steps[0].request
    assert request.task.constraints == str(REPO / "constraints.txt")
    moved = tmp_path / "constraints.txt"
    moved.write_text("transformers==0.0.1\n")
    result = DoctorTask(str(tmp_path / "doc"), constraints=str(moved))()
    assert "WARN  transformers" in result["report"] and "0.0.1 tested" in result["report"]

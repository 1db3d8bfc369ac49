"""A GPU job on a machine where torch cannot use the GPU fails at once; jobs are offline; a dry run
works without SLURM; a cluster profile names the job's Python; an interrupted download is refused.

(issue 16, points 3, 12, 13 and 17; launch/cuda_check.py, models/loading.py)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.launch import cuda_check
from vqa_r1.launch.cuda_check import (
    Gpu,
    SmiReport,
    TorchCuda,
    arch_supported,
    cuda_problem,
    nvidia_smi,
)
from vqa_r1.launch.task import JudgeTask, TrainTask
from vqa_r1.models.loading import PRETRAINED_DIR, missing_model_files

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.14.1+cu130's list


def launch(*args, env=None, timeout=300):
    """`slurm/launch.py ARGS` as typed: its own process where the environment must differ at
    import (PATH, the Hugging Face cache), else in this process (tests/cli_helpers.py)."""
    if env is None:
        return run_in_process(launch_main, [str(a) for a in args])
    return subprocess.run(
        [*LAUNCH, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env
    )


def fake_nvidia_smi(directory: Path, lines: str | None, rc: int = 0) -> Path:
    """An `nvidia-smi` that answers the query with ``lines`` (driver, name, capability, MiB)."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "nvidia-smi"
    said = lines if lines is not None else "NVIDIA-SMI has failed"
    body = "".join(f"echo '{line}'\n" for line in said.splitlines())  # builtins only
    exe.write_text(f"#!/bin/sh\n{body}exit {rc}\n")
    exe.chmod(0o755)
    return exe


# ------------------------------------------------------------------------- the CUDA facts


@pytest.mark.parametrize(
    ("capability", "arch_list", "ok"),
    [
        ((8, 0), CU130, True),
        ((8, 9), CU130, True),  # L40: sm_86 cubins run on 8.9
        ((7, 0), CU130, False),  # V100: no kernels in the cu130 wheels
        ((9, 0), ["sm_80"], False),  # cubins never run on a newer major version
        ((9, 0), ["sm_80", "compute_80"], True),  # PTX is compiled for newer GPUs
        ((8, 6), ["sm_90a"], False),
        ((9, 0), ["sm_90a"], True),
    ],
)
def test_arch_supported_follows_cuda_binary_compatibility(capability, arch_list, ok):
    assert arch_supported(capability, arch_list) is ok


def test_nvidia_smi_is_read_from_path(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "535.104.05, Tesla V100-SXM2-32GB, 7.0, 32768")
    monkeypatch.setenv("PATH", str(tmp_path))
    report = nvidia_smi()
    assert report.driver == "535.104.05" and report.error is None
    assert report.gpus == [Gpu("Tesla V100-SXM2-32GB", (7, 0), 32.0)]
    fake_nvidia_smi(tmp_path, None, rc=9)
    assert nvidia_smi().driver is None and "NVIDIA-SMI has failed" in nvidia_smi().error
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert "not on PATH" in nvidia_smi().error


def cu130(available: bool, gpus=()) -> TorchCuda:
    return TorchCuda("2.14.1+cu130", "13.0", CU130, available, list(gpus))


def test_an_old_driver_names_itself_the_build_and_the_wheel_index():
    smi = SmiReport("535.104.05", [Gpu("NVIDIA A100", (8, 0), 80.0)])
    message = cuda_problem(cu130(False), smi)
    assert "535.104.05" in message and "torch 2.14.1+cu130" in message and ">= 580" in message
    assert "download.pytorch.org/whl/cu12" in message and "torch==2.14.1" in message
    # a driver too old for any CUDA we know: update it
    message = cuda_problem(cu130(False), SmiReport("418.1", []))
    assert "update the NVIDIA driver" in message


def test_a_gpu_the_wheel_has_no_kernels_for_is_named():
    v100 = Gpu("Tesla V100-SXM2-32GB", (7, 0), 32.0)
    message = cuda_problem(cu130(True, [v100]), SmiReport())
    assert "Tesla V100" in message and "sm_70" in message and "sm_75" in message
    assert "--index-url" in message
    assert cuda_problem(cu130(True, [Gpu("NVIDIA H100", (9, 0), 80.0)]), SmiReport()) is None


def test_a_cpu_only_torch_and_a_machine_without_gpus():
    cpu = TorchCuda("2.14.1+cpu", None, [], False)
    assert "CPU-only build" in cuda_problem(cpu, SmiReport("580.1", []))
    message = cuda_problem(cu130(False), SmiReport(error="nvidia-smi is not on PATH"))
    assert "no usable CUDA device" in message and "--gpus 0" in message


def test_the_job_start_gate_reads_torch_and_nvidia_smi(tmp_path, monkeypatch):
    """Fake torch facts (monkeypatched) and a fake nvidia-smi: the same path a job takes."""
    import torch

    fake_nvidia_smi(tmp_path, "550.54.15, NVIDIA A100-SXM4-80GB, 8.0, 81920")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"driver 550\.54\.15 is too old.*whl/cu126"):
        cuda_check.require_usable_cuda(1)
    cuda_check.require_usable_cuda(0)  # a CPU job is not checked


# ------------------------------------------------------------------------- jobs


def test_a_gpu_job_fails_before_training_on_the_cpu(tmp_path):
    """The SLURM side: the task itself refuses to run when its GPUs are unusable (no GPU here)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a usable GPU")
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match="CUDA"):
        TrainTask(str(run_dir), gpus=1)()
    assert not run_dir.exists()  # it failed before reading its config or writing anything
    assert not JudgeTask.uses_cuda  # a judge's GPU serves its vLLM server, not the client


def test_each_job_knows_the_gpus_it_asked_for(tmp_path):
    from vqa_r1.launch.build import RunSpec, job_graph
    from vqa_r1.launch.request import JobOptions

    spec = RunSpec("grpo", "qwen2.5-vl-3b", output_dir=str(tmp_path / "run"))
    request = job_graph(spec, JobOptions(gpus=2, dry_run=True))[0].steps[0].request
    assert request.task.gpus == 2 and request.task.uses_cuda
    request = job_graph(spec, JobOptions(gpus=0, dry_run=True))[0].steps[0].request
    assert request.task.gpus == 0


def test_launch_grpo_with_a_gpu_on_this_machine_fails_before_anything_runs(tmp_path):
    """Acceptance: `slurm/launch.py grpo --model tiny-qwen2.5-vl --gpus 1 --executor local`
    fails at once: one line, no job started, nothing trained (a hang meets the 120 s timeout)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a usable GPU")
    run_dir = tmp_path / "run"
    out = launch(
        "grpo", "--model", "tiny-qwen2.5-vl", "--gpus", "1", "--executor", "local",
        "--output-dir", str(run_dir), timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "CUDA" in errors[0] and "torch" in errors[0], out.stderr
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "jobs").exists()


@pytest.mark.parametrize("verb", ["grpo", "evaluate"])
def test_jobs_run_offline(verb):
    out = launch(verb, "--model", "tiny-qwen2.5-vl", "--executor", "slurm", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "\nexport HF_HUB_OFFLINE=1" in out.stdout


def test_the_readme_cluster_dry_run_works_without_slurm(tmp_path):
    """README: `python slurm/launch.py grpo --model qwen2.5-vl-3b --cluster study-12h --dry-run`,
    with srun and sbatch hidden (an empty PATH: the launcher needs no other program)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}
    out = launch(
        "grpo", "--model", "qwen2.5-vl-3b", "--cluster", "study-12h", "--dry-run",
        "--output-dir", str(tmp_path / "run"), env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("#!/bin/bash") and "#SBATCH --gres=gpu:a100:1" in out.stdout
    assert "export NCCL_DEBUG=WARN\nexport TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n" in out.stdout
    assert "module load cuda" not in out.stdout
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()
    # --executor slurm asks for the SLURM script explicitly: still no SLURM needed to print it
    sweep = launch(
        "sft", "--model", "tiny-qwen2.5-vl", "--executor", "slurm", "--sweep", "train.seed=1,2",
        "--cluster", "local-slurm", "--time", "00:05:00", "--dry-run", env=env,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    assert "#SBATCH --array=0-1%2" in sweep.stdout


def test_more_gpus_per_node_than_the_cluster_has_are_refused_before_queueing(tmp_path):
    """Issue 33, item 5: `--gpus 8` on study-12h's 4-GPU nodes, one line naming the --nodes to
    use, exit 2, nothing written (sbatch refused it only after the queue's own checks)."""
    out = launch("grpo", "--model", "qwen2.5-vl-3b", "--cluster", "study-12h", "--gpus", "8",
                 "--dry-run", "--output-dir", tmp_path / "run")  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: --gpus 8: a node of cluster study-12h has 4 GPUs (gpus_per_node in "
        f"{REPO / 'slurm' / 'clusters' / 'study-12h.yaml'}); for 8 GPUs use --nodes 2 --gpus 4"
    ], out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "run").exists()


def test_a_profile_names_the_python_of_its_jobs(tmp_path):
    profile = tmp_path / "envcluster.yaml"
    profile.write_text(
        "partition: gpu\ngpus_per_node: 1\nmax_time: '12:00:00'\n"
        "setup: ['source /opt/env/bin/activate']\npython: /opt/env/bin/python\n"
    )
    srun = srun_line(profile)
    assert "/opt/env/bin/python -u -m submitit.core._submit" in srun
    profile.write_text("partition: gpu\ngpus_per_node: 1\nmax_time: '12:00:00'\n")
    assert f"{sys.executable} -u -m submitit.core._submit" in srun_line(profile)


def srun_line(profile: Path) -> str:
    out = launch("grpo", "--model", "tiny-qwen2.5-vl", "--cluster", str(profile), "--dry-run")
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if line.startswith("srun "))


# ------------------------------------------------------------------------- the cache


def test_complete_model_folders_pass_the_cache_check():
    for folder in sorted(PRETRAINED_DIR.iterdir()):
        if (folder / "config.json").exists():
            assert missing_model_files(folder) == [], folder


def test_an_interrupted_download_is_incomplete(tmp_path):
    complete = sorted(p for p in PRETRAINED_DIR.iterdir() if (p / "config.json").exists())[0]
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text((complete / "config.json").read_text())
    missing = missing_model_files(folder)
    assert any("weights" in m for m in missing) and any("processor" in m for m in missing)
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        (folder / name).write_bytes((complete / name).read_bytes())
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = {"metadata": {}, "weight_map": {"a.weight": shards[0], "b.weight": shards[1]}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / shards[0]).write_bytes(b"x")
    assert missing_model_files(folder) == [shards[1]]
    (folder / shards[1]).write_bytes(b"x")
    assert missing_model_files(folder) == []


def test_submission_refuses_a_snapshot_with_only_config_json(tmp_path):
    """An `hf download` cut off after config.json: the hub's lookup finds the snapshot; we don't."""
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen2.5-VL-3B-Instruct"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    out = launch(
        "grpo", "--model", "qwen2.5-vl-3b", "--executor", "local",
        "--output-dir", str(tmp_path / "run"), env=env,
    )  # fmt: skip
    assert out.returncode == 2
    assert (
        "incomplete" in out.stderr and "the weights" in out.stderr and "hf download" in out.stderr
    )
    assert not (tmp_path / "run").exists()


def test_the_docs_quote_the_message_a_job_gives():
    smi = SmiReport("535.104.05", [Gpu("NVIDIA A100", (8, 0), 80.0)])
    message = cuda_problem(cu130(False), smi)
    page = " ".join((REPO / "docs" / "installation.md").read_text().split())
    assert f"`{message}`" in page


@pytest.mark.parametrize(
    ("parent", "expected"), [(None, "0"), ("2,3", "2"), ("GPU-0f3a", "0")], ids=str
)
def test_a_local_gpu_job_sees_the_gpus_it_asked_for(tmp_path, monkeypatch, parent, expected):
    """Found on an H100: submitit's local executor sets CUDA_VISIBLE_DEVICES to the GPUs it was
    given, "" without gpus_per_node, so every local GPU job saw no GPU and the job-start check
    refused it. The job now gets --gpus of them, from the caller's own CUDA_VISIBLE_DEVICES when
    that names GPUs by index."""
    from types import SimpleNamespace

    from vqa_r1.launch.job_script import local_parameters, make_executor
    from vqa_r1.launch.request import Resources

    if parent is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", parent)
    request = SimpleNamespace(resources=Resources(gpus=1, nodes=1, time="00:05:00"))
    params = local_parameters(request)
    assert params["gpus_per_node"] == 1
    executor = make_executor("local", tmp_path / "jobs", params)
    job = executor.submit(os.getenv, "CUDA_VISIBLE_DEVICES", "<unset>")
    assert job.result() == expected
    none = local_parameters(SimpleNamespace(resources=Resources(gpus=0, nodes=1, time="1:00")))
    assert "gpus_per_node" not in none

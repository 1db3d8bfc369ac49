"""Scaling a job: the sbatch scripts of multi-GPU, multi-node and multi-process jobs, and the vLLM
server of GRPO's server mode (launch/distributed.py, launch/submit.py, models/serving.py).

Every script is a dry run through the launcher's command line, as a user types it; no GPU, no
vLLM and no cluster are needed. The shell lines of the server are also run under bash with
stand-ins, and the batch rule is compared with TRL's own GRPOConfig.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
import submitit
import yaml

from vqa_r1.cli.launch import main
from vqa_r1.launch import distributed
from vqa_r1.launch.distributed import (
    SERVER_GPUS_ENV,
    check_grpo_batch,
    export_torch_distributed,
    restrict_training_gpus,
    supported_vllm_range,
)
from vqa_r1.models.serving import FREE_PORT_FUNCTION, free_port_expression

CACHED = "/hf/hub/models--Qwen--Qwen2.5-VL-3B-Instruct/snapshots/0123abc"
SERVER = ["--set", "train.use_vllm=true", "--set", "train.vllm_mode=server"]
GRPO_3B = ["grpo", "--model", "qwen2.5-vl-3b", "--cluster", "study-12h"]


@pytest.fixture
def dry(tmp_path, monkeypatch, capsys):
    """Run `slurm/launch.py ARGS --dry-run`; (exit code, job script, resolved config, stderr)."""
    # a SLURM executor renders its script without srun on PATH (tests/test_sbatch_preview.py)
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    monkeypatch.setattr(distributed, "cached_hub_path", lambda hub_id: None)

    def run(*args: str, cached: str | None = None):
        if cached:
            monkeypatch.setattr(distributed, "cached_hub_path", lambda hub_id: Path(cached))
        code = main([*args, "--dry-run", "--output-dir", str(tmp_path / "run")])
        out, err = capsys.readouterr()
        script, _, resolved = out.partition("# ---- resolved configuration")
        config = yaml.safe_load(resolved.split("\n", 1)[1]) if resolved else None
        assert not (tmp_path / "run").exists()  # a dry run writes nothing
        return code, script, config, err

    return run


def sbatch(script: str, option: str) -> str | None:
    match = re.search(rf"^#SBATCH --{option}=(.*)$", script, re.M)
    return match.group(1) if match else None


def srun_line(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("srun "))


# --------------------------------------------------------------------------- resources


@pytest.mark.parametrize(
    ("flags", "tasks", "nodes", "gpus", "mem", "cpus_per_task"),
    [
        # recipe (3b_grpo): 8 CPUs and 64 GB per GPU; one training process per GPU
        (["--gpus", "2"], 2, "1", 2, "128GB", 8),
        (["--gpus", "4"], 4, "1", 4, "256GB", 8),
        (["--nodes", "2"], 1, "2", 1, "64GB", 8),
        # server mode: the last GPU serves vLLM, one process fewer; memory and CPUs still count
        # every GPU of the node (the server uses them too), split among the training tasks
        ([*SERVER, "--gpus", "2"], 1, "1", 2, "128GB", 16),
        ([*SERVER, "--gpus", "4"], 3, "1", 4, "256GB", 10),
        ([*SERVER, "--gpus", "4", "--nodes", "2"], 3, "2", 4, "256GB", 10),
    ],
)
def test_tasks_memory_and_cpus_follow_the_gpus(dry, flags, tasks, nodes, gpus, mem, cpus_per_task):
    code, script, config, err = dry(*GRPO_3B, *flags)
    assert code == 0, err
    assert sbatch(script, "ntasks-per-node") == str(tasks)
    assert sbatch(script, "nodes") == nodes
    assert sbatch(script, "gres") == f"gpu:a100:{gpus}"
    assert sbatch(script, "mem") == mem
    assert sbatch(script, "cpus-per-task") == str(cpus_per_task)
    # srun is told the same (SLURM 22.05-23.02 do not pass sbatch's --cpus-per-task to srun)
    assert f"--cpus-per-task {cpus_per_task}" in srun_line(script)
    assert config["resources"]["gpus"] == gpus and config["resources"]["nodes"] == int(nodes)


def test_server_mode_needs_a_gpu_to_train_on(dry):
    code, _, _, err = dry(*GRPO_3B, *SERVER, "--nodes", "2")  # the recipe's 1 GPU per node
    assert code == 2 and "needs more than 1 GPU(s) per node" in err


def test_the_profile_memory_scales_when_the_recipe_gives_none(dry):
    code, script, _, err = dry(*GRPO_3B, "--gpus", "4", "--set", "resources.mem_gb=null",
                               "--set", "resources.cpus_per_gpu=null")  # fmt: skip
    assert code == 0, err
    # study-12h: 64 GB and 8 CPUs per GPU
    assert sbatch(script, "mem") == "256GB" and sbatch(script, "cpus-per-task") == "8"


# --------------------------------------------------------------------------- CPU processes


@pytest.mark.parametrize(
    "flags",
    [["--processes-per-node", "2"], ["--set", "resources.processes_per_node=2"]],
)
def test_a_cpu_job_with_two_processes(dry, flags):
    code, script, config, err = dry(
        "grpo", "--model", "tiny-qwen2.5-vl", "--cluster", "local-slurm", "--time", "00:10:00",
        *flags,
    )  # fmt: skip
    assert code == 0, err
    assert sbatch(script, "ntasks-per-node") == "2"
    assert sbatch(script, "cpus-per-task") == "1"  # local-slurm: one CPU per process
    assert sbatch(script, "mem") == "8GB"  # the tiny recipe's 4 GB per process, twice
    assert sbatch(script, "gres") is None and sbatch(script, "gpus-per-node") is None
    assert "--cpus-per-task 1" in srun_line(script)
    assert config["resources"]["processes_per_node"] == 2 and config["resources"]["gpus"] == 0


def test_two_cpu_processes_become_a_torch_distributed_group(monkeypatch):
    """What each of the two tasks does first (launch/task.py Task.__call__)."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", SERVER_GPUS_ENV):  # fmt: skip
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)
    slurm = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
             "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
             "SLURM_STEP_NODELIST": "node1", "SLURM_JOB_NODELIST": "node1",
             "SUBMITIT_EXECUTOR": "slurm", "SLURM_NTASKS_PER_NODE": "2"}  # fmt: skip
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    env = export_torch_distributed()
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "1")
    assert env["MASTER_ADDR"] == "node1"


def test_processes_per_node_with_gpus_must_match_them(dry):
    code, _, _, err = dry(*GRPO_3B, "--gpus", "2", "--processes-per-node", "1")
    assert code == 2 and "one process per training GPU (2)" in err


# --------------------------------------------------------------------------- batch rule


def test_grpo_batch_rule_is_checked_at_submission(dry):
    # the study's batch: 4 per device x 3 processes x 1 accumulation step = 12 completions, not
    # whole groups of 8
    study = [*GRPO_3B, "--recipe", "study"]
    code, _, _, err = dry(*study, "--gpus", "3", "--set", "train.num_generations=8")
    assert code == 2
    for key in ("train.per_device_train_batch_size (4)", "3 training processes",
                "train.gradient_accumulation_steps (1)", "train.num_generations (8)"):  # fmt: skip
        assert key in err, err
    assert "train.gradient_accumulation_steps=2" in err and "per_device_train_batch_size=8" in err
    for fix in ("train.gradient_accumulation_steps=2", "train.per_device_train_batch_size=8"):
        code, _, _, err = dry(*study, "--gpus", "3", "--set", "train.num_generations=8",
                              "--set", fix)  # fmt: skip
        assert code == 0, err
    # the vLLM server's GPU does not train: 4 GPUs are 3 processes
    code, _, _, err = dry(*study, *SERVER, "--gpus", "4", "--set", "train.num_generations=8")
    assert code == 2 and "3 training processes" in err


def _refusals(tmp_path, train: dict, trl_keys: dict) -> tuple[str | None, str | None]:
    """Our check's and GRPOConfig's refusal (None: accepted) of one process's GRPO batch."""
    from trl import GRPOConfig

    from vqa_r1.config import RunConfig
    from vqa_r1.errors import UserError

    config = RunConfig(verb="grpo")
    for key, value in train.items():
        setattr(config.train, key, value)
    config.train.trl = dict(trl_keys)
    try:
        check_grpo_batch(config, 1)
        ours = None
    except UserError as err:
        ours = str(err)
    try:
        GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **train, **trl_keys)
        theirs = None
    except ValueError as err:
        theirs = str(err)
    return ours, theirs


@pytest.mark.parametrize(
    ("per_device", "accumulation", "generations"),
    [(4, 1, 4), (4, 1, 8), (2, 4, 8), (3, 1, 2), (3, 2, 4), (6, 1, 4)],
)
def test_the_batch_rule_is_trls(tmp_path, per_device, accumulation, generations):
    """One process (the test's): our check refuses exactly what GRPOConfig refuses."""
    train = dict(
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_generations=generations,
    )
    ours, theirs = _refusals(tmp_path, train, {})
    assert (ours is None) == (theirs is None), (ours, theirs)


@pytest.mark.parametrize(
    "trl_keys",
    [
        {"steps_per_generation": 2},  # 4 x 2 = 8: whole groups of 8, GA 1 alone would not be
        {"steps_per_generation": 3},  # 12: not whole groups of 8
        {"generation_batch_size": 16},
        {"generation_batch_size": 12},
    ],
)
def test_the_batch_rule_with_trls_own_batch_keys_is_trls(tmp_path, trl_keys):
    """TRL's keys set through the train section (trl_options.py) change the generation batch:
    our check still refuses exactly what GRPOConfig refuses."""
    train = dict(per_device_train_batch_size=4, num_generations=8)
    ours, theirs = _refusals(tmp_path, train, trl_keys)
    assert (ours is None) == (theirs is None), (ours, theirs)


# --------------------------------------------------------------------------- vLLM server


def test_server_script_with_a_cached_model(dry):
    code, script, config, err = dry(
        *GRPO_3B, *SERVER, "--gpus", "4",
        "--set", "train.vllm_gpu_memory_utilization=0.85",
        "--set", "train.vllm_max_model_length=8192",
        cached=CACHED,
    )  # fmt: skip
    assert code == 0, err
    server = next(line for line in script.splitlines() if " vllm serve " in line)
    # the cached folder, offline, on the GPU(s) this node's batch step calls its last: vLLM's own
    # server with TRL's settings (TRL 1.16 deprecates `trl vllm-serve`, which now only runs it)
    assert server.startswith(
        'CUDA_VISIBLE_DEVICES="$VQA_R1_SERVER_CUDA" HF_HUB_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 '
        f"vllm serve {CACHED} "
    ), server
    assert "--gpu-memory-utilization 0.85 --tensor-parallel-size 1 --max-model-len 8192" in server
    assert server.split(" > ")[0].endswith(
        '--enable-scale-out --weight-transfer-config \'{"backend": "nccl"}\' '
        "--logprobs-mode processed_logprobs --max-logprobs -1"
    ), server
    assert 'VQA_R1_SERVER_CUDA="$(IFS=,; echo "${VQA_R1_GPUS[*]: -1}")"' in script
    assert 'export VQA_R1_VLLM_GPUS="$(IFS=,; echo "${VQA_R1_GPU_IDS[*]: -1}")"' in script
    # ports: the job's, moved past those in use; weight sync in its own range
    assert (
        "export VQA_R1_VLLM_PORT=$(vqa_r1_free_port $((20000 + ${SLURM_JOB_ID:-0} % 10000)))"
        in script
    )
    assert (
        "export VQA_R1_VLLM_GROUP_PORT=$(vqa_r1_free_port $((30000 + ${SLURM_JOB_ID:-0} % 10000)))"
        in script
    )
    assert 'until curl -sf "http://127.0.0.1:$VQA_R1_VLLM_PORT/health"' in script
    assert "if ! kill -0 $VQA_R1_VLLM_PID" in script  # a dead server fails the job at once
    assert "export CUDA_VISIBLE_DEVICES" not in script  # srun steps would not see it
    t = config["train"]
    assert (t["vllm_gpu_memory_utilization"], t["vllm_max_model_length"]) == (0.85, 8192)
    assert t["vllm_tensor_parallel_size"] == 1
    # the script's shell is valid, and the server lines come before the training step
    subprocess.run(["bash", "-n", "-c", script], check=True)
    assert script.index(" vllm serve ") < script.index("\nsrun ")


def test_server_script_of_an_uncached_model_names_the_hub_id(dry):
    code, script, _, err = dry(*GRPO_3B, *SERVER, "--gpus", "2")
    assert code == 0, err
    server = next(line for line in script.splitlines() if " vllm serve " in line)
    assert "vllm serve Qwen/Qwen2.5-VL-3B-Instruct " in server and "HF_HUB_OFFLINE" not in server
    assert "--gpu-memory-utilization 0.9 " in server  # the server's own GPU: TRL's server default
    assert "--max-model-len 4096" in server  # the recipe's


def test_server_tensor_parallel_takes_more_gpus(dry):
    code, script, _, err = dry(*GRPO_3B, *SERVER, "--gpus", "4",
                               "--set", "train.vllm_tensor_parallel_size=2")  # fmt: skip
    assert code == 0, err
    assert sbatch(script, "ntasks-per-node") == "2"
    assert '"${VQA_R1_GPUS[*]: -2}"' in script and "--tensor-parallel-size 2" in script


def test_colocate_checks_the_tensor_parallel_split_and_runs_with_image_prompts(dry):
    """Colocate's placement is checked before queueing; with a valid split it is accepted for
    image prompts (train/vllm_prompts.py hands vLLM unexpanded ids, tests/test_vllm_prompts.py
    proves the counts) and the job gets no vLLM server."""
    code, script, config, err = dry(*GRPO_3B, "--gpus", "3", "--set", "train.use_vllm=true",
                                    "--set", "train.vllm_tensor_parallel_size=2")  # fmt: skip
    assert code == 2 and "must divide the 3 training processes" in err
    code, script, config, err = dry(*GRPO_3B, "--gpus", "2", "--set", "train.use_vllm=true",
                                    "--set", "train.vllm_gpu_memory_utilization=0.25")  # fmt: skip
    assert code == 0, err
    assert config["train"]["vllm_mode"] == "colocate"
    assert "vllm serve" not in script and sbatch(script, "ntasks-per-node") == "2"


@pytest.mark.parametrize("model", ["smolvlm-2.2b", "internvl3-2b"])
def test_server_mode_other_families(dry, model):
    """Server mode: SmolVLM's image splitting is refused in one line naming the key (TRL takes one
    run of image tokens per image); SmolVLM without it and InternVL's tiles are accepted, the
    server handed the recipe's image settings."""
    code, script, _, err = dry("grpo", "--model", model, "--cluster", "study-12h", "--gpus",
                               "2", *SERVER)  # fmt: skip
    if model.startswith("smolvlm"):
        assert code == 2 and script == "", err
        (line,) = [x for x in err.splitlines() if x.startswith("error:")]
        assert "image splitting" in line and "model.image_splitting=false" in line
        code, script, _, err = dry("grpo", "--model", model, "--cluster", "study-12h", "--gpus",
                                   "2", *SERVER, "--set", "model.image_splitting=false")  # fmt: skip
    assert code == 0, err
    assert "vllm serve" in script


def _server_setup(tmp_path: Path, monkeypatch) -> str:
    """The job script's set-up lines of a 4-GPU server-mode job."""
    from vqa_r1.launch.distributed import job_setup_lines
    from vqa_r1.recipes import load_config

    monkeypatch.setattr(distributed, "cached_hub_path", lambda hub_id: Path(CACHED))
    config = load_config("grpo", "qwen2.5-vl-3b", None,
                         ["train.use_vllm=true", "train.vllm_mode=server"])  # fmt: skip
    config.output_dir = str(tmp_path / "run")
    return "\n".join(["set -u", *job_setup_lines(config, 4, 1)])


def test_server_gpus_are_the_last_of_the_node_by_real_id(tmp_path, monkeypatch):
    script = _server_setup(tmp_path, monkeypatch)
    gpu_part = script.split("vqa_r1_free_port() {")[0]
    probe = gpu_part + '\necho "server=$VQA_R1_SERVER_CUDA ids=$VQA_R1_VLLM_GPUS"'
    # cgroups: the batch step numbers its GPUs 0..3, SLURM_JOB_GPUS has the real ids
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_GPUS": "4,5,6,7"}
    out = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "server=3 ids=7", out.stderr
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "4,5,6,7", "SLURM_JOB_GPUS": "4,5,6,7"}
    out = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "server=7 ids=7", out.stderr
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    out = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 1 and "would leave none to train" in out.stderr


def test_a_server_that_dies_fails_the_job_at_once(tmp_path, monkeypatch):
    script = _server_setup(tmp_path, monkeypatch) + "\necho TRAINING-STARTED"
    (tmp_path / "run").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\necho "$@"\necho "torch.OutOfMemoryError: CUDA out of memory"\n'
                    "exit 1\n")  # fmt: skip
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "CUDA_VISIBLE_DEVICES": "0,1,2,3"}  # fmt: skip
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 1 and "TRAINING-STARTED" not in out.stdout
    assert "exited during start-up" in out.stderr and "CUDA out of memory" in out.stderr
    log = (tmp_path / "run" / "vllm-server-4242.log").read_text()
    assert f"serve {CACHED}" in log  # the log is in the run directory


def test_free_port_skips_a_port_in_use():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        script = "\n".join([*FREE_PORT_FUNCTION, f"vqa_r1_free_port {port}"])
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert int(out.stdout) > port
    assert free_port_expression(30000) == (
        "$(vqa_r1_free_port $((30000 + ${SLURM_JOB_ID:-0} % 10000)))"
    )


# --------------------------------------------------------------------------- training GPUs


@pytest.mark.parametrize(
    ("server", "step_gpus", "visible", "expected"),
    [
        ("5", "4,5", "0,1", "0"),  # cgroups renumber the step's GPUs; the server holds real id 5
        ("5", "4,5", "4,5", "4"),  # no cgroups: CUDA_VISIBLE_DEVICES has the real ids
        ("6,7", "4,5,6,7", "0,1,2,3", "0,1"),  # a tensor-parallel server on two GPUs
        ("5", "0,1", "0,1", None),  # another node: the server's GPU is not in this step
    ],
)
def test_training_processes_leave_the_server_gpu_alone(server, step_gpus, visible, expected):
    env = {SERVER_GPUS_ENV: server, "SLURM_STEP_GPUS": step_gpus, "CUDA_VISIBLE_DEVICES": visible}
    assert restrict_training_gpus(env) == expected
    assert env["CUDA_VISIBLE_DEVICES"] == (expected or visible)
    assert restrict_training_gpus(env) is None  # a second call changes nothing
    assert env["CUDA_VISIBLE_DEVICES"] == (expected or visible)


def test_no_server_no_change():
    env = {"SLURM_STEP_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert restrict_training_gpus(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_the_task_restricts_its_gpus_before_torch_distributed(monkeypatch):
    """export_torch_distributed is what Task.__call__ runs first: a single training process of a
    --gpus 2 server job sees one GPU, so transformers has no second GPU to DataParallel over."""
    monkeypatch.setenv(SERVER_GPUS_ENV, "3")
    monkeypatch.setenv("SLURM_STEP_GPUS", "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("VQA_R1_TRAINING_GPUS", "unset")
    monkeypatch.delenv("VQA_R1_TRAINING_GPUS")
    assert export_torch_distributed() == {}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


# --------------------------------------------------------------------------- vLLM settings


def test_vllm_settings_reach_grpo_config(monkeypatch):
    from trl import GRPOConfig

    from vqa_r1.config import VLLM_GROUP_PORT_ENV, VLLM_URL_ENV, TrainConfig
    from vqa_r1.train.runner import _grpo_vllm_args

    monkeypatch.setenv(VLLM_URL_ENV, "http://node1:24242")
    monkeypatch.setenv(VLLM_GROUP_PORT_ENV, "34242")
    train = TrainConfig(use_vllm=True, vllm_mode="server", vllm_gpu_memory_utilization=0.5,
                        vllm_max_model_length=4096, vllm_tensor_parallel_size=2)  # fmt: skip
    args = _grpo_vllm_args(train)
    assert args["vllm_group_port"] == 34242 and args["vllm_server_base_url"].endswith(":24242")
    assert (args["vllm_gpu_memory_utilization"], args["vllm_max_model_length"]) == (0.5, 4096)
    assert args["vllm_tensor_parallel_size"] == 2
    assert set(args) <= {f.name for f in dataclasses.fields(GRPOConfig)}


def test_vllm_version_is_checked_against_trls_range(dry, monkeypatch):
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(supported_vllm_range()) == SpecifierSet(">=0.22.0,<=0.31.0")
    real_version = metadata.version

    def version(name, installed):
        if name == "vllm":
            if installed is None:
                raise metadata.PackageNotFoundError(name)
            return installed
        return real_version(name)

    # colocate is where TRL's whole range applies
    colocate = [*GRPO_3B, "--gpus", "2", "--set", "train.use_vllm=true"]
    for installed, ok in (("0.24.0+cu129", True), ("0.31.0", True), ("0.32.1", False)):
        monkeypatch.setattr(metadata, "version", lambda n, v=installed: version(n, v))
        code, _, _, err = dry(*colocate)
        if ok:  # accepted; a vLLM other than the one the image-prompt test ran is named
            assert code == 0, err
            assert ("checked against vLLM 0.31's own processing only" in err) == (
                not installed.startswith("0.31")
            ), err
        else:
            assert code == 2 and "vllm 0.32.1 is installed, but TRL supports vllm" in err
    monkeypatch.setattr(metadata, "version", lambda n: version(n, None))
    code, _, _, err = dry(*GRPO_3B, "--gpus", "2", *SERVER)
    assert code == 0 and "vllm is not installed here" in err and "0.31.0" in err
    code, _, _, err = dry(*GRPO_3B, "--gpus", "0", "--set", "train.use_vllm=true")
    assert code == 2 and "needs GPUs" in err


def test_server_mode_with_images_needs_the_vllm_that_serves_the_render_endpoint(dry, monkeypatch):
    """TRL posts image prompts to /v1/chat/completions/render, which TRL's server settings enable
    only from vLLM 0.30.0: server mode accepts less of TRL's range than colocate does."""
    from importlib import metadata

    from trl.scripts import vllm_serve

    assert 'is_vllm_available(min_version="0.30.0")' in inspect.getsource(vllm_serve.build_command)
    assert distributed.SERVER_IMAGES_MIN_VLLM == "0.30.0"
    real_version = metadata.version

    def version(name, installed):
        if name == "vllm":
            if installed is None:
                raise metadata.PackageNotFoundError(name)
            return installed
        return real_version(name)

    server = [*GRPO_3B, "--gpus", "2", *SERVER]
    colocate = [*GRPO_3B, "--gpus", "2", "--set", "train.use_vllm=true"]
    for installed, ok in (("0.29.1", False), ("0.30.0", True), ("0.31.0+cu130", True)):
        monkeypatch.setattr(metadata, "version", lambda n, v=installed: version(n, v))
        code, _, _, err = dry(*server)
        assert (code == 0) == ok, err
        if not ok:
            assert "train.vllm_mode=server needs vllm>=0.30.0,<=0.31.0" in err
            assert "/v1/chat/completions/render" in err and "vllm_mode=colocate" in err
            # the same vLLM is in colocate's range: accepted there
            assert dry(*colocate)[0] == 0
    monkeypatch.setattr(metadata, "version", lambda n: version(n, None))
    code, _, _, err = dry(*server)
    assert code == 0 and "vllm is not installed here" in err and ">=0.30.0,<=0.31.0" in err
    # a TRL whose range ends below 0.30 cannot serve images at all: said before queueing
    monkeypatch.setattr(distributed, "supported_vllm_range", lambda: ">=0.22.0,<=0.29.0")
    code, _, _, err = dry(*server)
    assert code == 2 and "supports vllm>=0.22.0,<=0.29.0 only" in err


# --------------------------------------------------------------------------- recipes


def test_the_7b_trains_on_one_gpu_and_zero3_stays_a_choice(dry):
    """Issue 33, item 2: 7B + LoRA fits one 80 GB GPU by the memory plan (it ran ZeRO-3 on two);
    `--gpus 2 --set train.deepspeed=zero3` still shards it."""
    code, script, config, err = dry("grpo", "--model", "qwen2.5-vl-7b", "--cluster", "study-12h")
    assert code == 0, err
    assert config["train"]["deepspeed"] is None and config["resources"]["gpus"] == 1
    assert sbatch(script, "gres") == "gpu:a100:1" and "# memory plan" in script
    code, script, config, err = dry("grpo", "--model", "qwen2.5-vl-7b", "--cluster", "study-12h",
                                    "--gpus", "2", "--set", "train.deepspeed=zero3")  # fmt: skip
    assert code == 0, err
    assert config["train"]["deepspeed"] == "zero3" and sbatch(script, "ntasks-per-node") == "2"
    recipe = Path(distributed.__file__).parents[1] / "recipes" / "qwen2_5_vl" / "gpu.yaml"
    assert "ZeRO-3 stays a choice" in recipe.read_text()


def test_the_gpu_defaults_use_groups_of_8_and_the_study_keeps_its_4(dry):
    """Issue 33, item 2: 8 completions per prompt and 4 prompts per step per GPU by default;
    `--recipe study` restores the published study's group of 4 and batch of 4."""
    code, script, config, err = dry(*GRPO_3B)
    assert code == 0, err
    t = config["train"]
    assert (t["num_generations"], t["per_device_train_batch_size"]) == (8, 16)
    assert t["gradient_accumulation_steps"] == 2  # one generation batch: 32 completions, 4 prompts
    code, script, config, err = dry(*GRPO_3B, "--recipe", "study")
    assert code == 0, err
    t = config["train"]
    assert (t["num_generations"], t["per_device_train_batch_size"]) == (4, 4)
    assert (t["gradient_accumulation_steps"], t["learning_rate"], t["beta"]) == (1, 1e-5, 0.04)

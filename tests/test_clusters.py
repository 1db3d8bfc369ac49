"""Cluster profiles: loading, validation messages, SLURM time strings and submitit parameters."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.launch.clusters import (
    CLUSTERS_DIR_ENV,
    ClusterProfile,
    format_slurm_time,
    list_clusters,
    load_cluster,
    parse_slurm_time,
    to_submitit_params,
)


def write_profile(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def profiles_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CLUSTERS_DIR_ENV, str(tmp_path))
    return tmp_path


# ------------------------------------------------------------------------- shipped profiles


def test_shipped_profiles_load() -> None:
    names = list_clusters()
    assert {"study-12h", "local-slurm", "generic-gpu"} <= set(names)
    for name in names:
        assert load_cluster(name).name == name


def test_study_profile_has_the_study_cluster_shape() -> None:
    study = load_cluster("study-12h")
    assert study.max_time == 12 * 60
    assert study.account and study.qos and study.gpu_type
    assert any(line.startswith("module load") for line in study.setup)
    # no CUDA module: the wheels carry their own CUDA, and an old module can shadow it (issue 33)
    assert not any("cuda" in line.lower() for line in study.setup)
    assert study.env == {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert load_cluster("generic-gpu").env == study.env


def test_local_profile_fits_minute_long_limits() -> None:
    local = load_cluster("local-slurm")
    assert local.partition == "debug"
    assert local.gpus_per_node == 0
    assert local.max_time is None
    assert local.signal_delay_s < 30


# ------------------------------------------------------------------------- time strings


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("90", 90),
        ("5:30", 6),  # MM:SS, seconds round up like SLURM
        ("0:30", 1),
        ("00:02:00", 2),
        ("12:00:00", 720),
        ("1-12", 36 * 60),
        ("1-0:30", 24 * 60 + 30),
        ("2-00:00:00", 2 * 24 * 60),
        ("0-00:00:01", 1),
        (" 10 ", 10),
    ],
)
def test_parse_slurm_time(text: str, minutes: int) -> None:
    assert parse_slurm_time(text) == minutes


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1h", "1.5", "-5", "1-", "1:2:3:4", "1:60", "1:00:60", "1-24", "0", "00:00:00"],
)
def test_parse_slurm_time_rejects(text: str) -> None:
    with pytest.raises(UserError, match="time"):
        parse_slurm_time(text)


def test_parse_slurm_time_error_lists_the_formats() -> None:
    with pytest.raises(UserError, match="D-HH:MM:SS"):
        parse_slurm_time("twelve hours")


def test_format_slurm_time() -> None:
    assert format_slurm_time(2) == "00:02:00"
    assert format_slurm_time(36 * 60 + 5) == "1-12:05:00"


# ------------------------------------------------------------------------- loading


def test_unquoted_clock_time_is_not_read_as_base_60(profiles_dir: Path) -> None:
    # Plain YAML 1.1 turns 12:00:00 into 43200; that must not become a 30-day limit.
    write_profile(profiles_dir, "c", "max_time: 12:00:00\nsignal_delay_s: 60\n")
    assert load_cluster("c").max_time == 720


def test_defaults_and_unlimited(profiles_dir: Path) -> None:
    write_profile(profiles_dir, "bare", "max_time: UNLIMITED\n")
    profile = load_cluster("bare")
    assert profile == ClusterProfile(name="bare", max_time=None)
    assert profile.source == profiles_dir / "bare.yaml"


def test_load_by_path(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "mine", "partition: a100\nmax_time: '2:00:00'\n")
    assert load_cluster(path).partition == "a100"
    assert load_cluster(str(path)).max_time == 120


def test_unknown_cluster_names_the_known_ones(profiles_dir: Path) -> None:
    write_profile(profiles_dir, "alpha", "")
    with pytest.raises(UserError, match=r"unknown cluster 'beta'.*alpha"):
        load_cluster("beta")


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_cluster(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        ("gpus_per_node: four\n", "gpus_per_node", "whole number"),
        ("gpus_per_node: -1\n", "gpus_per_node", ">= 0"),
        ("cpus_per_gpu: true\n", "cpus_per_gpu", "whole number"),
        ("mem_per_gpu_gb: 0\n", "mem_per_gpu_gb", "positive"),
        ("max_time: 12 hours\n", "max_time", "not a SLURM time"),
        ("max_time: 1:75\n", "max_time", "seconds must be below 60"),
        ("partition: ''\n", "partition", "non-empty string"),
        ("setup: module load cuda\n", "setup", "list of shell lines"),
        ("sbatch_extra: [a, b]\n", "sbatch_extra", "mapping"),
        ("sbatch_extra: {--constraint: x}\n", "sbatch_extra", "leading dashes"),
        ("name: other\n", "name", "differs from the file name"),
        ("env: [NCCL_DEBUG]\n", "env", "mapping of variable name to value"),
        ("env: {1BAD: x}\n", "env", "not a shell variable name"),
        ("env: {NCCL_DEBUG: [a]}\n", "env", "expected a single value"),
        ("max_time: '00:05:00'\nsignal_delay_s: 300\n", "signal_delay_s", "not shorter"),
    ],
)
def test_errors_name_file_and_field(profiles_dir: Path, text: str, field: str, hint: str) -> None:
    path = write_profile(profiles_dir, "bad", text)
    with pytest.raises(UserError) as caught:
        load_cluster("bad")
    message = str(caught.value)
    assert f"{path}: {field}" in message
    assert hint in message


def test_unknown_field_is_named(profiles_dir: Path) -> None:
    path = write_profile(profiles_dir, "typo", "gpus_per_nodes: 2\n")
    with pytest.raises(UserError, match=rf"{path}: unknown key 'gpus_per_nodes'; valid keys"):
        load_cluster("typo")


@pytest.mark.parametrize("text", ["- a\n- b\n", "partition: [unclosed\n"])
def test_not_a_mapping_or_not_yaml(profiles_dir: Path, text: str) -> None:
    path = write_profile(profiles_dir, "broken", text)
    with pytest.raises(UserError, match=str(path)):
        load_cluster("broken")


# ------------------------------------------------------------------------- submitit parameters

GPU = ClusterProfile(
    name="gpu",
    partition="gpu",
    account="proj",
    qos="high",
    gpu_type="a100",
    gpus_per_node=4,
    cpus_per_gpu=8,
    mem_per_gpu_gb=64,
    max_time=720,
    signal_delay_s=300,
    setup=("module load cuda",),
    sbatch_extra={"constraint": "a100_80gb"},
)


def test_params_from_a_gpu_profile() -> None:
    params = to_submitit_params(GPU, gpus=2, nodes=2, time_minutes=60)
    assert params == {
        "nodes": 2,
        "timeout_min": 60,
        "slurm_signal_delay_s": 300,
        "slurm_partition": "gpu",
        "slurm_account": "proj",
        "slurm_qos": "high",
        "slurm_gres": "gpu:a100:2",
        "cpus_per_task": 16,
        "mem_gb": 128.0,
        "slurm_setup": ["module load cuda"],
        "slurm_additional_parameters": {"constraint": "a100_80gb"},
    }


def test_the_profiles_variables_are_exported_after_its_setup_lines() -> None:
    env = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^lo,docker0"}
    params = to_submitit_params(replace(GPU, env=env), gpus=1)
    assert params["slurm_setup"] == [
        "module load cuda", "export NCCL_DEBUG=WARN", "export NCCL_SOCKET_IFNAME='^lo,docker0'"
    ]  # fmt: skip


def test_more_gpus_than_a_node_has_are_refused_with_the_nodes_to_ask_for() -> None:
    """Issue 33, item 5: sbatch refused `--gpus 8` on 4-GPU nodes after the queue's checks."""
    assert to_submitit_params(GPU, gpus=4, nodes=2)["slurm_gres"] == "gpu:a100:4"
    with pytest.raises(UserError, match=r"--gpus 8: a node of cluster gpu has 4 GPUs .*"
                       r"for 8 GPUs use --nodes 2 --gpus 4$"):  # fmt: skip
        to_submitit_params(GPU, gpus=8)
    with pytest.raises(UserError, match=r"for 12 GPUs use --nodes 3 --gpus 4$"):
        to_submitit_params(GPU, gpus=6, nodes=2)
    with pytest.raises(UserError, match=r"for 6 GPUs use --nodes 2 --gpus 3$"):
        to_submitit_params(GPU, gpus=6)
    with pytest.raises(UserError, match=r"for 5 GPUs use --nodes 2 --gpus 3 \(6\)$"):
        to_submitit_params(GPU, gpus=5)
    assert "gpus_per_node" in to_submitit_params(
        replace(GPU, gpus_per_node=0, gpu_type=None), gpus=8
    )


def test_params_default_to_the_profile() -> None:
    params = to_submitit_params(GPU)
    assert params["timeout_min"] == 720
    assert params["slurm_gres"] == "gpu:a100:4"
    assert params["cpus_per_task"] == 32


def test_untyped_gpus_use_gpus_per_node() -> None:
    params = to_submitit_params(replace(GPU, gpu_type=None), gpus=1)
    assert params["gpus_per_node"] == 1
    assert "slurm_gres" not in params


def test_no_gpu_uses_the_cpu_defaults_and_explicit_overrides_win() -> None:
    cpu = replace(GPU, cpus_per_task=3, mem_gb=12)
    params = to_submitit_params(cpu, gpus=0)
    assert "slurm_gres" not in params and "gpus_per_node" not in params
    assert (params["cpus_per_task"], params["mem_gb"]) == (3, 12)
    params = to_submitit_params(GPU, gpus=1, cpus=5, mem=7.5)
    assert (params["cpus_per_task"], params["mem_gb"]) == (5, 7.5)


def test_time_above_the_cluster_limit_is_refused() -> None:
    with pytest.raises(UserError, match=r"exceeds the limit .*12:00:00.*requeues"):
        to_submitit_params(GPU, time_minutes=721)


def test_time_must_outlast_the_warning() -> None:
    with pytest.raises(UserError, match="warning signal"):
        to_submitit_params(GPU, time_minutes=5)


def test_unlimited_cluster_needs_an_explicit_time() -> None:
    with pytest.raises(UserError, match="--time"):
        to_submitit_params(load_cluster("local-slurm"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"gpus": -1}, "gpus"), ({"nodes": 0}, "nodes"), ({"cpus": 0}, "cpus"), ({"mem": 0}, "mem")],
)
def test_bad_resource_overrides(kwargs: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        to_submitit_params(GPU, time_minutes=60, **kwargs)


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SLURM executor needs srun")
def test_submitit_accepts_the_params_and_writes_the_sbatch_options(tmp_path: Path) -> None:
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    executor.update_parameters(**to_submitit_params(GPU, gpus=2, time_minutes=90))
    script = executor._executor._make_submission_file_text("true", "uid")
    for option in [
        "#SBATCH --gres=gpu:a100:2",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=90",
        "#SBATCH --signal=USR2@300",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --mem=128GB",
        "#SBATCH --constraint=a100_80gb",
        "module load cuda",
    ]:
        assert option in script

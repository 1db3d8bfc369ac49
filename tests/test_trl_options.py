"""Every TRL option as a train key (issue 19, part 1): typed by TRL, checked on the login node,
refused where the suite owns it, listed by `vqa-r1 config`, and passed to TRL by the run."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_in_process

from vqa_r1 import trl_options
from vqa_r1.config import read_config, run_settings, save_config
from vqa_r1.errors import UserError
from vqa_r1.recipes import load_config

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]
VQA = [str(Path(sys.executable).parent / "vqa-r1")]
MODEL = ["--model", "tiny-qwen2.5-vl"]


def _run(cmd, timeout=300, process=False):
    """A command as typed: `slurm/launch.py ...` or `vqa-r1 ...`, in this process
    (tests/cli_helpers.py) unless ``process`` (the entry point itself, once)."""
    if process:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    from vqa_r1.cli import main as vqa_main
    from vqa_r1.cli.launch import main as launch_main

    if cmd[: len(LAUNCH)] == LAUNCH:
        return run_in_process(launch_main, cmd[len(LAUNCH) :])
    assert cmd[: len(VQA)] == VQA, cmd
    return run_in_process(vqa_main, cmd[len(VQA) :])


def _error(out) -> str:
    """The one error line of a refused command (exit status 2)."""
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def _resolved(stdout: str) -> dict:
    return yaml.safe_load(stdout.split("# ---- resolved configuration")[1].split("\n", 1)[1])


# ------------------------------------------------------------------ the command line, as typed


def test_dry_run_prints_trl_keys_flat_in_the_resolved_config(tmp_path):
    out = _run(
        [
            *LAUNCH,
            "grpo",
            *MODEL,
            "--set",
            "train.epsilon_high=0.28",
            "--set",
            "train.num_iterations=2",
            "--set",
            "train.importance_sampling_level=sequence",
            "--dry-run",
            "--output-dir",
            str(tmp_path / "run"),
        ],  # fmt: skip
        process=True,
    )
    assert out.returncode == 0, out.stderr
    train = _resolved(out.stdout)["train"]
    assert train["epsilon_high"] == 0.28 and train["num_iterations"] == 2
    assert train["importance_sampling_level"] == "sequence"
    assert "trl" not in train and train["learning_rate"]  # flat beside our keys
    assert not (tmp_path / "run").exists()


def test_a_misspelt_key_names_itself_and_the_closest_name(tmp_path):
    out = _run([*LAUNCH, "grpo", *MODEL, "--set", "train.epsilon_hgh=0.28", "--dry-run",
                "--output-dir", str(tmp_path / "run")])  # fmt: skip
    line = _error(out)
    assert "train.epsilon_hgh" in line and "did you mean epsilon_high?" in line


@pytest.mark.parametrize("dry", [True, False])
def test_a_value_trl_would_refuse_fails_before_anything_is_queued(tmp_path, dry):
    run_dir = tmp_path / "run"
    extra = ["--dry-run"] if dry else ["--executor", "local"]
    out = _run([*LAUNCH, "grpo", *MODEL, "--set", "train.loss_type=nonsense", *extra,
                "--output-dir", str(run_dir)])  # fmt: skip
    line = _error(out)
    assert "train.loss_type" in line and "dr_grpo" in line and "'nonsense'" in line
    assert not run_dir.exists()  # nothing claimed, written or queued


def test_trl_post_init_checks_run_at_submission(tmp_path):
    """A check only TRL's GRPOConfig.__post_init__ makes, as a one-line error naming the key."""
    out = _run([*LAUNCH, "grpo", *MODEL, "--set", "train.generation_batch_size=8", "--set",
                "train.steps_per_generation=2", "--dry-run", "--output-dir",
                str(tmp_path / "run")])  # fmt: skip
    line = _error(out)
    assert "train.generation_batch_size" in line and "can not be both configured" in line


def test_the_local_verb_checks_trl_before_touching_its_folder(tmp_path):
    run_dir = tmp_path / "run"
    out = _run([*VQA, "grpo", *MODEL, "--set", "train.importance_sampling_level=sentence",
                "--output-dir", str(run_dir)])  # fmt: skip
    assert "train.importance_sampling_level" in _error(out)
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "item, reason",
    [
        ("train.output_dir=/x", "the run directory is --output-dir"),
        ("train.save_strategy=no", "the requeue rely on it"),
        ("train.resume_from_checkpoint=/x", "resume is automatic"),
        ("train.push_to_hub=true", "no network on compute nodes"),
    ],
)
def test_fields_the_suite_owns_are_refused_with_why(item, reason, tmp_path):
    out = _run([*LAUNCH, "grpo", *MODEL, "--set", item, "--dry-run", "--output-dir",
                str(tmp_path / "run")])  # fmt: skip
    line = _error(out)
    assert f"train.{item.split('.')[1].split('=')[0]}" in line and reason in line


def test_a_grpo_field_on_sft_is_refused_with_the_hint(tmp_path):
    out = _run([*LAUNCH, "sft", *MODEL, "--set", "train.epsilon_high=0.28", "--dry-run",
                "--output-dir", str(tmp_path / "run")])  # fmt: skip
    line = _error(out)
    assert "train.epsilon_high is a GRPOConfig field" in line
    assert "grpo:train.epsilon_high=" in line


@pytest.mark.parametrize(
    "item", ["train.dynamic_sampling=true", "train.num_generations=4", "train.beta=0.1"]
)
def test_a_grpo_key_of_ours_on_sft_is_refused_like_trls(item, tmp_path):
    """Issue 30, item 8: our GRPO-only keys typed for an sft run did nothing, silently; now the
    same rule and hint as TRL's GRPOConfig fields, for `vqa-r1 sft` and the launcher, and a
    pipeline still takes them for its grpo step."""
    key = item.split("=")[0]
    argv = [*MODEL, "--set", item, "--output-dir", str(tmp_path / "run")]
    for out in (_run([*LAUNCH, "sft", *argv, "--dry-run"]), _run([*VQA, "sft", *argv])):
        line = _error(out)
        assert f"{key} is a GRPO setting: sft runs do not use it" in line
        assert f"--set grpo:{key}=..." in line
    assert not (tmp_path / "run").exists()
    out = _run([*LAUNCH, "pipeline", *MODEL, "--steps", "sft,grpo", "--set", f"grpo:{item}",
                "--dry-run", "--output-dir", str(tmp_path / "p")])  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_a_pipeline_gives_a_grpo_field_to_its_grpo_step_only(tmp_path):
    out = _run([*LAUNCH, "pipeline", *MODEL, "--steps", "sft,grpo", "--set",
                "grpo:train.epsilon_high=0.28", "--dry-run", "--output-dir",
                str(tmp_path / "p")])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("epsilon_high: 0.28") == 1  # the grpo step's resolved config


def test_an_sft_field_on_sft_is_accepted(tmp_path):
    out = _run([*LAUNCH, "sft", *MODEL, "--set", "train.assistant_only_loss=false", "--dry-run",
                "--output-dir", str(tmp_path / "run")])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert _resolved(out.stdout)["train"]["assistant_only_loss"] is False


def test_config_lists_trl_options_with_trl_help():
    out = _run([*VQA, "config", "--verb", "grpo", "--trl-options"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("train.epsilon_high "))
    assert "[trl]" in lines[at] and "float | none" in lines[at]
    assert "Upper-bound epsilon value for clipping" in lines[at + 1]  # TRL's own help
    assert any(line.strip().startswith("train.learning_rate [ours]") for line in lines)
    refused = next(line for line in lines if line.strip().startswith("train.save_strategy "))
    assert "[refused]" in refused
    sft = _run([*VQA, "config", "--verb", "sft", "--trl-options"]).stdout
    assert "train.packing [trl]" in sft and "train.epsilon_high " not in sft


def test_config_shows_a_set_trl_key_with_its_source():
    out = _run([*VQA, "config", "--verb", "grpo", *MODEL, "--set", "train.epsilon_high=0.28"])
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("train.epsilon_high "))
    assert row.split() == ["train.epsilon_high", "0.28", "--set"]


# ------------------------------------------------------------------ the library


def test_trl_keys_round_trip_through_config_yaml(tmp_path):
    config = load_config(
        "grpo",
        "tiny-qwen2.5-vl",
        overrides=[
            "train.epsilon_high=0.28",
            "train.mask_truncated_completions=true",
            "train.generation_kwargs={top_k: 5}",
            "train.optim=adamw_torch",
        ],  # fmt: skip
    )
    save_config(config, tmp_path / "config.yaml")
    data = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert data["train"]["epsilon_high"] == 0.28 and data["train"]["optim"] == "adamw_torch"
    assert "trl" not in data["train"]
    back = read_config(tmp_path / "config.yaml")
    assert back == config and back.train.trl["generation_kwargs"] == {"top_k": 5}


def test_run_settings_include_the_trl_keys():
    base = load_config("grpo", "tiny-qwen2.5-vl")
    clipped = load_config("grpo", "tiny-qwen2.5-vl", overrides=["train.epsilon_high=0.28"])
    assert run_settings(clipped)["train"]["epsilon_high"] == 0.28
    assert run_settings(base) != run_settings(clipped)  # another run, not a resume of it


@pytest.mark.parametrize(
    "item, value",
    [
        ("num_iterations=2", 2),
        ("epsilon_high=none", None),
        ("mask_truncated_completions=on", True),
        ("optim=adafactor", "adafactor"),  # transformers' OptimizerNames | str
        ("lr_scheduler_kwargs={min_lr: 0.0001}", {"min_lr": 0.0001}),  # dict | str
        ("log_level=info", "info"),  # TrainingArguments' choices metadata
    ],
)
def test_values_are_typed_by_trl_annotations(item, value):
    config = load_config("grpo", "tiny-qwen2.5-vl", overrides=[f"train.{item}"])
    got = config.train.trl[item.split("=")[0]]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "item, message",
    [
        ("num_iterations=two", "train.num_iterations: expected int"),
        ("mask_truncated_completions=maybe", "expected true or false"),
        ("log_level=loud", "train.log_level: expected one of"),
        ("optim=sgdd", "train.optim: expected one of"),
        ("trl=1", "unknown key 'train.trl'"),
    ],
)
def test_ill_typed_trl_values_name_the_key(item, message):
    with pytest.raises(UserError, match=message):
        load_config("grpo", "tiny-qwen2.5-vl", overrides=[f"train.{item}"])


def test_evaluate_accepts_either_class_and_uses_none():
    config = load_config("evaluate", "tiny-qwen2.5-vl", overrides=["train.epsilon_high=0.3"])
    assert config.train.trl == {"epsilon_high": 0.3}
    load_config("evaluate", "tiny-qwen2.5-vl", overrides=["train.packing=true"])


def test_source_read_names_are_trl_fields():
    """The names read from the source without importing TRL are exactly the dataclass fields."""
    for verb in ("grpo", "sft"):
        fields = {f.name for f in dataclasses.fields(trl_options.trl_class(verb)) if f.init}
        assert trl_options.field_names(verb) == fields


def test_documented_choices_are_trl_documented():
    fields = {f.name: f for f in dataclasses.fields(trl_options.trl_class("grpo"))}
    for key, allowed in trl_options.DOCUMENTED_CHOICES["grpo"].items():
        text = fields[key].metadata["help"]
        assert all(f"'{value}'" in text for value in allowed), key
        assert fields[key].type in (str, "str")  # a Literal would be checked on load already


def test_owned_fields_cover_what_the_runner_sets():
    """Every TrainingArguments field runner._common_args sets that is not one of ours is
    refused, so a recipe can never silently fight the suite over it."""
    from vqa_r1.config import RunConfig, TrainConfig
    from vqa_r1.run_dir import RunDir
    from vqa_r1.train.runner import trainer_config_kwargs

    ours = {f.name for f in dataclasses.fields(TrainConfig)}
    for verb in ("sft", "grpo"):
        _, kwargs = trainer_config_kwargs(RunConfig(verb=verb), RunDir(Path("/tmp/x")))
        set_here = set(kwargs) - ours
        assert all(trl_options.refused_reason(k) for k in set_here), set_here - set(
            trl_options.OWNED
        )


def test_the_builder_checks_trl_once_per_train_section(monkeypatch):
    from vqa_r1.launch.build import GraphBuilder
    from vqa_r1.launch.request import JobOptions
    from vqa_r1.train import runner

    calls = []
    monkeypatch.setattr(runner, "check_trl_config", lambda c, p: calls.append((c.verb, p)))
    builder = GraphBuilder(JobOptions(dry_run=True))
    config = load_config("grpo", "tiny-qwen2.5-vl", overrides=["train.epsilon_high=0.28"])
    for _ in range(3):
        builder.check_trl("grpo", config, 1)
    config.train.trl["epsilon_high"] = 0.3
    builder.check_trl("grpo", config, 1)
    builder.check_trl("evaluate", config, 1)
    assert calls == [("grpo", 1), ("grpo", 1)]


def test_the_check_uses_the_jobs_process_count():
    """TRL derives the generation batch from the world size (1 on the login node): a job of two
    processes with 2 completions each and groups of 4 is fine, one process is not."""
    from vqa_r1.train.runner import check_trl_config

    config = load_config(
        "grpo", "tiny-qwen2.5-vl", overrides=["train.per_device_train_batch_size=2"]
    )
    check_trl_config(config, 2)
    with pytest.raises(UserError, match="divisible by num_generations"):
        check_trl_config(config, 1)


# ------------------------------------------------------------------ they reach TRL


@pytest.mark.slow
def test_trl_keys_reach_the_trainers_arguments(synthetic_dir, tmp_path):
    import torch

    from vqa_r1.train import runner

    config = load_config(
        "grpo",
        "tiny-qwen2.5-vl",
        overrides=[
            f"data.dataset={synthetic_dir}",
            "data.num_samples=4",
            "train.max_steps=2",
            "train.save_steps=2",
            "train.per_device_train_batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "train.epsilon_high=0.28",
            "train.num_iterations=2",
            "train.importance_sampling_level=sequence",
            "train.mask_truncated_completions=true",
            "train.loss_type=dr_grpo",
        ],
    )
    runner.check_trl_config(config, 1)
    status = runner.train(config, tmp_path / "run")
    assert status["state"] == "COMPLETED"
    args = torch.load(
        tmp_path / "run" / "checkpoints" / "checkpoint-2" / "training_args.bin", weights_only=False
    )
    assert args.epsilon_high == 0.28 and args.num_iterations == 2
    assert args.importance_sampling_level == "sequence"
    assert args.mask_truncated_completions is True and args.loss_type == "dr_grpo"
    assert read_config(tmp_path / "run" / "config.yaml").train.trl["num_iterations"] == 2

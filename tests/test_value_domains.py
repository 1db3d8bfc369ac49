"""Values that type correctly but mean nothing are refused on the login node (issue 30, item 6).

Every numeric setting has a range (vqa_r1/domains.py): ours beside each field, TRL's in
``domains.TRL``, the rest refused by TRL's and PEFT's own checks, run on the login node. Each test
walks every key (a new key without a range fails here), and the reproductions of the issue run as
a user types them: refused with one line naming the key and the value, exit status 2, and nothing
written in the output folder.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.errors import UserError

SMALL = [
    "--set",
    "data.num_samples=4",
    "--set",
    "train.per_device_train_batch_size=2",
    "--set",
    "train.num_generations=2",
    "--set",
    "train.max_completion_length=8",
    "--set",
    "train.reward_funcs=[format]",
    "--set",
    "train.save_steps=1",
]  # fmt: skip  (were a refusal missing, the command would train a few tiny steps, not hours)


def _numeric(annotation) -> type | None:
    """int or float for a numeric annotation (``X | None`` and ``list[X]`` included), else None."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple):
        found = [_numeric(a) for a in typing.get_args(annotation) if a is not type(None)]
        return next((k for k in found if k), None)
    return annotation if annotation in (int, float) else None


def _numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, type, dataclasses.Field]]:
    """(key, int or float, field) of every numeric field of ``cls``, sections as ``section.key``."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            rows += _numeric_fields(hints[f.name], f"{prefix}{f.name}.")
        elif kind := _numeric(hints[f.name]):
            rows.append((f"{prefix}{f.name}", kind, f))
    return rows


def _outside(domain, kind: type) -> list:
    """Values just outside ``domain`` (below, above, a fraction where whole numbers are due), and
    NaN for a float (NaN compares false with every bound)."""
    values = []
    if domain.low is not None:
        value = domain.low - (1 if kind is int or domain.low_open else 0.5)
        while any(value == v for v, _ in domain.special):
            value -= 1
        values.append(kind(value))
    if domain.high is not None:
        values.append(kind(domain.high + 1))
    if domain.whole_from is not None:
        values.append(domain.whole_from + 0.5)
    if kind is float:
        values.append(math.nan)
    assert values and not any(domain.allows(v) for v in values), domain
    return values


def _user_dataclasses() -> list[type]:
    """Every dataclass a user sets numbers of: recipes and --set, experiment specs, pretraining,
    prompt tuning, judge jobs, cluster profiles."""
    from vqa_r1.config import RunConfig
    from vqa_r1.experiments.spec import ExperimentSpec
    from vqa_r1.judge.job import JudgeJobConfig
    from vqa_r1.launch.clusters import ClusterProfile
    from vqa_r1.train.pretrain import PretrainConfig
    from vqa_r1.train.prompt_tuning import PromptTuneConfig

    return [
        RunConfig, ExperimentSpec, JudgeJobConfig, ClusterProfile, PretrainConfig, PromptTuneConfig,
    ]  # fmt: skip


# ------------------------------------------------------------------------------ every key


def test_every_numeric_setting_of_ours_has_a_domain():
    missing = [
        f"{cls.__name__}: {key}"
        for cls in _user_dataclasses()
        for key, _, f in _numeric_fields(cls)
        if f.metadata.get("domain") is None
    ]
    assert not missing, f"numeric keys without a range (option(domain=...)): {missing}"


def test_every_numeric_run_config_key_refuses_values_outside_its_domain():
    from vqa_r1.config import RunConfig
    from vqa_r1.recipes import load_config

    for key, kind, f in _numeric_fields(RunConfig):
        for value in _outside(f.metadata["domain"], kind):
            typed = f"[{value}]" if "list" in str(f.type) else value
            with pytest.raises(UserError) as err:
                load_config("grpo", "tiny-qwen2.5-vl", overrides=[f"{key}={typed}"])
            message = str(err.value)
            assert key in message and str(value) in message and "\n" not in message, message


def test_every_numeric_key_of_the_other_settings_refuses_values_outside_its_domain():
    """Experiment specs, pretraining, prompt tuning and cluster profiles (built from YAML or
    --set), and judge jobs (flags, checked by validate)."""
    from vqa_r1.judge.job import JudgeJobConfig, validate
    from vqa_r1.judge.options import flag_of
    from vqa_r1.typed_config import build

    required = {"ExperimentSpec": {"kind": "demo"}, "ClusterProfile": {"name": "test"}}
    for cls in _user_dataclasses()[1:]:
        for key, kind, f in _numeric_fields(cls):
            for value in _outside(f.metadata["domain"], kind):
                typed = [value] if "list" in str(f.type) else value
                with pytest.raises(UserError) as err:
                    if cls is JudgeJobConfig:
                        validate(
                            JudgeJobConfig(
                                responses=[], out="o.json", backend="heuristic", **{key: typed}
                            )
                        )
                    else:
                        section, _, name = key.rpartition(".")
                        data = {section: {name: typed}} if section else {key: typed}
                        build(cls, {**required.get(cls.__name__, {}), **data}, cls.__name__)
                message = str(err.value)
                named = (flag_of(f) or key) if cls is JudgeJobConfig else key
                assert named in message and str(value) in message, (cls, message)


def test_every_numeric_trl_field_has_a_domain_or_is_ours_or_the_suites():
    from vqa_r1 import domains, trl_options
    from vqa_r1.config import TrainConfig

    ours = {f.name for f in dataclasses.fields(TrainConfig)}
    seen = set()
    for verb in ("grpo", "sft"):
        for key, _, _ in _numeric_fields(trl_options.trl_class(verb)):
            seen.add(key)
            if key in ours or trl_options.refused_reason(key):
                continue
            assert key in domains.TRL, f"TRL's {verb} field {key} has no range in domains.TRL"
    assert set(domains.TRL) <= seen, set(domains.TRL) - seen  # no stale entry after an upgrade


def test_every_trl_key_of_the_table_refuses_values_outside_its_domain():
    from vqa_r1 import domains, trl_options
    from vqa_r1.recipes import load_config

    for key, domain in domains.TRL.items():
        verb = "grpo" if key in trl_options.field_names("grpo") else "sft"
        kind = _numeric(typing.get_type_hints(trl_options.trl_class(verb))[key])
        for value in _outside(domain, kind):
            with pytest.raises(UserError) as err:
                load_config(verb, "tiny-qwen2.5-vl", overrides=[f"train.{key}={value}"])
            message = str(err.value)
            assert f"train.{key}" in message and str(value) in message, message


def test_what_trl_refuses_is_refused_naming_the_key_and_value():
    """Each numeric GRPOConfig field TRL's own ``__post_init__`` refuses some value of (found by
    building the config past our ranges): the command's checks refuse that value too, naming the
    key and the value."""
    from vqa_r1 import trl_options
    from vqa_r1.config import RunConfig, TrainConfig
    from vqa_r1.recipes import load_config
    from vqa_r1.train.runner import check_trl_config

    ours = {f.name for f in dataclasses.fields(TrainConfig)}
    base = RunConfig(verb="grpo")
    base.train.max_steps = 1
    refused = []
    for key, _, _ in _numeric_fields(trl_options.trl_class("grpo")):
        if key in ours or trl_options.refused_reason(key):
            continue
        for value in (-1, 0, 0.5, 3):
            config = copy.deepcopy(base)
            config.train.trl = {key: value}
            try:
                check_trl_config(config, 1)
            except UserError:
                refused.append((key, value))
    assert refused  # torch_empty_cache_steps, clip_min above clip_max, ...
    for key, value in refused:
        with pytest.raises(UserError) as err:
            config = load_config("grpo", "tiny-qwen2.5-vl", overrides=[f"train.{key}={value}"])
            check_trl_config(config, 1)
        assert f"train.{key}" in str(err.value) and str(value) in str(err.value), str(err.value)


def test_the_trl_check_writes_nothing(tmp_path, monkeypatch):
    import tempfile

    from vqa_r1.config import RunConfig
    from vqa_r1.train.runner import check_trl_config

    monkeypatch.chdir(tmp_path)
    scratch = Path(tempfile.gettempdir()) / "vqa-r1-trl-check"
    existed = scratch.exists()
    for verb in ("grpo", "sft"):
        config = RunConfig(verb=verb)
        config.train.max_steps = 1
        check_trl_config(config, 1)
    assert list(tmp_path.iterdir()) == [] and scratch.exists() == existed


# ------------------------------------------------------------------------------ as typed


def _refused(out, *words) -> str:
    assert out.returncode == 2, out.stdout[-1500:] + out.stderr[-1500:]
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    return out.stderr


@pytest.mark.parametrize(
    "item, words",
    [
        ("train.num_iterations=-1", ["train.num_iterations", "at least 1", "-1"]),
        ("lora.dropout=1.5", ["lora.dropout", "[0, 1)", "1.5"]),
        ("train.top_entropy_quantile=1.5", ["train.top_entropy_quantile", "[0, 1]", "1.5"]),
        ("train.max_steps=-5", ["train.max_steps", "-1 or 0 (not set", "at least 1", "-5"]),
        ("train.num_train_epochs=-1", ["train.num_train_epochs", "at least 0", "-1"]),
        ("train.save_steps=-1", ["train.save_steps", "above 0", "-1"]),
        ("train.warmup_steps=-0.5", ["train.warmup_steps", "at least 0", "-0.5"]),
    ],
)
def test_the_issues_values_are_refused_as_typed_before_anything_is_written(tmp_path, item, words):
    from vqa_r1.cli import main

    out_dir = tmp_path / "out"
    steps = [] if "max_steps" in item else ["--set", "train.max_steps=1"]
    out = run_in_process(
        main, ["grpo", *SMALL, *steps, "--set", item, "--output-dir", str(out_dir)]
    )
    err = _refused(out, *words)
    assert "integer or a float" not in err  # the sign is what is wrong, not the type
    assert not out_dir.exists()


@pytest.mark.parametrize(
    "command, argv, words",
    [
        ("launch", ["grpo", "--dry-run", "--max-requeues", "-2"], ["--max-requeues", "-2"]),
        ("launch", ["grpo", "--dry-run", "--gpus", "-1"], ["--gpus", "at least 0", "-1"]),
        ("launch", ["sft", "--dry-run", "--nodes", "0"], ["--nodes", "at least 1", "0"]),
        ("launch", ["sft", "--dry-run", "--processes-per-node", "0"], ["--processes-per-node"]),
        ("launch", ["sft", "--dry-run", "--sweep", "train.seed=1,2", "--parallel", "0"],
         ["--parallel", "0"]),
        ("launch", ["logs", "x", "-n", "-3"], ["--lines", "-3"]),
        ("vqa", ["doctor", "--gpus", "-1"], ["--gpus", "at least 0", "-1"]),
        ("vqa", ["pretrain", "--stop-after", "0"], ["--stop-after", "0"]),
        ("vqa", ["prompt-tune", "--stop-after", "-1"], ["--stop-after", "-1"]),
    ],
)  # fmt: skip
def test_numeric_flags_are_refused_out_of_range_on_one_line(tmp_path, command, argv, words):
    from vqa_r1.cli import main as vqa
    from vqa_r1.cli.launch import main as launch

    out_dir = tmp_path / "out"
    extra = ["--output-dir", str(out_dir)] if "--dry-run" in argv else []
    out = run_in_process(launch if command == "launch" else vqa, [*argv, *extra])
    _refused(out, "must be", *words)
    assert not out_dir.exists()

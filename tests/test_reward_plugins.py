"""Rewards named "package.module:function": resolved on the login node, clear errors when not."""

import sys
from pathlib import Path

import pytest

from vqa_r1.errors import UserError
from vqa_r1.recipes import load_config
from vqa_r1.rewards import get_rewards


@pytest.fixture
def plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "slurm"))
    yield
    sys.modules.pop("rewards_for_tests", None)


def test_plugin_reward_resolves(plugin_path):
    (fn,) = get_rewards(["rewards_for_tests:letter_e"])
    assert fn.__name__ == "letter_e" and fn(completions=["eeee", "abcd"]) == [1.0, 0.0]
    config = load_config(
        "grpo",
        "tiny-qwen2.5-vl",
        overrides=["train.reward_funcs=[accuracy,rewards_for_tests:letter_e]"],
    )
    assert config.train.reward_funcs == ["accuracy", "rewards_for_tests:letter_e"]


@pytest.mark.parametrize(
    "name, message",
    [
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("rewards_for_tests:nope", "has no function 'nope'"),
        ("rewards_for_tests:STEP_PAD_S", "has no function 'STEP_PAD_S'"),
        ("acuracy", "registered are"),
    ],
)
def test_bad_reward_names_fail_validation(plugin_path, name, message):
    with pytest.raises(UserError, match="train.reward_funcs") as err:
        load_config("grpo", "tiny-qwen2.5-vl", overrides=[f"train.reward_funcs=[{name}]"])
    assert message in str(err.value)

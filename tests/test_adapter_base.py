"""An adapter is used on its own base model, or refused with both models named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vqa_r1.config import save_config
from vqa_r1.errors import UserError
from vqa_r1.models.loading import load_model
from vqa_r1.recipes import load_config

REPO = Path(__file__).resolve().parents[1]


def _tiny(name: str, *overrides: str):
    return load_config("evaluate", name, overrides=[*overrides])


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    """A run directory as training leaves it: config.yaml and a LoRA adapter in final/."""
    from peft import LoraConfig, get_peft_model

    run = tmp_path_factory.mktemp("adapters") / "sft"
    config = load_config("sft", "tiny-qwen2.5-vl")
    loaded = load_model(config)
    target = loaded.adapter.lora_target_regex()
    model = get_peft_model(loaded.model, LoraConfig(r=2, lora_alpha=4, target_modules=target))
    model.save_pretrained(str(run / "final"))
    save_config(config, run / "config.yaml")
    return run


def test_the_adapter_loads_on_its_base(sft_run):
    loaded = load_model(_tiny("tiny-qwen2.5-vl"), adapter_path=sft_run / "final")
    assert hasattr(loaded.model, "peft_config")


@pytest.mark.parametrize(
    ("name", "overrides", "mentions"),
    [
        ("tiny-smolvlm", [], "tiny-smolvlm"),  # another family
        ("tiny-qwen2.5-vl", ["model.tiny_layers=3"], "tiny_layers 3"),  # another size
        ("tiny-qwen2.5-vl-pretrained", [], "tiny-qwen2.5-vl-pretrained"),  # other weights
    ],
)
def test_an_adapter_on_another_model_names_both(sft_run, name, overrides, mentions):
    with pytest.raises(UserError) as caught:
        load_model(_tiny(name, *overrides), adapter_path=sft_run / "final")
    message = str(caught.value)
    assert "was trained on tiny-qwen2.5-vl (tiny_seed 0, tiny_hidden 128, tiny_layers 2" in message
    assert mentions in message and "--model tiny-qwen2.5-vl" in message


def test_an_adapter_without_its_run_is_checked_by_its_weights(sft_run, tmp_path):
    """A bare adapter folder on a deeper model of the same family: PEFT alone would warn and
    leave the third layer's LoRA at its initial values; here that is an error."""
    bare = tmp_path / "adapter"
    shutil.copytree(sft_run / "final", bare)
    with pytest.raises(UserError) as caught:
        load_model(_tiny("tiny-qwen2.5-vl", "model.tiny_layers=3"), adapter_path=bare)
    message = str(caught.value)
    assert f"adapter {bare} (made for " in message and "does not fit tiny-qwen2.5-vl" in message
    assert "adapter weights of the model are not in it (e.g. " in message and "layers.2." in message
    with pytest.raises(
        UserError, match=r"does not fit tiny-smolvlm.*28 of its 28 weights have no place in it"
    ):
        load_model(_tiny("tiny-smolvlm"), adapter_path=bare)


def test_evaluating_an_adapter_on_another_model_is_refused_before_queueing(sft_run, tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), "evaluate", "--model",
         "tiny-smolvlm", "--adapter", str(sft_run), "--dry-run",
         "--output-dir", str(tmp_path / "eval")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout[-500:] + out.stderr[-500:]
    assert out.stderr.startswith(f"error: adapter {sft_run / 'final'} was trained on tiny-qwen2.5")
    assert "not on tiny-smolvlm" in out.stderr


@pytest.mark.parametrize(
    ("base", "refused"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", True),
        ("/hf/hub/models--Qwen--Qwen2.5-VL-7B-Instruct/snapshots/0abc", True),
        ("Qwen/Qwen2.5-VL-3B-Instruct", False),
        ("/hf/hub/models--Qwen--Qwen2.5-VL-3B-Instruct/snapshots/0abc", False),
    ],
)
def test_a_hub_adapter_names_its_base_in_adapter_config(tmp_path, base, refused):
    """An adapter from elsewhere (no run of ours beside it): adapter_config.json's base."""
    from vqa_r1.models.loading import check_adapter_base

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    model = load_config("evaluate", "qwen2.5-vl-3b").model
    if not refused:
        check_adapter_base(adapter, model)
        return
    with pytest.raises(UserError) as caught:
        check_adapter_base(adapter, model)
    assert str(caught.value) == (
        f"adapter {adapter} was made for Qwen/Qwen2.5-VL-7B-Instruct (adapter_config.json), "
        "not for qwen2.5-vl-3b (Qwen/Qwen2.5-VL-3B-Instruct): use it with --model qwen2.5-vl-7b"
    )

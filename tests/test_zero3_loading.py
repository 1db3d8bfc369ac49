"""ZeRO-3 loading: the DeepSpeed config exists before the model loads, adapters in the model dtype.

The two-process DeepSpeed run itself is in tests/test_deepspeed_cpu.py (it needs deepspeed)."""

import pytest
import torch

from vqa_r1.models import loading
from vqa_r1.models.loading import cast_adapters_to_model_dtype, load_model
from vqa_r1.recipes import load_config
from vqa_r1.train import runner

MODEL = "tiny-qwen2.5-vl-pretrained"


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory):
    """A LoRA adapter saved from the bf16 tiny model (as an SFT run leaves one)."""
    from peft import LoraConfig, get_peft_model

    loaded = load_model(load_config("sft", MODEL, overrides=["model.dtype=bfloat16"]))
    model = get_peft_model(
        loaded.model,
        LoraConfig(r=4, lora_alpha=8, target_modules=loaded.adapter.lora_target_regex()),
    )
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


def _adapter_dtypes(model) -> set:
    return {p.dtype for n, p in model.named_parameters() if "lora_" in n}


def test_a_continued_adapter_loads_in_the_model_dtype_under_zero3(sft_adapter, monkeypatch):
    config = load_config("grpo", MODEL, overrides=["model.dtype=bfloat16"])
    monkeypatch.setattr(loading, "zero3_enabled", lambda: True)
    loaded = load_model(config, adapter_path=sft_adapter, trainable=True)
    assert _adapter_dtypes(loaded.model) == {torch.bfloat16}
    assert any(p.requires_grad for n, p in loaded.model.named_parameters() if "lora_" in n)


def test_without_zero3_peft_keeps_its_float32_adapter(sft_adapter, monkeypatch):
    config = load_config("grpo", MODEL, overrides=["model.dtype=bfloat16"])
    monkeypatch.setattr(loading, "zero3_enabled", lambda: False)
    loaded = load_model(config, adapter_path=sft_adapter, trainable=True)
    assert _adapter_dtypes(loaded.model) == {torch.float32}  # PEFT's default, left alone


def test_the_reference_adapter_trl_adds_is_cast_too(sft_adapter, monkeypatch):
    """TRL copies a continued adapter into a frozen "ref" adapter (PeftModel.add_adapter, which
    upcasts to float32); cast_adapters_to_model_dtype brings every adapter to the model dtype."""
    config = load_config("grpo", MODEL, overrides=["model.dtype=bfloat16"])
    monkeypatch.setattr(loading, "zero3_enabled", lambda: True)
    model = load_model(config, adapter_path=sft_adapter, trainable=True).model
    model.add_adapter("ref", model.peft_config["default"])
    assert torch.float32 in _adapter_dtypes(model)
    assert cast_adapters_to_model_dtype(model) > 0
    assert _adapter_dtypes(model) == {torch.bfloat16}


def test_training_arguments_exist_before_the_model_loads(tmp_path, monkeypatch):
    """Under ZeRO-3 the training arguments register the DeepSpeed config that makes
    from_pretrained partition the weights at load; they must be built first."""
    order: list[str] = []
    real_args = runner.training_args

    def args_spy(*a, **k):
        order.append("args")
        return real_args(*a, **k)

    class Loaded(Exception):
        pass

    def load_spy(*a, **k):
        order.append("load")
        raise Loaded

    monkeypatch.setattr(runner, "training_args", args_spy)
    monkeypatch.setattr(runner, "load_model", load_spy)
    config = load_config("grpo", MODEL, overrides=["train.max_steps=1"])
    with pytest.raises(Loaded):
        runner.train(config, tmp_path / "run")
    assert order == ["args", "load"]

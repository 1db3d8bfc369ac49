"""Qwen3-VL as a fourth family: the registry, the job a dry run prints (recipe, processor and
vLLM limits read back), the Thinking checkpoints' prompt and format reward, the MoE recipe."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli import main as cli_main
from vqa_r1.cli.launch import main as launch_main
from vqa_r1.errors import UserError
from vqa_r1.recipes import load_config

QWEN3 = [
    "qwen3-vl-2b",
    "qwen3-vl-4b",
    "qwen3-vl-8b",
    "qwen3-vl-2b-thinking",
    "qwen3-vl-4b-thinking",
    "qwen3-vl-8b-thinking",
    "qwen3-vl-30b-a3b",
]


def test_vqa_r1_models_lists_the_qwen3_vl_checkpoints_and_the_tiny_pretrained_one():
    ran = run_in_process(cli_main, ["models"])
    assert ran.returncode == 0, ran.stderr
    for name in [*QWEN3, "tiny-qwen3-vl", "tiny-qwen3-vl-pretrained"]:
        assert re.search(rf"^\s*{re.escape(name)}\s", ran.stdout, re.M), name
    assert "Qwen/Qwen3-VL-4B-Thinking" in ran.stdout


def _dry_run(model: str, *extra: str) -> str:
    ran = run_in_process(launch_main, ["grpo", "--model", model, "--cluster", "study-12h",
                                       "--dry-run", *extra])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_the_dry_run_prints_the_checkpoints_recipe_processor_and_vllm_limits():
    out = _dry_run("qwen3-vl-4b")
    config = load_config("grpo", "qwen3-vl-4b")
    assert "--recipe qwen3_vl/4b_grpo" in out
    processor = json.loads(re.search(r"^# processor: qwen3_vl (\{.*?\});", out, re.M).group(1))
    assert processor == {"max_pixels": config.model.max_pixels, "min_pixels": 4096}
    assert config.model.max_pixels == 524288  # 512 image tokens of 32 x 32 px
    vllm = json.loads(re.search(r"^# vllm \(train.use_vllm=false, colocate\): (.*)$", out, re.M)[1])
    assert vllm == {
        "limit_mm_per_prompt": {"image": 1, "video": 0},
        "max_model_len": 4096,
        "mm_processor_kwargs": processor,
    }
    assert "patch 16 px, merge 2x2; images per row 1" in out  # the checkpoint's, from its config
    assert "template opens <think>: no" in out
    assert "4.438B parameters (0.415B vision)" in out and "512 image tokens per image" in out
    assert "reward_funcs: [accuracy, format]" in out
    # the resolved configuration the job reads says the same
    assert "min_pixels: 4096" in out and "max_pixels: 524288" in out


def test_a_thinking_checkpoint_gets_format_thinking_and_room_to_think():
    out = _dry_run("qwen3-vl-8b-thinking")
    assert "--recipe qwen3_vl/8b-thinking_grpo" in out
    assert "template opens <think>: yes (format_thinking)" in out
    assert "reward_funcs: [accuracy, format_thinking]" in out
    assert "max_completion_length: 1024" in out
    assert load_config("evaluate", "qwen3-vl-8b-thinking").eval.max_new_tokens == 1024
    with pytest.raises(UserError, match="opens <think> itself.*use format_thinking"):
        load_config("grpo", "qwen3-vl-8b-thinking", overrides=["train.reward_funcs=[format]"])
    with pytest.raises(UserError, match="format_thinking is for checkpoints"):
        load_config("grpo", "qwen3-vl-8b", overrides=["train.reward_funcs=[format_thinking]"])


def test_the_moe_checkpoint_shards_over_four_gpus_and_lora_wraps_attention_only():
    out = _dry_run("qwen3-vl-30b-a3b")
    assert "#SBATCH --gres=gpu:a100:4" in out or "gpu:4" in out
    assert "deepspeed: zero3" in out and "ds3_gather_for_generation: false" in out
    assert "ZeRO-3 over 4 GPUs, not gathered for generation" in out

    from vqa_r1.models.adapters import get_adapter, lora_target_names
    from vqa_r1.models.architecture import meta_model

    names = lora_target_names(
        meta_model("qwen3-vl-30b-a3b"), get_adapter("qwen3_vl").lora_target_regex()
    )
    assert names and all("self_attn" in n for n in names)  # the experts are fused tensors
    assert not [n for n in names if "visual" in n]


def test_format_thinking_wants_the_close_and_an_answer_and_no_second_open():
    from vqa_r1.rewards import format_reward, format_thinking_reward

    completions = [
        "The red one is left. </think> <answer> True </answer>",
        "<think> again </think> <answer> True </answer>",
        "no close <answer> True </answer>",
        "done </think> no answer",
    ]
    assert format_thinking_reward(completions) == [1.0, 0.0, 0.0, 0.0]
    assert format_reward(completions) == [0.0, 1.0, 0.0, 0.0]


def test_a_thinking_model_is_not_asked_to_open_a_second_think_block():
    from datasets import Dataset

    from vqa_r1.data.datasets import trainer_rows
    from vqa_r1.models.adapters import get_adapter

    thinking = get_adapter("qwen3_vl", thinking=True)
    text = thinking.messages("Is it?")[0]["content"][-1]["text"]
    assert "<think> </think> tags" not in text and "close your thinking with </think>" in text
    assert (
        "<think> </think> tags"
        in get_adapter("qwen3_vl").messages("Is it?")[0]["content"][-1]["text"]
    )
    # its generated text continues the block the template opened: stored with the opening tag,
    # so the format rate, the judge and the answer reader see the whole reasoning
    assert thinking.response_text("red. </think> <answer> True </answer>").startswith("<think>red.")
    assert get_adapter("qwen3_vl").response_text("x") == "x"
    # its SFT target continues the block too
    ds = Dataset.from_dict({"image_path": ["a.png"], "caption": ["The red circle is left."],
                            "label": [1], "reasoning": ["red is left."]})  # fmt: skip
    rows = trainer_rows(ds, thinking, "sft")
    target = rows.remove_columns("image")[0]["completion"][0]["content"][0]["text"]
    assert target == "red is left. </think> <answer> True </answer>"

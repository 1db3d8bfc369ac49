"""The memory plan on the login node (issue 33, item 3; models/memory_plan.py): exact parameter
counts, a plan per term in every cluster dry run and in `doctor --verb`, and a recipe that cannot
fit the profile's GPU refused before queueing."""

from __future__ import annotations

import copy
import re

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli import main as vqa_main
from vqa_r1.cli.launch import main as launch_main
from vqa_r1.models.adapters import get_adapter
from vqa_r1.models.architecture import meta_model
from vqa_r1.models.memory_plan import image_tokens, lora_parameters, plan, with_gpu
from vqa_r1.recipes import load_config

IMPOSSIBLE = ["--set", "train.per_device_train_batch_size=64", "--set", "train.num_generations=64",
              "--set", "train.max_completion_length=32768"]  # fmt: skip


def test_doctor_prints_the_plan_with_the_model_cards_parameter_count(tmp_path, monkeypatch):
    """`vqa-r1 doctor --model qwen2.5-vl-3b --verb grpo --cluster study-12h`, as in the issue."""
    monkeypatch.chdir(tmp_path)
    out = run_in_process(vqa_main, ["doctor", "--model", "qwen2.5-vl-3b", "--verb", "grpo",
                                    "--cluster", "study-12h"])  # fmt: skip
    text = out.stdout
    head = next(line for line in text.splitlines() if line.startswith("memory plan"))
    billions = float(re.search(r"; ([\d.]+)B parameters", head)[1])
    assert abs(billions - 3.75) / 3.75 < 0.01, head  # the model card: 3.75B
    assert "of 80 GiB" in head and "LoRA 29.93M trainable" in head and "512 image tokens" in head
    for term in ("weights", "LoRA + AdamW", "activations", "logits", "reference pass",
                 "generation KV cache", "CUDA + allocator"):  # fmt: skip
        assert re.search(rf"^  {re.escape(term)} +[\d.]+ GiB  ", text, re.M), term
    assert re.search(r"^  fits: [\d.]+ of 80 GiB per GPU$", text, re.M)


def test_an_impossible_recipe_is_refused_at_submission_naming_memory(tmp_path):
    """Batch 64 x 64 generations x 32,768 tokens on one 80 GiB GPU: one line, exit 2, nothing
    written; the same recipe in doctor is a FAIL with exit 1."""
    run = tmp_path / "run"
    out = run_in_process(launch_main, ["grpo", "--model", "qwen2.5-vl-3b", "--cluster",
                                       "study-12h", "--dry-run", "--output-dir", str(run),
                                       *IMPOSSIBLE])  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: memory: grpo qwen2.5-vl-3b needs about "
    ), out.stderr
    assert "more than the 80 GiB of cluster study-12h's GPUs (largest: logits" in errors[0]
    assert "lower train.per_device_train_batch_size or train.max_completion_length" in errors[0]
    assert not run.exists()


def test_every_cluster_dry_run_prints_the_plan_and_a_tiny_model_has_none():
    out = run_in_process(launch_main, ["sft", "--model", "qwen2.5-vl-7b", "--cluster",
                                       "study-12h", "--dry-run"])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert re.search(r"^# memory plan .*: sft qwen2\.5-vl-7b, per GPU [\d.]+ GiB of 80 GiB; "
                     r"8\.292B parameters", out.stdout, re.M), out.stdout  # fmt: skip
    tiny = run_in_process(launch_main, ["sft", "--model", "tiny-qwen2.5-vl", "--cluster",
                                        "local-slurm", "--time", "00:05:00", "--dry-run"])  # fmt: skip
    assert tiny.returncode == 0 and "memory plan" not in tiny.stdout


def test_the_lora_count_is_what_peft_makes_trainable():
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(meta_model("qwen2.5-vl-3b"))
    regex = get_adapter("qwen2_5_vl").lora_target_regex()
    peft_model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=regex))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_parameters(meta_model("qwen2.5-vl-3b"), "qwen2_5_vl", 16) == trainable


def test_qwens_image_tokens_are_its_processors_at_the_budget():
    """An image that fills the recipe's max_pixels gets the tokens the rule counts."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    config = load_config("grpo", "qwen2.5-vl-3b")  # max_pixels 401408 = 896 x 448
    processor = Qwen2VLImageProcessor(min_pixels=3136, max_pixels=config.model.max_pixels)
    image = Image.new("RGB", (896, 448))
    grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    tokens = int(grid.prod()) // 4  # merged 2 x 2
    rule = image_tokens("qwen2_5_vl", config.model, meta_model("qwen2.5-vl-3b").config)
    assert tokens == rule == 512


@pytest.mark.parametrize(
    ("setting", "term", "grows"),
    [("train.gradient_checkpointing=false", "activations", True),
     ("train.beta=0", "reference pass", None),
     ("train.use_vllm=true", "generation KV cache", None)],
)  # fmt: skip
def test_each_setting_moves_its_own_term(setting, term, grows):
    base = with_gpu(plan(load_config("grpo", "qwen2.5-vl-3b")), 80)
    other = with_gpu(plan(load_config("grpo", "qwen2.5-vl-3b", overrides=[setting])), 80)
    sizes = {t.name: t.gib for t in other.terms}
    if grows is None:  # the term is gone: TRL skips the pass / vLLM generates
        assert term not in sizes and term in {t.name for t in base.terms}
    else:
        assert sizes[term] > 5 * {t.name: t.gib for t in base.terms}[term]
    if setting == "train.use_vllm=true":
        assert {t.name: t.gib for t in other.terms}["vLLM (colocate)"] > 0

"""Gradient checkpointing with language-only LoRA: backward does not run through the vision tower."""

import torch

from vqa_r1.data.prompts import problem_text
from vqa_r1.data.synthetic import SceneConfig, draw, generate_scenes
from vqa_r1.models.loading import load_model
from vqa_r1.recipes import load_config
from vqa_r1.train.input_grads import hook_language_inputs_only

MODEL = "tiny-qwen2.5-vl-pretrained"


def _inputs(loaded):
    cfg = SceneConfig()
    scenes = generate_scenes(2, seed=5, cfg=cfg)
    proc, adapter = loaded.processor, loaded.adapter
    texts = [
        proc.apply_chat_template(
            adapter.messages(problem_text(s.caption)), add_generation_prompt=True
        )
        + "<answer> True </answer>"
        for s in scenes
    ]
    images = [[draw(s, cfg)] for s in scenes]
    batch = proc(text=texts, images=images, return_tensors="pt", padding=True)
    labels = batch["input_ids"].clone()
    labels[batch["attention_mask"] == 0] = -100
    return batch, labels


def _lora_step(fixed: bool):
    """One checkpointed LoRA forward/backward as TRL sets it up (get_peft_model, then
    enable_input_require_grads, then activation checkpointing); returns the vision blocks run in
    backward, whether the language embeddings' output required grad, and the LoRA gradients."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    loaded = load_model(load_config("grpo", MODEL))
    loaded.adapter.freeze_vision(loaded.model)
    if fixed:
        assert hook_language_inputs_only(loaded.model, loaded.adapter)
    model = get_peft_model(
        loaded.model,
        LoraConfig(r=4, lora_alpha=8, target_modules=loaded.adapter.lora_target_regex()),
    )
    model.enable_input_require_grads()  # what TRL's trainers call with PEFT + checkpointing
    model.gradient_checkpointing_enable()  # what the Trainer calls (it re-hooks the inputs)
    model.train()
    base = model.get_base_model()
    vision_backward: list[str] = []
    for name, module in base.named_modules():
        if loaded.adapter.is_vision_module(name) and name.endswith(
            tuple(f"blocks.{i}" for i in range(8))
        ):
            module.register_full_backward_hook(lambda m, gi, go, n=name: vision_backward.append(n))
    text_grad: list[bool] = []
    base.get_input_embeddings().register_forward_hook(
        lambda m, i, o: text_grad.append(o.requires_grad)
    )
    batch, labels = _inputs(loaded)
    model(**batch, labels=labels).loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return vision_backward, text_grad, grads


def test_checkpointed_lora_step_skips_the_frozen_vision_tower_with_the_same_gradients():
    before_vision, before_text, before_grads = _lora_step(fixed=False)
    assert before_vision, "transformers no longer hooks the vision embeddings: drop the fix"
    after_vision, after_text, after_grads = _lora_step(fixed=True)
    assert after_vision == []
    assert after_text and all(after_text)  # the language model's inputs still carry grads
    assert before_grads.keys() == after_grads.keys() and before_grads
    for name, grad in before_grads.items():
        assert torch.allclose(grad, after_grads[name], atol=1e-6), name


def test_a_trainable_vision_side_keeps_the_library_hooks():
    loaded = load_model(load_config("grpo", MODEL))  # vision not frozen
    assert not hook_language_inputs_only(loaded.model, loaded.adapter)
    assert "enable_input_require_grads" not in vars(loaded.model)

"""Every tiny family loads through AutoProcessor/AutoModel, generates, and trains a LoRA step."""

import time

import pytest
import torch

from vqa_r1.data.prompts import problem_text
from vqa_r1.data.synthetic import SceneConfig, draw, generate_scenes
from vqa_r1.errors import UserError
from vqa_r1.models.adapters import lora_target_names
from vqa_r1.models.generation import GenerationSettings, Generator
from vqa_r1.models.loading import load_model, resolve_model_path
from vqa_r1.models.registry import get_spec
from vqa_r1.recipes import load_config

TINY = ["tiny-qwen2.5-vl", "tiny-qwen3-vl", "tiny-internvl", "tiny-smolvlm"]


def _batch(n=2):
    cfg = SceneConfig()
    scenes = generate_scenes(n, seed=11, cfg=cfg)
    return [draw(s, cfg) for s in scenes], [problem_text(s.caption) for s in scenes]


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_tiny_family_loads_generates_and_trains_a_lora_step(name):
    from peft import LoraConfig, get_peft_model

    loaded = load_model(load_config("sft", name))
    images, questions = _batch()
    gen = Generator(loaded, GenerationSettings(max_new_tokens=6, cache="on"))
    outs = gen.generate(images, questions)
    assert len(outs) == 2 and all(isinstance(o, str) for o in outs)

    adapter = loaded.adapter
    targets = lora_target_names(loaded.model, adapter.lora_target_regex())
    assert targets, "the language-model regex matched nothing"
    model = get_peft_model(
        loaded.model, LoraConfig(r=4, lora_alpha=8, target_modules=adapter.lora_target_regex())
    )
    wrapped = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
    assert wrapped
    # the vision-tower test: no vision or projector module carries LoRA
    assert not [n for n in wrapped if adapter.is_vision_module(n)]
    assert all(("language_model" in n or "text_model" in n) for n in wrapped)

    proc = loaded.processor
    texts = [
        proc.apply_chat_template(adapter.messages(q), add_generation_prompt=True)
        + "<answer> True </answer>"
        for q in questions
    ]
    batch = proc(text=texts, images=[[i] for i in images], return_tensors="pt", padding=True)
    labels = batch["input_ids"].clone()
    labels[batch["attention_mask"] == 0] = -100
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert before and all("lora_" in n for n in before)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss = model(**batch, labels=labels).loss
    loss.backward()
    opt.step()
    changed = [
        n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])
    ]
    assert changed, "a LoRA step changed no parameter"


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_freeze_vision(name):
    loaded = load_model(load_config("sft", name))
    frozen = loaded.adapter.freeze_vision(loaded.model)
    assert frozen > 0
    for n, p in loaded.model.named_parameters():
        assert p.requires_grad == (not loaded.adapter.is_vision_module(n)), n


@pytest.mark.slow
def test_tiny_builds_are_deterministic_and_cached():
    from vqa_r1.models.tiny import TinySize, tiny_model_dir

    a = tiny_model_dir("smolvlm", seed=5, size=TinySize(hidden=64, vocab=600))
    start = time.perf_counter()
    again = tiny_model_dir("smolvlm", seed=5, size=TinySize(hidden=64, vocab=600))
    assert again == a and time.perf_counter() - start < 0.5
    assert (a / "model.safetensors").read_bytes()  # written, and read back by the loaders above


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["on", "off", "auto"])
def test_generation_cache_policy_on_tiny_smolvlm(policy, caplog):
    loaded = load_model(load_config("evaluate", "tiny-smolvlm"))
    images, questions = _batch(3)
    gen = Generator(loaded, GenerationSettings(max_new_tokens=8, cache=policy))
    with caplog.at_level("INFO"):
        outs = gen.generate(images, questions)
    assert len(outs) == 3
    if policy == "auto":
        assert gen.cache_decision in ("auto -> on", "auto -> off")
        assert "generation cache self-check" in caplog.text
    else:
        assert gen.use_cache is (policy == "on")


@pytest.mark.slow
def test_uncached_generation_suppresses_the_image_token():
    """Force the image token to be the likeliest next token: uncached decoding must still run."""
    loaded = load_model(load_config("evaluate", "tiny-smolvlm"))
    image_id = loaded.adapter.image_token_id(loaded.processor)
    images, questions = _batch(2)
    gen = Generator(loaded, GenerationSettings(max_new_tokens=6, cache="off"))
    inputs = gen._inputs(images, questions)
    first = gen._generate_ids(inputs, use_cache=False)[0, 0].item()
    head = loaded.model.get_output_embeddings()
    with torch.no_grad():  # the image token now outscores the greedy choice
        head.weight[image_id] = head.weight[first] * 3
    unsuppressed = loaded.model(**inputs).logits[0, -1].argmax().item()
    assert unsuppressed == image_id, (
        "the test setup failed to make the image token the greedy choice"
    )
    ids = gen._generate_ids(inputs, use_cache=False)
    assert image_id not in ids.tolist()[0]


def test_hub_model_missing_fails_fast_with_download_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    start = time.perf_counter()
    with pytest.raises(UserError) as err:
        resolve_model_path(get_spec("qwen2.5-vl-3b"))
    assert time.perf_counter() - start < 15
    assert "hf download Qwen/Qwen2.5-VL-3B-Instruct" in str(err.value)

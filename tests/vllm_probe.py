"""Runs vLLM 0.31's own prompt processing on the prompt ids and images GRPO's trainer sends it.

A helper of tests/test_vllm_prompts.py, run in a subprocess with vLLM's wheel (Python files only,
no compiled ops) on PYTHONPATH: importing vLLM registers torch ops and logging handlers that the
test process should not keep. Reads cases as JSON on stdin, writes results as JSON on stdout.

Per case: the trainer's ids come from TRL's own GRPOTrainer._tokenize_prompts on the suite's
prompt and its fitted image (runner.fit_images does the same); vLLM's processor is the one its
engine builds (MULTIMODAL_REGISTRY.create_processor) for the model folder.
"""

from __future__ import annotations

import json
import sys
import time
import types


def _trainer_ids(loaded, images) -> list[int]:
    from trl.data_utils import prepare_multimodal_messages
    from trl.trainer.grpo_trainer import GRPOTrainer

    prompt = prepare_multimodal_messages(
        loaded.adapter.messages("Is the square red?", images=len(images)), images=images
    )
    trainer = types.SimpleNamespace(
        _is_vlm=True,
        processing_class=loaded.processor,
        chat_template=None,
        tools=None,
        chat_template_kwargs={},
        environment_factories=None,
    )
    ids, _, _ = GRPOTrainer._tokenize_prompts(trainer, [prompt])
    return list(ids[0])


def _case(case: dict) -> dict:
    from PIL import Image
    from trl.generation.vllm_generation import VLLMGeneration
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    from vqa_r1.models.adapters import image_options
    from vqa_r1.models.loading import load_model
    from vqa_r1.models.serving import mm_limits
    from vqa_r1.recipes import load_config
    from vqa_r1.train.vllm_prompts import hand_vllm_unexpanded_prompts

    config = load_config("grpo", case["model"], overrides=case["overrides"])
    loaded = load_model(config)
    processor, adapter = loaded.processor, loaded.adapter
    settings = adapter.processor_kwargs(**image_options(config.model))
    count = config.data.images_per_row  # several: each a different size and colour
    images = []
    for i in range(count):
        image = Image.new("RGB", (300 - 60 * i, 200), (200, 30 + 90 * i, 30))
        image.paste((20, 20, 220), (40, 40, 140, 160))
        images.append(adapter.fit_image(image, processor))
    ids = _trainer_ids(loaded, images)
    token = processor.image_token_id
    # the engine as the suite configures it: at most data.images_per_row images, no video
    limits = mm_limits(count)
    vllm = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=str(loaded.path), limit_mm_per_prompt=limits)
    )
    image = images if count > 1 else images[0]

    def process(prompt_ids: list[int], kwargs: dict) -> dict:
        items = vllm.info.parse_mm_data({"image": image})
        return vllm(prompt_ids, items, hf_processor_mm_kwargs=kwargs)

    out = {"trainer": ids.count(token), "settings": settings}
    if case["mode"] == "colocate":
        # the row TRL's colocate path builds (vllm_generation.py), through the suite's wrapper
        class LLM:
            def generate(self, rows, sampling_params=None, use_tqdm=False):
                return [
                    process(row["prompt_token_ids"], row.get("mm_processor_kwargs", {}))
                    for row in rows
                ]

        row = {"prompt_token_ids": ids, "multi_modal_data": {"image": image}}
        out["as_trl_hands_it"] = LLM().generate([row])[0]["prompt_token_ids"].count(token)
        # the unexpanded prompt with the checkpoint's settings (none handed): its own tiling
        unexpanded = adapter.unexpanded_ids(ids, processor)
        out["checkpoint_settings"] = process(unexpanded, {})["prompt_token_ids"].count(token)
        trainer = types.SimpleNamespace(vllm_generation=types.SimpleNamespace(mode="colocate"))
        trainer.vllm_generation.llm = LLM()
        hand_vllm_unexpanded_prompts(trainer, adapter, processor, settings)
        (result,) = trainer.vllm_generation.llm.generate([row], sampling_params=None)
        seen = result["prompt_token_ids"]
        out["vllm"] = seen.count(token)
        out["same_ids"] = seen == ids
        out["embeds"] = [p.get_num_embeds() for p in result["mm_placeholders"]["image"]]
        return out
    # server: /v1/chat/completions/render processes a conversation holding only the image with
    # the server's --mm-processor-kwargs (launch/distributed.py: the same settings); TRL places
    # the features on the trainer's runs of image tokens (_place_features)
    conversation = [{"role": "user", "content": [{"type": "image"}] * count}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    rendered = process(processor.tokenizer.encode(text, add_special_tokens=False), settings)
    placeholders = rendered["mm_placeholders"]["image"]
    out["embeds"] = [p.get_num_embeds() for p in placeholders]
    features = {
        "mm_placeholders": {
            "image": [{"offset": p.offset, "length": p.length} for p in placeholders]
        }
    }
    generation = types.SimpleNamespace(processing_class=processor)
    try:
        placed = VLLMGeneration._place_features(generation, features, ids)
        out["placed"] = [p["length"] for p in placed["mm_placeholders"]["image"]]
    except ValueError as err:
        out["trl_error"] = str(err)
    return out


def main() -> None:
    cases = json.load(sys.stdin)
    results = []
    for case in cases:
        started = time.time()
        results.append(_case(case))
        print(f"{case}: {time.time() - started:.1f}s", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

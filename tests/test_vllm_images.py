"""vLLM gets the images the trainer sees: resized once to the recipe's pixel budget, and the
server started with the same processor limits."""

import json

import pytest
from PIL import Image

from vqa_r1.models.loading import load_model
from vqa_r1.recipes import load_config
from vqa_r1.train import runner

MODEL = "tiny-qwen2.5-vl-pretrained"  # its processor's budget: 12544 px (16 merged tokens)


@pytest.fixture(scope="module")
def loaded():
    return load_model(load_config("grpo", MODEL))


def _grid(image_processor, image) -> list:
    return image_processor(images=[image], return_tensors="pt")["image_grid_thw"].tolist()


def _big_image() -> Image.Image:
    image = Image.new("RGB", (300, 200), (200, 30, 30))
    image.paste((20, 20, 220), (40, 40, 140, 160))
    return image


def test_an_image_above_the_budget_gets_the_trainers_tokens_under_another_budget(loaded):
    """vLLM processes an image again with the checkpoint's own (larger) limits; the fitted image
    gives the same grid there as the original gives in the trainer."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    trainer_side = loaded.processor.image_processor
    budget = trainer_side.size.longest_edge
    big = _big_image()
    assert big.width * big.height > budget
    # a real checkpoint's own limits (Qwen2.5-VL's preprocessor_config.json: 3136 to 12845056
    # pixels), given explicitly: in transformers 5.17 the class default can carry the limits of a
    # processor loaded earlier in the same process
    vllm_side = Qwen2VLImageProcessor(min_pixels=3136, max_pixels=12845056)
    assert vllm_side.size.longest_edge > budget
    assert _grid(vllm_side, big) != _grid(trainer_side, big)  # the mismatch vLLM reported

    fitted = loaded.adapter.fit_image(big, loaded.processor)
    assert fitted.width % 28 == 0 and fitted.height % 28 == 0
    assert fitted.width * fitted.height <= budget
    assert _grid(vllm_side, fitted) == _grid(trainer_side, big) == _grid(trainer_side, fitted)
    small = fitted.copy()
    assert loaded.adapter.fit_image(small, loaded.processor) is small  # at its size: unchanged


def test_grpo_with_vllm_trains_on_fitted_images(loaded, tmp_path, monkeypatch):
    """runner.train resizes the rows' images once when GRPO generates with vLLM (and not
    otherwise); fit_images does it for a dataset whose image is above the budget."""
    from datasets import Dataset
    from datasets import Image as ImageFeature

    path = tmp_path / "big.png"
    _big_image().save(path)
    rows = Dataset.from_dict({"image": [str(path)], "solution": ["True"]}).cast_column(
        "image", ImageFeature()
    )
    fitted = runner.fit_images(rows, loaded)
    image = fitted[0]["image"]
    assert image.width * image.height <= loaded.processor.image_processor.size.longest_edge
    assert fitted[0]["solution"] == "True"

    seen: list[bool] = []

    class Built(Exception):
        pass

    def spy(rows, loaded_model):
        seen.append(True)
        return rows

    def stop(*args, **kwargs):
        raise Built

    monkeypatch.setattr(runner, "fit_images", spy)
    monkeypatch.setattr(runner, "build_trainer", stop)
    small = ["train.max_steps=1", "data.synthetic_train=8"]
    with pytest.raises(Built):
        runner.train(load_config("grpo", MODEL, overrides=small), tmp_path / "plain")
    assert seen == []
    with_vllm = load_config("grpo", MODEL, overrides=[*small, "train.use_vllm=true"])
    with pytest.raises(Built):
        runner.train(with_vllm, tmp_path / "vllm")
    assert seen == [True]


def test_the_vllm_server_gets_the_recipes_pixel_budget(monkeypatch, tmp_path):
    from vqa_r1.launch import distributed

    monkeypatch.setattr(distributed, "cached_hub_path", lambda hub_id: None)
    config = load_config(
        "grpo", "qwen2.5-vl-3b", overrides=["train.use_vllm=true", "train.vllm_mode=server"]
    )
    lines = distributed.job_setup_lines(config, gpus=2, nodes=1)
    server = next(line for line in lines if " vllm serve " in line)
    flag = "--mm-processor-kwargs "
    assert flag in server
    value = server.split(flag, 1)[1].split("'")[1]
    assert json.loads(value) == {
        "min_pixels": config.model.min_pixels,
        "max_pixels": config.model.max_pixels,
    }


def test_colocate_rows_reach_vllm_with_one_image_token_and_the_recipes_settings(loaded):
    """The wrapper at TRL's ``vllm_generation.llm.generate`` (train/vllm_prompts.py): a row with an
    image gets its run of image tokens back to one, and the recipe's processor settings; a text
    row and a server-mode trainer are left alone. (vLLM's own processing of the result:
    tests/test_vllm_prompts.py, marked index.)"""
    from types import SimpleNamespace

    from vqa_r1.train.vllm_prompts import hand_vllm_unexpanded_prompts

    processor = loaded.processor
    token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    ids = [1, 2, token, token, token, token, 3, token, token, 4]  # two images
    seen: list = []

    class LLM:
        def generate(self, rows, sampling_params=None, use_tqdm=False):
            seen.extend(rows)
            return rows

    settings = {"min_pixels": 3136, "max_pixels": 12544}
    trainer = SimpleNamespace(vllm_generation=SimpleNamespace(mode="colocate", llm=LLM()))
    assert hand_vllm_unexpanded_prompts(trainer, loaded.adapter, processor, settings)
    image_row = {"prompt_token_ids": ids, "multi_modal_data": {"image": _big_image()}}
    text_row = {"prompt_token_ids": [5, 6]}
    trainer.vllm_generation.llm.generate([image_row, text_row], sampling_params=None)
    assert seen[0]["prompt_token_ids"] == [1, 2, token, 3, token, 4]
    assert seen[0]["mm_processor_kwargs"] == settings
    assert seen[1] == text_row and image_row["prompt_token_ids"] == ids  # TRL's row unchanged
    server = SimpleNamespace(vllm_generation=SimpleNamespace(mode="server", llm=LLM()))
    assert not hand_vllm_unexpanded_prompts(server, loaded.adapter, processor, settings)
    assert not hand_vllm_unexpanded_prompts(SimpleNamespace(), loaded.adapter, processor, {})

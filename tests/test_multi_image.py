"""Rows with several images: the JSONL format, placeholders, checks before queueing, every tiny
family trained and evaluated on two-image questions, vLLM's limits, blind controls, the judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli import main as cli_main
from vqa_r1.cli.launch import main as launch_main
from vqa_r1.data.prompts import content_parts

FAMILIES = [
    "tiny-qwen2.5-vl-pretrained",
    "tiny-qwen3-vl-pretrained",
    "tiny-internvl-pretrained",
    "tiny-smolvlm-pretrained",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """A small two-image folder as `vqa-r1 data two-image` writes it (multi-image JSONL)."""
    from vqa_r1.data.two_image import write_two_image

    return write_two_image(tmp_path_factory.mktemp("pairs") / "two", train=8, validation=0, test=4)


def _jsonl(folder: Path, rows: list[dict], image: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "a.png").write_bytes(image.read_bytes())
    return folder


def test_placeholders_put_each_image_where_the_question_says_in_order():
    parts = content_parts("Left: <image> right: <image> Same colour? Answer.", 2)
    assert [p["type"] for p in parts] == ["text", "image", "text", "image", "text"]
    assert [p["text"] for p in parts if p["type"] == "text"] == [
        "Left:",
        "right:",
        "Same colour? Answer.",
    ]
    # no placeholder: the images first, in order (TRL's convention), then the text
    assert [p["type"] for p in content_parts("Same colour?", 2)] == ["image", "image", "text"]
    with pytest.raises(ValueError, match="2 <image> placeholder"):
        content_parts("<image> and <image>", 3)


def test_two_image_generator_needs_both_images(pairs):
    from vqa_r1.data.datasets import load_split

    ds = load_split(pairs, "train", images_per_row=2)
    assert all(len(p) == 2 for p in ds["image_paths"])
    assert all(q.count("<image>") == 2 for q in ds["problem"])
    for row in ds:  # the reasoning's last line names the two end colours: equal iff True
        first, second = row["reasoning"].rsplit(": ", 1)[1].rstrip(".").split(", ")
        assert (first == second) == bool(row["label"])
    # half True by construction, drawn before either image (so one image alone says nothing)
    import random

    from vqa_r1.data.two_image import make_pair, scene_config

    rng, cfg = random.Random(0), scene_config()
    labels = [make_pair(rng, cfg, 17)[3] for _ in range(200)]
    assert 80 < sum(labels) < 120


def test_two_image_reasoning_uses_only_words_of_the_pretraining_targets(pairs):
    """The tiny models' output layers learned only the curriculum's target words: a label such as
    "first:" kept a probability of 0.03 a token after SFT, and sampled GRPO completions turned
    it into byte noise (data/two_image.py)."""
    import re

    from vqa_r1.data.curriculum import CurriculumConfig, generate_examples
    from vqa_r1.data.datasets import load_split

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]+", text.lower()))

    known = set().union(*(words(e.target) for e in generate_examples(400, CurriculumConfig(), "")))
    used = set().union(
        *(words(r) for r in load_split(pairs, "train", images_per_row=2)["reasoning"])
    )
    assert used and used <= known, sorted(used - known)


def test_data_two_image_writes_the_folder_and_keeps_a_users_files(tmp_path):
    out = tmp_path / "two"
    ran = run_in_process(cli_main, ["data", "two-image", "--out", str(out), "--train", "3",
                                    "--validation", "1", "--test", "2"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "wrote 6 two-image questions" in ran.stdout
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["images"]) == 2 for r in rows)
    assert all((out / p).is_file() for r in rows for p in r["images"])
    seeded = tmp_path / "seeded"
    ran = run_in_process(cli_main, ["data", "two-image", "--out", str(seeded), "--train", "3",
                                    "--validation", "0", "--test", "0", "--seed", "1"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    other = [json.loads(line) for line in (seeded / "train.jsonl").read_text().splitlines()]
    assert [r["reasoning"] for r in other] != [r["reasoning"] for r in rows]  # --seed draws anew
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    ran = run_in_process(cli_main, ["data", "two-image", "--out", str(mine), "--train", "1"])
    assert ran.returncode == 2 and "files this suite did not write" in ran.stderr
    assert (mine / "notes.txt").read_text() == "mine"


def test_a_row_whose_images_do_not_match_its_placeholders_is_refused_before_queueing(
    tmp_path, pairs
):
    image = pairs / "images" / "train-00000-a.png"
    rows = [
        {"images": ["a.png", "a.png"], "question": "<image> vs <image>?", "label": True},
        {"images": ["a.png"], "question": "<image> vs <image>?", "label": False},
    ]
    folder = _jsonl(tmp_path / "bad", rows, image)
    ran = run_in_process(launch_main, ["sft", "--model", "tiny-qwen2.5-vl-pretrained",
                                       "--dataset", str(folder), "--set", "data.images_per_row=2",
                                       "--dry-run"])  # fmt: skip
    assert ran.returncode == 2
    assert f"{folder / 'train.jsonl'}: row 2: 1 image(s) and 2 <image> placeholder(s)" in ran.stderr
    assert not list(tmp_path.glob("bad/.vqa_r1/*/hf")), "a refused release leaves no cache"
    # more images than data.images_per_row: refused too, naming the setting
    ran = run_in_process(launch_main, ["sft", "--model", "tiny-qwen2.5-vl-pretrained",
                                       "--dataset", str(pairs), "--dry-run"])  # fmt: skip
    assert ran.returncode == 2
    assert "row 0 has 2 images, more than data.images_per_row=1" in ran.stderr
    assert "--set data.images_per_row=2" in ran.stderr


def test_a_saved_dataset_row_is_checked_against_its_placeholders(tmp_path, pairs):
    from datasets import Dataset

    from vqa_r1.data.datasets import load_split
    from vqa_r1.errors import UserError

    image = str(pairs / "images" / "train-00000-a.png")
    Dataset.from_dict(
        {
            "image_paths": [[image, image], [image]],
            "caption": ["<image> <image> same?", "<image> <image> same?"],
            "label": [1, 0],
        }
    ).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(UserError, match=r"row 1 has 1 image\(s\) and 2 <image> placeholder"):
        load_split(tmp_path / "saved", "train")


@pytest.mark.slow
@pytest.mark.parametrize("model", FAMILIES)
def test_two_image_jsonl_trains_sft_and_grpo_and_evaluates_on_every_tiny_family(
    model, pairs, tmp_path
):
    """SFT, GRPO continuing it, and evaluation, as a user types them; each prompt the model saw
    held one image block per image (counted on the processor's own ids)."""
    common = ["--model", model, "--dataset", str(pairs), "--set", "data.images_per_row=2"]
    sft = tmp_path / "sft"
    ran = run_in_process(cli_main, ["sft", *common, "--output-dir", str(sft),
                                    "--set", "train.max_steps=2",
                                    "--set", "train.per_device_train_batch_size=2"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    grpo = tmp_path / "grpo"
    ran = run_in_process(cli_main, ["grpo", *common, "--output-dir", str(grpo),
                                    "--init-adapter", str(sft / "final"),
                                    "--set", "train.max_steps=1",
                                    "--set", "train.per_device_train_batch_size=4",
                                    "--set", "train.num_generations=2",
                                    "--set", "train.max_completion_length=16"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads((grpo / "status.json").read_text())["state"] == "COMPLETED"
    out = tmp_path / "eval"
    ran = run_in_process(cli_main, ["evaluate", *common, "--adapter", str(grpo / "final"),
                                    "--output-dir", str(out),
                                    "--set", "eval.max_new_tokens=8"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    scores = json.loads((out / "scores.json").read_text())
    assert scores["n"] == 4
    records = json.loads((out / "generated_responses.json").read_text())
    assert all(r["question"].count("<image>") == 2 for r in records)

    from PIL import Image

    from vqa_r1.models.generation import GenerationSettings, Generator
    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    loaded = load_model(load_config("evaluate", model, overrides=["data.images_per_row=2"]))
    gen = Generator(loaded, GenerationSettings(max_new_tokens=4))
    images = [[Image.open(pairs / "images" / f"test-0000{i}-{k}.png") for k in "ab"]
              for i in range(2)]  # fmt: skip
    inputs = gen._inputs(images, [records[0]["question"], records[1]["question"]])
    token = loaded.adapter.image_token_id(loaded.processor)
    for ids in inputs["input_ids"].tolist():
        kept = [t for t in ids if t != loaded.processor.tokenizer.pad_token_id]
        assert loaded.adapter.unexpanded_ids(kept, loaded.processor).count(token) == 2


def test_vllm_is_told_the_images_per_row(monkeypatch):
    """Colocate: TRL's LLM(...) gets limit_mm_per_prompt while the trainer is built (and only
    then); server mode: the server's command line (launch/distributed.py)."""
    from trl.generation import vllm_generation

    from vqa_r1.train.vllm_prompts import colocated_engine_limits

    made = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kw: made.append(kw), raising=False)
    before = vllm_generation.LLM
    with colocated_engine_limits(2):
        vllm_generation.LLM(model="m")
    assert made == [{"model": "m", "limit_mm_per_prompt": {"image": 2, "video": 0}}]
    assert vllm_generation.LLM is before

    from vqa_r1.launch.distributed import job_setup_lines
    from vqa_r1.recipes import load_config

    config = load_config("grpo", "qwen3-vl-4b", overrides=[
        "train.use_vllm=true", "train.vllm_mode=server", "data.images_per_row=2",
        "resources.gpus=2"])  # fmt: skip
    script = "\n".join(job_setup_lines(config, 2, 1))
    assert """--limit-mm-per-prompt '{"image": 2, "video": 0}'""" in script
    assert """--mm-processor-kwargs '{"max_pixels": 524288, "min_pixels": 4096}'""" in script


def test_blind_controls_blank_or_shuffle_every_image_of_a_row(pairs):
    from PIL import Image

    from vqa_r1.data.blind import blind_split
    from vqa_r1.data.datasets import load_split

    ds = load_split(pairs, "train", images_per_row=2)
    blank = blind_split(ds, "blank", 0)
    for row in blank["image_paths"]:
        assert len(row) == 2
        for p in row:
            with Image.open(p) as img:
                assert img.getextrema() == ((128, 128), (128, 128), (128, 128))
    shuffled = blind_split(ds, "shuffled", 0)
    assert sorted(map(tuple, shuffled["image_paths"])) == sorted(map(tuple, ds["image_paths"]))
    assert all(a != b for a, b in zip(shuffled["image_paths"], ds["image_paths"], strict=True))


def test_the_judge_reads_each_image_by_its_place():
    from vqa_r1.data.prompts import numbered_placeholders

    assert numbered_placeholders("First: <image> second: <image> same?") == (
        "First: [image 1] second: [image 2] same?"
    )


def test_prompt_tuning_refuses_rows_with_several_images(pairs, tmp_path):
    ran = run_in_process(cli_main, ["prompt-tune", "--model", "tiny-qwen2.5-vl-pretrained",
                                    "--output-dir", str(tmp_path / "pt"),
                                    "--set", f"data.dataset={pairs}"])  # fmt: skip
    assert ran.returncode == 2
    assert "prompt tuning takes one image per row" in ran.stderr
    assert not (tmp_path / "pt").exists()


def test_the_memory_plan_counts_every_image_of_a_row():
    from vqa_r1.models.memory_plan import plan
    from vqa_r1.recipes import load_config

    one = plan(load_config("grpo", "qwen3-vl-4b"))
    two = plan(load_config("grpo", "qwen3-vl-4b", overrides=["data.images_per_row=2"]))
    assert one.image_tokens == two.image_tokens == 512  # per image, at the recipe's budget
    acts = (
        {t.name: t for t in one.terms}["activations"],
        {t.name: t for t in two.terms}["activations"],
    )
    assert "1124 tokens" in acts[0].how and "1636 tokens" in acts[1].how
    assert acts[1].bytes > acts[0].bytes


def test_an_experiment_on_the_two_image_questions_reads_two_images_a_row(tmp_path, monkeypatch):
    """`--set experiment.dataset=two-image` (the README's demo variant): the generator's folder,
    and every run reads two images a row, so vLLM and the memory plan are told so."""
    monkeypatch.chdir(tmp_path)
    ran = run_in_process(launch_main, ["experiment", "demo", "--model", "tiny-qwen2.5-vl-pretrained",
                                       "--set", "experiment.dataset=two-image", "--dry-run"])  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "# data: two-image questions (multi-image JSONL):" in ran.stdout
    processors = [ln for ln in ran.stdout.splitlines() if ln.startswith("# processor:")]
    assert processors and all("images per row 2" in ln for ln in processors)
    assert '"limit_mm_per_prompt": {"image": 2, "video": 0}' in ran.stdout
    # the tiny settings set on the validation pairs: GRPO rewards the answer and each reading,
    # 16 samples at 1.0 of 4 pairs a step
    grpo = [
        ln
        for ln in ran.stdout.splitlines()
        if "reward_funcs: [accuracy, format, reasoning_steps]" in ln
    ]
    assert len(grpo) == 2  # grpo and sft+grpo
    for ln in grpo:
        for setting in ("temperature: 1.0,", "max_steps: 300,", "learning_rate: 0.0002,",
                        "max_completion_length: 128,", "per_device_train_batch_size: 64,",
                        "num_generations: 16,", "reward_weights: [1.0, 0.5, 1.0]"):  # fmt: skip
            assert setting in ln, (setting, ln)
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_each_image_of_a_row_is_fitted_to_the_trainers_budget_for_vllm(pairs):
    """GRPO with vLLM resizes every image of a row (not the first alone) to what the trainer's
    processor makes of it: Qwen3-VL's 32 px units under the tiny model's budget."""
    from vqa_r1.data.datasets import load_split, trainer_rows
    from vqa_r1.models.loading import load_model
    from vqa_r1.train.runner import fit_images

    loaded = load_model(load_config_for("tiny-qwen3-vl-pretrained"))
    rows = trainer_rows(load_split(pairs, "train", images_per_row=2), loaded.adapter, "grpo")
    fitted = fit_images(rows.select(range(2)), loaded)
    for row in fitted:
        assert len(row["images"]) == 2
        assert all(img.size == (128, 128) for img in row["images"])  # 112 px -> 4 x 4 units


def load_config_for(model: str):
    from vqa_r1.recipes import load_config

    return load_config("grpo", model, overrides=["data.images_per_row=2"])

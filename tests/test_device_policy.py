"""One device policy outside Trainers (models/device.py), image budgets per family, the cache
self-check's tolerance of near-ties, evaluation budgets, and one task per evaluation job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vqa_r1.errors import UserError
from vqa_r1.models.device import resolve_device

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch reports one CUDA device (this machine has none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")


def test_auto_picks_cuda_when_torch_sees_it_and_cpu_otherwise(monkeypatch, fake_gpu, caplog):
    with caplog.at_level("INFO"):
        assert resolve_device("auto") == "cuda:0"
    assert "device: cuda:0 (Fake GPU)" in caplog.text
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(UserError, match="sees 1 CUDA device"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"


@pytest.mark.slow
def test_cuda_asked_for_without_cuda_fails_at_once_through_the_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "evaluate", "--model", "tiny-qwen2.5-vl",
         "--set", "model.device=cuda", "--output-dir", str(tmp_path / "ev")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode != 0
    assert "model.device=cuda: torch sees no usable CUDA device" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "ev" / "scores.json").exists()
    bad = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "evaluate", "--model", "tiny-qwen2.5-vl",
         "--set", "model.device=gpu", "--output-dir", str(tmp_path / "ev2")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert bad.returncode != 0 and "model.device: 'gpu' is not auto, cpu, cuda" in bad.stderr


@pytest.mark.slow
def test_evaluate_places_model_and_inputs_on_the_resolved_device(tmp_path, monkeypatch, fake_gpu):
    """With a (faked) GPU, the weights are loaded onto it, in bfloat16, the inputs follow, and
    scores.json says where it ran. The placement itself is recorded, then done on the CPU."""
    import transformers
    from transformers.feature_extraction_utils import BatchFeature

    from vqa_r1.eval.evaluate import evaluate
    from vqa_r1.recipes import load_config

    placed, moved = [], []
    original = transformers.AutoModelForImageTextToText.from_pretrained.__func__

    def from_pretrained(cls, path, **kwargs):
        placed.append((kwargs.pop("device_map", None), kwargs["dtype"]))
        return original(cls, path, **kwargs)

    monkeypatch.setattr(
        transformers.AutoModelForImageTextToText, "from_pretrained", classmethod(from_pretrained)
    )
    to = BatchFeature.to

    def record_to(self, *args, **kwargs):
        moved.append(str(args[0] if args else kwargs.get("device")))
        return to(self, "cpu")

    monkeypatch.setattr(BatchFeature, "to", record_to)
    config = load_config(
        "evaluate",
        "tiny-qwen2.5-vl",
        overrides=[
            "eval.limit=2",
            "eval.max_new_tokens=4",
            "model.generation_cache=on",
            "model.dtype=auto",
        ],
    )
    scores = evaluate(config, tmp_path / "ev", progress=False)
    assert placed == [("cuda:0", torch.bfloat16)]
    assert moved and set(moved) == {"cuda:0"}
    assert scores["device"] == "cuda:0"
    assert json.loads((tmp_path / "ev" / "scores.json").read_text())["device"] == "cuda:0"


# ------------------------------------------------------------------------ generation cache check


def _logits(*rows: list[float], dtype=torch.bfloat16) -> torch.Tensor:
    return torch.tensor([rows], dtype=dtype)  # 1 x steps x vocab


def test_cache_check_excuses_near_ties_and_catches_clear_differences():
    from vqa_r1.models.generation import compare_greedy

    cached = _logits([20.0, 19.9, 1.0], [5.0, 1.0, 0.0])
    # the first step's two best tokens swap within bfloat16 rounding of a logit of 20
    uncached = _logits([19.9, 20.0, 1.0], [5.0, 1.0, 0.0])
    check = compare_greedy(cached, uncached)
    assert check["agree"] and check["near_ties"] == 1 and check["differ"] == 0
    # a cache that picks a token the uncached pass rates clearly lower
    broken = _logits([20.0, 19.9, 1.0], [0.0, 1.0, 5.0])
    check = compare_greedy(broken, uncached)
    assert not check["agree"] and check["differ"] == 1
    # in float32 the same swap is no near-tie: rounding there is 65,000 times finer
    assert not compare_greedy(*(t.float() for t in (cached, uncached)))["agree"]
    # a bfloat16 model's logits upcast to float32: the model's rounding decides
    check = compare_greedy(cached.float(), uncached.float(), torch.bfloat16)
    assert check["agree"] and check["dtype"] == "bfloat16"


# ------------------------------------------------------------------------ image budgets, recipes


def _image_tokens(loaded, size) -> int:
    from PIL import Image

    processor = loaded.processor
    text = processor.apply_chat_template(
        loaded.adapter.messages("q", image=True), add_generation_prompt=True
    )
    ids = processor(text=[text], images=[[Image.new("RGB", size)]], return_tensors="pt")
    return int((ids["input_ids"] == loaded.adapter.image_token_id(processor)).sum())


@pytest.mark.parametrize(
    ("name", "splitting"),
    [
        ("tiny-smolvlm", ["model.image_splitting=true", "model.image_longest_edge=224"]),
        ("tiny-internvl", ["model.image_splitting=true", "model.max_image_tiles=4"]),
    ],
)
def test_image_splitting_settings_reach_the_processor(name, splitting):
    """The tiny models do not split; the same settings as the real recipes' make them tile."""
    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    plain = load_model(load_config("evaluate", name))
    tiled = load_model(load_config("evaluate", name, overrides=splitting))
    one = _image_tokens(plain, (300, 200))
    assert _image_tokens(tiled, (300, 200)) > 2 * one  # several tiles and a global view


def test_an_image_setting_another_family_reads_is_refused():
    from vqa_r1.recipes import load_config

    with pytest.raises(UserError, match="model.image_longest_edge: the qwen2_5_vl processor"):
        load_config("evaluate", "tiny-qwen2.5-vl", overrides=["model.image_longest_edge=1024"])
    with pytest.raises(UserError, match="model.max_pixels: the smolvlm processor"):
        load_config("evaluate", "tiny-smolvlm", overrides=["model.max_pixels=401408"])


def test_real_models_recipes_set_their_image_budget_alike_for_every_verb():
    from vqa_r1.models.adapters import get_adapter, image_options
    from vqa_r1.models.registry import MODELS
    from vqa_r1.recipes import load_config

    for name, spec in MODELS.items():
        if spec.tiny:
            continue
        budgets = []
        for verb in ("sft", "grpo", "evaluate"):
            options = image_options(load_config(verb, name).model)
            read = {k: v for k, v in options.items() if k in get_adapter(spec.family).image_options}
            assert any(v is not None for v in read.values()), (name, verb)
            budgets.append(options)
        assert budgets[0] == budgets[1] == budgets[2], name


def test_evaluation_generates_at_least_what_grpo_trained_with():
    from vqa_r1.models.registry import MODELS
    from vqa_r1.recipes import load_config

    for name in MODELS:
        grpo = load_config("grpo", name).train.max_completion_length
        assert load_config("evaluate", name).eval.max_new_tokens >= grpo, name


# ------------------------------------------------------------------------ one task per evaluation


def test_evaluate_with_two_gpus_dry_run_asks_for_one_task_on_one_gpu(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "slurm" / "launch.py"), "evaluate", "--model", "qwen2.5-vl-3b",
         "--gpus", "2", "--nodes", "2", "--dry-run", "--output-dir", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-1000:]
    assert "note: evaluate runs one process on one GPU" in out.stderr
    for line in ("#SBATCH --gpus-per-node=1", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1"):
        assert line in out.stdout


def test_merge_and_pretrain_jobs_run_one_task(tmp_path, monkeypatch):
    from vqa_r1.launch.build import RunSpec, job_graph, pretrain_graph
    from vqa_r1.launch.request import JobOptions
    from vqa_r1.train.pretrain import PretrainConfig

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    monkeypatch.setattr("vqa_r1.launch.build.missing_model", lambda config: None)
    spec = RunSpec("merge", "qwen2.5-vl-3b", output_dir=str(tmp_path / "m"), adapter=str(adapter))
    job = JobOptions(gpus=2, nodes=2, dry_run=True)
    graph, config = job_graph(spec, job)
    request = graph.steps[0].request
    assert (
        (request.resources.gpus, request.resources.nodes)
        == (1, 1)
        == (
            config.resources.gpus,
            config.resources.nodes,
        )
    )
    request = pretrain_graph(PretrainConfig(), str(tmp_path / "p"), None, job).steps[0].request
    assert request.resources.processes_per_node == 1 and request.resources.nodes == 1

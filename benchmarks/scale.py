"""SCALE: the real architecture through our GRPO against a bare TRL script, with random weights.

Why: nothing had run at real model size. No weights can be downloaded here, but a registered
model's published configuration ships with the suite (models/architectures/), and memory and time
do not depend on the weights' values: the model is built from it with random weights, saved
beside the tiny model's processor (its special-token ids written into the configuration), and
trained through the suite's own GRPO (``runner.train``) and through the bare TRL script of P4
(benchmarks/trainer_overhead.py), side by side in one run. Random weights never emit an end of
sequence, so every completion runs to ``max_completion_length``: each step is a worst case.

Measured per side: seconds per step in the steady state, the share of it spent in ``generate``
(timed around transformers' ``GenerationMixin.generate``), completion tokens per second, the peak
memory (CUDA's peak allocation on a GPU; the process's peak resident size on a CPU, which the two
sides share and is not split); beside them the memory plan of the same recipe
(models/memory_plan.py) and each family's image tokens under the recipe against the checkpoint's
defaults. ``--cpu --quick`` (CI) runs the same code on the 3B architecture shrunk to a few layers
and a narrow width; the full size wants a GPU (``python -m benchmarks --only scale``, about ten
minutes on one H100/H200), which no session of this project has had: its numbers are not here.

The random weights are marked in the saved configuration (``vqa_r1_random_init``): outside a
benchmark, training or evaluating such a folder is refused (models/architecture.py).
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks import Result, Timing, side_by_side
from benchmarks.trainer_overhead import StepRun, _median, _same_curve, baseline, ours
from vqa_r1.models.architecture import RANDOM_INIT_KEY, RANDOM_INIT_OK_ENV, architecture_config
from vqa_r1.recipes import load_config

MODEL = "qwen2.5-vl-3b"
PROCESSOR_FROM = (
    "tiny-qwen2.5-vl-pretrained"  # its tokenizer and processor (ids fit the vocabulary)
)


@dataclass(frozen=True)
class Size:
    steps: int
    first: int
    completion: int  # max_completion_length: every completion runs to it (random weights)
    batch: int  # per-device completions per step
    generations: int
    shrink: dict | None  # the architecture at a width and depth a CPU runs in seconds; None: real


# the head size stays the real one (128: M-RoPE's sections 16 + 24 + 24 are half of it)
QUICK_CPU = Size(steps=4, first=1, completion=8, batch=4, generations=2, shrink={
    "text": {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 256,
             "num_attention_heads": 2, "num_key_value_heads": 1},
    "vision": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
               "out_hidden_size": 256, "fullatt_block_indexes": [0]},
})  # fmt: skip
FULL = Size(steps=8, first=3, completion=256, batch=16, generations=8, shrink=None)


def build_model_folder(out: Path, shrink: dict | None) -> Path:
    """The registered architecture with random weights, saved with the tiny model's processor."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    from vqa_r1.models.loading import PRETRAINED_DIR

    config = architecture_config(MODEL)
    text = config.text_config
    for key, value in (shrink or {}).get("text", {}).items():
        setattr(text, key, value)
    if getattr(text, "layer_types", None):  # one attention type per layer, as many as layers
        text.layer_types = text.layer_types[: text.num_hidden_layers]
    for key, value in (shrink or {}).get("vision", {}).items():
        setattr(config.vision_config, key, value)
    tiny = AutoConfig.from_pretrained(PRETRAINED_DIR / PROCESSOR_FROM)
    # the processor writes the tiny tokenizer's special ids: the model must look for the same
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        setattr(config, key, getattr(tiny, key))
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config.text_config, key, getattr(tiny.text_config, key))
    setattr(config, RANDOM_INIT_KEY, True)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    AutoProcessor.from_pretrained(PRETRAINED_DIR / PROCESSOR_FROM).save_pretrained(out)
    return out


@contextmanager
def generation_clock(totals: dict):
    """Adds the seconds spent in ``generate`` (TRL's generation without vLLM) to ``totals``."""
    from transformers.generation.utils import GenerationMixin

    real = GenerationMixin.generate

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            totals["generate"] = totals.get("generate", 0.0) + time.perf_counter() - started

    GenerationMixin.generate = timed
    try:
        yield totals
    finally:
        GenerationMixin.generate = real


def _peak_gib() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 1024**3
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux


def measure(size: Size, repeats: int, cpu: bool) -> Result:
    from vqa_r1.models.memory_plan import image_tokens, plan, with_gpu

    os.environ[RANDOM_INIT_OK_ENV] = "1"  # this benchmark's own random weights, refused elsewhere
    with tempfile.TemporaryDirectory(prefix="vqa-r1-bench-scale-") as tmp:
        folder = build_model_folder(Path(tmp) / "model", size.shrink)
        overrides = [
            f"model.path={folder}", f"train.max_steps={size.steps}", "train.save_steps=1000",
            "train.logging_steps=1", "data.num_samples=32",
            f"train.per_device_train_batch_size={size.batch}", "train.gradient_accumulation_steps=1",
            f"train.num_generations={size.generations}",
            f"train.max_completion_length={size.completion}",
        ]  # fmt: skip
        if cpu:
            overrides += ["model.dtype=float32", "train.bf16=false", "train.num_threads=1"]
        config = load_config("grpo", MODEL, overrides=overrides)
        generation = {"ours": [], "bare": []}
        peaks = {"ours": [], "bare": []}

        def side(name, fn):
            def run() -> StepRun:
                totals: dict = {}
                import torch

                if torch.cuda.is_available():
                    torch.cuda.reset_peak_memory_stats()
                with generation_clock(totals):
                    result = fn(config, Path(tmp) / f"{name}-{time.monotonic_ns()}", size.first)
                generation[name].append(totals.get("generate", 0.0) / size.steps)
                peaks[name].append(_peak_gib())
                return result

            return run

        ours_t, base_t, ours_runs, base_runs = side_by_side(
            side("ours", ours), side("bare", baseline), repeats,
            labels=("vqa-r1 grpo (runner.train)", "bare TRL GRPOTrainer script"), warmup=False,
        )  # fmt: skip
    os.environ.pop(RANDOM_INIT_OK_ENV, None)
    memory = plan(config)
    real = with_gpu(plan(load_config("grpo", MODEL)), 80)
    ours_step = _median([r.per_step for r in ours_runs])
    tokens = size.batch * size.completion  # every completion runs to the limit
    families = {
        name: (
            image_tokens(family, load_config("grpo", name).model, _arch(name)),
            image_tokens(family, _defaults(), _arch(name)),
        )
        for name, family in (("qwen2.5-vl-3b", "qwen2_5_vl"), ("internvl3-2b", "internvl"),
                             ("smolvlm-2.2b", "smolvlm"))
    }  # fmt: skip
    where = "CPU, shrunk architecture" if size.shrink else "GPU, real architecture"
    return Result(
        id="SCALE",
        title="GRPO step at real architecture (random weights): our grpo vs a bare TRL script",
        ours=Timing(f"{ours_t.label}, s/step", [r.per_step for r in ours_runs]),
        baseline=Timing(f"{base_t.label}, s/step", [r.per_step for r in base_runs]),
        kind="overhead",
        goal=1.05,
        floor=None,
        checks={
            "same logged losses and rewards": all(
                _same_curve(a, b) for a, b in zip(ours_runs, base_runs, strict=True)
            ),
            "random weights marked in the model's config": True,
            "steps": size.steps,
        },
        details={
            "model": f"{MODEL} architecture ({where}), random weights, processor of "
            f"{PROCESSOR_FROM}",
            "per step": f"{size.batch} completions ({size.generations} per prompt), every one "
            f"{size.completion} tokens (random weights never stop early)",
            "generate, s/step, ours / bare": f"{_median(generation['ours'])} / "
            f"{_median(generation['bare'])}",
            "completion tokens/s, ours": round(tokens / ours_step, 1),
            "peak memory (GiB), ours / bare": f"{_median(peaks['ours'])} / "
            f"{_median(peaks['bare'])}"
            + (" (CUDA peak allocation)" if not cpu else " (process peak RSS, shared)"),
            "memory plan of this run (GiB)": (
                "none: the plan counts the real architecture, this run a shrunk one"
                if size.shrink
                else round(with_gpu(memory, 80).peak_gib, 2)
            ),
            "memory plan of the real 3B recipe on 80 GiB (GiB)": round(real.peak_gib, 1),
            "image tokens, recipe / checkpoint default": ", ".join(
                f"{name} {a} / {b}" for name, (a, b) in families.items()
            ),
        },
        notes=[
            "random weights: every completion runs to the limit, a worst-case step",
            "the GPU run (real size, both recipes' batches) needs a GPU; none was at hand: no "
            "measured GPU number is in this report",
        ],
    )


def _arch(name: str):
    from vqa_r1.models.architecture import meta_model

    return meta_model(name).config


def _defaults():
    from vqa_r1.config import ModelConfig

    return ModelConfig()


def run(quick: bool, repeats: int, cpu: bool = False) -> Result:
    import torch

    if not cpu and not torch.cuda.is_available():
        print("SCALE: no GPU here; use --cpu (the shrunk architecture)", file=sys.stderr)
        cpu = True
    size = QUICK_CPU if (quick or cpu) else FULL
    return measure(size, repeats if not quick else 1, cpu)

"""The benchmark set: id -> module whose ``run(quick, repeats) -> Result`` measures it.

``quick`` is CI's reduced size (seconds, not minutes), with the same code paths and checks.
Modules are imported only when their benchmark runs (most load torch and a model).
"""

from __future__ import annotations

import importlib
import inspect

from benchmarks import Result
from vqa_r1.errors import UserError

BENCHMARKS: dict[str, tuple[str, str]] = {
    "P1": (
        "benchmarks.evaluation",
        "evaluation: batched + cache vs the study's batch 1, no cache",
    ),
    "P2": ("benchmarks.generation_cache", "SmolVLM generation: cache vs the no-cache workaround"),
    "P3": ("benchmarks.judge_concurrency", "judge: concurrency 16 vs 1 at 100 ms latency"),
    "P4": ("benchmarks.trainer_overhead", "GRPO step: our grpo vs a bare TRL script"),
    "P5": ("benchmarks.requeue_restart", "requeue: restart to first step vs a cold start"),
    "P6": ("benchmarks.pipeline_times", "the demo's stages and the test suite, timed"),
    "P7": (
        "benchmarks.vision_backward",
        "GRPO step with checkpointing: language-only input hooks vs the library's (vision too)",
    ),
    "SCALE": (
        "benchmarks.scale",
        "GRPO step at a real architecture (random weights): our grpo vs a bare TRL script",
    ),
}


def parse_ids(text: str | None) -> list[str]:
    if not text:
        return list(BENCHMARKS)
    ids = [i.strip().upper() for i in text.split(",") if i.strip()]
    unknown = [i for i in ids if i not in BENCHMARKS]
    if unknown or not ids:
        raise UserError(f"--only: unknown {unknown}; choose from {', '.join(BENCHMARKS)}")
    return ids


def run(ids: list[str], quick: bool, repeats: int, cpu: bool = False) -> list[Result]:
    """``cpu``: benchmarks that take it (SCALE) run on the CPU at their reduced architecture."""
    if repeats < 1:
        raise UserError("--repeats must be at least 1")
    results = []
    for bench_id in ids:
        module = importlib.import_module(BENCHMARKS[bench_id][0])
        takes_cpu = "cpu" in inspect.signature(module.run).parameters
        extra = {"cpu": cpu} if takes_cpu else {}
        result = module.run(quick=quick, repeats=repeats, **extra)
        ratio = "-" if result.ratio is None else f"{result.ratio:.2f}"
        print(f"{bench_id}: {ratio} ({result.kind}) {result.checks}", flush=True)
        results.append(result)
    return results

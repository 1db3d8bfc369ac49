"""Judge throughput at concurrency N vs 1 against the loopback server (``scripts/bench_judge.py``).

The judge is latency-bound (a real endpoint takes seconds per verdict), so throughput should grow
almost linearly with concurrency until the server pushes back; this measures our side of that
claim with the real client, retry and cache code paths, in a few seconds and without a network.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from vqa_r1.judge.batch import BatchJudge
from vqa_r1.judge.cache import VerdictCache
from vqa_r1.judge.client import OpenAIJudgeClient, RetryPolicy
from vqa_r1.judge.cost import Budget
from vqa_r1.judge.loopback import LoopbackOpenAI
from vqa_r1.judge.prompts import load_prompt
from vqa_r1.judge.responses import JudgeItem


def synthetic_items(n: int, tag: str) -> list[JudgeItem]:
    return [
        JudgeItem(
            index=i,
            model="bench",
            question=f"The cat {tag} {i} is on the mat.",
            true_label="True",
            response="The cat sits on the mat.\nAnswer: True",
            reasoning="The cat sits on the mat.",
            final_ans="True",
        )
        for i in range(n)
    ]


def throughput(server: LoopbackOpenAI, concurrency: int, items: int, cache_dir: Path) -> float:
    """Judged items per second through the full batch path (a fresh cache: every item requested)."""
    batch = BatchJudge(
        template=load_prompt("taxonomy"),
        judge_model="loopback",
        cache=VerdictCache(cache_dir / f"c{concurrency}"),
        budget=Budget(prices=None),
        concurrency=concurrency,
        progress_every=3600,
        client_factory=lambda: OpenAIJudgeClient(
            "loopback", server.base_url, "EMPTY", timeout=10, policy=RetryPolicy(base_delay=0.01)
        ),
    )
    report = batch.run(synthetic_items(items, f"c{concurrency}"))
    if report.judged != items:
        raise RuntimeError(f"benchmark: only {report.judged}/{items} judged: {report.summary()}")
    return items / report.elapsed


@dataclass(frozen=True)
class BenchResult:
    latency: float
    concurrency: int
    serial: float  # items per second at concurrency 1
    parallel: float  # items per second at ``concurrency``

    @property
    def ratio(self) -> float:
        return self.parallel / self.serial

    def describe(self) -> str:
        return (
            f"latency {self.latency * 1000:.0f} ms: concurrency 1 {self.serial:.1f} items/s, "
            f"concurrency {self.concurrency} {self.parallel:.1f} items/s, ratio {self.ratio:.1f}x"
        )


def compare(
    latency: float = 0.1, items_serial: int = 24, items_parallel: int = 160, concurrency: int = 16
) -> BenchResult:
    """Throughput at ``concurrency`` and at 1 against one loopback server of ``latency`` seconds."""
    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(latency=latency) as server:
        throughput(server, 1, 3, Path(tmp) / "warm-up")  # imports and first connection
        serial = throughput(server, 1, items_serial, Path(tmp))
        parallel = throughput(server, concurrency, items_parallel, Path(tmp))
    return BenchResult(latency, concurrency, serial, parallel)

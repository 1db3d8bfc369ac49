#!/usr/bin/env python
"""Judge throughput at concurrency 16 vs 1 against the loopback server at 100 ms latency.

The judge is latency-bound (a real endpoint takes seconds per verdict), so throughput should grow
almost linearly with concurrency until the server pushes back; this measures our side of that
claim with the real client, retry and cache code paths, in a few seconds and without a network.

    .venv/bin/python scripts/bench_judge.py [--latency 0.1] [--items-serial 24] [--items-parallel 160]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "judge"))
sys.path.insert(0, str(ROOT / "src"))

from loopback_server import LoopbackOpenAI  # noqa: E402

from vqa_r1.judge.batch import BatchJudge  # noqa: E402
from vqa_r1.judge.cache import VerdictCache  # noqa: E402
from vqa_r1.judge.client import OpenAIJudgeClient, RetryPolicy  # noqa: E402
from vqa_r1.judge.cost import Budget  # noqa: E402
from vqa_r1.judge.prompts import load_prompt  # noqa: E402
from vqa_r1.judge.responses import JudgeItem  # noqa: E402


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


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="server latency, seconds")
    parser.add_argument("--items-serial", type=int, default=24, help="items at concurrency 1")
    parser.add_argument("--items-parallel", type=int, default=160, help="items at concurrency 16")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(latency=args.latency) as server:
        throughput(server, 1, 3, Path(tmp) / "warm-up")  # imports and first connection
        serial = throughput(server, 1, args.items_serial, Path(tmp))
        parallel = throughput(server, args.concurrency, args.items_parallel, Path(tmp))
    ratio = parallel / serial
    print(f"latency {args.latency * 1000:.0f} ms: concurrency 1 {serial:.1f} items/s, "
          f"concurrency {args.concurrency} {parallel:.1f} items/s, ratio {ratio:.1f}x")  # fmt: skip
    return ratio


if __name__ == "__main__":
    main()

"""P3: the judge at concurrency 16 against concurrency 1, then a re-run that must ask nothing.

The judge is latency-bound (a real endpoint takes seconds per verdict), so time should fall almost
linearly with concurrency until the server pushes back. Both sides judge the same items through
the full batch path (client, retries, cache) against one loopback OpenAI-compatible server of
fixed latency (benchmarks/loopback.py), each run on a fresh cache, so every item is requested; the
server counts what it received. Then the items are judged again on the cache of a concurrency-16
run: a re-run must make zero requests.

The ideal ratio is ``items / ceil(items / concurrency)`` (15.4 for 200 items at 16), less the
client's per-request work, which does not overlap with the server's latency at concurrency 1.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import Result, side_by_side
from benchmarks.loopback import LoopbackOpenAI
from vqa_r1.judge.batch import BatchJudge, BatchReport
from vqa_r1.judge.cache import VerdictCache
from vqa_r1.judge.client import OpenAIJudgeClient, RetryPolicy
from vqa_r1.judge.cost import Budget
from vqa_r1.judge.prompts import load_prompt
from vqa_r1.judge.responses import JudgeItem

ITEMS, LATENCY, CONCURRENCY = 200, 0.1, 16
QUICK_ITEMS, QUICK_LATENCY = 48, 0.05


def synthetic_items(n: int) -> list[JudgeItem]:
    """``n`` distinct items (distinct cache keys); the loopback server judges them all aligned."""
    return [
        JudgeItem(
            index=i,
            model="bench",
            question=f"The cat {i} is on the mat.",
            true_label="True",
            response="The cat sits on the mat.\nAnswer: True",
            reasoning="The cat sits on the mat.",
            final_ans="True",
        )
        for i in range(n)
    ]


@dataclass
class JudgeRun:
    report: BatchReport
    requests: int  # what the server received during the run (retries included)
    cache_dir: Path
    seconds: float

    @property
    def verdicts(self) -> list[tuple[Any, ...]]:
        return [(r["index"], r["aligns"], r["type"]) for r in self.report.records]


def judge_once(
    server: LoopbackOpenAI, concurrency: int, items: list[JudgeItem], cache_dir: Path
) -> JudgeRun:
    """Judge ``items`` through BatchJudge with the cache in ``cache_dir``; count the requests."""
    batch = BatchJudge(
        template=load_prompt("taxonomy"),
        judge_model="loopback",
        cache=VerdictCache(cache_dir),
        budget=Budget(prices=None),
        concurrency=concurrency,
        progress_every=3600,
        client_factory=lambda: OpenAIJudgeClient(
            "loopback", server.base_url, "EMPTY", timeout=10, policy=RetryPolicy(base_delay=0.01)
        ),
    )
    before = server.count()
    started = time.perf_counter()
    report = batch.run(items)
    seconds = time.perf_counter() - started
    if report.judged != len(items):
        raise RuntimeError(f"P3: only {report.judged}/{len(items)} judged: {report.summary()}")
    return JudgeRun(report, server.count() - before, cache_dir, seconds)


def measure(
    items: int = ITEMS,
    latency: float = LATENCY,
    concurrency: int = CONCURRENCY,
    repeats: int = 5,
    goal: float | None = 8.0,
    floor: float | None = 4.0,
) -> Result:
    """Time ``items`` judged at ``concurrency`` and at 1 (interleaved), then the cached re-run."""
    todo = synthetic_items(items)
    with (
        tempfile.TemporaryDirectory(prefix="vqa-r1-bench-p3-") as tmp,
        LoopbackOpenAI(latency=latency) as server,
    ):
        fresh = (Path(tmp) / f"cache-{n}" for n in itertools.count())
        # warm-up on a few items (imports, prompt files, first connection): a full untimed run at
        # concurrency 1 would cost as much as one timed repeat and warm nothing more
        judge_once(server, 1, synthetic_items(2), next(fresh))
        judge_once(server, concurrency, synthetic_items(concurrency), next(fresh))
        ours, base, runs_ours, runs_base = side_by_side(
            lambda: judge_once(server, concurrency, todo, next(fresh)),
            lambda: judge_once(server, 1, todo, next(fresh)),
            repeats,
            labels=(f"concurrency {concurrency}", "concurrency 1"),
            warmup=False,
        )
        rerun = judge_once(server, concurrency, todo, runs_ours[-1].cache_dir)
    requests = sorted({r.requests for r in runs_ours + runs_base})
    rounds = math.ceil(items / concurrency)
    return Result(
        id="P3",
        title=f"judge: {items} items, concurrency {concurrency} vs 1 at {latency * 1000:.0f} ms latency",
        ours=ours,
        baseline=base,
        kind="speedup",
        goal=goal,
        floor=floor,
        checks={
            "requests per run": requests[0] if len(requests) == 1 else requests,
            "re-run requests": rerun.requests,
            "re-run from cache": f"{rerun.report.cached}/{items}",
            "same verdicts at 1 and at concurrency": all(
                r.verdicts == runs_base[0].verdicts for r in runs_ours + runs_base
            ),
        },
        details={
            "items": items,
            "server latency (s)": latency,
            "ideal ratio (items / rounds of concurrent requests)": round(items / rounds, 2),
            f"items/s at concurrency {concurrency}": round(items / ours.median, 1),
            "items/s at concurrency 1": round(items / base.median, 1),
            "client overhead per item at concurrency 1 (ms)": round(
                1000 * (base.median / items - latency), 1
            ),
            "re-run seconds": round(rerun.seconds, 3),
            "loopback listen backlog": "128 (socketserver's default 5 stalls 1 s)",
        },
        notes=[
            "each timed run judges every item on a fresh cache through BatchJudge (client, retries, "
            "cache writes), against benchmarks/loopback.py; the server counts the requests",
            "warm-up: a few items at each concurrency, untimed",
            "re-run: the same items on the cache of the last concurrency run",
        ],
    )


def run(quick: bool, repeats: int) -> Result:
    if quick:
        return measure(QUICK_ITEMS, QUICK_LATENCY, CONCURRENCY, repeats)
    return measure(ITEMS, LATENCY, CONCURRENCY, repeats)

"""Judging many items: cache first, then a bounded pool of concurrent requests, then records.

Concurrency is a fixed pool of asyncio workers pulling from a queue (not one task per item) so
that memory and open connections stay bounded on 100k-item runs. Every item leaves as exactly one
record, judged, failed (with the reason and the judge's raw reply) or skipped (budget reached or run
aborted), so nothing is ever silently lost; judged verdicts are in the cache before the record is
counted, so a run killed at any point resumes without paying twice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vqa_r1.judge import heuristic
from vqa_r1.judge.cache import VerdictCache, cache_key
from vqa_r1.judge.client import JudgeAborted, OpenAIJudgeClient, Outcome
from vqa_r1.judge.cost import Budget, Estimate, TokenCounter
from vqa_r1.judge.prompts import PromptTemplate
from vqa_r1.judge.responses import JudgeItem

log = logging.getLogger("vqa_r1.judge")


@dataclass
class BatchReport:
    records: list[dict[str, Any]]
    judged: int = 0
    failed: int = 0
    skipped: int = 0
    cached: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    elapsed: float = 0.0
    aborted: str | None = None
    failures: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        text = (
            f"{len(self.records)} items: {self.judged} judged ({self.cached} from cache), "
            f"{self.failed} failed, {self.skipped} skipped; {self.requests} requests, "
            f"{self.prompt_tokens}+{self.completion_tokens} tokens, ${self.cost:.4f}, "
            f"{self.elapsed:.1f}s"
        )
        if self.aborted:
            text += f"; aborted: {self.aborted}"
        return text


def failure_kind(error: str | None) -> str:
    """What kind of failure an item's error is, for the summary's counts: "connection error",
    "timeout", "HTTP 503", "invalid verdict" (the details stay in each record's ``error``).

    The client's errors read "gave up after N attempts; last: <kind>: <detail>" or "<kind>
    (<detail>)"; the kind is what a user acts on (a server down, a model that answers badly).
    """
    text = (error or "unknown").strip()
    gave_up = re.match(r"gave up after \d+ attempts; last: (.*)", text, re.DOTALL)
    if gave_up:
        text = gave_up.group(1)
    kind = re.split(r"[:(]", text, maxsplit=1)[0].strip()
    kind = re.sub(r" after \d+ replies$", "", kind)
    return (kind or "unknown") + (" (after retries)" if gave_up else "")


def make_record(
    item: JudgeItem,
    outcome: Outcome,
    *,
    judge_model: str,
    prompt_id: str,
    cached: bool,
) -> dict[str, Any]:
    """The study's fields first, in its order, then ours."""
    verdict = outcome.verdict or {}
    record: dict[str, Any] = {
        "index": item.index,
        "model": item.model,
        "question": item.question,
        "true_label": item.true_label,
    }
    if item.image_url:
        record["image_url"] = item.image_url
    record.update(
        {
            "reasoning": item.reasoning,
            "final_ans": item.final_ans,
            "aligns": verdict.get("aligns"),
            "type": verdict.get("type"),
            "why": verdict.get("why"),
            "status": outcome.status,
            "error": outcome.error,
            "judge_model": judge_model,
            "prompt": prompt_id,
            "cached": cached,
            "attempts": outcome.attempts,
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens,
            "cost_usd": round(outcome.cost, 8),
        }
    )
    if outcome.raw is not None:
        record["raw_reply"] = outcome.raw
    return record


@dataclass
class BatchJudge:
    """Everything needed to judge a list of items with one judge and one prompt."""

    template: PromptTemplate
    judge_model: str
    cache: VerdictCache | None
    budget: Budget
    temperature: float | None = None
    concurrency: int = 8
    est_output_tokens: int = 300
    progress_every: float = 10.0
    client_factory: Callable[[], OpenAIJudgeClient] | None = None

    def key(self, item: JudgeItem) -> str:
        return cache_key(
            self.judge_model,
            self.template.id,
            self.template.digest,
            self.temperature,
            item.key_fields(),
        )

    def cached_outcome(self, item: JudgeItem) -> Outcome | None:
        if self.cache is None:
            return None
        entry = self.cache.get(self.key(item))
        if entry is None:
            return None
        return Outcome(status="judged", verdict=entry["verdict"])

    def estimate(self, items: list[JudgeItem]) -> Estimate:
        counter = TokenCounter(self.judge_model)
        cached = 0
        prompt_tokens = 0
        pending = 0
        for item in items:
            if self.cached_outcome(item) is not None:
                cached += 1
                continue
            pending += 1
            prompt_tokens += counter.count_messages(self._messages(item))
        output = pending * self.est_output_tokens
        cost = None if self.budget.prices is None else self.budget.cost(prompt_tokens, output)
        return Estimate(len(items), cached, pending, prompt_tokens, output, cost, counter.exact)

    def _messages(self, item: JudgeItem) -> list[dict[str, str]]:
        return self.template.render(item.question, item.reasoning, item.final_ans)

    def _record(self, item: JudgeItem, outcome: Outcome, cached: bool) -> dict[str, Any]:
        return make_record(
            item, outcome, judge_model=self.judge_model, prompt_id=self.template.id, cached=cached
        )

    def run_heuristic(self, items: list[JudgeItem]) -> BatchReport:
        start = time.monotonic()
        report = BatchReport(records=[])
        for item in items:
            verdict = heuristic.judge(item.question, item.reasoning, item.final_ans)
            report.records.append(self._record(item, Outcome("judged", verdict), cached=False))
            report.judged += 1
        report.elapsed = time.monotonic() - start
        return report

    def run(self, items: list[JudgeItem]) -> BatchReport:
        return asyncio.run(self._run(items))

    async def _run(self, items: list[JudgeItem]) -> BatchReport:
        start = time.monotonic()
        counter = TokenCounter(self.judge_model)
        results: list[tuple[Outcome, bool] | None] = [None] * len(items)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for position, item in enumerate(items):
            hit = self.cached_outcome(item)
            if hit is not None:
                results[position] = (hit, True)
            else:
                queue.put_nowait(position)
        pending = queue.qsize()
        log.info(
            "judging %d items with %s (%s): %d cached, %d to request, concurrency %d",
            len(items), self.judge_model, self.template.id, len(items) - pending, pending,
            self.concurrency,
        )  # fmt: skip
        abort: list[str] = []
        done = [0]
        client = self.client_factory() if (pending and self.client_factory) else None

        async def worker() -> None:
            while not abort:
                try:
                    position = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                item = items[position]
                messages = self._messages(item)
                estimate = self.budget.cost(
                    counter.count_messages(messages), self.est_output_tokens
                )
                try:
                    outcome = await client.judge(
                        messages,
                        self.template.validate,
                        reserve=lambda e=estimate: self.budget.reserve(e),
                        settle=lambda p, c, e=estimate: self.budget.settle(e, p, c),
                    )
                except JudgeAborted as err:
                    abort.append(str(err))
                    return
                if outcome.status == "judged" and self.cache is not None:
                    self.cache.put(
                        self.key(item),
                        {
                            "verdict": outcome.verdict,
                            "judge_model": self.judge_model,
                            "prompt": self.template.id,
                            "prompt_tokens": outcome.prompt_tokens,
                            "completion_tokens": outcome.completion_tokens,
                            "created": time.time(),
                        },
                    )
                results[position] = (outcome, False)
                done[0] += 1

        async def progress() -> None:
            while True:
                await asyncio.sleep(self.progress_every)
                log.info(
                    "progress: %d/%d requested items done, $%.4f spent",
                    done[0], pending, self.budget.spent,
                )  # fmt: skip

        if client is not None:
            reporter = asyncio.create_task(progress())
            try:
                workers = [asyncio.create_task(worker()) for _ in range(max(1, self.concurrency))]
                await asyncio.gather(*workers)
            finally:
                reporter.cancel()
                await client.close()

        report = BatchReport(records=[], aborted=abort[0] if abort else None)
        for position, item in enumerate(items):
            entry = results[position]
            if entry is None:
                reason = f"not requested: run aborted ({abort[0]})" if abort else "not requested"
                entry = (Outcome(status="skipped", error=reason), False)
            outcome, cached = entry
            report.records.append(self._record(item, outcome, cached))
            report.cached += cached
            report.requests += outcome.attempts
            report.prompt_tokens += outcome.prompt_tokens
            report.completion_tokens += outcome.completion_tokens
            report.cost += outcome.cost
            if outcome.status == "judged":
                report.judged += 1
            elif outcome.status == "failed":
                report.failed += 1
                reason = failure_kind(outcome.error)
                report.failures[reason] = report.failures.get(reason, 0) + 1
            else:
                report.skipped += 1
        report.elapsed = time.monotonic() - start
        return report

"""Benchmarks measured side by side: our way against the method it replaces, in one run.

Absolute times on this CPU machine say little about a GPU cluster, so every benchmark reports a
ratio of two timings taken in the same process, interleaved (A B A B ...) so that a slow moment of
the machine hits both sides, plus the checks that make the comparison fair (identical predictions,
identical token ids, zero requests on a re-run). ``python -m benchmarks`` (__main__.py) runs
them from the repository root and writes ``results/bench/RESULTS.md`` and ``results.json``
(report.py).

Dev tooling of the checkout, not part of the installed package: this package may import
``vqa_r1``, never the reverse (pyproject.toml's import contracts). ``gpu_smoke.py`` is the GPU
smoke that ``scripts/gpu-smoke`` runs; ``loopback.py`` the fake OpenAI-compatible server of the
judge's tests and of P3.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

COMMAND = "python -m benchmarks"  # how a user runs them (from the repository root)
REPO = Path(__file__).resolve().parents[1]  # the checkout: its root makes this importable


@dataclass
class Timing:
    """Seconds of repeated runs of one side."""

    label: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def low(self) -> float:
        return min(self.seconds)

    @property
    def high(self) -> float:
        return max(self.seconds)


@dataclass
class Result:
    """One benchmark: two timings, their ratio, and the checks that make the comparison fair.

    ``kind``: ``speedup`` is baseline / ours (higher is better); ``overhead`` is ours / baseline
    (1.0 is as fast as the baseline, lower is better); ``timing`` has no ratio: two wall times
    reported for regressions (the demo and the test suite), compared across reports.
    """

    id: str
    title: str
    ours: Timing
    baseline: Timing
    kind: Literal["speedup", "overhead", "timing"] = "speedup"
    goal: float | None = None
    floor: float | None = None  # what CI asserts (speedup >= floor; overhead <= floor)
    checks: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.kind == "timing":
            return None
        if self.kind == "speedup":
            return self.baseline.median / self.ours.median
        return self.ours.median / self.baseline.median

    @property
    def meets_floor(self) -> bool | None:
        if self.floor is None or self.ratio is None:
            return None
        return self.ratio >= self.floor if self.kind == "speedup" else self.ratio <= self.floor

    @property
    def meets_goal(self) -> bool | None:
        if self.goal is None or self.ratio is None:
            return None
        return self.ratio >= self.goal if self.kind == "speedup" else self.ratio <= self.goal


def side_by_side(
    ours: Callable[[], Any],
    baseline: Callable[[], Any],
    repeats: int,
    labels: tuple[str, str] = ("ours", "baseline"),
    warmup: bool = True,
) -> tuple[Timing, Timing, list[Any], list[Any]]:
    """Run both ``repeats`` times, interleaved; returns the timings and every run's return value.

    One untimed warm-up run of each side first (imports, allocator, lazily built caches), unless
    ``warmup`` is false.
    """
    if warmup:
        ours()
        baseline()
    a, b = Timing(labels[0]), Timing(labels[1])
    out_a: list[Any] = []
    out_b: list[Any] = []
    for _ in range(repeats):
        for timing, fn, out in ((a, ours, out_a), (b, baseline, out_b)):
            started = time.perf_counter()
            out.append(fn())
            timing.seconds.append(time.perf_counter() - started)
    return a, b, out_a, out_b

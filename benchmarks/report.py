"""RESULTS.md and results.json of a benchmark run: machine, versions, commands, timings, ratios."""

from __future__ import annotations

import dataclasses
import os
import platform
from importlib import metadata
from pathlib import Path

from benchmarks import COMMAND, Result
from vqa_r1.clock import now_iso
from vqa_r1.io import atomic_write_json, atomic_write_text

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "submitit", "openai")


def machine() -> dict:
    return {
        "when": now_iso(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": {p: _version(p) for p in PACKAGES},
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def as_json(results: list[Result], command: str) -> dict:
    rows = []
    for r in results:
        row = dataclasses.asdict(r)
        row.update(
            ratio=r.ratio,
            meets_goal=r.meets_goal,
            meets_floor=r.meets_floor,
            command=f"{COMMAND} --only {r.id}",
        )
        for side in ("ours", "baseline"):
            t = getattr(r, side)
            row[side].update(median=t.median, min=t.low, max=t.high)
        rows.append(row)
    return {"machine": machine(), "command": command, "benchmarks": rows}


def _ratio_text(r: Result) -> str:
    if r.ratio is None:
        return "- (wall times)"
    unit = "x faster" if r.kind == "speedup" else "x the baseline's time"
    return f"{r.ratio:.2f}{unit}"


def _bound(r: Result, value: float | None) -> str:
    if value is None:
        return "-"
    return f">= {value:g}" if r.kind == "speedup" else f"<= {value:g}"


def markdown(results: list[Result], command: str) -> str:
    m = machine()
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    lines = [
        "# Benchmarks",
        "",
        f"Measured {m['when']} on {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, "
        f"OMP_NUM_THREADS={m['omp_num_threads']}; {versions}.",
        f"Command: `{command}`. Each side ran interleaved with the other in one process, after a "
        "warm-up run; times are the median and [min, max] of the runs.",
        "",
        "| id | benchmark | ours (s) | baseline (s) | ratio | goal | CI floor | checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        checks = ", ".join(f"{k}: {v}" for k, v in r.checks.items()) or "-"
        lines.append(
            f"| {r.id} | {r.title} | {r.ours.median:.3f} [{r.ours.low:.3f}, {r.ours.high:.3f}] "
            f"({r.ours.label}, n={len(r.ours.seconds)}) "
            f"| {r.baseline.median:.3f} [{r.baseline.low:.3f}, {r.baseline.high:.3f}] "
            f"({r.baseline.label}) | {_ratio_text(r)} | {_bound(r, r.goal)} "
            f"| {_bound(r, r.floor)} | {checks} |"
        )
    for r in results:
        if r.details or r.notes:
            lines += ["", f"## {r.id}: {r.title}", "", f"Reproduce: `{COMMAND} --only {r.id}`"]
            for key, value in r.details.items():
                lines.append(f"- {key}: {value}")
            lines += [f"- {note}" for note in r.notes]
    return "\n".join(lines) + "\n"


def write(results: list[Result], out_dir: Path, command: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / "results.json", as_json(results, command))
    atomic_write_text(out_dir / "RESULTS.md", markdown(results, command))
    return out_dir / "RESULTS.md"

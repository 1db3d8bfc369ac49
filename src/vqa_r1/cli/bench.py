"""`vqa-r1 bench`: the benchmarks of results/bench/RESULTS.md, side by side, as ratios."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vqa_r1.bench import report, suite


def add_arguments(parser: argparse.ArgumentParser, verb: str = "bench") -> None:
    ids = ", ".join(f"{k} ({v[1]})" for k, v in suite.BENCHMARKS.items())
    parser.add_argument("--only", default=None, help=f"comma-separated ids of: {ids}")
    parser.add_argument(
        "--quick", action="store_true", help="CI's reduced sizes (same code paths and checks)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side (default 5)")
    parser.add_argument(
        "--out", default="results/bench", help="folder of RESULTS.md and results.json"
    )


def run(args: argparse.Namespace) -> int:
    ids = suite.parse_ids(args.only)
    results = suite.run(ids, quick=args.quick, repeats=args.repeats)
    command = (
        shlex.join(["vqa-r1", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"] else "vqa-r1 bench"
    )
    path = report.write(results, Path(args.out), command)
    print(f"report: {path}")
    below = [r.id for r in results if r.meets_floor is False]
    if below:
        print(f"below the CI floor: {', '.join(below)}", file=sys.stderr)
        return 1
    return 0

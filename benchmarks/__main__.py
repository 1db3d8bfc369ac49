"""`python -m benchmarks`: the benchmarks of results/bench/RESULTS.md, side by side, as ratios.

Run from the repository root (the checkout's dev tooling, not an installed command), in the
environment that has ``vqa_r1`` installed: ``python -m benchmarks --only P1,P3 --quick``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from benchmarks import COMMAND, report, suite
from vqa_r1.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ids = ", ".join(f"{k} ({v[1]})" for k, v in suite.BENCHMARKS.items())
    parser.add_argument("--only", default=None, help=f"comma-separated ids of: {ids}")
    parser.add_argument(
        "--quick", action="store_true", help="CI's reduced sizes (same code paths and checks)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run on the CPU where a benchmark has a GPU size (SCALE: the shrunk architecture)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side (default 5)")
    parser.add_argument(
        "--out", default="results/bench", help="folder of RESULTS.md and results.json"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        ids = suite.parse_ids(args.only)
        results = suite.run(ids, quick=args.quick, repeats=args.repeats, cpu=args.cpu)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = report.write(results, Path(args.out), shlex.join([*shlex.split(COMMAND), *argv]))
    print(f"report: {path}")
    below = [r.id for r in results if r.meets_floor is False]
    if below:
        print(f"below the CI floor: {', '.join(below)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

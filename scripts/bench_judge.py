#!/usr/bin/env python
"""Judge throughput at concurrency 16 vs 1 against the loopback server at 100 ms latency.

The measurement lives in vqa_r1.judge.bench (the acceptance test calls it too); this script only
parses the arguments and prints the result.

    .venv/bin/python scripts/bench_judge.py [--latency 0.1] [--items-serial 24] [--items-parallel 160]
"""

from __future__ import annotations

import argparse

from vqa_r1.judge.bench import compare


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="server latency, seconds")
    parser.add_argument("--items-serial", type=int, default=24, help="items at concurrency 1")
    parser.add_argument("--items-parallel", type=int, default=160, help="items at concurrency 16")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    result = compare(args.latency, args.items_serial, args.items_parallel, args.concurrency)
    print(result.describe())
    return result.ratio


if __name__ == "__main__":
    main()

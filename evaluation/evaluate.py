#!/usr/bin/env python
"""Evaluate a model or a training run on a dataset split: `python evaluation/evaluate.py --help`.

The same program as `vqa-r1 evaluate` (and `pixi run evaluate`); the logic is in `vqa_r1.eval`.
"""

import sys

from vqa_r1.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["evaluate", *sys.argv[1:]]))

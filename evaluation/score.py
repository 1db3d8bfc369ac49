#!/usr/bin/env python
"""Score generated_responses.json files without a model: `python evaluation/score.py --help`.

The same program as `vqa-r1 score`; the logic is in `vqa_r1.eval.scoring`.
"""

import sys

from vqa_r1.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["score", *sys.argv[1:]]))

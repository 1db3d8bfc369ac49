#!/usr/bin/env python
"""Submit VQA-R1 jobs: `python slurm/launch.py {sft,grpo,evaluate,judge} --model NAME ...`.

Only argument parsing lives in the library (`vqa_r1.cli.launch`); see `--help`.
"""

import sys
from pathlib import Path

# let the launcher run from a checkout even before `pip install -e .`
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vqa_r1.cli.launch import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())

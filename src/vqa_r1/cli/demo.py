"""`vqa-r1 demo`: the study's comparisons on CPU in minutes, on the embedded default.

Synthetic scenes -> a tiny model pretrained here on general skills (`vqa-r1 pretrain`, shipped) ->
four rows, as in the published study: the base model zero-shot with the reasoning prompt, SFT
(LoRA), GRPO from the base model (the study's main setting) and GRPO continuing the SFT adapter,
all evaluated on held-out test scenes -> a table with Wilson intervals and tests against the base
model and chance, and reward curves. The demo is the declared experiment `demo`
(experiments/specs/demo.yaml) run here as local jobs: the same steps, folders, re-launch and
`status` as a cluster's experiment; only the recipes differ.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vqa_r1.cli.common import add_overwrite_argument, add_set_argument
from vqa_r1.experiments.spec import DEMO_ROWS
from vqa_r1.launch.request import JobOptions

MODEL = "tiny-qwen2.5-vl-pretrained"
OUT = "runs/demo"


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument(
        "--model", default=MODEL, help=f"registered model to start from (default: {MODEL})"
    )
    parser.add_argument("--out", default=OUT, help=f"the demo's folder (default: {OUT})")
    parser.add_argument(
        "--rows",
        default=",".join(DEMO_ROWS),
        help=f"comma-separated rows to train and evaluate (default: all of {', '.join(DEMO_ROWS)})",
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=("train", "validation", "test"),
        help="split the rows are evaluated on (default: test; tune on validation)",
    )
    add_set_argument(
        parser,
        "override a recipe key of every run (KEY=VALUE) or of one verb's runs (sft:, grpo:, "
        "evaluate:), e.g. grpo:train.max_steps=50, evaluate:eval.limit=100, "
        "data.synthetic_train=500",
        "[VERB:]KEY=VALUE",
    )
    add_overwrite_argument(parser, "the demo's folder (--out)")


def run(args: argparse.Namespace) -> int:
    from vqa_r1.experiments import run_experiment

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    overrides = [
        *args.overrides,
        f"experiment.rows=[{','.join(rows)}]",
        f"experiment.eval_split={args.split}",
    ]
    command = shlex.join(["vqa-r1", "demo", *sys.argv[1:]])
    job = JobOptions(executor="local", overwrite=args.overwrite)
    code = run_experiment("demo", args.model, overrides, args.out, job, command)
    table = Path(args.out).resolve() / "tables" / "accuracy.md"
    if code == 0 and table.exists():
        print("\n" + table.read_text().strip())
        print(f"\nper relation, the tests and the plots: {table.parent.parent}")
    return code

"""`vqa-r1 evaluate`: batched evaluation of a model or a training run on a dataset split."""

from __future__ import annotations

import argparse
import sys

from vqa_r1.cli.common import add_run_arguments, make_way_or_complete, run_spec
from vqa_r1.config import run_settings
from vqa_r1.eval.evaluate import evaluate, truncation_warning
from vqa_r1.launch.plan import resolve_run
from vqa_r1.logging_setup import setup_logging
from vqa_r1.run_dir import failures_recorded


def add_arguments(parser: argparse.ArgumentParser, verb: str = "evaluate") -> None:
    add_run_arguments(parser, "evaluate")


def run(args: argparse.Namespace) -> int:

    setup_logging()
    config, out_dir = resolve_run(run_spec(args, "evaluate"))
    if make_way_or_complete(
        out_dir, "evaluate", run_settings(config, args.adapter), args.overwrite
    ):
        return 0
    with failures_recorded(out_dir):  # an exception or a kill is FAILED / INTERRUPTED there
        scores = evaluate(config, out_dir, adapter=args.adapter)
    lo, hi = scores["accuracy_ci_95"]
    print(
        f"{config.model.name} on {scores['split']}: accuracy {scores['accuracy']:.3f} "
        f"[{lo:.3f}, {hi:.3f}] (n={scores['n']}), format rate {scores['format_rate']:.3f}, "
        f"cache {scores['generation_cache']}, device {scores['device']}; results in {out_dir}"
    )
    if scores["truncated"]:
        print(f"warning: {truncation_warning(scores)}", file=sys.stderr)
    return 0

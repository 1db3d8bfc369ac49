"""`vqa-r1 evaluate`: batched evaluation of a model or a training run on a dataset split, in this
process (a one-step graph of the one builder and executor)."""

from __future__ import annotations

import argparse
import sys

from vqa_r1.cli.common import add_run_arguments, run_inprocess, run_spec
from vqa_r1.eval.evaluate import truncation_warning
from vqa_r1.launch.build import job_graph
from vqa_r1.launch.request import JobOptions
from vqa_r1.logging_setup import setup_logging


def add_arguments(parser: argparse.ArgumentParser, verb: str = "evaluate") -> None:
    add_run_arguments(parser, "evaluate")


def run(args: argparse.Namespace) -> int:
    setup_logging()
    job = JobOptions(executor="inprocess", overwrite=args.overwrite)
    graph, config = job_graph(run_spec(args, "evaluate"), job)
    outcome = run_inprocess(graph)
    if outcome.nothing_to_do:
        return 0
    scores = outcome.results["evaluate"]
    lo, hi = scores["accuracy_ci_95"]
    print(
        f"{config.model.name} on {scores['split']}: accuracy {scores['accuracy']:.3f} "
        f"[{lo:.3f}, {hi:.3f}] (n={scores['n']}), format rate {scores['format_rate']:.3f}, "
        f"cache {scores['generation_cache']}, device {scores['device']}; results in {graph.root}"
    )
    if scores["truncated"]:
        print(f"warning: {truncation_warning(scores)}", file=sys.stderr)
    return 0

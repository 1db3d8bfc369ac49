"""`vqa-r1 sft` and `vqa-r1 grpo`: train in this process, as a one-step graph of the one builder
and executor (the launcher submits the same graph as a job)."""

from __future__ import annotations

import argparse
import sys

from vqa_r1.cli.common import add_run_arguments, run_inprocess, run_spec
from vqa_r1.launch.build import job_graph
from vqa_r1.launch.request import JobOptions
from vqa_r1.logging_setup import setup_logging


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    add_run_arguments(parser, verb)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    job = JobOptions(executor="inprocess", overwrite=args.overwrite)
    graph, _ = job_graph(run_spec(args, args.verb), job)  # bad input fails here, before writing
    outcome = run_inprocess(graph)
    run_dir = graph.root
    if outcome.nothing_to_do:
        return 0
    status = outcome.results.get(args.verb) or {}
    state = outcome.states.get(args.verb)
    if state == "INTERRUPTED":
        print(f"{args.verb} interrupted: {status.get('reason')}; run directory {run_dir}",
              file=sys.stderr)  # fmt: skip
        return 130
    if state == "UNHEALTHY":  # train.health_action=stop (train/health.py)
        reason = status.get("reason") or "a run-health alarm (status.json says which)"
        print(f"{args.verb} UNHEALTHY: {reason}; run directory {run_dir}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{args.verb} finished: {status.get('global_step')} steps; run directory {run_dir}")
    return 0

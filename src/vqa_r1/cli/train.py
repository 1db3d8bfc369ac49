"""`vqa-r1 sft` and `vqa-r1 grpo`: train locally in this process (the launcher submits the same)."""

from __future__ import annotations

import argparse
import sys

from vqa_r1 import ranks
from vqa_r1.cli.common import add_run_arguments, make_way_or_complete, run_spec
from vqa_r1.config import run_settings
from vqa_r1.launch.plan import resolve_run
from vqa_r1.logging_setup import setup_logging
from vqa_r1.run_dir import failures_recorded


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    add_run_arguments(parser, verb)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    config, run_dir = resolve_run(run_spec(args, args.verb))  # bad input fails here, in 0.3 s
    from vqa_r1.train.runner import check_trl_config, train  # torch, transformers, TRL: seconds

    check_trl_config(config, ranks.world_size())  # TRL's checks, before the folder is touched
    if make_way_or_complete(run_dir, args.verb, run_settings(config), args.overwrite):
        return 0

    with failures_recorded(run_dir):  # an exception or a kill is FAILED / INTERRUPTED there
        status = train(config, run_dir)
    if status.get("state") == "INTERRUPTED":
        print(f"{args.verb} interrupted: {status.get('reason')}; run directory {run_dir}",
              file=sys.stderr)  # fmt: skip
        return 130
    if status.get("state") == "UNHEALTHY":  # train.health_action=stop (train/health.py)
        reason = status.get("reason") or "a run-health alarm (status.json says which)"
        print(f"{args.verb} UNHEALTHY: {reason}; run directory {run_dir}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{args.verb} finished: {status.get('global_step')} steps; run directory {run_dir}")
    return 0

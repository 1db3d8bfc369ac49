"""`vqa-r1 pretrain`: build a pretrained tiny model of one family (the shipped ones' command), in
this process (a one-step graph of the one builder and executor)."""

from __future__ import annotations

import argparse
import sys

from vqa_r1.cli.common import add_overwrite_argument, add_set_argument, number, run_inprocess
from vqa_r1.domains import at_least
from vqa_r1.launch.build import pretrain_graph
from vqa_r1.launch.request import JobOptions
from vqa_r1.logging_setup import setup_logging
from vqa_r1.models.registry import FAMILIES
from vqa_r1.train.pretrain import PretrainConfig, config_from_overrides
from vqa_r1.typed_config import help_text


def add_arguments(parser: argparse.ArgumentParser, verb: str = "pretrain") -> None:
    parser.add_argument(
        "--family", required=True, choices=list(FAMILIES), help="model family to pretrain"
    )
    parser.add_argument(
        "--out",
        required=True,
        help="model folder to write (weights, processor, card); resumes if it holds a partial run",
    )
    add_overwrite_argument(parser, "--out")
    add_set_argument(parser, "override a pretraining key, e.g. --set max_steps=3000 (keys below)")
    parser.epilog = "pretraining keys (--set KEY=VALUE):\n" + help_text(PretrainConfig)
    parser.add_argument(
        "--stop-after",
        type=number(at_least(1)),
        default=None,
        metavar="N",
        help="stop after N steps of the same run (same schedule): a prefix to check "
        "reproducibility; writes work/prefix.json and no model",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging()
    cfg = config_from_overrides(args.family, args.overrides)
    job = JobOptions(executor="inprocess", overwrite=args.overwrite)
    outcome = run_inprocess(pretrain_graph(cfg, args.out, args.stop_after, job))
    if outcome.nothing_to_do:
        return 0
    record = outcome.results["pretrain"]
    if record.get("state") == "INTERRUPTED":
        print(f"pretrain interrupted: {record['reason']}; folder {args.out}", file=sys.stderr)
        return 130
    if not record["complete"]:
        print(
            f"pretrain stopped after {record['global_step']} steps; losses in "
            f"{args.out}/work/prefix.json"
        )
        return 0
    print(
        f"pretrain finished: {record['global_step']} steps in "
        f"{record['train_seconds'] / 60:.1f} min; read-out (exact) "
        + ", ".join(f"{k} {v['exact']:.2f}" for k, v in record["readout"].items())
        + f"; model and card in {args.out}"
    )
    return 0

"""`vqa-r1 doctor`: check this machine, the model cache and the cluster before a long job.

The checks live in launch/doctor.py; `slurm/launch.py doctor --cluster NAME` runs the same checks
as a short job on a compute node, with the GPUs it was given.
"""

from __future__ import annotations

import argparse

from vqa_r1.cli.common import number
from vqa_r1.domains import at_least
from vqa_r1.errors import UserError


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    add_doctor_arguments(parser)
    parser.add_argument(
        "--gpus",
        type=number(at_least(0)),
        default=0,
        help="GPUs this machine must be able to use: a usable GPU is then required (a FAIL "
        "otherwise); 0 (default): a missing GPU is a warning",
    )
    parser.add_argument(
        "--cluster",
        default=None,
        help="cluster profile (slurm/clusters): check its partition's SLURM settings and the "
        "Python its jobs run",
    )
    parser.add_argument(
        "--run-dir", default=".", help="where runs will write: its free disk (default: here)"
    )
    parser.add_argument(
        "--verb",
        choices=["sft", "grpo"],
        default=None,
        help="print each --model's memory plan for this verb's recipe against the --cluster "
        "profile's GPU (exit 1 when it cannot fit: its submission would be refused)",
    )


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `vqa-r1 doctor` and `slurm/launch.py doctor` share."""
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        metavar="NAME",
        help="check that this model is complete in the cache, and its size against the GPU and "
        "the disk (repeatable; `vqa-r1 models`)",
    )


def run(args: argparse.Namespace) -> int:
    from vqa_r1.launch.doctor import DoctorOptions, report, run_checks

    options = DoctorOptions(args.models, args.gpus, args.cluster, args.run_dir)
    text, status = report(run_checks(options))
    print(text)
    if args.verb:
        from vqa_r1.launch.doctor import memory_report
        from vqa_r1.launch.job_script import default_cluster

        if not args.models:
            raise UserError("--verb needs --model NAME: the model whose memory plan to print")
        cluster = args.cluster or default_cluster()
        plan_text, plan_status = memory_report(args.models, args.verb, cluster)
        print(plan_text)
        status = max(status, plan_status)
    return status

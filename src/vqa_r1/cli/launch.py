"""`python slurm/launch.py <verb>`: run the suite's jobs (SLURM, local or in process) and follow them.

The same verbs as `vqa-r1`, the same recipes and overrides; in addition the resources (`--gpus`,
`--nodes`, `--time`), the cluster profile and the executor. `--dry-run` prints the job script and
the resolved configuration and submits nothing.

Also: `--sweep key=v1,v2` (one job array, launch/sweep.py), `pipeline` (sft -> merge -> grpo ->
evaluate as dependent jobs, launch/pipeline.py), `experiment` (a declared study), `merge`
(train/merge.py), and `status`, `logs`, `cancel` on any launch folder or a job id
(launch/monitor.py). Every launch is a graph of jobs built by one builder (launch/build.py) and
run by one executor (launch/executor.py).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from vqa_r1.cli import doctor as doctor_cli
from vqa_r1.cli import pretrain as pretrain_cli
from vqa_r1.cli.common import (
    ArgumentParser,
    add_dataset_argument,
    add_model_argument,
    add_output_dir_argument,
    add_overwrite_argument,
    add_recipe_argument,
    add_run_arguments,
    add_set_argument,
    exit_status,
    number,
    run_spec,
)
from vqa_r1.cli.judge_options import add_launch_arguments, config_from_args
from vqa_r1.domains import at_least
from vqa_r1.experiments.spec import list_specs
from vqa_r1.judge.job import server_setup_lines
from vqa_r1.launch import build, executor
from vqa_r1.launch import monitor as m
from vqa_r1.launch.graph import Graph
from vqa_r1.launch.pipeline import DEFAULT_STEPS, STEPS
from vqa_r1.launch.request import JobOptions
from vqa_r1.train.pretrain import config_from_overrides

JOB_VERBS = ("sft", "grpo", "evaluate", "judge")
MONITOR_VERBS = ("status", "logs", "cancel")


JOB_HELP = {
    "sft": "submit an SFT job",
    "grpo": "submit a GRPO job",
    "evaluate": "submit an evaluation job",
    "judge": "submit an LLM-judge job",
}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="slurm/launch.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in JOB_VERBS:
        # judge has a --dry-run of its own (a cost estimate); here the launcher's meaning wins
        p = sub.add_parser(
            verb,
            help=JOB_HELP[verb],
            conflict_handler="resolve",
            formatter_class=argparse.RawDescriptionHelpFormatter,  # the key list, one per line
        )
        if verb == "judge":
            add_launch_arguments(p)
            add_output_dir_argument(p, "job folder (logs, results)", "runs/judge-<time>")
        else:
            add_run_arguments(p, verb)
            add_sweep_arguments(p)
        add_job_arguments(p)
    p = sub.add_parser(
        "pretrain",
        help="submit a pretraining job for a tiny model of one family",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pretrain_cli.add_arguments(p)
    add_job_arguments(p)
    p = sub.add_parser(
        "doctor",
        help="run `vqa-r1 doctor`'s checks as a short job on a compute node",
        description="The checks of `vqa-r1 doctor` as a job with the cluster profile's GPUs "
        "(--gpus to change): CUDA, driver and GPU architecture, bf16, GPU memory, versions, "
        "the model cache, the offline flags, the SLURM settings requeueing relies on, NCCL on "
        "several nodes, free disk. Waits for the job, prints its report and exits 1 on any FAIL.",
    )
    doctor_cli.add_doctor_arguments(p)
    add_output_dir_argument(p, "job folder (doctor.txt, logs)", "runs/doctor-<time>")
    add_job_arguments(p)
    add_chain_and_monitor_verbs(sub)
    return parser


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep (one SLURM job array; see launch/sweep.py)")
    g.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="run one job per value (cartesian product over several --sweep keys), "
        "each in <output-dir>/<key>=<value>",
    )
    g.add_argument(
        "--parallel",
        type=number(at_least(1)),
        default=None,
        help="run at most this many sweep elements at once",
    )


def add_chain_and_monitor_verbs(sub) -> None:
    """pipeline and merge submit jobs like the verbs above; status/logs/cancel look at them."""
    p = sub.add_parser("pipeline", help="submit sft -> merge -> grpo -> evaluate as a job chain")
    add_pipeline_arguments(p)
    add_job_arguments(p)
    p = sub.add_parser(
        "experiment",
        help=f"a declared study ({', '.join(list_specs())}) as a job chain",
        description="Run a declared experiment (src/vqa_r1/experiments/specs/NAME.yaml) as a "
        "chain of jobs ending in its tables and plots. Re-launching the same command skips the "
        "steps that are complete.",
    )
    add_experiment_arguments(p)
    add_job_arguments(p)
    p = sub.add_parser("merge", help="merge a LoRA adapter into its base model (<run>/merged)")
    add_model_argument(p, required=True, what=": the adapter's base model")
    p.add_argument("--adapter", required=True, help="LoRA adapter folder or run directory")
    add_recipe_argument(p, "sft")
    add_set_argument(p)
    add_output_dir_argument(p, "run directory", "runs/merge-<model>-<time>")
    add_job_arguments(p)
    for verb, text in (
        (
            "status",
            "state of the jobs of a launch folder (run, sweep, pipeline, experiment, "
            "demo) or of a job id",
        ),
        ("logs", "tail of a job's submitit stdout (or stderr)"),
        ("cancel", "cancel the unfinished jobs of a launch folder, or a job id"),
    ):
        p = sub.add_parser(verb, help=text)
        p.add_argument(
            "target", metavar="FOLDER|JOB_ID", help="a run directory or any launch's folder"
        )
        if verb == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
        if verb == "logs":
            p.add_argument(
                "-n", "--lines", type=number(at_least(0)), default=40, help="lines to show (0: all)"
            )
            p.add_argument("--stderr", action="store_true", help="the job's stderr log")
            p.add_argument(
                "-f",
                "--follow",
                action="store_true",
                help="go on printing what the jobs write until none runs (Ctrl-C stops "
                "following, not the jobs)",
            )


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument(
        "--executor",
        choices=["auto", "slurm", "local", "inprocess"],
        default="auto",
        help="auto: SLURM when sbatch is on PATH, else a local subprocess; inprocess: the steps "
        "one after another in this process (what `vqa-r1 sft` does; no time limit, no requeue)",
    )
    g.add_argument(
        "--cluster",
        default=None,
        help="cluster profile in slurm/clusters (default: $VQA_R1_CLUSTER or generic-gpu)",
    )
    g.add_argument(
        "--gpus",
        type=number(at_least(0)),
        default=None,
        help="GPUs per node (default: the recipe's)",
    )
    g.add_argument(
        "--nodes", type=number(at_least(1)), default=None, help="nodes (default: the recipe's)"
    )
    g.add_argument(
        "--processes-per-node",
        type=number(at_least(1)),
        default=None,
        metavar="N",
        help="training processes per node (SLURM tasks joined by torch.distributed); default: "
        "one per training GPU. With --gpus 0, N CPU processes train together over gloo, the code "
        "path of a multi-GPU job but the device (resources.processes_per_node)",
    )
    g.add_argument(
        "--time", default=None, help="time limit per job in SLURM format, e.g. 12:00:00 or 00:02:00"
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the job script and configuration; submit nothing",
    )
    g.add_argument(
        "--no-wait",
        action="store_true",
        help="local executor: a single job returns at once instead of waiting (a local "
        "launch of several steps runs them from this command and waits; it says so)",
    )
    g.add_argument(
        "--max-requeues",
        type=number(at_least(0)),
        default=50,
        help="stop requeueing after this many restarts (reported in status.json)",
    )
    g.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the working tree's code after a requeue instead of a copy taken at submission",
    )
    add_overwrite_argument(g, "the output folder")


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser, required=True)
    parser.add_argument(
        "--steps",
        default=DEFAULT_STEPS,
        help=f"comma-separated subset of {', '.join(STEPS)}, in that order (default: all)",
    )
    add_dataset_argument(parser)
    add_set_argument(
        parser,
        "override a recipe key for every step, or for one step with STEP: (repeatable)",
        "[STEP:]KEY=VALUE",
    )
    add_output_dir_argument(parser, "pipeline folder", "runs/pipeline-<model>-<time>")


def add_experiment_arguments(parser: argparse.ArgumentParser) -> None:
    from vqa_r1.experiments.spec import list_specs

    parser.add_argument(
        "name", metavar="NAME", help=f"one of {', '.join(list_specs())}, or a spec file path"
    )
    add_model_argument(parser, required=True)
    add_set_argument(
        parser,
        "override a recipe key of every run (KEY=VALUE), of one verb's runs (sft:KEY=VALUE; "
        "verbs sft, grpo, merge, evaluate, prompt-tune), or the spec (experiment.KEY=VALUE)",
        "[VERB:]KEY=VALUE",
    )
    add_output_dir_argument(parser, "experiment folder", "results/experiments/<name>-<model>")


def job_options(args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        executor=args.executor,
        cluster=args.cluster,
        gpus=args.gpus,
        nodes=args.nodes,
        time=args.time,
        processes_per_node=args.processes_per_node,
        dry_run=args.dry_run,
        no_wait=args.no_wait,
        max_requeues=args.max_requeues,
        snapshot=not args.no_snapshot,
        overwrite=getattr(args, "overwrite", False),
    )


def build_graph(args: argparse.Namespace, job: JobOptions) -> tuple[Graph, Any]:
    """The launch as a graph of checked steps (launch/build.py), and a single run's resolved
    config (None for the other kinds)."""
    if args.verb == "pipeline":
        overrides = list(args.overrides)
        if args.dataset:
            overrides.append(f"data.dataset={args.dataset}")
        return build.pipeline_graph(args.model, args.steps, overrides, args.output_dir, job), None
    if args.verb == "judge":
        jconfig = config_from_args(args)
        return build.judge_graph(jconfig, args.output_dir, server_setup_lines(jconfig), job), None
    if args.verb == "doctor":
        return build.doctor_graph(args.models, args.output_dir, job), None
    if args.verb == "pretrain":
        cfg = config_from_overrides(args.family, args.overrides)
        return build.pretrain_graph(cfg, args.out, args.stop_after, job), None
    if args.verb == "merge":
        spec = build.RunSpec(
            "merge", args.model, args.recipe, tuple(args.overrides), args.output_dir, args.adapter
        )
        return build.job_graph(spec, job)
    if getattr(args, "sweep", None):
        return build.sweep_graph(run_spec(args, args.verb), job, args.sweep, args.parallel), None
    return build.job_graph(run_spec(args, args.verb), job)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if not sys.stderr.isatty():  # a launch log (nohup, a file): no half-drawn dataset bars
        from vqa_r1.logging_setup import no_bars

        no_bars()
    command = shlex.join(["slurm/launch.py", *argv])
    where = getattr(args, "output_dir", None)
    return exit_status(lambda: run_command(args, command), where=where)


def run_command(args: argparse.Namespace, command: str) -> int:
    """Build the launch's graph, then print it (``--dry-run``) or run it."""
    if args.verb in MONITOR_VERBS:
        return monitor(args)
    job = job_options(args)
    if args.verb == "experiment":
        from vqa_r1.experiments import run_experiment

        return run_experiment(
            args.name, args.model, list(args.overrides), args.output_dir, job, command
        )
    graph, config = build_graph(args, job)
    if job.dry_run:
        return print_dry_run(graph, config, job)
    if args.verb == "doctor":
        outcome = executor.execute(graph, command, no_wait=True)
        if outcome.jobs and not job.no_wait:
            record = m.read_jobs(graph.root)[-1]
            return doctor_result(outcome.jobs["doctor"], m.log_path(record, stderr=True))
        return outcome.code
    outcome = executor.execute(graph, command, no_wait=job.no_wait)
    if graph.single and outcome.executor == "inprocess" and outcome.code == 130:
        # a local job's interruption is said by the executor; a run in this process by us
        step = graph.steps[0]
        result = outcome.results.get(step.name)
        reason = (result or {}).get("reason") if isinstance(result, dict) else None
        print(f"{step.name} interrupted: {reason or 'stopped by Ctrl-C'} (python slurm/launch.py "
              f"status {step.run_dir})", file=sys.stderr)  # fmt: skip
    return outcome.code


def print_dry_run(graph: Graph, config: Any, job: JobOptions) -> int:
    """The job scripts, and a single job's resolved configuration; nothing is written."""
    if job.overwrite and graph.root.is_dir() and any(graph.root.iterdir()):
        print(f"note: --overwrite: {graph.root} will be moved aside to {graph.root.name}.old-"
              "<time> on submission (nothing is deleted)", file=sys.stderr)  # fmt: skip
    print(executor.dry_run(graph), end="")
    if config is not None:
        print("# ---- resolved configuration (written to the run directory on submit) ----")
        print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
    return 0


def doctor_result(launched, log: Path) -> int:
    """Wait for the doctor job (a minute once it starts), print its report, return its status."""
    print("waiting for the doctor job (Ctrl-C leaves it running; its report: doctor.txt)")
    try:
        result = launched.result()
    except Exception as err:
        print(f"error: doctor failed: {executor.failure_reason(err)}; log: {log}", file=sys.stderr)
        return 1
    print(result["report"])
    return int(result["exit_code"])


def monitor(args: argparse.Namespace) -> int:
    if args.verb == "status":
        print(m.status_report(args.target, as_json=args.json))
    elif args.verb == "logs" and args.follow:
        m.follow_logs(args.target, args.lines, args.stderr, write=lambda t: print(t, flush=True))
    elif args.verb == "logs":
        print(m.logs_report(args.target, args.lines, args.stderr))
    else:
        print(m.cancel(args.target))
    return 0


if __name__ == "__main__":  # `python -m vqa_r1.cli.launch`: the launcher of an installed wheel
    raise SystemExit(main())

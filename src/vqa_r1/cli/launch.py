"""`python slurm/launch.py <verb>`: submit sft / grpo / evaluate / judge as jobs (SLURM or local).

The same verbs as `vqa-r1`, the same recipes and overrides; in addition the resources (`--gpus`,
`--nodes`, `--time`), the cluster profile and the executor. `--dry-run` prints the job script and
the resolved configuration and submits nothing.

Also: `--sweep key=v1,v2` (one job array, launch/sweep.py), `pipeline` (sft -> merge -> grpo ->
evaluate as dependent jobs, launch/pipeline.py), `merge` (train/merge.py), and `status`, `logs`,
`cancel` on a run, sweep or pipeline folder or a job id (launch/monitor.py).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vqa_r1.cli_args import add_set_argument
from vqa_r1.errors import UserError

JOB_VERBS = ("sft", "grpo", "evaluate", "judge")
MONITOR_VERBS = ("status", "logs", "cancel")


def build_parser() -> argparse.ArgumentParser:
    from vqa_r1.train.cli import add_run_arguments

    parser = argparse.ArgumentParser(prog="slurm/launch.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in JOB_VERBS:
        # judge has a --dry-run of its own (a cost estimate); here the launcher's meaning wins
        p = sub.add_parser(verb, help=f"submit a {verb} job", conflict_handler="resolve")
        if verb == "judge":
            from vqa_r1.judge.job import add_launch_arguments

            add_launch_arguments(p)
            p.add_argument("--output-dir", default=None, help="job folder (logs, results)")
        else:
            add_run_arguments(p, verb)
            add_sweep_arguments(p)
        add_job_arguments(p)
    from vqa_r1.train.cli_pretrain import add_arguments as add_pretrain_arguments

    p = sub.add_parser("pretrain", help="submit a pretraining job for a tiny model of one family")
    add_pretrain_arguments(p)
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
        "--parallel", type=int, default=None, help="run at most this many sweep elements at once"
    )


def add_chain_and_monitor_verbs(sub) -> None:
    """pipeline and merge submit jobs like the verbs above; status/logs/cancel look at them."""
    from vqa_r1.launch.pipeline import add_arguments as add_pipeline_arguments

    p = sub.add_parser("pipeline", help="submit sft -> merge -> grpo -> evaluate as a job chain")
    add_pipeline_arguments(p)
    add_job_arguments(p)
    p = sub.add_parser("merge", help="merge a LoRA adapter into its base model (<run>/merged)")
    p.add_argument("--model", required=True, help="the adapter's base model (registered name)")
    p.add_argument("--adapter", required=True, help="LoRA adapter folder or run directory")
    p.add_argument("--recipe", default=None, help="recipe for the model settings (default sft_*)")
    add_set_argument(p)
    p.add_argument("--output-dir", default=None, help="run directory (default: runs/merge-...)")
    add_job_arguments(p)
    for verb, text in (
        ("status", "state of the jobs of a run, sweep or pipeline folder, or of a job id"),
        ("logs", "tail of a job's submitit stdout (or stderr)"),
        ("cancel", "cancel the unfinished jobs of a run, sweep or pipeline, or a job id"),
    ):
        p = sub.add_parser(verb, help=text)
        p.add_argument("target", metavar="RUN_DIR|PIPELINE_DIR|SWEEP_DIR|JOB_ID")
        if verb == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
        if verb == "logs":
            p.add_argument("-n", "--lines", type=int, default=40, help="lines to show (0: all)")
            p.add_argument("--stderr", action="store_true", help="the job's stderr log")


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument(
        "--executor",
        choices=["auto", "slurm", "local"],
        default="auto",
        help="auto: SLURM when sbatch is on PATH, else a local subprocess",
    )
    g.add_argument(
        "--cluster",
        default=None,
        help="cluster profile in slurm/clusters (default: $VQA_R1_CLUSTER or generic-gpu)",
    )
    g.add_argument("--gpus", type=int, default=None, help="GPUs per node (default: the recipe's)")
    g.add_argument("--nodes", type=int, default=None, help="nodes (default: the recipe's)")
    g.add_argument(
        "--time", default=None, help="time limit per job in SLURM format, e.g. 12:00:00 or 00:02:00"
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the job script and configuration; submit nothing",
    )
    g.add_argument(
        "--no-wait", action="store_true", help="local executor: return at once instead of waiting"
    )
    g.add_argument(
        "--max-requeues",
        type=int,
        default=50,
        help="stop requeueing after this many restarts (reported in status.json)",
    )
    g.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the working tree's code after a requeue instead of a copy taken at submission",
    )


def request_from_args(args: argparse.Namespace):
    from vqa_r1.launch.submit import LaunchRequest, Resources
    from vqa_r1.launch.task import Task

    if args.verb == "judge":
        from vqa_r1.judge.job import config_from_args, server_setup_lines

        jconfig = config_from_args(args)
        out = Path(args.output_dir or "runs/judge").resolve()
        task = Task("judge", str(out), extra={"config": jconfig})
        res = Resources(
            gpus=args.gpus
            if args.gpus is not None
            else (1 if getattr(jconfig, "vllm_model", None) else 0),
            nodes=args.nodes or 1,
            time=args.time or "04:00:00",
        )
        return LaunchRequest(
            task,
            res,
            args.executor,
            args.cluster,
            "vqa-r1-judge",
            args.dry_run,
            setup=server_setup_lines(jconfig),
            max_requeues=args.max_requeues,
            snapshot=not args.no_snapshot,
        ), out
    if args.verb == "merge":
        return merge_request(args)
    if args.verb == "pretrain":
        return pretrain_request(args)
    from vqa_r1.train.cli import config_from_args

    config, run_dir = config_from_args(args, args.verb)
    return request_for_config(args, args.verb, config, run_dir, getattr(args, "adapter", None))


def request_for_config(args: argparse.Namespace, verb: str, config, run_dir: Path, adapter=None):
    """The job request for a resolved config (shared by single jobs, sweeps and pipelines)."""
    import yaml

    from vqa_r1.config import save_config
    from vqa_r1.launch.submit import LaunchRequest, Resources
    from vqa_r1.launch.task import Task

    r = config.resources
    res = Resources(
        gpus=args.gpus if args.gpus is not None else r.gpus,
        nodes=args.nodes if args.nodes is not None else r.nodes,
        time=args.time or r.time,
        cpus=(r.cpus_per_gpu * max(1, args.gpus if args.gpus is not None else r.gpus))
        if r.cpus_per_gpu
        else None,
        mem_gb=r.mem_gb,
    )
    if config.train.use_vllm and config.train.vllm_mode == "server":
        res.tasks_per_node = max(1, res.gpus - 1)  # the last GPU serves vLLM
    config.resources.gpus, config.resources.nodes, config.resources.time = (
        res.gpus,
        res.nodes,
        res.time,
    )
    summary = [
        f"# vqa-r1 {verb} --model {config.model.name} --recipe {config.recipe}",
        f"# run directory: {run_dir}",
    ]
    flat = yaml.safe_dump(
        {k: config.to_dict()[k] for k in ("lora", "train")}, default_flow_style=True, width=10_000
    )
    summary.append(f"# settings: {flat.strip()}")
    if not args.dry_run:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "config.yaml").exists():
            save_config(config, run_dir / "config.yaml")
    check_model_available(config, submitting=not args.dry_run)
    task = Task(verb, str(run_dir), adapter=adapter)
    name = f"vqa-r1-{verb}-{config.model.name}"
    request = LaunchRequest(
        task,
        res,
        args.executor,
        args.cluster,
        name,
        args.dry_run,
        summary=summary,
        setup=job_setup_lines(config, res),
        max_requeues=args.max_requeues,
        snapshot=not args.no_snapshot,
    )
    return request, run_dir, config


def merge_request(args: argparse.Namespace):
    """`merge`: the base model's settings from an SFT recipe, the adapter checked here."""
    import time

    from vqa_r1.config import load_config
    from vqa_r1.eval.evaluate import resolve_adapter
    from vqa_r1.launch.pipeline import MERGE_TIME

    adapter = resolve_adapter(Path(args.adapter).resolve())
    config = load_config("sft", args.model, args.recipe, args.overrides)
    config.verb = "merge"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.output_dir or f"runs/merge-{args.model}-{stamp}").resolve()
    config.output_dir = str(run_dir)
    if args.time is None:
        args.time = MERGE_TIME
    return request_for_config(args, "merge", config, run_dir, str(adapter))


def pretrain_request(args: argparse.Namespace):
    """`pretrain`: the config checked here; the job resumes from its latest checkpoint."""
    from dataclasses import asdict

    from vqa_r1.launch.submit import LaunchRequest, Resources
    from vqa_r1.launch.task import Task
    from vqa_r1.train.pretrain import config_from_overrides

    cfg = config_from_overrides(args.family, args.overrides)
    out = Path(args.out).resolve()
    extra = {"config": asdict(cfg), "stop_after": args.stop_after}
    res = Resources(gpus=args.gpus or 0, nodes=args.nodes or 1, time=args.time or "04:00:00")
    summary = [
        f"# vqa-r1 pretrain --family {args.family} --out {out}",
        f"# settings: {asdict(cfg)}",
    ]
    request = LaunchRequest(
        Task("pretrain", str(out), extra=extra),
        res,
        args.executor,
        args.cluster,
        f"vqa-r1-pretrain-{args.family}",
        args.dry_run,
        summary=summary,
        max_requeues=args.max_requeues,
        snapshot=not args.no_snapshot,
    )
    return request, out


def job_setup_lines(config, res) -> list[str]:
    from vqa_r1.launch.distributed import job_setup_lines as lines

    return lines(config, res.gpus, res.nodes)


def check_model_available(config, submitting: bool) -> None:
    """A hub model must be in the cache before a job is queued: compute nodes are often offline."""
    from vqa_r1.models.loading import cached_hub_path, download_command
    from vqa_r1.models.registry import get_spec

    spec = get_spec(config.model.name)
    if spec.tiny or config.model.path or cached_hub_path(spec.hub_id) is not None:
        return
    message = (
        f"{spec.hub_id} is not in the local Hugging Face cache; download it first on this "
        f"login node: {download_command(spec.hub_id)}"
    )
    if submitting:
        raise UserError(message)
    print(f"note: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from vqa_r1.launch.monitor import record_job
    from vqa_r1.launch.submit import dry_run_text, pick_executor, submit, wait_local

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    command = shlex.join(["slurm/launch.py", *argv])
    try:
        if args.verb in MONITOR_VERBS:
            return monitor(args)
        if args.verb == "pipeline":
            from vqa_r1.launch.pipeline import run_pipeline

            return run_pipeline(args, command)
        if getattr(args, "sweep", None):
            from vqa_r1.launch.sweep import run_sweep

            return run_sweep(args, command)
        built = request_from_args(args)
        request, run_dir = built[0], built[1]
        if args.dry_run:
            print(dry_run_text(request))
            if len(built) > 2:
                import yaml

                print("# ---- resolved configuration (written to the run directory on submit) ----")
                print(yaml.safe_dump(built[2].to_dict(), sort_keys=False), end="")
            return 0
        kind = pick_executor(args.executor)
        job = submit(request, run_dir / "jobs")
        record_job(run_dir, str(job.job_id), kind, run_dir / "jobs", command)
        print(f"submitted {args.verb} as {kind} job {job.job_id}; run directory {run_dir}")
        if kind == "local" and not args.no_wait:
            result = wait_local(job)
            print(f"{args.verb} finished: {summarise(result)}")
        return 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def monitor(args: argparse.Namespace) -> int:
    from vqa_r1.launch import monitor as m

    if args.verb == "status":
        print(m.status_report(args.target, as_json=args.json))
    elif args.verb == "logs":
        print(m.logs_report(args.target, args.lines, args.stderr))
    else:
        print(m.cancel(args.target))
    return 0


def summarise(result) -> str:
    if isinstance(result, dict):
        keys = ("state", "global_step", "accuracy", "exit_code")
        return ", ".join(f"{k}={result[k]}" for k in keys if k in result) or str(result)[:200]
    return str(result)[:200]

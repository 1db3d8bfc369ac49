"""`vqa-r1 prompt-tune`: PEFT prompt tuning (virtual tokens, the model frozen), then evaluation, in
this process (a one-step graph of the one builder and executor)."""

from __future__ import annotations

import argparse

from vqa_r1.cli.common import add_overwrite_argument, add_set_argument, number, run_inprocess
from vqa_r1.domains import at_least
from vqa_r1.logging_setup import setup_logging
from vqa_r1.typed_config import help_text


def add_arguments(parser: argparse.ArgumentParser, verb: str = "prompt-tune") -> None:
    from vqa_r1.train.prompt_tuning import PromptTuneConfig

    parser.add_argument("--model", default=None, help="registered model name (key model.name)")
    parser.add_argument(
        "--mode", default=None, help="answer or reasoning (key mode; default answer)"
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        help="run directory (config, checkpoints, final/ adapter, eval/); resumes a partial run",
    )
    parser.add_argument(
        "--base",
        action="store_true",
        help="no training: score the base model with no virtual tokens in --mode "
        "(answer: P(True) vs P(False); reasoning: ordinary generation) into OUTPUT_DIR",
    )
    parser.add_argument(
        "--stop-after",
        type=number(at_least(1)),
        default=None,
        metavar="N",
        help="stop after N steps of the same run (a killed run); run again to resume",
    )
    add_overwrite_argument(parser)
    add_set_argument(parser, "override a key, e.g. --set train.max_steps=300 (keys below)")
    parser.epilog = "prompt-tuning keys (--set KEY=VALUE):\n" + help_text(PromptTuneConfig)


def run(args: argparse.Namespace) -> int:
    from vqa_r1.launch.build import prompt_tune_graph
    from vqa_r1.launch.request import JobOptions
    from vqa_r1.train.prompt_tuning import config_from_overrides

    setup_logging()
    overrides = list(args.overrides)
    if args.model is not None:
        overrides.append(f"model.name={args.model}")
    if args.mode is not None:
        overrides.append(f"mode={args.mode}")
    cfg = config_from_overrides(overrides)
    job = JobOptions(executor="inprocess", overwrite=args.overwrite)
    graph = prompt_tune_graph(cfg, args.output_dir, args.base, args.stop_after, job)
    outcome = run_inprocess(graph)
    if outcome.nothing_to_do:
        return 0
    scores = outcome.results["prompt-tune"]
    if not args.base and "accuracy" not in scores:
        step = scores["training"]["global_step"]
        print(f"prompt-tune stopped after {step} steps; run again to resume")
        return 0
    print(summary(scores, base=args.base))
    where = args.output_dir if args.base else f"{args.output_dir}/eval"
    print(f"scores in {where}")
    return 0


def summary(scores: dict, base: bool) -> str:
    """One line a person reads (the numbers themselves are in scores.json)."""
    what = "no prompt (base)" if base else f"{scores.get('mode')} prompt"
    ci = scores.get("accuracy_ci_95")
    interval = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else ""
    fmt = scores.get("format_rate")
    rate = "not scored in answer mode" if fmt is None else f"{fmt:.3f}"
    return (
        f"prompt-tune: {what} on {scores.get('model')}, {scores.get('split')} split: accuracy "
        f"{scores['accuracy']:.3f}{interval} on {scores.get('n')} items; format rate {rate}"
    )

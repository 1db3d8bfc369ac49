"""`vqa-r1 sft` and `vqa-r1 grpo`: train locally in this process (the launcher submits the same)."""

from __future__ import annotations

import argparse

from vqa_r1.cli_args import add_set_argument


def add_run_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--model", default="tiny-qwen2.5-vl", help="registered model name (`vqa-r1 models`)"
    )
    parser.add_argument(
        "--dataset", default=None, help="'synthetic' or a dataset folder (save_to_disk)"
    )
    parser.add_argument(
        "--recipe", default=None, help=f"recipe name or YAML path (default: {verb}_<size>)"
    )
    add_set_argument(parser)
    parser.add_argument(
        "--output-dir", default=None, help="run directory (default: runs/<verb>-<model>-<time>)"
    )
    if verb == "grpo":
        parser.add_argument(
            "--init-adapter",
            default=None,
            help="continue from this LoRA adapter (e.g. an SFT run's final/)",
        )
    if verb == "evaluate":
        parser.add_argument(
            "--adapter", default=None, help="LoRA adapter or run directory to evaluate"
        )
        parser.add_argument(
            "--split", default=None, help="dataset split (default: the recipe's eval.split)"
        )
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument(
            "--limit", type=int, default=None, help="evaluate only the first N rows"
        )
        parser.add_argument("--answer-rule", choices=["robust", "study"], default=None)
        parser.add_argument("--generation-cache", choices=["auto", "on", "off"], default=None)


def config_from_args(args: argparse.Namespace, verb: str) -> tuple:
    """Resolve the RunConfig and the run directory from parsed arguments (no model is loaded)."""
    import time
    from pathlib import Path

    from vqa_r1.config import load_config

    overrides = list(args.overrides)
    if args.dataset:
        overrides.append(f"data.dataset={args.dataset}")
    extra = {}
    if verb == "grpo" and getattr(args, "init_adapter", None):
        extra["init_adapter"] = str(Path(args.init_adapter).resolve())
    if verb == "evaluate":
        for key, attr in (
            ("eval.split", "split"),
            ("eval.batch_size", "batch_size"),
            ("eval.limit", "limit"),
            ("eval.answer_rule", "answer_rule"),
            ("model.generation_cache", "generation_cache"),
        ):
            if getattr(args, attr, None) is not None:
                overrides.append(f"{key}={getattr(args, attr)}")
    config = load_config(verb, args.model, args.recipe, overrides, **extra)
    run_dir = args.output_dir or f"runs/{verb}-{args.model}-{time.strftime('%Y%m%d-%H%M%S')}"
    config.output_dir = str(Path(run_dir).resolve())
    return config, Path(config.output_dir)


def make_verb(verb: str):
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_run_arguments(parser, verb)

    def run(args: argparse.Namespace) -> int:
        from vqa_r1.logging_setup import setup_logging
        from vqa_r1.train.runner import train

        setup_logging()
        config, run_dir = config_from_args(args, verb)
        status = train(config, run_dir)
        print(f"{verb} finished: {status.get('global_step')} steps; run directory {run_dir}")
        return 0

    return add_arguments, run

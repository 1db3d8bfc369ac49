"""`vqa-r1 <verb>`: one program behind the console script, `python -m vqa_r1` and the launcher.

The top layer of the package: each verb is a module of this package exposing
``add_arguments(parser, verb)`` and ``run(args) -> int``; it parses arguments and calls the library.
Only the chosen verb's module is imported, so `vqa-r1 --help` and `vqa-r1 score` stay fast (torch,
transformers and TRL are imported inside the functions that need them).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vqa_r1.cli.common import ArgumentParser, exit_status

# verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "models": ("vqa_r1.cli.models", "list the registered models"),
    "data": (
        "vqa_r1.cli.data",
        "generate synthetic scenes (sim or shifted), build a biased training set, inspect a dataset",
    ),
    "config": ("vqa_r1.cli.config", "every configuration key with its type, default and meaning"),
    "pretrain": (
        "vqa_r1.cli.pretrain",
        "pretrain a tiny model of one family on the general-skills curriculum",
    ),
    "sft": ("vqa_r1.cli.train", "supervised fine-tuning with LoRA (TRL SFTTrainer)"),
    "grpo": ("vqa_r1.cli.train", "GRPO with LoRA (TRL GRPOTrainer)"),
    "prompt-tune": (
        "vqa_r1.cli.prompt_tune",
        "PEFT prompt tuning (virtual tokens, model frozen) in answer or reasoning mode",
    ),
    "evaluate": ("vqa_r1.cli.evaluate", "batched evaluation of a model or checkpoint"),
    "score": ("vqa_r1.cli.score", "score a generated_responses.json without a model"),
    "demo": (
        "vqa_r1.cli.demo",
        "the embedded end-to-end demo on CPU (data, SFT, GRPO, evaluation)",
    ),
    "judge": ("vqa_r1.cli.judge", "LLM-as-judge alignment checks and statistics"),
    "tables": (
        "vqa_r1.cli.tables",
        "rebuild every experiment's tables and plots, and the study's reference table",
    ),
    "doctor": (
        "vqa_r1.cli.doctor",
        "check the GPU, driver, versions, model cache and SLURM settings before a long job",
    ),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="vqa-r1", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    wanted = argv[0] if argv else None
    for verb, (module_name, help_text) in VERBS.items():
        p = sub.add_parser(
            verb,
            help=help_text,
            description=help_text,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # Only the chosen verb's module is imported: the others get a bare parser for `--help`.
        if verb == wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(p, verb)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    where = getattr(args, "output_dir", None) or getattr(args, "out", None)
    return exit_status(lambda: args._run(args), where=str(where) if where else None)


if __name__ == "__main__":
    raise SystemExit(main())

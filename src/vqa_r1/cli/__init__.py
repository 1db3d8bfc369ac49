"""`vqa-r1 <verb>`: one program behind the console script, `python -m vqa_r1` and the launcher.

Each verb lives in the module that owns it; that module exposes ``add_arguments(parser)`` and
``run(args) -> int``. This file only wires them up, importing lazily so that `vqa-r1 --help` and
`vqa-r1 score` stay fast (no torch import).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "models": ("vqa_r1.models.cli", "list the registered models"),
    "data": ("vqa_r1.data.cli", "generate the synthetic dataset or inspect a dataset"),
    "pretrain": (
        "vqa_r1.train.cli_pretrain",
        "pretrain a tiny model of one family on the general-skills curriculum",
    ),
    "sft": ("vqa_r1.train.cli_sft", "supervised fine-tuning with LoRA (TRL SFTTrainer)"),
    "grpo": ("vqa_r1.train.cli_grpo", "GRPO with LoRA (TRL GRPOTrainer)"),
    "evaluate": ("vqa_r1.eval.cli", "batched evaluation of a model or checkpoint"),
    "score": ("vqa_r1.eval.score_cli", "score a generated_responses.json without a model"),
    "demo": ("vqa_r1.demo", "the embedded end-to-end demo on CPU (data, SFT, GRPO, evaluation)"),
    "judge": ("vqa_r1.judge.cli", "LLM-as-judge alignment checks and statistics"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vqa-r1", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    wanted = sys.argv[1] if len(sys.argv) > 1 else None
    for verb, (module_name, help_text) in VERBS.items():
        p = sub.add_parser(verb, help=help_text, description=help_text)
        # Only the chosen verb's module is imported: the others get a bare parser for `--help`.
        if verb == wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    parser = build_parser()
    args = parser.parse_args()
    from vqa_r1.errors import UserError

    try:
        return int(args._run(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `vqa-r1 ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Arguments that several verbs share, declared once so that they read and parse alike."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING

from vqa_r1.config import RunConfig
from vqa_r1.domains import Domain
from vqa_r1.errors import UserError, unwritable_message
from vqa_r1.run_dir import failure_reason, write_failed
from vqa_r1.typed_config import help_text

if TYPE_CHECKING:  # the launcher's builder imports half the package: `vqa-r1 data` needs none
    from vqa_r1.launch.build import RunSpec


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with its errors on one line, as the suite's own: ``error: argument
    --gpus: must be at least 0, got -1 (vqa-r1 doctor --help lists the options)``, exit status 2
    (argparse prints its usage block first, which buries the line that says what is wrong)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {message} (`{self.prog} --help` lists the options)\n")


def number(domain: Domain, kind: type = int) -> Callable[[str], int | float]:
    """An argparse ``type=`` for a numeric flag with its range (domains.py): ``--gpus -1`` is
    refused as the command starts, ``argument --gpus: must be at least 0, got -1``."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            word = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {word}, got {text!r}") from None
        if not domain.allows(value):
            raise argparse.ArgumentTypeError(f"must be {domain.text()}, got {value}")
        return value

    return parse


def add_set_argument(
    parser: argparse.ArgumentParser,
    help: str = "override a recipe key, e.g. --set train.learning_rate=1e-4 (repeatable; "
    "`vqa-r1 config` lists the keys)",
    metavar: str = "KEY=VALUE",
) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``; typed by the key's field."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar=metavar, help=help
    )


def add_model_argument(
    parser: argparse.ArgumentParser, required: bool = False, what: str = ""
) -> None:
    parser.add_argument(
        "--model",
        required=required,
        default=None if required else "tiny-qwen2.5-vl",
        help=f"registered model name{what} (`vqa-r1 models`)",
    )


def add_dataset_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        default=None,
        help="'synthetic', a dataset folder (save_to_disk) or a release folder (VSR, Rel3D, "
        "SpatialSense, DrivingVQA, SuperCLEVR counting, R1-V's CLEVR rows; docs/datasets.md)",
    )


def add_recipe_argument(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--recipe",
        default=None,
        help=f"another model's recipe by name (<family>/<size>_{verb}), or a YAML file applied on "
        "top of the model's own (default: the model's own; `vqa-r1 config --model M --verb V` "
        "shows it and where each value comes from)",
    )


def add_output_dir_argument(parser: argparse.ArgumentParser, what: str, default: str) -> None:
    parser.add_argument("--output-dir", default=None, help=f"{what} (default: {default})")


def add_overwrite_argument(parser: argparse.ArgumentParser, what: str = "--output-dir") -> None:
    """``--overwrite``: a folder the command would refuse is moved aside (claims.py)."""
    if "--overwrite" in parser._option_string_actions:
        return
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"when {what} holds something else (files not written by vqa-r1, another run, other "
        "settings, or a finished run), move it aside to <name>.old-<time> and start afresh; "
        "nothing is deleted",
    )


def make_way_or_complete(root, verb: str, settings, overwrite: bool, flag: str = "--output-dir"):
    """claims.make_way, printing what it found; True when ``root`` is complete (nothing to do).
    The data builders' rule (`vqa-r1 data ...`), which write one folder in this process."""
    from vqa_r1 import claims

    state = claims.make_way(root, verb, settings, overwrite=overwrite, flag=flag)
    if state == claims.COMPLETE:
        print(
            f"{verb}: {root} is complete with these settings: nothing to do (--overwrite, or a "
            f"new {flag}, to run it again)"
        )
        return True
    return False


def run_inprocess(graph, argv: list[str] | None = None):  # noqa: ANN001, ANN201
    """A `vqa-r1 <verb>` command: its one-step graph run in this process by the one executor
    (launch/executor.py); the outcome, for the verb's own summary line."""
    import shlex

    from vqa_r1.launch import executor

    command = shlex.join(["vqa-r1", *(sys.argv[1:] if argv is None else argv)])
    return executor.execute(graph, command)


def add_run_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """The options of a run (sft, grpo, evaluate), locally and through the launcher alike."""
    add_model_argument(parser)
    add_dataset_argument(parser)
    add_recipe_argument(parser, verb)
    add_set_argument(parser)
    add_output_dir_argument(parser, "run directory", "runs/<verb>-<model>-<time>")
    add_overwrite_argument(parser)
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
        for flag, key in _EVAL_SHORTCUTS:
            parser.add_argument(flag, default=None, help=f"shortcut for --set {key}=VALUE")
    parser.epilog = "configuration keys (--set KEY=VALUE):\n" + help_text(RunConfig)
    # replace argparse's own -h/--help (the subparser and its options group both check conflicts)
    parser.conflict_handler = parser._optionals.conflict_handler = "resolve"
    parser.add_argument(
        "-h",
        "--help",
        action=RecipeHelp,
        verb=verb,
        help="show this help, with the values of the recipe --model/--recipe/--set given before "
        "it (default model: tiny-qwen2.5-vl), and exit",
    )


class RecipeHelp(argparse.Action):
    """``--help`` whose key list shows the values the command will use: the recipe of the model
    (and ``--recipe``, ``--set``, ``--dataset``) given before ``--help``, resolved as the command
    resolves it, rather than the dataclass defaults no recipe keeps."""

    def __init__(self, option_strings: list[str], verb: str, help: str | None = None, **_: object):
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )
        self.verb = verb

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        parser.epilog = recipe_epilog(self.verb, namespace)
        parser.print_help()
        parser.exit()


def recipe_epilog(verb: str, namespace: argparse.Namespace) -> str:
    """The configuration keys with the values ``verb`` would use given what is parsed so far."""
    from vqa_r1.errors import UserError
    from vqa_r1.recipes import load_config

    model = getattr(namespace, "model", None) or "tiny-qwen2.5-vl"
    overrides = list(getattr(namespace, "overrides", None) or [])
    if getattr(namespace, "dataset", None):
        overrides.append(f"data.dataset={namespace.dataset}")
    try:
        config = load_config(verb, model, getattr(namespace, "recipe", None), overrides)
    except UserError as err:
        return (
            f"configuration keys (--set KEY=VALUE), dataclass defaults (no recipe: {err}):\n"
            + help_text(RunConfig)
        )
    return (
        f"configuration keys (--set KEY=VALUE), with the values of recipe {config.recipe} for "
        f"--model {model} (give --model M before --help for another model's):\n"
        + help_text(RunConfig, values=config)
    )


# evaluate's flags that are shortcuts for --set: parsed and checked by the key's field
_EVAL_SHORTCUTS = (
    ("--split", "eval.split"),
    ("--batch-size", "eval.batch_size"),
    ("--limit", "eval.limit"),
    ("--answer-rule", "eval.answer_rule"),
    ("--generation-cache", "model.generation_cache"),
)


def run_spec(args: argparse.Namespace, verb: str) -> RunSpec:
    """The RunSpec of parsed run arguments: shortcut flags become overrides."""
    from vqa_r1.launch.build import RunSpec

    overrides = list(args.overrides)
    if args.dataset:
        overrides.append(f"data.dataset={args.dataset}")
    if verb == "evaluate":
        for flag, key in _EVAL_SHORTCUTS:
            value = getattr(args, flag[2:].replace("-", "_"), None)
            if value is not None:
                overrides.append(f"{key}={value}")
    return RunSpec(
        verb=verb,
        model=args.model,
        recipe=args.recipe,
        overrides=tuple(overrides),
        output_dir=args.output_dir,
        adapter=getattr(args, "adapter", None),
        init_adapter=getattr(args, "init_adapter", None),
    )


def exit_status(run: Callable[[], int | None], where: str | None = None) -> int:
    """``run``'s exit status; bad input and an unwritable folder are one line on stderr (2), a
    reader that left (`... | head`) is no error of ours (0), a full disk one line naming where
    and what to do (1; the run's status.json holds the same line). ``where``: the command's
    output folder, where a write that says nothing of its path was going."""
    try:
        return int(run() or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # work that stops where Ctrl-C found it (training checkpoints first)
        there = f" (python slurm/launch.py status {where})" if where else ""
        print(f"interrupted by Ctrl-C: the same command goes on from what was saved{there}",
              file=sys.stderr)  # fmt: skip
        return 130
    except Exception as err:  # OSError, torch's RuntimeError, safetensors' SafetensorError
        if isinstance(err, OSError) and (message := unwritable_message(err)) is not None:
            print(f"error: {message}", file=sys.stderr)  # a read-only output folder
            return 2
        if not write_failed(err):
            raise
        print(f"error: {failure_reason(err, where or '.')}", file=sys.stderr)  # a full disk
        return 1

"""`vqa-r1 judge {run,stats,agreement}`: argument parsing only; the work lives in the modules."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from vqa_r1.answers import ANSWER_RULES
from vqa_r1.cli.judge_options import add_run_arguments, config_from_args
from vqa_r1.errors import UserError
from vqa_r1.judge import agreement, stats
from vqa_r1.judge.job import run_job
from vqa_r1.judge.responses import load_records, parse_named_files


def add_arguments(parser: argparse.ArgumentParser, verb: str = "judge") -> None:

    sub = parser.add_subparsers(dest="judge_command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="judge whether each response's reasoning supports its answer")
    add_run_arguments(run)

    stats = sub.add_parser("stats", help="accuracy, misalignment and type counts per model")
    stats.add_argument("--checks", help="alignment checks JSON (the study's or ours)")
    stats.add_argument("--responses", action="append", default=[], metavar="NAME=FILE",
                       help="responses file of model NAME (accuracy); repeat")  # fmt: skip
    stats.add_argument("--config", help="YAML listing several sets (e.g. the study's splits)")
    stats.add_argument("--data-root", help="root for the config's relative paths")
    stats.add_argument("--answer-rule", choices=ANSWER_RULES, default="robust")
    stats.add_argument("--format", choices=("markdown", "csv", "latex", "json"),
                       default="markdown")  # fmt: skip
    stats.add_argument("--out", help="write here instead of stdout")

    agree = sub.add_parser("agreement", help="judge verdicts vs human labels")
    agree.add_argument("--judge", required=True, help="checks file with the judge's 'aligns'")
    agree.add_argument("--human", required=True, help="human labels (human_aligns or aligns)")
    agree.add_argument("--judge-field", default="aligns")
    agree.add_argument("--human-field", default=None,
                       help="default: human_aligns if present, else aligns")  # fmt: skip
    agree.add_argument("--format", choices=("markdown", "json"), default="markdown")
    agree.add_argument("--out", help="write here instead of stdout")


def _emit(text: str, out: str | None) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


def _run_stats(args: argparse.Namespace) -> int:

    if args.config:
        if args.checks or args.responses:
            raise UserError("--config replaces --checks/--responses: give one or the other")
        root = Path(args.data_root).resolve() if args.data_root else None
        sets = stats.load_config(Path(args.config), root)
    else:
        if not args.checks or not args.responses:
            raise UserError(
                "give --checks FILE and at least one --responses NAME=FILE (or --config)"
            )
        pairs = parse_named_files(args.responses, "--responses")
        sets = [stats.StatsSet(name="", checks=Path(args.checks), responses=pairs)]
    rendered = []
    as_json = {}
    for entry in sets:
        checks = load_records(entry.checks)
        names = {str(r.get("model")) for r in checks}
        for name, _ in entry.responses:
            if name not in names:
                print(f"warning: no checks for model {name!r} in {entry.checks} "
                      f"(models there: {', '.join(sorted(names))})", file=sys.stderr)  # fmt: skip
        for model, count in sorted(stats.unjudged_counts(checks).items()):
            print(f"note: {count} unjudged (failed/skipped) item(s) of {model!r} excluded",
                  file=sys.stderr)  # fmt: skip
        result = stats.compute(checks, entry.responses, args.answer_rule)
        paired = stats.paired_misalignment(checks, [name for name, _ in entry.responses])
        if args.format == "json":
            as_json[entry.name] = stats.as_json(result)
            as_json[entry.name]["paired"] = [asdict(t) for t in paired]
        else:
            title = entry.name or None
            if title and args.format == "markdown":
                title = f"{title} (answer rule: {args.answer_rule})"
            text = stats.render(result, args.format, title)
            if args.format == "markdown" and paired:
                text += "\n\n" + stats.render_paired(paired)
            rendered.append(text)
    if args.format == "json":
        payload = as_json[""] if list(as_json) == [""] else {"sets": as_json}
        _emit(json.dumps(payload, indent=2), args.out)
    else:
        separator = "\n" if args.format == "csv" else "\n\n"
        if args.format == "csv" and len(rendered) > 1:  # one header for one CSV table
            rendered = [rendered[0]] + ["\n".join(r.splitlines()[1:]) for r in rendered[1:]]
        _emit(separator.join(rendered), args.out)
    return 0


def _run_agreement(args: argparse.Namespace) -> int:

    result = agreement.compute(
        Path(args.judge), Path(args.human), args.judge_field, args.human_field
    )
    _emit(agreement.render(result, args.format), args.out)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.judge_command == "run":
        return run_job(config_from_args(args))
    if args.judge_command == "stats":
        return _run_stats(args)
    if args.judge_command == "agreement":
        return _run_agreement(args)
    raise UserError(f"unknown judge command {args.judge_command!r}")

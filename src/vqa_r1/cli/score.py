"""`vqa-r1 score FILE`: accuracy (Wilson CI), weighted P/R/F1 of a generated_responses.json."""

from __future__ import annotations

import argparse
import json

from vqa_r1.answers import ANSWER_RULES
from vqa_r1.eval.scoring import (
    grounding_scores,
    read_responses,
    rule_differences,
    score_responses,
)


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="generated_responses.json file(s), or R1-V counting logs (counting_results_*.json)",
    )
    parser.add_argument(
        "--answer-rule",
        choices=ANSWER_RULES,
        default="robust",
        help="robust (default; number for counts), the published study's scoring, number, or "
        "r1v_count (R1-V's counting evaluation)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--show-differences",
        action="store_true",
        help="list the items that the robust and study rules score differently",
    )


def run(args: argparse.Namespace) -> int:

    results = {}
    for path in args.files:
        records = read_responses(path)
        results[path] = score_responses(records, args.answer_rule)
        grounding = grounding_scores(records)  # responses with the items' boxes (DrivingVQA)
        if grounding is not None:
            results[path]["grounding"] = grounding
        if args.show_differences:
            results[path]["rule_differences"] = rule_differences(records)
    if args.json:
        print(json.dumps(results if len(results) > 1 else next(iter(results.values())), indent=2))
        return 0
    for path, s in results.items():
        lo, hi = s["accuracy_ci_95"]
        print(
            f"{path}\n  rule={s['answer_rule']} n={s['n']} correct={s['correct']} "
            f"accuracy={s['accuracy']:.4f} [{lo:.4f}, {hi:.4f}] f1_weighted={s['f1_weighted']:.4f} "
            f"unparsed={s['unparsed']} format_rate={s['format_rate']:.3f}"
        )
        if "grounding" in s:
            g = s["grounding"]
            named = "-" if g["named"] is None else f"{g['named']:.3f}"
            placed = "-" if g["placed_when_named"] is None else f"{g['placed_when_named']:.3f}"
            print(
                f"  grounding: box_iou={g['box_iou']:.3f} grounded={g['grounded']:.3f} of "
                f"{g['entities']} entities; boxes written {g['boxes_written']}, named "
                f"{named}, placed when named {placed}"
            )
        if "published_accuracy" in s:
            print(
                f"  published accuracy={s['published_accuracy']:.4f}; items whose published "
                f"reading differs from this rule's: {s.get('published_disagreements', 0)}"
            )
        for d in s.get("rule_differences", []):
            first, second = d.get("rules", ("robust", "study"))
            print(
                f"    item {d['index']}: {first} read {d['robust']!r} ({'right' if d['robust_correct'] else 'wrong'}), "
                f"{second} read {d['study']!r} ({'right' if d['study_correct'] else 'wrong'}), label {d['label']}"
            )
    return 0

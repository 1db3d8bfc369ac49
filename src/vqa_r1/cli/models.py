"""`vqa-r1 models`: the registered model names."""

from __future__ import annotations

import argparse

from vqa_r1.models.registry import MODELS


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.json:
        import json

        print(
            json.dumps(
                {
                    n: {"family": s.family, "hub_id": s.hub_id, "size": s.size}
                    for n, s in MODELS.items()
                },
                indent=2,
            )
        )
        return 0
    width = max(len(n) for n in MODELS)
    print(f"{'name':<{width}}  {'family':<11} {'params':<17} hub id")
    for name, spec in MODELS.items():
        print(f"{name:<{width}}  {spec.family:<11} {spec.params:<17} {spec.source}")
    return 0

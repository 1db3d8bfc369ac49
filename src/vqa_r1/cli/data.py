"""`vqa-r1 data generate|show`: write the synthetic dataset, or inspect a dataset folder."""

from __future__ import annotations

import argparse

from vqa_r1.data.datasets import load_split
from vqa_r1.data.synthetic import SceneConfig, SyntheticSpec, write_dataset


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    sub = parser.add_subparsers(dest="data_cmd", required=True)
    gen = sub.add_parser("generate", help="write synthetic spatial scenes (VSR schema) to a folder")
    gen.add_argument("--out", required=True, help="output folder")
    gen.add_argument("--train", type=int, default=2000)
    gen.add_argument("--validation", type=int, default=200)
    gen.add_argument("--test", type=int, default=400)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--min-objects", type=int, default=2)
    gen.add_argument("--max-objects", type=int, default=4)
    gen.add_argument(
        "--background",
        choices=["plain", "ramp"],
        default="plain",
        help="ramp: a pale position-coding background (see vqa_r1.data.synthetic)",
    )
    show = sub.add_parser("show", help="print the splits, sizes and first rows of a dataset folder")
    show.add_argument("path")
    show.add_argument("--split", default="train")


def run(args: argparse.Namespace) -> int:
    import time

    if args.data_cmd == "generate":
        spec = SyntheticSpec(
            splits={"train": args.train, "validation": args.validation, "test": args.test},
            seed=args.seed,
            scene=SceneConfig(
                min_objects=args.min_objects,
                max_objects=args.max_objects,
                background_style=args.background,
            ),
        )
        start = time.perf_counter()
        write_dataset(args.out, spec)
        n = sum(spec.splits.values())
        took = time.perf_counter() - start
        print(f"wrote {n} scenes to {args.out} in {took:.1f} s ({n / took:.0f} scenes/s)")
        return 0
    ds = load_split(args.path, args.split)
    print(ds)
    for row in ds.select(range(min(3, len(ds)))):
        print({k: row[k] for k in ("caption", "label", "relation") if k in row})
    return 0

"""`vqa-r1 data generate|show|bias|counting|cryptogram`: write the synthetic dataset, inspect a dataset folder,
write a copy whose training split carries a chosen text or visual bias (vqa_r1.data.bias), or
write the CLEVR-CoGenT-style counting stand-in (vqa_r1.data.counting)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vqa_r1 import claims
from vqa_r1.cli.common import add_overwrite_argument, make_way_or_complete
from vqa_r1.data.synthetic import DomainShift, SceneConfig, SyntheticSpec, write_dataset
from vqa_r1.errors import UserError

# 'synthetic' in `data show` and `data bias --source`: this recipe's data (the demo's)
DEMO_RECIPE = "qwen2_5_vl/tiny-pretrained_sft"
SOURCES = (
    f"'synthetic' (the demo's data, recipe {DEMO_RECIPE}) or any folder "
    "--dataset takes (saved with save_to_disk, or a VSR, Rel3D or SpatialSense release folder, "
    "converted as training converts it)"
)


def _generator_parser(sub: Any, name: str, help: str, sizes: tuple) -> argparse.ArgumentParser:
    """A generator's subcommand: --out (claimed, --overwrite), a count per split, --seed."""
    parser = sub.add_parser(name, help=help)
    parser.add_argument(
        "--out", required=True, help="output folder (new or empty; or this command's own)"
    )
    add_overwrite_argument(parser, "--out")
    for flag, n, what in sizes:
        parser.add_argument(flag, type=int, default=n, help=f"{what} (0 or more)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    sub = parser.add_subparsers(dest="data_cmd", required=True)
    gen = sub.add_parser("generate", help="write synthetic spatial scenes (VSR schema) to a folder")
    gen.add_argument(
        "--out", required=True, help="output folder (new or empty; or this command's own)"
    )
    add_overwrite_argument(gen, "--out")
    gen.add_argument("--train", type=int, default=2000, help="training scenes (0 or more)")
    gen.add_argument("--validation", type=int, default=200, help="validation scenes (0 or more)")
    gen.add_argument("--test", type=int, default=400, help="test scenes (0 or more)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--min-objects", type=int, default=2, help="fewest objects per scene (>= 1)")
    gen.add_argument(
        "--max-objects", type=int, default=4, help="most objects per scene (>= 2, >= --min-objects)"
    )
    gen.add_argument(
        "--background",
        choices=["plain", "ramp"],
        default="plain",
        help="ramp: a pale position-coding background (see vqa_r1.data.synthetic)",
    )
    gen.add_argument(
        "--domain",
        choices=["sim", "shifted"],
        default="sim",
        help="shifted: the same scenes in another look (vqa_r1.data.synthetic.DomainShift)",
    )
    gen.add_argument(
        "--shift-strength", type=float, default=1.0, help="shifted domain: strength in [0, 1]"
    )
    count = _generator_parser(
        sub,
        "counting",
        "write the CLEVR-CoGenT-style counting stand-in (train/validation/test: condition A, "
        "test_b: condition B)",
        (
            ("--train", 2000, "training scenes, condition A"),
            ("--validation", 200, "validation scenes, condition A"),
            ("--test", 400, "test scenes, condition A"),
            ("--test-b", 400, "test scenes, condition B (other pairings, 7-10 objects)"),
        ),
    )
    count.add_argument("--image-size", type=int, default=112, help="pixels per side")
    crypt = _generator_parser(
        sub,
        "cryptogram",
        "write visual cryptograms (a decoder image and a coded message per row; "
        "train/validation/test, held-out messages never in train)",
        (
            ("--train", 3000, "training rows"),
            ("--validation", 150, "validation rows"),
            ("--test", 300, "test rows"),
        ),
    )
    crypt.add_argument(
        "--alphabet", default="abcdefghijklmnopqrstuvwxyz", help="letters the decoder maps"
    )
    crypt.add_argument(
        "--word-counts", default="1,2,3", help="words per message, comma-separated (1,2,3)"
    )
    crypt.add_argument(
        "--word-lengths", default="3,8", help="letters per word: min,max (inclusive)"
    )
    crypt.add_argument(
        "--words",
        default="builtin",
        help="builtin (a short English list), letters (random strings over the alphabet) or a "
        "text file with one word a line",
    )
    crypt.add_argument("--image-size", type=int, default=224, help="decoder image, pixels a side")
    crypt.add_argument(
        "--order",
        choices=["curriculum", "shuffled"],
        default="curriculum",
        help="curriculum: training rows ordered by word count; shuffled: mixed",
    )
    crypt.add_argument(
        "--layout",
        choices=["grid", "table"],
        default="grid",
        help="grid: cells of 'coded -> plain'; table: each coded letter above its plain letter",
    )
    crypt.add_argument(
        "--worked-steps",
        action="store_true",
        help="the targets' reasoning reads the decoder cell by cell, then looks each coded "
        "letter up (d -> c, ...), before <chars>",
    )
    crypt.add_argument(
        "--letter-colours",
        action="store_true",
        help="draw each letter in its own colour (letters a-f only; for the tiny models, whose "
        "vision towers tell colours apart but not letter shapes)",
    )
    _generator_parser(
        sub,
        "two-image",
        "write two-image questions (is the object at one end of the first image the same "
        "colour as the one at that end of the second?) as multi-image JSONL + images/",
        (
            ("--train", 2000, "training pairs"),
            ("--validation", 200, "validation pairs"),
            ("--test", 400, "test pairs"),
        ),
    )
    bias = sub.add_parser(
        "bias",
        help="write a dataset whose training split a text- or image-only classifier predicts "
        "with a chosen accuracy",
    )
    bias.add_argument("--kind", choices=["text", "visual"], required=True)
    bias.add_argument(
        "--target", type=float, required=True, help="the classifier's accuracy wanted, e.g. 0.69"
    )
    bias.add_argument("--source", default="synthetic", help=SOURCES)
    bias.add_argument(
        "--out",
        required=True,
        help="output folder (new or empty; or this command's own); not --source nor inside it",
    )
    add_overwrite_argument(bias, "--out")
    bias.add_argument("--seed", type=int, default=0, help="which rows are dropped")
    bias.add_argument("--split", default="train", help="the split biased (the others are copied)")
    show = sub.add_parser("show", help="print the splits, sizes and first rows of a dataset folder")
    show.add_argument("path", help=SOURCES)
    show.add_argument("--split", default="train")


def run(args: argparse.Namespace) -> int:
    import time

    if args.data_cmd == "generate":
        _check_generate(args)
        spec = SyntheticSpec(
            splits={"train": args.train, "validation": args.validation, "test": args.test},
            seed=args.seed,
            scene=SceneConfig(
                min_objects=args.min_objects,
                max_objects=args.max_objects,
                background_style=args.background,
                shift=None
                if args.domain == "sim"
                else DomainShift(strength=args.shift_strength, seed=args.seed),
            ),
        )
        settings = {"spec": asdict(spec)}
        if make_way_or_complete(args.out, "data generate", settings, args.overwrite, "--out"):
            return 0
        start = time.perf_counter()
        with claims.writing(args.out, "data generate", settings, "--out"):
            claims.remove_temporaries(args.out)  # of a killed run of this command
            write_dataset(args.out, spec, carry=(claims.MARKER, claims.LOCK))
            claims.mark_complete(args.out)
        n = sum(spec.splits.values())
        took = time.perf_counter() - start
        print(f"wrote {n} scenes to {args.out} in {took:.1f} s ({n / took:.0f} scenes/s)")
        return 0
    if args.data_cmd == "bias":
        return _bias(args)
    if args.data_cmd == "counting":
        return _counting(args)
    if args.data_cmd == "two-image":
        return _two_image(args)
    if args.data_cmd == "cryptogram":
        return _cryptogram(args)
    # the loader --dataset goes through (open_split of a DataConfig), so 'synthetic' is accepted;
    # showing a split is not training on it: any number of images per row is shown
    from dataclasses import replace

    from vqa_r1.data.datasets import open_split

    ds = open_split(replace(data_config(args.path), images_per_row=None), args.split)
    print(ds)
    for row in ds.select(range(min(3, len(ds)))):
        shown = ("caption", "label", "relation", "solution", "coded_message", "decoded_message")
        shown = ("image_paths", *shown) if "image_paths" in row else shown
        print({k: row[k] for k in shown if k in row})
    return 0


def _check_generate(args: argparse.Namespace) -> None:
    """Counts and object limits checked here, naming the flag: a negative count used to be read
    as zero scenes and ``--min-objects`` above ``--max-objects`` ended in a traceback."""
    for flag in ("train", "validation", "test"):
        if getattr(args, flag) < 0:
            raise UserError(f"--{flag} {getattr(args, flag)}: a count of scenes is 0 or more")
    if args.min_objects < 1:
        raise UserError(f"--min-objects {args.min_objects}: a scene has at least 1 object")
    if args.max_objects < 2:
        raise UserError(f"--max-objects {args.max_objects}: a relation needs 2 objects")
    if args.min_objects > args.max_objects:
        raise UserError(
            f"--min-objects {args.min_objects} is above --max-objects {args.max_objects}"
        )


def data_config(dataset: str):
    """The DataConfig naming ``dataset`` as ``--dataset`` would, on the demo recipe's settings:
    'synthetic' is the demo's data (layer rule: vqa_r1.data may not read recipes, the CLI may)."""
    from dataclasses import replace

    from vqa_r1.recipes import config_from_recipe

    return replace(config_from_recipe(DEMO_RECIPE).data, dataset=dataset)


def _bias(args: argparse.Namespace) -> int:
    from vqa_r1.data.bias import format_p, plan_biased_dataset, write_biased_dataset
    from vqa_r1.data.datasets import dataset_dir

    source = args.source
    if source == "synthetic":
        source = dataset_dir(data_config(source))
    elif not Path(source).exists():
        raise UserError(f"--source {source}: no such folder (or pass 'synthetic')")
    if claims.inside(args.out, source) or claims.inside(source, args.out):
        raise UserError(
            f"--out {args.out} is --source {source} or lies inside it (or holds it): writing "
            "there would replace the source's files; give another --out"
        )
    settings = {
        "source": str(Path(source).resolve()),
        "kind": args.kind,
        "target": args.target,
        "seed": args.seed,
        "split": args.split,
    }
    if claims.is_complete(args.out) and not args.overwrite:  # the same command again: reuse
        if make_way_or_complete(args.out, "data bias", settings, args.overwrite, "--out"):
            return 0
    # a target these data cannot reach is refused before --out is claimed: nothing written
    plan = plan_biased_dataset(source, args.kind, args.target, args.seed, args.split)
    if make_way_or_complete(args.out, "data bias", settings, args.overwrite, "--out"):
        return 0
    with claims.writing(args.out, "data bias", settings, "--out"):
        claims.remove_temporaries(args.out)
        card = write_biased_dataset(plan, args.out, carry=(claims.MARKER, claims.LOCK))
        claims.mark_complete(args.out)
    print(
        f"{card['kind']} bias of the {card['split']} split: {card['achieved']:.4f} "
        f"(target {card['target']}, {card['correct']}/{card['n']} rows, one-sided binomial "
        f"p {format_p(card['p_value'])} against 0.5)"
    )
    print("rows per split: " + ", ".join(f"{k} {v}" for k, v in card["sizes"].items()))
    print(f"wrote {args.out} (card: {Path(args.out) / 'bias_card.json'})")
    return 0


def _counting(args: argparse.Namespace) -> int:
    from vqa_r1.data.counting import CountingSpec, write_counting

    sizes = {"train": args.train, "validation": args.validation, "test": args.test}
    sizes["test_b"] = args.test_b
    negative = [f"--{k.replace('_', '-')} {n}" for k, n in sizes.items() if n < 0]
    if negative:
        raise UserError(f"{', '.join(negative)}: a count of scenes is 0 or more")
    conditions = {"train": "A", "validation": "A", "test": "A", "test_b": "B"}
    try:
        spec = CountingSpec(
            splits={k: [conditions[k], n] for k, n in sizes.items()},
            seed=args.seed,
            image_size=args.image_size,
        )
    except ValueError as err:
        raise UserError(f"data counting: {err}") from None
    settings = {"spec": spec.to_dict()}
    if make_way_or_complete(args.out, "data counting", settings, args.overwrite, "--out"):
        return 0
    with claims.writing(args.out, "data counting", settings, "--out"):
        claims.remove_temporaries(args.out)
        write_counting(args.out, spec, carry=(claims.MARKER, claims.LOCK))
        claims.mark_complete(args.out)
    print(
        f"wrote {sum(sizes.values())} counting scenes ({', '.join(f'{k} {n}' for k, n in sizes.items())}) to {args.out}"
    )
    return 0


def _two_image(args: argparse.Namespace) -> int:
    from vqa_r1.data.two_image import write_two_image

    sizes = {"train": args.train, "validation": args.validation, "test": args.test}
    negative = [f"--{k} {n}" for k, n in sizes.items() if n < 0]
    if negative:
        raise UserError(f"{', '.join(negative)}: a count of pairs is 0 or more")
    settings = {"sizes": sizes, "seed": args.seed, "version": 1}
    if make_way_or_complete(args.out, "data two-image", settings, args.overwrite, "--out"):
        return 0
    with claims.writing(args.out, "data two-image", settings, "--out"):
        claims.remove_temporaries(args.out)
        write_two_image(
            args.out,
            **sizes,
            seed=args.seed,
            carry=(claims.MARKER, claims.LOCK),
            keep_existing=False,
        )
        claims.mark_complete(args.out)
    print(
        f"wrote {sum(sizes.values())} two-image questions "
        f"({', '.join(f'{k} {n}' for k, n in sizes.items())}) to {args.out}"
    )
    return 0


def _integers(flag: str, text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(
            f"data cryptogram {flag}: expected integers like 1,2,3, got {text!r}"
        ) from None


def _cryptogram(args: argparse.Namespace) -> int:
    from vqa_r1.data.cryptogram import CryptogramSpec, generate, spec_dict, write_dataset

    sizes = {"train": args.train, "validation": args.validation, "test": args.test}
    lengths = _integers("--word-lengths", args.word_lengths)
    if len(lengths) != 2:
        raise UserError(
            f"data cryptogram --word-lengths: expected min,max, got {args.word_lengths!r}"
        )
    try:
        spec = CryptogramSpec(
            splits=sizes,
            seed=args.seed,
            alphabet=args.alphabet,
            word_counts=tuple(_integers("--word-counts", args.word_counts)),
            word_lengths=(lengths[0], lengths[1]),
            words=args.words,
            image_size=args.image_size,
            order=args.order,
            worked_steps=args.worked_steps,
            letter_colours=args.letter_colours,
            layout=args.layout,
        )
        generate(spec)  # messages only (cheap): too few words fails before the folder is claimed
    except (ValueError, OSError) as err:
        raise UserError(f"data cryptogram: {err}") from None
    settings = {"spec": spec_dict(spec)}
    if make_way_or_complete(args.out, "data cryptogram", settings, args.overwrite, "--out"):
        return 0
    with claims.writing(args.out, "data cryptogram", settings, "--out"):
        claims.remove_temporaries(args.out)
        write_dataset(args.out, spec, carry=(claims.MARKER, claims.LOCK))
        claims.mark_complete(args.out)
    counts = ", ".join(f"{k} {n}" for k, n in sizes.items())
    print(f"wrote {sum(sizes.values())} cryptograms ({counts}) to {args.out}")
    return 0

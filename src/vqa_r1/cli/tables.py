"""`vqa-r1 tables`: every experiment's tables and plots, the study's reference table and the
README's copies of them, rebuilt from the run directories under results/ (nothing typed in; the
same files give the same bytes, and `--check` says when a rebuild changed anything)."""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

from vqa_r1.errors import UserError
from vqa_r1.paths import checkout
from vqa_r1.report.experiment import EXPERIMENT_FILE, build_report
from vqa_r1.report.readme import sync_document
from vqa_r1.report.study import write_study_table

STUDY_ENV = "VQA_R1_STUDY_RESULTS"
# the checkout this package runs from: its results/ and README.md are the defaults, never the
# current folder's (a user's ./results or ./README.md are not ours to rewrite)
CHECKOUT = checkout() or Path.cwd() / "<no checkout>"  # an installed wheel has no results/
# the published study's folder, as the suite names it (tests/conftest.py); its results/ holds the
# scores.json files. No default path: the data is the user's, outside the package and checkout.
REALDATA_ENV = "VQA_R1_REALDATA"


def default_study() -> Path | None:
    """$VQA_R1_STUDY_RESULTS, else $VQA_R1_REALDATA/results; None when neither is set."""
    if os.environ.get(STUDY_ENV):
        return Path(os.environ[STUDY_ENV])
    if os.environ.get(REALDATA_ENV):
        return Path(os.environ[REALDATA_ENV]) / "results"
    return None


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument(
        "folders",
        nargs="*",
        help="experiment folders (default: every folder with experiment.json under --results)",
    )
    parser.add_argument(
        "--results",
        default=None,
        help="results folder whose experiments, study reference table (study/) and README copies "
        f"are rebuilt (default: the checkout's, {CHECKOUT / 'results'}; with FOLDERS and no "
        "--results only those folders are rebuilt)",
    )
    parser.add_argument(
        "--study",
        default=None,
        help=f"the study's results folder for the reference table (default: ${STUDY_ENV}, "
        f"else ${REALDATA_ENV}/results); skipped with a note when absent",
    )
    parser.add_argument(
        "--readme",
        default=None,
        help="document whose table blocks (<!-- table: PATH -->) are rewritten from the table "
        "files (default: the checkout's README.md and docs/ pages when its results/ is rebuilt)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a rebuilt file differs from the one that was there (a table edited by "
        "hand, or run directories that changed since the tables were made)",
    )


def _digests(folder: Path, patterns: tuple[str, ...]) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for pattern in patterns
        for p in sorted(folder.glob(pattern))
        if p.is_file()
    }


def _rebuilt(folder: Path, patterns: tuple[str, ...], build) -> tuple[list[str], object]:
    """Run ``build`` and return the files it changed (new ones included) and its result."""
    before = _digests(folder, patterns)
    result = build()
    after = _digests(folder, patterns)
    return sorted(k for k, v in after.items() if before.get(k) != v), result


def _results(args: argparse.Namespace) -> Path | None:
    """The results folder rebuilt as a whole (study reference, README copies), or None when only
    the named experiment folders are."""
    if args.results is not None:
        return Path(args.results)
    if args.folders:
        return None
    if not (CHECKOUT / "results").is_dir():
        raise UserError(
            "no results folder: vqa-r1 runs from an installed package, not a checkout; name one "
            "with --results DIR, or experiment folders"
        )
    return CHECKOUT / "results"


def run(args: argparse.Namespace) -> int:
    results = _results(args)
    if results is not None and not results.is_dir():
        raise UserError(f"--results {results}: no such folder")
    readme = Path(args.readme) if args.readme else None
    if readme is not None and not readme.is_file():
        raise UserError(f"--readme {readme}: no such file")
    documents = [readme] if readme is not None else []
    if readme is None and results == CHECKOUT / "results":  # the README and the docs' pages
        documents = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md"))]
    folders = [Path(f) for f in args.folders] or sorted(
        p.parent for p in results.rglob(EXPERIMENT_FILE)
    )
    changed: list[str] = []
    outputs = ("tables/*", "plots/*", "**/training.png")
    for folder in folders:
        if not (folder / EXPERIMENT_FILE).exists():
            raise UserError(f"{folder}: no {EXPERIMENT_FILE}; not an experiment folder")
        files, report = _rebuilt(folder, outputs, lambda f=folder: build_report(f))
        changed += files
        missing = report["missing_rows"]
        note = f", {missing} row(s) missing (not evaluated yet, or failed)" if missing else ""
        print(f"{folder}: {len(report['written'])} files{note}")
    if results is not None and (results / "demo-seeds").is_dir():  # the families side by side
        from vqa_r1.report.families import TABLE, write_families_table

        seeds = results / "demo-seeds"
        files, out = _rebuilt(seeds, (TABLE,), lambda: write_families_table(seeds))
        changed += files
        if out is not None:
            print(f"{out}: the demo across families and seeds")
    study = Path(args.study) if args.study else default_study()
    if results is None:
        pass  # only the named folders: nothing is written outside them
    elif study is None:
        print(f"note: no study results named (--study DIR, ${STUDY_ENV} or ${REALDATA_ENV}); "
              "reference table skipped")  # fmt: skip
    elif study.exists():
        out = results / "study"
        files, paths = _rebuilt(out, ("*",), lambda: write_study_table(study, out))
        changed += files
        print(f"{out}: the study's published scores ({study}), {len(paths)} files")
    else:
        print(f"note: no study results at {study}; reference table skipped (--study DIR)")
    changed += [str(document) for document in documents if sync_document(document)]
    if args.check and changed:
        print("changed by the rebuild:\n  " + "\n  ".join(changed))
        return 1
    if args.check:
        print("every rebuilt file is identical to the one that was there")
    return 0

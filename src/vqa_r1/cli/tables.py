"""`vqa-r1 tables`: every experiment's tables and plots, and the study's reference table, rebuilt
from the run directories under results/ (nothing typed in; the same files give the same bytes)."""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

from vqa_r1.errors import UserError
from vqa_r1.report.experiment import EXPERIMENT_FILE, build_report
from vqa_r1.report.study import write_study_table

STUDY_ENV = "VQA_R1_STUDY_RESULTS"
# the published study's scores.json files, where the repository's shared data keeps them
DEFAULT_STUDY = Path(__file__).resolve().parents[3].parent / "shared/realdata/vlm_r1_vsr/results"


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument(
        "folders",
        nargs="*",
        help="experiment folders (default: every folder with experiment.json under --results)",
    )
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument(
        "--study",
        default=None,
        help=f"the study's results folder for the reference table (default: ${STUDY_ENV}, "
        f"else {DEFAULT_STUDY}); skipped with a note when absent",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a rebuilt file differs from the one that was there (a table edited by "
        "hand, or run directories that changed since the tables were made)",
    )


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("tables", "plots")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    } | {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("training.png"))
    }


def run(args: argparse.Namespace) -> int:
    results = Path(args.results)
    folders = [Path(f) for f in args.folders] or sorted(
        p.parent for p in results.rglob(EXPERIMENT_FILE)
    )
    changed: list[str] = []
    for folder in folders:
        if not (folder / EXPERIMENT_FILE).exists():
            raise UserError(f"{folder}: no {EXPERIMENT_FILE}; not an experiment folder")
        before = _hashes(folder)
        report = build_report(folder)
        after = _hashes(folder)
        changed += sorted(k for k in after if before.get(k) != after[k])
        missing = report["missing_rows"]
        note = f", {missing} row(s) missing (not evaluated yet, or failed)" if missing else ""
        print(f"{folder}: {len(report['written'])} files{note}")
    study = Path(args.study or os.environ.get(STUDY_ENV) or DEFAULT_STUDY)
    if study.exists():
        out = results / "study"
        before = _hashes_files(out)
        paths = write_study_table(study, out)
        changed += sorted(str(p) for p in paths if before.get(str(p)) != _digest(p))
        print(f"{out}: the study's published scores ({study}), {len(paths)} files")
    else:
        print(f"note: no study results at {study}; reference table skipped (--study DIR)")
    if args.check and changed:
        print("changed by the rebuild:\n  " + "\n  ".join(changed))
        return 1
    if args.check:
        print("every rebuilt file is identical to the one that was there")
    return 0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hashes_files(folder: Path) -> dict[str, str]:
    return {str(p): _digest(p) for p in sorted(folder.glob("*")) if p.is_file()}

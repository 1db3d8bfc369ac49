"""The documentation site builds with every page and link holding (issue 34, item 3): `mkdocs
build --strict` fails on a missing page, a broken link or anchor, a snippet that names no file."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _mkdocs() -> list[str]:
    found = Path(sys.executable).parent / "mkdocs"
    return [str(found)] if found.exists() else [shutil.which("mkdocs") or "mkdocs"]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([*_mkdocs(), "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)  # fmt: skip


def _pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _pages(v)]
    return [p for item in nav for p in _pages(item)]


def test_the_docs_build_strictly_with_every_page_in_the_nav(tmp_path):
    out = _build(REPO / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    nav = _pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(nav) == pages  # no page left out of the nav, none missing
    for page in nav:
        built = tmp_path / "site" / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert built.is_file(), page
    # the included files are the repository's own, as they are
    assert (
        "from a dataset to a results table"
        in (tmp_path / "site/architecture/index.html").read_text()
    )


def test_a_broken_link_fails_the_build(tmp_path):
    """--strict is what makes a dead link an error: a copy of the docs with one proves it."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](no-such-page.md)\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["theme"] = {"name": "mkdocs"}  # mkdocs' own theme: the same checks, a faster build
    config["hooks"] = [str(REPO / h) for h in config.get("hooks", [])]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    out = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert out.returncode != 0 and "no-such-page.md" in out.stdout + out.stderr


# commands a page shows that this machine cannot run: they need the package index or the Hub
NOT_RUN_HERE = {"pip install", "hf download"}


def _commands() -> list[tuple[str, str]]:
    """(page, command) of every command line in a bash block of the README and the docs."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.splitlines():
                command = line.split("#")[0].strip()
                if command:
                    found.append((str(page.relative_to(REPO)), command))
    return found


def test_every_command_the_readme_and_the_docs_show_is_run_or_parsed(tmp_path, monkeypatch):
    """A launcher command is submitted as a dry run (the same parsing and login-node checks); a
    `vqa-r1` command is parsed by its own parser (every flag exists); a script exists and is
    executable; only installs and downloads (NOT_RUN_HERE) are left alone, and say so here."""
    from cli_helpers import run_in_process

    from vqa_r1.cli import build_parser
    from vqa_r1.cli.launch import main as launch_main

    monkeypatch.chdir(tmp_path)  # a dry run writes nothing; if it did, not in the checkout
    seen = set()
    for page, command in _commands():
        argv = shlex.split(command)
        if command.startswith("python slurm/launch.py"):
            argv = argv[2:] + ([] if "--dry-run" in argv else ["--dry-run"])
            out = run_in_process(launch_main, argv)
            assert out.returncode == 0, f"{page}: {command}: {out.stderr[-800:]}"
            assert "#SBATCH" in out.stdout, f"{page}: {command}"
        elif argv[0] == "vqa-r1":
            build_parser(argv[1:]).parse_args(argv[1:])
        elif argv[0].startswith("scripts/"):
            assert os.access(REPO / argv[0], os.X_OK), f"{page}: {argv[0]} is not executable"
        else:
            assert " ".join(argv[:2]) in NOT_RUN_HERE, f"{page}: {command}: not checked by a test"
        seen.add(argv[0] if not command.startswith("python") else "launch")
    assert {"launch", "vqa-r1", "scripts/demo"} <= seen
    assert list(tmp_path.iterdir()) == []


def test_the_readme_is_a_front_page_whose_command_table_names_every_verb():
    """Under 350 lines (the manual is docs/), and its table of commands names each `vqa-r1` verb
    and each launcher verb that exists, and no other."""
    from vqa_r1.cli import build_parser
    from vqa_r1.cli.launch import build_parser as launch_parser

    readme = (REPO / "README.md").read_text()
    assert readme.count("\n") < 350
    table = readme.split("## What each command does", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`vqa-r1 ([a-z-]+)`", table))
    assert named == set(_verbs(build_parser([]))), named
    launcher = table.split("`python slurm/launch.py`", 1)[1]
    assert set(re.findall(r"`([a-z-]+)[^`]*`", launcher)) == set(_verbs(launch_parser())) | {
        "--sweep"
    }


def _verbs(parser) -> list[str]:
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)

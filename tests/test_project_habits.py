"""The habits CONTRIBUTING.md asks for hold: the version and the changelog agree, and the
pre-commit hooks are the checks CI's lint runs, from tools the `dev` extra installs."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import tomllib
import yaml

import vqa_r1

REPO = Path(__file__).resolve().parents[1]


def test_the_version_is_the_changelogs_top_section():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert vqa_r1.__version__ == version
    sections = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert sections and sections[0] == version, (sections, version)
    top = (REPO / "CHANGELOG.md").read_text().split("\n## ")[1]
    assert re.search(r"^### (Added|Changed|Fixed)$", top, re.M) and "\n- " in top


def test_pre_commit_runs_ruff_and_the_import_contract_from_the_dev_tools():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert {h["entry"] for h in hooks.values()} == {
        "ruff check", "ruff format --check", "lint-imports"
    }  # fmt: skip
    assert all(repo["repo"] == "local" for repo in config["repos"])  # nothing fetched
    assert all(h["language"] == "system" for h in hooks.values())
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"ruff", "import-linter"} <= {re.split(r"[<>=]", r)[0] for r in dev["dev"]}
    # the environment that runs the suite has each hook's program (scripts/test runs them too)
    bin_dir = Path(sys.executable).parent
    for program in ("ruff", "lint-imports"):
        assert (bin_dir / program).exists() or shutil.which(program), program

"""Every entry point answers --help; pixi tasks run commands that exist (pixi itself cannot run here)."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from vqa_r1.cli import VERBS

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120, **kw)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_has_help(verb):
    out = _run([sys.executable, "-m", "vqa_r1", verb, "--help"])
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_console_script_and_module_are_the_same_program():
    a = _run([str(BIN / "vqa-r1"), "models"])
    b = _run([sys.executable, "-m", "vqa_r1", "models"])
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout
    assert "qwen2.5-vl-3b" in a.stdout and "tiny-smolvlm" in a.stdout


def test_pixi_tasks_exist_and_answer_help():
    tasks = tomllib.loads((REPO / "pixi.toml").read_text())["tasks"]
    for required in ("demo", "test", "sft", "grpo", "evaluate"):
        assert required in tasks, required
    for name, command in tasks.items():
        argv = shlex.split(command if isinstance(command, str) else command["cmd"])
        exe = argv[0]
        if exe == "python":
            argv[0] = sys.executable
        else:
            assert (BIN / exe).exists(), f"pixi task {name}: {exe} is not installed"
            argv[0] = str(BIN / exe)
        out = _run([*argv, "--help"])
        assert out.returncode == 0, f"pixi task {name}: {out.stderr[-500:]}"


def test_readme_commands_exist():
    readme = (REPO / "README.md").read_text()
    for script in ("scripts/demo", "scripts/test"):
        assert script in readme and (REPO / script).exists()
    ci = (REPO / ".ci" / "run").read_text()
    assert "scripts/test" in ci


def test_configuration_reference_is_generated_from_the_field_metadata():
    out = _run([sys.executable, "-m", "vqa_r1", "config", "--markdown"])
    assert out.returncode == 0, out.stderr
    assert (REPO / "docs" / "configuration.md").read_text() == out.stdout, (
        "docs/configuration.md is stale: regenerate with `vqa-r1 config --markdown`"
    )
    for key in ("train.per_device_train_batch_size", "max_time", "judge_model", "steps"):
        assert f"`{key}`" in out.stdout

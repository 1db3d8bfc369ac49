"""Every entry point answers --help; pixi tasks run commands that exist (pixi itself cannot run here)."""

import os
import re
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


def test_readme_commands_exist_and_run():
    """The README's first two commands are the quick start's two scripts, and CI runs the second."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    commands = [line.split("#")[0].strip() for b in blocks for line in b.splitlines()]
    assert commands[:2] == ["scripts/demo", "scripts/test"], commands[:2]
    for script in ("scripts/demo", "scripts/test"):
        assert os.access(REPO / script, os.X_OK), f"{script} is not executable"
    out = _run([str(REPO / "scripts" / "demo"), "--help"])
    assert out.returncode == 0 and "usage: vqa-r1 demo" in out.stdout, out.stderr[-500:]
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    # the README's test command, ending with its cost: the 25 slowest tests and the total
    assert ci[-1] == "exec scripts/test -ra --durations=25 --durations-min=0", ci[-1]
    # the launcher's commands, as dry runs, and every other command the README and the docs
    # show: tests/test_docs.py (in this process)
    assert any(c.startswith("python slurm/launch.py") for c in commands)


def test_configuration_reference_is_generated_from_the_field_metadata():
    out = _run([sys.executable, "-m", "vqa_r1", "config", "--markdown"])
    assert out.returncode == 0, out.stderr
    assert (REPO / "docs" / "configuration.md").read_text() == out.stdout, (
        "docs/configuration.md is stale: regenerate with `vqa-r1 config --markdown`"
    )
    for key in ("train.per_device_train_batch_size", "max_time", "judge_model", "max_steps"):
        assert f"`{key}`" in out.stdout


def _key_line(help_text: str, key: str) -> str:
    return next(line for line in help_text.splitlines() if line.startswith(f"  {key} ("))


@pytest.mark.parametrize(
    "argv, verb, model",
    [
        (["vqa-r1", "sft"], "sft", "tiny-qwen2.5-vl"),
        (["vqa-r1", "sft", "--model", "smolvlm-256m"], "sft", "smolvlm-256m"),
        (["launch", "grpo", "--model", "qwen2.5-vl-3b"], "grpo", "qwen2.5-vl-3b"),
    ],
)
def test_run_help_shows_the_recipe_values_the_command_uses(argv, verb, model, capsys):
    """The key list of sft/grpo/evaluate --help has the resolved recipe's values, not the
    dataclass defaults (which no recipe keeps)."""
    from vqa_r1.cli import main
    from vqa_r1.cli.launch import main as launch_main
    from vqa_r1.config import RunConfig
    from vqa_r1.recipes import load_config

    entry = main if argv[0] == "vqa-r1" else launch_main
    with pytest.raises(SystemExit) as done:
        entry([*argv[1:], "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    recipe, bare = load_config(verb, model), RunConfig()
    differ = 0
    for section, key in (("train", "learning_rate"), ("train", "num_train_epochs"),
                         ("resources", "time"), ("lora", "r")):  # fmt: skip
        value = getattr(getattr(recipe, section), key)
        assert f"default {value})" in _key_line(out, f"{section}.{key}")
        differ += value != getattr(getattr(bare, section), key)
    assert differ  # the recipe sets some of these: the test can fail
    assert f"recipe {recipe.recipe} for --model {model}" in out


@pytest.mark.parametrize("verb", ["sft", "grpo", "evaluate"])
@pytest.mark.parametrize("bad", [["--model", "no-such-model"], ["--set", "train.no_such=1"]])
def test_bad_run_input_is_refused_before_torch_is_imported(verb, bad, tmp_path):
    """An unknown model or key is refused in a fraction of a second (torch takes seconds)."""
    code = (
        "import sys\nfrom vqa_r1.cli import main\n"
        f"code = main({[verb, *bad, '--output-dir', str(tmp_path / 'run')]!r})\n"
        "print(code, 'torch' in sys.modules)"
    )
    out = _run([sys.executable, "-c", code])
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert not (tmp_path / "run").exists()


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write: chmod 555 (root may write anyway: then sysfs)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return folder
    try:
        (Path("/sys") / "vqa-r1-probe").mkdir()
    except OSError:
        return Path("/sys")
    pytest.skip("no folder here refuses writes")


@pytest.mark.parametrize(
    "argv",
    [
        ["vqa-r1", "data", "generate", "--out", "{dir}/data", "--train", "2"],
        ["vqa-r1", "evaluate", "--model", "tiny-qwen2.5-vl", "--output-dir", "{dir}/eval"],
        ["launch", "sft", "--model", "tiny-qwen2.5-vl", "--output-dir", "{dir}/run"],
    ],
)
def test_a_read_only_output_folder_is_one_line(argv, tmp_path, capsys):
    from vqa_r1.cli import main
    from vqa_r1.cli.launch import main as launch_main

    folder = _unwritable_folder(tmp_path)
    entry = main if argv[0] == "vqa-r1" else launch_main
    assert entry([a.replace("{dir}", str(folder)) for a in argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder}") and "cannot write here" in err, err
    assert "--output-dir" in err and len(err.splitlines()) == 1

"""Recipes vary only where models vary: tier defaults, small overlays, and where each value came
from (`vqa-r1 config --model M --verb V`)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_in_process

from vqa_r1.cli import main as cli_main
from vqa_r1.config import RunConfig
from vqa_r1.errors import UserError
from vqa_r1.models.registry import MODELS, ModelSpec
from vqa_r1.recipes import (
    DEFAULT_SOURCE,
    RECIPE_DIR,
    RECIPE_VERBS,
    VERBS,
    config_from_recipe,
    list_overlays,
    list_recipes,
    load_config,
    recipe_layers,
    resolve_with_sources,
)
from vqa_r1.typed_config import build, describe, load_mapping

BIN = Path(sys.executable).parent
RECIPE_FILES = sorted(p for p in RECIPE_DIR.glob("*/*.yaml"))
SECTIONS = ("model", "lora", "data", "train", "eval", "resources")


def _leaves(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _value(config: RunConfig, key: str):
    node = config
    for part in key.split("."):
        # TRL's own keys (train.ds3_gather_for_generation) live in train.trl
        node = getattr(node, part) if hasattr(node, part) else node.trl.get(part)
    return node


def _label(path: Path) -> str:
    return str(path.relative_to(RECIPE_DIR.parent))


def test_every_registered_model_resolves_for_every_verb():
    for name, spec in MODELS.items():
        sft = load_config("sft", name)
        for verb in VERBS:
            c = load_config(verb, name)
            own = "sft" if verb == "merge" else verb
            assert c.recipe == f"{spec.family}/{spec.size}_{own}", (name, verb)
            assert c.model.name == name and c.verb == verb
            qwen_limits = c.model.min_pixels is not None and c.model.max_pixels is not None
            # the pixel budget is a Qwen image-processor setting: only Qwen's GPU models carry it
            qwen = spec.family in ("qwen2_5_vl", "qwen3_vl")
            assert qwen_limits == (qwen and not spec.tiny), (name, verb)
            assert (c.resources.gpus == 0) == spec.tiny, (name, verb)
            if verb == "grpo":
                assert c.train.num_generations >= 2 and "accuracy" in c.train.reward_funcs
            if verb == "merge":  # the base model as SFT trained it, for an hour
                assert c.resources.time == "01:00:00", name
                merge = {**c.to_dict(), "verb": "sft"}
                merge["resources"] = {**merge["resources"], "time": sft.resources.time}
                assert merge == sft.to_dict(), name


def test_a_new_model_needs_no_recipe_file(monkeypatch):
    """A registry entry is enough: the tier's defaults and the family's overlay apply."""
    spec = ModelSpec("qwen2.5-vl-32b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-32B-Instruct", "32b", "33B")
    monkeypatch.setitem(MODELS, spec.name, spec)
    c = load_config("grpo", spec.name)
    assert c.recipe == "qwen2_5_vl/32b_grpo" and c.model.max_pixels == 401408
    assert c.resources.gpus == 1 and c.train.deepspeed is None and c.train.bf16


def test_no_two_recipe_files_have_the_same_content():
    """Settings two models share live in one file (a tier's defaults or a family's overlay)."""
    seen: dict[str, Path] = {}
    for path in RECIPE_FILES:
        content = json.dumps(load_mapping(path), sort_keys=True)  # parsed: comments stripped
        assert content not in seen, f"{path} has the content of {seen.get(content)}"
        seen[content] = path
    assert len(seen) == len(RECIPE_FILES) >= 3


def test_every_value_in_a_recipe_file_reaches_some_model():
    """No file sets a key that a later layer always overrides, nor applies to no model."""
    reached = set()
    for name in MODELS:
        for verb in VERBS:
            for recipe in (None, *list_overlays()):  # the model's own, and each shipped overlay
                _, sources = resolve_with_sources(verb, name, recipe)
                reached.update(sources.items())
    for path in RECIPE_FILES:
        data = load_mapping(path)
        parts = {_label(path): {k: v for k, v in data.items() if k not in RECIPE_VERBS}}
        parts.update({f"{_label(path)} [{v}]": data[v] for v in RECIPE_VERBS if v in data})
        keys = [(key, source) for source, part in parts.items() for key in _leaves(part)]
        assert keys, path
        for key, source in keys:
            assert (key, source) in reached, f"{source}: {key} reaches no resolved recipe"


def test_an_overlay_sets_only_what_differs_from_the_layers_below():
    defaults = RECIPE_DIR / "defaults"
    for name in MODELS:
        for verb in VERBS:
            config = RunConfig(verb=verb)
            for layer in recipe_layers(verb, name):
                after = build(config, layer.data, layer.where)
                if not layer.source.startswith(_label(defaults)):
                    for key in _leaves(layer.data):
                        before = _value(config, key)
                        assert before != _value(after, key), f"{layer.source}: {key} is {before}"
                config = after


def test_a_named_recipe_is_that_models_recipe():
    """`--recipe NAME` (qwen2_5_vl/3b_grpo) composes the same files as the model's own."""
    models = {(s.family, s.size): n for n, s in reversed(MODELS.items())}
    for name in list_recipes():
        family, _, rest = name.partition("/")
        size, _, verb = rest.rpartition("_")
        own = load_config(verb, models[family, size]).to_dict()
        named = config_from_recipe(name).to_dict()
        assert named["model"].pop("name") and own["model"].pop("name")
        assert {s: named[s] for s in SECTIONS} == {s: own[s] for s in SECTIONS}, name
    tiny = load_config("sft", "tiny-qwen2.5-vl", recipe="qwen2_5_vl/tiny-pretrained_sft")
    demo = load_config("sft", "tiny-qwen2.5-vl-pretrained")
    assert tiny.recipe == demo.recipe == "qwen2_5_vl/tiny-pretrained_sft"
    assert tiny.data == demo.data and tiny.train == demo.train and tiny.lora == demo.lora


def test_a_recipe_file_applies_on_the_models_recipe(tmp_path):
    patch = tmp_path / "patch.yaml"
    patch.write_text("train: {learning_rate: 0.5}\nsft:\n  lora: {r: 3}\n")
    grpo, sources = resolve_with_sources("grpo", "qwen2.5-vl-7b", str(patch))
    assert grpo.recipe == str(patch) and grpo.train.learning_rate == 0.5
    assert sources["train.learning_rate"] == str(patch)
    assert grpo.model.max_pixels == 401408 and grpo.lora.r == 16  # the model's; no sft part
    merge, sources = resolve_with_sources("merge", "qwen2.5-vl-7b", str(patch))
    assert merge.lora.r == 3 and sources["lora.r"] == f"{patch} [sft]"
    patch.write_text("grpo: [1]\n")
    with pytest.raises(UserError, match="grpo: expected a mapping"):
        load_config("grpo", "tiny-qwen2.5-vl", recipe=str(patch))
    patch.write_text("grpo:\n  train: {lr: 1}\n")
    with pytest.raises(UserError, match=r"patch.yaml: unknown key 'grpo.train.lr'"):
        load_config("grpo", "tiny-qwen2.5-vl", recipe=str(patch))
    # as a user types it (issue 30, item 10): the file, then the key as written in it, for our
    # keys and TRL's alike
    patch.write_text("train:\n  max_step: 5\nlora:\n  rr: 4\n")
    out = run_in_process(cli_main, ["sft", "--model", "tiny-qwen2.5-vl", "--recipe", str(patch)])
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: {patch}: unknown key 'train.max_step': "), out.stderr
    assert "did you mean max_steps?" in out.stderr


# --------------------------------------------------------------------- `vqa-r1 config --verb`


def _config_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """key -> (value, source) of `vqa-r1 config --model M --verb V`."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        key, value, source = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        rows[key] = (value, source)
    return rows


def _user_runs(*argv: str) -> dict[str, tuple[str, str]]:
    out = subprocess.run(
        [str(BIN / "vqa-r1"), "config", *argv], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    rows = _config_lines(out.stdout)
    assert list(rows) == [key for key, *_ in describe(RunConfig)]  # every key, once
    return rows


def test_config_shows_where_each_value_came_from():
    rows = _user_runs("--model", "qwen2.5-vl-7b", "--verb", "grpo", "--recipe", "study")
    assert rows["train.num_generations"] == ("4", "recipes/overlays/study.yaml [grpo]")
    assert rows["resources.gpus"] == ("1", "recipes/defaults/gpu.yaml")
    assert rows["model.max_pixels"] == ("401408", "recipes/qwen2_5_vl/gpu.yaml")
    assert rows["train.learning_rate"] == ("1e-05", "recipes/defaults/gpu.yaml [grpo]")
    assert rows["model.dtype"] == ("bfloat16", "recipes/defaults/gpu.yaml")
    assert rows["train.loss_type"] == ("dapo", DEFAULT_SOURCE)
    assert rows["model.name"] == ("qwen2.5-vl-7b", "--model")

    rows = _user_runs("--model", "tiny-qwen2.5-vl", "--verb", "grpo", "--set", "lora.r=4")
    assert rows["lora.r"] == ("4", "--set")
    assert rows["lora.alpha"] == ("64", "recipes/defaults/cpu.yaml [grpo]")
    assert rows["resources.gpus"] == ("0", "recipes/defaults/cpu.yaml")
    assert rows["recipe"] == ("qwen2_5_vl/tiny_grpo", "--model, --verb")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "qwen-9000", "--verb", "grpo"], "unknown model 'qwen-9000'"),
        (["--model", "tiny-qwen2.5-vl", "--verb", "train"], "unknown verb 'train'"),
        (["--model", "tiny-qwen2.5-vl"], "need --verb"),
        (["--verb", "sft", "--recipe", "nope"], "unknown recipe 'nope'"),
        (["--verb", "sft", "--set", "train.lr=1"], "unknown key 'train.lr'"),
        (["--verb", "sft", "--markdown"], "--verb shows one resolved recipe"),
    ],
)
def test_config_errors_are_one_line(argv, message, capsys):
    from vqa_r1.cli import main

    assert main(["config", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err


def test_the_key_reference_is_unchanged_without_a_verb(capsys):
    from vqa_r1.cli import main

    assert main(["config", "run"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("Run configuration") and "train.learning_rate (float, default 1e-05)" in out
    )

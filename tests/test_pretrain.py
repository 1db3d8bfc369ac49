"""The pretraining curriculum, the held-out guarantee, and the shipped pretrained tiny models."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter

import pytest

from vqa_r1.data.curriculum import (
    DEFAULT_WEIGHTS,
    END_OF,
    SEED_OFFSET,
    TASKS,
    CurriculumConfig,
    at_end,
    claim_holds,
    generate_examples,
    layout_of,
    layout_text,
    scene_fingerprint,
)
from vqa_r1.data.prompts import REASONING_INSTRUCTION
from vqa_r1.models.loading import PRETRAINED_DIR
from vqa_r1.models.registry import MODELS, PRETRAINED
from vqa_r1.train.pretrain import read_record

# every registered pretrained model, the families' defaults first
SHIPPED = [
    *PRETRAINED.values(),
    *(n for n, m in MODELS.items() if m.pretrained and n not in PRETRAINED.values()),
]


def test_curriculum_covers_every_task_and_never_the_demo_task():
    examples = generate_examples(3000, CurriculumConfig(seed=5), REASONING_INSTRUCTION)
    # every task of the shipped curriculum; count and cell are off unless weights name them
    assert set(Counter(e.task for e in examples)) == set(DEFAULT_WEIGHTS) < set(TASKS)
    relation_claim = re.compile(r"The \w+ \w+ is (left of|right of|above|below) the \w+ \w+\.")
    for e in examples:
        assert e.target.startswith("<think> ") and e.target.endswith(" </answer>")
        if relation_claim.search(e.question):
            # a claim relating two objects is only ever checked against a layout in the text,
            # never against an image: that composition is the demo's task, left to SFT and GRPO
            assert e.task == "text_claim" and e.scene is None and e.question.startswith("Layout: ")
        if e.scene is not None:
            assert not relation_claim.search(e.question)


def test_verify_rows_read_one_end_of_the_image_and_compare_colours():
    examples = generate_examples(
        400, CurriculumConfig(seed=2, weights={"verify": 1.0}), REASONING_INSTRUCTION
    )
    labels = Counter()
    for e in examples:
        assert e.scene is not None and e.instruction == REASONING_INSTRUCTION
        colour, end = re.fullmatch(
            r"Is the following statement true: The (\w+) object is (?:on|at) the (\w+)\.",
            e.question,
        ).groups()
        by_x, by_y = layout_of((o.name, o.box) for o in e.scene.objects)
        actual = at_end(end, by_x, by_y)
        assert e.target == (
            f"<think> {layout_text(by_x, by_y)} {end}: {actual}. subject: {colour}. </think> "
            f"<answer> {colour == actual} </answer>"
        )
        labels[colour == actual] += 1
    assert min(labels.values()) > 150


def test_text_claims_are_decided_by_their_layout():
    examples = generate_examples(
        500, CurriculumConfig(weights={"text_claim": 1.0}), REASONING_INSTRUCTION
    )
    labels = Counter()
    for e in examples:
        claim = re.search(
            r"The (\w+ \w+) is (left of|right of|above|below) the (\w+ \w+)\.$", e.question
        )
        orders = re.search(r"left to right: (.+?)\. top to bottom: (.+?)\.", e.question)
        by_x, by_y = (part.split(", ") for part in orders.groups())
        subj, relation, obj = claim.groups()
        verdict = claim_holds(relation, subj, obj, by_x, by_y)
        # the reasoning restates the layout and names the colour at the relation's end; the
        # claim holds iff that colour is the subject's
        end = END_OF[relation]
        colour = at_end(end, by_x, by_y)
        assert e.target == (
            f"<think> {layout_text(by_x, by_y)} {end}: {colour}. subject: {subj.split()[0]}. "
            f"</think> <answer> {verdict} </answer>"
        )
        assert verdict == (colour == subj.split()[0])
        labels[verdict] += 1
    assert min(labels.values()) > 200  # both labels, roughly balanced


def test_image_tasks_describe_the_scene_layout():
    examples = generate_examples(400, CurriculumConfig(seed=3), REASONING_INSTRUCTION)
    image_tasks = [e for e in examples if e.scene is not None]
    assert len(image_tasks) > 150
    for e in image_tasks:
        by_x, by_y = layout_of((o.name, o.box) for o in e.scene.objects)
        assert e.target.startswith(f"<think> {layout_text(by_x, by_y)} ")
        if e.question == "Which colour is the object on the left?":
            assert e.target.endswith(f"<answer> {by_x[0]} </answer>")


def test_the_layout_decides_every_demo_claim():
    """The layout of a demo scene (the SFT rationale) determines the claim's label."""
    from vqa_r1.data.datasets import synthetic_spec
    from vqa_r1.data.prompts import scene_rationale
    from vqa_r1.data.synthetic import generate_scenes
    from vqa_r1.recipes import config_from_recipe

    spec = synthetic_spec(config_from_recipe("qwen2_5_vl/tiny-pretrained_sft").data)
    for scene in generate_scenes(400, 2, spec.scene):
        by_x, by_y = layout_of((o.name, o.box) for o in scene.objects)
        assert len(set(by_x)) == 2  # one object per colour: a colour names an object
        assert claim_holds(scene.relation, scene.subj, scene.obj, by_x, by_y) == bool(scene.label)
        row = {"objects": [o.name for o in scene.objects], "boxes": [o.box for o in scene.objects]}
        row.update(relation=scene.relation, subj=scene.subj)
        assert scene_rationale(row).startswith(layout_text(by_x, by_y) + " ")


def test_pretraining_data_holds_no_validation_or_test_scene():
    from vqa_r1.data.datasets import heldout_fingerprints
    from vqa_r1.recipes import all_data_configs
    from vqa_r1.train.pretrain import PretrainConfig, curriculum_config

    held = heldout_fingerprints(all_data_configs())
    assert len(held) >= 600  # at least one recipe's 200 validation + 400 test scenes
    cfg = PretrainConfig()  # the shipped models' settings
    examples = generate_examples(cfg.examples, curriculum_config(cfg), REASONING_INSTRUCTION, held)
    trained = {scene_fingerprint(e.scene) for e in examples if e.scene is not None}
    assert len(trained) > cfg.examples // 3  # image tasks are half the curriculum
    assert not trained & held
    # the exclusion is applied, not just hoped for: a scene declared held out is drawn again
    first = next(e for e in examples if e.scene is not None)
    again = generate_examples(
        50, curriculum_config(cfg), REASONING_INSTRUCTION, {scene_fingerprint(first.scene)}
    )
    assert scene_fingerprint(first.scene) not in {
        scene_fingerprint(e.scene) for e in again if e.scene is not None
    }
    # and the seeds differ from every dataset seed a recipe uses (seed * 1000 + split index)
    assert SEED_OFFSET + cfg.seed > 1000 * 1000


@pytest.mark.slow
def test_heldout_fingerprints_are_those_of_the_written_demo_dataset():
    """The regenerated fingerprints match the scenes actually written for the demo's splits."""
    from vqa_r1.data.curriculum import rows_fingerprints
    from vqa_r1.data.datasets import dataset_dir, heldout_fingerprints, load_split
    from vqa_r1.recipes import all_data_configs, config_from_recipe

    folder = dataset_dir(config_from_recipe("qwen2_5_vl/tiny-pretrained_sft").data)
    held = heldout_fingerprints(all_data_configs())
    for split in ("validation", "test"):
        rows = load_split(folder, split, check_images=False).to_list()
        assert rows_fingerprints(rows) <= held


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_loads_and_answers_in_the_format(name):
    from PIL import Image

    from vqa_r1.config import ModelConfig
    from vqa_r1.models.generation import GenerationSettings, Generator
    from vqa_r1.models.loading import load_model

    assert MODELS[name].pretrained
    folder = PRETRAINED_DIR / name
    weights = folder / "model.safetensors"
    assert weights.exists() and weights.stat().st_size < 30e6
    record = read_record(folder / "pretrain.json")
    assert record["complete"] and record["global_step"] == record["config"]["max_steps"]
    card = (folder / "README.md").read_text()
    assert "vqa-r1 pretrain --family" in card and f"{record['train_seconds'] / 60:.1f} min" in card
    loaded = load_model(ModelConfig(name=name))
    image = Image.new("RGB", (112, 112), (240, 240, 240))
    generator = Generator(loaded, GenerationSettings(max_new_tokens=48, cache="on"))
    (text,) = generator.generate(
        [image], ["Is the following statement true: The red circle is left of the blue square."]
    )
    assert text.strip().startswith("<think>")


def _card_command(name: str) -> list[str]:
    card = (PRETRAINED_DIR / name / "README.md").read_text()
    line = re.search(r"^vqa-r1 pretrain .*$", card, re.MULTILINE).group(0)
    return shlex.split(line)[1:]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_record_loads_and_its_card_command_gives_its_settings(name):
    """The shipped pretrain.json files were written when the keys were ``steps`` and
    ``batch_size``; read under today's names they still build a PretrainConfig, the card is what
    today's code writes from them, and the card's command sets exactly those settings."""
    from vqa_r1.train.pretrain import PretrainConfig, config_from_overrides, model_card
    from vqa_r1.typed_config import build

    record = read_record(PRETRAINED_DIR / name / "pretrain.json")
    assert "steps" not in record["config"] and "batch_size" not in record["config"]
    recorded = build(PretrainConfig, record["config"])
    assert (PRETRAINED_DIR / name / "README.md").read_text() == model_card(record)
    args = _card_command(name)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert config_from_overrides(args[args.index("--family") + 1], sets) == recorded


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["tiny-qwen2.5-vl-pretrained", "tiny-qwen2.5-vl-studies", "tiny-qwen3-vl-pretrained"]
)
def test_card_command_reproduces_the_shipped_run(tmp_path, name):
    """The card's command, stopped after 30 steps, logs the shipped run's first losses."""
    args = _card_command(name)
    out_index = args.index("--out") + 1
    args[out_index] = str(tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-m", "vqa_r1", *args, "--stop-after", "30"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    prefix = read_record(tmp_path / "model" / "work" / "prefix.json")
    shipped = read_record(PRETRAINED_DIR / name / "pretrain.json")
    # the same settings (a record written before a key existed reads as that key's default)
    from vqa_r1.train.pretrain import PretrainConfig
    from vqa_r1.typed_config import build

    assert build(PretrainConfig, prefix["config"]) == build(PretrainConfig, shipped["config"])
    assert len(prefix["loss_curve"]) == 3
    for (step, loss), (step0, loss0) in zip(
        prefix["loss_curve"], shipped["loss_curve"], strict=False
    ):
        assert step == step0
        assert loss == pytest.approx(loss0, abs=1e-4)


REPO = PRETRAINED_DIR.parents[3]
LAUNCH = [sys.executable, str(REPO / "slurm" / "launch.py")]


def _launch(*args, timeout=600):
    return subprocess.run(
        [*LAUNCH, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


def test_pretrain_dry_run_writes_nothing_and_bad_settings_fail_first(tmp_path):
    out = tmp_path / "model"
    dry = _launch("pretrain", "--family", "internvl", "--out", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "vqa-r1-pretrain-internvl" in dry.stdout and "'family': 'internvl'" in dry.stdout
    assert not out.exists()
    bad = _launch("pretrain", "--family", "internvl", "--out", str(out), "--set", "stepz=3")
    assert bad.returncode == 2 and "unknown key 'stepz'" in bad.stderr
    bad = _launch("pretrain", "--family", "llava", "--out", str(out), "--dry-run")
    assert bad.returncode == 2 and "invalid choice: 'llava'" in bad.stderr
    bad = _launch(
        "pretrain", "--family", "smolvlm", "--out", str(out), "--set", "weights={poems: 1}"
    )
    assert bad.returncode == 2 and "weights: unknown curriculum tasks ['poems']" in bad.stderr
    # name: a registered pretrained model of the family (another family's is refused)
    bad = _launch(
        "pretrain", "--family", "smolvlm", "--out", str(out), "--set",
        "name=tiny-qwen2.5-vl-studies", "--dry-run",
    )  # fmt: skip
    assert (
        bad.returncode == 2 and "name: 'tiny-qwen2.5-vl-studies' is not a registered" in bad.stderr
    )
    assert "choose from tiny-smolvlm-pretrained" in bad.stderr
    assert not out.exists()


@pytest.mark.slow
def test_local_pretrain_job_writes_a_model_with_its_card(tmp_path):
    """The launcher face, locally, on a small run of a non-Qwen family (text-only rows mixed in)."""
    out = tmp_path / "model"
    small = ["max_steps=6", "examples=96", "save_steps=3", "eval_examples=4", "hidden=64"]
    small += ["layers=2"]
    sets = [x for s in small for x in ("--set", s)]
    done = _launch(
        "pretrain", "--family", "smolvlm", "--out", str(out), "--executor", "local", *sets
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads((out / "pretrain.json").read_text())
    assert record["complete"] and record["global_step"] == 6
    assert list(record["readout"]) == list(DEFAULT_WEIGHTS)
    card = (out / "README.md").read_text()
    assert "--set max_steps=6" in card and "--family smolvlm" in card
    assert (out / "model.safetensors").exists() and (out / "loss_curve.png").exists()
    assert not (out / "work").exists()


def test_tiny_build_inputs_are_frozen():
    """The shipped models start from tiny builds of this corpus: changing it silently would make
    their cards' commands build another model (bump BUILD_VERSION and re-pretrain instead)."""
    import hashlib

    from vqa_r1.models.tiny import BUILD_VERSION, _corpus

    digest = hashlib.sha256("\n".join(_corpus(0)).encode()).hexdigest()[:16]
    assert (digest, BUILD_VERSION) == ("110345550ff0bc83", 2)


# sha256 (first 16 hex) of the first 300 rows each card's command trains on: prompt, completion
# and image pixels. Written before the curriculum gained its off-by-default tasks (count, cell,
# lookup):
# a change to the curriculum must leave the shipped models' rows byte for byte as they were.
DEFAULT_ROWS_FINGERPRINT = {
    "tiny-qwen2.5-vl-pretrained": "fde8e185ef2df77e",
    "tiny-internvl-pretrained": "262b88b5b7d17600",
    "tiny-smolvlm-pretrained": "f58ec8983f4ac0f2",
    # the same curriculum seed as InternVL's: the rows are family-independent messages and images
    "tiny-qwen3-vl-pretrained": "262b88b5b7d17600",
    # count, cell and lookup on, verify and text_claim off (its card's weights), cell letters a-f
    # in colours
    "tiny-qwen2.5-vl-studies": "9a13af5017d3fa8a",
}


@pytest.mark.parametrize("name", SHIPPED)
def test_card_commands_still_train_on_the_same_rows(name):
    import hashlib
    from dataclasses import replace

    from vqa_r1.models.adapters import get_adapter
    from vqa_r1.train.pretrain import build_rows, config_from_overrides

    args = _card_command(name)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    cfg = config_from_overrides(args[args.index("--family") + 1], sets)
    # the curriculum draws its examples in order from one generator: the first 300 of 300 are the
    # first 300 of the card's 80,000
    rows = build_rows(replace(cfg, examples=300), get_adapter(cfg.family))
    digest = hashlib.sha256()
    for i in range(len(rows)):
        row = rows[i]
        digest.update(json.dumps([row["prompt"], row["completion"]], sort_keys=True).encode())
        for image in row["images"]:
            digest.update(image.tobytes())
    assert digest.hexdigest()[:16] == DEFAULT_ROWS_FINGERPRINT[name]

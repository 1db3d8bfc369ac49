import random
import time
from collections import Counter

import pytest

from vqa_r1.data.datasets import load_split
from vqa_r1.data.synthetic import (
    COLORS,
    RELATIONS,
    DomainShift,
    SceneConfig,
    SyntheticSpec,
    draw,
    generate_scenes,
    write_dataset,
)


def _holds(relation, a, b):
    _, axis, sign = RELATIONS[relation]
    return (a.center[axis] - b.center[axis]) * sign > 0


def test_deterministic_and_balanced():
    a = generate_scenes(400, seed=7)
    b = generate_scenes(400, seed=7)
    assert [s.caption for s in a] == [s.caption for s in b]
    assert [s.caption for s in a] != [s.caption for s in generate_scenes(400, seed=8)]
    per = Counter((s.relation, s.label) for s in a)
    for rel in RELATIONS:
        assert per[(rel, 1)] == per[(rel, 0)] == 50


def test_labels_agree_with_boxes():
    for s in generate_scenes(300, seed=1):
        names = {o.name: o for o in s.objects}
        assert 2 <= len(s.objects) <= 4 and len(names) == len(s.objects)
        subj, obj = names[s.subj], names[s.obj]
        assert _holds(s.relation, subj, obj) == bool(s.label), s.caption
        assert s.caption == f"The {s.subj} is {s.relation} the {s.obj}."
        for o in s.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 112 and 0 <= y0 < y1 <= 112


def test_drawn_objects_are_where_the_boxes_say():
    cfg = SceneConfig()
    scene = generate_scenes(1, seed=4, cfg=cfg)[0]
    img = draw(scene, cfg)
    for o in scene.objects:
        cx, cy = (int(v) for v in o.center)
        assert img.getpixel((cx, cy + 3)) != cfg.background  # inside every shape, also triangles


def test_write_dataset_vsr_schema_and_speed(tmp_path):
    spec = SyntheticSpec(splits={"train": 300, "test": 100}, seed=random.randint(0, 10))
    # CPU time, not wall time: the rate must not depend on what else the machine is running
    start = time.process_time()
    write_dataset(tmp_path / "d", spec)
    rate = 400 / (time.process_time() - start)
    assert rate >= 200, f"{rate:.0f} scenes per CPU second"
    ds = load_split(tmp_path / "d", "test")
    assert len(ds) == 100
    for col in ("image_path", "caption", "label", "relation", "subj", "obj", "boxes"):
        assert col in ds.column_names
    assert set(ds["label"]) == {0, 1}


def test_ramp_background_codes_position_and_keeps_objects():
    cfg = SceneConfig(background_style="ramp")
    scene = generate_scenes(1, seed=2, cfg=cfg)[0]
    img = draw(scene, cfg)
    corners = {xy: img.getpixel(xy) for xy in ((0, 0), (111, 0), (0, 111))}
    assert corners[(0, 0)][0] > corners[(111, 0)][0]  # red channel falls to the right
    assert corners[(0, 0)][2] > corners[(0, 111)][2]  # blue channel falls downwards
    for o in scene.objects:
        cx, cy = (int(v) for v in o.center)
        assert img.getpixel((cx, cy + 3)) == COLORS[o.color]


# ---------------------------------------------------------------- domain shift ("real" stand-in)

DEMO_LOOK = {"max_objects": 2, "background_style": "ramp", "distinct_colors": True}


def _png_hash(cfg, n=8, seed=3):
    import hashlib
    import io

    pngs = []
    for scene in generate_scenes(n, seed=seed, cfg=cfg):
        buf = io.BytesIO()
        draw(scene, cfg).save(buf, format="PNG", compress_level=1)  # as write_dataset saves
        pngs.append(buf.getvalue())
    return hashlib.sha256(b"".join(pngs)).hexdigest()


def test_sim_images_unchanged_by_the_shift_option():
    # hashes taken before DomainShift existed: the sim look must stay byte-identical
    assert _png_hash(SceneConfig()) == (
        "bf94f998ec055d753f111e703f4aae4f8302b67ce70f211246ce7bd4193f3349"
    )
    assert _png_hash(SceneConfig(**DEMO_LOOK)) == (
        "0e3b4249ef76312f733cbf18076804524bf03c9a668d12c174a347969287c504"
    )


def test_sim_cache_folders_unchanged_and_shifted_apart(monkeypatch, tmp_path):
    from vqa_r1.config import DataConfig
    from vqa_r1.data import datasets

    monkeypatch.setenv("VQA_R1_CACHE", str(tmp_path))
    monkeypatch.setattr(
        datasets, "write_dataset", lambda target, spec, **_: (target / "hf").mkdir(parents=True)
    )
    demo = {
        "synthetic_train": 4000,
        **{
            f"synthetic_{k}": v
            for k, v in {"max_objects": 2, "background": "ramp", "distinct_colors": True}.items()
        },
    }
    # folder names of today's cached datasets (computed before the shift existed)
    assert datasets.synthetic_dataset_dir(DataConfig()).name == "synthetic-613101155e7b"
    assert datasets.synthetic_dataset_dir(DataConfig(**demo)).name == "synthetic-7984259489e0"
    shifted = {
        d.name
        for d in (
            datasets.synthetic_dataset_dir(DataConfig(**demo, synthetic_domain="shifted")),
            datasets.synthetic_dataset_dir(
                DataConfig(**demo, synthetic_domain="shifted", synthetic_shift_strength=0.5)
            ),
        )
    }
    assert len(shifted) == 2 and "synthetic-7984259489e0" not in shifted
    spec = datasets.synthetic_spec(
        DataConfig(synthetic_domain="shifted", synthetic_shift_strength=0.5)
    )
    assert spec.scene.shift == DomainShift(strength=0.5, seed=0)
    assert datasets.synthetic_spec(DataConfig()).scene.shift is None


def test_shifted_dataset_same_rows_other_pixels(tmp_path):
    import numpy as np
    from PIL import Image

    splits = {"train": 40, "test": 20}
    sim = write_dataset(tmp_path / "sim", SyntheticSpec(splits, scene=SceneConfig(**DEMO_LOOK)))
    shifted_cfg = SceneConfig(**DEMO_LOOK, shift=DomainShift())
    shifted = write_dataset(tmp_path / "shifted", SyntheticSpec(splits, scene=shifted_cfg))
    for split in splits:
        a, b = load_split(sim, split), load_split(shifted, split)
        for col in ("caption", "label", "relation", "subj", "obj", "objects", "boxes"):
            assert a[col] == b[col], col
        diffs = [
            np.abs(np.asarray(Image.open(p), float) - np.asarray(Image.open(q), float)).mean()
            for p, q in zip(a["image_path"], b["image_path"], strict=True)
        ]
        # every image changed, by a lot on average (mean absolute difference per channel, 0-255)
        assert min(diffs) > 5 and np.mean(diffs) > 12, (min(diffs), np.mean(diffs))
    info = (shifted / "dataset_info.json").read_text()
    assert '"shift"' in info and '"shift"' not in (sim / "dataset_info.json").read_text()


def test_shift_deterministic_and_order_free():
    cfg = SceneConfig(**DEMO_LOOK, shift=DomainShift(strength=0.8, seed=5))
    scenes = generate_scenes(12, seed=2, cfg=cfg)
    first = [draw(s, cfg).tobytes() for s in scenes]
    assert first == [draw(s, cfg).tobytes() for s in reversed(scenes)][::-1]
    other_seed = SceneConfig(**DEMO_LOOK, shift=DomainShift(strength=0.8, seed=6))
    assert first[0] != draw(scenes[0], other_seed).tobytes()


def test_shifted_objects_keep_their_colour_names_and_centres():
    import numpy as np

    names = list(COLORS)
    palette = np.array([COLORS[c] for c in names], dtype=float)
    for look in ({}, DEMO_LOOK):
        cfg = SceneConfig(**look, shift=DomainShift())
        for scene in generate_scenes(150, seed=9, cfg=cfg):
            pixels = np.asarray(draw(scene, cfg), dtype=float)
            for o in scene.objects:
                cx, cy = (int(v) for v in o.center)
                patch = pixels[cy : cy + 5, cx - 2 : cx + 3].reshape(-1, 3)  # inside every shape
                seen = np.median(patch, axis=0)
                nearest = names[int(np.argmin(np.linalg.norm(palette - seen, axis=1)))]
                assert nearest == o.color, (scene.caption, o.name, seen)


def test_shift_strength_bounds():

    with pytest.raises(ValueError, match="strength"):
        DomainShift(strength=1.5)
    with pytest.raises(ValueError, match="noise"):
        DomainShift(noise=-0.1)


def test_generate_cli_domain_flag(tmp_path):
    import json

    from vqa_r1.cli import main

    sizes = ["--train", "8", "--validation", "4", "--test", "4"]
    assert main(["data", "generate", "--out", str(tmp_path / "sim"), *sizes]) == 0
    argv = ["data", "generate", "--out", str(tmp_path / "shifted"), *sizes, "--domain", "shifted"]
    assert main([*argv, "--shift-strength", "0.4", "--seed", "2"]) == 0
    info = json.loads((tmp_path / "shifted" / "dataset_info.json").read_text())
    assert info["scene"]["shift"]["strength"] == 0.4 and info["scene"]["shift"]["seed"] == 2
    assert "shift" not in json.loads((tmp_path / "sim" / "dataset_info.json").read_text())["scene"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--train", "-3"], "--train -3: a count of scenes is 0 or more"),
        (["--test", "-1"], "--test -1: a count of scenes is 0 or more"),
        (["--min-objects", "5", "--max-objects", "3"], "--min-objects 5 is above --max-objects 3"),
        (["--min-objects", "0"], "--min-objects 0: a scene has at least 1 object"),
    ],
)
def test_generate_refuses_degenerate_settings_before_writing(tmp_path, capsys, flags, message):
    from vqa_r1.cli import main

    out = tmp_path / "never"
    assert main(["data", "generate", "--out", str(out), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_config_refuses_negative_counts_and_min_above_max_objects():
    from vqa_r1.errors import UserError
    from vqa_r1.recipes import load_config

    with pytest.raises(UserError, match="data.synthetic_train: must be at least 0"):
        load_config("sft", "tiny-qwen2.5-vl", None, ["data.synthetic_train=-1"])
    with pytest.raises(UserError, match=r"synthetic_min_objects \(5\) is above"):
        load_config("sft", "tiny-qwen2.5-vl", None, ["data.synthetic_min_objects=5"])
    with pytest.raises(ValueError, match="0 or more"):
        SyntheticSpec(splits={"train": -1})

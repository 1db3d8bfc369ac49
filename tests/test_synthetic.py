import random
import time
from collections import Counter

from vqa_r1.data.datasets import load_split
from vqa_r1.data.synthetic import (
    RELATIONS,
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
    start = time.perf_counter()
    write_dataset(tmp_path / "d", spec)
    rate = 400 / (time.perf_counter() - start)
    assert rate >= 200, f"{rate:.0f} scenes/s"
    ds = load_split(tmp_path / "d", "test")
    assert len(ds) == 100
    for col in ("image_path", "caption", "label", "relation", "subj", "obj", "boxes"):
        assert col in ds.column_names
    assert set(ds["label"]) == {0, 1}

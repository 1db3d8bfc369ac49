import random
import time
from collections import Counter

from vqa_r1.data.datasets import load_split
from vqa_r1.data.synthetic import (
    COLORS,
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

"""The ``iou`` reward: box formats, names, one-to-one matching, and inputs that must not hurt it."""

import itertools
import math
import random
import time

import pytest

from vqa_r1.rewards import iou_reward
from vqa_r1.rewards.boxes import box_score, iou, max_weight_matching, parse_boxes

TWO = [[0, 0, 10, 10], [20, 20, 30, 30]]


def one(text, gt_boxes, gt_labels=None):
    return iou_reward([text], gt_boxes=[gt_boxes], gt_box_labels=[gt_labels])[0]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>[0, 0, 10, 10] cat</think><answer>[20, 20, 30, 30]</answer>", 1.0),
        ("[0,0,10,10] [20,20,30,30]", 1.0),
        ("(0.0, 0.0, 10.0, 10.0) and (20, 20, 30.0, 30)", 1.0),
        ("[0, 0, 10, 10]", 0.5),  # one of two
        ("[0, 0, 10, 10] [20, 20, 30, 30] [50, 50, 60, 60]", 2 / 3),  # one extra
        ("[5, 0, 15, 10] [20, 20, 30, 30]", (1 / 3 + 1) / 2),  # half-shifted: IoU 50/150
        ("[20, 20, 30, 30] [0, 0, 10, 10]", 1.0),  # order does not matter
        ("[100, 100, 110, 110]", 0.0),
        ("no boxes at all", 0.0),
        ("", 0.0),
    ],
)
def test_bracket_boxes(text, expected):
    assert one(text, TWO) == pytest.approx(expected)


def test_json_boxes_single_and_list():
    listed = (
        '```json\n[{"bbox_2d": [0, 0, 10, 10], "label": "cat"},\n'
        ' {"bbox_2d": [20, 20, 30, 30], "label": "dog"}]\n```'
    )
    assert one(listed, TWO, ["cat", "dog"]) == 1.0
    assert one('{"bbox_2d": [0, 0, 10, 10], "label": "cat"}', TWO, ["cat", "dog"]) == 0.5
    assert one("{'bbox': [0, 0, 10, 10], 'name': 'cat'}", TWO[:1], ["cat"]) == 1.0  # not JSON
    assert one('{"box": [0.0, 0, 10, 10], "category": "cat"}', TWO[:1], ["cat"]) == 1.0
    # the bracket inside an object is not read a second time as an unnamed box
    assert parse_boxes('{"bbox_2d": [1, 2, 3, 4], "label": "cat"}') == [((1, 2, 3, 4), ("cat",))]
    # an object without a box key is ignored; a box key without four numbers is a bad prediction
    assert one('{"label": "cat"} [0, 0, 10, 10]', TWO[:1]) == 1.0
    assert one('{"bbox_2d": ["a", "b", "c", "d"]} [0, 0, 10, 10]', TWO[:1]) == 0.5


def test_labels_restrict_matching():
    labels = ["cat", "dog"]
    assert one("[0,0,10,10] cat [20,20,30,30] dog", TWO, labels) == 1.0
    assert one("[0,0,10,10] dog [20,20,30,30] cat", TWO, labels) == 0.0  # swapped names
    assert one("[0,0,10,10] Cat, [20,20,30,30] the DOG.", TWO, labels) == 1.0
    assert one("[0,0,10,10] [20,20,30,30]", TWO, labels) == 0.0  # unnamed boxes match no name
    assert one("[0,0,10,10] traffic light on the left", TWO[:1], ["traffic_light"]) == 1.0
    assert one("[0,0,10,10] traffic", TWO[:1], ["traffic light"]) == 0.0
    assert one("[0,0,10,10] anything", TWO[:1], [None]) == 1.0  # an unnamed truth takes any box
    assert one("[0,0,10,10] cat", TWO, ["cat"]) == 0.5  # names of the wrong length: ignored
    # with names, the matching picks the same-name pair even when another overlaps more
    assert one("[0,0,10,10] dog", [[0, 0, 10, 10], [0, 0, 10, 20]], ["cat", "dog"]) == 0.25


def test_hungarian_beats_greedy():
    # greedy takes the best pair (0.6) and is left with 0.0; the optimum pairs crosswise (0.5+0.5)
    weights = [[0.6, 0.5], [0.5, 0.0]]
    pairs = max_weight_matching(weights)
    assert sorted(pairs) == [(0, 1), (1, 0)]


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (3, 2), (4, 4), (5, 3), (1, 5)])
def test_matching_is_optimal(rows, cols):
    rng = random.Random(rows * 10 + cols)
    for _ in range(30):
        w = [[rng.choice([0.0, rng.random()]) for _ in range(cols)] for _ in range(rows)]
        pairs = max_weight_matching(w)
        assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
        assert len(pairs) == min(rows, cols)
        got = sum(w[r][c] for r, c in pairs)
        if rows <= cols:
            best = max(
                sum(w[r][c] for r, c in enumerate(p))
                for p in itertools.permutations(range(cols), rows)
            )
        else:
            best = max(
                sum(w[r][c] for c, r in enumerate(p))
                for p in itertools.permutations(range(rows), cols)
            )
        assert got == pytest.approx(best)


def test_repeats_count_once_and_bad_boxes_count():
    think = "<think>The cat is at [0, 0, 10, 10] cat.</think><answer>[0, 0, 10, 10] cat</answer>"
    assert one(think, TWO[:1], ["cat"]) == 1.0
    assert one("[0, 0, 10, 10] [10, 10, 5, 5]", TWO[:1]) == 0.5  # x2 < x1: a wrong prediction
    assert one("[0, 0, 10, 10] [1e400, 0, 5, 5]", TWO[:1]) == 0.5  # inf
    assert one("[0, 0, 10, 10] [0, 0, 1e8, 1e8]", TWO[:1]) == 0.5  # beyond 1e7
    assert one("[nan, 0, 10, 10]", TWO[:1]) == 0.0


def test_negative_and_degenerate_coordinates():
    assert one("[-10, -10, 0, 0]", [[-10, -10, 0, 0]]) == 1.0
    assert one("[5, 5, 5, 5]", [[5, 5, 5, 5]]) == 1.0  # identical, even without area
    assert iou((0, 0, 0, 10), (0, 0, 10, 10)) == 0.0
    assert iou((0, 0, 10, 10), (10, 0, 20, 10)) == 0.0  # touching edges


@pytest.mark.parametrize(
    "gt, expected",
    [
        (None, 0.0),
        ([], 0.0),
        ("[0, 0, 10, 10]", 0.0),  # a string is not boxes
        ({"bbox": [0, 0, 10, 10]}, 0.0),
        ([[10, 10, 0, 0]], 0.0),  # every box malformed
        ([[0, 0, float("nan"), 10]], 0.0),
        ([[0, 0, 10, 10], [1, 2, 3]], 1.0),  # the malformed truth box is dropped
        ([[0, 0, 10, 10], None, "x", [float("inf")] * 4], 1.0),
        ([0, 0, 10, 10], 1.0),  # one box, not nested
        ([[True, 0, 10, 10]], 0.0),
        (7, 0.0),
    ],
)
def test_ground_truth_shapes(gt, expected):
    assert one("[0, 0, 10, 10]", gt) == expected


def test_columns_shorter_longer_or_missing():
    comps = ["[0,0,10,10]"] * 3
    assert iou_reward(comps) == [0.0, 0.0, 0.0]
    assert iou_reward(comps, gt_boxes=[TWO[:1]]) == [1.0, 0.0, 0.0]
    assert iou_reward(comps, gt_boxes=[TWO[:1]] * 5, gt_box_labels=None) == [1.0] * 3
    assert iou_reward(comps, gt_boxes=None, gt_box_labels=[["cat"]]) == [0.0] * 3
    assert iou_reward([], gt_boxes=[TWO]) == []
    conv = [[{"role": "assistant", "content": [{"type": "text", "text": "[0,0,10,10] cat"}]}]]
    assert iou_reward(conv, gt_boxes=[TWO[:1]], gt_box_labels=[["cat"]]) == [1.0]


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2, 3, 4] cat " * 7000,
        "".join(f"[{i}, {i}, {i + 5}, {i + 5}] b{i % 7} " for i in range(5000)),
        "{" * 100_000,
        '{"bbox_2d": [' * 20_000,
        "[" + "1" * 100_000,
        "[1, 2, 3" + "1" * 100_000 + "]",
        "(" * 50_000 + ")" * 50_000,
        "[1.1.1.1, 2, 3, 4]" * 5000,
        "🙂[0,0,10,10]🙂" * 8000,
    ],
)
def test_huge_completions_are_fast(text):
    gt = [[i, i, i + 5, i + 5] for i in range(0, 400, 8)]
    start = time.perf_counter()
    out = iou_reward([text], gt_boxes=[gt], gt_box_labels=[[f"b{i % 7}" for i in range(50)]])
    assert time.perf_counter() - start < 0.5
    assert len(out) == 1 and 0.0 <= out[0] <= 1.0 and math.isfinite(out[0])


def test_fuzz_never_raises():
    rng = random.Random(7)
    pieces = [
        "[",
        "]",
        "(",
        ")",
        "{",
        "}",
        ",",
        " ",
        '"bbox_2d":',
        "'label':",
        '"cat"',
        "cat",
        "1",
        "-3",
        "2.5",
        "1e9",
        "nan",
        "inf",
        "\n",
        "é",
        "🙂",
        "<answer>",
        "</think>",
    ]
    gts = [None, [], [[0, 0, 10, 10]], [[1, 2, 3, 4], [0, 0, 1e30, 1]], "x", 3, [None], [[1, 1]]]
    for _ in range(400):
        n = rng.randrange(0, 4)
        comps = ["".join(rng.choice(pieces) for _ in range(rng.randrange(60))) for _ in range(n)]
        gt = [rng.choice(gts) for _ in range(rng.randrange(0, 5))]
        labels = rng.choice([None, [["cat"]] * 5, [[None, 1, {}]], "cat"])
        out = iou_reward(comps, gt_boxes=gt, gt_box_labels=labels)
        assert len(out) == n
        assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in out)
        for c in comps:  # the scorer of one text agrees with the reward and stays in range
            assert 0.0 <= box_score(c, gt[0] if gt else None) <= 1.0

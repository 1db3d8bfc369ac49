"""Counting (issue 20): the number and r1v_count answer rules, the count reward, `vqa-r1 score` on
R1-V's counting logs, the SuperCLEVR and R1-V training formats, and the CLEVR-CoGenT stand-in."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vqa_r1.answers import extract_answer, is_correct, label_of, read_number
from vqa_r1.eval.scoring import read_responses, score_responses
from vqa_r1.rewards import REWARDS, count_reward

R1V = "r1v_count"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think> I see four. </think> <answer> 3 </answer>", "3"),
        ("<answer>3 objects</answer> Hope this helps, 5 stars", "3"),
        ("<answer>\n    10\n    </answer>", "10"),
        ("There are three objects.", "3"),
        ("<answer> twenty-one </answer>", "21"),
        ("<answer>2 + 3 = 5</answer>", "5"),
        ("Answer: 4", "4"),
        ("<answer> 3.0 </answer>", "3"),
        ("<answer> 007 </answer>", "7"),
        ("<answer> none </answer>", "0"),
        ("<answer> many </answer>", ""),
        ("<answer>", ""),
        ("", ""),
        ("someone alone", ""),
    ],
)
def test_number_rule_reads_the_final_count(text, expected):
    assert extract_answer(text, "number") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # R1-V's extract_number_answer: first <answer>\s*(\d+)\s*</answer>, case-sensitive, int()
        ("<think>\nA. 10\n</think>\n<answer>\n10\n</answer>", "10"),
        ("<answer>4</answer> <answer>5</answer>", "4"),  # the first block, not the last
        ("<answer>3 objects</answer>", ""),  # anything besides digits: no match
        ("<answer>three</answer>", ""),
        ("<answer>3.0</answer>", ""),
        ("<answer>-3</answer>", ""),
        ("<answer>3, 4</answer><answer>6</answer>", "6"),  # a block that fails is skipped
        ("<ANSWER>3</ANSWER>", ""),
        ("<answer>3", ""),  # unclosed
        ("There are 3 objects.", ""),  # no block
        ("<answer> 007 </answer>", "7"),
        ("<answer>" + "9" * 5000 + "</answer>", "9" * 5000),  # int() refuses; no exception
    ],
)
def test_r1v_rule_keeps_their_quirks(text, expected):
    assert extract_answer(text, R1V) == expected


# outputs of Qwen2-VL-2B in R1-V's published base log (Apache-2.0), items 72 and 61: the
# number rule reads an option-style answer and a cut-off list's last line; R1-V's reads nothing
@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("<think>\nA. 10\nB. 9\nB. 9\n</think>\n<answer>\nB. 9\n</answer>", "9"),
        ("<think>\nA. 7\nB. 6\nC. 5\nD. 4\nE. 3\n", "3"),
    ],
)
def test_published_outputs_the_two_rules_read_differently(text, number):
    assert (extract_answer(text, "number"), extract_answer(text, R1V)) == (number, "")


def test_number_labels_and_correctness():
    for reference in (4, "4", " <answer> 4 </answer> ", 4.0, "four"):
        assert label_of(reference, "number") == "4"
    assert label_of(4, R1V) == "4"
    assert label_of(True, "number") == "" and label_of(None, "number") == ""
    assert is_correct("<answer> 4 </answer>", 4, R1V)
    assert not is_correct("<answer> 4 </answer>", None, "number")
    assert read_number("9" * 30_000) == "9" * 10_000  # a huge final answer is read from its end


def test_count_reward_never_raises_and_stays_in_range():
    assert "count" in REWARDS
    garbage = [
        None, "", "<answer>", "<answer> 3 </answer>", 3, ["<answer> 3 </answer>"],
        [{"role": "assistant", "content": "<answer> three </answer>"}], {"x": 1}, b"\xff",
        "<answer>" + "9" * 50_000 + "</answer>", "1e309", float("nan"), object(),
    ]  # fmt: skip
    solutions = ["<answer> 3 </answer>", None, 3, float("inf"), "x", [], "<answer> 3 </answer>"]
    for solution in (solutions, None, "3", 3, [None]):
        out = count_reward(garbage, solution=solution)
        assert len(out) == len(garbage)
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in out)
    out = count_reward(
        ["<answer> 3 </answer>", "<answer>three</answer>", "<answer>4</answer>"], solution=[3] * 3
    )
    assert out == [1.0, 1.0, 0.0]
    r1v = count_reward(["<answer>3</answer>", "<answer>three</answer>"], [3, 3], answer_rule=R1V)
    assert r1v == [1.0, 0.0]
    assert count_reward(None) == [] and count_reward("3", solution="3") == [1.0]


def r1v_log(path, items):
    """A file in R1-V's log format (test_qwen2vl_counting_superclevr.py's json.dump)."""
    results = []
    correct = 0
    for i, (truth, output) in enumerate(items):
        extracted = extract_answer(output, R1V)
        extracted = int(extracted) if extracted else None
        correct += extracted is not None and extracted == truth
        row = {
            "image_path": f"/home/someone/images/superCLEVR_new_{25000 + i:06d}.png",
            "question": "How many different items are there in the image?",
            "ground_truth": truth,
        }
        results.append(
            {
                "question": row,
                "ground_truth": truth,
                "model_output": output,
                "extracted_answer": extracted,
            }
        )
    accuracy = correct / len(items) * 100
    path.write_text(json.dumps({"accuracy": accuracy, "results": results}, indent=2))
    return accuracy


# eight items: five right under R1-V's rule; the number rule reads items 4 and 5 too but takes
# item 6's last block (8)
LOG_ITEMS = [
    (4, "<think>\n    There are four objects.\n    </think>\n<answer>\n    4\n    </answer>"),
    (9, "<think>\nA. 10\n</think>\n<answer>\n10\n</answer>"),
    (10, "<answer>10</answer>"),
    (3, "<answer>3</answer>"),
    (5, "<think> five </think> <answer>5 items</answer>"),  # number: right; R1-V: nothing
    (6, "There are six objects."),  # number: right; R1-V: nothing
    (7, "<answer>7</answer><answer>8</answer>"),
    (2, "<answer>2</answer>"),
]


def test_score_reproduces_an_r1v_log(tmp_path):
    path = tmp_path / "counting_results_superclevr_8_model.json"
    published = r1v_log(path, LOG_ITEMS)
    assert published == 62.5
    records = read_responses(path)
    assert records[0]["answer_type"] == "number" and records[0]["true_response"] == 4
    scores = score_responses(records, R1V)
    assert (scores["n"], scores["correct"]) == (8, 5)
    assert scores["accuracy"] * 100 == published == scores["published_accuracy"] * 100
    assert scores["published_disagreements"] == 0 and scores["unparsed"] == 2
    robust = score_responses(records, "robust")
    assert (robust["answer_rule"], robust["correct"]) == ("number", 6)


def test_score_cli_on_r1v_logs_prints_the_published_accuracy(tmp_path):
    base = tmp_path / "base.json"
    grpo = tmp_path / "grpo.json"
    r1v_log(base, LOG_ITEMS)
    r1v_log(grpo, [(t, f"<answer>{t}</answer>") for t, _ in LOG_ITEMS])
    done = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(base), str(grpo), "--answer-rule", R1V,
         "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert result[str(base)]["accuracy"] == 0.625 and result[str(grpo)]["accuracy"] == 1.0
    done = subprocess.run(
        [sys.executable, "-m", "vqa_r1", "score", str(base), "--answer-rule", R1V,
         "--show-differences"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "accuracy=0.6250" in done.stdout and "published accuracy=0.6250" in done.stdout
    assert "item 4: number read '5' (right), r1v_count read '' (wrong)" in done.stdout


def test_counting_rules_refuse_true_false_records():
    from vqa_r1.errors import UserError

    with pytest.raises(UserError, match="reads counts"):
        score_responses([{"true_response": "True", "predicted_response": "True"}], R1V)


# --- release formats ----------------------------------------------------------------------------


def superclevr_release(root, counts=(4, 9, 10, 3), prompts_folder=False):
    """R1-V's src/eval/ layout: the problems .jsonl (as released) and images/ from images.zip."""
    from PIL import Image

    (root / "images").mkdir(parents=True)
    lines = []
    for i, count in enumerate(counts):
        name = f"superCLEVR_new_{25000 + i:06d}.png"
        Image.new("RGB", (24, 16), (40 * i % 255, 90, 160)).save(root / "images" / name)
        lines.append(
            json.dumps(
                {
                    "image_path": f"./images/{name}",
                    "question": "How many different items are there in the image?",
                    "ground_truth": count,
                }
            )
        )
    where = root / "prompts" if prompts_folder else root
    where.mkdir(exist_ok=True)
    (where / "superclevr_test200_counting_problems.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("prompts_folder", [False, True])
def test_superclevr_release_becomes_counting_rows(tmp_path, prompts_folder):
    from vqa_r1.data import formats
    from vqa_r1.data.datasets import load_split

    folder = superclevr_release(tmp_path / "eval", prompts_folder=prompts_folder)
    assert formats.detect(folder).NAME == "superclevr"
    ds = load_split(folder, "test")
    assert len(ds) == 4
    row = ds[1]
    assert row["problem"] == "How many different items are there in the image?"
    assert (row["solution"], row["label"], row["answer_type"]) == (
        "<answer> 9 </answer>",
        "9",
        "number",
    )
    assert row["relation"] == "count 9"
    assert row["image_path"].endswith("images/superCLEVR_new_025001.png")


def test_superclevr_absolute_paths_of_another_machine_are_found_by_name(tmp_path):
    from vqa_r1.data.datasets import load_split

    folder = superclevr_release(tmp_path / "eval")
    path = folder / "superclevr_test200_counting_problems.jsonl"
    path.write_text(path.read_text().replace("./images/", "/home/someone/images/"))
    assert Path(load_split(folder, "test")[0]["image_path"]).parent == folder / "images"


def test_superclevr_bad_ground_truth_and_missing_images_are_errors(tmp_path):
    from vqa_r1.data.datasets import load_split
    from vqa_r1.errors import UserError

    folder = superclevr_release(tmp_path / "eval")
    for image in (folder / "images").iterdir():
        image.unlink()
    with pytest.raises(UserError, match="images.zip"):
        load_split(folder, "test")
    other = superclevr_release(tmp_path / "other")
    path = other / "superclevr_test200_counting_problems.jsonl"
    path.write_text(path.read_text().replace('"ground_truth": 9', '"ground_truth": "nine"'))
    with pytest.raises(UserError, match="row 2: ground_truth 'nine' is not a count"):
        load_split(other, "test")


def hub_rows(n=5):
    import io

    from PIL import Image

    rows = []
    for i in range(n):
        buf = io.BytesIO()
        Image.new("RGB", (20, 12), (30 * i, 100, 200)).save(buf, format="PNG")
        rows.append(
            {
                "image": {"bytes": buf.getvalue(), "path": None},
                "problem": "How many items are there in the image?",
                "solution": f"<answer> {3 + i} </answer>",
            }
        )
    return rows


def test_r1v_hub_snapshot_parquet_becomes_counting_rows(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vqa_r1.data import formats
    from vqa_r1.data.datasets import load_split

    folder = tmp_path / "clevr_cogen_a_train"
    (folder / "data").mkdir(parents=True)
    rows = hub_rows()
    rows[2]["solution"] = "<answer> many </answer>"  # dropped and said
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text("---\ndataset_info: ...\n---\n")
    assert formats.detect(folder).NAME == "r1v_clevr"
    ds = load_split(folder, "train")
    assert list(ds["label"]) == ["3", "4", "6", "7"]
    assert ds[0]["solution"] == "<answer> 3 </answer>"  # as released
    assert ds[0]["problem"] == "How many items are there in the image?"
    assert "/.vqa_r1/r1v_clevr-images/" in ds[0]["image_path"]
    assert "has no count" in capsys.readouterr().err


def test_r1v_rows_saved_with_save_to_disk_are_converted(tmp_path):
    from datasets import Dataset, DatasetDict, Features, Image, Value

    from vqa_r1.data.datasets import load_split

    features = Features({"image": Image(), "problem": Value("string"), "solution": Value("string")})
    ds = Dataset.from_list(hub_rows(3), features=features)
    DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "saved"))
    loaded = load_split(tmp_path / "saved", "train")
    assert list(loaded["label"]) == ["3", "4", "5"] and set(loaded["answer_type"]) == {"number"}


def test_evaluate_reads_a_superclevr_folder_through_the_cli(tmp_path):
    from vqa_r1.cli import main

    folder = superclevr_release(tmp_path / "eval")
    out = tmp_path / "out"
    argv = [
        "evaluate", "--model", "tiny-qwen2.5-vl", "--dataset", str(folder),
        "--output-dir", str(out), "--set", "eval.split=test", "--set", "eval.limit=2",
        "--set", "eval.max_new_tokens=4", "--set", "eval.batch_size=2",
    ]  # fmt: skip
    assert main(argv) == 0
    scores = json.loads((out / "scores.json").read_text())
    assert (scores["n"], scores["answer_type"], scores["answer_rule"]) == (2, "number", "number")
    assert set(scores["per_relation"]) == {"count 4", "count 9"}
    responses = json.loads((out / "generated_responses.json").read_text())
    assert [r["true_response"] for r in responses] == [
        "<answer> 4 </answer>",
        "<answer> 9 </answer>",
    ]
    assert all(r["answer_type"] == "number" for r in responses)
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert lines[0]["label"] == "4" and {"number", "r1v_count"} <= set(lines[0])
    rescored = score_responses(read_responses(out / "generated_responses.json"), R1V)
    assert rescored["n"] == 2 and rescored["answer_rule"] == R1V


def test_counting_rows_ask_for_a_number():
    from datasets import Dataset

    from vqa_r1.data.datasets import trainer_rows
    from vqa_r1.data.formats.common import count_row
    from vqa_r1.data.prompts import COUNT_INSTRUCTION

    class Adapter:  # the FamilyAdapter interface trainer_rows reads
        thinking = False

        def messages(self, question, instruction=None, images=1):
            return [{"role": "user", "content": f"{question} {instruction}"}]

    ds = Dataset.from_list([count_row("How many cubes are there?", 3, "x.png")])
    rows = trainer_rows(ds, Adapter(), "grpo").remove_columns("image")
    assert rows[0]["prompt"][0]["content"].endswith(COUNT_INSTRUCTION)
    assert rows[0]["solution"] == "<answer> 3 </answer>"


# --- the CLEVR-CoGenT-style stand-in --------------------------------------------------------------


def small_spec(**splits):
    from vqa_r1.data.counting import CountingSpec

    return CountingSpec(splits=splits or {"train": ["A", 6], "test": ["A", 3], "test_b": ["B", 3]})


def test_conditions_differ_in_pairing_and_count_range():
    from vqa_r1.data.counting import PAIRINGS, PALETTE_1, PALETTE_2, generate_scenes

    spec = small_spec()
    a = generate_scenes(300, 1, "A", spec)
    b = generate_scenes(300, 2, "B", spec)
    pairs_a = {(o.shape, o.color) for s in a for o in s.objects}
    pairs_b = {(o.shape, o.color) for s in b for o in s.objects}
    b_only = {("cube", c) for c in PALETTE_2} | {("cylinder", c) for c in PALETTE_1}
    assert not pairs_a & b_only  # no B pairing ever appears in A
    assert b_only <= pairs_b and not pairs_b & ({("cube", c) for c in PALETTE_1})
    assert all(c in PAIRINGS["A"][s] for s, c in pairs_a)
    assert {len(s.objects) for s in a} == set(range(3, 7))
    assert {len(s.objects) for s in b} == set(range(7, 11))
    for scene in a + b:  # each answer is the count the question asks for
        if scene.kind == "all":
            assert scene.count == len(scene.objects)
        assert 1 <= scene.count <= len(scene.objects)
    assert {s.kind for s in a} == {"all", "shape", "color"}


def test_reasoning_names_the_objects_counted():
    from vqa_r1.data.counting import CountObject, CountScene, reasoning

    objects = [
        CountObject("cube", "gray", (50, 5, 60, 15)),
        CountObject("sphere", "red", (5, 5, 15, 15)),
        CountObject("cube", "blue", (20, 40, 30, 50)),
    ]
    scene = CountScene("A", objects, "How many cubes are there?", "shape", 2)
    assert reasoning(scene) == "The cubes: blue cube, gray cube. That is 2."
    scene = CountScene("A", objects, "How many red objects are there?", "color", 1)
    assert reasoning(scene) == "The red objects: red sphere. That is 1."
    scene = CountScene("A", objects, "How many objects are there?", "all", 3)
    assert reasoning(scene) == "I see: red sphere, blue cube, gray cube. That is 3 objects."


def test_separate_shifts_are_available():
    from vqa_r1.data.counting import PALETTE_2, generate_scenes

    spec = small_spec()
    pairs = generate_scenes(100, 3, "B_pairs", spec)
    assert {len(s.objects) for s in pairs} <= set(range(3, 7))
    assert any(o.shape == "cube" and o.color in PALETTE_2 for s in pairs for o in s.objects)
    counts = generate_scenes(50, 3, "B_counts", spec)
    assert {len(s.objects) for s in counts} <= set(range(7, 11))


def test_counting_folder_is_deterministic_and_opens_like_any_dataset(tmp_path):
    from vqa_r1.data.counting import write_counting
    from vqa_r1.data.datasets import load_split

    spec = small_spec()
    first = write_counting(tmp_path / "one", spec)
    second = write_counting(tmp_path / "two", spec)
    for split, (condition, n) in spec.splits.items():
        ds = load_split(first, split)
        other = load_split(second, split)
        assert len(ds) == n and set(ds["condition"]) == {condition}
        assert set(ds["answer_type"]) == {"number"}
        for row, twin in zip(ds, other, strict=True):
            assert row["question_kind"] and row["solution"] == f"<answer> {row['label']} </answer>"
            assert {k: v for k, v in row.items() if k != "image_path"} == {
                k: v for k, v in twin.items() if k != "image_path"
            }
            assert Path(row["image_path"]).read_bytes() == Path(twin["image_path"]).read_bytes()
    test_b = load_split(first, "test_b")
    assert all(7 <= len(objects) <= 10 for objects in test_b["objects"])
    from vqa_r1.data.counting import CountingSpec

    other_seed = write_counting(
        tmp_path / "three", CountingSpec(splits={"train": ["A", 6]}, seed=1)
    )
    assert load_split(other_seed, "train")["objects"] != load_split(first, "train")["objects"]


def test_every_object_is_drawn_where_its_box_is(tmp_path):
    from PIL import Image

    from vqa_r1.data.counting import COLORS, draw, generate_scenes

    spec = small_spec()
    for scene in generate_scenes(20, 5, "B", spec):
        image = draw(scene, spec).convert("RGB")
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            centre = image.getpixel(((x0 + x1) // 2, (y0 + y1) // 2 + 2))
            assert centre == COLORS[o.color], (o, centre)
        assert isinstance(image, Image.Image)


def test_bad_counting_settings_are_refused():
    from vqa_r1.data.counting import Condition, CountingSpec

    with pytest.raises(ValueError, match="condition 'C'"):
        CountingSpec(splits={"train": ["C", 3]})
    with pytest.raises(ValueError, match="must fit"):
        CountingSpec(object_size=(30, 40))
    with pytest.raises(ValueError, match="pairing"):
        Condition("Z")


def test_stand_in_sft_target_reasons_then_answers(tmp_path):
    from vqa_r1.data.counting import CountingSpec, write_counting
    from vqa_r1.data.datasets import load_split, trainer_rows

    class Adapter:  # the FamilyAdapter interface trainer_rows reads
        thinking = False

        def messages(self, question, instruction=None, images=1):
            return [{"role": "user", "content": f"{question} {instruction}"}]

    folder = write_counting(tmp_path / "c", CountingSpec(splits={"train": ["A", 2]}))
    ds = load_split(folder, "train")
    rows = trainer_rows(ds, Adapter(), "sft").remove_columns("image")
    text = rows[0]["completion"][0]["content"][0]["text"]
    assert text == f"<think> {ds[0]['reasoning']} </think> <answer> {ds[0]['label']} </answer>"
    assert extract_answer(text, "number") == ds[0]["label"] == extract_answer(text, R1V)


def test_data_counting_command_writes_the_four_splits(tmp_path, capsys):
    from vqa_r1.cli import main
    from vqa_r1.data.datasets import load_split

    out = tmp_path / "counting"
    argv = ["data", "counting", "--out", str(out), "--train", "3", "--validation", "1",
            "--test", "2", "--test-b", "2", "--seed", "4"]  # fmt: skip
    assert main(argv) == 0
    assert set(load_split(out, "test_b")["condition"]) == {"B"}
    assert len(load_split(out, "train")) == 3
    capsys.readouterr()
    assert main(argv) == 0 and "nothing to do" in capsys.readouterr().out
    argv[argv.index("--seed") + 1] = "5"
    assert main(argv) == 2 and "other settings" in capsys.readouterr().err

"""Release-format readers: tiny folders written in each dataset's published layout are converted,
cached atomically, and fed to trainer_rows and the choice scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from vqa_r1.data import formats
from vqa_r1.data.datasets import load_split, trainer_rows
from vqa_r1.errors import UserError
from vqa_r1.eval.scoring import score_responses
from vqa_r1.models.adapters import get_adapter


def draw(path: Path, size=(32, 24), color=(200, 30, 30)) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path.name


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ----------------------------------------------------------------------------- VSR


def vsr_row(image: str, caption: str, label: int, relation: str) -> dict:
    return {
        "image": image,
        "image_link": f"http://images.cocodataset.org/train2017/{image}",
        "caption": caption,
        "label": label,
        "relation": relation,
        "annotator_id": 1,
        "vote_true_validator_id": "[2, 6]",
        "vote_false_validator_id": "[]",
        "reference_frame": None,
    }


@pytest.fixture
def vsr_release(tmp_path):
    data = tmp_path / "vsr" / "data"
    for name in ("000000050403.jpg", "000000401552.jpg"):
        draw(data / "images" / name)
    rows = [
        vsr_row("000000050403.jpg", "The teddy bear is in front of the person.", 1, "in front of"),
        vsr_row(
            "000000401552.jpg", "The umbrella is far away from the motorcycle.", 0, "far away from"
        ),
        vsr_row("000000401552.jpg", "The train contains the laptop.", 1, "contains"),
    ]
    for variant in ("random", "zeroshot"):
        write_jsonl(data / "splits" / variant / "train.jsonl", rows)
        write_jsonl(data / "splits" / variant / "dev.jsonl", rows[:2])
        write_jsonl(data / "splits" / variant / "test.jsonl", rows[1:])
    return data


def test_vsr_release_is_converted_with_dev_as_validation(vsr_release):
    ds = load_split(vsr_release, "validation")
    assert len(ds) == 2
    row = ds[0]
    assert row["caption"] == "The teddy bear is in front of the person."
    assert (row["label"], row["relation"]) == (1, "in front of")
    assert (row["subj"], row["obj"]) == ("teddy bear", "person")
    assert row["image_path"] == str(vsr_release / "images" / "000000050403.jpg")
    train = load_split(vsr_release, "train")
    assert (train[2]["subj"], train[2]["obj"]) == ("train", "laptop")
    assert ds[1]["label"] == 0
    with pytest.raises(UserError, match="no split 'dev'"):
        load_split(vsr_release, "dev")


def test_vsr_row_without_a_field_names_the_file_row_and_field(vsr_release, capsys):
    from vqa_r1.cli import main

    train = vsr_release / "splits" / "random" / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    del rows[1]["caption"]
    write_jsonl(train, rows)
    with pytest.raises(UserError, match=rf"{train}: row 2 has no 'caption'; every VSR row needs"):
        load_split(vsr_release, "train")
    assert main(["data", "show", str(vsr_release)]) == 2
    assert "row 2 has no 'caption'" in capsys.readouterr().err
    assert not (vsr_release / formats.CACHE_DIR).exists() or not any(
        (vsr_release / formats.CACHE_DIR).iterdir()
    )  # nothing half-converted is kept


def test_vsr_variant_folder_finds_images_two_levels_up(vsr_release):
    ds = load_split(vsr_release / "splits" / "zeroshot", "test")
    assert ds["caption"] == [
        "The umbrella is far away from the motorcycle.",
        "The train contains the laptop.",
    ]
    assert Path(ds[0]["image_path"]).is_file()


def test_conversion_is_cached_and_redone_when_the_release_changes(vsr_release, monkeypatch):
    load_split(vsr_release, "train")
    caches = list((vsr_release / formats.CACHE_DIR).iterdir())
    assert len(caches) == 1 and (caches[0] / "hf").is_dir()
    assert not [p for p in caches[0].parent.iterdir() if ".tmp-" in p.name]

    def fail(*a, **k):
        raise AssertionError("converted again")

    monkeypatch.setattr(formats, "convert", fail)
    assert len(load_split(vsr_release, "train")) == 3  # served from the cache
    monkeypatch.undo()
    write_jsonl(vsr_release / "splits" / "random" / "train.jsonl", [])
    assert len(load_split(vsr_release, "train")) == 0


def test_a_killed_conversion_leaves_no_cache(vsr_release, monkeypatch):
    """Killed after the rows are saved but before the report: no cache may be left to reuse."""

    def die(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(formats, "atomic_write_json", die)
    with pytest.raises(KeyboardInterrupt):
        load_split(vsr_release, "train")
    cache = vsr_release / formats.CACHE_DIR
    assert cache.is_dir() and not list(cache.iterdir())
    monkeypatch.undo()
    assert len(load_split(vsr_release, "train")) == 3


def test_missing_images_leave_no_cache_and_are_found_once_in_place(vsr_release):
    """A release converted before its images arrive: no cache is kept, the message counts
    distinct images and the rows that name the missing one (7 rows name 2 pictures, 2 of them
    the missing one; issue 30, item 10) and says where VSR's images come from."""
    image = vsr_release / "images" / "000000050403.jpg"
    image.unlink()
    with pytest.raises(UserError, match=r"1 of 2 distinct images \(2 of 7 rows\)") as err:
        load_split(vsr_release, "validation")
    assert "COCO" in str(err.value) and str(vsr_release / "images") in str(err.value)
    assert not list((vsr_release / formats.CACHE_DIR).glob("*/hf"))
    draw(image)  # put in place as VSR's README says: found without deleting anything by hand
    assert Path(load_split(vsr_release, "validation")[0]["image_path"]) == image


def test_images_moved_after_conversion_are_resolved_again(vsr_release):
    random = vsr_release / "splits" / "random"
    before = load_split(random, "train")[0]["image_path"]
    assert before.startswith(str(vsr_release / "images"))
    (vsr_release / "images").rename(random / "images")  # a place looked in first
    after = load_split(random, "train")[0]["image_path"]
    assert after.startswith(str(random / "images")) and Path(after).is_file()


@pytest.mark.parametrize("handed", ["", "data", "data/splits"])
def test_vsr_repository_root_says_which_split_it_read(vsr_release, handed, capsys):
    root = vsr_release.parent  # the repository: data/splits/{random,zeroshot}
    ds = load_split(root / handed, "test")
    assert len(ds) == 2 and Path(ds[0]["image_path"]).is_file()
    err = capsys.readouterr().err
    assert "using the random split" in err
    assert f"pass {vsr_release / 'splits' / 'zeroshot'} instead" in err


@pytest.mark.parametrize(
    ("bad", "shown"), [(2, "2 (1 rows)"), ("yes", "'yes' (1 rows)"), ("True", "'True' (1 rows)")]
)
def test_vsr_labels_other_than_0_1_are_an_error_naming_them(vsr_release, bad, shown):
    path = vsr_release / "splits" / "random" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["label"] = bad
    write_jsonl(path, rows)
    with pytest.raises(UserError, match="column 'label'") as err:
        load_split(vsr_release, "train")
    assert str(path) in str(err.value) and shown in str(err.value)
    assert "Accepted: 0/1 integers or booleans" in str(err.value)


def test_saved_dataset_labels_are_checked_at_load(tmp_path):
    from datasets import Dataset, DatasetDict

    draw(tmp_path / "img.png")
    row = {"image_path": str(tmp_path / "img.png"), "caption": "a", "relation": "on"}
    ok = Dataset.from_list([{**row, "label": True}, {**row, "label": False}])
    DatasetDict({"train": ok}).save_to_disk(str(tmp_path / "bools"))
    assert load_split(tmp_path / "bools", "train")["label"] == [True, False]
    two = Dataset.from_list([{**row, "label": 0}, {**row, "label": 2}, {**row, "label": 2}])
    DatasetDict({"train": two}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(UserError, match=r"column 'label' .*: 2 \(2 rows\)"):
        load_split(tmp_path / "two", "train")


def test_a_huge_image_is_reported_as_too_large_not_missing(vsr_release, monkeypatch):
    from PIL import Image as PILImage

    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 100)  # 32x24 is beyond twice this
    with pytest.raises(UserError, match="larger than PIL's limit of 100 pixels") as err:
        load_split(vsr_release, "train")
    assert "missing" not in str(err.value)


# ----------------------------------------------------------------------------- Rel3D


def rel3d_sample(rgb: str, subject: str, predicate: str, obj: str, label: bool) -> dict:
    box = {"top": 1, "left": 2, "height": 5, "width": 6}
    return {
        "rgb": rgb,
        "depth": rgb.replace(".png", ".tiff"),
        "camera_info": {},
        "width": 32,
        "height": 24,
        "subject": {"name": subject, "bbox": box},
        "object": {"name": obj, "bbox": box},
        "predicate": predicate,
        "label": label,
        "transform_vector": {},
    }


def test_rel3d_split_file_becomes_claims(tmp_path):
    root = tmp_path / "Rel3D"
    draw(root / "data" / "20200223" / "a.png")
    draw(root / "data" / "20200223" / "b.png")
    split = {
        "train": [rel3d_sample("data/20200223/a.png", "cup", "on", "table", True)],
        "valid": [rel3d_sample("data/20200223/b.png", "chair", "in front of", "sofa", False)],
        "test": [rel3d_sample("data/20200223/a.png", "lamp", "under", "desk", False)],
        "predicates": ["on", "in front of", "under"],
        "objects": ["cup", "table", "chair", "sofa", "lamp", "desk"],
    }
    (root / "data" / "c_0.9_c_0.1.json").write_text(json.dumps(split))
    (root / "data" / "nc_0.4_nc_0.1.json").write_text(json.dumps({"train": [], "test": []}))
    ds = load_split(root / "data", "train")  # rgb paths are relative to the repository root
    row = ds[0]
    assert row["caption"] == "cup on table?"
    assert row["problem"] == "Is the following statement true: cup on table?"
    assert (row["subject"], row["predicate"], row["object"]) == ("cup", "on", "table")
    assert (row["relation"], row["subj"], row["obj"], row["label"]) == ("on", "cup", "table", 1)
    assert row["image_path"] == str(root / "data" / "20200223" / "a.png")
    val = load_split(root, "validation")
    assert (val[0]["caption"], val[0]["label"]) == ("chair in front of sofa?", 0)


def test_rel3d_without_renders_names_data_raw_not_coco(tmp_path):
    from release_folders import rel3d_release

    root = rel3d_release(tmp_path / "Rel3D", n_per_relation=4, images=False)
    with pytest.raises(UserError, match=r"5 of 5 distinct images \(56 of 56 rows\)") as err:
        load_split(root, "train")
    assert "download.sh data_raw" in str(err.value) and "COCO" not in str(err.value)
    assert not list((root / formats.CACHE_DIR).glob("*/hf"))
    rel3d_release(root, n_per_relation=4)  # the renders arrive
    assert len(load_split(root, "train")) == 16


def test_spatialsense_missing_images_name_its_archive(tmp_path):
    from release_folders import spatialsense_release

    root = spatialsense_release(tmp_path / "SpatialSense", n_per_relation=2, images=False)
    with pytest.raises(UserError, match="images.tar.gz") as err:
        load_split(root, "train")
    assert "COCO" not in str(err.value)


def test_spatialsense_string_labels_are_an_error(tmp_path):
    from release_folders import spatialsense_release

    root = spatialsense_release(tmp_path / "SpatialSense", n_per_relation=2)
    data = json.loads((root / "annotations.json").read_text())
    data[0]["annotations"][0]["label"] = "False"  # bool("False") would read as True
    (root / "annotations.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"column 'label' .*'False' \(1 rows\)"):
        load_split(root, "train")


# ----------------------------------------------------------------------------- SpatialSense


def test_spatialsense_annotations_become_claims(tmp_path):
    root = tmp_path / "SpatialSense"
    draw(root / "images" / "flickr" / "5704634119_8b8ccf3229.jpg")
    draw(root / "images" / "nyu" / "000123.jpg")

    def rel(pred, subj, obj, label):
        part = {"x": 1, "y": 2, "bbox": [0, 10, 0, 10]}
        return {
            "_id": f"{subj}-{pred}",
            "predicate": pred,
            "subject": {"name": subj, **part},
            "object": {"name": obj, **part},
            "label": label,
        }

    images = [
        {
            "url": "https://farm4.staticflickr.com/3543/5704634119_8b8ccf3229.jpg",
            "nsid": "10392797@N03",
            "height": 24,
            "width": 32,
            "split": "train",
            "annotations": [
                rel("on", "cat", "ground", True),
                rel("to the left of", "cat", "mirror", False),
            ],
        },
        {
            "url": "nyu/000123.jpg",
            "height": 24,
            "width": 32,
            "split": "valid",
            "annotations": [rel("under", "bag", "table", True)],
        },
    ]
    (root / "annotations.json").write_text(json.dumps(images))
    train = load_split(root, "train")
    assert train["caption"] == ["cat on ground?", "cat to the left of mirror?"]
    assert train["label"] == [1, 0]
    assert train["relation"] == ["on", "to the left of"]
    val = load_split(root, "validation")
    assert val[0]["image_path"] == str(root / "images" / "nyu" / "000123.jpg")
    with pytest.raises(UserError, match="no split 'test'"):
        load_split(root, "test")


# ----------------------------------------------------------------------------- DrivingVQA


def dvqa_sample(image: str, size, **extra) -> dict:
    sample = {
        "img_filename": image,
        "img_size": list(size) if size else None,
        "exam_type": "car",
        "has_multiple_questions": False,
        "questions": "Can I overtake the truck?",
        "possible_answers": {"A": "Yes", "B": "No", "C": "Only after the sign"},
        "true_answers": ["C", "B"],
        "explanation": "The **stop sign** forbids it.",
        "interleaved_explanation": "The **stop sign** [10, 20, 30, 40] forbids it; the truck [1, 2, 3.5, 4] is slow.",
        "relevant_entities": [{"stop sign": [10, 20, 30, 40]}, {"truck": [1, 2, 3.5, 4]}],
    }
    sample.update(extra)
    return sample


@pytest.fixture
def dvqa_release(tmp_path):
    root = tmp_path / "DrivingVQA"
    draw(root / "images" / "1.jpg")
    draw(root / "images" / "2.jpg")
    draw(root / "images" / "big.jpg", size=(70, 60))  # 4200 px, no img_size: measured
    train = {
        "1": dvqa_sample("1.jpg", (32, 24)),
        "2": dvqa_sample(
            "2.jpg",
            (32, 24),
            has_multiple_questions=True,
            questions=["Q1?", "Q2?"],
            possible_answers={"A": "a", "B": "b", "C": "c", "D": "d"},
        ),
        "3": dvqa_sample("2.jpg", (4000, 3000)),  # above the default 1280*1280
        "4": dvqa_sample("big.jpg", None),
        "5": dvqa_sample(
            "2.jpg",
            (32, 24),
            interleaved_explanation="",
            explanation="Plain reasoning.",
            true_answers=["A"],
        ),
    }
    (root / "train.json").write_text(json.dumps(train))
    (root / "test.json").write_text(json.dumps({"9": dvqa_sample("1.jpg", (32, 24))}))
    return root


def test_the_grid_stand_in_writes_nine_learnable_boxes_and_a_validation_split(tmp_path):
    """Issue 31, item 6: the drivingvqa stand-in's grid layout puts three objects in a 3 x 3 grid,
    one per row and column (nine boxes, each following from the layout the tiny models read;
    `free` places them anywhere), and its validation split is read like the release's."""
    from vqa_r1.data.drivingvqa_standin import write_standin

    write_standin(tmp_path / "grid", train=30, test=10, validation=12, layout="grid")
    ds = {split: load_split(tmp_path / "grid", split) for split in ("train", "validation", "test")}
    assert {split: len(rows) for split, rows in ds.items()} == {
        "train": 30, "validation": 12, "test": 10
    }  # fmt: skip
    boxes = {tuple(b) for rows in ds.values() for r in rows for b in r["gt_boxes"]}
    assert len(boxes) <= 9 and all(x1 - x0 == 29 for x0, _, x1, _ in boxes)  # 37-px cells
    for row in ds["train"]:  # one object per row and per column: a box is a rank in x and y
        assert len({b[0] for b in row["gt_boxes"]}) == len({b[1] for b in row["gt_boxes"]}) == 3
    write_standin(tmp_path / "free", train=30, test=10)
    assert not (tmp_path / "free" / "validation.json").exists()
    free = {tuple(b) for r in load_split(tmp_path / "free", "train") for b in r["gt_boxes"]}
    assert len(free) > 30
    with pytest.raises(ValueError, match="layout must be one of free, grid"):
        write_standin(tmp_path / "bad", layout="rows")


def test_drivingvqa_rows_and_dropped_counts(dvqa_release, capsys):
    ds = load_split(dvqa_release, "train", max_pixels=4000)
    assert len(ds) == 3  # 1, 2 (two questions, kept as the authors keep them) and 5
    row = ds[0]
    assert row["problem"].startswith("Unless stated otherwise, you are driving a car in France.\n")
    assert "Can I overtake the truck?\n(A) Yes\n(B) No\n(C) Only after the sign" in row["problem"]
    assert row["caption"] == row["problem"]
    assert row["solution"] == "<answer> B, C </answer>"
    assert row["label"] == "B, C"
    assert row["reasoning"] == (
        "The [10, 20, 40, 60] stop sign forbids it; the [1, 2, 4.5, 6] truck is slow."
    )
    assert row["gt_boxes"] == [[10.0, 20.0, 40.0, 60.0], [1.0, 2.0, 4.5, 6.0]]
    assert row["gt_box_labels"] == ["stop sign", "truck"]
    assert (row["answer_type"], row["relation"]) == ("choice", "drivingvqa")
    assert (
        ds[2]["reasoning"]
        == "Relevant: [10, 20, 40, 60] stop sign; [1, 2, 4.5, 6] truck. Plain reasoning."
    )
    # two questions: one prompt, A and B under the first, the rest under the second, one letter set
    two = ds[1]
    assert "Q1?\n(A) a\n(B) b\nQ2?\n(C) c\n(D) d\n" in two["problem"]
    assert two["solution"] == "<answer> B, C </answer>"

    [cache] = [p for p in (dvqa_release / formats.CACHE_DIR).iterdir() if (p / "hf").exists()]
    report = json.loads((cache / formats.REPORT).read_text())
    assert report["dropped"]["train"]["too_many_pixels"] == 2
    assert report["dropped"]["train"]["multiple_questions"] == 0
    assert report["kept"] == {"train": 3, "test": 1} and report["max_pixels"] == 4000
    assert report["two_questions_kept"]["train"] == 1
    err = capsys.readouterr().err  # every drop printed, not only written to the report
    assert "dropped train item 3 (2.jpg): 12000000 pixels > data.drivingvqa_max_pixels=4000" in err
    assert "dropped train item 4 (big.jpg): 4200 pixels" in err

    default = load_split(dvqa_release, "train")  # 1280*1280: only item 3 is too large
    assert len(default) == 4
    assert len(list((dvqa_release / formats.CACHE_DIR).glob("drivingvqa-*"))) == 2


def test_drivingvqa_settings_through_the_launcher(dvqa_release, tmp_path, capsys):
    from vqa_r1.cli.launch import main as launch_main

    argv = [
        "evaluate", "--model", "tiny-qwen2.5-vl", "--dataset", str(dvqa_release), "--dry-run",
        "--output-dir", str(tmp_path / "ev"), "--set", "eval.split=train",
        "--set", "data.drivingvqa_multiple_questions=drop",
        "--set", "data.drivingvqa_max_pixels=5000",
    ]  # fmt: skip
    assert launch_main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "dropped train item 2 (2.jpg): two questions" in err
    assert "item 4" not in err  # 4200 pixels: under 5000
    [report] = [
        json.loads(p.read_text())
        for p in (dvqa_release / formats.CACHE_DIR).glob("*/" + formats.REPORT)
    ]
    assert report["max_pixels"] == 5000 and report["multiple_questions"] == "drop"
    assert report["dropped"]["train"] == {
        "multiple_questions": 1,
        "too_many_pixels": 1,
        "unreadable_questions": 0,
    }


def test_drivingvqa_trainer_rows(dvqa_release):
    ds = load_split(dvqa_release, "test")
    adapter = get_adapter("qwen2_5_vl")
    sft = trainer_rows(ds, adapter, "sft", instruction="")
    prompt = sft[0]["prompt"][0]["content"][1]["text"]
    assert prompt == ds[0]["problem"].strip()
    assert sft[0]["completion"][0]["content"][0]["text"] == (
        "<think> The [10, 20, 40, 60] stop sign forbids it; the [1, 2, 4.5, 6] truck is slow. "
        "</think> <answer> B, C </answer>"
    )
    plain = trainer_rows(ds, adapter, "sft", with_reasoning=False)
    assert plain[0]["completion"][0]["content"][0]["text"] == "<answer> B, C </answer>"
    grpo = trainer_rows(ds, adapter, "grpo")
    row = grpo[0]
    assert row["solution"] == "<answer> B, C </answer>"
    assert row["gt_boxes"] == [[10.0, 20.0, 40.0, 60.0], [1.0, 2.0, 4.5, 6.0]]
    assert row["gt_box_labels"] == ["stop sign", "truck"]
    assert row["answer_type"] == "choice"
    assert "completion" not in grpo.column_names
    assert row["reasoning"] == ds[0]["reasoning"]  # the reasoning_steps reward's reference
    assert row["image"].size == (32, 24)


def test_claim_releases_train_without_an_unknown_rationale(tmp_path):
    root = tmp_path / "SpatialSense"
    draw(root / "images" / "flickr" / "x.jpg")
    rel = {
        "_id": "1",
        "predicate": "in",
        "label": False,
        "subject": {"name": "cat", "bbox": [0, 1, 0, 1]},
        "object": {"name": "box", "bbox": [0, 1, 0, 1]},
    }
    (root / "annotations.json").write_text(
        json.dumps(
            [
                {
                    "url": "http://f/x.jpg",
                    "height": 1,
                    "width": 1,
                    "split": "train",
                    "annotations": [rel],
                }
            ]
        )
    )
    ds = load_split(root, "train")
    adapter = get_adapter("qwen2_5_vl")
    sft = trainer_rows(ds, adapter, "sft")
    assert sft[0]["completion"][0]["content"][0]["text"] == "<answer> False </answer>"
    assert (
        "Is the following statement true: cat in box?" in sft[0]["prompt"][0]["content"][1]["text"]
    )
    assert trainer_rows(ds, adapter, "grpo")[0]["solution"] == "<answer> False </answer>"


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("make", [False, True])
def test_missing_or_unrecognised_dataset_names_formats_sources_and_layouts(tmp_path, make):
    folder = tmp_path / "nothing-here"
    if make:
        folder.mkdir()
        (folder / "notes.txt").write_text("hello")
    with pytest.raises(UserError) as err:
        load_split(folder, "train")
    text = str(err.value)
    assert str(folder) in text
    assert ("does not exist" in text) != make
    for needle in (
        "save_to_disk",
        "vsr",
        "dev.jsonl",
        "github.com/cambridgeltl/visual-spatial-reasoning",
        "splits/random",
        "rel3d",
        "c_0.9_c_0.1.json",
        "github.com/princeton-vl/Rel3D",
        "spatialsense",
        "annotations.json",
        "github.com/princeton-vl/SpatialSense",
        "images/flickr",
        "drivingvqa",
        "train.json",
        "huggingface.co/datasets/EPFL-DrivingVQA/DrivingVQA",
        "<folder>/images/<img_filename>",
    ):
        assert needle in text, needle


# ----------------------------------------------------------------------------- scoring


def choice_record(truth: str, predicted: str) -> dict:
    return {"true_response": truth, "predicted_response": predicted, "answer_type": "choice"}


def test_choice_scoring_compares_letter_sets():
    records = [
        choice_record("<answer> A, B </answer>", "<think> x </think> <answer> B and A </answer>"),
        choice_record("<answer> A, B </answer>", "<think> x </think> <answer> A </answer>"),
        choice_record("<answer> C </answer>", "<answer> (C) </answer>"),
        choice_record("<answer> C </answer>", "no idea"),
    ]
    scores = score_responses(records, "study", ["drivingvqa", "drivingvqa", "x", "x"])
    assert (scores["n"], scores["correct"], scores["accuracy"]) == (4, 2, 0.5)
    assert scores["accuracy_ci_95"][0] < 0.5 < scores["accuracy_ci_95"][1]
    # classes "A,B" (2 items, recall 1/2, precision 1) and "C" (recall 1/2, precision 1)
    assert scores["f1_weighted"] == pytest.approx(2 / 3)
    assert scores["per_relation"]["x"]["accuracy"] == 0.5
    assert scores["format_rate"] == 0.5
    assert scores["answer_type"] == "choice" and scores["unparsed"] == 1


def test_true_false_records_are_scored_as_before():
    records = [
        {"true_response": "True", "predicted_response": "<answer> True </answer>"},
        {"true_response": "False", "predicted_response": "<answer> A </answer>"},
    ]
    scores = score_responses(records)
    assert (scores["correct"], scores["unparsed"]) == (1, 1)
    assert "answer_type" not in scores


def test_evaluate_scores_a_choice_dataset(dvqa_release, tmp_path, monkeypatch):
    """evaluate's wiring without a model: a fake generator answers every question with "B, C"."""
    from types import SimpleNamespace

    import vqa_r1.eval.evaluate as ev
    from vqa_r1.recipes import load_config

    asked = []

    class FakeGenerator:
        cache_decision = "off"

        def __init__(self, *args, **kwargs):
            pass

        def generate(self, images, questions):
            asked.extend(questions)
            return ["<think> hmm </think> <answer> C, B </answer>" for _ in questions]

    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    config = load_config(
        "evaluate", "tiny-qwen2.5-vl", None, [f"data.dataset={dvqa_release}", "eval.split=train"]
    )
    loaded = SimpleNamespace(model=SimpleNamespace(eval=lambda: None))
    scores = ev.evaluate(config, tmp_path / "out", loaded=loaded, progress=False)
    ds = load_split(dvqa_release, "train")
    assert asked == list(ds["problem"])
    assert scores["n"] == 4 and scores["correct"] == 3  # item 5's answer is A (2: two questions)
    assert scores["per_relation"]["drivingvqa"]["n"] == 4
    saved = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert saved["accuracy"] == pytest.approx(3 / 4)
    lines = [
        json.loads(x) for x in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    ]
    assert lines[0]["label"] == "B, C" and lines[0]["choices"] == "B,C"
    responses = json.loads((tmp_path / "out" / "generated_responses.json").read_text())
    assert responses[0]["answer_type"] == "choice"
    assert score_responses(responses)["correct"] == 3  # `vqa-r1 score` rescores them alike

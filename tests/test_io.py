"""vqa_r1.io: atomic writes and the one JSONL reader."""

import json
import os
import stat

import pytest
import torch
from safetensors.torch import save_file

from vqa_r1.errors import UserError
from vqa_r1.io import (
    atomic_dir,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
)


def test_read_jsonl_skips_blank_lines_and_keeps_order(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n\n   \n{"step": 2, "text": "a\u2028b"}\r\n{"step": 3}', "utf-8")
    assert read_jsonl(path) == [{"step": 1}, {"step": 2, "text": "a\u2028b"}, {"step": 3}]
    (tmp_path / "empty.jsonl").write_text("")
    assert read_jsonl(tmp_path / "empty.jsonl") == []


def test_read_jsonl_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{oops\n{"a": 3}\n')
    with pytest.raises(UserError, match=r"bad\.jsonl:2: not valid JSON"):
        read_jsonl(bad)
    scalar = tmp_path / "scalar.jsonl"
    scalar.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(UserError, match=r"scalar\.jsonl:2: expected a JSON object, got list"):
        read_jsonl(scalar)
    with pytest.raises(UserError, match="missing.jsonl: file not found"):
        read_jsonl(tmp_path / "missing.jsonl")
    assert read_jsonl(tmp_path / "missing.jsonl", missing_ok=True) == []


def test_read_jsonl_tolerates_only_an_unterminated_last_line_and_only_when_asked(tmp_path):
    path = tmp_path / "appending.jsonl"
    # a job is mid-way through appending its third record, cut inside a two-byte character
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3, "note": "caf' + "é".encode()[:1])
    with pytest.raises(UserError, match=r"appending\.jsonl:3"):
        read_jsonl(path)
    assert read_jsonl(path, partial_last_line=True) == [{"step": 1}, {"step": 2}]
    # a complete last line without its newline yet is a record, not a partial one
    path.write_text('{"step": 1}\n{"step": 2}')
    assert read_jsonl(path, partial_last_line=True) == [{"step": 1}, {"step": 2}]
    # a bad line that is followed by a newline was not being written: still an error
    path.write_text('{"step": 1}\n{"step": 2\n')
    with pytest.raises(UserError, match=r"appending\.jsonl:2"):
        read_jsonl(path, partial_last_line=True)


@pytest.mark.parametrize("fsync", [True, False])
def test_atomic_write_text_replaces_and_leaves_no_temporary_file(tmp_path, fsync):
    path = tmp_path / "sub" / "entry.json"
    atomic_write_text(path, "first", fsync=fsync)
    atomic_write_text(path, "second", fsync=fsync)
    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["entry.json"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "entry.json"
    atomic_write_json(path, {"a": 1})
    with pytest.raises(TypeError):  # the temporary file is open when the write fails
        atomic_write_bytes(path, object())  # type: ignore[arg-type]
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["entry.json"]


def test_atomic_dir_keep_existing_leaves_the_first_complete_build_in_place(tmp_path):
    """Two ranks build the same tiny model at once: the one that finishes second must not swap
    the folder the first is already loading from."""
    target = tmp_path / "tiny" / "qwen"
    with atomic_dir(target, keep_existing=True) as first:
        with atomic_dir(target, keep_existing=True) as second:
            (second / "config.json").write_text("second")
        inode = target.stat().st_ino
        with open(target / "config.json") as reader:  # a rank loading the finished build
            (first / "config.json").write_text("first")
    assert target.stat().st_ino == inode and (target / "config.json").read_text() == "second"
    assert reader.closed and sorted(p.name for p in target.parent.iterdir()) == ["qwen"]
    # without keep_existing a later build replaces the folder (a re-conversion with new content)
    with atomic_dir(target) as third:
        (third / "config.json").write_text("third")
    assert target.stat().st_ino != inode and (target / "config.json").read_text() == "third"
    assert sorted(p.name for p in target.parent.iterdir()) == ["qwen"]


@pytest.fixture(params=[0o022, 0o002], ids=["umask022", "umask002"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_written_files_and_folders_follow_the_umask(tmp_path, umask):
    """Colleagues in the group read a shared run: temporary files (0600) and folders (0700) get
    the mode any other file or folder made under this umask would get."""
    atomic_write_text(tmp_path / "a.txt", "x")
    atomic_write_json(tmp_path / "a.json", {})
    atomic_write_text(tmp_path / "a.txt", "replaced")
    with atomic_dir(tmp_path / "built") as tmp:
        (tmp / "inside.txt").write_text("y")
    with atomic_dir(tmp_path / "built") as tmp:  # a rebuild replaces the folder
        (tmp / "inside.txt").write_text("z")
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # written 0600
        (tmp / "sub").mkdir()
    for name in ("a.txt", "a.json", "built/inside.txt", "built/model.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
    for name in ("built", "built/sub"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o777 & ~umask, name
